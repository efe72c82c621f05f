//! One GRPO iteration: sample G completions per prompt, score them with the task verifier,
//! normalise rewards within each group, and update the policy with the clipped surrogate
//! against the sampler's log-probs (the stored "old" policy). With
//! `grpo.advantage_estimator = "gae"` (the `ppo` preset) a critic gives the advantages
//! ([`crate::critic`]) and is updated in the same iteration.

use std::time::Instant;

use anyhow::Result;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use reinforge_rl::advantage::outcome::{outcome_advantages, Advantages};
use reinforge_rl::{GroupStats, Groups};
use reinforge_tasks::Pattern;
use reinforge_torch::logprobs::token_logprobs;
use reinforge_torch::loss::trainer::{tis_weights, Tis};
use reinforge_torch::loss::PpoClip;
use reinforge_torch::train::{
    policy_update, value_update, RolloutBatch, UpdateConfig, UpdateStats,
};
use reinforge_torch::{AdamW, Policy, SequenceBatch};
use serde::{Deserialize, Serialize};

use crate::config::{GrpoConfig, PpoConfig, GAE};
use crate::critic::{self, CriticState};
use crate::env::Environment;
use crate::rollout::Rollout;
use crate::seeds::{seed_torch, step_seed, PHASE_GRPO};

/// One line of `metrics.jsonl`. Keys under `timing/` measure wall time and so differ between
/// runs; every other key is a deterministic function of the seed on CPU.
#[derive(Debug, Clone, Serialize, Deserialize)]
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
    #[serde(rename = "clipfrac/high")]
    pub clipfrac_high: f64,
    #[serde(rename = "clipfrac/low")]
    pub clipfrac_low: f64,
    pub ppo_kl: f64,
    pub grad_norm: f64,
    /// Fraction of rollout rows the update skipped: their advantage is exactly zero, so they
    /// add nothing to the loss or its gradient.
    #[serde(rename = "update/rows_skipped_frac")]
    pub rows_skipped_frac: f64,
    #[serde(rename = "response_length/mean")]
    pub response_length: f64,
    #[serde(rename = "response/truncated_frac")]
    pub truncated_frac: f64,
    /// Share of this step's completions in the columns pattern.
    #[serde(rename = "pattern/columns_share")]
    pub columns_share: f64,
    #[serde(rename = "pattern/direct_share")]
    pub direct_share: f64,
    /// Prompt batches drawn this step (only with `grpo.dynamic_sampling`).
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
    /// PPO only (`grpo.advantage_estimator = "gae"`): the critic's metrics, as `critic/*` keys.
    #[serde(flatten, default)]
    pub critic: Option<CriticMetrics>,
    #[serde(rename = "timing/step_s")]
    pub step_seconds: f64,
    #[serde(rename = "timing/sample_s")]
    pub sample_seconds: f64,
    #[serde(rename = "timing/update_s")]
    pub update_seconds: f64,
    /// Completion tokens generated and trained on per second of the whole step.
    #[serde(rename = "timing/tokens_per_s")]
    pub tokens_per_second: f64,
}

/// The update settings of a GRPO config.
pub fn update_config(cfg: &GrpoConfig) -> UpdateConfig {
    UpdateConfig {
        clip: PpoClip {
            epsilon_low: cfg.epsilon_low,
            epsilon_high: cfg.epsilon_high,
        },
        beta: cfg.beta,
        entropy_coef: cfg.entropy_coef,
        epochs: cfg.ppo_epochs,
        mini_batches: cfg.mini_batches,
        lr: cfg.lr,
        max_grad_norm: cfg.max_grad_norm,
        temperature: cfg.temperature,
        skip_zero_advantage: cfg.skip_zero_advantage,
        policy_loss: cfg.policy_loss.parse().expect("validated"),
        agg: cfg.loss_agg_mode.parse().expect("validated"),
        loss_scale_factor: cfg.max_completion_length as f64,
        clip_ratio_c: cfg.clip_ratio_c,
        kl: cfg.kl_estimator.parse().expect("validated"),
    }
}

