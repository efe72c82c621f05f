//! Bounded concurrency with a bounded queue: backpressure, then load shedding.
//!
//! Hand-written because neither tower layer does both: `ConcurrencyLimitLayer` queues without
//! bound (axum's services are always ready), and `LoadShedLayer` over it rejects at once with
//! no queue. Here `max_concurrency` requests hold a slot, up to `max_queue` more wait for one
//! (the client sees latency, i.e. backpressure), and the rest get 503 with `Retry-After: 1`,
//! which OpenRLHF's and most clients' retry loops handle.
//!
//! A request is counted against `max_concurrency + max_queue` before its body is read, and takes
//! a slot only once [`read_body`] has its whole body (within `--body-read-timeout-s`, else 408):
//! a client that sends headers and then stalls holds no slot (issue 24, finding 7). The bodies
//! of queued requests are in memory, at most `(max_concurrency + max_queue) x max_body_bytes`.
//! Handlers move the slot into their blocking task ([`Slot`]), so work that outlives a client
//! who hung up still counts against the limit.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use prometheus::IntGauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::ApiError;
use crate::AppState;

/// The admission state shared by all work routes.
pub struct Admission {
    slots: Arc<Semaphore>,
    /// Requests admitted (processing or waiting).
    admitted: AtomicUsize,
    capacity: usize,
}

impl Admission {
    /// `concurrency` slots and a queue of `queue` waiting requests.
    pub fn new(concurrency: usize, queue: usize) -> Self {
        Admission {
            slots: Arc::new(Semaphore::new(concurrency.max(1))),
            admitted: AtomicUsize::new(0),
            capacity: concurrency.max(1) + queue,
        }
    }
}

/// A held slot; released when the last clone (the handler's or its blocking task's) drops.
#[derive(Clone)]
pub struct Slot(#[allow(dead_code)] Arc<OwnedSemaphorePermit>);

/// Decrements the admitted count however the request ends (even if its future is dropped).
struct Admitted<'a>(&'a AtomicUsize);

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Middleware on work routes: admit, wait for a slot, run.
pub async fn admit(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let adm = &state.admission;
    if adm.admitted.fetch_add(1, Ordering::SeqCst) >= adm.capacity {
        adm.admitted.fetch_sub(1, Ordering::SeqCst);
        return ApiError::overloaded(format!(
            "server busy: {} requests admitted (--max-concurrency + --max-queue); retry later",
            adm.capacity
        ))
        .into_response();
    }
    let _admitted = Admitted(&adm.admitted);
    let queued = Raised::new(&state.metrics.queued);
    let permit = adm.slots.clone().acquire_owned().await;
    drop(queued);
    let permit = permit.expect("the semaphore is never closed");
    let _in_flight = Raised::new(&state.metrics.in_flight);
    req.extensions_mut().insert(Slot(Arc::new(permit)));
    next.run(req).await
}

/// What [`read_body`] needs: copied into each request (not the whole [`AppState`], which the
/// middleware would clone per request).
#[derive(Clone, Copy, Debug)]
pub struct BodyRead {
    /// `--max-body-bytes`.
    pub max_body_bytes: usize,
    /// `--body-read-timeout-s`.
    pub body_timeout: std::time::Duration,
}

/// Middleware on every route: reads the whole body (at most `--max-body-bytes`) within
/// `--body-read-timeout-s`, so handlers and [`admit`] see a body already in memory.
pub async fn read_body(State(state): State<BodyRead>, req: Request, next: Next) -> Response {
    let declared = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > state.max_body_bytes as u64) {
        return ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "request body is larger than the server's limit (--max-body-bytes)",
        )
        .into_response();
    }
    let (parts, body) = req.into_parts();
    let read = axum::body::to_bytes(body, state.max_body_bytes);
    let bytes = match tokio::time::timeout(state.body_timeout, read).await {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => {
            // axum reports the limit as "length limit exceeded" (http-body-util's error).
            let mut too_large = false;
            let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&e);
            while let Some(c) = cause {
                too_large |= c.to_string().contains("length limit");
                cause = c.source();
            }
            return if too_large {
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "request body is larger than the server's limit (--max-body-bytes)",
                )
            } else {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "the request body could not be read",
                )
            }
            .into_response();
        }
        Err(_) => {
            let mut resp = ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the request body did not arrive within {:?} (--body-read-timeout-s)",
                    state.body_timeout
                ),
            )
            .into_response();
            resp.headers_mut().insert(
                axum::http::header::CONNECTION,
                axum::http::HeaderValue::from_static("close"),
            );
            return resp;
        }
    };
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// A gauge raised by one while this lives (also when a request's future is dropped).
struct Raised<'a>(&'a IntGauge);

impl<'a> Raised<'a> {
    fn new(g: &'a IntGauge) -> Self {
        g.inc();
        Raised(g)
    }
}

impl Drop for Raised<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}
