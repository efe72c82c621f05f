//! The policy server's model: [`TorchGenerator`] implements reinforge-serve's `Generator` over
//! the KV-cache sampler. Weight loads replace the whole policy (a new one is loaded, then
//! swapped in), so a failed load leaves the old weights serving.

use std::path::{Path, PathBuf};

use anyhow::{ensure, Context, Result};
use reinforge_serve::policy::backend::{
    Batch, Generator, PromptScore, Sequence, StepControl, StepTokens,
};
use reinforge_torch::model::checkpoint::LoadOptions;
use reinforge_torch::model::logprobs::scored_positions;
use reinforge_torch::{generate_with, GenerateHooks, Policy};

use crate::convert;

/// A checkpoint served by the sampler.
pub struct TorchGenerator {
    policy: Policy,
    opts: LoadOptions,
    pad_id: i64,
    eos: Vec<i64>,
}

impl TorchGenerator {
    /// Loads `dir` with `opts`, folding in the LoRA adapter `lora` when given; `pad_id` and
    /// `eos` come from the checkpoint's tokenizer files.
    pub fn load(
        dir: &Path,
        lora: Option<&PathBuf>,
        opts: LoadOptions,
        pad_id: i64,
        eos: Vec<i64>,
    ) -> Result<Self> {
        let mut policy = Policy::load_with(dir, &opts)
            .with_context(|| format!("loading the model in {}", dir.display()))?;
        if let Some(adapter) = lora {
            policy
                .load_adapter(adapter)
                .with_context(|| format!("loading the LoRA adapter in {}", adapter.display()))?;
            policy.merge_lora()?;
        }
        Ok(Self {
            policy,
            opts,
            pad_id,
            eos,
        })
    }
}

impl TorchGenerator {
    /// With `prompt_logprobs`, every prompt token of the batch scored from the tokens before it
    /// (at the request's temperature; 1 for greedy requests), else nothing.
    fn prompt_scores(&self, batch: &Batch) -> Result<Vec<Vec<PromptScore>>> {
        let s = &batch.sampling;
        if s.prompt_logprobs == 0 {
            return Ok(vec![]);
        }
        let temperature = if s.temperature > 0.0 {
            s.temperature
        } else {
            1.0
        };
        batch
            .prompts
            .iter()
            .map(|p| {
                let scored = scored_positions(
                    &self.policy.model,
                    self.policy.device(),
                    p,
                    s.prompt_logprobs,
                    temperature,
                )?;
                Ok(scored
                    .into_iter()
                    .map(|x| PromptScore {
                        top: x.top,
                        actual: x.actual,
                    })
                    .collect())
            })
            .collect()
    }
}

impl Generator for TorchGenerator {
    fn generate(
        &mut self,
        batch: &Batch,
        on_step: &mut dyn FnMut(StepTokens) -> StepControl,
    ) -> Result<Vec<Sequence>> {
        let s = &batch.sampling;
        let params = convert::params(s);
        // The request's seed seeds torch as is (a trainer sends `seeds::torch_seed` of its
        // step seed, so the draw equals its local sampler's).
        if let Some(seed) = batch.seed {
            reinforge_torch::runtime::manual_seed(seed as i64);
        }
        // The sampler's step hook, translated to the server's types.
        let mut hook = |step: &[reinforge_torch::StepToken]| {
            let tokens: Vec<_> = step.iter().map(convert::step_token).collect();
            let c = on_step(&tokens);
            reinforge_torch::StepControl {
                stop: c.stop,
                admit: c.admit,
                end: vec![],
            }
        };
        let mut hooks = GenerateHooks {
            top_logprobs: s.top_logprobs,
            on_step: Some(&mut hook),
            row_rng: None,
        };
        let completions = generate_with(
            &self.policy.model,
            &batch.prompts,
            &params,
            self.pad_id,
            self.policy.device(),
            &mut hooks,
        );
        let scores = self.prompt_scores(batch)?;
        Ok(completions
            .into_iter()
            .enumerate()
            .map(|(i, c)| Sequence {
                prompt: scores.get(i).cloned().unwrap_or_default(),
                ..convert::sequence(c)
            })
            .collect())
    }

    fn load_weights(&mut self, dir: &Path) -> Result<()> {
        let new = Policy::load_with(dir, &self.opts)
            .with_context(|| format!("loading the weights in {}", dir.display()))?;
        ensure!(
            new.model.config() == self.policy.model.config(),
            "{}: config.json describes another model than the one served (weights can be replaced, not the architecture)",
            dir.display()
        );
        self.policy = new;
        Ok(())
    }

    fn checksum(&self) -> String {
        self.policy.weights_checksum()
    }

    fn max_model_len(&self) -> usize {
        self.policy.model.config().max_position_embeddings
    }

    fn vocab_size(&self) -> usize {
        self.policy.model.config().vocab_size
    }

    fn eos_token_ids(&self) -> Vec<i64> {
        self.eos.clone()
    }
}
