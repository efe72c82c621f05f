//! The request queue and the worker thread that owns the [`Generator`].
//!
//! Continuous batching at the step level: the worker takes the request at the head of the queue
//! and every queued request whose [`Sampling`] equals the head's (none of them seeded), up to
//! `max_batch_rows` rows, and decodes them as one [`Batch`]; after every decoding step it admits
//! queued requests of the same sampling into the running batch while it holds fewer than
//! `max_batch_rows` live rows (the generator prefills them and decodes them from the next step),
//! and answers each request as soon as its rows have finished. A seeded request runs alone (no
//! admissions), so its tokens depend only on the request and the weights; requests asking for
//! alternatives per position are not admitted mid-batch (those come with the batch's end).
//!
//! Weights: loads are queued to the same thread and run between batches, so a batch never mixes
//! weights; every job learns the version that decodes it when its batch starts
//! ([`Event::Started`]).
//!
//! Hand-written on a mutex and condition variables rather than a channel: pausing, aborting the
//! running batch, draining the queue and loading must see one consistent state.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Instant;

use tokio::sync::{mpsc, oneshot};

use super::backend::{
    Batch, Finish, Generator, Sampling, Sequence, StepControl, StepToken, StepTokens,
};
use crate::metrics::PolicyMetrics;

/// The loaded weights: the version clients see and the generator's checksum.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WeightInfo {
    pub weight_version: String,
    pub checksum: String,
}

/// What a job's receiver gets, in this order: `Started`, zero or more `Step` (streaming jobs
/// only), `Done`.
#[derive(Debug)]
pub enum Event {
    /// The job's batch started on these weights.
    Started(WeightInfo),
    /// One decoding step: `(row of this job, token, log-prob)`.
    Step(Vec<(usize, i64, f32)>),
    /// The rows of the job, in order, or why decoding failed.
    Done(Result<Vec<Sequence>, String>),
}

/// One request's rows.
pub struct Submission {
    /// One row per sample: a prompt with `n` samples appears `n` times in a row.
    pub rows: Vec<Vec<i64>>,
    pub sampling: Sampling,
    pub seed: Option<u64>,
    /// Send [`Event::Step`]s.
    pub stream: bool,
}

/// How a pause treats the running batch and the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PauseMode {
    /// The running batch stops (its unfinished rows end with `abort`), queued requests are
    /// answered with `abort` and no tokens; requests sent later wait for the resume.
    Abort,
    /// The running batch finishes; queued and later requests wait for the resume.
    Wait,
}

/// The outcome of a pause.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PauseOutcome {
    /// Requests (running or queued) answered with `finish_reason: "abort"`.
    pub num_aborted_requests: usize,
    /// Requests left waiting in the queue.
    pub num_queued_requests: usize,
}

/// A successful weight load.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LoadOutcome {
    pub weight_version: String,
    pub checksum: String,
    pub load_seconds: f64,
    /// Requests aborted first (`abort_all_requests`).
    pub num_aborted_requests: usize,
}

/// The queue was full.
#[derive(Debug)]
pub struct QueueFull(pub usize);

struct Job {
    sub: Submission,
    events: mpsc::UnboundedSender<Event>,
}

struct LoadJob {
    dir: PathBuf,
    version: String,
    reply: oneshot::Sender<Result<LoadOutcome, String>>,
    aborted: usize,
}

struct State {
    queue: VecDeque<Job>,
    loads: VecDeque<LoadJob>,
    paused: bool,
    /// A batch (or a load) is running on the worker.
    busy: bool,
    /// Jobs in the running batch (for abort counts).
    running_jobs: usize,
    weights: WeightInfo,
    shutdown: bool,
}

struct Shared {
    state: Mutex<State>,
    /// Wakes the worker (new job, load, resume, shutdown).
    work: Condvar,
    /// Wakes waiters for the worker to be idle.
    idle: Condvar,
    /// Read by the running batch's step callback: stop now.
    abort: AtomicBool,
    metrics: PolicyMetrics,
}

