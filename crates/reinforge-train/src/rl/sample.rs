//! The sampling stage of an RL step: a step's rollouts from an engine, their shaped rewards
//! (DAPO's overlong penalty) and DAPO's dynamic sampling.

use std::time::Instant;

use anyhow::Result;

use crate::config::RlConfig;
use crate::env::{Environment, Rollout};
use crate::rollout::{Engine, PushStats};
use crate::seeds::{step_seed, PHASE_RL};

/// The reward of one rollout: the verifier's score plus, with `overlong_buffer_len > 0`, DAPO's
/// soft overlong penalty (verl `DAPORewardManager`, [`reinforge_rl::overlong`]).
pub fn shaped_reward(r: &Rollout, cfg: &RlConfig) -> f64 {
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
    cfg: &RlConfig,
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

/// A step's rollouts, ready for the update.
pub struct Drawn {
    pub rollouts: Vec<Rollout>,
    /// Their shaped rewards.
    pub rewards: Vec<f64>,
    /// How they were drawn, for the step's metrics.
    pub meta: DrawMeta,
}

/// How a step's rollouts were drawn: what the step's metrics report besides the rollouts.
#[derive(Debug, Clone, Copy, Default)]
pub struct DrawMeta {
    /// With dynamic sampling: the draws made and the groups kept.
    pub dynamic: Option<(usize, usize)>,
    /// Seconds the trainer spent sampling (or waiting for rollouts generated ahead).
    pub sample_seconds: f64,
    /// The weight push before the draw (remote engines).
    pub push: Option<PushStats>,
    /// Rollouts dropped as too stale before these were drawn again.
    pub stale_dropped: usize,
}

/// Samples the rollouts of step seed `s` from `engine` (with DAPO's dynamic sampling when on).
pub fn sample(engine: &dyn Engine, env: &dyn Environment, cfg: &RlConfig, s: u64) -> Result<Drawn> {
    let start = Instant::now();
    let (rollouts, rewards, dynamic) = if cfg.dynamic_sampling {
        let d = sample_dynamic(
            |k| {
                let sk = if k == 0 {
                    s
                } else {
                    step_seed(s, PHASE_RL, k as u64)
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
        meta: DrawMeta {
            dynamic,
            sample_seconds: start.elapsed().as_secs_f64(),
            ..DrawMeta::default()
        },
    })
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
            images: Vec::new(),
            audit: Default::default(),
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

    fn cfg(prompts: usize, max_draws: usize) -> RlConfig {
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
