//! The one trainer: a policy, its optimizer (built from the phase's config), an optional
//! critic and reference model, one [`TrainerState`], and one run loop
//! ([`Trainer::run_phase`]) that every kind of run uses: SFT, every RL preset (PPO's critic is
//! saved and resumed with the policy), dataset runs and the arithmetic experiment. The loop
//! owns interrupts (Ctrl-C checkpoints `latest` and returns), the progress bar, the metrics
//! file (truncated to the checkpoint on resume), the checkpoint schedule and the stop on
//! repeated non-finite gradients; a step function supplies one step.

pub mod checkpoint;
pub mod critic;
mod start;
mod state;
mod tracking;

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Result};
use reinforge_torch::{AdamW, AdamWConfig, Policy};
use serde::Serialize;

use crate::interrupt::interrupted_on_any;
use crate::progress;
use crate::run_dir::RunDir;
use critic::CriticState;
pub use start::{save_final_adapter, Start};
pub use state::{Phase, TrainerState, STATE_VERSION};
pub use tracking::Tracking;

/// An AdamW over `policy`'s trainable parameters (each step is given its learning rate).
pub fn optimizer(policy: &Policy, weight_decay: f64) -> AdamW {
    AdamW::new(
        &policy.vs,
        AdamWConfig {
            weight_decay,
            ..Default::default()
        },
    )
}

/// How a call to [`Trainer::run_phase`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PhaseEnd {
    Finished,
    /// Stopped by Ctrl-C after saving `checkpoints/latest`.
    Interrupted,
}

/// One phase's schedule.
#[derive(Debug, Clone, Copy)]
pub struct PhasePlan<'s> {
    /// Steps the phase ends at.
    pub steps: usize,
    /// Save `checkpoints/latest` every this many steps (0: only on Ctrl-C and by the caller).
    pub checkpoint_every: usize,
    /// The run directory's jsonl file that gets one line per step.
    pub metrics_file: &'s str,
}

/// A step's metrics line, as the loop needs it.
pub trait StepLog: Serialize {
    /// Short text for the progress bar.
    fn bar_message(&self) -> String;
    /// Optimizer steps of this step skipped because the gradient norm was not finite.
    fn nonfinite_grad_steps(&self) -> usize;
}

/// Task files written into every checkpoint (a tokenizer, a LoRA adapter).
pub type Files<'a> = Box<dyn Fn(&Path) -> Result<()> + 'a>;

/// Consecutive steps with non-finite gradients after which a run stops, by default.
pub const DEFAULT_MAX_NONFINITE_STEPS: usize = 5;

/// The model being trained and everything saved and resumed with it.
pub struct Trainer<'a> {
    pub policy: &'a Policy,
    pub opt: AdamW,
    /// Frozen model of the KL terms (loss or reward), when a run uses one.
    pub reference: Option<Policy>,
    /// PPO's critic (`rl.advantage_estimator = "gae"`).
    pub critic: Option<CriticState>,
    /// This process's data-parallel job, when it is one rank of several: only rank 0 writes
    /// metrics and checkpoints.
    pub dp: Option<std::sync::Arc<crate::dp::Dp>>,
    /// Shard the optimizer state over the ranks (ZeRO-1, `zero_stage = 1`).
    pub zero1: bool,
    pub state: TrainerState,
    files: Files<'a>,
    /// Writes the model files instead of `policy.save` (a reward model's own layout).
    model_writer: Option<Files<'a>>,
    max_nonfinite_steps: usize,
    /// What the phases track; `None`: the run directory's `config.toml` says.
    tracking: Option<Tracking>,
    /// The last finished phase's sinks, which take the report written after it.
    tracked: Option<reinforge_track::Tracker>,
}

impl<'a> Trainer<'a> {
    /// A trainer of `policy` with `opt`, continuing from `state`; `files` adds the task's
    /// files to each checkpoint.
    pub fn new(policy: &'a Policy, opt: AdamW, state: TrainerState, files: Files<'a>) -> Self {
        Self {
            policy,
            opt,
            reference: None,
            critic: None,
            dp: None,
            zero1: false,
            state,
            files,
            model_writer: None,
            max_nonfinite_steps: DEFAULT_MAX_NONFINITE_STEPS,
            tracking: None,
            tracked: None,
        }
    }

