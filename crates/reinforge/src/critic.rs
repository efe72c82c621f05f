//! PPO's critic in the pipeline (`grpo.advantage_estimator = "gae"`, the `ppo` preset): it is
//! created from the SFT policy, saved with and restored from the run's checkpoints, and its
//! values turn the outcome rewards into GAE advantages for the policy and returns for itself.
//!
//! The data path follows verl's `RayPPOTrainer.fit` (0.10): `compute_values` before the update,
//! `apply_kl_penalty` when `use_kl_in_reward`, `compute_gae_advantage_return`, then
//! `update_critic` and (after `critic_warmup` iterations) `update_actor`.

use std::path::Path;

use anyhow::{anyhow, bail, Result};
use reinforge_rl::advantage::ragged::{gae_targets, token_rewards};
use reinforge_rl::masked::Matrix;
use reinforge_rl::stats::{explained_variance, token_mean};
use reinforge_rl::EstimatorParams;
use reinforge_torch::pack::Packed;
use reinforge_torch::train::ValueConfig;
use reinforge_torch::value::CRITIC_WEIGHTS_FILE;
use reinforge_torch::{AdamW, AdamWConfig, Critic, Policy};

use crate::config::{GrpoConfig, PpoConfig};
use crate::seeds::step_seed;

/// File name of the critic's AdamW state inside a checkpoint directory.
pub const CRITIC_OPTIMIZER_FILE: &str = "critic_optimizer.safetensors";

/// Seeds the value head's initialisation (distinct from the phases of [`crate::seeds`]).
const PHASE_CRITIC: u64 = 4;

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
        let head_seed = (step_seed(seed, PHASE_CRITIC, 0) >> 1) as i64;
        if !weights.exists() {
            if step > 0 {
                bail!(
                    "{} is missing: the checkpoint at GRPO step {step} has no critic to resume",
                    weights.display()
                );
            }
            return Self::fresh(policy, cfg, seed);
        }
        let mut critic = Critic::new(policy.model.config(), policy.device(), head_seed)?;
        critic.load(&weights)?;
        let mut opt = optimizer(&critic, cfg);
        opt.load(&dir.join(CRITIC_OPTIMIZER_FILE))?;
        Ok(Self { critic, opt })
    }

    /// A new critic: `policy`'s weights and a value head seeded by `seed`, a fresh optimiser.
    pub fn fresh(policy: &Policy, cfg: &PpoConfig, seed: u64) -> Result<Self> {
        let head_seed = (step_seed(seed, PHASE_CRITIC, 0) >> 1) as i64;
        let critic = Critic::from_policy(policy, head_seed)?;
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

fn optimizer(critic: &Critic, cfg: &PpoConfig) -> AdamW {
    AdamW::new(
        &critic.vs,
        AdamWConfig {
            lr: cfg.critic_lr,
            weight_decay: cfg.critic_weight_decay,
            ..Default::default()
        },
    )
}

/// The critic update's settings.
pub fn value_config(grpo: &GrpoConfig, ppo: &PpoConfig) -> ValueConfig {
    ValueConfig {
        epochs: ppo.epochs(grpo),
        mini_batches: ppo.mini_batches(grpo),
        lr: ppo.critic_lr,
        max_grad_norm: ppo.critic_max_grad_norm,
        cliprange_value: ppo.cliprange_value,
        // verl's critic.loss_agg_mode defaults to the actor's.
        agg: grpo.loss_agg_mode,
        loss_scale_factor: grpo.max_completion_length as f64,
    }
}

/// What scoring with the critic produced, besides the advantages it put into the batch.
pub struct Scored {
    /// Values before this iteration's update, per completion token.
    pub values: Matrix,
    /// GAE returns, per completion token.
    pub returns: Matrix,
    pub values_mean: f64,
    pub returns_mean: f64,
    pub explained_var: f64,
    /// Mean per-token KL in the reward (`None` when `kl_coef = 0`).
    pub reward_kl: Option<f64>,
}

/// Computes the critic's values of the batch, the token rewards (score, KL penalty), and GAE;
/// puts the advantages into `packed` as per-token advantages.
pub fn score(
    state: &CriticState,
    packed: &mut Packed,
    scores: &[f64],
    ppo: &PpoConfig,
) -> Result<Scored> {
    let values = packed.critic_values(&state.critic);
    let lens: Vec<usize> = values.iter().map(Vec::len).collect();
    let kl = if ppo.kl_coef > 0.0 {
        let kl = packed.reference_kl(ppo.kl_penalty).ok_or_else(|| {
            anyhow!("ppo.kl_coef > 0 needs the reference model, and none is loaded")
        })?;
        Some(kl)
    } else {
        None
    };
    let rewards = token_rewards(scores, &lens, kl.as_ref().map(|k| (k, ppo.kl_coef)));
    let params = EstimatorParams {
        gamma: ppo.gamma,
        lam: ppo.lam,
        whiten_gae: ppo.whiten_advantages,
        ..EstimatorParams::default()
    };
    let targets = gae_targets(&rewards, &values, &params)?;
    packed.set_token_advantages(&targets.advantages);
    Ok(Scored {
        values_mean: token_mean(&values),
        returns_mean: token_mean(&targets.returns),
        explained_var: explained_variance(&targets.returns, &values),
        reward_kl: kl.as_ref().map(token_mean),
        values,
        returns: targets.returns,
    })
}
