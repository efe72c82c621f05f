//! Bounded concurrency with a bounded queue: backpressure, then load shedding.
//!
//! Hand-written because neither tower layer does both: `ConcurrencyLimitLayer` queues without
//! bound (axum's services are always ready), and `LoadShedLayer` over it rejects at once with
//! no queue. Here `max_concurrency` requests hold a slot, up to `max_queue` more wait for one
//! (the client sees latency, i.e. backpressure), and the rest get 503 with `Retry-After: 1`,
//! which OpenRLHF's and most clients' retry loops handle.
//!
//! The slot is admitted before the body is read (a queue of bodies would be a queue of memory),
//! and handlers move it into their blocking task ([`Slot`]), so work that outlives a client
//! who hung up still counts against the limit.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::extract::{Request, State};
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