/// Shared handle to the worker thread; dropping the last one stops it (queued requests get an
/// error, the running batch is aborted).
pub struct Engine {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
    max_batch_rows: usize,
    max_queued: usize,
}

impl Engine {
    /// Starts the worker thread that owns `generator`; `version` names its current weights.
    pub fn start(
        mut generator: Box<dyn Generator>,
        version: String,
        max_batch_rows: usize,
        max_queued: usize,
        metrics: PolicyMetrics,
    ) -> Engine {
        let checksum = generator.checksum();
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                loads: VecDeque::new(),
                paused: false,
                busy: false,
                running_jobs: 0,
                weights: WeightInfo {
                    weight_version: version,
                    checksum,
                },
                shutdown: false,
            }),
            work: Condvar::new(),
            idle: Condvar::new(),
            abort: AtomicBool::new(false),
            metrics,
        });
        let sh = shared.clone();
        let max_rows = max_batch_rows.max(1);
        let thread = std::thread::Builder::new()
            .name("reinforge-policy".into())
            .spawn(move || worker(&sh, generator.as_mut(), max_rows))
            .expect("spawning the policy worker thread");
        Engine {
            shared,
            thread: Mutex::new(Some(thread)),
            max_batch_rows: max_rows,
            max_queued,
        }
    }

    /// Rows one batch holds at most.
    pub fn max_batch_rows(&self) -> usize {
        self.max_batch_rows
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.shared)
    }

    /// Queues a request; its events arrive on the returned receiver.
    pub fn submit(&self, sub: Submission) -> Result<mpsc::UnboundedReceiver<Event>, QueueFull> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut st = self.lock();
        if st.shutdown {
            let _ = tx.send(Event::Done(Err("the server is shutting down".into())));
            return Ok(rx);
        }
        if st.queue.len() >= self.max_queued {
            return Err(QueueFull(self.max_queued));
        }
        st.queue.push_back(Job { sub, events: tx });
        self.shared.metrics.queue_depth.set(st.queue.len() as i64);
        self.shared.work.notify_all();
        Ok(rx)
    }

    /// The loaded weights and whether generation is paused.
    pub fn info(&self) -> (WeightInfo, bool) {
        let st = self.lock();
        (st.weights.clone(), st.paused)
    }

    /// Pauses generation and returns once no batch runs (blocking: call off the async workers).
    pub fn pause(&self, mode: PauseMode) -> PauseOutcome {
        let mut st = self.lock();
        st.paused = true;
        let mut aborted = 0;
        if mode == PauseMode::Abort {
            aborted = abort_all(&self.shared, &mut st);
        }
        while st.busy {
            st = self.shared.idle.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        PauseOutcome {
            num_aborted_requests: aborted,
            num_queued_requests: st.queue.len(),
        }
    }

    /// Resumes generation; returns whether it was paused.
    pub fn resume(&self) -> bool {
        let mut st = self.lock();
        let was = st.paused;
        st.paused = false;
        self.shared.work.notify_all();
        was
    }

    /// Queues a load of `dir` as `version` (between batches, paused or not); `abort_first`
    /// aborts the running batch and the queue first. The receiver gets the outcome.
    pub fn load(
        &self,
        dir: PathBuf,
        version: String,
        abort_first: bool,
    ) -> oneshot::Receiver<Result<LoadOutcome, String>> {
        let (reply, rx) = oneshot::channel();
        let mut st = self.lock();
        if st.shutdown {
            let _ = reply.send(Err("the server is shutting down".into()));
            return rx;
        }
        let aborted = if abort_first {
            abort_all(&self.shared, &mut st)
        } else {
            0
        };
        st.loads.push_back(LoadJob {
            dir,
            version,
            reply,
            aborted,
        });
        self.shared.work.notify_all();
        rx
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        {
            let mut st = self.lock();
            st.shutdown = true;
            self.shared.abort.store(true, Ordering::SeqCst);
            self.shared.work.notify_all();
        }
        if let Some(t) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = t.join();
        }
    }
}

fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    // A panic on the worker while holding the lock leaves a consistent state (all updates are
    // single assignments), so a poisoned lock is used as is.
    shared.state.lock().unwrap_or_else(|e| e.into_inner())
}

