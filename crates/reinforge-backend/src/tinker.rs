//! The Tinker API on libtorch: [`TorchTinker`] implements reinforge-serve's `TinkerBackend`
//! over reinforge-torch's `train::tinker` (forward/backward with the built-in losses, AdamW
//! steps, LoRA, snapshots), and [`TinkerSampler`] the `Generator` of its sampling engine (the
//! KV-cache sampler over the base or a snapshot); this file maps the server's types onto those
//! functions and keeps the models by id.
//!
//! LoRA training models and the sampler share the base checkpoint's tensors (one copy in
//! memory); a full fine-tuning model loads its own copy, and each sampler snapshot is a copy
//! of its model's weights with the adapters folded in. The server bounds the models per
//! session (`tinker::Config::max_models_per_session`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use anyhow::{anyhow, ensure, Context, Result};
use reinforge_hf::HfTokenizer;
use reinforge_serve::policy::backend::{
    Batch, Finish, Generator, Sequence, StepControl, StepTokens,
};
use reinforge_serve::policy::text::StopWindow;
use reinforge_serve::tinker::backend::{
    AdamParams, Datum, ForwardOutput, Lora, LossFn, TinkerBackend,
};
use reinforge_torch::model::checkpoint::LoadOptions;
use reinforge_torch::train::tinker::{self as tt, TinkerModel};
use reinforge_torch::{generate_with, GenerateHooks, Policy, SharedPolicy};

use crate::convert;

/// Sampler snapshots by id, written by the training worker and read by the sampling engine's
/// thread.
type Snapshots = Arc<Mutex<HashMap<String, Arc<SharedPolicy>>>>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The Tinker backend over libtorch.
pub struct TorchTinker {
    base_dir: PathBuf,
    base_name: String,
    opts: LoadOptions,
    base: Policy,
    models: HashMap<String, TinkerModel>,
    snapshots: Snapshots,
    eos: Vec<i64>,
    /// The checkpoint's tokenizer (stop strings), when it has tokenizer files.
    tokenizer: Option<Arc<HfTokenizer>>,
    /// Tokens of one packed `forward_backward` pass (`--tinker-max-packed-tokens`; 0: no
    /// limit).
    pub max_packed_tokens: usize,
}

impl TorchTinker {
    /// Loads the base checkpoint `dir` (served as `base_name`) for sampling and as the weights
    /// every LoRA model shares; full fine-tuning models load their own copies.
    pub fn load(dir: &Path, base_name: String, opts: LoadOptions, eos: Vec<i64>) -> Result<Self> {
        let base = Policy::load_with(dir, &opts)
            .with_context(|| format!("loading the model in {}", dir.display()))?;
        let tokenizer = if dir.join("tokenizer.json").is_file() {
            Some(Arc::new(HfTokenizer::from_dir(dir).with_context(|| {
                format!("loading the tokenizer in {}", dir.display())
            })?))
        } else {
            None
        };
        Ok(Self {
            base_dir: dir.to_path_buf(),
            base_name,
            opts,
            base,
            models: HashMap::new(),
            snapshots: Snapshots::default(),
            eos,
            tokenizer,
            max_packed_tokens: 0,
        })
    }

