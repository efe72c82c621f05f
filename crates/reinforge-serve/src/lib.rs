//! The HTTP reward and sandbox server behind `reinforge serve` (and the standalone
//! `reinforge-serve` binary, which needs no libtorch).
//!
//! | route | protocol |
//! |---|---|
//! | `POST /get_reward` | OpenRLHF's remote reward model (`--remote_rm_url`), see [`routes::openrlhf`] |
//! | `POST /run_code` | SandboxFusion's `run_code` (Python, Bash), see [`routes::sandboxfusion`] |
//! | `POST /v1/verify` | batches of math checks, see [`routes::verify`] |
//! | `GET /health` | liveness |
//! | `GET /metrics` | Prometheus text: requests by route/status, latency, in-flight, queued, rewards, checks, sandbox runs; policy requests, tokens, batch rows, queue depth, weight loads |
//! | `GET /v1/models`, `POST /v1/completions`, `POST /v1/chat/completions` | OpenAI API with vLLM's extensions, with `--model` ([`policy`]) |
//! | `/api/v1/...` (the Tinker SDK's routes) | the Tinker training API, with `--tinker` ([`tinker`]) |
//! | `POST /pause_generation`, `/continue_generation`, `/update_weights_from_disk`, `GET /get_weight_version` (SGLang names); `POST /pause`, `/resume`, `GET /is_paused` (vLLM names) | weight updates on the served policy ([`policy`]) |
//!
//! The policy routes exist only when [`run_with_policy`] is given a [`Generator`] (the
//! `reinforge` binary's, over libtorch); they have their own bounded queue
//! (`--max-queued-requests`) and worker thread instead of the work routes' admission control.
//!
//! Access: `--api-key` (or `REINFORGE_API_KEY`) on every route but `/health`, `--admin-key` on
//! the weight, pause and metrics routes ([`auth`]); a non-loopback `--host` without a key is
//! refused unless `--insecure-no-auth`. docs/security.md has the threat model.
//!
//! Load handling: bodies over `--max-body-bytes` get 413, and verify and reward requests asking
//! for more than `--max-verify-bytes` of work too; the reward and verify routes admit
//! `--max-concurrency` requests at once and /run_code `--sandbox-max-concurrency` in slots of
//! its own, each queueing `--max-queue` more, then answering 503 + `Retry-After` ([`limit`]);
//! malformed bodies get a JSON error naming the field ([`error`]); CPU work (scoring,
//! verification) runs on a rayon pool of `--workers` threads and sandbox runs on tokio's
//! blocking pool, never on the async workers. SIGINT/SIGTERM stop accepting and finish the
//! requests in flight.
//!
//! Clients: OpenRLHF trains against it with `--remote_rm_url http://HOST:PORT/get_reward`
//! (and `--label_key` naming the answer column); SandboxFusion clients (its SDK, verl's
//! sandbox-fusion reward) use the base URL `http://HOST:PORT`. Standard-library Python clients
//! that also self-test a server: `scripts/clients/openrlhf_remote_reward.py`,
//! `scripts/clients/sandboxfusion_client.py`. Load test: `scripts/bench_serve.sh`.

pub mod args;
pub mod auth;
pub mod error;
pub mod heap;
pub mod limit;
pub mod metrics;
pub mod policy;
pub mod routes;
pub mod tinker;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result};
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Router;
use reinforge_reward::{ModelLoader, ModelScorer, Reward, RewardSpec};
use reinforge_sandbox::Sandbox;

pub use args::ServeArgs;
use error::ApiError;
use limit::{Admission, Slot};
use metrics::Metrics;
pub use policy::Generator;

