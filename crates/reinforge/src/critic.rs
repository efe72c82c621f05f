//! PPO's critic in the pipeline (`grpo.advantage_estimator = "gae"`, the `ppo` preset): it is
//! created from the SFT policy, saved with and restored from the run's checkpoints, and its
//! values turn the outcome rewards into GAE advantages for the policy and returns for itself.
//!
//! The data path follows verl's `RayPPOTrainer.fit` (0.10): `compute_values` before the update,
//! `apply_kl_penalty` when `use_kl_in_reward`, `compute_gae_advantage_return`, then
//! `update_critic` and (after `critic_warmup` iterations) `update_actor`.

use std::path::Path;

use anyhow::{anyhow, bail, Result};
use reinforge_rl::advantage::gae::gae;
use reinforge_rl::masked::Matrix;
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

/// Token-level rewards: each outcome score on its row's last completion token (as verl's
/// reward managers place it), minus `kl_coef · kl` at every token when KL is in the reward
/// (verl `apply_kl_penalty`: `token_level_scores - β·kld`).
pub fn token_rewards(scores: &[f64], lens: &[usize], kl: Option<(&Matrix, f64)>) -> Matrix {
    scores
        .iter()
        .zip(lens)
        .enumerate()
        .map(|(i, (&s, &len))| {
            let mut row = vec![0.0; len];
            if let Some(last) = row.last_mut() {
                *last = s;
            }
            if let Some((kl, coef)) = kl {
                for (r, k) in row.iter_mut().zip(&kl[i]) {
                    *r -= coef * k;
                }
            }
            row
        })
        .collect()
}

/// GAE's outputs, one entry per completion token.
#[derive(Debug, Clone, PartialEq)]
pub struct GaeTargets {
    /// Advantages for the policy (whitened over the batch with `whiten_advantages`).
    pub advantages: Matrix,
    /// Returns for the critic: raw advantages plus values.
    pub returns: Matrix,
}

/// GAE over rows of different lengths ([`reinforge_rl::advantage::gae::gae`], verl
/// `compute_gae_advantage_return`): rows are padded to the longest with mask 0, which GAE
/// carries through and whitening ignores. Without `whiten`, advantages are `returns - values`.
pub fn gae_targets(
    rewards: &Matrix,
    values: &Matrix,
    gamma: f64,
    lam: f64,
    whiten: bool,
) -> GaeTargets {
    let width = rewards.iter().map(Vec::len).max().unwrap_or(0);
    let pad = |m: &Matrix| -> Matrix {
        m.iter()
            .map(|r| {
                let mut r = r.clone();
                r.resize(width, 0.0);
                r
            })
            .collect()
    };
    let mask: Matrix = rewards
        .iter()
        .map(|r| {
            (0..width)
                .map(|t| f64::from(u8::from(t < r.len())))
                .collect()
        })
        .collect();
    let out = gae(&pad(rewards), &pad(values), &mask, gamma, lam);
    let cut = |m: Matrix| -> Matrix {
        m.into_iter()
            .zip(rewards)
            .map(|(mut row, r)| {
                row.truncate(r.len());
                row
            })
            .collect()
    };
    let returns = cut(out.returns);
    let advantages = if whiten {
        cut(out.advantages)
    } else {
        returns
            .iter()
            .zip(values)
            .map(|(g, v)| g.iter().zip(v).map(|(g, v)| g - v).collect())
            .collect()
    };
    GaeTargets {
        advantages,
        returns,
    }
}

