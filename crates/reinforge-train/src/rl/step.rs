//! One RL step on rollouts already drawn, as five stages (verl's driver: each stage one call
//! to the workers that own the tensors): shard (this rank's rows) → pack (reinforge-torch,
//! call 1) → advantage (plain Rust) → update (reinforge-torch, call 2) → metrics.

use std::time::Instant;

use anyhow::{bail, Result};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use reinforge_torch::rl::{self, Learner, PackModels, RankRows, RolloutRef, UpdatePlan};

use super::advantage;
use super::metrics::{self, StepMetrics, StepRecord};
use super::sample::Drawn;
use super::settings::StepSettings;
use super::shard;
use crate::env::{Environment, Rollout};
use crate::trainer::Trainer;

/// Trains policy iteration `t.state.step` on `drawn`. With a critic (`grpo.advantage_estimator
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
    let step = t.state.step;
    let critic = s.uses_critic();
    if critic && (t.critic.is_none() || t.dp.is_some()) {
        bail!("grpo.advantage_estimator = \"gae\" needs PPO's critic, in a single process (data-parallel ranks are not supported with it yet)");
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
    let mut packed = rl::pack(models, &rollout_refs(&shard.rollouts), &s.pack);
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
    let record = StepRecord {
        step,
        shard: &shard,
        meta: drawn.meta,
        gap: packed.gap,
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
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use reinforge_torch::{Device, Policy};

    use super::*;
    use crate::config::{RlConfig, TrainConfig, GAE};
    use crate::presets::Preset;
    use crate::rl::sample::DrawMeta;
    use crate::rollout::Engine;
    use crate::trainer::critic::CriticState;
    use crate::trainer::{optimizer, Phase, TrainerState};

    /// An environment whose rollouts the test hands the step itself.
    struct Handed;

    impl Environment for Handed {
        fn draw(&self, _: &dyn Engine, _: u64, _: &RlConfig) -> Result<Vec<Rollout>> {
            bail!("the test hands the step its rollouts")
        }
        fn pad_id(&self) -> i64 {
            0
        }
        fn max_prompt_len(&self) -> usize {
            2
        }
        fn describe_longest_prompt(&self) -> String {
            String::new()
        }
    }

    /// Two groups of two completions, one right and one wrong in each.
    fn drawn() -> Drawn {
        let rollout = |score: f64, tokens: Vec<i64>| Rollout {
            prompt: vec![1, 4],
            logprobs: vec![-1.5; tokens.len()],
            entropies: vec![0.5; tokens.len()],
            tokens,
            truncated: false,
            trained: None,
            version: 0,
            score,
            label: None,
        };
        let rollouts = vec![
            rollout(1.0, vec![3, 5, 2]),
            rollout(0.0, vec![6, 2]),
            rollout(0.0, vec![5, 5, 5, 2]),
            rollout(1.0, vec![7, 2]),
        ];
        Drawn {
            rewards: rollouts.iter().map(|r| r.score).collect(),
            rollouts,
            meta: DrawMeta::default(),
        }
    }

    /// One step of a one-layer model under `preset`: the calls it made into reinforge-torch's
    /// RL API, its metrics, and whether the weights moved.
    fn one_step(preset: Preset) -> (usize, StepMetrics, bool) {
        let set = [format!("grpo.algorithm={}", preset.name())];
        let mut cfg = TrainConfig::resolve(None, &set).unwrap();
        cfg.model.num_hidden_layers = 1;
        (cfg.grpo.num_generations, cfg.grpo.prompts_per_step) = (2, 2);
        let policy = Policy::new(&cfg.model, Device::Cpu, 0).unwrap();
        let before: Vec<f64> = weights(&policy);
        let opt = optimizer(&policy, 1e-2, 0.0);
        let files = Box::new(|_: &Path| Ok(()));
        let mut t = Trainer::new(&policy, opt, TrainerState::start(Phase::Rl), files);
        if cfg.grpo.advantage_estimator == GAE {
            t.critic = Some(CriticState::fresh(&policy, &cfg.ppo, 0).unwrap());
        }
        let s = StepSettings::new(&cfg.grpo, &cfg.ppo, cfg.seed, 0);
        let calls = rl::calls_on_this_thread();
        let m = step(&mut t, &Handed, drawn(), &s).unwrap();
        let moved = weights(&policy) != before;
        (rl::calls_on_this_thread() - calls, m, moved)
    }

    fn weights(p: &Policy) -> Vec<f64> {
        let mut vars: Vec<_> = p.vs.variables().into_iter().collect();
        vars.sort_by(|a, b| a.0.cmp(&b.0));
        vars.iter()
            .map(|(_, t)| t.abs().sum(reinforge_torch::Kind::Double).double_value(&[]))
            .collect()
    }

    #[test]
    fn every_preset_calls_the_rl_api_twice_per_step() {
        for preset in Preset::ALL {
            let (calls, m, moved) = one_step(preset);
            assert_eq!(calls, 2, "{}: pack and update, nothing else", preset.name());
            assert!(moved, "{}: the policy was updated", preset.name());
            assert!(
                m.loss.is_finite() && m.reward_mean == 0.5,
                "{}: {m:?}",
                preset.name()
            );
            let critic = m.critic.as_ref();
            assert_eq!(
                critic.is_some(),
                preset == Preset::Ppo,
                "{}: critic metrics only with PPO's critic",
                preset.name()
            );
            assert!(critic.is_none_or(|c| c.value_loss > 0.0 && c.grad_norm > 0.0));
        }
    }
}
