//! The Tinker API (`reinforge serve --model DIR --tinker`): the REST routes the `tinker`
//! Python SDK (PyPI `tinker` 0.38.0, pinned by scripts/tinker_env.sh) calls, so an unmodified
//! Tinker training loop trains the served model: the client keeps the loop, the server keeps
//! the weights.
//!
//! Routes, request and response field names follow the SDK's own code (`tinker/resources/*.py`
//! for the paths, `tinker/types/*.py` for the fields, `tinker/lib/api_future_impl.py` for the
//! futures protocol, `tinker/proto/` for the protobuf bodies) and the route list of SkyRL's
//! server (`skyrl/tinker/api.py`).
//!
//! | route | answer |
//! |---|---|
//! | `POST /api/v1/client/config`, `/client/dynamic_config` | feature flags: API keys (no JWT), plain httpx, uncompressed protobuf `forward_backward`, per-request futures |
//! | `GET /api/v1/healthz`, `GET /api/v1/get_server_capabilities` | health; the served model with its context length |
//! | `POST /api/v1/create_session`, `/session_heartbeat`, `/sessions/{id}/finish`, `/telemetry` | sessions (closed after `session_timeout` without heartbeat) |
//! | `POST /api/v1/create_model`, `/get_info` | a training model: LoRA (`rank`, `seed`, `train_attn`, `train_mlp`) or full fine-tuning |
//! | `POST /api/v1/forward_backward` | protobuf body; `forward_only` for `forward`; losses `cross_entropy`, `importance_sampling`, `ppo`; a retry (same `seq_id` and body) runs once |
//! | `POST /api/v1/optim_step` | `adam_params` as sent (AdamW); retries as `forward_backward` |
//! | `POST /api/v1/save_weights`, `/load_weights`, `/save_weights_for_sampler` | `tinker://<model_id>/weights/<name>` (with the optimizer's state), `…/sampler_weights/<name>` |
//! | `GET /api/v1/training_runs/{model_id}/checkpoints` | the model's checkpoints |
//! | `POST /api/v1/create_sampling_session`, `GET /api/v1/samplers/{id}`, `POST /api/v1/asample` | sampling from the base or a snapshot, with log-probs; stop token ids or strings |
//! | `POST /api/v1/retrieve_future`, `/cancel_future` | futures |
//!
//! A bad request is a 4xx with `{"error", "field"}` (the SDK raises `BadRequestError`,
//! `NotFoundError`, `UnprocessableEntityError`, ...); too many queued requests of one session
//! is a 429 the SDK retries; a failure while running is a failed future (`RequestFailedError`).
//! docs/tinker.md lists what is not supported.

pub mod backend;
pub mod proto;
pub mod routes;
pub mod sampler;
pub mod state;

use axum::routing::{get, post};
use axum::Router;

pub use backend::TinkerBackend;
pub use state::{Config, Tinker};

/// What the Tinker API runs on: its configuration, the training backend and the sampling
/// engine's generator ([`sampler`]).
pub type Backends = (
    Config,
    Box<dyn TinkerBackend>,
    Box<dyn crate::policy::Generator>,
);

use crate::AppState;

/// The Tinker routes (merged into the app when the server has a Tinker backend).
pub fn routes() -> Router<AppState> {
    use routes::*;
    Router::new()
        .route("/api/v1/client/config", post(client_config))
        .route("/api/v1/client/dynamic_config", post(dynamic_config))
        .route("/api/v1/healthz", get(healthz))
        .route("/api/v1/get_server_capabilities", get(capabilities))
        .route("/api/v1/create_session", post(create_session))
        .route("/api/v1/session_heartbeat", post(session_heartbeat))
        .route("/api/v1/sessions/{id}/finish", post(finish_session))
        .route("/api/v1/telemetry", post(telemetry))
        .route("/api/v1/create_model", post(create_model))
        .route("/api/v1/get_info", post(get_info))
        .route("/api/v1/forward_backward", post(forward_backward))
        .route("/api/v1/optim_step", post(optim_step))
        .route("/api/v1/save_weights", post(save_weights))
        .route("/api/v1/load_weights", post(load_weights))
        .route(
            "/api/v1/save_weights_for_sampler",
            post(save_weights_for_sampler),
        )
        .route(
            "/api/v1/training_runs/{id}/checkpoints",
            get(list_checkpoints),
        )
        .route(
            "/api/v1/create_sampling_session",
            post(create_sampling_session),
        )
        .route("/api/v1/samplers/{id}", get(get_sampler))
        .route("/api/v1/asample", post(asample))
        .route("/api/v1/retrieve_future", post(retrieve_future))
        .route("/api/v1/cancel_future", post(cancel_future))
}
