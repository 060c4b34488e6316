//! GET /health: 200 {"status":"ok"} when the server takes requests; 503 with the reason
//! ("loading", "draining", "engine_stopped", "engine_stalled": a step has run longer than
//! `--step-stall-secs`) otherwise, for load balancers and Kubernetes probes.

use crate::state::AppState;
use crate::trace_failures::mark_if_by_design;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

pub async fn health(State(state): State<AppState>) -> Response {
    let status = match state.get_ready() {
        None => "loading",
        Some(r) if r.engine.is_draining() => "draining",
        Some(r) if !r.engine.is_alive() => "engine_stopped",
        Some(r)
            if r.engine
                .step_running_for()
                .is_some_and(|d| d > state.step_stall_limit) =>
        {
            "engine_stalled"
        }
        Some(_) => return Json(serde_json::json!({"status": "ok"})).into_response(),
    };
    let mut resp = (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::RETRY_AFTER, "1")],
        Json(serde_json::json!({"status": status})),
    )
        .into_response();
    mark_if_by_design(&mut resp, status);
    resp
}
