//! LLM judges on a local checkpoint: what `reinforge judge` runs (pairwise with position swap,
//! or pointwise ratings) and the scorer behind a reward spec's `type = "judge"` component
//! ([`load_scorer`]).
//!
//! Verdicts are read from the judge's next-token probabilities after a filled-in template
//! (rendered as a user message with the judge's chat template), never sampled: a pairwise
//! verdict is P("A") / (P("A") + P("B")); a pointwise rating is the expected value over the
//! tokens "1".."5" (G-Eval's probability-weighted score, Liu et al. 2023). Templates use
//! `{prompt}`, `{response_a}`, `{response_b}` and `{response}` placeholders, as MT-Bench's judge
//! prompts do (plain substitution: the template is data, not code).

pub mod rows;

use std::path::Path;
use std::sync::{Arc, Mutex};

use anyhow::{bail, Context, Result};
use reinforge_eval::judge::SwappedVerdict;
use reinforge_reward::{JudgeSpec, ModelScorer};
use reinforge_tasks::data::Prompt;
use reinforge_torch::model::logprobs::next_token_label_probs;

use crate::loaded::{encode_prompt, LoadedModel, PromptStyle};

/// The built-in pairwise template.
pub const PAIRWISE_TEMPLATE: &str = "Compare two answers to the same question.\n\n\
Question:\n{prompt}\n\nAnswer A:\n{response_a}\n\nAnswer B:\n{response_b}\n\n\
Which answer is better? Reply with the single letter A or B.";

/// The built-in pointwise template.
pub const POINTWISE_TEMPLATE: &str = "Rate the answer to the question from 1 (worst) to 5 \
(best).\n\nQuestion:\n{prompt}\n\nAnswer:\n{response}\n\nReply with a single digit.";

/// A judge: a causal model, its tokenizer, and the token ids its verdicts are read from.
pub struct Judge {
    model: LoadedModel,
    template: String,
    /// Ids of "A" and "B" (pairwise) or "1".."5" (pointwise).
    labels: Vec<i64>,
}

/// The first token id of `text` (its whole encoding must be one token).
fn single_token(model: &LoadedModel, text: &str) -> Result<i64> {
    match model.tokenizer.encode(text, false)?.as_slice() {
        [id] => Ok(i64::from(*id)),
        ids => bail!("the judge's tokenizer encodes {text:?} as {} tokens; verdict labels must be one token each", ids.len()),
    }
}

impl Judge {
    /// Loads a pairwise (`pairwise = true`) or pointwise judge from `model` with `template`
    /// (default: the built-in one).
    pub fn new(model: LoadedModel, template: Option<&Path>, pairwise: bool) -> Result<Self> {
        let template = match template {
            Some(p) => std::fs::read_to_string(p)
                .with_context(|| format!("reading judge template {}", p.display()))?,
            None if pairwise => PAIRWISE_TEMPLATE.to_string(),
            None => POINTWISE_TEMPLATE.to_string(),
        };
        let needed: &[&str] = if pairwise {
            &["{prompt}", "{response_a}", "{response_b}"]
        } else {
            &["{prompt}", "{response}"]
        };
        if let Some(missing) = needed.iter().find(|k| !template.contains(**k)) {
            bail!("the judge template has no {missing} placeholder");
        }
        let names: &[&str] = if pairwise {
            &["A", "B"]
        } else {
            &["1", "2", "3", "4", "5"]
        };
        let labels = names
            .iter()
            .map(|n| single_token(&model, n))
            .collect::<Result<_>>()?;
        Ok(Self {
            model,
            template,
            labels,
        })
    }

    /// Ids of the filled-in template, as a user turn of the judge's chat template.
    fn encode(&self, fill: &[(&str, &str)]) -> Result<Vec<i64>> {
        let mut text = self.template.clone();
        for (k, v) in fill {
            text = text.replace(k, v);
        }
        Ok(encode_prompt(
            &self.model.tokenizer,
            &Prompt::Text(text),
            &PromptStyle::default(),
        )?
        .1)
    }

    /// Probabilities over the labels `[rows][labels]`, renormalised over the labels.
    fn label_probs(&self, inputs: &[Vec<i64>]) -> Result<Vec<Vec<f64>>> {
        let max = self.model.max_positions();
        if let Some(long) = inputs.iter().find(|s| s.len() > max) {
            bail!(
                "a judge prompt has {} tokens, more than the judge's {max} positions",
                long.len()
            );
        }
        next_token_label_probs(
            &self.model.policy.model,
            self.model.policy.device(),
            inputs,
            self.model.pad_id(),
            &self.labels,
        )
    }

    /// Each pair judged in both orders: P(A better) with A shown first and second.
    pub fn pairwise(
        &self,
        prompts: &[&str],
        a: &[&str],
        b: &[&str],
    ) -> Result<Vec<SwappedVerdict>> {
        let mut inputs = Vec::with_capacity(2 * prompts.len());
        for ((p, x), y) in prompts.iter().zip(a).zip(b) {
            inputs.push(self.encode(&[
                ("{prompt}", p),
                ("{response_a}", x),
                ("{response_b}", y),
            ])?);
            inputs.push(self.encode(&[
                ("{prompt}", p),
                ("{response_a}", y),
                ("{response_b}", x),
            ])?);
        }
        let probs = self.label_probs(&inputs)?;
        Ok(probs
            .chunks(2)
            .map(|c| SwappedVerdict {
                a_shown_first: c[0][0],
                a_shown_second: c[1][1],
            })
            .collect())
    }

    /// Expected ratings (1 to 5) of each response.
    pub fn pointwise(&self, prompts: &[&str], responses: &[&str]) -> Result<Vec<f64>> {
        let inputs = prompts
            .iter()
            .zip(responses)
            .map(|(p, r)| self.encode(&[("{prompt}", p), ("{response}", r)]))
            .collect::<Result<Vec<_>>>()?;
        Ok(self
            .label_probs(&inputs)?
            .iter()
            .map(|p| p.iter().enumerate().map(|(k, q)| (k + 1) as f64 * q).sum())
            .collect())
    }
}

/// A pointwise judge behind a reward spec's `type = "judge"` component: (rating − 1) / 4.
pub struct JudgeScorer(Mutex<Judge>);

// SAFETY: the judge sits behind a mutex, so its tensors are used by one thread at a time;
// tch tensors are `Send`.
unsafe impl Sync for JudgeScorer {}
// SAFETY: as above.
unsafe impl Send for JudgeScorer {}

impl JudgeScorer {
    /// Loads the judge of `spec` (float32, CPU).
    pub fn load(spec: &JudgeSpec) -> Result<Self> {
        let model = LoadedModel::load(
            &spec.path,
            // host: judge components score on the CPU, beside the trainer.
            &reinforge_torch::LoadOptions::f32(reinforge_torch::Device::Cpu),
        )?;
        Ok(Self(Mutex::new(Judge::new(
            model,
            spec.template.as_deref(),
            false,
        )?)))
    }
}

impl ModelScorer for JudgeScorer {
    fn score(&self, prompts: &[&str], responses: &[&str]) -> Result<Vec<f64>> {
        let judge = self
            .0
            .lock()
            .map_err(|_| anyhow::anyhow!("judge lock poisoned"))?;
        Ok(judge
            .pointwise(prompts, responses)?
            .into_iter()
            .map(|r| (r - 1.0) / 4.0)
            .collect())
    }
}

/// A loaded judge scorer for the reward spec loader.
pub fn load_scorer(spec: &JudgeSpec) -> Result<Arc<dyn ModelScorer>> {
    Ok(Arc::new(JudgeScorer::load(spec)?))
}
