//! The router: which path goes to which handler, and the layers around all of them.
//!
//! Layers, outermost first: the request id (the client's or a router's `x-request-id`, or a
//! new UUID; returned on the response); tracing of every HTTP request (an `http` span with
//! the method, the path, never the query string, which may hold `api_key`, and the request
//! id, so every log line of a request names it, the engine's too); CORS, only with `--cors-origin` (outside the key check,
//! so browsers' preflight requests and error answers get their headers); the error middleware
//! (counts error responses in `braid_request_errors_total`, logs why, and rewrites any
//! plain-text error a layer produced into OpenAI's error JSON); the API key check (`auth`);
//! a timeout on reading the request body; the body size limit (enforced by `ApiJson`, which
//! answers 413 in JSON).

use crate::auth::require_key;
use crate::error::{ApiError, ErrorMessage};
use crate::openapi::openapi_json;
use crate::request_origin::{request_id, REQUEST_ID};
use crate::routes::{
    chat, completions, dashboard, embeddings, fallback, health, messages, metrics_route, models,
    render, responses, tokenize, tokenizer_info, worker,
};
use crate::state::AppState;
use crate::trace_failures::UnplannedServerErrors;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderName, HeaderValue, Method};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use std::time::Duration;
use tower_http::classify::SharedClassifier;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::timeout::RequestBodyTimeoutLayer;
use tower_http::trace::{DefaultOnFailure, TraceLayer};

pub fn router(state: AppState, body_read_timeout: Duration) -> Router {
    let cors = cors_layer(&state.cors_origins);
    let routes = Router::new()
        .route("/v1/completions", post(completions::completions))
        .route("/v1/embeddings", post(embeddings::embeddings))
        .route("/v1/chat/completions", post(chat::chat_completions))
        .route("/v1/responses", post(responses::create))
        .route(
            "/v1/responses/{id}",
            get(responses::retrieve).delete(responses::delete),
        )
        .route("/v1/messages", post(messages::messages))
        .route("/v1/messages/count_tokens", post(messages::count_tokens))
        .route("/v1/completions/render", post(render::render_completion))
        .route("/v1/chat/completions/render", post(render::render_chat))
        .route("/v1/models", get(models::list_models))
        .route("/v1/models/{id}", get(models::get_model))
        .route("/tokenize", post(tokenize::tokenize))
        .route("/detokenize", post(tokenize::detokenize))
        .route("/tokenizer_info", get(tokenizer_info::tokenizer_info))
        .route("/health", get(health::health))
        .route("/health_generate", get(worker::health_generate))
        .route("/get_load", get(worker::get_load))
        .route("/get_server_info", get(worker::get_server_info))
        .route("/get_model_info", get(worker::get_model_info))
        .route("/flush_cache", post(worker::flush_cache))
        .route("/kv_event_sources", get(worker::kv_event_sources))
        .route("/metrics", get(metrics_route::metrics))
        .route("/dashboard", get(dashboard::dashboard))
        .route("/debug/steps", get(dashboard::steps))
        .route("/openapi.json", get(openapi_json))
        .fallback(fallback::not_found)
        .method_not_allowed_fallback(fallback::method_not_allowed)
        .layer(DefaultBodyLimit::max(state.max_body_bytes))
        .layer(RequestBodyTimeoutLayer::new(body_read_timeout))
        .layer(middleware::from_fn_with_state(
            state.auth.clone(),
            require_key,
        ))
        .layer(middleware::from_fn_with_state(state.clone(), errors));
    let routes = match cors {
        Some(cors) => routes.layer(cors),
        None => routes,
    };
    routes
        .layer(
            TraceLayer::new(SharedClassifier::new(UnplannedServerErrors))
                .make_span_with(|req: &Request| {
                    // The path only: a query string may carry `api_key`.
                    let id = request_id(req.headers());
                    tracing::info_span!("http", method = %req.method(), path = req.uri().path(), request_id = id)
                })
                // An engine failure logs its own error line: a 5xx here is a warning, not
                // an error (and a 503 while loading or draining is none: `trace_failures`).
                .on_failure(DefaultOnFailure::new().level(tracing::Level::WARN)),
        )
        .layer(PropagateRequestIdLayer::new(REQUEST_ID))
        .layer(SetRequestIdLayer::new(REQUEST_ID, MakeRequestUuid))
        .with_state(state)
}