/// The reward of one rollout: the verifier's score plus, with `overlong_buffer_len > 0`, DAPO's
/// soft overlong penalty (verl `DAPORewardManager`, [`reinforge_rl::overlong`]).
pub fn shaped_reward(r: &Rollout, cfg: &GrpoConfig) -> f64 {
    let penalty = if cfg.overlong_buffer_len > 0 {
        reinforge_rl::overlong::verl_dapo_overlong_penalty(
            r.tokens.len(),
            cfg.max_completion_length,
            cfg.overlong_buffer_len,
            cfg.overlong_penalty_factor,
        )
    } else {
        0.0
    };
    r.reward() + penalty
}

/// Indices of the groups (of `g` contiguous rewards) whose rewards are not all equal.
pub fn varied_groups(rewards: &[f64], g: usize) -> Vec<usize> {
    rewards
        .chunks(g)
        .enumerate()
        .filter(|(_, c)| c.iter().any(|&r| r != c[0]))
        .map(|(i, _)| i)
        .collect()
}

/// What sampling produced for one step: the rollouts to train on, `g` per group.
struct Sampled {
    rollouts: Vec<Rollout>,
    rewards: Vec<f64>,
    draws: usize,
    kept_groups: usize,
}

/// DAPO dynamic sampling (verl `recipe/dapo` `filter_groups`, `max_num_gen_batches`): draws
/// prompt batches, keeps only groups whose rewards differ, until `prompts_per_step` groups are
/// kept or `max_draws` batches were drawn. The first draw is exactly the step's usual batch. If
/// no group is kept at all, the last draw is used as is (its advantages are all zero).
fn sample_dynamic(
    draw: impl FnMut(usize) -> Result<Vec<Rollout>>,
    cfg: &GrpoConfig,
) -> Result<Sampled> {
    let mut draw = draw;
    let g = cfg.num_generations;
    let mut kept = Sampled {
        rollouts: vec![],
        rewards: vec![],
        draws: 0,
        kept_groups: 0,
    };
    let mut last = vec![];
    while kept.kept_groups < cfg.prompts_per_step && kept.draws < cfg.max_draws.max(1) {
        let rollouts = draw(kept.draws)?;
        kept.draws += 1;
        let rewards: Vec<f64> = rollouts.iter().map(|r| shaped_reward(r, cfg)).collect();
        for gi in varied_groups(&rewards, g) {
            if kept.kept_groups == cfg.prompts_per_step {
                break;
            }
            kept.rollouts
                .extend_from_slice(&rollouts[gi * g..(gi + 1) * g]);
            kept.rewards
                .extend_from_slice(&rewards[gi * g..(gi + 1) * g]);
            kept.kept_groups += 1;
        }
        last = rollouts;
    }
    if kept.kept_groups == 0 {
        kept.rewards = last.iter().map(|r| shaped_reward(r, cfg)).collect();
        kept.rollouts = last;
    }
    Ok(kept)
}

/// The critic of a PPO run and its settings.
pub struct CriticStep<'a> {
    pub state: &'a mut CriticState,
    pub cfg: &'a PpoConfig,
}

/// Runs GRPO iteration `step` (an estimator without a critic).
pub fn run_step(
    policy: &Policy,
    reference: Option<&Policy>,
    opt: &mut AdamW,
    env: &dyn Environment,
    cfg: &GrpoConfig,
    seed: u64,
    step: usize,
) -> Result<StepMetrics> {
    run_step_with_critic(policy, reference, opt, None, env, cfg, seed, step)
}

