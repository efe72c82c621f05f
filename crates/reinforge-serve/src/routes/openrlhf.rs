//! `POST /get_reward`: OpenRLHF's remote reward model protocol.
//!
//! Request, as OpenRLHF sends it (`openrlhf/utils/remote_rm_utils.py`, `remote_rm_fn` ->
//! `request_api_wrapper(url, {"query": queries, "prompts": prompts, "labels": labels})`, v0.6+;
//! older versions send only `query`): `query[i]` is the decoded prompt + response (special
//! tokens kept, sometimes left padding too), `prompts[i]` the prompt text, `labels[i]` the
//! dataset's `--label_key` value. Response, as OpenRLHF's reward functions return it
//! (`examples/python/reward_func.py`): `{"rewards": [...], "scores": [...], "extra_logs":
//! {name: [...]}}`, where `rewards` feed the advantages, `scores` (0/1) dynamic filtering and
//! `extra_logs` are logged per sample. Unknown request keys are ignored (forks add some). A
//! request whose rows hold more than `--max-verify-bytes` of text (each row counted as at least
//! 256 bytes) is a 413 naming the flag, before any scoring.

use std::collections::BTreeMap;

use axum::extract::{Extension, State};
use axum::http::StatusCode;
use axum::Json;
use reinforge_reward::{Sample, ScoreError};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{ApiError, ApiJson};
use crate::limit::Slot;
use crate::AppState;

/// The request body.
#[derive(Deserialize)]
pub struct RewardRequest {
    pub query: Vec<String>,
    #[serde(default)]
    pub prompts: Option<Vec<String>>,
    #[serde(default)]
    pub labels: Option<Vec<Value>>,
}

/// The response body.
#[derive(Serialize, Deserialize, Debug)]
pub struct RewardResponse {
    pub rewards: Vec<f64>,
    pub scores: Vec<f64>,
    pub extra_logs: BTreeMap<String, Vec<f64>>,
}

/// The response part of `query`: what follows the prompt. The prompt is usually a prefix; when
/// the decoded query has something before it (left padding, a BOS token), the text after its
/// first occurrence. `None` when the query does not contain the prompt.
pub fn strip_prompt<'a>(query: &'a str, prompt: &str) -> Option<&'a str> {
    if let Some(rest) = query.strip_prefix(prompt) {
        return Some(rest);
    }
    if prompt.is_empty() {
        return Some(query);
    }
    query.find(prompt).map(|i| &query[i + prompt.len()..])
}

/// A label as text: strings as they are, null as no label, anything else as its JSON.
fn label_text(v: Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(s),
        other => Some(other.to_string()),
    }
}

/// 413 when the request's texts (query, prompt and label of each row) ask for more than
/// `--max-verify-bytes` of work ([`crate::limit::check_verify_work`]).
fn check_work(req: &RewardRequest, limit: usize) -> Result<(), ApiError> {
    let text = |v: Option<&Value>| match v {
        None | Some(Value::Null) => 0,
        Some(Value::String(s)) => s.len(),
        Some(other) => other.to_string().len(),
    };
    let lens = req.query.iter().enumerate().map(|(i, q)| {
        let prompt = req
            .prompts
            .as_ref()
            .and_then(|p| p.get(i))
            .map_or(0, String::len);
        q.len() + prompt + text(req.labels.as_ref().and_then(|l| l.get(i)))
    });
    crate::limit::check_verify_work("query", lens, limit)
}

pub async fn get_reward(
    State(state): State<AppState>,
    Extension(slot): Extension<Slot>,
    ApiJson(req): ApiJson<RewardRequest>,
) -> Result<Json<RewardResponse>, ApiError> {
    let n = req.query.len();
    for (name, len) in [
        ("prompts", req.prompts.as_ref().map(Vec::len)),
        ("labels", req.labels.as_ref().map(Vec::len)),
    ] {
        if let Some(len) = len.filter(|&l| l != n) {
            return Err(ApiError::field(
                name,
                format!("`{name}` has {len} items but `query` has {n}"),
            ));
        }
    }
    check_work(&req, state.max_verify_bytes)?;
    let prompts = req.prompts.unwrap_or_default();
    let mut labels = req.labels.unwrap_or_default().into_iter();
    let mut mismatches = 0;
    let samples: Vec<Sample> = req
        .query
        .into_iter()
        .enumerate()
        .map(|(i, query)| {
            let prompt = prompts.get(i).cloned().unwrap_or_default();
            let response = match strip_prompt(&query, &prompt) {
                Some(r) => r.to_string(),
                None => {
                    mismatches += 1;
                    query
                }
            };
            Sample {
                prompt,
                response,
                label: labels.next().and_then(label_text),
            }
        })
        .collect();
    state.metrics.prompt_mismatch.inc_by(mismatches);
    let reward = state.reward.clone();
    let pool = state.pool.clone();
    let scored = state
        .blocking(slot, move || pool.install(|| reward.score(&samples)))
        .await?
        .map_err(|e| match e {
            ScoreError::Sandbox { .. } | ScoreError::Model { .. } => {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
            }
            _ => ApiError::field(
                format!("labels[{}]", e.index().unwrap_or_default()),
                e.to_string(),
            ),
        })?;
    state.metrics.rewards.inc_by(scored.len() as u64);
    let mut extra_logs: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for s in &scored {
        for (k, v) in &s.components {
            extra_logs.entry(k.clone()).or_default().push(*v);
        }
    }
    Ok(Json(RewardResponse {
        rewards: scored.iter().map(|s| s.total).collect(),
        scores: scored.iter().map(|s| s.score).collect(),
        extra_logs,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_follow_their_prompt() {
        assert_eq!(strip_prompt("Q: 1+1? A: 2", "Q: 1+1?"), Some(" A: 2"));
        assert_eq!(
            strip_prompt("<pad><pad><s>Q: x A: y</s>", "Q: x"),
            Some(" A: y</s>")
        );
        assert_eq!(strip_prompt("abc", ""), Some("abc"));
        assert_eq!(strip_prompt("abc", "zzz"), None);
    }
}
