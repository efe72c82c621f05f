//! Where rollouts are generated. An [`Engine`] turns token-id prompts into completions with
//! log-probs and names the weight version that produced them; environments call it (once
//! per step for single-turn tasks, once per turn for multi-turn ones). Engines:
//! - [`local::LocalEngine`]: the trainer's own KV-cache sampler on the weights being trained;
//! - [`local::Snapshots`]: frozen copies of earlier weights, for asynchronous training in
//!   this process;
//! - [`openai::RemoteEngines`]: OpenAI-compatible servers (`reinforge serve --model`, vLLM,
//!   SGLang) that get the trainer's weights pushed after every update ([`push`]).
//!
//! `rl::drive` picks the engine for a run and generates the next steps' rollouts while the
//! current step trains (`rollout.max_staleness`).

pub mod local;
pub mod openai;
pub mod push;

use std::sync::{Condvar, Mutex};
use std::time::Duration;

use anyhow::{bail, Result};
use reinforge_torch::model::images::Image;
use reinforge_torch::{Completion, SamplingParams};

/// Completions and the weight version that generated them (the trainer's RL step count
/// when those weights were current).
#[derive(Debug, Clone)]
pub struct Generated {
    pub completions: Vec<Completion>,
    pub version: u64,
}

/// Something that samples completions of token-id prompts.
pub trait Engine {
    /// One completion per row of `prompts` (rows of one prompt are consecutive), sampled with
    /// `params`; `seed` makes the draw reproducible on the same engine and weights.
    fn generate(
        &self,
        prompts: &[Vec<i64>],
        params: &SamplingParams,
        seed: u64,
    ) -> Result<Generated>;

    /// [`Self::generate`] for a vision-language policy: `images[i]` are the images prompt
    /// `i`'s placeholders hold, in order. Only the trainer's own engines take images (a dataset
    /// run refuses remote engines with image rows before its first step).
    fn generate_with_images(
        &self,
        prompts: &[Vec<i64>],
        images: &[Vec<Image>],
        params: &SamplingParams,
        seed: u64,
    ) -> Result<Generated> {
        let _ = (prompts, images, params, seed);
        bail!("this rollout engine does not take images: they are sampled in the trainer's process")
    }

    /// The rows of an `n`-row batch this engine really samples; the others come back as
    /// empty placeholders (a data-parallel rank samples only its share). Callers skip scoring
    /// the placeholders. Every row by default.
    fn drawn_rows(&self, n: usize) -> std::ops::Range<usize> {
        0..n
    }
}

/// What a weight push cost (one per step with a remote engine).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PushStats {
    /// Writing the weights plus every engine loading and confirming them.
    pub seconds: f64,
    /// Bytes of weight files written.
    pub bytes: u64,
}

/// Waits on `changed` until `ready` finds what it needs in the guarded value, rechecking
/// `stopped()` every 100 ms (the trainer may end the run while a generator thread waits).
pub fn wait_until<T, R>(
    value: &Mutex<T>,
    changed: &Condvar,
    stopped: &dyn Fn() -> bool,
    mut ready: impl FnMut(&T) -> Option<R>,
) -> Result<R> {
    let mut guard = value.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if let Some(r) = ready(&guard) {
            return Ok(r);
        }
        if stopped() {
            bail!("training stopped");
        }
        guard = changed
            .wait_timeout(guard, Duration::from_millis(100))
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}
