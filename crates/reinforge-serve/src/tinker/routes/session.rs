//! Client configuration, health, capabilities, sessions and their heartbeats.

use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{not_found, service, Answer};
use crate::error::{ApiError, ApiJson};
use crate::tinker::backend::LOSS_NAMES;
use crate::tinker::state::Session;
use crate::AppState;

/// `POST /api/v1/client/config`: the flags of `ClientConfigResponse` this server needs: API
/// keys rather than JWT exchange, httpx's own transport, uncompressed protobuf
/// `forward_backward` bodies, one `retrieve_future` per request.
pub async fn client_config() -> Json<Value> {
    Json(json!({
        "pjwt_auth_enabled": false,
        "credential_default_source": "api_key",
        "use_pyqwest_transport": false,
        "proto_compress_fwdbwd": false,
        "parallel_fwdbwd_chunks": true,
        "sample_use_retrieve_futures": false,
        "custom_loss_server_side": false,
        "sample_join_sampling_session": false,
    }))
}

/// `POST /api/v1/client/dynamic_config`: the SDK's defaults (no explicit sample cancels).
pub async fn dynamic_config() -> Json<Value> {
    Json(json!({"refresh_interval_sec": 300, "sample_cancel_enabled": false}))
}

/// `GET /api/v1/healthz`.
pub async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// `GET /api/v1/get_server_capabilities`: the one model served.
pub async fn capabilities(State(state): State<AppState>) -> Answer {
    let t = service(&state)?;
    Ok(Json(json!({
        "supported_models": [{
            "model_name": t.config.base_model,
            "max_context_length": t.max_context,
            "trainable": true,
            "sampleable": true,
        }],
        "supported_loss_fns": LOSS_NAMES,
    })))
}

/// `POST /api/v1/create_session`.
pub async fn create_session(State(state): State<AppState>) -> Answer {
    let t = service(&state)?;
    t.expire_sessions();
    let mut s = t.store();
    let open = s.sessions.len();
    if open >= t.config.max_sessions {
        return Err(ApiError {
            status: StatusCode::TOO_MANY_REQUESTS,
            message: format!(
                "the server has {open} sessions open, its limit (--tinker-max-sessions); one \
                 closes when its client ends it or stops its heartbeat"
            ),
            field: None,
            retry_after: Some(10),
        });
    }
    let id = s.fresh("session");
    s.sessions.insert(
        id.clone(),
        Session {
            last_heartbeat: Instant::now(),
            models: vec![],
        },
    );
    Ok(Json(json!({"type": "create_session", "session_id": id})))
}

#[derive(Deserialize)]
pub struct SessionRef {
    session_id: String,
}

/// `POST /api/v1/session_heartbeat`: 404 for a session that does not exist (or expired).
pub async fn session_heartbeat(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<SessionRef>,
) -> Answer {
    let t = service(&state)?;
    let mut s = t.store();
    let session = s
        .sessions
        .get_mut(&req.session_id)
        .ok_or_else(|| not_found(format!("no session `{}`", req.session_id)))?;
    session.last_heartbeat = Instant::now();
    Ok(Json(json!({"type": "session_heartbeat"})))
}

/// `POST /api/v1/sessions/{id}/finish`: the session ends; its models are freed.
pub async fn finish_session(State(state): State<AppState>, Path(id): Path<String>) -> Answer {
    let t = service(&state)?;
    if let Some(s) = t.store().sessions.get_mut(&id) {
        // Expired at the next sweep.
        s.last_heartbeat = Instant::now() - t.config.session_timeout - Duration::from_secs(1);
    }
    t.expire_sessions();
    Ok(Json(json!({})))
}

/// `POST /api/v1/telemetry`: accepted and dropped (this server keeps no telemetry).
pub async fn telemetry() -> Json<Value> {
    Json(json!({"status": "accepted"}))
}
