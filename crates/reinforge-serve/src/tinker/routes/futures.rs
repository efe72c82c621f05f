//! The futures protocol: `retrieve_future` (long poll, `try_again`), `cancel_future`.

use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{not_found, service};
use crate::error::{ApiError, ApiJson};
use crate::tinker::state::{FutureState, Payload};
use crate::AppState;

#[derive(Deserialize)]
pub struct Retrieve {
    request_id: String,
}

/// How long one `retrieve_future` waits for a running request before answering `try_again`
/// (the SDK's own timeout for the call is 45 s).
const LONG_POLL: Duration = Duration::from_secs(20);

/// `POST /api/v1/retrieve_future`: the result (JSON, or protobuf for forward/backward and
/// samples), `{"error", "category"}` for a failed request, `try_again` after a long poll, 404
/// for an id that was never issued.
pub async fn retrieve_future(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<Retrieve>,
) -> Result<Response, ApiError> {
    let t = service(&state)?;
    let id: u64 = req
        .request_id
        .parse()
        .map_err(|_| not_found(format!("no future `{}`", req.request_id)))?;
    let start = Instant::now();
    loop {
        match t.poll(id) {
            None => return Err(not_found(format!("no future `{}`", req.request_id))),
            Some(FutureState::Done(Ok(Payload::Json(v)))) => return Ok(Json(v).into_response()),
            Some(FutureState::Done(Ok(Payload::Proto(bytes)))) => {
                return Ok(
                    ([(header::CONTENT_TYPE, "application/x-protobuf")], bytes).into_response()
                )
            }
            Some(FutureState::Done(Err(f))) => {
                return Ok(Json(json!({"error": f.message, "category": f.category})).into_response())
            }
            Some(FutureState::Pending) if start.elapsed() >= LONG_POLL => {
                return Ok(Json(json!({
                    "type": "try_again",
                    "request_id": req.request_id,
                    "queue_state": "active",
                }))
                .into_response())
            }
            Some(FutureState::Pending) => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
}

/// `POST /api/v1/cancel_future`: accepted; the request still runs (the model is not
/// interruptible mid-request; the client config leaves explicit cancels off).
pub async fn cancel_future() -> Json<Value> {
    Json(json!({}))
}
