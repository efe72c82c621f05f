//! The generator behind the OpenAI-compatible policy routes: token ids in, token ids and
//! log-probs out. The `reinforge` binary implements [`Generator`] over reinforge-torch's
//! KV-cache sampler (`reinforge serve --model DIR`); this crate stays free of libtorch and its
//! tests drive the routes with a scripted generator.
//!
//! Threading: one worker thread owns the generator (a model is not shared across threads), so
//! batches, weight loads and checksums never interleave: a load happens between two batches,
//! and a batch runs entirely on one set of weights.

use std::path::Path;

/// How to sample one batch (vLLM's `SamplingParams`, at the token level).
#[derive(Debug, Clone, PartialEq)]
pub struct Sampling {
    /// Softmax temperature; 0 means greedy.
    pub temperature: f64,
    /// Nucleus sampling (1 = off).
    pub top_p: f64,
    /// Keep the `top_k` most likely tokens (0 = off; OpenAI/vLLM's -1 maps to 0).
    pub top_k: i64,
    /// New tokens at most.
    pub max_tokens: usize,
    /// Ids that end a sequence (kept as its last token). The request's `stop_token_ids` plus,
    /// unless `ignore_eos`, the model's EOS ids.
    pub stop_token_ids: Vec<i64>,
    /// Alternatives reported per position (OpenAI `logprobs: k` / `top_logprobs: k`); 0 = none.
    pub top_logprobs: usize,
    /// Score every prompt token with its `k` most likely alternatives (vLLM's
    /// `prompt_logprobs: k`, what a distillation teacher serves); 0 = none.
    pub prompt_logprobs: usize,
    /// Which weights decode: `None` the loaded ones; `Some(key)` the weights the generator
    /// holds under `key` (the Tinker sampler's snapshots). Part of the batching-compatibility
    /// check (the engine batches only equal `Sampling`s), so requests for different weights
    /// never share a batch, as vLLM's multi-LoRA serving keys a request by its adapter.
    pub weights: Option<String>,
    /// Strings that end a row on the token completing one in the decoded text (the token is
    /// kept), for generators that hold the tokenizer (the Tinker sampler). The OpenAI routes
    /// leave it empty: they match their stop strings on the text afterwards ([`super::text`]).
    pub stop_strings: Vec<String>,
}

/// One prompt token scored given the tokens before it (vLLM's `prompt_logprobs` entry): the
/// most likely `(id, log-prob, rank)` alternatives, most likely first, and the actual token's
/// (rank 1 = most likely). Log-probs are under the temperature-scaled distribution, like the
/// sampled tokens' (temperature 0 scores at temperature 1).
#[derive(Debug, Clone, PartialEq)]
pub struct PromptScore {
    pub top: Vec<(i64, f32, usize)>,
    pub actual: (i64, f32, usize),
}

/// One decoding batch. A request with `n > 1` contributes `n` consecutive rows of the same
/// prompt (so the rows of one prompt are prefilled once).
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    pub prompts: Vec<Vec<i64>>,
    pub sampling: Sampling,
    /// Seeds the sampler before the batch runs. A seeded request runs as a batch of its own,
    /// so the same request with the same seed on the same weights gives the same tokens.
    pub seed: Option<u64>,
}

/// One decoded row.
#[derive(Debug, Clone, PartialEq)]
pub struct Sequence {
    /// New token ids (the stop token included when one ended the row).
    pub tokens: Vec<i64>,
    /// Log-prob of each token under the temperature-scaled distribution, before top-k/top-p
    /// filtering (what the trainer recomputes; vLLM's `logprobs_mode="processed_logits"`
    /// minus the filtering).
    pub logprobs: Vec<f32>,
    /// Per position, the `top_logprobs` most likely `(id, log-prob)` pairs, most likely first
    /// (empty when not asked for).
    pub top: Vec<Vec<(i64, f32)>>,
    /// With `prompt_logprobs`, the prompt's tokens after the first, scored (empty otherwise).
    pub prompt: Vec<PromptScore>,
    /// Why the row ended.
    pub finish: Finish,
}

/// Why a row ended (OpenAI's `finish_reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// A stop token.
    Stop,
    /// `max_tokens`.
    Length,
    /// The batch was aborted (pause with `mode = "abort"`, shutdown).
    Abort,
}

/// One row's token of a decoding step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepToken {
    /// Row index: the batch's prompts first, then admitted prompts in admission order.
    pub row: usize,
    pub token: i64,
    pub logprob: f32,
    /// `Some` when this token ends the row ([`Finish::Stop`] or [`Finish::Length`]).
    pub end: Option<Finish>,
}

/// Tokens of one decoding step: every row that produced one.
pub type StepTokens<'a> = &'a [StepToken];

/// The caller's decision after a step.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepControl {
    /// Stop the batch now: every unfinished row ends with [`Finish::Abort`].
    pub stop: bool,
    /// Continuous batching: prompts that join the running batch, each with its own
    /// `max_tokens` (prefilled, then decoded from the next step with the batch's other
    /// sampling options) as the next row indices.
    pub admit: Vec<(Vec<i64>, usize)>,
}

/// A model that decodes batches of token ids.
pub trait Generator: Send + 'static {
    /// Decodes `batch`. After every decoding step `on_step` gets that step's tokens and
    /// answers with a [`StepControl`]: stop, or admit more prompts into the running batch
    /// (step-level continuous batching). Returns one [`Sequence`] per row: `batch.prompts` in
    /// order, then the admitted prompts in admission order.
    fn generate(
        &mut self,
        batch: &Batch,
        on_step: &mut dyn FnMut(StepTokens) -> StepControl,
    ) -> anyhow::Result<Vec<Sequence>>;

    /// Replaces the weights with those of the Hugging Face checkpoint directory `dir`
    /// (config.json + safetensors, the shapes of the loaded model). On error the old weights
    /// stay in place, unchanged.
    fn load_weights(&mut self, dir: &Path) -> anyhow::Result<()>;

    /// A checksum of the weights in memory, the same function the trainer applies to its own
    /// (`reinforge_torch::Policy::weights_checksum`): equal checksums mean equal weights.
    fn checksum(&self) -> String;

    /// The longest prompt plus completion the model has positions for.
    fn max_model_len(&self) -> usize;

    /// Token ids are `0..vocab_size`.
    fn vocab_size(&self) -> usize;

    /// Ids that end a sequence by default (generation_config's and the tokenizer's EOS).
    fn eos_token_ids(&self) -> Vec<i64>;
}
