//! [`StepSettings`]: everything an RL step reads that does not change during a phase, built
//! once when the phase starts (the update and critic settings used to be rebuilt every step).

use reinforge_torch::train::loss::policy::{VerlPolicyConfig, NO_DUAL_CLIP};
use reinforge_torch::train::rl::{PackOptions, UpdateConfig, ValueConfig};
use reinforge_torch::Memory;

use crate::config::{PpoConfig, RlConfig, GAE};
use crate::seeds::rl_step_seed;

/// The settings of every step of one RL phase.
#[derive(Debug, Clone)]
pub struct StepSettings {
    /// The run's seed: step `i` draws with [`StepSettings::step_seed`].
    pub seed: u64,
    /// `[rl]`: sampling, reward shaping, advantages, the policy update.
    pub rl: RlConfig,
    /// `[ppo]`: the critic, GAE and KL in the reward (with `advantage_estimator = "gae"`).
    pub ppo: PpoConfig,
    /// What packing computes.
    pub pack: PackOptions,
    /// The policy update.
    pub update: UpdateConfig,
    /// The critic update (read only with a critic).
    pub value: ValueConfig,
}

impl StepSettings {
    /// The settings of `rl` and `ppo` for a run seeded `seed` whose batches pad with `pad_id`.
    pub fn new(rl: &RlConfig, ppo: &PpoConfig, seed: u64, pad_id: i64) -> Self {
        let critic = rl.advantage_estimator == GAE;
        Self {
            seed,
            pack: PackOptions {
                pad_id,
                temperature: rl.temperature,
                recompute_old_logprobs: rl.recompute_old_logprobs,
                tis: rl.tis,
                tis_cap: rl.tis_cap,
                mask_truncated: rl.mask_truncated,
                measure_gap: false,
                reference_kl: (critic && ppo.kl_coef > 0.0).then_some(ppo.kl_penalty),
                memory: Memory::default(),
            },
            update: update_config(rl),
            value: value_config(rl, ppo),
            rl: rl.clone(),
            ppo: ppo.clone(),
        }
    }

    /// Runs the log-prob passes and the policy update under `memory` (micro-batches,
    /// activation checkpointing).
    pub fn with_memory(mut self, memory: Memory) -> Self {
        self.pack.memory = memory;
        self.update.memory = memory;
        self.value.memory = memory;
        self
    }

    /// Also measures the sampler-trainer log-prob gap (remote or asynchronous rollouts).
    pub fn measuring_gap(mut self) -> Self {
        self.pack.measure_gap = true;
        self
    }

    /// The seed of step `step`: its prompts, its sampling and its mini-batch orders.
    pub fn step_seed(&self, step: usize) -> u64 {
        rl_step_seed(self.seed, step)
    }

    /// Whether advantages come from PPO's critic (GAE).
    pub fn uses_critic(&self) -> bool {
        self.rl.advantage_estimator == GAE
    }
}

/// The policy update's settings. verl reads `clip_ratio` only where `clip_ratio_low` or
/// `clip_ratio_high` is unset (`core_algos.compute_policy_loss_vanilla`:
/// `clip_ratio_low = config.clip_ratio_low if config.clip_ratio_low is not None else
/// clip_ratio`); both are set here, so the symmetric `clip_ratio` is a fallback no loss reads.
fn update_config(cfg: &RlConfig) -> UpdateConfig {
    UpdateConfig {
        policy_loss: cfg.policy_loss,
        agg: cfg.loss_agg_mode,
        loss: VerlPolicyConfig {
            clip_ratio: cfg.epsilon_low,
            clip_ratio_low: Some(cfg.epsilon_low),
            clip_ratio_high: Some(cfg.epsilon_high),
            clip_ratio_c: if cfg.clip_ratio_c == 0.0 {
                NO_DUAL_CLIP
            } else {
                cfg.clip_ratio_c
            },
            tau_pos: cfg.tau_pos,
            tau_neg: cfg.tau_neg,
            dro_beta: cfg.dro_beta,
            kl_cov_ratio: cfg.kl_cov_ratio,
            ppo_kl_coef: cfg.ppo_kl_coef,
            clip_cov_ratio: cfg.clip_cov_ratio,
            clip_cov_lb: cfg.clip_cov_lb,
            clip_cov_ub: cfg.clip_cov_ub,
            clamp_log_ratio: cfg.clamp_log_ratio,
            global_batch_info: Default::default(),
        },
        beta: cfg.beta,
        entropy_coef: cfg.entropy_coef,
        epochs: cfg.ppo_epochs,
        mini_batches: cfg.mini_batches,
        lr: cfg.lr,
        max_grad_norm: cfg.max_grad_norm,
        temperature: cfg.temperature,
        skip_zero_advantage: cfg.skip_zero_advantage,
        loss_scale_factor: cfg.max_completion_length as f64,
        kl: cfg.kl_estimator,
        memory: Memory::default(),
    }
}

/// The critic update's settings.
fn value_config(rl: &RlConfig, ppo: &PpoConfig) -> ValueConfig {
    ValueConfig {
        epochs: ppo.epochs(rl),
        mini_batches: ppo.mini_batches(rl),
        lr: ppo.critic_lr,
        max_grad_norm: ppo.critic_max_grad_norm,
        cliprange_value: ppo.cliprange_value,
        // verl's critic.loss_agg_mode defaults to the actor's.
        agg: rl.loss_agg_mode,
        loss_scale_factor: rl.max_completion_length as f64,
        memory: Memory::default(),
    }
}
