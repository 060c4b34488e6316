//! braid's server: the HTTP front end and the engine thread behind it.

pub mod engine;
pub mod engine_handle;
pub mod metrics;
