//! The offline trainers: preference optimisation (`dpo`, `orpo`, `kto`), distillation towards
//! a teacher (`distill`), reward models (`rm`) and Prompt-to-Leaderboard (`p2l`), each a
//! library `Options` struct and a `train` function running through the one trainer
//! (`Trainer::run_phase`: resume from `checkpoints/latest`, Ctrl-C, `metrics.jsonl`, the final
//! checkpoints). Their tensor work is reinforge-torch's (`preference::{dpo, orpo, kto, rm}`,
//! `distill`, `p2l`).
//!
//! Data-parallel (started by torchrun or any launcher that sets its variables): each rank
//! reads its contiguous share of a step's rows through the model, the per-row values (summed
//! log-probs, rewards) are all-gathered, and every rank computes the loss of the whole batch,
//! with gradient flowing only through its own rows. Summing the gradients over the ranks then
//! gives exactly the single-process gradient, whatever couples the rows (AOT's sort, ORPO's
//! token mean, KTO's KL point), and the logged metrics are the whole batch's on every rank.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use reinforge_torch::dist::broadcast_parameters;
use reinforge_torch::train::preference::{Ranks, Update};
use reinforge_torch::{copy_aux_files, LoraConfig, Policy};

use crate::loaded::ModelSource;
use reinforge_train::dp::Dp;
use reinforge_train::run_dir::{write_json, RunDir};
use reinforge_train::trainer::checkpoint::OPTIMIZER_FILE;
use reinforge_train::trainer::{
    optimizer, save_final_adapter, Phase, PhaseEnd, PhasePlan, Start, StepLog, Tracking, Trainer,
};

pub mod distill;
pub mod distill_remote;
pub mod dpo;
pub mod kto;
pub mod orpo;
pub mod p2l;
pub mod rm;
pub mod sft;
pub mod sft_rows;

/// What every offline preference trainer takes.
#[derive(Debug, Clone)]
pub struct OfflineOptions {
    pub model: ModelSource,
    /// Training rows (jsonl or parquet).
    pub data: PathBuf,
    /// Held-out rows: the trainer's metrics before and after training, in report.json.
    pub heldout: Option<PathBuf>,
    /// Run directory (checkpoints, metrics.jsonl, report.json); an existing one is resumed.
    pub output: PathBuf,
    /// Optimizer steps.
    pub steps: usize,
    /// Rows (pairs, for paired data) per step.
    pub batch_size: usize,
    /// AdamW learning rate.
    pub lr: f64,
    pub max_grad_norm: f64,
    /// Save checkpoints/latest every this many steps (0: at the end and on Ctrl-C).
    pub checkpoint_every: usize,
    pub seed: u64,
    /// Use prompt text as is, without the chat template.
    pub raw: bool,
    /// Micro-batches of a step's rows under a token budget (the gradient is unchanged).
    pub memory: reinforge_torch::Memory,
    /// TensorBoard and MLflow (`--tensorboard`, `--mlflow-uri`), with the command's options
    /// as parameters: a run without a `config.toml` is tracked by what it is given.
    pub tracking: Tracking,
    /// Keep a vision-language model's vision tower fixed (TRL's and verl's default; `false`
    /// trains it with the language model, full fine-tuning only).
    pub vision_freeze: bool,
}

/// A started offline run: its directory and, when data-parallel, this process's rank.
pub struct OfflineRun {
    pub dir: RunDir,
    pub dp: Option<Arc<Dp>>,
}

impl OfflineRun {
    /// Whether this process writes the run's files (a single process, or rank 0).
    pub fn writes(&self) -> bool {
        self.dp.as_ref().is_none_or(|d| d.rank() == 0)
    }

    /// Writes `report` to `report.json` and prints it (rank 0 only).
    pub fn finish(&self, report: &serde_json::Value) -> Result<()> {
        if self.writes() {
            self.write_json("report.json", report)?;
            println!("{}", serde_json::to_string_pretty(report)?);
        }
        Ok(())
    }

    /// Writes `value` as JSON to `name` in the run directory (rank 0 only).
    pub fn write_json(&self, name: &str, value: &impl serde::Serialize) -> Result<()> {
        if self.writes() {
            write_json(&self.dir.path(name), value)?;
        }
        Ok(())
    }
}

/// The optimizer step of `t` for reinforge-torch's objectives, with `o`'s clipping and rate
/// (each data-parallel rank reads its share of a step's rows).
pub fn update<'t>(t: &'t mut Trainer, o: &OfflineOptions) -> Update<'t> {
    Update {
        policy: t.policy,
        opt: &mut t.opt,
        dp: t.dp.as_deref().map(|d| Ranks {
            pg: &d.pg,
            rank: d.rank(),
            world: d.world(),
        }),
        max_grad_norm: o.max_grad_norm,
        lr: o.lr,
        memory: o.memory,
    }
}

