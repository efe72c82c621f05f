//! The handlers of the Tinker routes ([`super::routes`]). Each checks its request completely
//! (ids, lengths, options this server cannot honour) before queueing work, so a bad request
//! is a 4xx naming the field and never reaches the model.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use prost::Message;
use serde::Deserialize;
use serde_json::{json, Value};

use super::backend::{AdamParams, Datum, Lora, LossFn, Sampling, Weights, LOSS_NAMES};
use super::proto;
use super::state::{Checkpoint, Failure, FutureState, Model, Payload, Sampler, Session, Tinker};
use crate::error::{ApiError, ApiJson};
use crate::AppState;

type Answer = Result<Json<Value>, ApiError>;

/// The Tinker service of `state` (the routes exist only when it is there).
fn service(state: &AppState) -> Result<Arc<Tinker>, ApiError> {
    state.tinker.clone().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "this server has no Tinker backend (--tinker)",
        )
    })
}

/// 400 about `field`.
fn bad(field: impl Into<String>, message: impl Into<String>) -> ApiError {
    ApiError {
        status: StatusCode::BAD_REQUEST,
        message: message.into(),
        field: Some(field.into()),
        retry_after: None,
    }
}

fn not_found(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, message)
}

/// The SDK's `UntypedAPIFuture`.
fn future(id: u64, model_id: Option<&str>) -> Json<Value> {
    Json(json!({"request_id": id.to_string(), "model_id": model_id}))
}

/// `POST /api/v1/client/config`: the flags of `ClientConfigResponse` this server needs: API
/// keys rather than JWT exchange, httpx's own transport, uncompressed protobuf
/// `forward_backward` bodies, one `retrieve_future` per request.
pub async fn client_config() -> Json<Value> {
    Json(json!({
        "pjwt_auth_enabled": false,
        "credential_default_source": "api_key",
        "use_pyqwest_transport": false,
        "proto_compress_fwdbwd": false,
        "parallel_fwdbwd_chunks": true,
        "sample_use_retrieve_futures": false,
        "custom_loss_server_side": false,
        "sample_join_sampling_session": false,
    }))
}

/// `POST /api/v1/client/dynamic_config`: the SDK's defaults (no explicit sample cancels).
pub async fn dynamic_config() -> Json<Value> {
    Json(json!({"refresh_interval_sec": 300, "sample_cancel_enabled": false}))
}

/// `GET /api/v1/healthz`.
pub async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// `GET /api/v1/get_server_capabilities`: the one model served.
pub async fn capabilities(State(state): State<AppState>) -> Answer {
    let t = service(&state)?;
    Ok(Json(json!({
        "supported_models": [{
            "model_name": t.config.base_model,
            "max_context_length": t.max_context,
            "trainable": true,
            "sampleable": true,
        }],
        "supported_loss_fns": LOSS_NAMES,
    })))
}

/// `POST /api/v1/create_session`.
pub async fn create_session(State(state): State<AppState>) -> Answer {
    let t = service(&state)?;
    t.expire_sessions();
    let mut s = t.store();
    let id = s.fresh("session");
    s.sessions.insert(
        id.clone(),
        Session {
            last_heartbeat: Instant::now(),
            models: vec![],
        },
    );
    Ok(Json(json!({"type": "create_session", "session_id": id})))
}

#[derive(Deserialize)]
pub struct SessionRef {
    session_id: String,
}

/// `POST /api/v1/session_heartbeat`: 404 for a session that does not exist (or expired).
pub async fn session_heartbeat(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<SessionRef>,
) -> Answer {
    let t = service(&state)?;
    let mut s = t.store();
    let session = s
        .sessions
        .get_mut(&req.session_id)
        .ok_or_else(|| not_found(format!("no session `{}`", req.session_id)))?;
    session.last_heartbeat = Instant::now();
    Ok(Json(json!({"type": "session_heartbeat"})))
}

/// `POST /api/v1/sessions/{id}/finish`: the session ends; its models are freed.
pub async fn finish_session(State(state): State<AppState>, Path(id): Path<String>) -> Answer {
    let t = service(&state)?;
    if let Some(s) = t.store().sessions.get_mut(&id) {
        // Expired at the next sweep.
        s.last_heartbeat = Instant::now() - t.config.session_timeout - Duration::from_secs(1);
    }
    t.expire_sessions();
    Ok(Json(json!({})))
}

/// `POST /api/v1/telemetry`: accepted and dropped (this server keeps no telemetry).
pub async fn telemetry() -> Json<Value> {
    Json(json!({"status": "accepted"}))
}

#[derive(Deserialize)]
pub struct LoraConfig {
    rank: usize,
    #[serde(default)]
    seed: Option<u64>,
    #[serde(default = "yes")]
    train_mlp: bool,
    #[serde(default = "yes")]
    train_attn: bool,
    #[serde(default = "yes")]
    #[allow(dead_code)]
    train_unembed: bool,
}

