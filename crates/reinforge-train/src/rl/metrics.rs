//! The metrics stage of an RL step: one line of `metrics.jsonl` from what the other stages
//! produced (group statistics, the update's and the critic's measurements, the environment's
//! metrics, rollout staleness and timings), combined over data-parallel ranks.

use std::collections::BTreeMap;
use std::time::Instant;

use anyhow::Result;
use reinforge_reward::integrity::{Flagged, StepCounts};
use reinforge_rl::{GroupStats, Groups};
use reinforge_torch::train::rl::{LogprobGap, Updated};
use serde::{Deserialize, Serialize};

use super::advantage::CriticScores;
use super::sample::DrawMeta;
use super::settings::StepSettings;
use super::shard::{self, Shard};
use crate::dp::Dp;
use crate::env::{EnvMetrics, Environment, Rollout};
use crate::trainer::StepLog;

/// One line of `metrics.jsonl`. Keys under `timing/` measure wall time and so differ between
/// runs; every other key is a deterministic function of the seed on CPU.
#[derive(Debug, Clone, Serialize)]
pub struct StepMetrics {
    pub step: usize,
    #[serde(rename = "reward/mean")]
    pub reward_mean: f64,
    #[serde(rename = "reward/std")]
    pub reward_std: f64,
    /// Fraction of groups whose rewards are all equal (no learning signal).
    #[serde(rename = "reward/zero_std_frac")]
    pub zero_std_frac: f64,
    pub loss: f64,
    pub pg_loss: f64,
    /// Mean k3 KL to the reference model (0 without one).
    pub kl: f64,
    /// Mean entropy of the sampling distribution over the step's completion tokens.
    pub entropy: f64,
    /// verl `actor/pg_clipfrac`: tokens where the policy loss's clip was active.
    pub pg_clipfrac: f64,
    /// verl `actor/pg_clipfrac_lower`: tokens where the dual clip (DPPO: the truncation) was
    /// active.
    pub pg_clipfrac_lower: f64,
    pub ppo_kl: f64,
    pub grad_norm: f64,
    /// Fraction of rollout rows the update skipped: their advantage is exactly zero, so they
    /// add nothing to the loss or its gradient.
    #[serde(rename = "update/rows_skipped_frac")]
    pub rows_skipped_frac: f64,
    /// Optimizer steps the policy update took (epochs x mini-batches; `reinforge explain`'s
    /// `optimizer_steps_per_step`).
    #[serde(rename = "update/optimizer_steps")]
    pub optimizer_steps: usize,
    /// Rollout rows this rank trained on (the writing rank's; `explain`'s `rows_per_rank`).
    #[serde(rename = "update/rows_per_rank")]
    pub rows_per_rank: usize,
    #[serde(rename = "response_length/mean")]
    pub response_length: f64,
    #[serde(rename = "response/truncated_frac")]
    pub truncated_frac: f64,
    /// The environment's metrics (the arithmetic task: `pattern/*_share`).
    #[serde(flatten)]
    pub env: EnvMetrics,
    /// Prompt batches drawn this step (only with `rl.dynamic_sampling`).
    #[serde(
        rename = "dynamic/draws",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub dynamic_draws: Option<f64>,
    /// Groups kept for the update, those whose rewards differ (only with dynamic sampling).
    #[serde(
        rename = "dynamic/kept_groups",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub dynamic_kept_groups: Option<f64>,
    /// PPO only (`rl.advantage_estimator = "gae"`): the critic's metrics, as `critic/*` keys.
    #[serde(flatten, default)]
    pub critic: Option<CriticMetrics>,
    /// Remote or asynchronous rollouts: weight pushes, the engine-trainer log-prob gap,
    /// staleness (`rollout/*` keys).
    #[serde(flatten)]
    pub rollout: RolloutMetrics,
    /// Optimizer steps of this iteration skipped because the gradient norm was NaN or
    /// infinite (a run stops after `max_nonfinite_steps` such iterations in a row).
    #[serde(rename = "update/nonfinite_grad_steps")]
    pub nonfinite_grad_steps: usize,
    #[serde(rename = "timing/step_s")]
    pub step_seconds: f64,
    #[serde(rename = "timing/sample_s")]
    pub sample_seconds: f64,
    #[serde(rename = "timing/update_s")]
    pub update_seconds: f64,
    /// Completion tokens generated and trained on per second of the whole step.
    #[serde(rename = "timing/tokens_per_s")]
    pub tokens_per_second: f64,
    /// The reward-hacking monitor's `integrity/*` keys ([`super::integrity`]): this stage's
    /// shares of credited completions; the monitor adds the canaries, the reward–length
    /// correlation and the KL to the start.
    #[serde(flatten)]
    pub integrity: BTreeMap<String, f64>,
    /// This rank's flagged completions, for the monitor's report (not logged).
    #[serde(skip)]
    pub flagged: Vec<Flagged>,
    /// (reward, completion tokens) of every row of the step, gathered (not logged).
    #[serde(skip)]
    pub pairs: Vec<(f64, f64)>,
}