    /// Checkpoints write the model with `writer` (config and weights) instead of the policy's
    /// causal-LM layout: a model whose trained parameters include a head of its own.
    pub fn with_model_writer(mut self, writer: Files<'a>) -> Self {
        self.model_writer = Some(writer);
        self
    }

    /// The phases track what `tracking` asks for (a run without a `config.toml`: the offline
    /// commands) instead of what the run directory's `config.toml` says.
    pub fn with_tracking(mut self, tracking: Tracking) -> Self {
        self.tracking = Some(tracking);
        self
    }

    /// Uploads the report files (`report.md`, `summary.json`, the charts) written after the
    /// last phase ended to that phase's MLflow run.
    pub fn track_report(&mut self, run: &RunDir) {
        if let Some(t) = &mut self.tracked {
            t.upload(&tracking::report_files(run));
        }
    }

    /// Stops a phase after this many consecutive steps with non-finite gradients (0: never).
    pub fn stop_after_nonfinite_steps(mut self, steps: usize) -> Self {
        self.max_nonfinite_steps = steps;
        self
    }

    /// Moves to the first step of `phase` with a fresh optimizer (timings are kept).
    pub fn start_phase(&mut self, phase: Phase, opt: AdamW) {
        self.state.phase = phase;
        self.state.step = 0;
        self.opt = opt;
        self.shard_optimizer();
    }

    /// Restores the optimizer state of the checkpoint a run resumes from, and says so.
    pub fn resume_optimizer(&mut self, run: &RunDir, latest: &Path) -> Result<()> {
        self.opt.load(&latest.join(checkpoint::OPTIMIZER_FILE))?;
        eprintln!(
            "resuming {} at step {}",
            run.root.display(),
            self.state.step
        );
        Ok(())
    }

    /// Shards the optimizer's moments over the ranks when this is a data-parallel run with
    /// `zero_stage = 1` (call after creating or loading an optimizer).
    pub fn shard_optimizer(&mut self) {
        if let (true, Some(d)) = (self.zero1, &self.dp) {
            self.opt.shard_over(d.pg.clone());
        }
    }

    /// Whether this process writes the run's files (a single process, or rank 0).
    pub fn writes(&self) -> bool {
        self.dp.as_ref().is_none_or(|d| d.rank() == 0)
    }

    /// Writes `checkpoints/<tag>` (rank 0 only: the others return its path); `resumable` adds
    /// the optimizer states.
    pub fn save(&self, run: &RunDir, tag: &str, resumable: bool) -> Result<PathBuf> {
        // Sharded moments are gathered by every rank; rank 0 writes them.
        let gathered = if resumable {
            self.opt.gather_state(self.writes())?
        } else {
            None
        };
        if !self.writes() {
            return Ok(run.checkpoint(tag));
        }
        checkpoint::save(
            run,
            tag,
            &checkpoint::Contents {
                policy: self.policy,
                opt: resumable.then_some(&self.opt),
                critic: self.critic.as_ref(),
                state: &self.state,
                files: &*self.files,
                model_writer: self.model_writer.as_deref(),
                gathered: gathered.as_ref(),
            },
        )
    }