/// Stops the running batch and answers every queued job with `abort`; returns how many jobs.
fn abort_all(shared: &Shared, st: &mut State) -> usize {
    let mut n = 0;
    if st.busy && st.running_jobs > 0 {
        shared.abort.store(true, Ordering::SeqCst);
        n += st.running_jobs;
    }
    for job in st.queue.drain(..) {
        let rows = job
            .sub
            .rows
            .iter()
            .map(|_| Sequence {
                tokens: vec![],
                logprobs: vec![],
                top: vec![],
                prompt: vec![],
                finish: Finish::Abort,
            })
            .collect();
        let _ = job.events.send(Event::Started(st.weights.clone()));
        let _ = job.events.send(Event::Done(Ok(rows)));
        n += 1;
    }
    shared.metrics.queue_depth.set(0);
    n
}

/// Removes the next batch from the queue: the head, plus (when the head has no seed) every
/// queued job with the same sampling and no seed that still fits in `max_rows`.
fn take_batch(queue: &mut VecDeque<Job>, max_rows: usize) -> Vec<Job> {
    let Some(head) = queue.pop_front() else {
        return vec![];
    };
    let mut rows = head.sub.rows.len();
    let mut jobs = vec![head];
    if jobs[0].sub.seed.is_some() {
        return jobs;
    }
    let mut rest = VecDeque::with_capacity(queue.len());
    while let Some(job) = queue.pop_front() {
        let fits = rows + job.sub.rows.len() <= max_rows;
        if fits && job.sub.seed.is_none() && job.sub.sampling == jobs[0].sub.sampling {
            rows += job.sub.rows.len();
            jobs.push(job);
        } else {
            rest.push_back(job);
        }
    }
    *queue = rest;
    jobs
}

fn worker(shared: &Shared, generator: &mut dyn Generator, max_rows: usize) {
    loop {
        let mut st = lock(shared);
        while !st.shutdown && st.loads.is_empty() && (st.paused || st.queue.is_empty()) {
            st = shared.work.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        if st.shutdown {
            for job in st.queue.drain(..) {
                let _ = job
                    .events
                    .send(Event::Done(Err("the server is shutting down".into())));
            }
            for load in st.loads.drain(..) {
                let _ = load.reply.send(Err("the server is shutting down".into()));
            }
            st.busy = false;
            shared.idle.notify_all();
            return;
        }
        st.busy = true;
        if let Some(load) = st.loads.pop_front() {
            drop(st);
            let outcome = run_load(generator, &load);
            let mut st = lock(shared);
            let status = match &outcome {
                Ok(o) => {
                    st.weights = WeightInfo {
                        weight_version: o.weight_version.clone(),
                        checksum: o.checksum.clone(),
                    };
                    "ok"
                }
                Err(_) => "error",
            };
            shared
                .metrics
                .weight_loads
                .with_label_values(&[status])
                .inc();
            st.busy = false;
            shared.idle.notify_all();
            drop(st);
            let _ = load.reply.send(outcome);
            continue;
        }
        let jobs = take_batch(&mut st.queue, max_rows);
        shared.metrics.queue_depth.set(st.queue.len() as i64);
        st.running_jobs = jobs.len();
        shared.abort.store(false, Ordering::SeqCst);
        let weights = st.weights.clone();
        drop(st);
        run_batch(shared, generator, jobs, weights, max_rows);
        let mut st = lock(shared);
        st.busy = false;
        st.running_jobs = 0;
        shared.idle.notify_all();
    }
}

fn run_load(generator: &mut dyn Generator, load: &LoadJob) -> Result<LoadOutcome, String> {
    let t = Instant::now();
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        generator.load_weights(&load.dir)
    }))
    .map_err(|p| {
        format!(
            "loading {}: the generator panicked (the weights may be partly replaced): {}",
            load.dir.display(),
            panic_message(&p)
        )
    })?
    .map_err(|e| {
        let e = format!("loading {}: {e:#}", load.dir.display());
        eprintln!("reinforge serve: weight load failed: {e}");
        public_error(&e)
    })?;
    Ok(LoadOutcome {
        weight_version: load.version.clone(),
        checksum: generator.checksum(),
        load_seconds: t.elapsed().as_secs_f64(),
        num_aborted_requests: load.aborted,
    })
}

