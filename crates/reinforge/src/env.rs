//! Environments: where a policy iteration's prompts and rewards come from. The GRPO-family
//! step ([`crate::grpo`]) only asks an environment for scored rollouts, so the built-in
//! arithmetic task and a user's dataset with a reward spec ([`crate::hf::train::DataEnv`]) run
//! through the same code.

use anyhow::Result;
use reinforge_tasks::{ArithTask, Split};
use reinforge_torch::Policy;

use crate::config::GrpoConfig;
use crate::rollout::{sample_and_score, sampling, Rollout};

/// A source of scored rollouts for training.
pub trait Environment {
    /// Draws `cfg.prompts_per_step` training prompts with `seed` and samples
    /// `cfg.num_generations` completions of each from `policy` (rows `i*g .. (i+1)*g` share
    /// prompt `i`), each scored. Sampling randomness comes from torch's generator, which the
    /// caller seeds. Fails when scoring cannot be done (a label the reward cannot use, a
    /// sandbox that stopped working), never for a wrong answer.
    fn draw(&self, policy: &Policy, seed: u64, cfg: &GrpoConfig) -> Result<Vec<Rollout>>;
}

impl Environment for ArithTask {
    fn draw(&self, policy: &Policy, seed: u64, cfg: &GrpoConfig) -> Result<Vec<Rollout>> {
        let problems = self.problems(seed, cfg.prompts_per_step, Split::Train);
        let mut params = sampling(
            cfg.temperature,
            cfg.top_p,
            cfg.top_k,
            cfg.max_completion_length,
        );
        if cfg.ignore_eos {
            params.stop_tokens.clear();
        }
        Ok(sample_and_score(
            policy,
            self,
            &problems,
            cfg.num_generations,
            &params,
            usize::MAX,
            policy.device(),
            |_| {},
        ))
    }
}
