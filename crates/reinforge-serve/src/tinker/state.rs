//! The server's bookkeeping: sessions and their heartbeats, training models, sampling
//! sessions, checkpoints, and the futures store, plus the worker thread that owns the
//! [`TinkerBackend`] and runs queued training work in arrival order, and the sampling engine
//! ([`super::sampler`]) on a thread of its own.
//!
//! Futures follow the SDK's protocol (`tinker/lib/api_future_impl.py`): a request returns
//! `{"request_id"}` at once, the work runs on the worker, and `retrieve_future` answers the
//! result, `{"error", "category"}` for a failed request, or `{"type": "try_again"}` when it is
//! still running after a long poll.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use super::backend::{TinkerBackend, Weights};
use crate::metrics::PolicyMetrics;
use crate::policy::{Engine, Generator};

/// What `--tinker` was started with.
#[derive(Debug, Clone)]
pub struct Config {
    /// The `base_model` clients name (the served model's name).
    pub base_model: String,
    /// Where `save_weights` writes (`<dir>/<model_id>/weights/<name>`).
    pub checkpoint_dir: PathBuf,
    /// Training models one session may hold at once.
    pub max_models_per_session: usize,
    /// Sessions open at once, over all clients (`create_session` beyond: 429 until one ends).
    pub max_sessions: usize,
    /// Full fine-tuning models (each a whole copy of the base model with its optimiser
    /// state) held at once, over all sessions; LoRA models share the base and count only
    /// per session.
    pub max_full_models: usize,
    /// Checkpoints one training model may hold on disk (`save_weights` and named
    /// `save_weights_for_sampler`); replacing one with `overwrite` adds none.
    pub max_checkpoints_per_model: usize,
    /// Requests of one session queued or running at once (more: 429, which the SDK retries).
    pub max_pending_per_session: usize,
    /// Sampler snapshots kept per training model; older ones are dropped.
    pub max_snapshots_per_model: usize,
    /// A session without a heartbeat for this long is closed and its models freed.
    pub session_timeout: Duration,
    /// Rows of different `asample` requests the sampling engine decodes in one batch at most
    /// (`--max-batch-rows`).
    pub max_batch_rows: usize,
}

/// A finished request's result.
#[derive(Debug, Clone, PartialEq)]
pub enum Payload {
    Json(serde_json::Value),
    /// Protobuf bytes (`ForwardBackwardOutput`, `SampleResponse`).
    Proto(Vec<u8>),
}

/// A failed request: the message and the SDK's `RequestErrorCategory` (`user` or `server`).
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub message: String,
    pub category: &'static str,
}

impl Failure {
    pub fn server(e: anyhow::Error) -> Self {
        Self {
            message: format!("{e:#}"),
            category: "server",
        }
    }
}

/// The state of one future.
#[derive(Debug, Clone, PartialEq)]
pub enum FutureState {
    Pending,
    Done(Result<Payload, Failure>),
}

struct FutureEntry {
    session: Option<String>,
    state: FutureState,
    /// When the result was first handed out (kept a while for a retried retrieve).
    retrieved: Option<Instant>,
}

/// One client session (`create_session`).
pub struct Session {
    pub last_heartbeat: Instant,
    pub models: Vec<String>,
}

/// A checkpoint of a training model.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    /// `weights/<name>` or `sampler_weights/<name>`.
    pub checkpoint_id: String,
    /// `training` or `sampler`.
    pub kind: &'static str,
    pub time: SystemTime,
    pub path: PathBuf,
}

/// A training model (`create_model`).
pub struct Model {
    pub session: String,
    pub lora_rank: Option<usize>,
    pub checkpoints: Vec<Checkpoint>,
    /// Sampler snapshots of this model, oldest first.
    pub snapshots: Vec<String>,
    /// This model's latest requests by `seq_id`: the request's fingerprint and its future
    /// ([`Tinker::submit_once`]).
    pub seen: BTreeMap<i64, (u64, u64)>,
}

/// `seq_id`s remembered per model: a retry comes seconds after the request it repeats.
const SEEN_PER_MODEL: usize = 1024;

/// A sampling session (`create_sampling_session`, `save_weights_for_sampler`).
pub struct Sampler {
    pub session: String,
    pub weights: Weights,
    pub model_path: Option<String>,
}

/// Everything behind the lock.
#[derive(Default)]
pub struct Store {
    pub sessions: HashMap<String, Session>,
    pub models: HashMap<String, Model>,
    pub samplers: HashMap<String, Sampler>,
    /// `tinker://…/sampler_weights/…` paths and the snapshot holding them.
    pub sampler_paths: HashMap<String, String>,
    futures: HashMap<u64, FutureEntry>,
}