/// `rollout/*` keys of a step, each present only when it was measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RolloutMetrics {
    /// Seconds to write the weights and have every engine load and confirm them (a step
    /// that pushed).
    #[serde(
        rename = "rollout/push_s",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub push_seconds: Option<f64>,
    /// Bytes of weights pushed.
    #[serde(
        rename = "rollout/push_bytes",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub push_bytes: Option<f64>,
    /// Mean |engine − trainer| log-prob over the trained completion tokens.
    #[serde(
        rename = "rollout/logprob_gap_mean_abs",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub gap_mean_abs: Option<f64>,
    /// Largest |engine − trainer| log-prob.
    #[serde(
        rename = "rollout/logprob_gap_max_abs",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub gap_max_abs: Option<f64>,
    /// Mean (engine − trainer) log-prob.
    #[serde(
        rename = "rollout/logprob_gap_mean",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub gap_mean: Option<f64>,
    /// Mean and largest per-token importance weight trainer/engine.
    #[serde(
        rename = "rollout/is_weight_mean",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub is_weight_mean: Option<f64>,
    #[serde(
        rename = "rollout/is_weight_max",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub is_weight_max: Option<f64>,
    /// Updates between the weights that generated a rollout and those trained (mean, max).
    #[serde(
        rename = "rollout/staleness_mean",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub staleness_mean: Option<f64>,
    #[serde(
        rename = "rollout/staleness_max",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub staleness_max: Option<f64>,
    /// Rollouts discarded because they were more than `rollout.max_staleness` updates old.
    #[serde(
        rename = "rollout/stale_dropped",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub stale_dropped: Option<f64>,
}

/// The critic's metrics of one PPO step (verl's `critic/*` names where verl has them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CriticMetrics {
    /// verl `critic/vf_loss`.
    #[serde(rename = "critic/value_loss")]
    pub value_loss: f64,
    /// verl `critic/vf_clipfrac`.
    #[serde(rename = "critic/vf_clipfrac")]
    pub vf_clipfrac: f64,
    /// Mean value over the completion tokens, before this step's critic update.
    #[serde(rename = "critic/values_mean")]
    pub values_mean: f64,
    /// Mean GAE return over the completion tokens.
    #[serde(rename = "critic/returns_mean")]
    pub returns_mean: f64,
    /// verl `critic/vf_explained_var` of the values before the update.
    #[serde(rename = "critic/explained_var")]
    pub explained_var: f64,
    /// The critic's gradient norm before clipping.
    #[serde(rename = "critic/grad_norm")]
    pub grad_norm: f64,
    /// With `ppo.kl_coef > 0`: mean per-token KL(π_old ‖ π_SFT) subtracted from the reward.
    #[serde(
        rename = "ppo/reward_kl",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub reward_kl: Option<f64>,
}

