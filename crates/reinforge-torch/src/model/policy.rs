//! A model together with the var store that owns its parameters, and its checkpoint files
//! (Hugging Face layout, see [`crate::model::checkpoint`]).

use std::collections::HashMap;
use std::path::Path;

use anyhow::{bail, ensure, Context, Result};
use tch::{nn::VarStore, Device, Kind, Tensor};

use crate::model::checkpoint::{self, config_json, LoadOptions, SaveOptions};
use crate::model::config::ModelConfig;
use crate::model::lora::{self, LoraConfig};
use crate::model::transformer::Transformer;

pub use crate::model::checkpoint::{CONFIG_FILE, WEIGHTS_FILE};

/// A causal LM and its parameters.
pub struct Policy {
    pub vs: VarStore,
    pub model: Transformer,
}

impl Policy {
    /// A randomly initialised float32 model on `device`; `seed` fixes the initial weights. A
    /// vision tower starts frozen ([`Self::set_vision_trainable`]).
    pub fn new(cfg: &ModelConfig, device: Device, seed: i64) -> Result<Self> {
        cfg.validate()?;
        let policy = crate::runtime::with_seed(seed, || {
            let vs = VarStore::new(device);
            let model = Transformer::new(&vs.root(), cfg);
            Self { vs, model }
        });
        policy.set_vision_trainable(false);
        Ok(policy)
    }

    /// Loads a checkpoint directory in float32 on `device` (what training and resuming need;
    /// use [`Self::load_with`] for bfloat16 inference). Strict about unknown config keys.
    pub fn load(dir: &Path, device: Device) -> Result<Self> {
        Self::load_with(dir, &LoadOptions::f32(device))
    }

    /// Loads `config.json` and the safetensors weights (single file or sharded index) of an HF
    /// checkpoint directory. Errors name the missing file, the unknown config key, or the
    /// tensor with its file and shapes.
    pub fn load_with(dir: &Path, opts: &LoadOptions) -> Result<Self> {
        opts.check()?;
        let cfg = config_json::read(
            &dir.join(checkpoint::CONFIG_FILE),
            opts.allow_unknown_config_keys,
        )?;
        let mut vs = VarStore::new(opts.device);
        vs.set_kind(opts.kind);
        let model = Transformer::new_for_loading(&vs.root(), &cfg);
        checkpoint::weights::load_into(dir, &vs.variables(), cfg.tie_word_embeddings)?;
        let policy = Self { vs, model };
        policy.set_vision_trainable(false);
        Ok(policy)
    }

    /// Whether the vision tower's parameters (`visual.*`) train. A loaded vision-language
    /// model's tower is frozen (TRL's and verl's default: the language model learns to read
    /// fixed image features); `true` trains it too. Nothing for a text-only model.
    pub fn set_vision_trainable(&self, on: bool) {
        for (name, t) in self.vs.variables() {
            if name.starts_with("visual.") {
                let _ = t.set_requires_grad(on);
            }
        }
    }

    /// Writes `config.json` and `model.safetensors` into `dir` (created if missing), in the
    /// parameters' dtype, sharded above 5 GB.
    pub fn save(&self, dir: &Path) -> Result<()> {
        self.save_with(dir, &SaveOptions::default())
    }