impl Store {
    /// A fresh id with `prefix` (`session_…`, `model_…`, `sampler_…`): 128 bits of the
    /// thread's CSPRNG, so an id is a capability. Every client of a server holds the same API
    /// key, and requests name a model, sampler or future by id alone (the SDK's protocol), so
    /// a client reaches only what it was handed the id of; sequential ids let one client read,
    /// train, overwrite and end another's (issue 50's audit).
    pub fn fresh(&mut self, prefix: &str) -> String {
        format!("{prefix}_{:032x}", rand::random::<u128>())
    }

    /// Full fine-tuning models held, over all sessions.
    pub fn full_models(&self) -> usize {
        self.models
            .values()
            .filter(|m| m.lora_rank.is_none())
            .count()
    }

    /// A new future of `session` in `state`; returns its id. Results handed out over a minute
    /// ago are dropped first (they are not asked for again), whichever kind of request adds one.
    fn insert_future(&mut self, session: Option<String>, state: FutureState) -> u64 {
        self.futures.retain(|_, f| {
            f.retrieved
                .is_none_or(|t| t.elapsed() < Duration::from_secs(60))
        });
        // Random for the reason of [`Self::fresh`]; below 2^53 so that a client reading the
        // id as a JSON number keeps it exact.
        let id = loop {
            let id = rand::random::<u64>() >> 11;
            if id != 0 && !self.futures.contains_key(&id) {
                break id;
            }
        };
        self.futures.insert(
            id,
            FutureEntry {
                session,
                state,
                retrieved: None,
            },
        );
        id
    }

    /// Requests of `session` not yet finished.
    pub fn pending_of(&self, session: &str) -> usize {
        self.futures
            .values()
            .filter(|f| f.state == FutureState::Pending && f.session.as_deref() == Some(session))
            .count()
    }

    /// Closes sessions whose heartbeat stopped longer than `timeout` ago; returns their
    /// models and snapshots, for the worker to free.
    pub fn expire(&mut self, timeout: Duration) -> (Vec<String>, Vec<String>) {
        let dead: Vec<String> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.last_heartbeat.elapsed() > timeout)
            .map(|(id, _)| id.clone())
            .collect();
        let (mut models, mut snapshots) = (vec![], vec![]);
        for id in dead {
            self.sessions.remove(&id);
            let gone: Vec<String> = self
                .models
                .iter()
                .filter(|(_, m)| m.session == id)
                .map(|(k, _)| k.clone())
                .collect();
            for m in gone {
                if let Some(model) = self.models.remove(&m) {
                    snapshots.extend(model.snapshots);
                }
                models.push(m);
            }
            self.samplers.retain(|_, s| s.session != id);
            // Its results nobody will ask for any more.
            self.futures
                .retain(|_, f| f.session.as_deref() != Some(id.as_str()));
        }
        (models, snapshots)
    }
}

/// Work for the worker: runs on the backend, returns the future's result.
pub type Work = Box<dyn FnOnce(&mut dyn TinkerBackend) -> Result<Payload, Failure> + Send>;

/// The Tinker service: configuration, the store and the worker's queue.
pub struct Tinker {
    pub config: Config,
    pub max_context: usize,
    pub vocab_size: usize,
    pub eos: Vec<i64>,
    /// The backend honours stop strings ([`TinkerBackend::decodes_text`]).
    pub decodes_text: bool,
    store: Arc<Mutex<Store>>,
    queue: Mutex<mpsc::Sender<(u64, Work)>>,
    /// The sampling engine (`asample`), beside the training worker.
    pub sampler: Engine,
}

