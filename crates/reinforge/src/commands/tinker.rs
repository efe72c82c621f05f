//! `reinforge serve --model DIR --tinker`: [`TorchTinker`] implements reinforge-serve's
//! `TinkerBackend` over reinforge-torch's `tinker` module (forward/backward with the built-in
//! losses, AdamW steps, LoRA, snapshots, the KV-cache sampler); this file maps the server's
//! types onto those functions and keeps the models by id.
//!
//! Each training model loads its own copy of the base checkpoint (LoRA adapters on it, or
//! every weight trainable); sampling from the base uses one more copy. Memory therefore grows
//! with the models held, which `--tinker-max-models` bounds per session.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};
use clap::Args;
use reinforge_hf::HfTokenizer;
use reinforge_serve::tinker::backend::{
    AdamParams, Datum, ForwardOutput, Lora, LossFn, Sampled, Sampling, TinkerBackend, Weights,
};
use reinforge_torch::checkpoint::LoadOptions;
use reinforge_torch::tinker::{self as tt, TinkerModel};
use reinforge_torch::{Policy, SamplingParams};

/// The Tinker flags of `reinforge serve`.
#[derive(Args, Debug, Clone)]
pub struct TinkerArgs {
    /// Also serve the Tinker training API (the `tinker` SDK's routes under /api/v1; base_url
    /// http://HOST:PORT) on --model: clients create LoRA or full training models on it, run
    /// forward_backward and optim_step, save weights and sample. docs/tinker.md.
    #[arg(long, requires = "model")]
    pub tinker: bool,
    /// Where the Tinker API writes checkpoints (tinker://<model_id>/weights/<name> is
    /// <DIR>/<model_id>/weights/<name>).
    #[arg(long, value_name = "DIR", default_value = "runs/tinker")]
    pub tinker_dir: PathBuf,
    /// Training models one Tinker session may hold at once (each is a copy of the base model).
    #[arg(long, default_value_t = 4, value_parser = super::args::count)]
    pub tinker_max_models: usize,
    /// Requests one Tinker session may have queued at once (more are answered 429, which the
    /// SDK retries).
    #[arg(long, default_value_t = 256, value_parser = super::args::count)]
    pub tinker_max_pending: usize,
}

impl TinkerArgs {
    /// The server's Tinker configuration for the model named `base_model`.
    pub fn config(&self, base_model: String) -> reinforge_serve::tinker::Config {
        reinforge_serve::tinker::Config {
            base_model,
            checkpoint_dir: self.tinker_dir.clone(),
            max_models_per_session: self.tinker_max_models,
            max_pending_per_session: self.tinker_max_pending,
            max_snapshots_per_model: 4,
            session_timeout: std::time::Duration::from_secs(300),
        }
    }
}

/// The Tinker backend over libtorch.
pub struct TorchTinker {
    base_dir: PathBuf,
    base_name: String,
    opts: LoadOptions,
    base: Policy,
    models: HashMap<String, TinkerModel>,
    snapshots: HashMap<String, Policy>,
    eos: Vec<i64>,
    /// The checkpoint's tokenizer (stop strings), when it has tokenizer files.
    tokenizer: Option<HfTokenizer>,
}

impl TorchTinker {
    /// Loads the base checkpoint `dir` (served as `base_name`) for sampling and as the weights
    /// every LoRA model shares; full fine-tuning models load their own copies.
    pub fn load(dir: &Path, base_name: String, opts: LoadOptions, eos: Vec<i64>) -> Result<Self> {
        let base = Policy::load_with(dir, &opts)
            .with_context(|| format!("loading the model in {}", dir.display()))?;
        let tokenizer = if dir.join("tokenizer.json").is_file() {
            Some(
                HfTokenizer::from_dir(dir)
                    .with_context(|| format!("loading the tokenizer in {}", dir.display()))?,
            )
        } else {
            None
        };
        Ok(Self {
            base_dir: dir.to_path_buf(),
            base_name,
            opts,
            base,
            models: HashMap::new(),
            snapshots: HashMap::new(),
            eos,
            tokenizer,
        })
    }

