//! Multi-turn episodes: the environment drives a conversation through a rollout [`Engine`]
//! and the trainer gets the exact token trajectory back: the prompt, then every turn's
//! sampled tokens (trained on) and every environment reply (tool results, feedback: context,
//! not trained on), concatenated as ids. Earlier turns are never re-tokenised: each turn's
//! context is the previous context's ids plus the new ids, so what the policy saw is what
//! the trainer scores.
//!
//! The interface follows OpenEnv's `reset`/`step` split: the caller resets (builds the
//! prompts and per-episode states), and [`Turns::step`] takes the policy's turn and returns
//! the environment's observation tokens, or `None` when the episode is over.

use anyhow::{ensure, Result};
use reinforge_torch::SamplingParams;

use crate::env::{EnvMetrics, Rollout};
use crate::rollout::Engine;
use crate::seeds::step_seed;

/// Seeds of turns after the first: `step_seed(seed, TURN_SEEDS, turn)`.
const TURN_SEEDS: u64 = 23;

/// An environment's side of a conversation.
pub trait Turns: Sync {
    /// Per-episode state (the problem, the conversation so far as text).
    type State: Send;

    /// The policy's turn `turn` (its sampled ids; `truncated` when it hit the length limit)
    /// in; the observation ids to append before the policy's next turn out, or `None` when
    /// the episode ends here.
    fn step(
        &self,
        state: &mut Self::State,
        turn: &[i64],
        truncated: bool,
    ) -> Result<Option<Vec<i64>>>;
}

/// One episode's token trajectory after the prompt.
#[derive(Debug, Clone, Default)]
pub struct Trajectory {
    /// Every id after the prompt: the policy's turns and the environment's observations.
    pub tokens: Vec<i64>,
    /// Per id: sampled by the policy (trained on) or written by the environment.
    pub trained: Vec<bool>,
    /// The sampler's log-prob per id (0 for the environment's).
    pub logprobs: Vec<f32>,
    pub entropies: Vec<f32>,
    /// The last turn hit the length limit.
    pub truncated: bool,
    /// The oldest weight version among the turns.
    pub version: u64,
    /// Policy turns taken.
    pub turns: usize,
}

/// How long an episode may run.
#[derive(Debug, Clone, Copy)]
pub struct EpisodeLimits {
    /// Policy turns at most.
    pub max_turns: usize,
    /// Tokens after the prompt at most: an episode ends when its next observation plus a
    /// whole turn would not fit.
    pub max_tokens: usize,
}

/// Runs episodes `prompts[i]` (with `states[i]`) within `limits`, all live episodes' turns
/// decoded as one batch per round; `seed` seeds round 0 and, mixed with the round, the later
/// ones.
pub fn converse<T: Turns>(
    engine: &dyn Engine,
    turns: &T,
    prompts: &[Vec<i64>],
    states: &mut [T::State],
    params: &SamplingParams,
    limits: EpisodeLimits,
    seed: u64,
) -> Result<Vec<Trajectory>> {
    let EpisodeLimits {
        max_turns,
        max_tokens,
    } = limits;
    ensure!(prompts.len() == states.len(), "one state per prompt");
    let mut out: Vec<Trajectory> = prompts
        .iter()
        .map(|_| Trajectory {
            version: u64::MAX,
            ..Default::default()
        })
        .collect();
    let mut live: Vec<usize> = (0..prompts.len()).collect();
    for round in 0..max_turns {
        if live.is_empty() {
            break;
        }
        let contexts: Vec<Vec<i64>> = live
            .iter()
            .map(|&i| [prompts[i].as_slice(), out[i].tokens.as_slice()].concat())
            .collect();
        let round_seed = if round == 0 {
            seed
        } else {
            step_seed(seed, TURN_SEEDS, round as u64)
        };
        let generated = engine.generate(&contexts, params, round_seed)?;
        let mut still = Vec::new();
        for (&i, c) in live.iter().zip(generated.completions) {
            let t = &mut out[i];
            t.version = t.version.min(generated.version);
            t.turns += 1;
            t.truncated = c.truncated;
            t.trained.extend(std::iter::repeat_n(true, c.tokens.len()));
            t.logprobs.extend(&c.logprobs);
            t.entropies.extend(&c.entropies);
            t.tokens.extend(&c.tokens);
            let last_round = round + 1 == max_turns;
            let observation = turns.step(&mut states[i], &c.tokens, c.truncated)?;
            if let Some(obs) = observation.filter(|_| !last_round && !c.truncated) {
                // The next turn must fit whole: the trajectory never exceeds `max_tokens`.
                if t.tokens.len() + obs.len() + params.max_new_tokens > max_tokens {
                    continue;
                }
                t.trained.extend(std::iter::repeat_n(false, obs.len()));
                t.logprobs.extend(std::iter::repeat_n(0.0, obs.len()));
                t.tokens.extend(obs);
                still.push(i);
            }
        }
        live = still;
    }
    for t in &mut out {
        if t.version == u64::MAX {
            t.version = 0;
        }
    }
    Ok(out)
}

/// `multi_turn/turns_mean` (policy turns per episode) and `multi_turn/observations_mean`
/// (environment replies per episode) of a step's episodes.
pub fn episode_metrics(rollouts: &[Rollout]) -> EnvMetrics {
    let mut m = EnvMetrics::new();
    if rollouts.is_empty() {
        return m;
    }
    let n = rollouts.len() as f64;
    let (mut turns, mut replies) = (0usize, 0usize);
    for r in rollouts {
        let mask = r.trained.as_deref().unwrap_or(&[]);
        turns += segments(mask, true).max(1);
        replies += segments(mask, false);
    }
    m.insert("multi_turn/turns_mean".into(), turns as f64 / n);
    m.insert("multi_turn/observations_mean".into(), replies as f64 / n);
    m
}

/// Runs of consecutive `value`s in `mask`.
fn segments(mask: &[bool], value: bool) -> usize {
    mask.iter()
        .enumerate()
        .filter(|&(i, &m)| m == value && (i == 0 || mask[i - 1] != value))
        .count()
}
