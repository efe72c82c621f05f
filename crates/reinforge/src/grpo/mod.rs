//! One policy iteration of any preset: sample G completions per prompt from an
//! [`Environment`], shape the rewards, compute advantages (an outcome estimator, or GAE with
//! PPO's critic, [`crate::critic`], which is updated in the same iteration), pack the rollouts
//! (in reinforge-torch) and update the policy with the clipped surrogate against the
//! sampler's log-probs (the stored "old" policy).

mod drive;
mod shard;

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Result};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use reinforge_rl::advantage::outcome::outcome_advantages;
use reinforge_rl::{GroupStats, Groups};
use reinforge_torch::loss::policy::{VerlPolicyConfig, NO_DUAL_CLIP};
use reinforge_torch::pack::{pack, LogprobGap, PackOptions, Packed, RolloutRef};
use reinforge_torch::train::{policy_update, DataParallel, UpdateConfig, UpdateStats};
use serde::{Deserialize, Serialize};

use crate::config::{GrpoConfig, PpoConfig, TrainConfig, GAE};
use crate::critic::{self, CriticState};
use crate::env::{EnvMetrics, Environment, Rollout};
use crate::rollout::local::{LocalEngine, RowDraw};
use crate::rollout::{Engine, PushStats};
use crate::run_dir::RunDir;
use crate::seeds::{step_seed, PHASE_GRPO};
use crate::trainer::{PhaseEnd, PhasePlan, StepLog, Trainer};
use shard::Shard;

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
    #[serde(rename = "response_length/mean")]
    pub response_length: f64,
    #[serde(rename = "response/truncated_frac")]
    pub truncated_frac: f64,
    /// The environment's metrics (the arithmetic task: `pattern/*_share`).
    #[serde(flatten)]
    pub env: EnvMetrics,
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