impl Tinker {
    /// Starts the worker thread that owns `backend` and the sampling engine over `sampler`
    /// (which finds the snapshots `backend` takes).
    pub fn new(
        config: Config,
        backend: Box<dyn TinkerBackend>,
        sampler: Box<dyn Generator>,
        metrics: PolicyMetrics,
    ) -> std::io::Result<Self> {
        let (max_context, vocab_size, eos, decodes_text) = (
            backend.max_context(),
            backend.vocab_size(),
            backend.eos_token_ids(),
            backend.decodes_text(),
        );
        let store = Arc::new(Mutex::new(Store::default()));
        let (tx, rx) = mpsc::channel::<(u64, Work)>();
        let worker_store = store.clone();
        std::thread::Builder::new()
            .name("reinforge-tinker".into())
            .spawn(move || {
                let mut backend = backend;
                for (id, work) in rx {
                    // A panic in the backend fails this request, not the server.
                    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        work(backend.as_mut())
                    }))
                    .unwrap_or_else(|_| {
                        Err(Failure {
                            message: "the model worker failed on this request".into(),
                            category: "server",
                        })
                    });
                    if let Some(f) = lock(&worker_store).futures.get_mut(&id) {
                        f.state = FutureState::Done(result);
                    }
                }
            })?;
        let sampler = super::sampler::start(sampler, config.max_batch_rows, metrics);
        Ok(Self {
            config,
            max_context,
            vocab_size,
            eos,
            decodes_text,
            store,
            queue: Mutex::new(tx),
            sampler,
        })
    }

    /// The store, locked.
    pub fn store(&self) -> MutexGuard<'_, Store> {
        lock(&self.store)
    }

    /// Queues `work` as a new future of `session` and returns its id.
    pub fn submit(&self, session: Option<String>, work: Work) -> u64 {
        let id = self.store().insert_future(session, FutureState::Pending);
        let sent = lock(&self.queue).send((id, work));
        if sent.is_err() {
            self.finish(
                id,
                Err(Failure {
                    message: "the model worker has stopped".into(),
                    category: "server",
                }),
            );
        }
        id
    }

    /// Queues `work` for training model `model_id` unless the same request (`seq_id` and
    /// `fingerprint`, a hash of its body) was queued before, whose future id it then returns:
    /// the SDK numbers a training client's requests (`seq_id = request_id + 1`,
    /// `tinker/lib/public_interfaces/training_client.py`) and sends a request again when it
    /// did not see the answer (a lost connection, a 5xx), which must not apply a step twice.
    /// Another body under a known `seq_id` (a second client object on the same model counts
    /// from 1 again) is new work; a `seq_id` of 0 (unset) is never de-duplicated.
    pub fn submit_once(
        &self,
        model_id: &str,
        (seq_id, fingerprint): (i64, u64),
        session: String,
        work: Work,
    ) -> u64 {
        if seq_id != 0 {
            let s = self.store();
            let earlier = s
                .models
                .get(model_id)
                .and_then(|m| m.seen.get(&seq_id).copied())
                .filter(|&(f, id)| f == fingerprint && s.futures.contains_key(&id));
            if let Some((_, id)) = earlier {
                return id;
            }
        }
        let id = self.submit(Some(session), work);
        if seq_id != 0 {
            if let Some(m) = self.store().models.get_mut(model_id) {
                m.seen.insert(seq_id, (fingerprint, id));
                while m.seen.len() > SEEN_PER_MODEL {
                    m.seen.pop_first();
                }
            }
        }
        id
    }

    /// A future that is already complete (requests answered without the model).
    pub fn ready(&self, session: Option<String>, result: Result<Payload, Failure>) -> u64 {
        self.store()
            .insert_future(session, FutureState::Done(result))
    }

    /// A pending future of `session` for work run elsewhere (the sampling engine), completed
    /// by [`Self::finish`].
    pub fn pending(&self, session: Option<String>) -> u64 {
        self.store().insert_future(session, FutureState::Pending)
    }

    /// Completes future `id` (gone with its expired session: ignored).
    pub fn finish(&self, id: u64, result: Result<Payload, Failure>) {
        if let Some(f) = self.store().futures.get_mut(&id) {
            f.state = FutureState::Done(result);
        }
    }

    /// The state of future `id` (`None`: no such future), marked retrieved when done.
    pub fn poll(&self, id: u64) -> Option<FutureState> {
        let mut s = self.store();
        let f = s.futures.get_mut(&id)?;
        if matches!(f.state, FutureState::Done(_)) && f.retrieved.is_none() {
            f.retrieved = Some(Instant::now());
        }
        Some(f.state.clone())
    }

    /// Frees the models and snapshots of sessions whose heartbeat stopped.
    pub fn expire_sessions(&self) {
        let (models, snapshots) = self.store().expire(self.config.session_timeout);
        if models.is_empty() && snapshots.is_empty() {
            return;
        }
        self.submit(
            None,
            Box::new(move |b: &mut dyn TinkerBackend| {
                for m in &models {
                    b.drop_model(m);
                }
                for s in &snapshots {
                    b.drop_model(s);
                }
                Ok(Payload::Json(serde_json::Value::Null))
            }),
        );
    }

    /// Checkpoints of `model_id`, oldest first.
    pub fn checkpoints(&self, model_id: &str) -> Option<Vec<Checkpoint>> {
        self.store()
            .models
            .get(model_id)
            .map(|m| m.checkpoints.clone())
    }

    /// Metadata for `get_info`.
    pub fn model_info(&self, model_id: &str) -> Option<BTreeMap<&'static str, serde_json::Value>> {
        let s = self.store();
        let m = s.models.get(model_id)?;
        Some(BTreeMap::from([
            ("is_lora", serde_json::Value::Bool(m.lora_rank.is_some())),
            ("lora_rank", serde_json::json!(m.lora_rank)),
        ]))
    }
}

/// Locks `m`, recovering from a poisoned lock (a panicking holder leaves plain data behind).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A hash of a request's body, telling a retried request from another one with its `seq_id`.
pub fn fingerprint(body: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    body.hash(&mut h);
    h.finish()
}
