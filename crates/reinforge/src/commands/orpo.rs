//! `reinforge train-orpo`: reference-free preference optimisation of a Hugging Face checkpoint
//! with TRL's ORPO (`reinforge_torch::loss::orpo`), through the one trainer. One forward pass
//! per step reads both things ORPO needs: the completions' log-probs (the odds ratio) and the
//! chosen sequences' log-probs over prompt and completion (TRL's NLL term).

use anyhow::Result;
use clap::Args;
use reinforge_torch::loss::dpo::PairMetrics;
use reinforge_torch::loss::orpo::{orpo_loss, OrpoBatch, OrpoOutput};
use reinforge_torch::tch::{Kind, Tensor};
use reinforge_torch::Policy;
use serde::Serialize;

use super::offline::{lengths_of, ranks, token_logps, update, OfflineArgs, Share};
use super::pairs::{read_pairs, step_rows, Pairs};
use crate::trainer::{StepLog, Trainer};

/// Train a checkpoint on preference pairs with ORPO (no reference model).
#[derive(Args, Debug)]
#[command(after_help = "\
DATA (jsonl or parquet): {\"prompt\": TEXT or [messages], \"chosen\": TEXT, \"rejected\": TEXT}
Loss (TRL ORPOTrainer): mean NLL of the chosen sequences (prompt included, as TRL counts it)
minus beta * mean log-sigmoid of the log odds ratio of the per-token mean log-probs.
metrics.jsonl logs TRL's names: loss, rewards/chosen, rewards/rejected, rewards/accuracies,
rewards/margins, logps/chosen, logps/rejected, nll_loss, log_odds_ratio, log_odds_chosen.

EXAMPLES:
  reinforge train-orpo --model ckpt --data pairs.jsonl --heldout test.jsonl --output runs/orpo
  (run it again with the same --output to continue after Ctrl-C)")]
pub struct TrainOrpoArgs {
    #[command(flatten)]
    pub common: OfflineArgs,
    /// Weight of the odds-ratio term (TRL's ORPOConfig.beta, the paper's lambda).
    #[arg(long, default_value_t = 0.1, value_parser = crate::tools::positive)]
    pub beta: f64,
    /// Whether every prompt starts with the tokenizer's BOS: `tokenizer` (as the tokenizer
    /// and chat template produce it, like train-dpo and TRL's DPOTrainer) or `always` (prepend
    /// it when missing, as TRL's ORPOTrainer.tokenize_row does).
    #[arg(long, value_enum, default_value_t = PromptBos::Tokenizer)]
    pub prompt_bos: PromptBos,
}

/// Where the frameworks disagree on a prompt's BOS (see `--prompt-bos`).
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptBos {
    /// The prompt ids as the tokenizer (or chat template) gives them.
    Tokenizer,
    /// BOS prepended when the prompt does not start with it (TRL 1.16 ORPOTrainer).
    Always,
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

/// The per-pair sums ORPO reads, from one forward pass.
struct OrpoTensors {
    chosen: Tensor,
    rejected: Tensor,
    len_c: Tensor,
    len_r: Tensor,
    full: Tensor,
    full_len: Tensor,
}

impl OrpoTensors {
    /// Reads `rows` of `pairs` under `policy`. The chosen rows are packed with only their first
    /// token as "prompt", so the per-token log-probs cover every token TRL's NLL counts; the
    /// completion sums use the usual prompt/completion split of the same ids.
    fn read(policy: &Policy, pairs: &Pairs, rows: &[usize], pad: i64) -> Self {
        let (prompts, completions) = pairs.sides(rows);
        let b = rows.len();
        let seqs: Vec<Vec<i64>> = prompts
            .iter()
            .zip(&completions)
            .map(|(p, c)| [*p, *c].concat())
            .collect();
        // Chosen rows: everything after the first token is scored; rejected rows as usual.
        let heads: Vec<&[i64]> = (0..2 * b)
            .map(|i| if i < b { &seqs[i][..1] } else { prompts[i] })
            .collect();
        let tails: Vec<&[i64]> = (0..2 * b)
            .map(|i| if i < b { &seqs[i][1..] } else { completions[i] })
            .collect();
        let (logp, forward) = token_logps(policy, &heads, &tails, pad);
        let split =
            reinforge_torch::SequenceBatch::new(&prompts, &completions, pad, policy.device());
        let sum = |mask: &Tensor| (&logp * mask).sum_dim_intlist(1, false, Kind::Float);
        let completion = sum(&split.loss_mask);
        let full = sum(&forward.loss_mask);
        let b = b as i64;
        Self {
            chosen: completion.narrow(0, 0, b),
            rejected: completion.narrow(0, b, b),
            len_c: lengths_of(&completions[..rows.len()]),
            len_r: lengths_of(&completions[rows.len()..]),
            full: full.narrow(0, 0, b),
            full_len: lengths_of(&tails[..rows.len()]),
        }
    }

    /// [`Self::read`] of a step's `rows` across data-parallel ranks: each reads its share and
    /// the per-pair sums are gathered (lengths come from the rows themselves).
    fn read_shared<'p>(
        policy: &Policy,
        pairs: &'p Pairs,
        rows: &[usize],
        pad: i64,
        share: &Share,
    ) -> Result<Self> {
        let mut sums = share.read(rows, 3, |local| {
            let t = Self::read(policy, pairs, local, pad);
            vec![t.chosen, t.rejected, t.full]
        })?;
        let whole = |side: &'p [Vec<i64>]| -> Vec<&'p [i64]> {
            rows.iter().map(|&r| side[r].as_slice()).collect()
        };
        let full_len: Vec<f32> = rows
            .iter()
            .map(|&r| (pairs.prompts[r].len() + pairs.chosen[r].len()).saturating_sub(1) as f32)
            .collect();
        let full = sums.pop().unwrap_or_default();
        let rejected = sums.pop().unwrap_or_default();
        let chosen = sums.pop().unwrap_or_default();
        Ok(Self {
            chosen,
            rejected,
            len_c: lengths_of(&whole(&pairs.chosen)),
            len_r: lengths_of(&whole(&pairs.rejected)),
            full,
            // host: lengths; orpo_loss moves them to the log-probs' device.
            full_len: Tensor::from_slice(&full_len),
        })
    }

    fn view(&self) -> OrpoBatch<'_> {
        OrpoBatch {
            chosen_logps: &self.chosen,
            rejected_logps: &self.rejected,
            chosen_lengths: &self.len_c,
            rejected_lengths: &self.len_r,
            chosen_full_logps: &self.full,
            chosen_full_lengths: &self.full_len,
        }
    }
}