fn yes() -> bool {
    true
}

#[derive(Deserialize)]
pub struct OptimizerConfig {
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Deserialize)]
pub struct CreateModel {
    session_id: String,
    base_model: String,
    #[serde(default)]
    lora_config: Option<LoraConfig>,
    #[serde(default)]
    optimizer_config: Option<OptimizerConfig>,
}

/// Largest LoRA rank accepted.
const MAX_LORA_RANK: usize = 1024;

/// `POST /api/v1/create_model`: a LoRA (or, without `lora_config`, full) training model.
pub async fn create_model(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<CreateModel>,
) -> Answer {
    let t = service(&state)?;
    check_base_model(&t, &req.base_model, "base_model")?;
    if let Some(o) = &req.optimizer_config {
        if o.kind != "adamw" {
            return Err(bad(
                "optimizer_config.type",
                format!("optimizer `{}` is not supported: only `adamw`", o.kind),
            ));
        }
    }
    let lora = match &req.lora_config {
        Some(l) if l.rank == 0 || l.rank > MAX_LORA_RANK => {
            return Err(bad(
                "lora_config.rank",
                format!("rank {} is outside 1..={MAX_LORA_RANK}", l.rank),
            ))
        }
        Some(l) if !l.train_attn && !l.train_mlp => {
            return Err(bad(
                "lora_config",
                "train_attn and train_mlp are both false: reinforge has no adapter on the unembedding alone",
            ))
        }
        Some(l) => Some(Lora {
            rank: l.rank,
            seed: l.seed,
            train_attn: l.train_attn,
            train_mlp: l.train_mlp,
        }),
        None => None,
    };
    let model_id = register_model(&t, &req.session_id, lora.as_ref().map(|l| l.rank), None)?;
    let m = model_id.clone();
    let id = t.submit(
        Some(req.session_id.clone()),
        Box::new(move |b| {
            b.create_model(&m, lora.as_ref()).map_err(Failure::server)?;
            Ok(Payload::Json(
                json!({"model_id": m, "type": "create_model"}),
            ))
        }),
    );
    Ok(future(id, Some(&model_id)))
}

/// Adds training model `id` (a fresh `model_N` when `None`) to `session`, within the
/// per-session limit.
fn register_model(
    t: &Tinker,
    session: &str,
    lora_rank: Option<usize>,
    id: Option<String>,
) -> Result<String, ApiError> {
    let mut s = t.store();
    let held = s
        .sessions
        .get(session)
        .ok_or_else(|| not_found(format!("no session `{session}`")))?
        .models
        .len();
    if held >= t.config.max_models_per_session {
        return Err(bad(
            "session_id",
            format!(
                "session `{session}` already holds {held} models, the server's limit per session"
            ),
        ));
    }
    let id = match id {
        Some(id) if s.models.contains_key(&id) => {
            return Err(bad("model_seq_id", format!("model `{id}` exists")))
        }
        Some(id) => id,
        None => s.fresh("model"),
    };
    s.models.insert(
        id.clone(),
        Model {
            session: session.to_string(),
            lora_rank,
            checkpoints: vec![],
            snapshots: vec![],
        },
    );
    if let Some(sess) = s.sessions.get_mut(session) {
        sess.models.push(id.clone());
    }
    Ok(id)
}

/// 400 unless `name` is the served model.
fn check_base_model(t: &Tinker, name: &str, field: &str) -> Result<(), ApiError> {
    if name == t.config.base_model {
        return Ok(());
    }
    Err(bad(
        field,
        format!(
            "base model `{name}` is not served here; this server trains `{}`",
            t.config.base_model
        ),
    ))
}

/// The session owning `model_id`, or 404.
fn model_session(t: &Tinker, model_id: &str) -> Result<String, ApiError> {
    t.store()
        .models
        .get(model_id)
        .map(|m| m.session.clone())
        .ok_or_else(|| not_found(format!("no model `{model_id}`")))
}

/// 429 (which the SDK retries after a pause) when `session` has too many requests queued.
fn check_pending(t: &Tinker, session: &str) -> Result<(), ApiError> {
    let n = t.store().pending_of(session);
    if n >= t.config.max_pending_per_session {
        return Err(ApiError {
            status: StatusCode::TOO_MANY_REQUESTS,
            message: format!("session `{session}` has {n} requests queued, the server's limit"),
            field: None,
            retry_after: Some(1),
        });
    }
    Ok(())
}

#[derive(Deserialize)]
pub struct ModelRef {
    model_id: String,
}

/// `POST /api/v1/get_info`.
pub async fn get_info(State(state): State<AppState>, ApiJson(req): ApiJson<ModelRef>) -> Answer {
    let t = service(&state)?;
    let info = t
        .model_info(&req.model_id)
        .ok_or_else(|| not_found(format!("no model `{}`", req.model_id)))?;
    let name = &t.config.base_model;
    Ok(Json(json!({
        "type": "get_info",
        "model_id": req.model_id,
        "model_data": {"model_name": name, "tokenizer_id": name},
        "model_name": name,
        "is_lora": info["is_lora"],
        "lora_rank": info["lora_rank"],
        "optimizer_config": {"type": "adamw"},
    })))
}

