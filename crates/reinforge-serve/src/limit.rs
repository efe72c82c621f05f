//! Bounded concurrency with a bounded queue: backpressure, then load shedding; and a bound on
//! the work of one verify or reward request ([`check_verify_work`]).
//!
//! Two groups of slots: the reward and verify routes share `--max-concurrency`, /run_code has
//! `--sandbox-max-concurrency` of its own, so that runs of seconds (up to the sandbox's wall
//! time) cannot keep a verification waiting (issue 50's audit: 8 long runs made verify wait
//! 7.6 s when they shared slots).
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

/// The admission state of one group of work routes: the reward and verify routes share one,
/// /run_code has its own, so that sandbox runs (seconds each) never hold a verification's slot.
pub struct Admission {
    slots: Arc<Semaphore>,
    /// Requests admitted (processing or waiting).
    admitted: AtomicUsize,
    capacity: usize,
    /// The flags that set the capacity, for the 503's message.
    flags: &'static str,
}

impl Admission {
    /// `concurrency` slots and a queue of `queue` waiting requests; `flags` names the flags
    /// that set them.
    pub fn new(concurrency: usize, queue: usize, flags: &'static str) -> Self {
        Admission {
            slots: Arc::new(Semaphore::new(concurrency.max(1))),
            admitted: AtomicUsize::new(0),
            capacity: concurrency.max(1) + queue,
            flags,
        }
    }
}

/// Each row counts at least this many bytes against `--max-verify-bytes`: a request of many
/// tiny rows costs per row, not only per byte.
pub const ROW_FLOOR_BYTES: usize = 256;

/// The work of a request's rows of `lens` text bytes each, as `--max-verify-bytes` counts it.
pub fn verify_work(lens: impl IntoIterator<Item = usize>) -> (usize, usize) {
    lens.into_iter().fold((0, 0), |(rows, work), len| {
        (rows + 1, work.saturating_add(len.max(ROW_FLOOR_BYTES)))
    })
}

/// 413 naming `--max-verify-bytes` when the rows (`field`) of `lens` text bytes ask for more
/// work than `limit`: the verifier is linear in its input, so this bounds a request's CPU time.
pub fn check_verify_work(
    field: &str,
    lens: impl IntoIterator<Item = usize>,
    limit: usize,
) -> Result<(), ApiError> {
    let (rows, work) = verify_work(lens);
    if work <= limit {
        return Ok(());
    }
    Err(ApiError {
        status: StatusCode::PAYLOAD_TOO_LARGE,
        message: format!(
            "`{field}` asks for {work} bytes of verification ({rows} rows, each counted as at \
             least {ROW_FLOOR_BYTES} bytes), over the limit of {limit} (--max-verify-bytes)"
        ),
        field: Some(field.to_string()),
        retry_after: None,
    })
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

/// Middleware on the reward and verify routes: admit, wait for a slot, run.
pub async fn admit(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let adm = state.admission.clone();
    admit_to(&adm, &state, req, next).await
}

/// Middleware on /run_code: [`admit`] with the sandbox's own slots.
pub async fn admit_sandbox(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let adm = state.sandbox_admission.clone();
    admit_to(&adm, &state, req, next).await
}

/// Admits `req` to `adm` (503 when its queue is full), waits for a slot, runs.
async fn admit_to(adm: &Admission, state: &AppState, mut req: Request, next: Next) -> Response {
    if adm.admitted.fetch_add(1, Ordering::SeqCst) >= adm.capacity {
        adm.admitted.fetch_sub(1, Ordering::SeqCst);
        return ApiError::overloaded(format!(
            "server busy: {} requests admitted ({}); retry later",
            adm.capacity, adm.flags
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
