//! `reinforge train-dpo`: offline preference optimisation of a Hugging Face checkpoint with
//! TRL's DPO family (`reinforge_torch::loss::dpo`), through the one trainer (checkpoints,
//! Ctrl-C and `--output` resume, metrics). Reference log-probs are computed once, before
//! training, from the starting model (TRL's `precompute_ref_log_probs`), so no frozen copy is
//! kept.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use reinforge_torch::logprobs::{token_logprobs_with, Entropy};
use reinforge_torch::loss::dpo::{dpo_loss, DpoBatch, DpoConfig, DpoLoss, FDivergence};
use reinforge_torch::tch::{Kind, Tensor};
use reinforge_torch::{copy_aux_files, Policy, SequenceBatch};
use serde::Serialize;

use super::args::{count, ModelArgs};
use super::pairs::{read_pairs, step_rows, Pairs};
use crate::run_dir::{read_json, write_json, RunDir};
use crate::tools::ByName;
use crate::trainer::checkpoint::{OPTIMIZER_FILE, STATE_FILE};
use crate::trainer::{optimizer, Phase, PhasePlan, StepLog, Trainer, TrainerState};

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
    pub model: ModelArgs,
    /// Preference pairs.
    #[arg(long, value_name = "FILE")]
    pub data: PathBuf,
    /// Held-out pairs: rewards/accuracies and the chosen log-prob before and after training.
    #[arg(long, value_name = "FILE")]
    pub heldout: Option<PathBuf>,
    /// Run directory (checkpoints, metrics.jsonl, report.json); an existing one is resumed.
    #[arg(long, short, value_name = "DIR")]
    pub output: PathBuf,
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
    /// Optimizer steps.
    #[arg(long, default_value_t = 50, value_parser = count)]
    pub steps: usize,
    /// Pairs per step.
    #[arg(long, default_value_t = 8, value_parser = count)]
    pub batch_size: usize,
    /// AdamW learning rate (TRL's DPOConfig default 1e-6).
    #[arg(long, default_value_t = 1e-6, value_parser = crate::tools::positive)]
    pub lr: f64,
    #[arg(long, default_value_t = 1.0, value_parser = crate::tools::positive)]
    pub max_grad_norm: f64,
    /// Save checkpoints/latest every this many steps (0: at the end and on Ctrl-C).
    #[arg(long, default_value_t = 0)]
    pub checkpoint_every: usize,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Use prompt text as is, without the chat template.
    #[arg(long)]
    pub raw: bool,
}

/// Summed completion log-probs of `rows` of `pairs` under `policy`: `[2B]`, chosen first.
fn sequence_logps(policy: &Policy, pairs: &Pairs, rows: &[usize], pad: i64) -> Tensor {
    let mut prompts: Vec<&[i64]> = rows.iter().map(|&r| pairs.prompts[r].as_slice()).collect();
    prompts.extend(rows.iter().map(|&r| pairs.prompts[r].as_slice()));
    let mut completions: Vec<&[i64]> = rows.iter().map(|&r| pairs.chosen[r].as_slice()).collect();
    completions.extend(rows.iter().map(|&r| pairs.rejected[r].as_slice()));
    let batch = SequenceBatch::new(&prompts, &completions, pad, policy.device());
    let (logp, _) = token_logprobs_with(&policy.model, &batch, 1.0, Entropy::Skip);
    (logp * &batch.loss_mask).sum_dim_intlist(1, false, Kind::Float)
}

/// Lengths `[B]` of the chosen or rejected completions of `rows`.
fn lengths(side: &[Vec<i64>], rows: &[usize]) -> Tensor {
    let v: Vec<f32> = rows.iter().map(|&r| side[r].len() as f32).collect();
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
    #[serde(rename = "rewards/chosen")]
    pub rewards_chosen: f64,
    #[serde(rename = "rewards/rejected")]
    pub rewards_rejected: f64,
    #[serde(rename = "rewards/accuracies")]
    pub rewards_accuracies: f64,
    #[serde(rename = "rewards/margins")]
    pub rewards_margins: f64,
    #[serde(rename = "logps/chosen")]
    pub logps_chosen: f64,
    #[serde(rename = "logps/rejected")]
    pub logps_rejected: f64,
    pub grad_norm: f64,
    #[serde(skip)]
    pub nonfinite_grad_steps: usize,
}

