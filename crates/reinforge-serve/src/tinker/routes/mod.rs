//! The handlers of the Tinker routes (`routes()` in the parent module). Each checks its request completely
//! (ids, lengths, options this server cannot honour) before queueing work, so a bad request
//! is a 4xx naming the field and never reaches the model.
//!
//! One module per part of the API: [`session`], [`training`], [`weights`], [`sampling`],
//! [`futures`]; what they share (finding the service, 4xx helpers, the per-session limits) is
//! here.

mod futures;
mod sampling;
mod session;
mod training;
mod weights;

pub use futures::*;
pub use sampling::*;
pub use session::*;
pub use training::*;
pub use weights::*;

use std::sync::Arc;

use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::tinker::state::{Model, Tinker};
use crate::AppState;

type Answer = Result<Json<Value>, ApiError>;

/// The Tinker service of `state` (the routes exist only when it is there).
fn service(state: &AppState) -> Result<Arc<Tinker>, ApiError> {
    state.tinker.clone().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "this server has no Tinker backend (--tinker)",
        )
    })
}

/// 400 about `field`.
fn bad(field: impl Into<String>, message: impl Into<String>) -> ApiError {
    ApiError {
        status: StatusCode::BAD_REQUEST,
        message: message.into(),
        field: Some(field.into()),
        retry_after: None,
    }
}

fn not_found(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, message)
}

/// The SDK's `UntypedAPIFuture`.
fn future(id: u64, model_id: Option<&str>) -> Json<Value> {
    Json(json!({"request_id": id.to_string(), "model_id": model_id}))
}

/// Adds training model `id` (a fresh `model_N` when `None`) to `session`, within the
/// per-session limit.
fn register_model(
    t: &Tinker,
    session: &str,
    lora_rank: Option<usize>,
    id: Option<String>,
) -> Result<String, ApiError> {
    let mut s = t.store();
    let held = s
        .sessions
        .get(session)
        .ok_or_else(|| not_found(format!("no session `{session}`")))?
        .models
        .len();
    if held >= t.config.max_models_per_session {
        return Err(bad(
            "session_id",
            format!(
                "session `{session}` already holds {held} models, the server's limit per session"
            ),
        ));
    }
    let full = s.full_models();
    if lora_rank.is_none() && full >= t.config.max_full_models {
        return Err(bad(
            "lora_config",
            format!(
                "the server already holds {full} full fine-tuning models, its limit \
                 (--tinker-max-full-models); train a LoRA model (lora_config) or end a session"
            ),
        ));
    }
    let id = match id {
        Some(id) if s.models.contains_key(&id) => {
            return Err(bad("model_seq_id", format!("model `{id}` exists")))
        }
        Some(id) => id,
        None => s.fresh("model"),
    };
    s.models.insert(
        id.clone(),
        Model {
            session: session.to_string(),
            lora_rank,
            checkpoints: vec![],
            snapshots: vec![],
            seen: Default::default(),
        },
    );
    if let Some(sess) = s.sessions.get_mut(session) {
        sess.models.push(id.clone());
    }
    Ok(id)
}

/// 400 unless `name` is the served model.
fn check_base_model(t: &Tinker, name: &str, field: &str) -> Result<(), ApiError> {
    if name == t.config.base_model {
        return Ok(());
    }
    Err(bad(
        field,
        format!(
            "base model `{name}` is not served here; this server trains `{}`",
            t.config.base_model
        ),
    ))
}

/// The session owning `model_id`, or 404.
fn model_session(t: &Tinker, model_id: &str) -> Result<String, ApiError> {
    t.store()
        .models
        .get(model_id)
        .map(|m| m.session.clone())
        .ok_or_else(|| not_found(format!("no model `{model_id}`")))
}

/// 429 (which the SDK retries after a pause) when `session` has too many requests queued.
fn check_pending(t: &Tinker, session: &str) -> Result<(), ApiError> {
    let n = t.store().pending_of(session);
    if n >= t.config.max_pending_per_session {
        return Err(ApiError {
            status: StatusCode::TOO_MANY_REQUESTS,
            message: format!("session `{session}` has {n} requests queued, the server's limit"),
            field: None,
            retry_after: Some(1),
        });
    }
    Ok(())
}
