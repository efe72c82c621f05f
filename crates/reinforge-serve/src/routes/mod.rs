//! The HTTP routes, one module per protocol.

pub mod openrlhf;
pub mod sandboxfusion;
pub mod verify;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::Json;

use crate::AppState;

/// `GET /health`: liveness, and what this server does.
pub async fn health(State(state): State<AppState>) -> impl IntoResponse {
    Json(serde_json::json!({
        "status": "ok",
        "sandbox": match (&state.sandbox, &state.sandbox_problem) {
            (None, _) => "disabled".to_string(),
            (Some(_), None) => "ok".to_string(),
            (Some(_), Some(e)) => format!("unavailable: {e}"),
        },
        "reward_components": state.reward.spec().components.keys().collect::<Vec<_>>(),
    }))
}

/// `GET /metrics`: Prometheus text exposition format 0.0.4.
pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.encode(),
    )
}
