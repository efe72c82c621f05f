//! The advantage stage of an RL step, plain numbers only (reinforge-rl): an outcome
//! estimator over the whole batch's rewards, or, with PPO's critic, GAE over the values and
//! reference KL that packing returned (verl `RayPPOTrainer.fit` 0.10: `apply_kl_penalty` when
//! `use_kl_in_reward`, then `compute_gae_advantage_return`).

use anyhow::{anyhow, Result};
use reinforge_rl::advantage::outcome::outcome_advantages;
use reinforge_rl::advantage::ragged::{gae_targets, token_rewards};
use reinforge_rl::stats::{explained_variance, token_mean};
use reinforge_rl::{EstimatorParams, Groups};
use reinforge_torch::train::rl::{Advantages, Packed};

use super::settings::StepSettings;
use super::shard::Shard;
use crate::config::PpoConfig;

/// What the critic's scoring measured (PPO), before its update.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CriticScores {
    /// Mean value over the completion tokens.
    pub values_mean: f64,
    /// Mean GAE return over the completion tokens.
    pub returns_mean: f64,
    /// verl `critic/vf_explained_var` of the values.
    pub explained_var: f64,
    /// Mean per-token KL in the reward (`None` when `ppo.kl_coef = 0`).
    pub reward_kl: Option<f64>,
}

/// The advantages of this process's rows, and the critic's measurements with GAE.
pub fn estimate(
    shard: &Shard,
    packed: &Packed,
    s: &StepSettings,
) -> Result<(Advantages, Option<CriticScores>)> {
    if s.uses_critic() {
        let (advantages, scores) = gae(packed, &shard.rewards, &s.ppo)?;
        return Ok((advantages, Some(scores)));
    }
    let g = s.rl.num_generations;
    let groups = Groups::contiguous(shard.rewards.len() / g, g);
    let a = outcome_advantages(
        s.rl.advantage_estimator,
        &shard.rewards,
        &shard.lens,
        &groups,
        &s.rl.advantage,
    )?;
    let local = shard.local.clone();
    Ok((
        Advantages::Outcome {
            per_row: a.per_row[local.clone()].to_vec(),
            per_token: a.per_token.map(|t| t[local].to_vec()),
        },
        None,
    ))
}

/// GAE from the critic's values and the outcome `scores`, with the KL penalty in the token
/// rewards when `ppo.kl_coef > 0`.
fn gae(packed: &Packed, scores: &[f64], ppo: &PpoConfig) -> Result<(Advantages, CriticScores)> {
    let values = packed
        .values
        .clone()
        .ok_or_else(|| anyhow!("GAE needs the critic's values, and packing computed none"))?;
    let lens: Vec<usize> = values.iter().map(Vec::len).collect();
    let kl = if ppo.kl_coef > 0.0 {
        let kl = packed.reference_kl.as_ref().ok_or_else(|| {
            anyhow!("ppo.kl_coef > 0 needs the reference model, and none is loaded")
        })?;
        Some(kl)
    } else {
        None
    };
    let rewards = token_rewards(scores, &lens, kl.map(|k| (k, ppo.kl_coef)));
    let params = EstimatorParams {
        gamma: ppo.gamma,
        lam: ppo.lam,
        whiten_gae: ppo.whiten_advantages,
        ..EstimatorParams::default()
    };
    let targets = gae_targets(&rewards, &values, &params)?;
    let scores = CriticScores {
        values_mean: token_mean(&values),
        returns_mean: token_mean(&targets.returns),
        explained_var: explained_variance(&targets.returns, &values),
        reward_kl: kl.map(token_mean),
    };
    let advantages = Advantages::Gae {
        advantages: targets.advantages,
        values,
        returns: targets.returns,
    };
    Ok((advantages, scores))
}
