//! Pause, resume and weight loading, under SGLang's route names
//! (python/sglang/srt/entrypoints/http_server.py: `/pause_generation` with
//! `PauseGenerationReqInput.mode`, `/continue_generation`, `/update_weights_from_disk` with
//! `UpdateWeightFromDiskReqInput`, `/get_weight_version`, `/get_model_info`) and vLLM's
//! (vllm/entrypoints/serve/rlhf/api_router.py: `POST /pause?mode=`, `POST /resume`,
//! `GET /is_paused`). See the module docs of [`super`] for the semantics.

use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::engine::{PauseMode, PauseOutcome};
use super::error::{OaiJson, OpenAiError};
use super::respond::with_version;
use super::Policy;
use crate::AppState;

fn policy(state: &AppState) -> Result<Arc<Policy>, OpenAiError> {
    state.policy.clone().ok_or_else(|| {
        OpenAiError::status(
            StatusCode::NOT_FOUND,
            "this server serves no model (--model)",
        )
    })
}

/// A pause mode by name; SGLang's and vLLM's modes that would resume a half-decoded batch are
/// refused with the reason.
fn pause_mode(name: Option<&str>) -> Result<PauseMode, OpenAiError> {
    match name.unwrap_or("abort") {
        "abort" => Ok(PauseMode::Abort),
        "wait" => Ok(PauseMode::Wait),
        m @ ("retract" | "in_place" | "keep") => Err(OpenAiError::bad(
            "mode",
            format!(
                "mode {m:?} would resume a half-decoded batch (on new weights after a load); \
                 a batch here never mixes weights: use \"abort\" or \"wait\""
            ),
        )),
        m => Err(OpenAiError::bad(
            "mode",
            format!("unknown mode {m:?}: \"abort\" or \"wait\""),
        )),
    }
}

async fn do_pause(p: Arc<Policy>, mode: PauseMode) -> Result<PauseOutcome, OpenAiError> {
    tokio::task::spawn_blocking(move || p.engine.pause(mode))
        .await
        .map_err(|e| OpenAiError::status(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}

/// `body` plus the current `weight_version` (unless it names one) and `paused`, with the
/// version header.
fn respond(p: &Policy, mut body: Value) -> Response {
    let (w, paused) = p.engine.info();
    if body.get("weight_version").is_none() {
        body["weight_version"] = w.weight_version.into();
    }
    body["paused"] = paused.into();
    let v = body["weight_version"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    with_version(Json(body).into_response(), &v)
}

#[derive(Deserialize)]
pub struct PauseBody {
    #[serde(default)]
    mode: Option<String>,
}

/// `POST /pause_generation` (SGLang): body `{"mode": "abort" | "wait"}`, default `abort`.
pub async fn pause_generation(
    State(state): State<AppState>,
    OaiJson(body): OaiJson<PauseBody>,
) -> Result<Response, OpenAiError> {
    let p = policy(&state)?;
    let mode = pause_mode(body.mode.as_deref())?;
    let o = do_pause(p.clone(), mode).await?;
    Ok(respond(
        &p,
        json!({
            "status": "ok",
            "message": "Generation paused successfully.",
            "mode": mode,
            "num_aborted_requests": o.num_aborted_requests,
            "num_queued_requests": o.num_queued_requests,
        }),
    ))
}

/// `POST /pause?mode=abort|wait` (vLLM).
pub async fn pause(
    State(state): State<AppState>,
    RawQuery(q): RawQuery,
) -> Result<Response, OpenAiError> {
    let p = policy(&state)?;
    // The one parameter, read by hand (axum's `Query` needs serde_urlencoded for one word).
    let asked = q.as_deref().unwrap_or("").split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == "mode").then_some(v)
    });
    let mode = pause_mode(asked)?;
    let o = do_pause(p.clone(), mode).await?;
    Ok(respond(
        &p,
        json!({
            "status": "paused",
            "mode": mode,
            "num_aborted_requests": o.num_aborted_requests,
            "num_queued_requests": o.num_queued_requests,
        }),
    ))
}

/// `POST /continue_generation` (SGLang).
pub async fn continue_generation(State(state): State<AppState>) -> Result<Response, OpenAiError> {
    let p = policy(&state)?;
    p.engine.resume();
    Ok(respond(
        &p,
        json!({"status": "ok", "message": "Generation continued successfully."}),
    ))
}

/// `POST /resume` (vLLM).
pub async fn resume(State(state): State<AppState>) -> Result<Response, OpenAiError> {
    let p = policy(&state)?;
    p.engine.resume();
    Ok(respond(&p, json!({"status": "resumed"})))
}

