//! Answers for requests no route takes: an unknown path (404) or a known path with the wrong
//! method (405), both as OpenAI error JSON so clients show the reason.

use crate::error::ApiError;
use axum::http::{Method, Uri};

pub async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::route_not_found(method.as_str(), uri.path())
}

pub async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::method_not_allowed(method.as_str(), uri.path())
}
