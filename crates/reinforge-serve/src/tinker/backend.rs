//! The model behind the Tinker routes: token ids and numbers in, numbers out. The `reinforge`
//! binary implements [`TinkerBackend`] over reinforge-torch (`reinforge serve --model DIR
//! --tinker`); this crate stays free of libtorch, as with the policy routes' `Generator`
//! ([`crate::policy::backend`]).
//!
//! Threading: one worker thread owns the backend and runs the queued training requests one at
//! a time in the order they arrived (the SDK submits a training client's requests in order,
//! each after the previous one was accepted), so a `forward_backward` is done before the
//! `optim_step` sent after it, and a checkpoint sees every step sent before it. Sampling does
//! not queue here: it runs on its own thread, the sampling engine ([`super::sampler`]).
//!
//! The request has been checked before it reaches the backend (ids, lengths, the loss's
//! inputs: [`super::check`]); an error from it fails the request's future (category
//! `server`), never the worker.

use std::path::Path;

use anyhow::Result;

/// One training example (the SDK's `Datum`, text chunks only).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Datum {
    /// `model_input`'s tokens, every chunk concatenated.
    pub input: Vec<i64>,
    /// `loss_fn_inputs.target_tokens`: one per input position.
    pub targets: Vec<i64>,
    /// `loss_fn_inputs.weights`; empty means 1.
    pub weights: Vec<f32>,
    /// `loss_fn_inputs.logprobs`: the sampler's log-probs of the targets.
    pub logprobs: Vec<f32>,
    /// `loss_fn_inputs.advantages`.
    pub advantages: Vec<f32>,
}

/// A built-in loss (`loss_fn`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LossFn {
    CrossEntropy,
    ImportanceSampling,
    /// `loss_fn_config`'s `clip_low_threshold` and `clip_high_threshold` (0.8, 1.2 unset).
    Ppo {
        low: f64,
        high: f64,
    },
}

/// The loss names served, in the order errors list them.
pub const LOSS_NAMES: &[&str] = &["cross_entropy", "importance_sampling", "ppo"];

/// What `forward`/`forward_backward` returns.
#[derive(Debug, Clone, PartialEq)]
pub struct ForwardOutput {
    /// Per datum, the log-prob of each target.
    pub logprobs: Vec<Vec<f32>>,
    /// `loss:sum`.
    pub loss_sum: f64,
}

/// The SDK's `AdamParams`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Deserialize)]
pub struct AdamParams {
    #[serde(default = "defaults::lr")]
    pub learning_rate: f64,
    #[serde(default = "defaults::beta1")]
    pub beta1: f64,
    #[serde(default = "defaults::beta2")]
    pub beta2: f64,
    #[serde(default = "defaults::eps")]
    pub eps: f64,
    #[serde(default)]
    pub weight_decay: f64,
    #[serde(default)]
    pub grad_clip_norm: f64,
}

/// The SDK's defaults (`tinker/types/optimizer.py`).
mod defaults {
    pub fn lr() -> f64 {
        1e-4
    }
    pub fn beta1() -> f64 {
        0.9
    }
    pub fn beta2() -> f64 {
        0.95
    }
    pub fn eps() -> f64 {
        1e-12
    }
}

/// LoRA of `create_model` (`LoraConfig`).
#[derive(Debug, Clone, PartialEq)]
pub struct Lora {
    pub rank: usize,
    pub seed: Option<u64>,
    pub train_attn: bool,
    pub train_mlp: bool,
}

/// Which weights a sampling session samples from.
#[derive(Debug, Clone, PartialEq)]
pub enum Weights {
    /// The base checkpoint the server was started with.
    Base,
    /// A snapshot taken by `save_weights_for_sampler` (its sampler id).
    Snapshot(String),
}

impl Weights {
    /// The sampling engine's weights key ([`crate::policy::Sampling::weights`]): `None` for
    /// the base, the snapshot's id otherwise.
    pub fn key(&self) -> Option<String> {
        match self {
            Weights::Base => None,
            Weights::Snapshot(id) => Some(id.clone()),
        }
    }
}

/// Training on the served base model (sampling runs on the sampling engine, [`super::sampler`]).
pub trait TinkerBackend: Send + 'static {
    /// Creates the training model `model_id` on the base: LoRA adapters, or every weight
    /// trainable without `lora`.
    fn create_model(&mut self, model_id: &str, lora: Option<&Lora>) -> Result<()>;
    /// Log-probs and loss of `data`; with `backward`, also accumulates the gradients.
    fn forward_backward(
        &mut self,
        model_id: &str,
        data: &[Datum],
        loss: LossFn,
        backward: bool,
    ) -> Result<ForwardOutput>;
    /// Applies and clears the accumulated gradients; returns metrics (`grad_norm`, ...).
    fn optim_step(&mut self, model_id: &str, adam: &AdamParams) -> Result<Vec<(String, f64)>>;
    /// Writes the model's weights (and adapter) into `dir`, with `optimizer` also the
    /// optimizer's state (`save_state`; `save_weights_for_sampler` writes weights only).
    fn save(&mut self, model_id: &str, dir: &Path, optimizer: bool) -> Result<()>;
    /// Replaces the model's weights with those `save` wrote into `dir`; with `optimizer`
    /// also the optimizer's state (an error when `dir` has none), else the optimizer restarts.
    fn load(&mut self, model_id: &str, dir: &Path, optimizer: bool) -> Result<()>;
    /// Keeps a copy of the model's current weights as `sampler_id`, where the sampling
    /// engine's generator finds it (the key of [`Weights::key`]).
    fn snapshot(&mut self, model_id: &str, sampler_id: &str) -> Result<()>;
    /// Frees a training model or a snapshot (a closed session's, an evicted snapshot); an
    /// unknown id is ignored.
    fn drop_model(&mut self, id: &str);
    /// The context length of the base model.
    fn max_context(&self) -> usize;
    /// Token ids are `0..vocab_size`.
    fn vocab_size(&self) -> usize;
    /// The model's EOS ids (sampling stops on them unless the request's `stop` says otherwise).
    fn eos_token_ids(&self) -> Vec<i64>;
    /// Whether the backend has the model's tokenizer to honour stop strings (a checkpoint
    /// without tokenizer files takes stop token ids only).
    fn decodes_text(&self) -> bool {
        false
    }
}