/// Whether `job` may join a running batch of `sampling`: unseeded (a seeded request runs
/// alone), the same sampling but for `max_tokens` (each row keeps its own), and no
/// alternatives per position (those come with the batch's end, and a joined job is answered
/// as soon as its rows finish).
fn joinable(job: &Job, sampling: &Sampling) -> bool {
    let same = Sampling {
        max_tokens: sampling.max_tokens,
        ..job.sub.sampling.clone()
    } == *sampling;
    job.sub.seed.is_none() && same && sampling.top_logprobs == 0 && sampling.prompt_logprobs == 0
}

/// The jobs of one running batch: who owns each row, what each row decoded so far, which jobs
/// were answered.
struct Running {
    jobs: Vec<Job>,
    /// Batch row -> (job, row within the job).
    owner: Vec<(usize, usize)>,
    /// Per job, its rows as decoded so far.
    partial: Vec<Vec<Sequence>>,
    /// Per job, rows not finished yet.
    rows_left: Vec<usize>,
    /// Per job, answered already.
    done: Vec<bool>,
    /// Rows still decoding.
    live_rows: usize,
}

impl Running {
    fn new() -> Self {
        Running {
            jobs: vec![],
            owner: vec![],
            partial: vec![],
            rows_left: vec![],
            done: vec![],
            live_rows: 0,
        }
    }

    /// Adds `job` (its rows take the next batch rows), tells it the weights; returns its rows.
    fn add(&mut self, job: Job, weights: &WeightInfo) -> Vec<Vec<i64>> {
        let j = self.jobs.len();
        let rows = job.sub.rows.clone();
        for r in 0..rows.len() {
            self.owner.push((j, r));
        }
        self.partial.push(
            rows.iter()
                .map(|_| Sequence {
                    tokens: vec![],
                    logprobs: vec![],
                    top: vec![],
                    prompt: vec![],
                    finish: Finish::Length,
                })
                .collect(),
        );
        self.rows_left.push(rows.len());
        self.done.push(false);
        self.live_rows += rows.len();
        let _ = job.events.send(Event::Started(weights.clone()));
        self.jobs.push(job);
        rows
    }

    /// Records a step's tokens, streams them, and answers the jobs whose rows all finished
    /// (unless they wait for alternatives, which come with the batch's end).
    fn record(&mut self, step: &[StepToken]) {
        let mut streamed: Vec<Vec<(usize, i64, f32)>> = vec![vec![]; self.jobs.len()];
        for t in step {
            let Some(&(j, r)) = self.owner.get(t.row) else {
                continue;
            };
            let seq = &mut self.partial[j][r];
            seq.tokens.push(t.token);
            seq.logprobs.push(t.logprob);
            if self.jobs[j].sub.stream {
                streamed[j].push((r, t.token, t.logprob));
            }
            if let Some(end) = t.end {
                seq.finish = end;
                self.rows_left[j] = self.rows_left[j].saturating_sub(1);
                self.live_rows = self.live_rows.saturating_sub(1);
            }
        }
        for (j, buf) in streamed.into_iter().enumerate() {
            if !buf.is_empty() {
                let _ = self.jobs[j].events.send(Event::Step(buf));
            }
        }
        for j in 0..self.jobs.len() {
            // Alternatives and prompt scores come with the batch's end.
            let s = &self.jobs[j].sub.sampling;
            let alternatives = s.top_logprobs > 0 || s.prompt_logprobs > 0;
            if !self.done[j] && self.rows_left[j] == 0 && !alternatives {
                self.done[j] = true;
                let rows = std::mem::take(&mut self.partial[j]);
                let _ = self.jobs[j].events.send(Event::Done(Ok(rows)));
            }
        }
    }

    /// Jobs not answered yet.
    fn open_jobs(&self) -> usize {
        self.done.iter().filter(|d| !**d).count()
    }

