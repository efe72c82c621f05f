//! One RL step on rollouts already drawn, as five stages (verl's driver: each stage one call
//! to the workers that own the tensors): shard (this rank's rows) → pack (reinforge-torch,
//! call 1) → advantage (plain Rust) → update (reinforge-torch, call 2) → metrics.

use std::time::Instant;

use anyhow::{bail, Result};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use reinforge_torch::train::rl::{self, Learner, PackModels, RankRows, RolloutRef, UpdatePlan};

use super::advantage;
use super::metrics::{self, StepMetrics, StepRecord};
use super::sample::Drawn;
use super::settings::StepSettings;
use super::shard;
use crate::env::{Environment, Rollout};
use crate::trainer::Trainer;

/// Trains policy iteration `t.state.step` on `drawn`. With a critic (`rl.advantage_estimator
/// = "gae"`, which requires `t.critic`): GAE advantages and returns, a critic update, and a
/// policy update once `ppo.critic_warmup` iterations have passed (verl
/// `trainer.critic_warmup`).
pub fn step(
    t: &mut Trainer,
    env: &dyn Environment,
    drawn: Drawn,
    s: &StepSettings,
) -> Result<StepMetrics> {
    let started = Instant::now();
    // Each phase starts from its live tensors: what sampling freed goes back to the system.
    reinforge_torch::heap::phase_boundary("sampling");
    let step = t.state.step;
    let critic = s.uses_critic();
    if critic && (t.critic.is_none() || t.dp.is_some()) {
        bail!("rl.advantage_estimator = \"gae\" needs PPO's critic, in a single process (data-parallel ranks are not supported with it yet)");
    }
    let dp = t.dp.clone();
    // Data-parallel: keep this rank's rows; rewards and lengths of the whole batch are
    // gathered, so group statistics and advantages are the single-process ones.
    let shard = shard::keep_rows(dp.as_deref(), drawn.rollouts, drawn.rewards)?;
    let update_start = Instant::now();
    let models = PackModels {
        policy: t.policy,
        reference: t.reference.as_ref(),
        critic: t.critic.as_ref().filter(|_| critic).map(|c| &c.critic),
    };
    let mut packed = rl::pack(models, &rollout_refs(&shard.rollouts), &s.pack)?;
    reinforge_torch::heap::phase_boundary("log-prob passes");
    let (advantages, scores) = advantage::estimate(&shard, &packed, s)?;
    let (orders, critic_orders) = orders(s, step, shard.rewards.len());
    let plan = UpdatePlan {
        policy: (!critic || step >= s.ppo.critic_warmup).then_some(&s.update),
        orders: &orders,
        critic: critic.then_some((&s.value, critic_orders.as_slice())),
        dp: dp.as_deref().map(|d| RankRows {
            pg: &d.pg,
            row_offset: shard.local.start,
        }),
    };
    let learner = Learner {
        policy: t.policy,
        opt: &mut t.opt,
        critic: t.critic.as_mut().map(|c| (&c.critic, &mut c.opt)),
    };
    let updated = rl::update(learner, &mut packed, &advantages, &plan)?;
    let gap = packed.gap.take();
    drop(packed);
    reinforge_torch::heap::phase_boundary("update");
    let record = StepRecord {
        step,
        shard: &shard,
        meta: drawn.meta,
        gap,
        updated,
        critic: scores,
        started,
        update_seconds: update_start.elapsed().as_secs_f64(),
    };
    metrics::record(record, env, dp.as_deref(), s)
}

/// The row orders of the policy's passes and, with a critic, of its passes: shuffles of the
/// step's `n` global rows drawn from the step's seed.
fn orders(s: &StepSettings, step: usize, n: usize) -> (Vec<Vec<i64>>, Vec<Vec<i64>>) {
    let mut rng = ChaCha8Rng::seed_from_u64(s.step_seed(step));
    let mut shuffles = |epochs: usize| -> Vec<Vec<i64>> {
        (0..epochs)
            .map(|_| {
                let mut o: Vec<i64> = (0..n as i64).collect();
                o.shuffle(&mut rng);
                o
            })
            .collect()
    };
    let policy = shuffles(s.rl.ppo_epochs);
    let critic = if s.uses_critic() {
        shuffles(s.value.epochs)
    } else {
        vec![]
    };
    (policy, critic)
}

/// The rollouts as packing reads them.
fn rollout_refs(rollouts: &[Rollout]) -> Vec<RolloutRef<'_>> {
    rollouts
        .iter()
        .map(|r| RolloutRef {
            prompt: &r.prompt,
            completion: &r.tokens,
            logprobs: &r.logprobs,
            truncated: r.truncated,
            trained: r.trained.as_deref(),
            images: &r.images,
        })
        .collect()
}