impl StepLog for StepMetrics {
    fn bar_message(&self) -> String {
        let mut msg = format!("reward {:.3}", self.reward_mean);
        for (k, v) in &self.env {
            let name = k.rsplit('/').next().unwrap_or(k);
            msg.push_str(&format!(" {name} {v:.2}"));
        }
        msg
    }

    fn nonfinite_grad_steps(&self) -> usize {
        self.nonfinite_grad_steps
    }
}

/// What the stages of one step produced.
pub struct StepRecord<'a> {
    pub step: usize,
    pub shard: &'a Shard,
    pub meta: DrawMeta,
    /// The sampler-trainer log-prob gap, when packing measured it.
    pub gap: Option<LogprobGap>,
    pub updated: Updated,
    /// The advantage stage's critic measurements (PPO).
    pub critic: Option<CriticScores>,
    /// When the step's update half began (sharding).
    pub started: Instant,
    pub update_seconds: f64,
}

/// The step's metrics line (every rank computes it; rank 0 writes it).
pub fn record(
    r: StepRecord,
    env: &dyn Environment,
    dp: Option<&Dp>,
    s: &StepSettings,
) -> Result<StepMetrics> {
    let g = s.rl.num_generations;
    let rewards = &r.shard.rewards;
    let stats = GroupStats::of(rewards, &Groups::contiguous(rewards.len() / g, g));
    let rollouts = &r.shard.rollouts;
    let n = rewards.len() as f64;
    let tokens: usize = r.shard.lens.iter().sum();
    // The step's wall time: its weight push (remote engines), sampling, and the update.
    let push_seconds = r.meta.push.map_or(0.0, |p| p.seconds);
    let step_seconds = push_seconds + r.meta.sample_seconds + r.started.elapsed().as_secs_f64();
    let entropy = entropy(rollouts, r.gap, dp)?;
    let truncated = rollouts.iter().filter(|r| r.truncated).count() as f64;
    let truncated = match dp {
        Some(d) => d.sum(truncated)?,
        None => truncated,
    };
    let env_metrics = shard::env_metrics(dp, env.metrics(rollouts))?;
    let integrity = credited_shares(rollouts, dp)?;
    let u = &r.updated.policy;
    Ok(StepMetrics {
        step: r.step,
        reward_mean: stats.mean,
        reward_std: stats.std,
        zero_std_frac: stats.zero_variance_frac,
        loss: u.loss,
        pg_loss: u.pg_loss,
        kl: u.kl,
        entropy,
        pg_clipfrac: u.pg_clipfrac,
        pg_clipfrac_lower: u.pg_clipfrac_lower,
        ppo_kl: u.ppo_kl,
        grad_norm: u.grad_norm,
        rows_skipped_frac: u.rows_skipped as f64 / (n * s.rl.ppo_epochs as f64),
        optimizer_steps: u.optimizer_steps,
        rows_per_rank: r.shard.local.len(),
        response_length: tokens as f64 / n,
        truncated_frac: truncated / n,
        env: env_metrics,
        dynamic_draws: r.meta.dynamic.map(|(d, _)| d as f64),
        dynamic_kept_groups: r.meta.dynamic.map(|(_, k)| k as f64),
        critic: critic_metrics(r.critic, &r.updated),
        rollout: rollout_metrics(rollouts, r.step as u64, r.gap, r.meta),
        nonfinite_grad_steps: u.nonfinite_grad_steps,
        step_seconds,
        sample_seconds: r.meta.sample_seconds,
        update_seconds: r.update_seconds,
        tokens_per_second: tokens as f64 / step_seconds,
        integrity,
        flagged: flagged(rollouts, r.step),
        pairs: rewards
            .iter()
            .zip(&r.shard.lens)
            .map(|(&reward, &len)| (reward, len as f64))
            .collect(),
    })
}

