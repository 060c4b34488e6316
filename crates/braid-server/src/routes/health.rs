//! GET /health: 200 {"status":"ok"} when the server takes requests; 503 with the reason
//! ("loading", "draining", "engine_stopped") otherwise, for load balancers and Kubernetes probes.

use crate::state::AppState;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

pub async fn health(State(state): State<AppState>) -> Response {
    let status = match state.get_ready() {
        None => "loading",
        Some(r) if r.engine.is_draining() => "draining",
        Some(r) if !r.engine.is_alive() => "engine_stopped",
        Some(_) => return Json(serde_json::json!({"status": "ok"})).into_response(),
    };
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::RETRY_AFTER, "1")],
        Json(serde_json::json!({"status": status})),
    )
        .into_response()
}