/// `POST /api/v1/forward_backward`: the SDK's protobuf body (`forward_only` for `forward`).
pub async fn forward_backward(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Answer {
    let t = service(&state)?;
    if headers.contains_key(header::CONTENT_ENCODING) {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "compressed forward_backward bodies are not supported (the client config disables them)",
        ));
    }
    let req = proto::ForwardBackwardRequest::decode(body.as_ref()).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("the body is not a tinker_public.ForwardBackwardRequest protobuf: {e}"),
        )
    })?;
    let session = model_session(&t, &req.model_id)?;
    let loss = loss_fn(&req.loss_fn, &req.loss_fn_config)?;
    if req.data.is_empty() {
        return Err(bad("data", "no data"));
    }
    let data = req
        .data
        .iter()
        .enumerate()
        .map(|(i, d)| datum(d, loss, &t).map_err(|(f, m)| bad(format!("data[{i}].{f}"), m)))
        .collect::<Result<Vec<_>, _>>()?;
    check_pending(&t, &session)?;
    let (model_id, backward) = (req.model_id.clone(), !req.forward_only);
    let id = t.submit(
        Some(session),
        Box::new(move |b| {
            let out = b
                .forward_backward(&model_id, &data, loss, backward)
                .map_err(Failure::server)?;
            let msg = proto::forward_backward_output(&out.logprobs, out.loss_sum);
            Ok(Payload::Proto(msg.encode_to_vec()))
        }),
    );
    Ok(future(id, Some(&req.model_id)))
}

/// The loss named `name` with its `loss_fn_config`; 400 for a name or key not served.
fn loss_fn(
    name: &str,
    config: &std::collections::HashMap<String, f64>,
) -> Result<LossFn, ApiError> {
    let allowed: &[&str] = match name {
        "ppo" => &["clip_low_threshold", "clip_high_threshold"],
        n if LOSS_NAMES.contains(&n) => &[],
        other => {
            return Err(bad(
                "loss_fn",
                format!(
                    "loss_fn `{other}` is not supported by this server; supported: {}",
                    LOSS_NAMES.join(", ")
                ),
            ))
        }
    };
    if let Some(k) = config.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(bad(
            format!("loss_fn_config.{k}"),
            format!("loss_fn `{name}` takes no `{k}` (accepted: {allowed:?})"),
        ));
    }
    Ok(match name {
        "cross_entropy" => LossFn::CrossEntropy,
        "importance_sampling" => LossFn::ImportanceSampling,
        _ => {
            let low = config.get("clip_low_threshold").copied().unwrap_or(0.8);
            let high = config.get("clip_high_threshold").copied().unwrap_or(1.2);
            if !(low.is_finite() && high.is_finite() && (0.0..=1.0).contains(&low) && 1.0 <= high) {
                return Err(bad(
                    "loss_fn_config",
                    format!("ppo needs 0 <= clip_low_threshold <= 1 <= clip_high_threshold, got {low} and {high}"),
                ));
            }
            LossFn::Ppo { low, high }
        }
    })
}

/// One protobuf datum as the backend's, checked against `loss` and the model; errors are
/// (field, message).
fn datum(d: &proto::Datum, loss: LossFn, t: &Tinker) -> Result<Datum, (String, String)> {
    let mut input = Vec::new();
    for (j, c) in d.model_input.iter().enumerate() {
        let field = format!("model_input.chunks[{j}]");
        let text = c.encoded_text.as_ref().ok_or_else(|| {
            (
                field.clone(),
                "only text chunks (token ids) are supported".to_string(),
            )
        })?;
        let ids = proto::int32s(&text.tokens)
            .ok_or_else(|| (field, "tokens are not whole int32 values".to_string()))?;
        input.extend(ids);
    }
    let n = input.len();
    if n == 0 {
        return Err(("model_input".into(), "empty".into()));
    }
    if n > t.max_context {
        return Err((
            "model_input".into(),
            format!(
                "{n} tokens, more than the model's context of {}",
                t.max_context
            ),
        ));
    }
    let known = ["target_tokens", "weights", "logprobs", "advantages"];
    if let Some(k) = d
        .loss_fn_inputs
        .keys()
        .find(|k| !known.contains(&k.as_str()))
    {
        return Err((
            format!("loss_fn_inputs.{k}"),
            format!("unknown input (known: {known:?})"),
        ));
    }
    let read = |name: &str, required: bool| -> Result<Vec<f64>, (String, String)> {
        let field = format!("loss_fn_inputs.{name}");
        let Some(tensor) = d.loss_fn_inputs.get(name) else {
            return if required {
                Err((field, "required by this loss".into()))
            } else {
                Ok(vec![])
            };
        };
        let v = proto::tensor_values(tensor).map_err(|e| (field.clone(), e))?;
        if v.len() != n {
            return Err((
                field,
                format!(
                    "{} entries but model_input has {n} tokens (one per input position)",
                    v.len()
                ),
            ));
        }
        Ok(v)
    };
    let policy = !matches!(loss, LossFn::CrossEntropy);
    let targets = read("target_tokens", true)?;
    let vocab = t.vocab_size as f64;
    if let Some(x) = input
        .iter()
        .map(|&x| x as f64)
        .chain(targets.iter().copied())
        .find(|&x| x < 0.0 || x >= vocab || x.fract() != 0.0)
    {
        return Err((
            "target_tokens".into(),
            format!("token id {x} is outside the vocabulary 0..{vocab}"),
        ));
    }
    let floats = |v: Vec<f64>| v.into_iter().map(|x| x as f32).collect::<Vec<f32>>();
    let out = Datum {
        input,
        targets: targets.into_iter().map(|x| x as i64).collect(),
        weights: floats(read("weights", false)?),
        logprobs: floats(read("logprobs", policy)?),
        advantages: floats(read("advantages", policy)?),
    };
    for (name, v) in [
        ("weights", &out.weights),
        ("logprobs", &out.logprobs),
        ("advantages", &out.advantages),
    ] {
        if v.iter().any(|x| !x.is_finite()) {
            return Err((
                format!("loss_fn_inputs.{name}"),
                "holds a value that is not finite".into(),
            ));
        }
    }
    Ok(out)
}