/// Everything a request handler needs; cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub reward: Arc<Reward>,
    pub sandbox: Option<Sandbox>,
    /// Why the sandbox's self-test failed at start, if it did (runs then report SandboxError).
    pub sandbox_problem: Option<String>,
    pub pool: Arc<rayon::ThreadPool>,
    pub metrics: Arc<Metrics>,
    /// Slots of the reward and verify routes (`--max-concurrency`).
    pub admission: Arc<Admission>,
    /// Slots of /run_code (`--sandbox-max-concurrency`), apart so runs never delay a verify.
    pub sandbox_admission: Arc<Admission>,
    pub max_body_bytes: usize,
    /// `--max-verify-bytes`: the work one verify or reward request may ask for.
    pub max_verify_bytes: usize,
    /// The served policy (OpenAI routes), when the caller passed a generator.
    pub policy: Option<Arc<policy::Policy>>,
    /// `--api-key`, `--admin-key` ([`auth`]).
    pub keys: Arc<auth::Keys>,
    /// `--body-read-timeout-s`.
    pub body_timeout: std::time::Duration,
    /// `--header-read-timeout-s` ([`serve`]'s connections).
    pub header_timeout: std::time::Duration,
    /// `--sandbox-max-fetch-files`, `--sandbox-max-fetch-bytes`.
    pub fetch_caps: routes::sandboxfusion::FetchCaps,
    /// The Tinker API (`--tinker`), when the caller passed a backend ([`AppState::with_tinker`]).
    pub tinker: Option<Arc<tinker::Tinker>>,
}

impl AppState {
    /// Loads the reward spec, starts the sandbox (unless `--no-sandbox`) and the worker pool.
    pub fn new(args: &ServeArgs) -> Result<Self> {
        Self::with_policy(args, None, &no_models)
    }

    /// [`AppState::new`], plus the policy routes over `generator` when one is given (its
    /// tokenizer from `--model`); `models` loads the reward spec's `type = "model"` components.
    pub fn with_policy(
        args: &ServeArgs,
        generator: Option<Box<dyn Generator>>,
        models: ModelLoader,
    ) -> Result<Self> {
        let keys = args.keys()?;
        let body_timeout = args.body_read_timeout()?;
        let header_timeout = args.header_read_timeout()?;
        let metrics = Arc::new(Metrics::new());
        let policy = match generator {
            Some(g) => Some(Arc::new(policy::Policy::new(
                args,
                g,
                metrics.policy.clone(),
            )?)),
            None if args.model.is_some() => anyhow::bail!(
                "--model needs a generator: serve models with the `reinforge` binary (libtorch); \
                 the standalone reinforge-serve binary serves rewards and sandboxes only"
            ),
            None => None,
        };
        let spec = match &args.reward {
            Some(p) => RewardSpec::load(p)?,
            None => RewardSpec::default(),
        };
        // Checked with --no-sandbox too: a bad flag is an error whichever flags accompany it.
        let caps = args.sandbox_caps()?;
        let sandbox = if args.no_sandbox {
            None
        } else {
            Some(Sandbox::new(caps).context("starting the sandbox (--no-sandbox disables it)")?)
        };
        let sandbox_problem = sandbox.as_ref().and_then(|s| s.self_test().err()).map(|e| {
            let e = format!("{e:#}");
            eprintln!("reinforge serve: warning: the sandbox cannot run code on this host: {e}");
            e
        });
        let reward =
            Reward::with_models(spec, sandbox.clone(), models).context("building the reward")?;
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(args.worker_threads())
            .thread_name(|i| format!("reinforge-score-{i}"))
            .build()?;
        Ok(AppState {
            reward: Arc::new(reward),
            sandbox,
            sandbox_problem,
            pool: Arc::new(pool),
            metrics,
            admission: Arc::new(Admission::new(
                args.concurrency(),
                args.max_queue,
                "--max-concurrency + --max-queue",
            )),
            sandbox_admission: Arc::new(Admission::new(
                args.sandbox_concurrency(),
                args.max_queue,
                "--sandbox-max-concurrency + --max-queue",
            )),
            max_body_bytes: args.max_body_bytes,
            max_verify_bytes: args.max_verify_bytes,
            policy,
            keys: Arc::new(keys),
            body_timeout,
            header_timeout,
            fetch_caps: routes::sandboxfusion::FetchCaps {
                files: args.sandbox_max_fetch_files,
                bytes: args.sandbox_max_fetch_bytes,
            },
            tinker: None,
        })
    }