/// The update settings of a GRPO config.
pub fn update_config(cfg: &GrpoConfig) -> Result<UpdateConfig> {
    Ok(UpdateConfig {
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
    })
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
    r.score + penalty
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

/// Whether a run keeps a frozen reference model: for the KL loss (`grpo.beta > 0`) or, with
/// PPO's critic, for the KL in the reward (`ppo.kl_coef > 0`).
pub fn needs_reference(cfg: &GrpoConfig, ppo: &PpoConfig) -> bool {
    cfg.beta > 0.0 || (cfg.advantage_estimator == GAE && ppo.kl_coef > 0.0)
}

/// A step's rollouts, ready for the update.
pub struct Drawn {
    pub rollouts: Vec<Rollout>,
    /// Their shaped rewards.
    pub rewards: Vec<f64>,
    /// With dynamic sampling: the draws made and the groups kept.
    pub dynamic: Option<(usize, usize)>,
    /// Seconds the trainer spent sampling (or waiting for rollouts generated ahead).
    pub sample_seconds: f64,
}

/// Samples step seed `s`'s rollouts from `engine` (with DAPO's dynamic sampling when on).
pub fn sample(
    engine: &dyn Engine,
    env: &dyn Environment,
    cfg: &GrpoConfig,
    s: u64,
) -> Result<Drawn> {
    let start = Instant::now();
    let (rollouts, rewards, dynamic) = if cfg.dynamic_sampling {
        let d = sample_dynamic(
            |k| {
                let sk = if k == 0 {
                    s
                } else {
                    step_seed(s, PHASE_GRPO, k as u64)
                };
                env.draw(engine, sk, cfg)
            },
            cfg,
        )?;
        (d.rollouts, d.rewards, Some((d.draws, d.kept_groups)))
    } else {
        let rollouts = env.draw(engine, s, cfg)?;
        let rewards: Vec<f64> = rollouts.iter().map(|r| shaped_reward(r, cfg)).collect();
        (rollouts, rewards, None)
    };
    Ok(Drawn {
        rollouts,
        rewards,
        dynamic,
        sample_seconds: start.elapsed().as_secs_f64(),
    })
}

/// The RL phase of a run, whatever the environment: opens PPO's critic from `latest` when the
/// preset uses one, runs `grpo.steps` iterations of [`run_step`] through the trainer's loop
/// (Ctrl-C, metrics, checkpoints) and saves `checkpoints/latest` when the phase finishes.
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

/// Runs policy iteration `trainer.state.step`. With a critic (`grpo.advantage_estimator =
/// "gae"`, which requires `trainer.critic`): values, GAE advantages and returns, a critic
/// update, and a policy update once `ppo.critic_warmup` iterations have passed (verl
/// `trainer.critic_warmup`).
pub fn run_step(
    t: &mut Trainer,
    env: &dyn Environment,
    cfg: &GrpoConfig,
    ppo: &PpoConfig,
    seed: u64,
    per_row: bool,
) -> Result<StepMetrics> {
    let step = t.state.step;
    let s = step_seed(seed, PHASE_GRPO, step as u64);
    // A data-parallel rank samples its rows of the step's batch, with per-row noise.
    let rows = match &t.dp {
        Some(dp) => Some(dp.rows(
            cfg.prompts_per_step * cfg.num_generations,
            "grpo.prompts_per_step x grpo.num_generations",
        )?),
        None => None,
    };
    if t.dp.is_some() && cfg.dynamic_sampling {
        bail!("grpo.dynamic_sampling is not supported with data-parallel ranks yet");
    }
    let engine = LocalEngine {
        policy: t.policy,
        pad_id: env.pad_id(),
        version: step as u64,
        draw: RowDraw {
            per_row: per_row || rows.is_some(),
            rows,
        },
    };
    let drawn = sample(&engine, env, cfg, s)?;
    update_step(t, env, drawn, cfg, ppo, seed, UpdateExtras::default())
}

/// What a step's driver adds to the update: a push it made, whether to measure the
/// engine-trainer log-prob gap, rollouts it dropped as too stale.
#[derive(Debug, Clone, Copy, Default)]
pub struct UpdateExtras {
    pub push: Option<PushStats>,
    pub measure_gap: bool,
    pub stale_dropped: usize,
}

/// The update half of policy iteration `trainer.state.step` on rollouts already drawn:
/// advantages (an outcome estimator, or GAE and a critic update), packing, the policy update
/// and the step's metrics.
pub fn update_step(
    t: &mut Trainer,
    env: &dyn Environment,
    drawn: Drawn,
    cfg: &GrpoConfig,
    ppo: &PpoConfig,
    seed: u64,
    extras: UpdateExtras,
) -> Result<StepMetrics> {
    let step = t.state.step;
    let use_critic = cfg.advantage_estimator == GAE;
    if use_critic && t.critic.is_none() {
        bail!("grpo.advantage_estimator = gae needs a critic, and this run has none");
    }
    let start = Instant::now();
    let s = step_seed(seed, PHASE_GRPO, step as u64);
    let g = cfg.num_generations;
    let Drawn {
        rollouts,
        rewards,
        dynamic,
        sample_seconds,
    } = drawn;
    // Data-parallel: keep this rank's rows; rewards and lengths of the whole batch are
    // gathered, so group statistics and advantages are the single-process ones.
    let dp = t.dp.clone();
    let Shard {
        rollouts,
        rewards,
        lens,
        local,
    } = shard::keep_rows(dp.as_deref(), rollouts, rewards)?;
    let n_global = rewards.len();

    let groups = Groups::contiguous(n_global / g, g);
    let stats = GroupStats::of(&rewards, &groups);

    let update_start = Instant::now();
    let mut packed = pack_rollouts(t, env, &rollouts, cfg, extras.measure_gap)?;
    let mut rng = ChaCha8Rng::seed_from_u64(s);
    let mut shuffles = |epochs: usize| -> Vec<Vec<i64>> {
        (0..epochs)
            .map(|_| {
                let mut o: Vec<i64> = (0..n_global as i64).collect();
                o.shuffle(&mut rng);
                o
            })
            .collect()
    };
    let orders = shuffles(cfg.ppo_epochs);
    let mut train_policy = true;
    let mut critic_metrics = None;
    if use_critic && dp.is_some() {
        bail!("PPO's critic (grpo.advantage_estimator = \"gae\") is not supported with data-parallel ranks yet");
    }
    match t.critic.as_mut().filter(|_| use_critic) {
        None => {
            let a = outcome_advantages(
                cfg.advantage_estimator,
                &rewards,
                &lens,
                &groups,
                &cfg.advantage,
            )?;
            let per_token = a.per_token.as_deref().map(|t| &t[local.clone()]);
            packed.set_advantages(&a.per_row[local.clone()], per_token);
        }
        Some(c) => {
            let scored = critic::score(c, &mut packed, &rewards, ppo)?;
            let value_cfg = critic::value_config(cfg, ppo);
            let critic_orders = shuffles(value_cfg.epochs);
            let v = packed.update_critic(
                &c.critic,
                &mut c.opt,
                &scored.values,
                &scored.returns,
                &value_cfg,
                &critic_orders,
            );
            train_policy = step >= ppo.critic_warmup;
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
    }
    let shard = match &dp {
        Some(d) => Some(DataParallel {
            pg: &d.pg,
            row_offset: local.start,
            global_row_tokens: d.gather(&packed.batch.row_tokens())?,
        }),
        None => None,
    };
    let u = if train_policy {
        policy_update(
            t.policy,
            &mut t.opt,
            &packed.batch,
            &update_config(cfg)?,
            &orders,
            shard.as_ref(),
        )?
    } else {
        UpdateStats::default()
    };
    let update_seconds = update_start.elapsed().as_secs_f64();

    let n = n_global as f64;
    let tokens: usize = lens.iter().sum();
    // The step's wall time: its weight push (remote engines), sampling, and the update.
    let push_seconds = extras.push.map_or(0.0, |p| p.seconds);
    let step_seconds = push_seconds + sample_seconds + start.elapsed().as_secs_f64();
    let sampled_entropies: usize = rollouts.iter().map(|r| r.entropies.len()).sum();
    // Remote engines report no entropies: the trainer's, measured with the gap, stand in.
    let entropy = match &packed.gap {
        Some(gap) if sampled_entropies == 0 => gap.trainer_entropy,
        _ => {
            let sum: f64 = rollouts
                .iter()
                .flat_map(|r| &r.entropies)
                .map(|&e| e as f64)
                .sum();
            match &dp {
                Some(d) => d.sum(sum)? / d.sum(sampled_entropies as f64)?.max(1.0),
                None => sum / sampled_entropies.max(1) as f64,
            }
        }
    };
    let truncated = rollouts.iter().filter(|r| r.truncated).count() as f64;
    let truncated = match &dp {
        Some(d) => d.sum(truncated)?,
        None => truncated,
    };
    let env_metrics = shard::env_metrics(dp.as_deref(), env.metrics(&rollouts))?;
    Ok(StepMetrics {
        step,
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
        rows_skipped_frac: u.rows_skipped as f64 / (n * cfg.ppo_epochs as f64),
        response_length: tokens as f64 / n,
        truncated_frac: truncated / n,
        env: env_metrics,
        dynamic_draws: dynamic.map(|(d, _)| d as f64),
        dynamic_kept_groups: dynamic.map(|(_, k)| k as f64),
        critic: critic_metrics,
        rollout: rollout_metrics(&rollouts, step as u64, packed.gap, extras),
        nonfinite_grad_steps: u.nonfinite_grad_steps,
        step_seconds,
        sample_seconds,
        update_seconds,
        tokens_per_second: tokens as f64 / step_seconds,
    })
}

/// Packs the rollouts for the update (reinforge-torch's [`pack`]) with the run's reference
/// model and the environment's pad id.
fn pack_rollouts(
    t: &Trainer,
    env: &dyn Environment,
    rollouts: &[Rollout],
    cfg: &GrpoConfig,
    measure_gap: bool,
) -> Result<Packed> {
    let rows: Vec<RolloutRef> = rollouts
        .iter()
        .map(|r| RolloutRef {
            prompt: &r.prompt,
            completion: &r.tokens,
            logprobs: &r.logprobs,
            truncated: r.truncated,
            trained: r.trained.as_deref(),
        })
        .collect();
    let opts = PackOptions {
        pad_id: env.pad_id(),
        temperature: cfg.temperature,
        recompute_old_logprobs: cfg.recompute_old_logprobs,
        tis: cfg.tis,
        tis_cap: cfg.tis_cap,
        mask_truncated: cfg.mask_truncated,
        measure_gap,
    };
    Ok(pack(t.policy, t.reference.as_ref(), &rows, &opts))
}

/// The `rollout/*` metrics of a step trained at weight version `version`.
fn rollout_metrics(
    rollouts: &[Rollout],
    version: u64,
    gap: Option<LogprobGap>,
    extras: UpdateExtras,
) -> RolloutMetrics {
    let stale: Vec<u64> = rollouts
        .iter()
        .map(|r| version.saturating_sub(r.version))
        .collect();
    let any_stale = stale.iter().any(|&s| s > 0) || extras.stale_dropped > 0;
    RolloutMetrics {
        push_seconds: extras.push.map(|p| p.seconds),
        push_bytes: extras.push.map(|p| p.bytes as f64),
        gap_mean_abs: gap.map(|g| g.mean_abs),
        gap_max_abs: gap.map(|g| g.max_abs),
        gap_mean: gap.map(|g| g.mean),
        is_weight_mean: gap.map(|g| g.is_weight_mean),
        is_weight_max: gap.map(|g| g.is_weight_max),
        staleness_mean: any_stale
            .then(|| stale.iter().sum::<u64>() as f64 / stale.len().max(1) as f64),
        staleness_max: any_stale.then(|| stale.iter().copied().max().unwrap_or(0) as f64),
        stale_dropped: any_stale.then_some(extras.stale_dropped as f64),
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TrainConfig;

    fn rollout(correct: bool, len: usize) -> Rollout {
        Rollout {
            prompt: vec![1],
            tokens: vec![3; len],
            logprobs: vec![-1.0; len],
            entropies: vec![0.5; len],
            truncated: false,
            trained: None,
            version: 0,
            score: f64::from(u8::from(correct)),
            label: None,
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