/// CORS for the given origins (`*`: any); None when there are none (no CORS headers at all).
fn cors_layer(origins: &[String]) -> Option<CorsLayer> {
    if origins.is_empty() {
        return None;
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(
            origins
                .iter()
                .filter_map(|o| HeaderValue::from_str(o).ok())
                .collect::<Vec<_>>(),
        )
    };
    Some(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([Method::GET, Method::POST, Method::DELETE])
            .allow_headers([
                header::AUTHORIZATION,
                header::CONTENT_TYPE,
                HeaderName::from_static("x-api-key"),
                HeaderName::from_static("anthropic-version"),
                HeaderName::from_static("anthropic-beta"),
            ])
            .expose_headers([header::RETRY_AFTER])
            .max_age(Duration::from_secs(600)),
    )
}

fn is_json(resp: &Response) -> bool {
    resp.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/json"))
}

/// Counts and logs every error response, and makes sure each one is OpenAI error JSON.
async fn errors(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let resp = next.run(req).await;
    let status = resp.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return resp;
    }
    let (resp, message) = match resp.extensions().get::<ErrorMessage>() {
        Some(m) => {
            let message = m.0.clone();
            (resp, message)
        }
        // A JSON answer that is not an error of ours (/health's 503): leave it, do not count it.
        None if is_json(&resp) => return resp,
        None => {
            let body = axum::body::to_bytes(resp.into_body(), 4096)
                .await
                .unwrap_or_default();
            let text = String::from_utf8_lossy(&body).trim().to_string();
            let message = if text.is_empty() {
                status.canonical_reason().unwrap_or("error").to_string()
            } else {
                text
            };
            let kind = if status.is_server_error() {
                "server_error"
            } else {
                "invalid_request_error"
            };
            (
                ApiError::new(status, kind, message.clone()).into_response(),
                message,
            )
        }
    };
    state
        .metrics
        .request_errors_total
        .with_label_values(&[status.as_str()])
        .inc();
    tracing::info!(%method, path, status = status.as_u16(), error = %message, "request rejected");
    if path.starts_with("/v1/messages") {
        return anthropic_error(resp, message);
    }
    resp
}

/// An error of the Messages routes in Anthropic's shape (the `anthropic` SDK reads its
/// `error.type`), its headers (`Retry-After`, `WWW-Authenticate`) kept.
fn anthropic_error(resp: Response, message: String) -> Response {
    let (mut parts, _) = resp.into_parts();
    let body = crate::anthropic_types::ErrorBody::of_status(parts.status.as_u16(), message);
    let bytes = serde_json::to_vec(&body).unwrap_or_default();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, axum::body::Body::from(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::ServeArgs;
    use crate::metrics::Metrics;
    use axum::body::Body;
    use axum::http::StatusCode;
    use std::sync::Arc;
    use tower::ServiceExt;

    async fn call(
        app: &Router,
        method: &str,
        path: &str,
        body: &str,
    ) -> (StatusCode, axum::http::HeaderMap, serde_json::Value) {
        let req = axum::http::Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .unwrap();
        let resp = app.clone().oneshot(req).await.unwrap();
        let (parts, body) = resp.into_parts();
        let bytes = axum::body::to_bytes(body, 1 << 20).await.unwrap();
        (
            parts.status,
            parts.headers,
            serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
        )
    }

    #[tokio::test]
    async fn while_loading_requests_get_503_with_retry_after() {
        let state = AppState::new(&ServeArgs::with_model("m.gguf"), Arc::new(Metrics::new()));
        let app = router(state, Duration::from_secs(5));
        let (status, headers, body) = call(&app, "GET", "/health", "").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body["status"], "loading");
        assert!(headers.contains_key(header::RETRY_AFTER));
        let (status, headers, body) =
            call(&app, "POST", "/v1/completions", r#"{"prompt":"a"}"#).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body["error"]["code"], "loading");
        assert_eq!(headers[header::RETRY_AFTER], "1");
        assert_eq!(
            call(&app, "GET", "/v1/models", "").await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(call(&app, "GET", "/metrics", "").await.0, StatusCode::OK);
    }

    #[tokio::test]
    async fn loading_answers_are_marked_unavailable_by_design() {
        use crate::trace_failures::UnavailableByDesign;
        let state = AppState::new(&ServeArgs::with_model("m.gguf"), Arc::new(Metrics::new()));
        let app = router(state, Duration::from_secs(5));
        for (method, path) in [("GET", "/health"), ("POST", "/v1/completions")] {
            let req = axum::http::Request::builder()
                .method(method)
                .uri(path)
                .header("content-type", "application/json")
                .body(Body::from(r#"{"prompt":"a"}"#))
                .unwrap();
            let resp = app.clone().oneshot(req).await.unwrap();
            assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
            assert!(resp.extensions().get::<UnavailableByDesign>().is_some());
        }
        let fault = ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "service_unavailable", "x");
        assert!(fault
            .into_response()
            .extensions()
            .get::<UnavailableByDesign>()
            .is_none());
    }
}
