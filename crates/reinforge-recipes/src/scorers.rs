//! The learned reward components of a reward spec: a reward model behind `type = "model"`
//! ([`RmScorer`]) and an LLM judge behind `type = "judge"` (`crate::judge`), loaded by
//! [`load_scorer`] for [`reinforge_reward::Reward::with_models`].

use std::sync::{Arc, Mutex};

use anyhow::{bail, Context, Result};
use reinforge_hf::HfTokenizer;
use reinforge_reward::{Learned, ModelScorer, ModelSpec};
use reinforge_torch::{LoadOptions, RewardModel};

/// A reward model behind a reward spec's `type = "model"` component: the prompt text (already
/// rendered by the policy's chat template) and the response are tokenised by the reward
/// model's own tokenizer, joined and ended with its EOS, then scored in one batch.
pub struct RmScorer {
    /// libtorch modules are not `Sync`; one forward pass at a time.
    rm: Mutex<RewardModel>,
    tokenizer: HfTokenizer,
    eos: Option<i64>,
    raw: bool,
}

impl RmScorer {
    /// Loads the reward model of `spec` (float32, CPU).
    pub fn load(spec: &ModelSpec) -> Result<Self> {
        // host: reward-model components score on the CPU, beside the trainer.
        let rm = RewardModel::load(&spec.path, &LoadOptions::f32(reinforge_torch::Device::Cpu))
            .with_context(|| format!("loading the reward model in {}", spec.path.display()))?;
        let tokenizer = HfTokenizer::from_dir(&spec.path)
            .with_context(|| format!("loading the tokenizer in {}", spec.path.display()))?;
        Ok(Self {
            rm: Mutex::new(rm),
            eos: tokenizer.eos_token_id().map(i64::from),
            tokenizer,
            raw: spec.raw,
        })
    }

    fn ids(&self, prompt: &str, response: &str) -> Result<Vec<i64>> {
        let mut ids: Vec<i64> = self
            .tokenizer
            .encode(prompt, self.raw)?
            .into_iter()
            .map(i64::from)
            .collect();
        ids.extend(
            self.tokenizer
                .encode(response, false)?
                .into_iter()
                .map(i64::from),
        );
        // OpenRLHF's queries keep the response's EOS text: add it only when missing.
        if ids.last().copied() != self.eos {
            ids.extend(self.eos);
        }
        Ok(ids)
    }
}

// SAFETY: the model sits behind a mutex, so its tensors are used by one thread at a time;
// tch tensors are `Send`.
unsafe impl Sync for RmScorer {}

impl ModelScorer for RmScorer {
    fn score(&self, prompts: &[&str], responses: &[&str]) -> Result<Vec<f64>> {
        let seqs = prompts
            .iter()
            .zip(responses)
            .map(|(p, r)| self.ids(p, r))
            .collect::<Result<Vec<_>>>()?;
        let rm = self
            .rm
            .lock()
            .map_err(|_| anyhow::anyhow!("reward model lock poisoned"))?;
        let max = rm.policy.model.config().max_position_embeddings;
        if let Some(long) = seqs.iter().find(|s| s.len() > max) {
            bail!(
                "a sample has {} tokens, more than the reward model's {max} positions",
                long.len()
            );
        }
        let scores = rm.score_rows(&seqs)?;
        Ok(scores.into_iter().map(f64::from).collect())
    }
}

/// The loader of learned components (`type = "model"` and `type = "judge"`), for
/// [`reinforge_reward::Reward::with_models`].
pub fn load_scorer(_name: &str, spec: Learned) -> Result<Arc<dyn ModelScorer>> {
    match spec {
        Learned::Model(m) => Ok(Arc::new(RmScorer::load(m)?)),
        Learned::Judge(j) => crate::judge::load_scorer(j),
    }
}