/// Unfreezes `policy`'s vision tower unless `freeze` (a loaded tower starts frozen).
pub fn set_vision_training(policy: &Policy, freeze: bool, lora: bool) -> Result<()> {
    check_vision_training(policy, freeze, lora)?;
    if !freeze {
        policy.set_vision_trainable(true);
    }
    Ok(())
}

/// Refuses training the vision tower (`freeze` false) under LoRA (the adapters are the
/// language model's) and on a text-only model; a trainer calls it before writing anything.
pub fn check_vision_training(policy: &Policy, freeze: bool, lora: bool) -> Result<()> {
    if freeze {
        return Ok(());
    }
    if policy.model.config().vision.is_none() {
        anyhow::bail!("vision_freeze = false: the model has no vision tower to train");
    }
    if lora {
        anyhow::bail!(
            "vision_freeze = false with LoRA: the adapters train the language model only; \
             train the tower with full fine-tuning (no --lora-r) or keep it frozen"
        );
    }
    Ok(())
}

/// Creates the run directory `output` (with its `checkpoints/`), joins the data-parallel job
/// torchrun's variables describe, if any, and installs the Ctrl-C handler.
pub fn start_run(output: &Path, device: reinforge_torch::Device) -> Result<OfflineRun> {
    let dir = RunDir {
        root: output.to_path_buf(),
    };
    std::fs::create_dir_all(dir.root.join("checkpoints"))
        .with_context(|| format!("creating {}", dir.root.display()))?;
    let dp = Dp::from_env(device)?.map(Arc::new);
    reinforge_train::interrupt::install()?;
    if let Some(d) = dp.as_ref().filter(|d| d.rank() == 0) {
        eprintln!("data-parallel: {} ranks", d.world());
    }
    Ok(OfflineRun { dir, dp })
}

impl OfflineOptions {
    /// The training rows and the held-out ones (when given), read by `read`.
    pub fn read_data<T>(&self, read: impl Fn(&Path) -> Result<T>) -> Result<(T, Option<T>)> {
        let train = read(&self.data)?;
        let heldout = self.heldout.as_deref().map(&read).transpose()?;
        Ok((train, heldout))
    }

    /// Trains `start` for `steps` steps of `step` in `run`, resuming from
    /// `checkpoints/latest` when it exists; saves `latest` and `final` and returns the trained
    /// policy. Ctrl-C saves and returns an error saying how to continue.
    pub fn train<L: StepLog>(
        &self,
        start: Policy,
        offline: &OfflineRun,
        step: impl FnMut(&mut Trainer, &[usize]) -> Result<L>,
        rows: impl Fn(usize) -> Vec<usize>,
    ) -> Result<Policy> {
        self.train_with(start, None, offline, step, rows)
    }

    /// [`OfflineOptions::train`], training LoRA adapters of `lora` instead of every weight
    /// when given (seeded by the run's seed; checkpoints hold the merged weights and the PEFT
    /// adapter in `adapter/`, a resumed run reloads the adapter onto `start`;
    /// `checkpoints/final-adapter` is the adapter alone).
    pub fn train_with<L: StepLog>(
        &self,
        start: Policy,
        lora: Option<&LoraConfig>,
        offline: &OfflineRun,
        mut step: impl FnMut(&mut Trainer, &[usize]) -> Result<L>,
        rows: impl Fn(usize) -> Vec<usize>,
    ) -> Result<Policy> {
        let run = &offline.dir;
        let opened = Start::open(run, Phase::Preference)?;
        let mut policy = start;
        opened.prepare_policy(&mut policy, lora, self.seed)?;
        set_vision_training(&policy, self.vision_freeze, lora.is_some())?;
        let Start {
            latest,
            state,
            resumed,
        } = opened;
        let model_dir = self.model.dir.clone();
        let with_adapter = lora.is_some();
        let files = |dir: &Path| -> Result<()> {
            copy_aux_files(&model_dir, dir)?;
            if with_adapter {
                policy.save_adapter(&dir.join("adapter"), &model_dir.to_string_lossy())?;
            }
            Ok(())
        };
        let mut trainer = Trainer::new(&policy, optimizer(&policy, 0.0), state, Box::new(files))
            .with_tracking(self.tracking.clone());
        if resumed {
            trainer.opt.load(&latest.join(OPTIMIZER_FILE))?;
        }
        if let Some(d) = &offline.dp {
            broadcast_parameters(&d.pg, &policy.vs)?;
            trainer.dp = Some(d.clone());
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
            return Err(reinforge_train::interrupt::Stopped.into());
        }
        trainer.save(run, "latest", true)?;
        trainer.save(run, "final", false)?;
        drop(trainer);
        if with_adapter && offline.writes() {
            save_final_adapter(run, &policy, &self.model.dir)?;
        }
        Ok(policy)
    }
}