/// `GET /is_paused` (vLLM).
pub async fn is_paused(State(state): State<AppState>) -> Result<Response, OpenAiError> {
    let p = policy(&state)?;
    let (_, paused) = p.engine.info();
    Ok(respond(&p, json!({ "is_paused": paused })))
}

/// `GET /get_weight_version`: `{"weight_version", "checksum", "paused"}`.
pub async fn get_weight_version(State(state): State<AppState>) -> Result<Response, OpenAiError> {
    let p = policy(&state)?;
    let (w, _) = p.engine.info();
    Ok(respond(&p, json!({ "checksum": w.checksum })))
}

/// `GET /get_model_info` (SGLang's fields that apply).
pub async fn get_model_info(State(state): State<AppState>) -> Result<Response, OpenAiError> {
    let p = policy(&state)?;
    // Directory names only: a host path tells a client about the server's file system.
    let dir = p.served.model_dir.as_deref().map(dir_name);
    let tok = p.served.tokenizer.as_ref().map(|t| dir_name(t.dir()));
    Ok(respond(
        &p,
        json!({
            "model_path": dir,
            "tokenizer_path": tok,
            "is_generation": true,
            "served_model_name": p.served.name,
            "max_model_len": p.served.max_model_len,
        }),
    ))
}

/// The last component of `dir` (what the model and tokenizer paths are shown as).
pub fn dir_name(dir: &std::path::Path) -> String {
    dir.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The longest `weight_version`: it travels in a header of every response.
pub const MAX_VERSION_LEN: usize = 128;

/// A weight version: 1 to [`MAX_VERSION_LEN`] printable ASCII characters.
pub fn check_version(v: &str) -> Result<(), OpenAiError> {
    if v.is_empty() {
        return Err(OpenAiError::bad(
            "weight_version",
            "`weight_version` must not be empty",
        ));
    }
    if v.len() > MAX_VERSION_LEN || !v.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
        return Err(OpenAiError::bad(
            "weight_version",
            format!(
                "`weight_version` must be 1 to {MAX_VERSION_LEN} printable ASCII characters \
                 (it is sent in a header of every response); got {} bytes",
                v.len()
            ),
        ));
    }
    Ok(())
}

/// `weight_version` as SGLang takes it (a string) or as trainers count (an integer).
#[derive(Deserialize)]
#[serde(untagged)]
pub enum Version {
    Text(String),
    Number(u64),
}

/// SGLang's `UpdateWeightFromDiskReqInput`, the fields that apply (others are ignored).
#[derive(Deserialize)]
pub struct UpdateBody {
    model_path: PathBuf,
    #[serde(default)]
    weight_version: Option<Version>,
    #[serde(default)]
    abort_all_requests: Option<bool>,
    #[serde(default)]
    load_format: Option<String>,
}

/// The next version: the one given, else an integer version plus one.
fn next_version(given: Option<Version>, current: &str) -> Result<String, OpenAiError> {
    match given {
        Some(Version::Text(s)) => check_version(&s).map(|()| s),
        Some(Version::Number(n)) => Ok(n.to_string()),
        None => current
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_add(1))
            .map(|n| n.to_string())
            .ok_or_else(|| {
                OpenAiError::bad(
                    "weight_version",
                    format!(
                        "the current version {current:?} is not an integer, so the next one \
                         cannot be counted: name it in `weight_version`"
                    ),
                )
            }),
    }
}

/// Why a load was not attempted.
enum Refusal {
    /// 403: loads from disk are off (a non-loopback server without `--weights-root`).
    Forbidden(String),
    /// 400 with SGLang's `success: false` shape.
    Failed(String),
}

/// The directory to load: `model_path` canonicalised (symlinks resolved), inside
/// `--weights-root` when one is set. A path outside the root, missing or not a directory gets
/// one message, so answers do not tell which paths exist.
fn allowed_dir(served: &super::Served, asked: &std::path::Path) -> Result<PathBuf, Refusal> {
    let Some(root) = &served.weights_root else {
        if !served.loads_without_root {
            return Err(Refusal::Forbidden(
                "weight loads from disk are disabled: this server is reachable from other \
                 machines and was started without --weights-root DIR"
                    .into(),
            ));
        }
        return match std::fs::canonicalize(asked) {
            Ok(d) if d.is_dir() => Ok(d),
            _ => Err(Refusal::Failed(format!(
                "model_path {} is not a directory; the weights were not changed",
                asked.display()
            ))),
        };
    };
    // A relative path is taken inside the root.
    let joined = root.join(asked);
    match std::fs::canonicalize(&joined) {
        Ok(d) if d.starts_with(root) && d.is_dir() => Ok(d),
        _ => Err(Refusal::Failed(
            "model_path is not a directory inside the server's --weights-root; the weights \
             were not changed"
                .into(),
        )),
    }
}