/// verl `critic/vf_explained_var` (`metric_utils.compute_data_metrics`): `1 - Var(R - V) /
/// (Var(R) + 1e-5)` over all completion tokens, unbiased variances as `torch.var`.
pub fn explained_variance(returns: &Matrix, values: &Matrix) -> f64 {
    let r: Vec<f64> = returns.iter().flatten().copied().collect();
    let d: Vec<f64> = returns
        .iter()
        .zip(values)
        .flat_map(|(g, v)| g.iter().zip(v).map(|(g, v)| g - v))
        .collect();
    let var = |x: &[f64]| {
        let n = x.len() as f64;
        if n < 2.0 {
            return 0.0;
        }
        let mean = x.iter().sum::<f64>() / n;
        x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)
    };
    1.0 - var(&d) / (var(&r) + 1e-5)
}

/// Mean over every entry of a ragged matrix (0 when empty).
pub fn token_mean(m: &Matrix) -> f64 {
    let n: usize = m.iter().map(Vec::len).sum();
    m.iter().flatten().sum::<f64>() / n.max(1) as f64
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
    let targets = gae_targets(&rewards, &values, ppo.gamma, ppo.lam, ppo.whiten_advantages);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewards_sit_on_the_last_token_minus_the_kl_penalty() {
        let r = token_rewards(&[1.0, 0.0], &[3, 1], None);
        assert_eq!(r, vec![vec![0.0, 0.0, 1.0], vec![0.0]]);
        let kl = vec![vec![0.5, -0.5, 1.0], vec![2.0]];
        let r = token_rewards(&[1.0, 0.0], &[3, 1], Some((&kl, 0.1)));
        assert_eq!(r, vec![vec![-0.05, 0.05, 0.9], vec![-0.2]]);
    }

    #[test]
    fn gae_over_ragged_rows_matches_monte_carlo_at_gamma_lambda_one() {
        let rewards = vec![vec![0.0, 0.0, 1.0], vec![0.0, 2.0]];
        let values = vec![vec![0.5, 0.25, 0.75], vec![1.0, 1.5]];
        let raw = gae_targets(&rewards, &values, 1.0, 1.0, false);
        // γ = λ = 1: the return of every token is the reward-to-go, the advantage R - V.
        assert_eq!(raw.returns, vec![vec![1.0, 1.0, 1.0], vec![2.0, 2.0]]);
        assert_eq!(raw.advantages, vec![vec![0.5, 0.75, 0.25], vec![1.0, 0.5]]);
        let w = gae_targets(&rewards, &values, 1.0, 1.0, true);
        assert_eq!(w.returns, raw.returns, "whitening leaves the returns alone");
        let flat: Vec<f64> = w.advantages.iter().flatten().copied().collect();
        let mean = flat.iter().sum::<f64>() / 5.0;
        let var = flat.iter().map(|a| (a - mean).powi(2)).sum::<f64>() / 4.0;
        assert!(
            mean.abs() < 1e-6 && (var - 1.0).abs() < 1e-6,
            "{mean} {var}"
        );
        // Mean 0 and variance 1 over the five real tokens: the padding of the short row stayed
        // out of the statistics.
    }

    #[test]
    fn lambda_below_one_bootstraps_from_the_next_value() {
        // One row, rewards only at the end: A_0 = δ_0 + γλ δ_1 with δ_0 = V_1 - V_0.
        let rewards = vec![vec![0.0, 1.0]];
        let values = vec![vec![0.2, 0.6]];
        let t = gae_targets(&rewards, &values, 1.0, 0.5, false);
        let d1 = 1.0 - 0.6;
        let d0 = 0.6 - 0.2;
        assert!((t.advantages[0][1] - d1).abs() < 1e-12);
        assert!((t.advantages[0][0] - (d0 + 0.5 * d1)).abs() < 1e-12);
    }

    #[test]
    fn explained_variance_is_one_for_a_perfect_critic_and_zero_for_a_constant() {
        let returns = vec![vec![1.0, 0.0], vec![0.5]];
        assert!((explained_variance(&returns, &returns) - 1.0).abs() < 1e-12);
        let constant = vec![vec![0.3, 0.3], vec![0.3]];
        assert!(explained_variance(&returns, &constant).abs() < 1e-3);
    }
}
