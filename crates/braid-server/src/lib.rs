//! braid's server: the HTTP front end of the engine (braid-engine).
//!
//! `serve(ServeArgs)` is the whole server (`braid serve`); `start` returns a running
//! `Server` for tests and embedding. Request flow: `routes/` → `validation` →
//! `generation` (engine events → text, stop strings, deadline) → JSON or `sse`. The engine's
//! reports become metrics and the dashboard's feed in `engine_observer`.

pub mod anthropic_types;
pub mod app;
pub mod args;
pub mod auth;
pub mod connections;
pub mod engine_observer;
pub mod error;
pub mod field_bounds;
pub mod generation;
pub mod json_body;
pub mod kv_events;
pub mod logprobs;
pub mod metrics;
pub mod openai_types;
pub mod openapi;
pub mod request_fields;
pub mod request_origin;
pub mod request_traces;
pub mod response_store;
pub mod responses_input;
pub mod responses_types;
pub mod routes;
pub mod server;
pub mod sse;
pub mod state;
pub mod stop_strings;
pub mod tools;
pub mod trace_failures;
pub mod validation;
pub mod write_timeout;

pub use args::ServeArgs;
/// The engine, under the name the server's modules use for it.
pub use braid_engine as engine;
pub use server::{serve, start, Server};
