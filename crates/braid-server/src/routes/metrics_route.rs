//! GET /metrics: Prometheus text. The engine keeps the histograms and counters current; the
//! queue and KV gauges are read from the engine's published counters at scrape time.

use crate::state::AppState;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    if let Some(ready) = state.get_ready() {
        let stats = ready.engine.stats();
        state.metrics.num_requests_running.set(stats.running as i64);
        state.metrics.num_requests_waiting.set(stats.waiting as i64);
        state.metrics.kv_cache_usage_perc.set(stats.kv_usage);
    }
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(),
    )
}
