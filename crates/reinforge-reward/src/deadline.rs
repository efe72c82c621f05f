//! Rewards that cannot stall a step: a component's evaluation runs on its own thread and the
//! caller waits at most the spec's `timeout_s`. Past it (or when the evaluation panics) the row
//! gets the spec's `timeout_score`, and the failure is named in the result, never retried.
//! Rust cannot kill a thread: one past its deadline is left to finish (or hang) on its own and
//! its result is dropped, so a component that hangs for ever costs one sleeping thread per row.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{channel, RecvTimeoutError};
use std::time::Duration;

use serde::Serialize;

/// Why a component gave a row the spec's `timeout_score` instead of its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Failure {
    /// Still running at the deadline.
    Timeout,
    /// Panicked (or its thread could not start).
    Crash,
}

/// `f`'s result, computed on a thread of its own and awaited at most `limit` (`None`: run in
/// place, no deadline).
pub fn guarded<T: Send + 'static>(
    limit: Option<Duration>,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Failure> {
    let Some(limit) = limit else {
        return catch_unwind(AssertUnwindSafe(f)).map_err(|_| Failure::Crash);
    };
    let (tx, rx) = channel();
    let spawned = std::thread::Builder::new()
        .name("reward".into())
        .spawn(move || {
            // The receiver may be gone (deadline passed): nothing to tell.
            let _ = tx.send(catch_unwind(AssertUnwindSafe(f)));
        });
    if spawned.is_err() {
        return Err(Failure::Crash);
    }
    match rx.recv_timeout(limit) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(_)) | Err(RecvTimeoutError::Disconnected) => Err(Failure::Crash),
        Err(RecvTimeoutError::Timeout) => Err(Failure::Timeout),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn values_timeouts_and_panics() {
        let limit = Some(Duration::from_millis(200));
        assert_eq!(guarded(limit, || 7), Ok(7));
        assert_eq!(guarded(None, || 7), Ok(7));
        let t = Instant::now();
        let hung = guarded(limit, || loop {
            std::thread::sleep(Duration::from_secs(3600));
        });
        assert_eq!(hung, Err::<(), _>(Failure::Timeout));
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        // A generous deadline: the panic hook may print a symbolised backtrace first.
        let crashed: Result<(), _> = guarded(Some(Duration::from_secs(20)), || {
            panic!("a crashing component")
        });
        assert_eq!(crashed, Err(Failure::Crash));
        let crashed: Result<(), _> = guarded(None, || panic!("a crashing component"));
        assert_eq!(crashed, Err(Failure::Crash));
    }
}
