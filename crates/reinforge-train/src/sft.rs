//! One supervised step of the trainer (completion-only NLL) and the SFT learning-rate
//! schedule; the task supplies the batches.

use reinforge_torch::train::sft::{sft_step, SftStats};
use reinforge_torch::{Memory, SequenceBatch};
use serde::Serialize;

use crate::config::SftConfig;
use crate::trainer::{StepLog, Trainer};

/// One line of `sft_metrics.jsonl`.
#[derive(Debug, Serialize)]
pub struct SftLine {
    pub step: usize,
    pub loss: f64,
    pub grad_norm: f64,
    pub lr: f64,
    pub tokens: f64,
    /// 1 when the optimizer skipped the step for a NaN or infinite gradient norm (the
    /// `grad_norm` column shows it; the run loop counts it).
    #[serde(skip)]
    pub nonfinite_grad_steps: usize,
}

impl SftLine {
    /// The line of step `step`, run at rate `lr`, that measured `stats`.
    pub fn new(step: usize, lr: f64, stats: SftStats) -> Self {
        let SftStats {
            loss,
            grad_norm,
            tokens,
            nonfinite_grad_steps,
        } = stats;
        Self {
            step,
            loss,
            grad_norm,
            lr,
            tokens,
            nonfinite_grad_steps,
        }
    }
}

impl StepLog for SftLine {
    fn bar_message(&self) -> String {
        format!("loss {:.3}", self.loss)
    }

    fn nonfinite_grad_steps(&self) -> usize {
        self.nonfinite_grad_steps
    }
}

/// Learning rate at `step`: linear warm-up, then cosine decay to 10% of the peak.
pub fn lr_at(cfg: &SftConfig, step: usize) -> f64 {
    if step < cfg.warmup_steps {
        return cfg.lr * (step + 1) as f64 / cfg.warmup_steps as f64;
    }
    let span = (cfg.steps - cfg.warmup_steps).max(1) as f64;
    let progress = ((step - cfg.warmup_steps) as f64 / span).min(1.0);
    cfg.lr * (0.1 + 0.9 * 0.5 * (1.0 + (std::f64::consts::PI * progress).cos()))
}

/// Trains on `batch` as SFT step `trainer.state.step` and returns its metrics line.
pub fn run_step(
    trainer: &mut Trainer,
    cfg: &SftConfig,
    batch: &SequenceBatch,
    memory: &Memory,
) -> anyhow::Result<SftLine> {
    let step = trainer.state.step;
    let lr = lr_at(cfg, step);
    let stats = sft_step(
        trainer.policy,
        &mut trainer.opt,
        batch,
        (lr, cfg.max_grad_norm),
        memory,
        trainer.dp.as_ref().map(|d| &*d.pg),
    )?;
    Ok(SftLine::new(step, lr, stats))
}

/// transformers' learning-rate schedules (`lr_scheduler_type`), as `Trainer` steps them: the
/// optimizer's step `s` (from 0) runs at `lr * factor(s)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LrSchedule {
    /// `get_linear_schedule_with_warmup` (TRL's default): `s / warmup` during warm-up, then
    /// down to 0 at `steps`.
    Linear,
    /// `get_cosine_schedule_with_warmup` with half a cycle: from 1 to 0 along a cosine.
    Cosine,
    /// `get_constant_schedule_with_warmup`.
    Constant,
}

impl LrSchedule {
    /// The names `--lr-scheduler-type` takes (transformers' names).
    pub const ALL: &'static [LrSchedule] =
        &[LrSchedule::Linear, LrSchedule::Cosine, LrSchedule::Constant];

    /// The factor of the peak rate at optimizer step `s` of `steps`, after `warmup` warm-up
    /// steps (transformers' lambdas, `optimization.py`).
    pub fn factor(self, s: usize, warmup: usize, steps: usize) -> f64 {
        if s < warmup {
            return s as f64 / warmup.max(1) as f64;
        }
        let span = steps.saturating_sub(warmup).max(1) as f64;
        let done = (s - warmup) as f64;
        match self {
            LrSchedule::Linear => ((steps as f64 - s as f64) / span).max(0.0),
            LrSchedule::Cosine => {
                let progress = done / span;
                (0.5 * (1.0 + (std::f64::consts::PI * progress).cos())).max(0.0)
            }
            LrSchedule::Constant => 1.0,
        }
    }
}