#[derive(Deserialize)]
pub struct OptimStep {
    model_id: String,
    #[serde(alias = "optim_params")]
    adam_params: Option<AdamParams>,
    #[serde(default)]
    optimizer_params: Option<Value>,
}

/// `POST /api/v1/optim_step`: one AdamW step with the parameters sent.
pub async fn optim_step(State(state): State<AppState>, ApiJson(req): ApiJson<OptimStep>) -> Answer {
    let t = service(&state)?;
    let session = model_session(&t, &req.model_id)?;
    let Some(adam) = req.adam_params else {
        let what = if req.optimizer_params.is_some() {
            "only AdamParams (adam_params) are supported"
        } else {
            "missing"
        };
        return Err(bad("adam_params", what));
    };
    let ok = |x: f64| x.is_finite() && x >= 0.0;
    if !(ok(adam.learning_rate)
        && ok(adam.weight_decay)
        && ok(adam.grad_clip_norm)
        && adam.eps > 0.0
        && (0.0..1.0).contains(&adam.beta1)
        && (0.0..1.0).contains(&adam.beta2))
    {
        return Err(bad("adam_params", format!("out of range: {adam:?}")));
    }
    check_pending(&t, &session)?;
    let model_id = req.model_id.clone();
    let id = t.submit(
        Some(session),
        Box::new(move |b| {
            let metrics = b.optim_step(&model_id, &adam).map_err(Failure::server)?;
            let metrics: serde_json::Map<String, Value> =
                metrics.into_iter().map(|(k, v)| (k, json!(v))).collect();
            Ok(Payload::Json(json!({"metrics": metrics})))
        }),
    );
    Ok(future(id, Some(&req.model_id)))
}

/// A checkpoint name: letters, digits, `-`, `_`, `.` (not only dots), so it stays one path
/// component under the checkpoint directory.
fn checkpoint_name(name: &str, field: &str) -> Result<(), ApiError> {
    let ok = !name.is_empty()
        && name.len() <= 255
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && !name.chars().all(|c| c == '.');
    if ok {
        Ok(())
    } else {
        Err(bad(
            field,
            format!("`{name}` is not a checkpoint name (letters, digits, '-', '_', '.')"),
        ))
    }
}

#[derive(Deserialize)]
pub struct SaveWeights {
    model_id: String,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    overwrite: bool,
}

/// `POST /api/v1/save_weights`: `tinker://<model_id>/weights/<path>` (the full checkpoint,
/// plus the adapter with LoRA, under the checkpoint directory).
pub async fn save_weights(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<SaveWeights>,
) -> Answer {
    let t = service(&state)?;
    let session = model_session(&t, &req.model_id)?;
    let name = match req.path {
        Some(p) => p,
        None => {
            let n = t.checkpoints(&req.model_id).map_or(0, |c| c.len());
            format!("{n:06}")
        }
    };
    checkpoint_name(&name, "path")?;
    let checkpoint_id = format!("weights/{name}");
    let dir = t
        .config
        .checkpoint_dir
        .join(&req.model_id)
        .join("weights")
        .join(&name);
    if dir.exists() && !req.overwrite {
        return Err(bad(
            "path",
            format!("checkpoint `{checkpoint_id}` exists (overwrite=true replaces it)"),
        ));
    }
    check_pending(&t, &session)?;
    let (tc, model_id) = (t.clone(), req.model_id.clone());
    let id = t.submit(
        Some(session),
        Box::new(move |b| {
            b.save(&model_id, &dir).map_err(Failure::server)?;
            record_checkpoint(&tc, &model_id, &checkpoint_id, "training", dir);
            Ok(Payload::Json(json!({
                "path": format!("tinker://{model_id}/{checkpoint_id}"),
                "type": "save_weights",
            })))
        }),
    );
    Ok(future(id, Some(&req.model_id)))
}

