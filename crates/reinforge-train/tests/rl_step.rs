//! Tests of `reinforge_train::rl::step` through its public API (moved out of the library source).

use anyhow::{bail, Result};
use reinforge_torch::train::rl::{self};
use reinforge_train::env::{Environment, Rollout};
use reinforge_train::rl::metrics::StepMetrics;
use reinforge_train::rl::sample::Drawn;
use reinforge_train::rl::settings::StepSettings;
use reinforge_train::trainer::Trainer;
use std::path::Path;

use reinforge_torch::{Device, Policy};

use reinforge_train::config::{RlConfig, TrainConfig, GAE};
use reinforge_train::presets::Preset;
use reinforge_train::rl::sample::DrawMeta;
use reinforge_train::rl::step::*;
use reinforge_train::rollout::Engine;
use reinforge_train::trainer::critic::CriticState;
use reinforge_train::trainer::{optimizer, Phase, TrainerState};

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
        images: Vec::new(),
        audit: Default::default(),
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
    let set = [format!("rl.algorithm={}", preset.name())];
    let mut cfg = TrainConfig::resolve(None, &set).unwrap();
    cfg.model.num_hidden_layers = 1;
    (cfg.grpo.num_generations, cfg.grpo.prompts_per_step) = (2, 2);
    let policy = Policy::new(&cfg.model, Device::Cpu, 0).unwrap();
    let before: Vec<f64> = weights(&policy);
    let opt = optimizer(&policy, 0.0);
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