impl StepLog for DpoLine {
    fn bar_message(&self) -> String {
        format!("loss {:.4} acc {:.2}", self.loss, self.rewards_accuracies)
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
        rewards_accuracies: out.rewards_accuracies,
        rewards_margins: out.rewards_margins,
        logps_chosen: out.logps_chosen,
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
        ref_c: Tensor::from_slice(&rows.iter().map(|&r| refs.0[r]).collect::<Vec<_>>()),
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
    let model = args.model.load()?;
    let pad = model.pad_id();
    let train = read_pairs(&args.data, &model, args.raw)?;
    let heldout = args
        .heldout
        .as_ref()
        .map(|p| read_pairs(p, &model, args.raw))
        .transpose()?;
    let cfg = config(args);
    let run = RunDir {
        root: args.output.clone(),
    };
    std::fs::create_dir_all(run.root.join("checkpoints"))
        .with_context(|| format!("creating {}", run.root.display()))?;
    // References and the held-out baseline come from the starting model (kept in the run
    // directory, so a resumed run uses the same ones).
    let refs_path = run.path("reference_logps.json");
    let refs: (Vec<f32>, Vec<f32>) = if refs_path.exists() {
        read_json(&refs_path)?
    } else {
        let r = reference_logps(&model.policy, &train, pad, args.batch_size);
        write_json(&refs_path, &r)?;
        r
    };
    let heldout_refs = heldout
        .as_ref()
        .map(|h| reference_logps(&model.policy, h, pad, args.batch_size));
    let before = match (&heldout, &heldout_refs) {
        (Some(h), Some(r)) => Some(evaluate(&model.policy, h, r, &cfg, pad)?),
        _ => None,
    };
    let latest = run.checkpoint("latest");
    let resumed = latest.join(STATE_FILE).exists();
    let device = model.policy.device();
    let policy = if resumed {
        Policy::load(&latest, device)?
    } else {
        model.policy
    };
    let state = if resumed {
        read_json::<TrainerState>(&latest.join(STATE_FILE))?
    } else {
        TrainerState::start(Phase::Dpo)
    };
    let files = |dir: &Path| -> Result<()> {
        copy_aux_files(&args.model.model, dir)?;
        Ok(())
    };
    let mut trainer = Trainer::new(
        &policy,
        optimizer(&policy, args.lr, 0.0),
        state,
        Box::new(files),
    );
    if resumed {
        trainer.opt.load(&latest.join(OPTIMIZER_FILE))?;
    }
    let plan = PhasePlan {
        steps: args.steps,
        checkpoint_every: args.checkpoint_every,
        metrics_file: "metrics.jsonl",
    };
    let end = trainer.run_phase(&run, &plan, |t| {
        let rows = step_rows(
            train.prompts.len(),
            args.batch_size,
            args.seed,
            t.state.step,
        );
        t.opt.zero_grad();
        let lp = sequence_logps(t.policy, &train, &rows, pad);
        let view = batch_of(&lp, rows.len() as i64, &refs, &train, &rows);
        let out = dpo_loss(&cfg, &view.view())?;
        out.loss.backward();
        let g = t.opt.clip_and_step(args.max_grad_norm, args.lr);
        Ok(DpoLine {
            step: t.state.step,
            loss: out.loss.double_value(&[]),
            rewards_chosen: out.rewards_chosen,
            rewards_rejected: out.rewards_rejected,
            rewards_accuracies: out.rewards_accuracies,
            rewards_margins: out.rewards_margins,
            logps_chosen: out.logps_chosen,
            logps_rejected: out.logps_rejected,
            grad_norm: g.grad_norm,
            nonfinite_grad_steps: usize::from(!g.stepped),
        })
    })?;
    if end == crate::trainer::PhaseEnd::Interrupted {
        bail!("stopped; run the same command again to continue");
    }
    trainer.save(&run, "latest", true)?;
    trainer.save(&run, "final", false)?;
    let after = match (&heldout, &heldout_refs) {
        (Some(h), Some(r)) => Some(evaluate(&policy, h, r, &cfg, pad)?),
        _ => None,
    };
    let report = serde_json::json!({"loss_type": args.loss_type, "beta": args.beta, "steps": args.steps,
                                    "heldout_before": before, "heldout_after": after});
    write_json(&run.path("report.json"), &report)?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}