    fn model(&mut self, id: &str) -> Result<&mut TinkerModel> {
        self.models
            .get_mut(id)
            .ok_or_else(|| anyhow!("no model `{id}` on the worker"))
    }
}

/// The server's loss as reinforge-torch's.
fn loss(l: LossFn) -> tt::Loss {
    match l {
        LossFn::CrossEntropy => tt::Loss::CrossEntropy,
        LossFn::ImportanceSampling => tt::Loss::ImportanceSampling,
        LossFn::Ppo { low, high } => tt::Loss::Ppo { low, high },
    }
}

/// The server's datum as reinforge-torch's.
fn datum(d: &Datum) -> tt::Datum {
    tt::Datum {
        input: d.input.clone(),
        targets: d.targets.clone(),
        weights: d.weights.clone(),
        sampling_logprobs: d.logprobs.clone(),
        advantages: d.advantages.clone(),
    }
}

impl TinkerBackend for TorchTinker {
    fn create_model(&mut self, model_id: &str, lora: Option<&Lora>) -> Result<()> {
        let cfg = lora.map(|l| tt::lora_config(l.rank, l.train_attn, l.train_mlp));
        // An unseeded adapter still needs a seed; the id's hash keeps models distinct.
        let seed = lora.and_then(|l| l.seed).map_or_else(
            || {
                use std::hash::{Hash, Hasher};
                let mut h = std::collections::hash_map::DefaultHasher::new();
                model_id.hash(&mut h);
                h.finish() as i64 & i64::MAX
            },
            |s| s as i64,
        );
        let m = match &cfg {
            Some(cfg) => TinkerModel::create_lora(&self.base, cfg, seed)?,
            None => TinkerModel::create_full(&self.base_dir, &self.opts)?,
        };
        self.models.insert(model_id.to_string(), m);
        Ok(())
    }

    fn forward_backward(
        &mut self,
        model_id: &str,
        data: &[Datum],
        l: LossFn,
        backward: bool,
    ) -> Result<ForwardOutput> {
        let data: Vec<tt::Datum> = data.iter().map(datum).collect();
        let out = self
            .model(model_id)?
            .forward_backward(&data, loss(l), backward);
        Ok(ForwardOutput {
            logprobs: out.logprobs,
            loss_sum: out.loss_sum,
        })
    }

    fn optim_step(&mut self, model_id: &str, a: &AdamParams) -> Result<Vec<(String, f64)>> {
        let step = self.model(model_id)?.optim_step(&tt::AdamStep {
            learning_rate: a.learning_rate,
            beta1: a.beta1,
            beta2: a.beta2,
            eps: a.eps,
            weight_decay: a.weight_decay,
            grad_clip_norm: a.grad_clip_norm,
        });
        Ok(vec![
            ("grad_norm".into(), step.grad_norm),
            ("skipped".into(), if step.stepped { 0.0 } else { 1.0 }),
        ])
    }

    fn save(&mut self, model_id: &str, dir: &Path, optimizer: bool) -> Result<()> {
        let name = self.base_name.clone();
        self.model(model_id)?.save(dir, &name, optimizer)?;
        // The tokenizer files, so `reinforge score` and transformers read the checkpoint.
        reinforge_torch::copy_aux_files(&self.base_dir, dir)?;
        Ok(())
    }

    fn load(&mut self, model_id: &str, dir: &Path, optimizer: bool) -> Result<()> {
        let model = self
            .models
            .get_mut(model_id)
            .ok_or_else(|| anyhow!("no model `{model_id}` on the worker"))?;
        model.load(&self.base, &self.opts, dir, optimizer)
    }

    fn snapshot(&mut self, model_id: &str, sampler_id: &str) -> Result<()> {
        let copy = self.model(model_id)?.snapshot()?;
        self.snapshots.insert(sampler_id.to_string(), copy);
        Ok(())
    }

