//! PPO's critic in a run (`rl.advantage_estimator = "gae"`, the `ppo` preset): created from
//! the SFT policy, saved with and restored from the run's checkpoints. Its values come back
//! from packing, GAE is the advantage stage's and its update part of the step's update call
//! ([`crate::rl`]).

use std::path::Path;

use anyhow::{bail, Result};
use reinforge_torch::model::value::CRITIC_WEIGHTS_FILE;
use reinforge_torch::{AdamW, AdamWConfig, Critic, Policy};

use crate::config::PpoConfig;
use crate::seeds::{step_seed, PHASE_CRITIC};

/// File name of the critic's AdamW state inside a checkpoint directory.
pub const CRITIC_OPTIMIZER_FILE: &str = "critic_optimizer.safetensors";

/// The critic and its optimiser.
pub struct CriticState {
    pub critic: Critic,
    pub opt: AdamW,
}

impl CriticState {
    /// The critic of a run at GRPO step `step`: restored from `dir` (a checkpoint directory)
    /// when it holds one, otherwise, at step 0 only, created from `policy`'s weights with a
    /// value head seeded by `seed`, and a fresh optimiser.
    pub fn open(
        dir: &Path,
        policy: &Policy,
        cfg: &PpoConfig,
        seed: u64,
        step: usize,
    ) -> Result<Self> {
        let weights = dir.join(CRITIC_WEIGHTS_FILE);
        if !weights.exists() {
            if step > 0 {
                bail!(
                    "{} is missing: the checkpoint at GRPO step {step} has no critic to resume",
                    weights.display()
                );
            }
            return Self::fresh(policy, cfg, seed);
        }
        let mut critic = Critic::new(policy.model.config(), policy.device(), head_seed(seed))?;
        critic.load(&weights)?;
        let mut opt = optimizer(&critic, cfg);
        opt.load(&dir.join(CRITIC_OPTIMIZER_FILE))?;
        Ok(Self { critic, opt })
    }

    /// A new critic: `policy`'s weights and a value head seeded by `seed`, a fresh optimiser.
    pub fn fresh(policy: &Policy, cfg: &PpoConfig, seed: u64) -> Result<Self> {
        let critic = Critic::from_policy(policy, head_seed(seed))?;
        let opt = optimizer(&critic, cfg);
        Ok(Self { critic, opt })
    }

    /// Writes the critic's weights into `dir` and, with `with_optimizer`, its AdamW state.
    pub fn save(&self, dir: &Path, with_optimizer: bool) -> Result<()> {
        self.critic.save(&dir.join(CRITIC_WEIGHTS_FILE))?;
        if with_optimizer {
            self.opt.save(&dir.join(CRITIC_OPTIMIZER_FILE))?;
        }
        Ok(())
    }
}

/// The value head's initialisation seed.
fn head_seed(seed: u64) -> i64 {
    (step_seed(seed, PHASE_CRITIC, 0) >> 1) as i64
}

fn optimizer(critic: &Critic, cfg: &PpoConfig) -> AdamW {
    AdamW::new(
        &critic.vs,
        AdamWConfig {
            weight_decay: cfg.critic_weight_decay,
            ..Default::default()
        },
    )
}
