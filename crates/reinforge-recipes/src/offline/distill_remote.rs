//! A distillation teacher behind an OpenAI-compatible engine (`train-distill --teacher-url`):
//! each `prompt ++ completion` row is sent as token ids to `/v1/completions` with vLLM's
//! `prompt_logprobs: k` and `max_tokens: 1` (the request TRL's `VLLMClient.get_sequence_logprobs`
//! sends, trl 1.16 `generation/vllm_client.py`), and the completion positions' entries, sorted
//! by rank and cut to `k` as that client does, are the teacher's top-k log-probs.
//! `reinforge serve --model` and vLLM answer it.

use anyhow::{bail, Context, Result};
use reinforge_torch::train::distill::TopKScores;
use serde_json::{json, Value};

use reinforge_train::config::RolloutConfig;
use reinforge_train::rollout::openai::RemoteEngines;

/// A teacher engine and what to ask it.
pub struct RemoteTeacher {
    engines: RemoteEngines,
    /// Alternatives per position.
    pub top_k: usize,
    /// Sent as the request's `temperature` (a reinforge server scores at it; vLLM only with
    /// `--logprobs-mode processed_logprobs`).
    pub temperature: f64,
}

impl RemoteTeacher {
    /// Connects to `url` (`GET /v1/models`; `model` empty takes the first served model); the
    /// API key comes from `REINFORGE_API_KEY` when set.
    pub fn connect(url: &str, model: &str, top_k: usize, temperature: f64) -> Result<Self> {
        let cfg = RolloutConfig {
            base_urls: vec![url.to_string()],
            model: model.to_string(),
            ..RolloutConfig::default()
        };
        let engines = RemoteEngines::connect(&cfg).context("--teacher-url")?;
        Ok(Self {
            engines,
            top_k,
            temperature,
        })
    }

    /// The teacher's top-k `(id, log-prob)` pairs at every completion token of each row.
    pub fn score(&self, prompts: &[Vec<i64>], completions: &[Vec<i64>]) -> Result<TopKScores> {
        let rows: Vec<Vec<i64>> = prompts
            .iter()
            .zip(completions)
            .map(|(p, c)| [p.as_slice(), c.as_slice()].concat())
            .collect();
        let body = json!({
            "model": self.engines.model,
            "prompt": rows,
            "max_tokens": 1,
            "temperature": self.temperature,
            "prompt_logprobs": self.top_k,
        });
        let url = &self.engines.urls[0];
        let resp = self.engines.post(url, "/v1/completions", &body)?;
        let choices = resp["choices"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        if choices.len() != rows.len() {
            bail!(
                "teacher {url}: {} choices for {} rows",
                choices.len(),
                rows.len()
            );
        }
        prompts
            .iter()
            .zip(completions)
            .zip(choices)
            .map(|((p, c), choice)| {
                completion_scores(&choice["prompt_logprobs"], p.len(), c.len(), self.top_k)
            })
            .collect::<Result<_>>()
            .with_context(|| format!("teacher {url}: reading `prompt_logprobs`"))
    }
}

/// Positions `start .. start + len` of a vLLM `prompt_logprobs` list, each entry's
/// alternatives sorted by rank and cut to `k`.
fn completion_scores(
    entries: &Value,
    start: usize,
    len: usize,
    k: usize,
) -> Result<Vec<Vec<(i64, f32)>>> {
    let Some(list) = entries.as_array() else {
        bail!("the answer has no `prompt_logprobs` list (does the engine support it?)");
    };
    if list.len() < start + len {
        bail!("{} entries for a row of {} tokens", list.len(), start + len);
    }
    list[start..start + len]
        .iter()
        .map(|e| {
            let Some(obj) = e.as_object() else {
                bail!("an entry is not an object: {e}");
            };
            let mut items: Vec<(u64, i64, f32)> = obj
                .iter()
                .map(|(id, v)| {
                    let id: i64 = id.parse().with_context(|| format!("token id {id:?}"))?;
                    let lp = v["logprob"]
                        .as_f64()
                        .map_or(f32::NEG_INFINITY, |x| x as f32);
                    let rank = v["rank"].as_u64().unwrap_or(u64::MAX);
                    Ok((rank, id, lp))
                })
                .collect::<Result<_>>()?;
            items.sort_by_key(|&(rank, id, _)| (rank, id));
            Ok(items
                .into_iter()
                .take(k)
                .map(|(_, id, lp)| (id, lp))
                .collect())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_sorted_by_rank_and_cut_to_k() {
        let entries = json!([
            null,
            {"7": {"logprob": -0.1, "rank": 1}, "3": {"logprob": -9.0, "rank": 40}, "5": {"logprob": -2.0, "rank": 2}},
            {"2": {"logprob": -0.5, "rank": 1}, "9": {"logprob": -1.5, "rank": 2}},
        ]);
        let s = completion_scores(&entries, 1, 2, 2).unwrap();
        assert_eq!(
            s,
            vec![vec![(7, -0.1), (5, -2.0)], vec![(2, -0.5), (9, -1.5)]]
        );
        assert!(completion_scores(&entries, 1, 3, 2).is_err());
        assert!(completion_scores(&Value::Null, 0, 1, 2).is_err());
    }
}
