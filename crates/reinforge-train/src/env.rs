//! Environments: where a policy iteration's prompts and rewards come from. The RL step
//! ([`crate::rl`]) only asks an environment for scored rollouts, and the environment adds
//! what is particular to its task: per-step metrics, files saved with each checkpoint, the
//! pad id and the longest prompt (for the position check before training). The arithmetic
//! task (reinforge-recipes' `arith::env::ArithEnv`) and a user's dataset with a reward spec
//! (the binary's `hf::data_env::DataEnv`) run through the same trainer.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use reinforge_torch::model::images::Image;
use reinforge_torch::SamplingParams;

use crate::config::RlConfig;
use crate::rollout::Engine;

/// One scored completion, task-neutral.
#[derive(Debug, Clone)]
pub struct Rollout {
    /// Prompt ids, `<bos>` (or the template's first token) included.
    pub prompt: Vec<i64>,
    /// Completion ids (the stop token included when one was sampled).
    pub tokens: Vec<i64>,
    /// The sampler's log-prob of each completion token.
    pub logprobs: Vec<f32>,
    /// Entropy of the sampling distribution at each completion token.
    pub entropies: Vec<f32>,
    /// Cut at `max_completion_length`.
    pub truncated: bool,
    /// Which of `tokens` the policy produced; the others (a multi-turn environment's replies,
    /// tool results) are context, not trained on. `None`: all of them.
    pub trained: Option<Vec<bool>>,
    /// The weight version that generated the completion (the oldest, over a conversation's
    /// turns): the trainer's RL step count when those weights were current.
    pub version: u64,
    /// The environment's reward, before the trainer's shaping.
    pub score: f64,
    /// An environment-defined class of the completion (the arithmetic task: its solution
    /// pattern), for the environment's metrics.
    pub label: Option<&'static str>,
    /// What the reward-hacking monitor reads of it ([`crate::rl::integrity`]).
    pub audit: Audit,
    /// The images the prompt's placeholders hold, in order (vision-language prompts; handles
    /// on the environment's tensors, nothing copied).
    pub images: Vec<Image>,
}

/// What the reward-hacking monitor reads of one scored completion.
#[derive(Debug, Clone, Default)]
pub struct Audit {
    /// Whether the reward's verifier credited it; `None` when no verifier judged it (a
    /// learned reward alone).
    pub credited: Option<bool>,
    /// The credited answer occurs in the prompt as a whole (`reinforge_reward::integrity::occurs_in`).
    pub answer_in_prompt: bool,
    /// The credited answer, as written.
    pub answer: Option<String>,
    /// Prompt and completion text, kept only when the monitor flags the completion
    /// (credited, and its answer in the prompt or cut at the length limit).
    pub texts: Option<(String, String)>,
}

impl Audit {
    /// The audit of a completion the verifier judged `credited`, with the `answer` it read.
    pub fn of(
        credited: Option<bool>,
        answer: Option<String>,
        prompt: &str,
        completion: &str,
        truncated: bool,
    ) -> Self {
        let credited_answer = answer.filter(|_| credited == Some(true));
        let answer_in_prompt = credited_answer
            .as_deref()
            .is_some_and(|a| reinforge_reward::integrity::occurs_in(a, prompt));
        let flagged = credited == Some(true) && (answer_in_prompt || truncated);
        Self {
            credited,
            answer_in_prompt,
            answer: credited_answer,
            texts: flagged.then(|| (prompt.to_string(), completion.to_string())),
        }
    }
}

/// A canary (a known-wrong completion of one of the run's prompts) scored by the run's reward.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoredCanary {
    pub kind: reinforge_reward::integrity::CanaryKind,
    pub prompt: String,
    pub response: String,
    pub reward: f64,
    /// The reward's verifier credited it (or, without a verifier, the reward exceeded the
    /// empty completion's).
    pub credited: bool,
}

/// Per-step metrics an environment adds to `metrics.jsonl` (key -> value).
pub type EnvMetrics = BTreeMap<String, f64>;

/// A source of scored rollouts for training. `Sync`: with `rollout.max_staleness > 0` a
/// generator thread draws from it while the trainer reads its metrics.
pub trait Environment: Sync {
    /// Draws `cfg.prompts_per_step` training prompts with `seed` and samples
    /// `cfg.num_generations` completions of each from `engine` (rows `i*g .. (i+1)*g` share
    /// prompt `i`), each scored; `seed` also seeds the engine. Fails when sampling or scoring
    /// cannot be done (an engine that stopped answering, a label the reward cannot use, a
    /// sandbox that stopped working), never for a wrong answer.
    fn draw(&self, engine: &dyn Engine, seed: u64, cfg: &RlConfig) -> Result<Vec<Rollout>>;

    /// The environment's metrics of one step's rollouts (none by default).
    fn metrics(&self, _rollouts: &[Rollout]) -> EnvMetrics {
        EnvMetrics::new()
    }

    /// The canaries of `prompts` of the prompts `seed` draws, scored by the environment's own
    /// reward (the monitor's `integrity/canary_credited`). None by default.
    fn canaries(&self, _seed: u64, _prompts: usize) -> Result<Vec<ScoredCanary>> {
        Ok(vec![])
    }

    /// Writes the files a checkpoint needs besides the weights (a tokenizer) into `dir`.
    fn save_files(&self, _dir: &Path) -> Result<()> {
        Ok(())
    }

    /// Token id that pads packed batches.
    fn pad_id(&self) -> i64;

    /// Tokens of the longest prompt the environment can draw, `<bos>` included.
    fn max_prompt_len(&self) -> usize;

    /// What the prompts are, for errors ("a 3-digit problem", "data.jsonl row 7").
    fn describe_longest_prompt(&self) -> String;
}

/// Sampling parameters of a training step: `cfg`'s temperature, top-p/k and completion length,
/// stopping at `stop` (no stop with `ignore_eos`).
pub fn sampling_params(cfg: &RlConfig, stop: Vec<i64>) -> SamplingParams {
    SamplingParams {
        temperature: cfg.temperature,
        top_p: cfg.top_p,
        top_k: cfg.top_k,
        max_new_tokens: cfg.max_completion_length,
        stop_tokens: if cfg.ignore_eos { vec![] } else { stop },
    }
}

/// Share of `rollouts` with each label in `labels`, as `{prefix}/{label}_share`.
pub fn label_shares(rollouts: &[Rollout], prefix: &str, labels: &[&str]) -> EnvMetrics {
    let n = rollouts.len() as f64;
    labels
        .iter()
        .map(|l| {
            let count = rollouts.iter().filter(|r| r.label == Some(*l)).count();
            (format!("{prefix}/{l}_share"), count as f64 / n)
        })
        .collect()
}