/// The monitor's shares of the step's credited completions, counted over every rank.
fn credited_shares(rollouts: &[Rollout], dp: Option<&Dp>) -> Result<BTreeMap<String, f64>> {
    let mut counts = StepCounts::default();
    for r in rollouts {
        counts.add(r.audit.credited, r.audit.answer_in_prompt, r.truncated);
    }
    if let Some(d) = dp {
        let mut all = counts.to_array();
        for x in &mut all {
            *x = d.sum(*x)?;
        }
        counts = StepCounts::from_array(all);
    }
    Ok(counts.shares())
}

/// The completions of `rollouts` the monitor flags (their audit kept the texts).
fn flagged(rollouts: &[Rollout], step: usize) -> Vec<Flagged> {
    rollouts
        .iter()
        .filter_map(|r| {
            let (prompt, completion) = r.audit.texts.clone()?;
            Some(Flagged {
                step,
                reward: r.score,
                answer_in_prompt: r.audit.answer_in_prompt,
                truncated: r.truncated,
                answer: r.audit.answer.clone(),
                prompt,
                completion,
            })
        })
        .collect()
}

/// Mean entropy of the sampling distributions over the step's completion tokens. Remote
/// engines report none: the trainer's, measured with the gap, stand in.
fn entropy(rollouts: &[Rollout], gap: Option<LogprobGap>, dp: Option<&Dp>) -> Result<f64> {
    let sampled: usize = rollouts.iter().map(|r| r.entropies.len()).sum();
    if let Some(gap) = gap.filter(|_| sampled == 0) {
        return Ok(gap.trainer_entropy);
    }
    let sum: f64 = rollouts
        .iter()
        .flat_map(|r| &r.entropies)
        .map(|&e| e as f64)
        .sum();
    Ok(match dp {
        Some(d) => d.sum(sum)? / d.sum(sampled as f64)?.max(1.0),
        None => sum / sampled.max(1) as f64,
    })
}

/// The `critic/*` metrics of a PPO step: the advantage stage's and the critic update's.
fn critic_metrics(scores: Option<CriticScores>, updated: &Updated) -> Option<CriticMetrics> {
    let (scores, v) = (scores?, updated.critic.as_ref()?);
    Some(CriticMetrics {
        value_loss: v.value_loss,
        vf_clipfrac: v.vf_clipfrac,
        values_mean: scores.values_mean,
        returns_mean: scores.returns_mean,
        explained_var: scores.explained_var,
        grad_norm: v.grad_norm,
        reward_kl: scores.reward_kl,
    })
}

/// The `rollout/*` metrics of a step trained at weight version `version`.
fn rollout_metrics(
    rollouts: &[Rollout],
    version: u64,
    gap: Option<LogprobGap>,
    meta: DrawMeta,
) -> RolloutMetrics {
    let stale: Vec<u64> = rollouts
        .iter()
        .map(|r| version.saturating_sub(r.version))
        .collect();
    let any_stale = stale.iter().any(|&s| s > 0) || meta.stale_dropped > 0;
    RolloutMetrics {
        push_seconds: meta.push.map(|p| p.seconds),
        push_bytes: meta.push.map(|p| p.bytes as f64),
        gap_mean_abs: gap.map(|g| g.mean_abs),
        gap_max_abs: gap.map(|g| g.max_abs),
        gap_mean: gap.map(|g| g.mean),
        is_weight_mean: gap.map(|g| g.is_weight_mean),
        is_weight_max: gap.map(|g| g.is_weight_max),
        staleness_mean: any_stale
            .then(|| stale.iter().sum::<u64>() as f64 / stale.len().max(1) as f64),
        staleness_max: any_stale.then(|| stale.iter().copied().max().unwrap_or(0) as f64),
        stale_dropped: any_stale.then_some(meta.stale_dropped as f64),
    }
}