    /// Runs the current phase from `state.step` to `plan.steps`, one `step` call per step
    /// (it reads the step index from `state.step`), appending its line to
    /// `plan.metrics_file` (truncated first to the steps the checkpoint covers, so a resumed
    /// run logs no step twice) and checkpointing `latest` on schedule and on Ctrl-C. A run
    /// whose gradients are non-finite on `stop_after_nonfinite_steps` consecutive steps saves
    /// `latest` and stops with an error.
    pub fn run_phase<L: StepLog>(
        &mut self,
        run: &RunDir,
        plan: &PhasePlan,
        mut step: impl FnMut(&mut Self) -> Result<L>,
    ) -> Result<PhaseEnd> {
        let phase = self.state.phase;
        if self.writes() {
            run.truncate_jsonl(plan.metrics_file, self.state.step)?;
            if let Some(text) = self.tracking.as_ref().and_then(|t| t.config.as_ref()) {
                crate::run_dir::write_atomic(&run.path("config.toml"), text.as_bytes())?;
            }
        }
        let bar = if self.writes() {
            progress::bar(plan.steps as u64, phase.label())
        } else {
            indicatif::ProgressBar::hidden()
        };
        bar.set_position(self.state.step as u64);
        let mut tracker = if self.writes() {
            tracking::open(run, phase.label(), self.tracking.as_ref())
        } else {
            None
        };
        let prefix = plan.metrics_file.trim_end_matches(".jsonl");
        let start = Instant::now();
        let base = *self.state.seconds_mut(phase);
        let clock =
            |t: &mut Self| *t.state.seconds_mut(phase) = base + start.elapsed().as_secs_f64();
        let mut nonfinite_run = 0;
        while self.state.step < plan.steps {
            // Ranks agree on Ctrl-C, so they all save at the same step.
            if interrupted_on_any(self.dp.as_deref())? {
                clock(self);
                self.save(run, "latest", true)?;
                bar.abandon();
                return Ok(PhaseEnd::Interrupted);
            }
            let line = match step(self) {
                Ok(line) => line,
                Err(e) if self.dp.is_some() => {
                    // A data-parallel step can fail inside its update (a rank stopped during a
                    // collective), with the weights part-way: keep the last checkpoint.
                    bar.abandon();
                    return Err(e.context(format!(
                        "{} step {} failed; continue from the last checkpoint with `reinforge train --resume {}` (and the same ranks)",
                        phase.label(),
                        self.state.step,
                        run.root.display()
                    )));
                }
                Err(e) => {
                    // Nothing is lost: the weights are still those after the last finished
                    // step (a step fails while sampling, before its update).
                    clock(self);
                    bar.abandon();
                    let dir = self.save(run, "latest", true)?;
                    return Err(e.context(format!(
                        "{} step {} failed; saved {} with every finished step; continue with `reinforge train --resume {}`",
                        phase.label(),
                        self.state.step,
                        dir.display(),
                        run.root.display()
                    )));
                }
            };
            bar.set_message(line.bar_message());
            if self.writes() {
                run.append_jsonl(plan.metrics_file, &line)?;
            }
            if let (Some(t), Ok(value)) = (&mut tracker, serde_json::to_value(&line)) {
                t.log(prefix, self.state.step as i64, &value);
            }
            self.state.step += 1;
            bar.inc(1);
            nonfinite_run = if line.nonfinite_grad_steps() > 0 {
                nonfinite_run + 1
            } else {
                0
            };
            if self.max_nonfinite_steps > 0 && nonfinite_run >= self.max_nonfinite_steps {
                clock(self);
                let dir = self.save(run, "latest", true)?;
                bar.abandon();
                bail!(
                    "{} step {}: the gradient norm was NaN or infinite on {nonfinite_run} consecutive steps (their optimizer steps were skipped); stopped after saving {}. Lower the learning rate or max_grad_norm, check the data, then continue with `reinforge train --resume {}` (the limit is the key max_nonfinite_steps, 0 = never stop)",
                    phase.label(),
                    self.state.step,
                    dir.display(),
                    run.root.display()
                );
            }
            if plan.checkpoint_every > 0
                && self.state.step.is_multiple_of(plan.checkpoint_every)
                && self.state.step < plan.steps
            {
                clock(self);
                self.save(run, "latest", true)?;
            }
        }
        bar.finish_and_clear();
        clock(self);
        if let Some(t) = &mut tracker {
            t.finish(&tracking::artifacts(run, plan.metrics_file));
        }
        self.tracked = tracker;
        Ok(PhaseEnd::Finished)
    }
}

/// Checks that the longest prompt (its `<bos>` included) plus `max_completion_length` fits the
/// loaded model's positions; the error names both keys.
pub fn check_positions(
    longest_prompt: usize,
    max_completion_length: usize,
    max_position_embeddings: usize,
    prompt_source: &str,
) -> Result<()> {
    if longest_prompt + max_completion_length > max_position_embeddings {
        bail!(
            "the model has max_position_embeddings = {max_position_embeddings}, but {prompt_source} has {longest_prompt} tokens (special tokens included) and rl.max_completion_length is {max_completion_length}: lower rl.max_completion_length to at most {}",
            max_position_embeddings.saturating_sub(longest_prompt)
        );
    }
    Ok(())
}
