//! Training models: `create_model`, `get_info`, `forward_backward` (its protobuf body checked
//! datum by datum), `optim_step`.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::Json;
use prost::Message;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{
    bad, check_base_model, check_pending, future, model_session, not_found, register_model,
    service, Answer,
};
use crate::error::{ApiError, ApiJson};
use crate::tinker::backend::{AdamParams, Datum, Lora, LossFn, LOSS_NAMES};
use crate::tinker::proto;
use crate::tinker::state::{fingerprint, Failure, Payload, Tinker};
use crate::AppState;

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
    let id = t.submit_once(
        &req.model_id,
        (i64::from(req.seq_id), fingerprint(&body)),
        session,
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
    /// The SDK's request number ([`Tinker::submit_once`]).
    #[serde(default)]
    seq_id: Option<i64>,
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
    let key = (
        req.seq_id.unwrap_or(0),
        fingerprint(format!("{adam:?}").as_bytes()),
    );
    let id = t.submit_once(
        &req.model_id,
        key,
        session,
        Box::new(move |b| {
            let metrics = b.optim_step(&model_id, &adam).map_err(Failure::server)?;
            let metrics: serde_json::Map<String, Value> =
                metrics.into_iter().map(|(k, v)| (k, json!(v))).collect();
            Ok(Payload::Json(json!({"metrics": metrics})))
        }),
    );
    Ok(future(id, Some(&req.model_id)))
}

#[cfg(test)]
mod tests {
    use super::*;

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
