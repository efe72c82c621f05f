//! Tests of `reinforge_train::multi_turn` through its public API (moved out of the library source).

use anyhow::Result;
use reinforge_torch::Completion;
use reinforge_torch::SamplingParams;
use reinforge_train::multi_turn::*;
use reinforge_train::rollout::Engine;
use reinforge_train::rollout::Generated;
use std::sync::Mutex;

/// Answers every context with `[len % 7, 99]`, records the contexts it saw.
struct Echo(Mutex<Vec<Vec<i64>>>);

impl Engine for Echo {
    fn generate(&self, prompts: &[Vec<i64>], _: &SamplingParams, _: u64) -> Result<Generated> {
        self.0.lock().unwrap().extend(prompts.iter().cloned());
        Ok(Generated {
            completions: prompts
                .iter()
                .map(|p| Completion {
                    tokens: vec![p.len() as i64 % 7, 99],
                    logprobs: vec![-0.5, -0.25],
                    entropies: vec![1.0, 1.0],
                    truncated: false,
                    top: vec![],
                    aborted: false,
                })
                .collect(),
            version: 3,
        })
    }
}

/// Replies `[50, 51]` until the episode's budget of replies is spent.
struct Feedback;

impl Turns for Feedback {
    type State = usize;
    fn step(&self, left: &mut usize, _: &[i64], _: bool) -> Result<Option<Vec<i64>>> {
        if *left == 0 {
            return Ok(None);
        }
        *left -= 1;
        Ok(Some(vec![50, 51]))
    }
}

fn limits(max_turns: usize, max_tokens: usize) -> EpisodeLimits {
    EpisodeLimits {
        max_turns,
        max_tokens,
    }
}

#[test]
fn trajectories_are_exact_concatenations_with_a_loss_mask() {
    let engine = Echo(Mutex::new(vec![]));
    let prompts = vec![vec![1, 2], vec![1, 3, 4]];
    let mut states = vec![0usize, 5];
    let params = SamplingParams::default();
    let t = converse(
        &engine,
        &Feedback,
        &prompts,
        &mut states,
        &params,
        limits(3, 100),
        0,
    )
    .unwrap();
    // Episode 0 ends after one turn; episode 1 takes all three.
    assert_eq!((t[0].turns, t[1].turns), (1, 3));
    assert_eq!(t[0].tokens, vec![2, 99]);
    assert_eq!(t[1].tokens, vec![3, 99, 50, 51, 0, 99, 50, 51, 4, 99]);
    assert_eq!(
        t[1].trained,
        vec![true, true, false, false, true, true, false, false, true, true]
    );
    assert_eq!(t[1].logprobs[2..4], [0.0, 0.0]);
    assert_eq!(t[1].version, 3);
    // Each round's context is the previous context's ids plus the new ones, unchanged.
    let seen = engine.0.lock().unwrap().clone();
    assert_eq!(seen[2], vec![1, 3, 4, 3, 99, 50, 51]);
    assert_eq!(seen[3], vec![1, 3, 4, 3, 99, 50, 51, 0, 99, 50, 51]);
    // A token budget ends an episode before an observation would overflow it.
    let mut states = vec![5usize];
    let t = converse(
        &engine,
        &Feedback,
        &prompts[..1],
        &mut states,
        &params,
        limits(3, 5),
        0,
    )
    .unwrap();
    assert_eq!((t[0].turns, t[0].tokens.len()), (1, 2));
}