/// Adds (or replaces) a checkpoint in `model_id`'s list.
fn record_checkpoint(
    t: &Tinker,
    model_id: &str,
    checkpoint_id: &str,
    kind: &'static str,
    path: PathBuf,
) {
    if let Some(m) = t.store().models.get_mut(model_id) {
        m.checkpoints.retain(|c| c.checkpoint_id != checkpoint_id);
        m.checkpoints.push(Checkpoint {
            checkpoint_id: checkpoint_id.to_string(),
            kind,
            time: SystemTime::now(),
            path,
        });
    }
}

/// A `tinker://<model_id>/<kind>/<name>` path split, or a 400 naming `field`.
fn tinker_path<'a>(path: &'a str, field: &str) -> Result<(&'a str, &'a str, &'a str), ApiError> {
    let parts: Vec<&str> = path
        .strip_prefix("tinker://")
        .unwrap_or_default()
        .split('/')
        .collect();
    match parts.as_slice() {
        [model, kind, name] if !model.is_empty() && !name.is_empty() => Ok((model, kind, name)),
        _ => Err(bad(
            field,
            format!("`{path}` is not a tinker://<model_id>/weights/<name> path"),
        )),
    }
}

#[derive(Deserialize)]
pub struct LoadWeights {
    #[serde(default)]
    model_id: Option<String>,
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    model_seq_id: Option<u64>,
    #[serde(default)]
    base_model: Option<String>,
    path: String,
    #[serde(default)]
    optimizer: bool,
}

/// `POST /api/v1/load_weights`: a training checkpoint of this server into an existing model
/// (`model_id`, `load_state`), or into a new one (`session_id` + `model_seq_id`:
/// `create_training_client_from_state`, whose model id the SDK derives as
/// `<session_id>:train:<model_seq_id>`, `service_client.py`). Weights only: the optimizer
/// restarts, and `optimizer: true` is refused.
pub async fn load_weights(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<LoadWeights>,
) -> Answer {
    let t = service(&state)?;
    if req.optimizer {
        return Err(bad(
            "optimizer",
            "optimizer state is not saved by this server: load weights only (optimizer=false)",
        ));
    }
    let (source, kind, name) = tinker_path(&req.path, "path")?;
    if kind != "weights" {
        return Err(bad(
            "path",
            "load_weights takes a training checkpoint (tinker://<model_id>/weights/<name>)",
        ));
    }
    let checkpoint = t
        .checkpoints(source)
        .and_then(|c| {
            c.into_iter()
                .find(|c| c.checkpoint_id == format!("weights/{name}"))
        })
        .ok_or_else(|| not_found(format!("no checkpoint `{}`", req.path)))?;
    let (model_id, session, create) = match (&req.model_id, &req.session_id, req.model_seq_id) {
        (Some(m), None, _) => (m.clone(), model_session(&t, m)?, false),
        (None, Some(session), Some(seq)) => {
            if let Some(b) = &req.base_model {
                check_base_model(&t, b, "base_model")?;
            }
            let rank = t.store().models.get(source).and_then(|m| m.lora_rank);
            let id = register_model(&t, session, rank, Some(format!("{session}:train:{seq}")))?;
            (id, session.clone(), true)
        }
        _ => {
            return Err(bad(
                "model_id",
                "give model_id, or session_id and model_seq_id (create from the checkpoint)",
            ))
        }
    };
    check_pending(&t, &session)?;
    let (m, path) = (model_id.clone(), req.path.clone());
    let id = t.submit(
        Some(session),
        Box::new(move |b| {
            if create {
                b.create_model(&m, None).map_err(Failure::server)?;
            }
            b.load(&m, &checkpoint.path).map_err(Failure::server)?;
            Ok(Payload::Json(
                json!({"path": path, "model_id": m, "type": "load_weights"}),
            ))
        }),
    );
    Ok(future(id, Some(&model_id)))
}

#[derive(Deserialize)]
pub struct SaveForSampler {
    model_id: String,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    kind: Option<String>,
}

