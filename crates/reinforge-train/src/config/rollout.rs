//! `[rollout]`: where RL rollouts are generated (the trainer's sampler or OpenAI-compatible
//! engines), weight pushes and asynchrony.

use serde::{Deserialize, Serialize};

/// The engine that generates RL rollouts (`[rollout]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    /// The trainer's own KV-cache sampler, on the weights being trained.
    #[default]
    Local,
    /// One or more OpenAI-compatible servers (`reinforge serve --model`, vLLM, SGLang) that
    /// take token-id prompts, return token ids and log-probs, and load pushed weights.
    Openai,
}

/// Where the local engine's sampling randomness comes from (`rollout.rng`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RolloutRng {
    /// torch's generator, seeded per step, over the whole batch (multinomial draws).
    #[default]
    Batch,
    /// Noise keyed by (step seed, global row, position) (Gumbel-max draws): a row samples the
    /// same tokens whichever rows share its batch, so data-parallel ranks reproduce one
    /// process. Data-parallel runs always use it; set it on a single process to compare.
    PerRow,
}

/// `[rollout]`: the generation engine, weight pushes and asynchrony (names follow verl's
/// `actor_rollout_ref.rollout.*` and prime-rl's `async_level` where they exist).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RolloutConfig {
    pub engine: EngineKind,
    /// Base URLs of the engines (`engine = "openai"`), e.g. `["http://127.0.0.1:8001"]`.
    /// Prompt groups are split evenly across them.
    pub base_urls: Vec<String>,
    /// The served model name sent in requests ("" = the first name `/v1/models` lists).
    pub model: String,
    /// Seconds one engine request may take before it is retried.
    pub timeout_s: f64,
    /// Retries of a failed engine request (connection refused, 5xx, timeout) before the step
    /// fails; the run can then be resumed from its last checkpoint.
    pub retries: usize,
    /// Directory the trainer writes pushed weights to, which every engine must be able to read
    /// (SGLang's `update_weights_from_disk` semantics). "" = `<run>/rollout_weights`.
    pub weights_dir: String,
    /// Generate the next batches while the current one trains: a batch generated with weights
    /// `k` updates older than the ones being trained is allowed, older ones are dropped and
    /// drawn again (prime-rl's `async_level`). 0 = synchronous.
    pub max_staleness: usize,
    /// Sampling randomness of the local engine.
    pub rng: RolloutRng,
    /// The engines' API key, sent as `Authorization: Bearer KEY` (`reinforge serve --api-key`,
    /// vLLM's and SGLang's `--api-key`). "" = the REINFORGE_API_KEY environment variable, if set
    /// (prefer it: the run directory keeps a copy of this config).
    pub api_key: String,
    /// The engines' admin key for weight loads (`reinforge serve --admin-key`). "" = the
    /// REINFORGE_ADMIN_KEY environment variable, else the API key.
    pub admin_key: String,
}

impl Default for RolloutConfig {
    fn default() -> Self {
        Self {
            engine: EngineKind::Local,
            base_urls: vec![],
            model: String::new(),
            timeout_s: 600.0,
            retries: 3,
            weights_dir: String::new(),
            max_staleness: 0,
            rng: RolloutRng::Batch,
            api_key: String::new(),
            admin_key: String::new(),
        }
    }
}