/// Runs policy iteration `step`; `critic` is required by `grpo.advantage_estimator = "gae"`
/// and ignored otherwise. With a critic: values, GAE advantages and returns, a critic update,
/// and a policy update once `ppo.critic_warmup` iterations have passed (verl
/// `trainer.critic_warmup`).
///
/// # Panics
/// When the estimator is `gae` and no critic is given.
#[allow(clippy::too_many_arguments)]
pub fn run_step_with_critic(
    policy: &Policy,
    reference: Option<&Policy>,
    opt: &mut AdamW,
    critic: Option<CriticStep>,
    env: &dyn Environment,
    cfg: &GrpoConfig,
    seed: u64,
    step: usize,
) -> Result<StepMetrics> {
    let use_critic = cfg.advantage_estimator == GAE;
    assert!(
        critic.is_some() || !use_critic,
        "grpo.advantage_estimator = gae needs a critic"
    );
    let critic = critic.filter(|_| use_critic);
    let start = Instant::now();
    let s = step_seed(seed, PHASE_GRPO, step as u64);
    seed_torch(s);
    let g = cfg.num_generations;
    let (rollouts, rewards, dynamic) = if cfg.dynamic_sampling {
        let d = sample_dynamic(
            |k| {
                let sk = if k == 0 {
                    s
                } else {
                    step_seed(s, PHASE_GRPO, k as u64)
                };
                seed_torch(sk);
                env.draw(policy, sk, cfg)
            },
            cfg,
        )?;
        (d.rollouts, d.rewards, Some((d.draws, d.kept_groups)))
    } else {
        let rollouts = env.draw(policy, s, cfg)?;
        let rewards: Vec<f64> = rollouts.iter().map(|r| shaped_reward(r, cfg)).collect();
        (rollouts, rewards, None)
    };
    let sample_seconds = start.elapsed().as_secs_f64();

    let groups = Groups::contiguous(rollouts.len() / g, g);
    let stats = GroupStats::of(&rewards, &groups);
    let lens: Vec<usize> = rollouts.iter().map(|r| r.tokens.len()).collect();
    let advantages = if use_critic {
        None
    } else {
        let a = outcome_advantages(
            cfg.advantage_estimator,
            &rewards,
            &lens,
            &groups,
            &cfg.advantage,
        );
        Some(a?)
    };

    let update_start = Instant::now();
    let mut batch = pack(policy, reference, &rollouts, cfg);
    let mut rng = ChaCha8Rng::seed_from_u64(s);
    let mut shuffles = |epochs: usize| -> Vec<Vec<i64>> {
        (0..epochs)
            .map(|_| {
                let mut o: Vec<i64> = (0..rollouts.len() as i64).collect();
                o.shuffle(&mut rng);
                o
            })
            .collect()
    };
    let orders = shuffles(cfg.ppo_epochs);
    let mut train_policy = true;
    let mut critic_metrics = None;
    match (critic, &advantages) {
        (_, Some(a)) => set_advantages(&mut batch, a),
        (Some(c), None) => {
            let scored = critic::score(c.state, &mut batch, &rollouts, &rewards, c.cfg)?;
            let value_cfg = critic::value_config(cfg, c.cfg);
            let critic_orders = shuffles(value_cfg.epochs);
            let mask = match &batch.keep {
                Some(k) => &batch.seqs.loss_mask * k,
                None => batch.seqs.loss_mask.shallow_clone(),
            };
            let v = value_update(
                &c.state.critic,
                &mut c.state.opt,
                &reinforge_torch::train::ValueBatch {
                    seqs: &batch.seqs,
                    values_old: scored.values_old.shallow_clone(),
                    returns: scored.returns.shallow_clone(),
                    mask,
                },
                &value_cfg,
                &critic_orders,
            );
            train_policy = step >= c.cfg.critic_warmup;
            critic_metrics = Some(CriticMetrics {
                value_loss: v.value_loss,
                vf_clipfrac: v.vf_clipfrac,
                values_mean: scored.values_mean,
                returns_mean: scored.returns_mean,
                explained_var: scored.explained_var,
                grad_norm: v.grad_norm,
                reward_kl: scored.reward_kl,
            });
        }
        (None, None) => unreachable!("checked above"),
    }
    let u = if train_policy {
        policy_update(policy, opt, &batch, &update_config(cfg), &orders)
    } else {
        UpdateStats::default()
    };
    let update_seconds = update_start.elapsed().as_secs_f64();

    let n = rollouts.len() as f64;
    let tokens: usize = rollouts.iter().map(|r| r.tokens.len()).sum();
    let share = |p: Pattern| rollouts.iter().filter(|r| r.pattern == p).count() as f64 / n;
    let step_seconds = start.elapsed().as_secs_f64();
    Ok(StepMetrics {
        step,
        reward_mean: stats.mean,
        reward_std: stats.std,
        zero_std_frac: stats.zero_variance_frac,
        loss: u.loss,
        pg_loss: u.pg_loss,
        kl: u.kl,
        entropy: rollouts
            .iter()
            .flat_map(|r| &r.entropies)
            .map(|&e| e as f64)
            .sum::<f64>()
            / tokens.max(1) as f64,
        clipfrac_high: u.clipfrac_high,
        clipfrac_low: u.clipfrac_low,
        ppo_kl: u.ppo_kl,
        grad_norm: u.grad_norm,
        rows_skipped_frac: u.rows_skipped as f64 / (n * cfg.ppo_epochs as f64),
        response_length: tokens as f64 / n,
        truncated_frac: rollouts.iter().filter(|r| r.truncated).count() as f64 / n,
        columns_share: share(Pattern::Columns),
        direct_share: share(Pattern::Direct),
        dynamic_draws: dynamic.map(|(d, _)| d as f64),
        dynamic_kept_groups: dynamic.map(|(_, k)| k as f64),
        critic: critic_metrics,
        step_seconds,
        sample_seconds,
        update_seconds,
        tokens_per_second: tokens as f64 / step_seconds,
    })
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

/// Puts an estimator's advantages into the batch: per row, and per token when it has them.
fn set_advantages(batch: &mut RolloutBatch, advantages: &Advantages) {
    batch.token_advantages = advantages.per_token.as_ref().map(|t| {
        let t: Vec<Vec<f32>> = t
            .iter()
            .map(|r| r.iter().map(|&a| a as f32).collect())
            .collect();
        batch.seqs.completion_values(&t)
    });
    batch.advantages = advantages.per_row.iter().map(|&a| a as f32).collect();
}

/// Packs rollouts into the update's tensors (advantages are set afterwards); reference
/// log-probs are computed here, once, and so are the trainer's old log-probs with
/// `recompute_old_logprobs`, the TIS weights and the keep mask (truncated completions,
/// rejected tokens).
fn pack(
    policy: &Policy,
    reference: Option<&Policy>,
    rollouts: &[Rollout],
    cfg: &GrpoConfig,
) -> RolloutBatch {
    let prompts: Vec<&[i64]> = rollouts.iter().map(|r| r.prompt.as_slice()).collect();
    let completions: Vec<&[i64]> = rollouts.iter().map(|r| r.tokens.as_slice()).collect();
    let seqs = SequenceBatch::new(
        &prompts,
        &completions,
        reinforge_tasks::tokenizer::PAD,
        policy.device(),
    );
    let logprobs: Vec<Vec<f32>> = rollouts.iter().map(|r| r.logprobs.clone()).collect();
    let rollout_logp = seqs.completion_values(&logprobs);
    let forward = |p: &Policy| {
        let _guard = reinforge_torch::tch::no_grad_guard();
        token_logprobs(&p.model, &seqs, cfg.temperature).0 * &seqs.loss_mask
    };
    let ref_logp = reference.map(|r| {
        let _guard = reinforge_torch::tch::no_grad_guard();
        token_logprobs(&r.model, &seqs, cfg.temperature).0
    });
    let old_logp = if cfg.recompute_old_logprobs {
        forward(policy)
    } else {
        rollout_logp.shallow_clone()
    };
    let tis: Tis = cfg.tis.parse().expect("validated");
    let (is_weights, tis_keep) = match tis {
        Tis::None => (None, None),
        mode => {
            let (w, k) = tis_weights(&old_logp, &rollout_logp, &seqs.loss_mask, mode, cfg.tis_cap);
            (Some(w), Some(k))
        }
    };
    let truncated_keep = cfg.mask_truncated.then(|| {
        let keep: Vec<f32> = rollouts
            .iter()
            .map(|r| f32::from(!r.truncated as u8))
            .collect();
        seqs.row_values(&keep)
    });
    let keep = match (tis_keep, truncated_keep) {
        (Some(a), Some(b)) => Some(a * b),
        (a, b) => a.or(b),
    };
    let mut batch = RolloutBatch::new(seqs, old_logp, ref_logp, vec![0.0; rollouts.len()]);
    batch.is_weights = is_weights;
    batch.keep = keep;
    batch
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TrainConfig;

    fn rollout(correct: bool, len: usize) -> Rollout {
        Rollout {
            problem: 0,
            prompt: vec![1],
            tokens: vec![3; len],
            logprobs: vec![-1.0; len],
            entropies: vec![0.5; len],
            truncated: false,
            score: f64::from(u8::from(correct)),
            pattern: Pattern::Direct,
        }
    }

    /// A draw of `pattern.len()` groups of 2: `true` groups have one correct and one wrong
    /// completion, `false` groups two wrong ones.
    fn draw_of(pattern: &[bool]) -> Vec<Rollout> {
        pattern
            .iter()
            .flat_map(|&varied| [rollout(varied, 2), rollout(false, 3)])
            .collect()
    }

    fn cfg(prompts: usize, max_draws: usize) -> GrpoConfig {
        let mut c = TrainConfig::default().grpo;
        c.num_generations = 2;
        c.prompts_per_step = prompts;
        c.max_draws = max_draws;
        c.dynamic_sampling = true;
        c
    }

    #[test]
    fn dynamic_sampling_keeps_varied_groups_until_full() {
        let draws = [vec![true, false, false], vec![false, true, true]];
        let mut calls = 0;
        let s = sample_dynamic(
            |k| {
                calls += 1;
                Ok(draw_of(&draws[k]))
            },
            &cfg(2, 4),
        )
        .unwrap();
        assert_eq!((s.draws, s.kept_groups, calls), (2, 2, 2));
        assert_eq!(s.rollouts.len(), 4);
        assert_eq!(s.rewards, vec![1.0, 0.0, 1.0, 0.0]);
        assert!(
            varied_groups(&s.rewards, 2).len() == 2,
            "only varied groups kept"
        );
    }

    #[test]
    fn dynamic_sampling_respects_the_cap() {
        let mut calls = 0;
        let s = sample_dynamic(
            |_| {
                calls += 1;
                Ok(draw_of(&[false, false, true]))
            },
            &cfg(3, 2),
        )
        .unwrap();
        assert_eq!((s.draws, s.kept_groups, calls), (2, 2, 2));
        let none = sample_dynamic(|_| Ok(draw_of(&[false, false])), &cfg(2, 3)).unwrap();
        assert_eq!((none.draws, none.kept_groups), (3, 0));
        assert_eq!(none.rollouts.len(), 4, "falls back to the last draw");
    }

    #[test]
    fn overlong_penalty_shapes_the_reward() {
        let mut c = cfg(1, 1);
        c.max_completion_length = 10;
        c.overlong_buffer_len = 4;
        assert_eq!(shaped_reward(&rollout(true, 6), &c), 1.0);
        assert_eq!(shaped_reward(&rollout(true, 8), &c), 0.5);
        assert_eq!(shaped_reward(&rollout(false, 10), &c), -1.0);
        c.overlong_buffer_len = 0;
        assert_eq!(shaped_reward(&rollout(false, 10), &c), 0.0);
    }
}
