//! What the offline preference commands share (`train-dpo`, `train-orpo`, `train-kto`): their
//! common arguments, and the run itself through the one trainer (resume from
//! `checkpoints/latest`, Ctrl-C, `metrics.jsonl`, the final checkpoints). Each command brings
//! its data, its loss and its step.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use reinforge_torch::logprobs::{token_logprobs_with, Entropy};
use reinforge_torch::tch::{Kind, Tensor};
use reinforge_torch::{copy_aux_files, Policy, SequenceBatch};

use super::args::{count, ModelArgs};
use crate::run_dir::{read_json, RunDir};
use crate::trainer::checkpoint::{OPTIMIZER_FILE, STATE_FILE};
use crate::trainer::{optimizer, Phase, PhaseEnd, PhasePlan, StepLog, Trainer, TrainerState};

/// Arguments every offline preference command takes.
#[derive(Args, Debug)]
pub struct OfflineArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Training rows (jsonl or parquet).
    #[arg(long, value_name = "FILE")]
    pub data: PathBuf,
    /// Held-out rows: the command's metrics before and after training, in report.json.
    #[arg(long, value_name = "FILE")]
    pub heldout: Option<PathBuf>,
    /// Run directory (checkpoints, metrics.jsonl, report.json); an existing one is resumed.
    #[arg(long, short, value_name = "DIR")]
    pub output: PathBuf,
    /// Optimizer steps.
    #[arg(long, default_value_t = 50, value_parser = count)]
    pub steps: usize,
    /// Rows (pairs, for paired data) per step.
    #[arg(long, default_value_t = 8, value_parser = count)]
    pub batch_size: usize,
    /// AdamW learning rate (TRL's DPOConfig, ORPOConfig and KTOConfig default 1e-6).
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

impl OfflineArgs {
    /// The run directory, created with its `checkpoints/`.
    pub fn run_dir(&self) -> Result<RunDir> {
        let run = RunDir {
            root: self.output.clone(),
        };
        std::fs::create_dir_all(run.root.join("checkpoints"))
            .with_context(|| format!("creating {}", run.root.display()))?;
        Ok(run)
    }

    /// The training rows and the held-out ones (when `--heldout` is given), read by `read`.
    pub fn read_data<T>(&self, read: impl Fn(&Path) -> Result<T>) -> Result<(T, Option<T>)> {
        let train = read(&self.data)?;
        let heldout = self.heldout.as_deref().map(&read).transpose()?;
        Ok((train, heldout))
    }

    /// Trains `start` for `--steps` steps of `step` in `run`, resuming from
    /// `checkpoints/latest` when it exists; saves `latest` and `final` and returns the trained
    /// policy. Ctrl-C saves and returns an error saying how to continue.
    pub fn train<L: StepLog>(
        &self,
        start: Policy,
        run: &RunDir,
        mut step: impl FnMut(&mut Trainer, &[usize]) -> Result<L>,
        rows: impl Fn(usize) -> Vec<usize>,
    ) -> Result<Policy> {
        let latest = run.checkpoint("latest");
        let resumed = latest.join(STATE_FILE).exists();
        let policy = if resumed {
            Policy::load(&latest, start.device())?
        } else {
            start
        };
        let state = if resumed {
            read_json::<TrainerState>(&latest.join(STATE_FILE))?
        } else {
            TrainerState::start(Phase::Dpo)
        };
        let model_dir = self.model.model.clone();
        let files = move |dir: &Path| -> Result<()> { copy_aux_files(&model_dir, dir).map(drop) };
        let mut trainer = Trainer::new(
            &policy,
            optimizer(&policy, self.lr, 0.0),
            state,
            Box::new(files),
        );
        if resumed {
            trainer.opt.load(&latest.join(OPTIMIZER_FILE))?;
        }
        let plan = PhasePlan {
            steps: self.steps,
            checkpoint_every: self.checkpoint_every,
            metrics_file: "metrics.jsonl",
        };
        let end = trainer.run_phase(run, &plan, |t| {
            let rows = rows(t.state.step);
            t.opt.zero_grad();
            step(t, &rows)
        })?;
        if end == PhaseEnd::Interrupted {
            bail!("stopped; run the same command again to continue");
        }
        trainer.save(run, "latest", true)?;
        trainer.save(run, "final", false)?;
        drop(trainer);
        Ok(policy)
    }
}

/// Per-token log-probs `[N, L-1]` of `prompts[i] ++ completions[i]` under `policy`, with the
/// batch they were read from (its `loss_mask` marks the completion tokens).
pub fn token_logps(
    policy: &Policy,
    prompts: &[&[i64]],
    completions: &[&[i64]],
    pad: i64,
) -> (Tensor, SequenceBatch) {
    let batch = SequenceBatch::new(prompts, completions, pad, policy.device());
    let (logp, _) = token_logprobs_with(&policy.model, &batch, 1.0, Entropy::Skip);
    (logp, batch)
}

/// Summed completion log-probs `[N]` of `prompts[i] ++ completions[i]` under `policy`.
pub fn completion_logps(
    policy: &Policy,
    prompts: &[&[i64]],
    completions: &[&[i64]],
    pad: i64,
) -> Tensor {
    let (logp, batch) = token_logps(policy, prompts, completions, pad);
    (logp * &batch.loss_mask).sum_dim_intlist(1, false, Kind::Float)
}

/// A float tensor of `values`' lengths.
pub fn lengths_of(values: &[&[i64]]) -> Tensor {
    let v: Vec<f32> = values.iter().map(|s| s.len() as f32).collect();
    Tensor::from_slice(&v)
}
