//! `[ppo]`: PPO's critic, GAE and KL in the reward.

use reinforge_torch::train::loss::KlPenalty;
use serde::{Deserialize, Serialize};

use super::RlConfig;

/// PPO's critic, GAE and KL-in-reward (`[ppo]`), used when `rl.advantage_estimator = "gae"`.
/// Names follow verl's (`algorithm.*`, `critic.*`, `trainer.critic_warmup`); the policy side
/// (clip, epochs, mini-batches, lr) stays in `[rl]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PpoConfig {
    /// Discount γ of GAE (verl `algorithm.gamma`, default 1.0; OpenRLHF `--gamma` 1).
    pub gamma: f64,
    /// GAE λ (verl `algorithm.lam`, default 1.0; OpenRLHF `--lambd` 0.95). With γ = λ = 1 the
    /// advantage is the outcome minus the critic's value of each prefix.
    pub lam: f64,
    /// Whiten the advantages over the batch's completion tokens (verl `masked_whiten` in
    /// `compute_gae_advantage_return`, always on there).
    pub whiten_advantages: bool,
    /// KL in the reward: `r_t -= kl_coef · KL_t(π_old ‖ π_SFT)` at every completion token
    /// (verl `algorithm.use_kl_in_reward` + `kl_ctrl.kl_coef` with a fixed controller; OpenRLHF
    /// `--init_kl_coef`). 0 = off, and no reference model is kept for it.
    pub kl_coef: f64,
    /// Estimator of that KL (verl `algorithm.kl_penalty`, default `kl` = k1).
    pub kl_penalty: KlPenalty,
    /// The critic's AdamW learning rate (verl `critic.optim.lr`).
    pub critic_lr: f64,
    pub critic_weight_decay: f64,
    /// verl `critic.grad_clip`.
    pub critic_max_grad_norm: f64,
    /// verl `critic.cliprange_value`: how far a value may move from the rollout's before the
    /// clipped term of the value loss takes over.
    pub cliprange_value: f64,
    /// Iterations that update only the critic before the policy starts learning (verl
    /// `trainer.critic_warmup`).
    pub critic_warmup: usize,
    /// Critic passes per batch (0 = `rl.ppo_epochs`; verl `critic.ppo_epochs`).
    pub critic_epochs: usize,
    /// Critic optimizer steps per pass (0 = `rl.mini_batches`).
    pub critic_mini_batches: usize,
}

impl Default for PpoConfig {
    fn default() -> Self {
        Self {
            gamma: 1.0,
            lam: 1.0,
            whiten_advantages: true,
            kl_coef: 0.0,
            kl_penalty: KlPenalty::Kl,
            critic_lr: 1e-3,
            critic_weight_decay: 0.0,
            critic_max_grad_norm: 1.0,
            cliprange_value: 0.5,
            critic_warmup: 0,
            critic_epochs: 0,
            critic_mini_batches: 0,
        }
    }
}

impl PpoConfig {
    /// Critic passes per batch, `critic_epochs` or the policy's.
    pub fn epochs(&self, grpo: &RlConfig) -> usize {
        if self.critic_epochs == 0 {
            grpo.ppo_epochs
        } else {
            self.critic_epochs
        }
    }

    /// Critic mini-batches per pass, `critic_mini_batches` or the policy's.
    pub fn mini_batches(&self, grpo: &RlConfig) -> usize {
        if self.critic_mini_batches == 0 {
            grpo.mini_batches
        } else {
            self.critic_mini_batches
        }
    }
}
