//! `train-orpo`: reference-free preference optimisation of a Hugging Face checkpoint with
//! TRL's ORPO, through the one trainer (the forward pass and loss are reinforge-torch's
//! `preference::orpo`).

use anyhow::Result;
use reinforge_torch::train::preference::orpo::{self, OrpoMetrics};
use reinforge_torch::train::preference::Figures;
use reinforge_torch::Policy;
use serde::{Deserialize, Serialize};

use super::{start_run, update, OfflineOptions};
use crate::loaded::LoadedModel;
use crate::pairs::{read_pairs, step_rows, Pairs};
use reinforge_train::trainer::{StepLog, Trainer};

/// Where the frameworks disagree on a prompt's BOS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PromptBos {
    /// The prompt ids as the tokenizer (or chat template) gives them (like train-dpo and TRL's
    /// DPOTrainer).
    Tokenizer,
    /// BOS prepended when the prompt does not start with it (TRL 1.16 ORPOTrainer.tokenize_row).
    Always,
}

impl PromptBos {
    pub const ALL: &'static [Self] = &[Self::Tokenizer, Self::Always];
}

/// `train-orpo`'s settings.
#[derive(Debug, Clone)]
pub struct OrpoOptions {
    pub common: OfflineOptions,
    /// Weight of the odds-ratio term (TRL's ORPOConfig.beta, the paper's lambda).
    pub beta: f64,
    pub prompt_bos: PromptBos,
}

/// One line of `metrics.jsonl`, TRL's metric names.
#[derive(Debug, Clone, Serialize)]
pub struct OrpoLine {
    pub step: usize,
    pub loss: f64,
    #[serde(flatten)]
    pub pair: reinforge_torch::train::loss::dpo::PairMetrics,
    pub nll_loss: f64,
    pub log_odds_ratio: f64,
    pub log_odds_chosen: f64,
    pub grad_norm: f64,
    #[serde(skip)]
    pub nonfinite_grad_steps: usize,
}

impl OrpoLine {
    fn new(step: usize, f: &Figures<OrpoMetrics>, grad_norm: f64, stepped: bool) -> Self {
        let m = &f.metrics;
        Self {
            step,
            loss: f.loss,
            pair: m.pair,
            nll_loss: m.nll_loss,
            log_odds_ratio: m.log_odds_ratio,
            log_odds_chosen: m.log_odds_chosen,
            grad_norm,
            nonfinite_grad_steps: usize::from(!stepped),
        }
    }
}

impl StepLog for OrpoLine {
    fn bar_message(&self) -> String {
        format!(
            "loss {:.4} nll {:.3} acc {:.2}",
            self.loss, self.nll_loss, self.pair.rewards_accuracies
        )
    }

    fn nonfinite_grad_steps(&self) -> usize {
        self.nonfinite_grad_steps
    }
}

/// Prepends `bos` to every prompt of `pairs` that lacks it; errors name the first pair that
/// no longer fits the model's `max` positions.
fn prepend_bos(pairs: &mut Pairs, bos: i64, max: usize) -> Result<()> {
    for (i, p) in pairs.prompts.iter_mut().enumerate() {
        if p.first() != Some(&bos) {
            p.insert(0, bos);
        }
        let longest = p.len() + pairs.chosen[i].len().max(pairs.rejected[i].len());
        if longest > max {
            anyhow::bail!(
                "pair {}: {longest} tokens with the BOS, more than the model's {max} positions",
                i + 1
            );
        }
    }
    Ok(())
}

/// The pairs of `path`, with the BOS prepended under [`PromptBos::Always`].
fn read(path: &std::path::Path, model: &LoadedModel, o: &OrpoOptions) -> Result<Pairs> {
    let mut pairs = read_pairs(path, model, o.common.raw)?;
    if o.prompt_bos == PromptBos::Always {
        let Some(bos) = model.tokenizer.bos_token_id() else {
            anyhow::bail!("--prompt-bos always: the tokenizer has no BOS token");
        };
        prepend_bos(&mut pairs, i64::from(bos), model.max_positions())
            .map_err(|e| e.context(path.display().to_string()))?;
    }
    Ok(pairs)
}

/// Runs `train-orpo`.
pub fn train(o: &OrpoOptions) -> Result<()> {
    let common = &o.common;
    let model = common.model.load()?;
    let pad = model.pad_id();
    let (train, heldout) = common.read_data(|p| read(p, &model, o))?;
    let offline = start_run(&common.output, model.policy.device())?;
    let eval = |policy: &Policy| -> Result<Option<OrpoLine>> {
        heldout
            .as_ref()
            .map(|h| {
                Ok(OrpoLine::new(
                    0,
                    &orpo::evaluate(policy, h, o.beta, (pad, &o.common.memory))?,
                    0.0,
                    true,
                ))
            })
            .transpose()
    };
    let before = eval(&model.policy)?;
    let step = |t: &mut Trainer, rows: &[usize]| {
        let (f, g) = orpo::step(update(t, common), (&train, pad), rows, o.beta)?;
        Ok(OrpoLine::new(t.state.step, &f, g.grad_norm, g.stepped))
    };
    let rows = |step| step_rows(train.len(), common.batch_size, common.seed, step);
    let policy = common.train(model.policy, &offline, step, rows)?;
    let after = eval(&policy)?;
    let report = serde_json::json!({"loss_type": "orpo", "beta": o.beta, "steps": common.steps,
                                    "heldout_before": before, "heldout_after": after});
    offline.finish(&report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bos_is_prepended_once_and_overflow_names_the_pair() {
        let mut pairs = Pairs {
            prompts: vec![vec![1, 5], vec![7]],
            chosen: vec![vec![9], vec![9, 9]],
            rejected: vec![vec![8], vec![8]],
            margins: None,
        };
        prepend_bos(&mut pairs, 1, 16).unwrap();
        assert_eq!(pairs.prompts, vec![vec![1, 5], vec![1, 7]]);
        let err = prepend_bos(
            &mut Pairs {
                prompts: vec![vec![7, 7]],
                chosen: vec![vec![9]],
                rejected: vec![vec![8]],
                margins: None,
            },
            1,
            3,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("pair 1") && err.contains("4 tokens"), "{err}");
    }
}
