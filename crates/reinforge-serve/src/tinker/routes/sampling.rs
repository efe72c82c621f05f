//! Sampling sessions and `asample`.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::weights::tinker_path;
use super::{bad, check_base_model, check_pending, not_found, service, Answer};
use crate::error::{ApiError, ApiJson};
use crate::policy::engine::{QueueFull, Submission};
use crate::policy::Sampling;
use crate::tinker::backend::Weights;
use crate::tinker::sampler;
use crate::tinker::state::{Failure, Payload, Sampler, Tinker};
use crate::AppState;

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

/// `POST /api/v1/asample`: `num_samples` sequences with their log-probs, decoded by the
/// sampling engine ([`sampler`]) together with other requests; the future's result is a
/// protobuf `SampleResponse`.
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
    let sub = Submission {
        rows: vec![prompt; n],
        seed: req.sampling_params.seed,
        sampling: Sampling {
            weights: weights.key(),
            ..sampling
        },
        stream: false,
    };
    let events = t.sampler.submit(sub).map_err(|QueueFull(q)| ApiError {
        status: StatusCode::TOO_MANY_REQUESTS,
        message: format!("{q} sampling requests are queued, the server's limit"),
        field: None,
        retry_after: Some(1),
    })?;
    let id = t.pending((!session.is_empty()).then_some(session));
    let tc = t.clone();
    tokio::spawn(async move {
        let result = sampler::rows(events).await;
        tc.finish(
            id,
            result
                .map(|rows| Payload::Proto(sampler::response(rows)))
                .map_err(|message| Failure {
                    message,
                    category: "server",
                }),
        );
    });
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

/// The engine's sampling options, checked against the model (the weights key is the caller's).
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
    let (stop_token_ids, stop_strings) = stop(p.stop.as_ref(), t)?;
    Ok(Sampling {
        max_tokens,
        temperature: p.temperature,
        top_k: p.top_k.max(0),
        top_p: p.top_p,
        stop_token_ids,
        top_logprobs: 0,
        prompt_logprobs: 0,
        weights: None,
        stop_strings,
    })
}

/// `sampling_params.stop` (the SDK's `str | Sequence[str] | Sequence[int] | None`) as stop
/// token ids and stop strings: unset, the model's EOS ids; token ids, those ids only; strings,
/// the strings and the EOS ids (a model that ends its turn stops, as on Tinker's sampler).
fn stop(stop: Option<&Value>, t: &Tinker) -> Result<(Vec<i64>, Vec<String>), ApiError> {
    const FIELD: &str = "sampling_params.stop";
    let items: Vec<&Value> = match stop {
        None | Some(Value::Null) => return Ok((t.eos.clone(), vec![])),
        Some(Value::Array(items)) => items.iter().collect(),
        Some(v @ Value::String(_)) => vec![v],
        Some(_) => return Err(bad(FIELD, "must be a string, strings or token ids")),
    };
    if items.iter().all(|v| v.is_string()) && !items.is_empty() {
        if !t.decodes_text {
            return Err(bad(
                FIELD,
                "stop strings need the model's tokenizer files, which this checkpoint lacks: send token ids",
            ));
        }
        let strings: Vec<String> = items
            .iter()
            .filter_map(|v| v.as_str())
            .map(str::to_string)
            .collect();
        if strings.iter().any(String::is_empty) {
            return Err(bad(FIELD, "stop strings must not be empty"));
        }
        return Ok((t.eos.clone(), strings));
    }
    let ids = items
        .iter()
        .map(|v| {
            v.as_i64()
                .filter(|&x| x >= 0 && (x as usize) < t.vocab_size)
        })
        .collect::<Option<Vec<i64>>>()
        .ok_or_else(|| {
            bad(
                FIELD,
                format!(
                    "must be all strings or all token ids of the vocabulary 0..{}",
                    t.vocab_size
                ),
            )
        })?;
    Ok((ids, vec![]))
}