/// The keys of config.json that fix the shapes of the weights.
const SHAPE_KEYS: &[&str] = &[
    "model_type",
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "max_position_embeddings",
    "tie_word_embeddings",
];

/// The largest config.json read (real ones are a few KiB).
const MAX_CONFIG_BYTES: u64 = 1 << 20;

fn read_config(dir: &std::path::Path) -> Result<Option<Value>, String> {
    let path = dir.join("config.json");
    let Ok(meta) = std::fs::metadata(&path) else {
        return Ok(None);
    };
    if meta.len() > MAX_CONFIG_BYTES {
        return Err(format!(
            "config.json is {} bytes; at most {MAX_CONFIG_BYTES} are read",
            meta.len()
        ));
    }
    let text = std::fs::read(&path).map_err(|e| format!("reading config.json: {e}"))?;
    serde_json::from_slice(&text)
        .map(Some)
        .map_err(|e| format!("config.json is not JSON: {e}"))
}

/// Compares the candidate's config.json with the served model's on the keys that fix the
/// weights' shapes (issue 24, finding 10: a config-only directory made the generator allocate a
/// model of its sizes before its own comparison), before the generator allocates anything for it. Nothing to compare (no
/// `--model` config.json) passes: the generator checks then.
fn same_architecture(served: &super::Served, dir: &std::path::Path) -> Result<(), String> {
    let Some(model) = &served.model_dir else {
        return Ok(());
    };
    let Some(current) = read_config(model).ok().flatten() else {
        return Ok(());
    };
    let Some(candidate) = read_config(dir)? else {
        return Ok(());
    };
    // Keys present in both (a writer may spell out a default the other leaves implicit; the
    // generator's own check covers the rest once the shapes are known to agree).
    for key in SHAPE_KEYS {
        if let (Some(a), Some(b)) = (current.get(*key), candidate.get(*key)) {
            if a != b {
                return Err(format!(
                    "config.json describes another model than the one served: `{key}` is {a} \
                     here and {b} in the candidate (weights can be replaced, not the \
                     architecture)"
                ));
            }
        }
    }
    Ok(())
}

/// `POST /update_weights_from_disk`: loads `model_path` between batches. 200 with
/// `{"success": true, "message", "weight_version", "checksum", "load_seconds", ...}`, or 400 with
/// `{"success": false, "message"}` and the old weights still served.
pub async fn update_weights_from_disk(
    State(state): State<AppState>,
    OaiJson(body): OaiJson<UpdateBody>,
) -> Result<Response, OpenAiError> {
    let p = policy(&state)?;
    if let Some(f) = body
        .load_format
        .as_deref()
        .filter(|f| !matches!(*f, "auto" | "safetensors"))
    {
        return Err(OpenAiError::bad(
            "load_format",
            format!("load_format {f:?} is not supported: \"auto\" or \"safetensors\""),
        ));
    }
    let (current, _) = p.engine.info();
    let version = next_version(body.weight_version, &current.weight_version)?;
    let failure = |message: String| {
        let (w, paused) = p.engine.info();
        let body = json!({
            "success": false,
            "message": message,
            "weight_version": w.weight_version,
            "checksum": w.checksum,
            "paused": paused,
            "num_paused_requests": 0,
        });
        with_version(
            (StatusCode::BAD_REQUEST, Json(body)).into_response(),
            &w.weight_version,
        )
    };
    let dir = match allowed_dir(&p.served, &body.model_path) {
        Ok(d) => d,
        Err(Refusal::Forbidden(m)) => {
            return Err(OpenAiError::status(StatusCode::FORBIDDEN, m).param("model_path"))
        }
        Err(Refusal::Failed(m)) => return Ok(failure(m)),
    };
    if let Err(m) = same_architecture(&p.served, &dir) {
        return Ok(failure(format!("{m}; the weights were not changed")));
    }
    let rx = p
        .engine
        .load(dir, version, body.abort_all_requests.unwrap_or(false));
    match rx.await {
        Ok(Ok(o)) => Ok(respond(
            &p,
            json!({
                "success": true,
                "message": format!(
                    "Loaded {} as weight version {} in {:.3} s.",
                    body.model_path.display(),
                    o.weight_version,
                    o.load_seconds
                ),
                "weight_version": o.weight_version,
                "checksum": o.checksum,
                "load_seconds": o.load_seconds,
                "num_aborted_requests": o.num_aborted_requests,
                "num_paused_requests": 0,
            }),
        )),
        Ok(Err(e)) => Ok(failure(format!("{e}; the weights were not changed"))),
        Err(_) => Err(OpenAiError::status(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the generation worker stopped",
        )),
    }
}
