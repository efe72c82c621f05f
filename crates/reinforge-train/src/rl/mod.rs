//! The RL phase of any preset, PPO included: the step driver for each `[rollout]` setting
//! ([`drive`]), sampling ([`sample`]), the settings read by every step ([`settings`]) and the
//! step itself as five stages ([`step`]: shard, pack, advantage, update, metrics), of which
//! pack and update are the only calls into reinforge-torch.

mod advantage;
mod drive;
pub mod integrity;
pub mod metrics;
pub mod sample;
pub mod settings;
mod shard;
pub mod step;

use std::path::Path;

use anyhow::Result;

use crate::config::{PpoConfig, RlConfig, TrainConfig, GAE};
use crate::env::Environment;
use crate::run_dir::RunDir;
use crate::trainer::critic::CriticState;
use crate::trainer::{PhaseEnd, PhasePlan, Trainer};
pub use drive::local_step;
pub use settings::StepSettings;

/// Whether a run keeps a frozen reference model: for the KL loss (`rl.beta > 0`) or, with
/// PPO's critic, for the KL in the reward (`ppo.kl_coef > 0`).
pub fn needs_reference(cfg: &RlConfig, ppo: &PpoConfig) -> bool {
    cfg.beta > 0.0 || (cfg.advantage_estimator == GAE && ppo.kl_coef > 0.0)
}

/// The RL phase of a run, whatever the environment: opens PPO's critic from `latest` when the
/// preset uses one, runs `rl.steps` steps through the trainer's loop (Ctrl-C, metrics,
/// checkpoints) and saves `checkpoints/latest` when the phase finishes.
pub fn run_phase(
    trainer: &mut Trainer,
    run: &RunDir,
    env: &dyn Environment,
    cfg: &TrainConfig,
    latest: &Path,
) -> Result<PhaseEnd> {
    if cfg.grpo.advantage_estimator == GAE {
        trainer.critic = Some(CriticState::open(
            latest,
            trainer.policy,
            &cfg.ppo,
            cfg.seed,
            trainer.state.step,
        )?);
    }
    let plan = PhasePlan {
        steps: cfg.grpo.steps,
        checkpoint_every: cfg.grpo.checkpoint_every,
        metrics_file: "metrics.jsonl",
    };
    let end = drive::run(trainer, run, &plan, env, cfg)?;
    if end == PhaseEnd::Finished {
        trainer.save(run, "latest", true)?;
    }
    Ok(end)
}