    /// Adds the Tinker routes over `backend` (training) and `sampler` (the sampling engine's
    /// generator, [`tinker::sampler`]).
    pub fn with_tinker(
        mut self,
        config: tinker::Config,
        backend: Box<dyn tinker::TinkerBackend>,
        sampler: Box<dyn Generator>,
    ) -> Result<Self> {
        std::fs::create_dir_all(&config.checkpoint_dir).with_context(|| {
            format!(
                "creating the Tinker checkpoint directory {}",
                config.checkpoint_dir.display()
            )
        })?;
        let metrics = self.metrics.tinker_sampler.clone();
        self.tinker = Some(Arc::new(tinker::Tinker::new(
            config, backend, sampler, metrics,
        )?));
        Ok(self)
    }

    /// Runs blocking work `f` on tokio's blocking pool, holding `slot` until it is done.
    pub async fn blocking<T: Send + 'static>(
        &self,
        slot: Slot,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, ApiError> {
        tokio::task::spawn_blocking(move || {
            let _slot = slot;
            f()
        })
        .await
        .map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("worker failed: {e}"),
            )
        })
    }
}

/// The router: work routes behind admission control (reward and verify in one group, /run_code
/// in its own), every route counted and timed.
pub fn app(state: AppState) -> Router {
    let work = Router::new()
        .route("/get_reward", post(routes::openrlhf::get_reward))
        .route("/v1/verify", post(routes::verify::verify))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            limit::admit,
        ));
    let sandbox = Router::new()
        .route("/run_code", post(routes::sandboxfusion::run_code))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            limit::admit_sandbox,
        ));
    let mut router = Router::new()
        .route("/health", get(routes::health))
        .route("/metrics", get(routes::metrics))
        .merge(work)
        .merge(sandbox);
    if state.policy.is_some() {
        router = router.merge(policy::routes());
    }
    if state.tinker.is_some() {
        router = router.merge(tinker::routes());
    }
    router
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such route") })
        // Innermost first: the body is read (with its timeout) after the key is checked and
        // before a work route's admission takes a slot.
        .layer(axum::middleware::from_fn_with_state(
            limit::BodyRead {
                max_body_bytes: state.max_body_bytes,
                body_timeout: state.body_timeout,
            },
            limit::read_body,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.keys.clone(),
            auth::check,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            metrics::track,
        ))
        .layer(DefaultBodyLimit::max(state.max_body_bytes))
        .with_state(state)
}