    /// Every open job's client has gone.
    fn abandoned(&self) -> bool {
        self.jobs
            .iter()
            .zip(&self.done)
            .filter(|(_, d)| !**d)
            .all(|(j, _)| j.events.is_closed())
    }
}

/// Decodes `jobs` as one batch, admitting joinable queued jobs between steps while the batch
/// holds fewer than `max_rows` live rows (step-level continuous batching), and answers each
/// job as soon as its rows have finished.
fn run_batch(
    shared: &Shared,
    generator: &mut dyn Generator,
    jobs: Vec<Job>,
    weights: WeightInfo,
    max_rows: usize,
) {
    let sampling = jobs[0].sub.sampling.clone();
    let seed = jobs[0].sub.seed;
    let mut run = Running::new();
    let mut prompts = vec![];
    for job in jobs {
        prompts.extend(run.add(job, &weights));
    }
    shared.metrics.batch_rows.observe(prompts.len() as f64);
    let batch = Batch {
        prompts,
        sampling: sampling.clone(),
        seed,
    };
    let result = {
        let mut on_step = |step: StepTokens| -> StepControl {
            run.record(step);
            // Stop when told to, or when every client still waiting has gone.
            if shared.abort.load(Ordering::SeqCst) || (run.open_jobs() > 0 && run.abandoned()) {
                return StepControl {
                    stop: true,
                    admit: vec![],
                };
            }
            let mut admit = vec![];
            let mut st = lock(shared);
            // No admissions into a seeded batch, while paused, or with a load waiting (the
            // batch drains so the load can run).
            if seed.is_none() && !st.paused && st.loads.is_empty() && !st.shutdown {
                let mut rest = VecDeque::with_capacity(st.queue.len());
                while let Some(job) = st.queue.pop_front() {
                    let fits = run.live_rows + job.sub.rows.len() <= max_rows;
                    if fits && joinable(&job, &sampling) {
                        let max_tokens = job.sub.sampling.max_tokens;
                        let rows = run.add(job, &weights);
                        admit.extend(rows.into_iter().map(|r| (r, max_tokens)));
                    } else {
                        rest.push_back(job);
                    }
                }
                st.queue = rest;
                shared.metrics.queue_depth.set(st.queue.len() as i64);
            }
            st.running_jobs = run.open_jobs();
            StepControl { stop: false, admit }
        };
        // A panicking generator fails its batch, not the server (the worker thread lives on).
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            generator.generate(&batch, &mut on_step)
        }))
        .map_err(|p| format!("the generator panicked: {}", panic_message(&p)))
        .and_then(|r| r.map_err(|e| format!("generation failed: {e:#}")))
    };
    let result = result.and_then(|seqs| {
        if seqs.len() == run.owner.len() {
            Ok(seqs)
        } else {
            Err(format!(
                "the generator returned {} rows for a batch of {}",
                seqs.len(),
                run.owner.len()
            ))
        }
    });
    match result {
        Ok(seqs) => {
            let mut out: Vec<Vec<Sequence>> = run.jobs.iter().map(|_| vec![]).collect();
            for (seq, &(j, _)) in seqs.into_iter().zip(&run.owner) {
                out[j].push(seq);
            }
            for ((job, rows), done) in run.jobs.iter().zip(out).zip(&run.done) {
                if !done {
                    let _ = job.events.send(Event::Done(Ok(rows)));
                }
            }
        }
        Err(e) => {
            // The log gets everything; clients the first line (a libtorch error goes on with a
            // backtrace: install paths and addresses).
            eprintln!("reinforge serve: batch failed: {e}");
            let e = public_error(&e);
            for (job, done) in run.jobs.iter().zip(&run.done) {
                if !done {
                    let _ = job.events.send(Event::Done(Err(e.clone())));
                }
            }
        }
    }
}

/// What a client is told of a generator error: its first line, at most 300 characters.
pub fn public_error(e: &str) -> String {
    let line = e.lines().next().unwrap_or_default();
    let mut out: String = line.chars().take(300).collect();
    if out.len() < e.len() {
        out.push_str(" (details in the server's log)");
    }
    out
}

fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}