    /// The sampling engine's generator: the base's own tensors (no copy) and the snapshots
    /// this backend takes.
    pub fn sampler(&self) -> Result<TinkerSampler> {
        Ok(TinkerSampler {
            base: Arc::new(self.base.shared_view()?),
            snapshots: self.snapshots.clone(),
            eos: self.eos.clone(),
            tokenizer: self.tokenizer.clone(),
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
        let budget = self.max_packed_tokens;
        let out = self
            .model(model_id)?
            .forward_backward(&data, loss(l), backward, budget);
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
        lock(&self.snapshots).insert(sampler_id.to_string(), Arc::new(copy));
        Ok(())
    }

    /// A snapshot being sampled from stays in memory until its batch ends.
    fn drop_model(&mut self, id: &str) {
        self.models.remove(id);
        lock(&self.snapshots).remove(id);
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

/// The generator of the Tinker sampling engine (reinforge-serve's `tinker::sampler`): decodes
/// a batch with the KV-cache sampler on the weights its key names (the base, or a snapshot
/// of [`TorchTinker`]), ends a row on a stop token or as soon as its text completes a stop
/// string, and seeds a seeded batch (which runs alone) under
/// `reinforge_torch::runtime::with_seed`, so it draws what the one-request path
/// (`reinforge_torch::train::tinker::sample`) draws.
pub struct TinkerSampler {
    base: Arc<SharedPolicy>,
    snapshots: Snapshots,
    eos: Vec<i64>,
    tokenizer: Option<Arc<HfTokenizer>>,
}

impl TinkerSampler {
    /// The weights `key` names.
    fn weights(&self, key: Option<&str>) -> Result<Arc<SharedPolicy>> {
        match key {
            None => Ok(self.base.clone()),
            Some(id) => lock(&self.snapshots)
                .get(id)
                .cloned()
                .ok_or_else(|| anyhow!("snapshot `{id}` is no longer held")),
        }
    }
}

impl Generator for TinkerSampler {
    fn generate(
        &mut self,
        batch: &Batch,
        on_step: &mut dyn FnMut(StepTokens) -> StepControl,
    ) -> Result<Vec<Sequence>> {
        let s = &batch.sampling;
        let policy = self.weights(s.weights.as_deref())?;
        let params = convert::params(s);
        ensure!(
            s.stop_strings.is_empty() || self.tokenizer.is_some(),
            "stop strings need the checkpoint's tokenizer"
        );
        let mut stops = StopWindow::new(self.tokenizer.as_deref(), &s.stop_strings);
        let mut hook = |step: &[reinforge_torch::StepToken]| {
            let mut end = vec![];
            let tokens: Vec<_> = step
                .iter()
                .map(|t| {
                    let mut token = convert::step_token(t);
                    if token.end != Some(Finish::Stop) && stops.completes(t.row, t.token) {
                        token.end = Some(Finish::Stop);
                        end.push(t.row);
                    }
                    token
                })
                .collect();
            let c = on_step(&tokens);
            reinforge_torch::StepControl {
                stop: c.stop,
                admit: c.admit,
                end,
            }
        };
        let mut hooks = GenerateHooks {
            top_logprobs: 0,
            on_step: Some(&mut hook),
            row_rng: None,
        };
        // Pad id 0 as the one-request path (padding is masked; only rows of different
        // prompt lengths have any).
        let mut run = || {
            generate_with(
                policy.model(),
                &batch.prompts,
                &params,
                0,
                policy.device(),
                &mut hooks,
            )
        };
        let completions = match batch.seed {
            Some(seed) => reinforge_torch::runtime::with_seed(seed as i64, run),
            None => run(),
        };
        // No top log-probs (`top_logprobs: 0`) and no prompt scores on this engine.
        Ok(completions.into_iter().map(convert::sequence).collect())
    }

    /// Snapshots come from the training worker, not from disk.
    fn load_weights(&mut self, dir: &Path) -> Result<()> {
        Err(anyhow!(
            "the Tinker sampler loads no weights ({}): snapshots come from save_weights_for_sampler",
            dir.display()
        ))
    }

    /// Not computed: each request names its weights (the base or a snapshot).
    fn checksum(&self) -> String {
        "per-request weights".into()
    }

    fn max_model_len(&self) -> usize {
        self.base.model().config().max_position_embeddings
    }

    fn vocab_size(&self) -> usize {
        self.base.model().config().vocab_size
    }

    fn eos_token_ids(&self) -> Vec<i64> {
        self.eos.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reinforge_serve::policy::Sampling;
    use reinforge_torch::SamplingParams;

    fn fixture() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/hf/models/llama")
    }

    fn sampler() -> (TorchTinker, TinkerSampler) {
        let opts = LoadOptions::for_device(reinforge_torch::Device::Cpu);
        let backend = TorchTinker::load(&fixture(), "llama".into(), opts, vec![]).unwrap();
        let sampler = backend.sampler().unwrap();
        (backend, sampler)
    }

    fn sampling(temperature: f64, max_tokens: usize, stop_strings: Vec<String>) -> Sampling {
        Sampling {
            temperature,
            top_p: 1.0,
            top_k: 0,
            max_tokens,
            stop_token_ids: vec![],
            top_logprobs: 0,
            prompt_logprobs: 0,
            weights: None,
            stop_strings,
        }
    }

    /// Decodes `batch`, counting the decoding steps.
    fn decode(s: &mut TinkerSampler, batch: &Batch) -> (Vec<Sequence>, usize) {
        let mut steps = 0;
        let rows = s
            .generate(batch, &mut |_| {
                steps += 1;
                StepControl::default()
            })
            .unwrap();
        (rows, steps)
    }

    /// The first `k` such that the text of `ids[..k]` contains one of `stops`: where a stop
    /// string ends a row (the old path cut the finished row there).
    fn first_stop(tok: &HfTokenizer, ids: &[i64], stops: &[String]) -> Option<usize> {
        (1..=ids.len()).find(|&k| {
            let v: Vec<u32> = ids[..k].iter().map(|&t| t as u32).collect();
            let text = tok.decode(&v, false).unwrap();
            stops.iter().any(|s| text.contains(s.as_str()))
        })
    }

    /// A seeded batch (the engine runs it alone) draws the tokens and log-probs of the
    /// one-request path with the same seed, on the base's shared tensors.
    #[test]
    fn seeded_batches_draw_what_the_one_request_path_draws() {
        let (backend, mut s) = sampler();
        let prompt = vec![1i64, 17, 42, 99];
        let batch = Batch {
            prompts: vec![prompt.clone(); 4],
            sampling: sampling(1.0, 8, vec![]),
            seed: Some(7),
        };
        let (rows, _) = decode(&mut s, &batch);
        let params = SamplingParams {
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            max_new_tokens: 8,
            stop_tokens: vec![],
        };
        let want = tt::sample(&backend.base, &prompt, 4, &params, Some(7));
        assert_eq!(rows.len(), 4);
        for (r, w) in rows.iter().zip(&want) {
            assert_eq!(r.tokens, w.tokens);
            assert_eq!(r.logprobs, w.logprobs);
        }
        assert_ne!(
            rows[0].tokens, rows[1].tokens,
            "the rows are distinct draws"
        );
        // Unseeded and greedy (deterministic), beside a prompt of another length in the batch
        // (left padding): each row decodes what the one-request path decodes for its prompt
        // alone.
        let other = vec![1i64, 200, 201];
        let greedy = Batch {
            prompts: vec![prompt.clone(), prompt.clone(), other.clone()],
            sampling: sampling(0.0, 8, vec![]),
            seed: None,
        };
        let (rows, _) = decode(&mut s, &greedy);
        let params = SamplingParams {
            temperature: 0.0,
            ..params
        };
        for (r, p) in rows.iter().zip([&prompt, &prompt, &other]) {
            let want = tt::sample(&backend.base, p, 1, &params, None).remove(0);
            assert_eq!(r.tokens, want.tokens);
            for (a, b) in r.logprobs.iter().zip(&want.logprobs) {
                assert!((a - b).abs() < 1e-4, "{a} vs {b}");
            }
        }
    }

    /// A stop string ends its row on the completing token: that many decoding steps, not
    /// `max_tokens`, and the tokens before it are those drawn without the stop string.
    #[test]
    fn a_stop_string_ends_the_row_early() {
        let (_backend, mut s) = sampler();
        let tok = HfTokenizer::from_dir(fixture()).unwrap();
        let prompt = vec![1i64, 5, 6, 7];
        let max_tokens = 16;
        let greedy = |stops: Vec<String>| Batch {
            prompts: vec![prompt.clone()],
            sampling: sampling(0.0, max_tokens, stops),
            seed: None,
        };
        let (free, steps) = decode(&mut s, &greedy(vec![]));
        assert_eq!((free[0].tokens.len(), steps), (max_tokens, max_tokens));
        // The text of the first few tokens as the stop string: found early.
        let text = |k: usize| {
            let v: Vec<u32> = free[0].tokens[..k].iter().map(|&t| t as u32).collect();
            tok.decode(&v, false).unwrap()
        };
        let k = (3..max_tokens)
            .find(|&k| !text(k).trim().is_empty())
            .unwrap();
        let stops = vec![text(k)];
        let end = first_stop(&tok, &free[0].tokens, &stops).unwrap();
        assert!(end <= k);
        let (cut, steps) = decode(&mut s, &greedy(stops));
        assert_eq!(steps, end, "decoding stopped at the stop string");
        assert_eq!(cut[0].tokens, free[0].tokens[..end]);
        assert_eq!(cut[0].logprobs, free[0].logprobs[..end]);
        assert_eq!(cut[0].finish, Finish::Stop);
        assert_eq!(free[0].finish, Finish::Length);
    }
}
