//! `reinforge train-dpo`: offline preference optimisation of a Hugging Face checkpoint with
//! TRL's DPO family (`reinforge_torch::loss::dpo`), through the one trainer (checkpoints,
//! Ctrl-C and `--output` resume, metrics). Reference log-probs are computed once, before
//! training, from the starting model (TRL's `precompute_ref_log_probs`), so no frozen copy is
//! kept.

use anyhow::Result;
use clap::Args;
use reinforge_torch::loss::dpo::{
    dpo_loss, DpoBatch, DpoConfig, DpoLoss, FDivergence, PairMetrics,
};
use reinforge_torch::tch::Tensor;
use reinforge_torch::Policy;
use serde::Serialize;

use super::offline::{completion_logps, ranks, update, OfflineArgs, Share};
use super::pairs::{read_pairs, step_rows, Pairs};
use crate::run_dir::read_json;
use crate::tools::ByName;
use crate::trainer::{StepLog, Trainer};

/// Train a checkpoint on preference pairs with a DPO-family loss (TRL's loss types).
#[derive(Args, Debug)]
#[command(after_help = "\
DATA (jsonl or parquet): {\"prompt\": TEXT or [messages], \"chosen\": TEXT, \"rejected\": TEXT}
Losses (TRL DPOConfig.loss_type): sigmoid (DPO), hinge, ipo, exo_pair, nca_pair, robust,
bco_pair, sppo_hard, aot, aot_unpaired, apo_zero, apo_down, discopop, sft, sigmoid_norm.
metrics.jsonl logs TRL's names: loss, rewards/chosen, rewards/rejected, rewards/accuracies,
rewards/margins, logps/chosen, logps/rejected.

EXAMPLES:
  reinforge train-dpo --model ckpt --data pairs.jsonl --heldout test.jsonl --output runs/dpo
  reinforge train-dpo --model ckpt --data pairs.jsonl --loss-type ipo --beta 0.5 --output runs/ipo
  (run it again with the same --output to continue after Ctrl-C)")]
pub struct TrainDpoArgs {
    #[command(flatten)]
    pub common: OfflineArgs,
    #[arg(long, value_parser = ByName(DpoLoss::ALL), default_value = "sigmoid")]
    pub loss_type: DpoLoss,
    #[arg(long, default_value_t = 0.1, value_parser = crate::tools::positive)]
    pub beta: f64,
    #[arg(long, default_value_t = 0.0, value_parser = crate::tools::non_negative)]
    pub label_smoothing: f64,
    #[arg(long, value_parser = ByName(FDivergence::ALL), default_value = "reverse_kl")]
    pub f_divergence_type: FDivergence,
    #[arg(long, default_value_t = 1.0)]
    pub f_alpha_divergence_coef: f64,
    #[arg(long, default_value_t = 0.05, value_parser = crate::tools::positive)]
    pub discopop_tau: f64,
}

/// Summed completion log-probs of `rows` of `pairs` under `policy`: `[2B]`, chosen first.
fn sequence_logps(policy: &Policy, pairs: &Pairs, rows: &[usize], pad: i64) -> Tensor {
    let (prompts, completions) = pairs.sides(rows);
    completion_logps(policy, &prompts, &completions, pad)
}

/// Lengths `[B]` of the chosen or rejected completions of `rows`.
fn lengths(side: &[Vec<i64>], rows: &[usize]) -> Tensor {
    let v: Vec<f32> = rows.iter().map(|&r| side[r].len() as f32).collect();
    // host: lengths; dpo_loss moves them to the log-probs' device.
    Tensor::from_slice(&v)
}

/// The reference log-probs of every pair (chosen, rejected), computed once.
fn reference_logps(policy: &Policy, pairs: &Pairs, pad: i64, batch: usize) -> (Vec<f32>, Vec<f32>) {
    let _guard = reinforge_torch::tch::no_grad_guard();
    let (mut c, mut r) = (vec![], vec![]);
    let all: Vec<usize> = (0..pairs.prompts.len()).collect();
    for chunk in all.chunks(batch) {
        let lp =
            Vec::<f32>::try_from(&sequence_logps(policy, pairs, chunk, pad)).unwrap_or_default();
        c.extend_from_slice(&lp[..chunk.len()]);
        r.extend_from_slice(&lp[chunk.len()..]);
    }
    (c, r)
}

/// One line of `metrics.jsonl`, TRL's metric names.
#[derive(Debug, Clone, Serialize)]
pub struct DpoLine {
    pub step: usize,
    pub loss: f64,
    #[serde(flatten)]
    pub pair: PairMetrics,
    pub grad_norm: f64,
    #[serde(skip)]
    pub nonfinite_grad_steps: usize,
}

impl StepLog for DpoLine {
    fn bar_message(&self) -> String {
        format!(
            "loss {:.4} acc {:.2}",
            self.loss, self.pair.rewards_accuracies
        )
    }

    fn nonfinite_grad_steps(&self) -> usize {
        self.nonfinite_grad_steps
    }
}

/// Held-out figures (`report.json`).
#[derive(Debug, Serialize)]
struct Heldout {
    pairs: usize,
    /// Share of pairs where the policy's implicit reward prefers the chosen completion
    /// (β·log-ratio, against the starting model); 0 before training by construction of ties.
    rewards_accuracies: f64,
    rewards_margins: f64,
    /// Mean summed log-prob of the chosen completions.
    logps_chosen: f64,
}

/// The loss settings of `args`.
fn config(args: &TrainDpoArgs) -> DpoConfig {
    DpoConfig {
        losses: vec![(args.loss_type, 1.0)],
        beta: args.beta,
        label_smoothing: args.label_smoothing,
        f_divergence: args.f_divergence_type,
        f_alpha_divergence_coef: args.f_alpha_divergence_coef,
        discopop_tau: args.discopop_tau,
    }
}

/// The DPO metrics of `rows` (no gradient) against reference log-probs `refs`.
fn evaluate(
    policy: &Policy,
    pairs: &Pairs,
    refs: &(Vec<f32>, Vec<f32>),
    cfg: &DpoConfig,
    pad: i64,
) -> Result<Heldout> {
    let _guard = reinforge_torch::tch::no_grad_guard();
    let rows: Vec<usize> = (0..pairs.prompts.len()).collect();
    let lp = sequence_logps(policy, pairs, &rows, pad);
    let b = rows.len() as i64;
    let out = dpo_loss(cfg, &batch_of(&lp, b, refs, pairs, &rows).view())?;
    Ok(Heldout {
        pairs: rows.len(),
        rewards_accuracies: out.metrics.rewards_accuracies,
        rewards_margins: out.metrics.rewards_margins,
        logps_chosen: out.metrics.logps_chosen,
    })
}

/// Tensors of one batch: policy log-probs split into chosen/rejected, references, lengths.
struct BatchTensors {
    chosen: Tensor,
    rejected: Tensor,
    ref_c: Tensor,
    ref_r: Tensor,
    len_c: Tensor,
    len_r: Tensor,
}

/// The tensors of `rows`: policy log-probs `lp` (`[2B]`, chosen first) split, references,
/// lengths.
fn batch_of(
    lp: &Tensor,
    b: i64,
    refs: &(Vec<f32>, Vec<f32>),
    pairs: &Pairs,
    rows: &[usize],
) -> BatchTensors {
    BatchTensors {
        chosen: lp.narrow(0, 0, b),
        rejected: lp.narrow(0, b, b),
        // host: reference log-probs computed once; dpo_loss moves them to the device.
        ref_c: Tensor::from_slice(&rows.iter().map(|&r| refs.0[r]).collect::<Vec<_>>()),
        // host: as ref_c.
        ref_r: Tensor::from_slice(&rows.iter().map(|&r| refs.1[r]).collect::<Vec<_>>()),
        len_c: lengths(&pairs.chosen, rows),
        len_r: lengths(&pairs.rejected, rows),
    }
}

impl BatchTensors {
    fn view(&self) -> DpoBatch<'_> {
        DpoBatch {
            chosen_logps: &self.chosen,
            rejected_logps: &self.rejected,
            ref_chosen_logps: &self.ref_c,
            ref_rejected_logps: &self.ref_r,
            chosen_lengths: &self.len_c,
            rejected_lengths: &self.len_r,
        }
    }
}