    /// Writes an HF checkpoint (config + weights) that transformers and vLLM load. Weight
    /// files of an earlier save in `dir` are replaced. Tokenizer files are not written here:
    /// see [`checkpoint::copy_aux_files`].
    pub fn save_with(&self, dir: &Path, opts: &SaveOptions) -> Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let kind = opts.kind.unwrap_or_else(|| self.kind());
        self.model.config().save(
            &dir.join(checkpoint::CONFIG_FILE),
            checkpoint::dtype_name(kind)?,
        )?;
        // With LoRA on, the full checkpoint holds the adapted model: adapters folded in.
        checkpoint::weights::save(dir, &self.full_weights(), kind, opts.max_shard_bytes)
    }

    /// A frozen copy (for the KL reference model).
    pub fn frozen_copy(&self) -> Result<Self> {
        let mut vs = VarStore::new(self.vs.device());
        // Zero-filled, not randomly initialised: no draw from torch's generator, which a
        // thread sampling at the same time (asynchronous rollouts) relies on.
        let model = Transformer::new_for_loading(&vs.root(), self.model.config());
        // The copy computes what this policy computes: adapters, if any, folded in.
        let source = self.full_weights();
        copy_params(&vs, &source).context("frozen copy")?;
        vs.freeze();
        Ok(Self { vs, model })
    }

    /// A frozen policy whose parameters are this policy's tensors, not copies: one base in
    /// memory under several LoRA models (the Tinker server's clients), each attaching its own
    /// adapters with [`Self::enable_lora`]. Nothing writes the shared weights afterwards
    /// (they are frozen, and the optimizer steps trainable tensors only); a policy with
    /// adapters attached is refused (its weights are not the base's).
    pub fn sharing_frozen_weights(&self) -> Result<Self> {
        ensure!(
            self.model.lora_config().is_none(),
            "a policy with LoRA adapters cannot lend its weights as a base"
        );
        let mut vs = VarStore::new(self.vs.device());
        // Zero-filled placeholders (no draw from torch's generator), replaced by the shared
        // tensors: `set_data` swaps each variable's storage, which the model's handles see.
        let model = Transformer::new_for_loading(&vs.root(), self.model.config());
        let source = self.vs.variables();
        let _guard = tch::no_grad_guard();
        for (name, mut t) in vs.variables() {
            let s = source
                .get(&name)
                .with_context(|| format!("no parameter `{name}` in the base"))?;
            t.set_data(s);
        }
        vs.freeze();
        Ok(Self { vs, model })
    }

    /// A [`SharedPolicy`] over this policy's own tensors (no copy): the Tinker server's
    /// sampling thread reads the base that its training models share
    /// ([`Self::sharing_frozen_weights`]); nothing writes those weights.
    pub fn shared_view(&self) -> Result<SharedPolicy> {
        Ok(SharedPolicy(self.sharing_frozen_weights()?))
    }

    /// A frozen copy that threads may share (a generator thread sampling from earlier
    /// weights while this policy trains).
    pub fn shared_copy(&self) -> Result<SharedPolicy> {
        Ok(SharedPolicy(self.frozen_copy()?))
    }

    /// The device the parameters live on.
    pub fn device(&self) -> Device {
        self.vs.device()
    }

    /// The parameters' dtype (that of the token embedding).
    pub fn kind(&self) -> Kind {
        self.vs
            .variables()
            .get("model.embed_tokens.weight")
            .map_or(self.vs.kind(), |t| t.kind())
    }

    /// Attaches fresh LoRA adapters (see [`crate::model::lora`]) to the projections `cfg` targets and
    /// freezes every base weight: afterwards only the adapters require gradients and only they
    /// are in `vs.trainable_variables()` (what [`crate::AdamW`] and gradient clipping see).
    /// The logits are unchanged until the adapters are trained (`B` starts at zero).
    pub fn enable_lora(&mut self, cfg: &LoraConfig) -> Result<()> {
        cfg.validate()?;
        ensure!(
            self.model.lora_config().is_none(),
            "LoRA adapters are already enabled on this policy"
        );
        {
            let mut vars = self.vs.variables_.lock().unwrap();
            for v in &vars.trainable_variables {
                let _ = v.tensor.set_requires_grad(false);
            }
            vars.trainable_variables.clear();
        }
        // The adapters' draws are one unit of the generator (a caller's `with_seed` holds it).
        crate::runtime::with_generator(|| self.model.add_lora(&self.vs.root(), cfg));
        Ok(())
    }

    /// Writes the adapters in PEFT's layout (`adapter_config.json` +
    /// `adapter_model.safetensors`, float32) into `dir`, created if missing.
    /// `base_model_name_or_path` is recorded for `AutoPeftModelForCausalLM` (the directory
    /// or Hub id the base weights come from).
    pub fn save_adapter(&self, dir: &Path, base_model_name_or_path: &str) -> Result<()> {
        let Some(cfg) = self.model.lora_config() else {
            bail!(
                "cannot save an adapter to {}: LoRA is not enabled",
                dir.display()
            );
        };
        lora::save(dir, cfg, base_model_name_or_path, &self.vs.variables())
    }

    /// Enables LoRA with the settings of `dir/adapter_config.json` and loads the adapter
    /// weights of `dir/adapter_model.safetensors` (written by [`Self::save_adapter`] or PEFT's
    /// `save_pretrained`) onto this base model. On a weights error the adapters stay attached
    /// with fresh values: reload the base before trying another adapter.
    pub fn load_adapter(&mut self, dir: &Path) -> Result<()> {
        let cfg = LoraConfig::from_peft_file(&dir.join(lora::ADAPTER_CONFIG_FILE))?;
        self.enable_lora(&cfg)?;
        lora::load_into(dir, &self.vs.variables())
    }

    /// Folds every adapter into its projection's weight (`W += alpha / r * B A`) and removes
    /// the adapters: the policy becomes a plain model again, every weight trainable, and
    /// [`Self::save`] writes the merged checkpoint.
    pub fn merge_lora(&mut self) -> Result<()> {
        ensure!(
            self.model.lora_config().is_some(),
            "cannot merge LoRA adapters: LoRA is not enabled"
        );
        // A fresh var store rather than edits of this one: tch cannot re-register a
        // variable as trainable, and a rebuilt policy is exactly what loading a merged
        // checkpoint gives.
        let mut vs = VarStore::new(self.device());
        vs.set_kind(self.kind());
        let model = Transformer::new_for_loading(&vs.root(), self.model.config());
        let source = self.full_weights();
        copy_params(&vs, &source).context("merging LoRA")?;
        self.vs = vs;
        self.model = model;
        Ok(())
    }

    /// Number of parameters that training updates (the adapters only, with LoRA on).
    pub fn trainable_parameters(&self) -> i64 {
        crate::model::transformer::num_parameters(&self.vs)
    }

    /// The parameters of the full model by HF name: the var store's, or with LoRA on, the
    /// base weights with the adapters folded in (and no adapter tensors).
    /// A checksum of the weights this policy computes with (LoRA adapters folded in):
    /// `xxh3-64:` and the hash of every tensor's name, dtype, shape and bytes, in name order.
    /// The trainer and a serving engine compare it after a weight push; equal checksums mean
    /// the same weights in the same dtype. xxh3 rather than a cryptographic hash: it guards
    /// against stale or partial loads, not adversaries, and hashes ~10 GB/s.
    pub fn weights_checksum(&self) -> String {
        let _guard = tch::no_grad_guard();
        let weights = self.full_weights();
        let mut names: Vec<&String> = weights.keys().collect();
        names.sort();
        use std::hash::Hasher;
        let mut h = twox_hash::XxHash3_64::with_seed(0);
        for name in names {
            // host: weights are checksummed from host memory.
            let t = weights[name].to_device(Device::Cpu).contiguous();
            h.write(name.as_bytes());
            h.write(format!("{:?}{:?}", t.kind(), t.size()).as_bytes());
            let bytes = t.numel() * t.kind().elt_size_in_bytes();
            let mut buf = vec![0u8; bytes];
            t.view_dtype(Kind::Uint8)
                .flatten(0, -1)
                .copy_data_u8(&mut buf, bytes);
            h.write(&buf);
        }
        format!("xxh3-64:{:016x}", h.finish())
    }

    pub(crate) fn full_weights(&self) -> HashMap<String, Tensor> {
        let mut params = self.vs.variables();
        if self.model.lora_config().is_some() {
            params.retain(|name, _| !lora::is_lora_param(name));
            params.extend(self.model.merged_weights());
        }
        params
    }
}

