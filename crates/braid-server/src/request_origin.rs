//! Where a generation request came from, as far as following it goes: the endpoint, the
//! caller's (or a router's) `x-request-id`, and a W3C `traceparent`. The HTTP layers, the
//! routes and the generation each read these, so they live below all three.

use crate::request_traces::RequestTraces;
use axum::http::{HeaderMap, HeaderName};

/// The header a request's id travels in, both ways (vLLM's, vllm-router's and most proxies').
pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The request's id, as the layers above set it (the caller's, or a new UUID). A caller's id
/// is its own text: it is logged quoted, and not past 128 bytes.
pub fn request_id(headers: &HeaderMap) -> &str {
    let id = headers
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    &id[..id.len().min(128)] // visible ASCII: `to_str` allows nothing else
}

/// Where a generation request came from: the endpoint, and what its caller sent to follow it
/// (`x-request-id`, a W3C `traceparent`).
pub struct RequestOrigin {
    pub endpoint: &'static str,
    pub request_id: String,
    pub trace_parent: opentelemetry::Context,
}

impl RequestOrigin {
    pub fn of(endpoint: &'static str, headers: &HeaderMap) -> Self {
        Self {
            endpoint,
            request_id: request_id(headers).to_string(),
            trace_parent: RequestTraces::parent(headers),
        }
    }
}