/// Runs `train-dpo`.
pub fn train(args: &TrainDpoArgs) -> Result<()> {
    let common = &args.common;
    let model = common.model.load()?;
    let pad = model.pad_id();
    let (train, heldout) = common.read_data(|p| read_pairs(p, &model, common.raw))?;
    let cfg = config(args);
    let offline = common.start(model.policy.device())?;
    let run = &offline.dir;
    // References and the held-out baseline come from the starting model (kept in the run
    // directory, so a resumed run uses the same ones).
    let refs_path = run.path("reference_logps.json");
    let refs: (Vec<f32>, Vec<f32>) = if refs_path.exists() {
        read_json(&refs_path)?
    } else {
        let r = reference_logps(&model.policy, &train, pad, common.batch_size);
        offline.write_json("reference_logps.json", &r)?;
        r
    };
    let heldout_refs = heldout
        .as_ref()
        .map(|h| reference_logps(&model.policy, h, pad, common.batch_size));
    let before = match (&heldout, &heldout_refs) {
        (Some(h), Some(r)) => Some(evaluate(&model.policy, h, r, &cfg, pad)?),
        _ => None,
    };
    let step = |t: &mut Trainer, rows: &[usize]| {
        let dp = t.dp.clone();
        let policy = t.policy;
        let sides = Share::new(ranks(dp.as_deref()), rows.len(), policy.device()).read(
            rows,
            2,
            |local| {
                let lp = sequence_logps(policy, &train, local, pad);
                let b = local.len() as i64;
                vec![lp.narrow(0, 0, b), lp.narrow(0, b, b)]
            },
        )?;
        let lp = Tensor::cat(&sides, 0);
        let view = batch_of(&lp, rows.len() as i64, &refs, &train, rows);
        let out = dpo_loss(&cfg, &view.view())?;
        let g = update(t, &out.loss, common.max_grad_norm, common.lr)?;
        Ok(DpoLine {
            step: t.state.step,
            loss: out.loss.double_value(&[]),
            pair: out.metrics,
            grad_norm: g.grad_norm,
            nonfinite_grad_steps: usize::from(!g.stepped),
        })
    };
    let rows = |step| step_rows(train.len(), common.batch_size, common.seed, step);
    let policy = common.train(model.policy, &offline, step, rows)?;
    let after = match (&heldout, &heldout_refs) {
        (Some(h), Some(r)) => Some(evaluate(&policy, h, r, &cfg, pad)?),
        _ => None,
    };
    let report = serde_json::json!({"loss_type": args.loss_type, "beta": args.beta, "steps": common.steps,
                                    "heldout_before": before, "heldout_after": after});
    offline.finish(&report)
}