/// One line of `metrics.jsonl`, TRL's metric names.
#[derive(Debug, Clone, Serialize)]
pub struct OrpoLine {
    pub step: usize,
    pub loss: f64,
    #[serde(flatten)]
    pub pair: PairMetrics,
    pub nll_loss: f64,
    pub log_odds_ratio: f64,
    pub log_odds_chosen: f64,
    pub grad_norm: f64,
    #[serde(skip)]
    pub nonfinite_grad_steps: usize,
}

impl OrpoLine {
    fn new(step: usize, out: &OrpoOutput, grad_norm: f64, stepped: bool) -> Self {
        Self {
            step,
            loss: out.loss.double_value(&[]),
            pair: out.metrics,
            nll_loss: out.nll_loss,
            log_odds_ratio: out.log_odds_ratio,
            log_odds_chosen: out.log_odds_chosen,
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

/// ORPO's metrics on every held-out pair, without gradients (`grad_norm` 0).
fn evaluate(policy: &Policy, pairs: &Pairs, beta: f64, pad: i64) -> Result<OrpoLine> {
    let _guard = reinforge_torch::tch::no_grad_guard();
    let rows: Vec<usize> = (0..pairs.len()).collect();
    let t = OrpoTensors::read(policy, pairs, &rows, pad);
    Ok(OrpoLine::new(0, &orpo_loss(beta, &t.view())?, 0.0, true))
}

/// Runs `train-orpo`.
pub fn train(args: &TrainOrpoArgs) -> Result<()> {
    let common = &args.common;
    let model = common.model.load()?;
    let pad = model.pad_id();
    let read = |path: &std::path::Path| -> Result<Pairs> {
        let mut pairs = read_pairs(path, &model, common.raw)?;
        if args.prompt_bos == PromptBos::Always {
            let Some(bos) = model.tokenizer.bos_token_id() else {
                anyhow::bail!("--prompt-bos always: the tokenizer has no BOS token");
            };
            prepend_bos(&mut pairs, i64::from(bos), model.max_positions())
                .map_err(|e| e.context(path.display().to_string()))?;
        }
        Ok(pairs)
    };
    let (train, heldout) = common.read_data(read)?;
    let offline = common.start(model.policy.device())?;
    let before = heldout
        .as_ref()
        .map(|h| evaluate(&model.policy, h, args.beta, pad))
        .transpose()?;
    let step = |t: &mut Trainer, rows: &[usize]| {
        let dp = t.dp.clone();
        let policy = t.policy;
        let share = Share::new(ranks(dp.as_deref()), rows.len(), policy.device());
        let tensors = OrpoTensors::read_shared(policy, &train, rows, pad, &share)?;
        let out = orpo_loss(args.beta, &tensors.view())?;
        let g = update(t, &out.loss, common.max_grad_norm, common.lr)?;
        Ok(OrpoLine::new(t.state.step, &out, g.grad_norm, g.stepped))
    };
    let rows = |step| step_rows(train.len(), common.batch_size, common.seed, step);
    let policy = common.train(model.policy, &offline, step, rows)?;
    let after = heldout
        .as_ref()
        .map(|h| evaluate(&policy, h, args.beta, pad))
        .transpose()?;
    let report = serde_json::json!({"loss_type": "orpo", "beta": args.beta, "steps": common.steps,
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