    fn drop_model(&mut self, id: &str) {
        self.models.remove(id);
        self.snapshots.remove(id);
    }

    fn sample(
        &mut self,
        weights: &Weights,
        prompt: &[i64],
        n: usize,
        s: &Sampling,
    ) -> Result<Vec<Sampled>> {
        let policy = match weights {
            Weights::Base => &self.base,
            Weights::Snapshot(id) => self
                .snapshots
                .get(id)
                .ok_or_else(|| anyhow!("snapshot `{id}` is no longer held"))?,
        };
        let params = SamplingParams {
            temperature: s.temperature,
            top_p: s.top_p,
            top_k: s.top_k,
            max_new_tokens: s.max_tokens,
            stop_tokens: s.stop_tokens.clone(),
        };
        let mut out: Vec<Sampled> =
            tt::sample(policy, prompt, n, &params, s.seed.map(|x| x as i64))
                .into_iter()
                .map(|x| Sampled {
                    tokens: x.tokens,
                    logprobs: x.logprobs,
                    stopped: x.stopped,
                })
                .collect();
        if !s.stop_strings.is_empty() {
            let tok = self
                .tokenizer
                .as_ref()
                .ok_or_else(|| anyhow!("stop strings need the checkpoint's tokenizer"))?;
            for seq in &mut out {
                if let Some(end) = stop_string_end(tok, &seq.tokens, &s.stop_strings)? {
                    seq.tokens.truncate(end);
                    seq.logprobs.truncate(end);
                    seq.stopped = true;
                }
            }
        }
        Ok(out)
    }

    fn max_context(&self) -> usize {
        self.base.model.config().max_position_embeddings
    }

    fn vocab_size(&self) -> usize {
        self.base.model.config().vocab_size
    }

    fn eos_token_ids(&self) -> Vec<i64> {
        self.eos.clone()
    }

    fn decodes_text(&self) -> bool {
        self.tokenizer.is_some()
    }
}

/// The length of the shortest prefix of `tokens` whose text contains one of `stops` (the
/// sequence then ends with the token that completed it), or `None` when none occurs. The
/// sampler draws up to `max_tokens` first; cutting afterwards gives the same sequences as
/// stopping early, the draws being left to right.
fn stop_string_end(tok: &HfTokenizer, tokens: &[i64], stops: &[String]) -> Result<Option<usize>> {
    let ids: Vec<u32> = tokens.iter().map(|&t| t as u32).collect();
    let hit = |k: usize| -> Result<bool> {
        let text = tok.decode(&ids[..k], false)?;
        Ok(stops.iter().any(|s| text.contains(s.as_str())))
    };
    if !hit(ids.len())? {
        return Ok(None);
    }
    for k in 1..ids.len() {
        if hit(k)? {
            return Ok(Some(k));
        }
    }
    Ok(Some(ids.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cut falls on the token that completes the stop string, whatever the tokenizer
    /// splits it into; no stop string, no cut.
    #[test]
    fn stop_strings_cut_after_the_completing_token() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/hf/models/llama");
        let tok = HfTokenizer::from_dir(&dir).unwrap();
        let ids: Vec<i64> = tok
            .encode("The answer is 9\n\nUser: what next", false)
            .unwrap()
            .into_iter()
            .map(i64::from)
            .collect();
        let text = |k: usize| {
            let v: Vec<u32> = ids[..k].iter().map(|&t| t as u32).collect();
            tok.decode(&v, false).unwrap()
        };
        let stops = vec!["\n\nUser:".to_string()];
        let end = stop_string_end(&tok, &ids, &stops).unwrap().unwrap();
        assert!(text(end).contains("\n\nUser:"), "{:?}", text(end));
        assert!(!text(end - 1).contains("\n\nUser:"), "{:?}", text(end - 1));
        assert!(end < ids.len());
        let none = vec!["Assistant:".to_string()];
        assert_eq!(stop_string_end(&tok, &ids, &none).unwrap(), None);
    }
}