/// Serves `state` on `listener` until `shutdown` completes, then finishes the requests in
/// flight and returns. HTTP/1 connections under hyper directly rather than `axum::serve`,
/// which sets no timer and so no deadline on a request's headers: here a connection that has
/// not sent its headers `state.header_timeout` after the server began waiting for them (idle
/// after a response too) is closed.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use hyper_util::rt::{TokioIo, TokioTimer};
    let header_timeout = state.header_timeout;
    let router = app(state);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                // Out of file descriptors and the like: wait, as axum::serve does, then go on.
                Err(_) => {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let service = hyper_util::service::TowerToHyperService::new(router.clone());
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(header_timeout)
            .serve_connection(TokioIo::new(stream), service);
        let watched = graceful.watch(conn);
        tokio::spawn(async move {
            let _ = watched.await;
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// Completes on the first SIGINT or SIGTERM; a second one exits at once (status 130).
pub async fn shutdown_signal() {
    one_signal().await;
    eprintln!(
        "reinforge serve: shutting down, finishing the requests in flight (again to quit now)"
    );
    tokio::spawn(async {
        one_signal().await;
        eprintln!("reinforge serve: second signal, exiting without finishing");
        std::process::exit(130);
    });
}

async fn one_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}

/// Entry point of `reinforge serve` without a model: builds the runtime, binds, serves until a
/// signal.
pub fn run(args: &ServeArgs) -> Result<()> {
    run_with_policy(args, None, &no_models)
}

/// The model loader of the standalone server: it has no libtorch, so a `type = "model"`
/// component is an error that says where to serve it.
pub fn no_models(name: &str, _: reinforge_reward::Learned) -> Result<Arc<dyn ModelScorer>> {
    anyhow::bail!(
        "component `{name}` needs libtorch: serve reward models and judges with the `reinforge` binary"
    )
}

/// Entry point of `reinforge serve --model DIR`: [`run`], plus the OpenAI-compatible policy
/// routes over `generator` (the `reinforge` binary builds it from `--model` and `--lora`; this
/// crate reads only the tokenizer there). `None` serves rewards and sandboxes only (and is an
/// error with `--model`). `models` loads the reward spec's `type = "model"` components.
pub fn run_with_policy(
    args: &ServeArgs,
    generator: Option<Box<dyn Generator>>,
    models: ModelLoader,
) -> Result<()> {
    run_with_backends(args, generator, None, models)
}

/// [`run_with_policy`], plus the Tinker API ([`tinker`]) over a training backend and a
/// sampling generator when given.
pub fn run_with_backends(
    args: &ServeArgs,
    generator: Option<Box<dyn Generator>>,
    tinker: Option<tinker::Backends>,
    models: ModelLoader,
) -> Result<()> {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .try_init();
    let mut state = AppState::with_policy(args, generator, models)?;
    if let Some((config, backend, sampler)) = tinker {
        state = state.with_tinker(config, backend, sampler)?;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("reinforge-serve")
        .build()?;
    rt.block_on(async {
        let addr = format!("{}:{}", args.host, args.port);
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .with_context(|| format!("binding {addr} (--host, --port)"))?;
        let local: SocketAddr = listener.local_addr()?;
        args.check_exposure(local.ip())?;
        eprintln!(
            "reinforge serve: listening on http://{local} (reward components: {}; sandbox: {}; workers {}, concurrency {} (run_code {}), queue {})",
            state.reward.spec().components.keys().cloned().collect::<Vec<_>>().join(", "),
            sandbox_summary(state.sandbox.as_ref()),
            args.worker_threads(),
            args.concurrency(),
            args.sandbox_concurrency(),
            args.max_queue,
        );
        if let Some(p) = &state.policy {
            let (w, _) = p.engine.info();
            eprintln!(
                "reinforge serve: policy `{}` (max_model_len {}, weight version {}, checksum {}, batch rows {}, queue {}): /v1/completions, /v1/chat/completions",
                p.served.name,
                p.served.max_model_len,
                w.weight_version,
                w.checksum,
                args.max_batch_rows,
                args.max_queued_requests,
            );
        }
        if let Some(t) = &state.tinker {
            eprintln!(
                "reinforge serve: Tinker API on base model `{}` (context {}; checkpoints in {}): base_url http://{local}",
                t.config.base_model,
                t.max_context,
                t.config.checkpoint_dir.display(),
            );
        }
        serve(listener, state, shutdown_signal()).await?;
        eprintln!("reinforge serve: stopped");
        Ok(())
    })
}

/// The sandbox as the startup line names it: off, or on with what limits a run's processes
/// together (`--sandbox-memory-mb`'s help says which applies where).
fn sandbox_summary(sandbox: Option<&Sandbox>) -> String {
    match sandbox.map(Sandbox::per_run_limits) {
        None => "off".into(),
        Some(reinforge_sandbox::PerRunLimits::Cgroup(root)) => {
            format!("on, a cgroup per run under {}", root.display())
        }
        Some(reinforge_sandbox::PerRunLimits::Watchdog(why)) => {
            format!("on, per-run memory and CPU by the watchdog: {why}")
        }
    }
}