/// `POST /api/v1/save_weights_for_sampler`: a snapshot of the current weights to sample from.
/// Named (`path`): also written to disk as `tinker://<model_id>/sampler_weights/<path>`;
/// unnamed: a sampling session on the snapshot (`save_weights_and_get_sampling_client`).
/// Only the newest `max_snapshots_per_model` snapshots of a model are kept.
pub async fn save_weights_for_sampler(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<SaveForSampler>,
) -> Answer {
    let t = service(&state)?;
    let session = model_session(&t, &req.model_id)?;
    if req.kind.as_deref().is_some_and(|k| k != "snapshot") {
        return Err(bad(
            "kind",
            "only `snapshot` sampling clients are supported",
        ));
    }
    if let Some(p) = &req.path {
        checkpoint_name(p, "path")?;
    }
    check_pending(&t, &session)?;
    let snapshot = t.store().fresh("sampler");
    let (tc, model_id, name) = (t.clone(), req.model_id.clone(), req.path.clone());
    let dir = name.as_ref().map(|n| {
        t.config
            .checkpoint_dir
            .join(&req.model_id)
            .join("sampler_weights")
            .join(n)
    });
    let id = t.submit(
        Some(session.clone()),
        Box::new(move |b| {
            b.snapshot(&model_id, &snapshot).map_err(Failure::server)?;
            let evicted = keep_snapshot(&tc, &model_id, &session, &snapshot);
            for old in evicted {
                b.drop_model(&old);
            }
            match (name, dir) {
                (Some(name), Some(dir)) => {
                    b.save(&model_id, &dir).map_err(Failure::server)?;
                    let checkpoint_id = format!("sampler_weights/{name}");
                    record_checkpoint(&tc, &model_id, &checkpoint_id, "sampler", dir);
                    let path = format!("tinker://{model_id}/{checkpoint_id}");
                    tc.store().sampler_paths.insert(path.clone(), snapshot);
                    Ok(Payload::Json(
                        json!({"path": path, "type": "save_weights_for_sampler"}),
                    ))
                }
                _ => Ok(Payload::Json(json!({
                    "sampling_session_id": snapshot,
                    "type": "save_weights_for_sampler",
                }))),
            }
        }),
    );
    Ok(future(id, Some(&req.model_id)))
}

/// Registers snapshot `id` of `model_id` as a sampling session; returns the snapshots evicted
/// beyond the per-model limit (their sessions and paths are gone).
fn keep_snapshot(t: &Tinker, model_id: &str, session: &str, id: &str) -> Vec<String> {
    let mut s = t.store();
    s.samplers.insert(
        id.to_string(),
        Sampler {
            session: session.to_string(),
            weights: Weights::Snapshot(id.to_string()),
            model_path: None,
        },
    );
    let Some(m) = s.models.get_mut(model_id) else {
        return vec![];
    };
    m.snapshots.push(id.to_string());
    let excess = m
        .snapshots
        .len()
        .saturating_sub(t.config.max_snapshots_per_model);
    let evicted: Vec<String> = m.snapshots.drain(..excess).collect();
    for old in &evicted {
        s.samplers
            .retain(|_, x| x.weights != Weights::Snapshot(old.clone()));
        s.sampler_paths.retain(|_, v| v != old);
    }
    evicted
}

/// GET `/api/v1/training_runs/{model_id}/checkpoints`.
pub async fn list_checkpoints(State(state): State<AppState>, Path(id): Path<String>) -> Answer {
    let t = service(&state)?;
    let list = t
        .checkpoints(&id)
        .ok_or_else(|| not_found(format!("no model `{id}`")))?;
    let checkpoints: Vec<Value> = list
        .iter()
        .map(|c| {
            json!({
                "checkpoint_id": c.checkpoint_id,
                "checkpoint_type": c.kind,
                "time": rfc3339(c.time),
                "tinker_path": format!("tinker://{id}/{}", c.checkpoint_id),
            })
        })
        .collect();
    Ok(Json(json!({"checkpoints": checkpoints})))
}