/// A frozen policy that can be shared between threads: its parameters are never written
/// after construction and no gradient is recorded through them, and libtorch's tensor reads
/// (and the atomic reference counts of its tensors) are safe from several threads. tch marks
/// every tensor `!Sync` because it cannot know a tensor is read-only; this type can.
pub struct SharedPolicy(Policy);

// SAFETY: the inner policy is only reachable through `&self` methods that read its
// parameters (forward passes under no_grad); nothing mutates them after `shared_copy`.
unsafe impl Sync for SharedPolicy {}
// SAFETY: as above; tch tensors are themselves `Send`.
unsafe impl Send for SharedPolicy {}

impl SharedPolicy {
    /// The model, for forward passes and sampling.
    pub fn model(&self) -> &Transformer {
        &self.0.model
    }

    /// The device the parameters live on.
    pub fn device(&self) -> Device {
        self.0.device()
    }
}

/// Copies `source[name]` into every variable of `vs`.
fn copy_params(vs: &VarStore, source: &HashMap<String, Tensor>) -> Result<()> {
    let _guard = tch::no_grad_guard();
    for (name, mut t) in vs.variables() {
        let s = source
            .get(&name)
            .with_context(|| format!("no parameter `{name}` in the source"))?;
        t.f_copy_(s)?;
    }
    Ok(())
}
