//! Rewards that cannot stall a step: a batch has one deadline, `timeout_s` after scoring
//! starts. The samples' rule components run on a pool of worker threads (as many as rayon's),
//! a learned component's batches on a thread each, all while the caller waits, and only until
//! the deadline: a hung sample holds one worker, the others go on. Past it (or when an evaluation panics) the row gets the spec's `timeout_score`,
//! and the failure is named in the result, never retried. A learned component whose batches
//! fail [`BREAK_AFTER`] times in a row is not called again (a stuck model would otherwise
//! leave a hung thread per batch for the rest of the run).
//! Rust cannot kill a thread: one past its deadline is left to finish (or hang) on its own and
//! its result is dropped.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

/// Consecutive failed batches after which a learned component is not called again.
pub const BREAK_AFTER: usize = 3;

/// Why a component gave a row the spec's `timeout_score` instead of its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Failure {
    /// Still running at the deadline.
    Timeout,
    /// Panicked (or its thread could not start).
    Crash,
    /// Not called: it failed [`BREAK_AFTER`] batches in a row before.
    Disabled,
}

/// `f`'s result, computed on a thread of its own and awaited until `deadline` (`None`: run in
/// place, no deadline).
pub fn guarded<T: Send + 'static>(
    deadline: Option<Instant>,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Failure> {
    let Some(deadline) = deadline else {
        return catch_unwind(AssertUnwindSafe(f)).map_err(|_| Failure::Crash);
    };
    Pending::start(vec![f], 1)
        .wait(deadline)
        .pop()
        .unwrap_or(Err(Failure::Crash))
}

/// A job of a [`Pending`] batch, with its index.
type Job<F> = (usize, F);

/// Jobs running on a pool of threads of their own, results by job index. Workers take the
/// next job while any is left and the batch is still awaited, so one hung job holds one
/// worker and the others go on.
pub struct Pending<T> {
    results: Vec<Option<Result<T, Failure>>>,
    rx: Receiver<(usize, std::thread::Result<T>)>,
    /// Set when the caller stops waiting: workers take no new job.
    given_up: Arc<AtomicBool>,
}

impl<T: Send + 'static> Pending<T> {
    /// Starts `jobs` on `workers` threads (at least one, at most one per job).
    pub fn start<F: FnOnce() -> T + Send + 'static>(jobs: Vec<F>, workers: usize) -> Self {
        let (tx, rx) = channel();
        let n = jobs.len();
        let queue: Arc<Mutex<VecDeque<Job<F>>>> =
            Arc::new(Mutex::new(jobs.into_iter().enumerate().collect()));
        let given_up = Arc::new(AtomicBool::new(false));
        let mut started = 0;
        for _ in 0..workers.clamp(1, n.max(1)) {
            let (tx, queue, given_up) = (tx.clone(), Arc::clone(&queue), Arc::clone(&given_up));
            let spawned = std::thread::Builder::new()
                .name("reward".into())
                .spawn(move || work(&queue, &tx, &given_up));
            started += usize::from(spawned.is_ok());
        }
        let mut results: Vec<Option<Result<T, Failure>>> = (0..n).map(|_| None).collect();
        if started == 0 {
            results.fill_with(|| Some(Err(Failure::Crash)));
        }
        Self {
            results,
            rx,
            given_up,
        }
    }

    /// Every job's result, waiting for them until `deadline`: a job not finished then is a
    /// [`Failure::Timeout`], a panicked one a [`Failure::Crash`].
    pub fn wait(&mut self, deadline: Instant) -> Vec<Result<T, Failure>> {
        while self.results.iter().any(Option::is_none) {
            match self.rx.recv_timeout(left(deadline)) {
                Ok((i, r)) => self.results[i] = Some(r.map_err(|_| Failure::Crash)),
                // Past the deadline, or every worker gone (a thread that could not run).
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
            }
        }
        self.given_up.store(true, Ordering::SeqCst);
        let timed_out = Instant::now() >= deadline;
        std::mem::take(&mut self.results)
            .into_iter()
            .map(|r| {
                r.unwrap_or(Err(if timed_out {
                    Failure::Timeout
                } else {
                    Failure::Crash
                }))
            })
            .collect()
    }
}

impl<T> Drop for Pending<T> {
    fn drop(&mut self) {
        self.given_up.store(true, Ordering::SeqCst);
    }
}

/// A worker: runs queued jobs until none is left or the batch is given up.
fn work<T, F: FnOnce() -> T>(
    queue: &Mutex<VecDeque<Job<F>>>,
    tx: &Sender<(usize, std::thread::Result<T>)>,
    given_up: &AtomicBool,
) {
    while !given_up.load(Ordering::SeqCst) {
        let next = queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
        let Some((i, job)) = next else {
            return;
        };
        // The receiver may be gone (deadline passed): nothing to tell.
        if tx.send((i, catch_unwind(AssertUnwindSafe(job)))).is_err() {
            return;
        }
    }
}

/// The time left until `deadline`, at least zero.
pub fn left(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn within(ms: u64) -> Option<Instant> {
        Some(Instant::now() + Duration::from_millis(ms))
    }

    #[test]
    fn values_timeouts_and_panics() {
        assert_eq!(guarded(within(200), || 7), Ok(7));
        assert_eq!(guarded(None, || 7), Ok(7));
        let t = Instant::now();
        let hung = guarded(within(200), || loop {
            std::thread::sleep(Duration::from_secs(3600));
        });
        assert_eq!(hung, Err::<(), _>(Failure::Timeout));
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        // A generous deadline: the panic hook may print a symbolised backtrace first.
        let crashed: Result<(), _> = guarded(within(20_000), || panic!("a crashing component"));
        assert_eq!(crashed, Err(Failure::Crash));
        let crashed: Result<(), _> = guarded(None, || panic!("a crashing component"));
        assert_eq!(crashed, Err(Failure::Crash));
    }

    #[test]
    fn jobs_share_one_deadline() {
        // 64 jobs, half of them hanging, on 40 workers: the hung ones hold 32 workers, the
        // others finish the rest; the batch waits once, not once per job.
        let jobs: Vec<_> = (0..64)
            .map(|i| {
                move || {
                    if i % 2 == 0 {
                        std::thread::sleep(Duration::from_secs(3600));
                    }
                    i
                }
            })
            .collect();
        let t = Instant::now();
        let results = Pending::start(jobs, 40).wait(Instant::now() + Duration::from_millis(300));
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        for (i, r) in results.into_iter().enumerate() {
            let want = if i % 2 == 0 {
                Err(Failure::Timeout)
            } else {
                Ok(i)
            };
            assert_eq!(r, want);
        }
    }
}