/// `time` as RFC 3339 UTC (`2026-11-27T12:00:00Z`), what pydantic's `datetime` parses.
fn rfc3339(time: SystemTime) -> String {
    let secs = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[derive(Deserialize)]
pub struct CreateSampling {
    session_id: String,
    #[serde(default)]
    base_model: Option<String>,
    #[serde(default)]
    model_path: Option<String>,
}

/// `POST /api/v1/create_sampling_session`: on the base model, or on a sampler checkpoint.
pub async fn create_sampling_session(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<CreateSampling>,
) -> Answer {
    let t = service(&state)?;
    if !t.store().sessions.contains_key(&req.session_id) {
        return Err(not_found(format!("no session `{}`", req.session_id)));
    }
    let weights = sampler_weights(&t, req.base_model.as_deref(), req.model_path.as_deref())?;
    let mut s = t.store();
    let id = s.fresh("sampler");
    s.samplers.insert(
        id.clone(),
        Sampler {
            session: req.session_id,
            weights,
            model_path: req.model_path,
        },
    );
    Ok(Json(
        json!({"type": "create_sampling_session", "sampling_session_id": id}),
    ))
}

/// The weights that `base_model` or `model_path` (exactly one) name.
fn sampler_weights(
    t: &Tinker,
    base: Option<&str>,
    path: Option<&str>,
) -> Result<Weights, ApiError> {
    match (base, path) {
        (Some(b), None) => check_base_model(t, b, "base_model").map(|_| Weights::Base),
        (None, Some(p)) => {
            let (_, kind, _) = tinker_path(p, "model_path")?;
            if kind != "sampler_weights" {
                return Err(bad("model_path", "sample from a sampler checkpoint (save_weights_for_sampler): tinker://<model_id>/sampler_weights/<name>"));
            }
            t.store()
                .sampler_paths
                .get(p)
                .map(|s| Weights::Snapshot(s.clone()))
                .ok_or_else(|| {
                    not_found(format!("no sampler checkpoint `{p}` (or it was evicted)"))
                })
        }
        _ => Err(bad(
            "model_path",
            "give exactly one of base_model and model_path",
        )),
    }
}

/// `GET /api/v1/samplers/{id}`.
pub async fn get_sampler(State(state): State<AppState>, Path(id): Path<String>) -> Answer {
    let t = service(&state)?;
    let s = t.store();
    let sampler = s
        .samplers
        .get(&id)
        .ok_or_else(|| not_found(format!("no sampler `{id}`")))?;
    Ok(Json(json!({
        "sampler_id": id,
        "base_model": t.config.base_model,
        "model_path": sampler.model_path,
    })))
}

#[derive(Deserialize)]
pub struct ModelInput {
    chunks: Vec<Value>,
}

#[derive(Deserialize)]
pub struct SamplingParams {
    #[serde(default)]
    max_tokens: Option<usize>,
    #[serde(default)]
    seed: Option<u64>,
    #[serde(default)]
    stop: Option<Value>,
    #[serde(default = "one")]
    temperature: f64,
    #[serde(default = "minus_one")]
    top_k: i64,
    #[serde(default = "one")]
    top_p: f64,
}

fn one() -> f64 {
    1.0
}

fn minus_one() -> i64 {
    -1
}

#[derive(Deserialize)]
pub struct Sample {
    #[serde(default = "one_sample")]
    num_samples: usize,
    prompt: ModelInput,
    sampling_params: SamplingParams,
    #[serde(default)]
    base_model: Option<String>,
    #[serde(default)]
    model_path: Option<String>,
    #[serde(default)]
    sampling_session_id: Option<String>,
    #[serde(default)]
    prompt_logprobs: Option<bool>,
    #[serde(default)]
    topk_prompt_logprobs: usize,
    #[serde(default)]
    topk_sample_logprobs: usize,
    #[serde(default)]
    prompt_alt_tokens_k: usize,
    #[serde(default)]
    target_prompt_logprobs: Option<Value>,
}

fn one_sample() -> usize {
    1
}

/// Most sequences one `asample` may ask for.
const MAX_SAMPLES: usize = 256;

/// `POST /api/v1/asample`: `num_samples` sequences with their log-probs; the future's result
/// is a protobuf `SampleResponse`.
pub async fn asample(State(state): State<AppState>, ApiJson(req): ApiJson<Sample>) -> Answer {
    let t = service(&state)?;
    if req.prompt_logprobs == Some(true)
        || req.topk_prompt_logprobs > 0
        || req.topk_sample_logprobs > 0
        || req.prompt_alt_tokens_k > 0
        || req.target_prompt_logprobs.is_some()
    {
        return Err(bad(
            "prompt_logprobs",
            "prompt log-probs and top-k log-probs are not supported by this server",
        ));
    }
    let (session, weights) = match &req.sampling_session_id {
        Some(id) => {
            let s = t.store();
            let sampler = s.samplers.get(id).ok_or_else(|| {
                not_found(format!(
                    "no sampling session `{id}` (or its snapshot was evicted)"
                ))
            })?;
            (sampler.session.clone(), sampler.weights.clone())
        }
        None => (
            String::new(),
            sampler_weights(&t, req.base_model.as_deref(), req.model_path.as_deref())?,
        ),
    };
    let prompt = prompt_tokens(&req.prompt.chunks)?;
    let sampling = sampling(&req.sampling_params, &t, &prompt)?;
    if req.num_samples == 0 || req.num_samples > MAX_SAMPLES {
        return Err(bad("num_samples", format!("must be in 1..={MAX_SAMPLES}")));
    }
    if !session.is_empty() {
        check_pending(&t, &session)?;
    }
    let n = req.num_samples;
    let id = t.submit(
        (!session.is_empty()).then_some(session),
        Box::new(move |b| {
            let seqs = b
                .sample(&weights, &prompt, n, &sampling)
                .map_err(Failure::server)?;
            let msg = proto::SampleResponse {
                sequences: seqs
                    .into_iter()
                    .map(|s| proto::SampledSequence {
                        stop_reason: if s.stopped {
                            proto::STOP_REASON_STOP
                        } else {
                            proto::STOP_REASON_LENGTH
                        },
                        tokens: s
                            .tokens
                            .iter()
                            .flat_map(|&x| (x as i32).to_le_bytes())
                            .collect(),
                        logprobs: Some(s.logprobs.iter().flat_map(|x| x.to_le_bytes()).collect()),
                    })
                    .collect(),
            };
            Ok(Payload::Proto(msg.encode_to_vec()))
        }),
    );
    let ids: Vec<String> = (0..n).map(|i| format!("{id}-{i}")).collect();
    Ok(Json(
        json!({"request_id": id.to_string(), "sample_sequence_ids": ids}),
    ))
}

/// The token ids of a JSON `ModelInput`'s chunks (text chunks only).
fn prompt_tokens(chunks: &[Value]) -> Result<Vec<i64>, ApiError> {
    let mut out = Vec::new();
    for (i, c) in chunks.iter().enumerate() {
        let field = format!("prompt.chunks[{i}]");
        if c.get("type")
            .and_then(Value::as_str)
            .is_some_and(|t| t != "encoded_text")
        {
            return Err(bad(field, "only text chunks (token ids) are supported"));
        }
        let tokens = c
            .get("tokens")
            .and_then(Value::as_array)
            .ok_or_else(|| bad(field.clone(), "no `tokens` list"))?;
        for t in tokens {
            out.push(
                t.as_i64()
                    .ok_or_else(|| bad(field.clone(), format!("`{t}` is not a token id")))?,
            );
        }
    }
    if out.is_empty() {
        return Err(bad("prompt", "empty prompt"));
    }
    Ok(out)
}

/// The backend's sampling options, checked against the model.
fn sampling(p: &SamplingParams, t: &Tinker, prompt: &[i64]) -> Result<Sampling, ApiError> {
    let prompt_len = prompt.len();
    let max_tokens = p
        .max_tokens
        .ok_or_else(|| bad("sampling_params.max_tokens", "required"))?;
    if max_tokens == 0 || prompt_len + max_tokens > t.max_context {
        return Err(bad(
            "sampling_params.max_tokens",
            format!("prompt ({prompt_len}) plus max_tokens ({max_tokens}) must be in 1..={} (the context)", t.max_context),
        ));
    }
    if let Some(x) = prompt
        .iter()
        .find(|&&x| x < 0 || x as usize >= t.vocab_size)
    {
        return Err(bad(
            "prompt",
            format!("token id {x} is outside the vocabulary 0..{}", t.vocab_size),
        ));
    }
    if !(p.temperature.is_finite() && p.temperature >= 0.0 && p.top_p > 0.0 && p.top_p <= 1.0) {
        return Err(bad(
            "sampling_params",
            "temperature must be >= 0 and top_p in (0, 1]",
        ));
    }
    let stop_tokens = match &p.stop {
        None | Some(Value::Null) => t.eos.clone(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_i64()
                    .filter(|&x| x >= 0 && (x as usize) < t.vocab_size)
            })
            .collect::<Option<Vec<i64>>>()
            .ok_or_else(|| {
                bad(
                    "sampling_params.stop",
                    "stop must be token ids of the vocabulary (stop strings are not supported)",
                )
            })?,
        Some(_) => {
            return Err(bad(
                "sampling_params.stop",
                "stop strings are not supported: send token ids",
            ))
        }
    };
    Ok(Sampling {
        max_tokens,
        temperature: p.temperature,
        top_k: p.top_k.max(0),
        top_p: p.top_p,
        stop_tokens,
        seed: p.seed,
    })
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_names() {
        assert_eq!(rfc3339(SystemTime::UNIX_EPOCH), "1970-01-01T00:00:00Z");
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_000_000);
        assert_eq!(rfc3339(t), "2026-11-18T11:06:40Z");
        assert!(checkpoint_name("step-2.final", "p").is_ok());
        for bad_name in ["", "..", "a/b", "x y"] {
            assert!(checkpoint_name(bad_name, "p").is_err(), "{bad_name}");
        }
        assert_eq!(
            tinker_path("tinker://model_3/weights/002", "p").unwrap(),
            ("model_3", "weights", "002")
        );
        assert!(tinker_path("tinker://model_3/weights", "p").is_err());
        assert!(tinker_path("s3://x/weights/1", "p").is_err());
    }

    #[test]
    fn losses_by_name() {
        let none = std::collections::HashMap::new();
        assert_eq!(
            loss_fn("cross_entropy", &none).unwrap(),
            LossFn::CrossEntropy
        );
        assert_eq!(
            loss_fn("ppo", &none).unwrap(),
            LossFn::Ppo {
                low: 0.8,
                high: 1.2
            }
        );
        let e = loss_fn("cispo", &none).unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert!(
            e.message
                .contains("cross_entropy, importance_sampling, ppo"),
            "{}",
            e.message
        );
        let cfg = std::collections::HashMap::from([("clip_low_threshold".to_string(), 0.5)]);
        assert_eq!(
            loss_fn("ppo", &cfg).unwrap(),
            LossFn::Ppo {
                low: 0.5,
                high: 1.2
            }
        );
        assert!(loss_fn("cross_entropy", &cfg).is_err());
    }
}
