//! LoRA adapters on the transformer's linear projections, saved in PEFT's layout.
//!
//! An adapted projection computes `y = W x (+ b) + (alpha / r) * B (A x)` with `A: [r, in]`
//! drawn like PEFT's default (`kaiming_uniform_(a = sqrt(5))`, i.e. `U(-1/sqrt(in),
//! 1/sqrt(in))`) and `B: [out, r]` zero, so a fresh adapter leaves the model unchanged
//! (PEFT 0.21.2 `tuners/lora/layer.py`, `LoraLayer.reset_lora_parameters` and `Linear.forward`).
//!
//! Adapter parameters live in the policy's var store under PEFT's module names
//! (`model.layers.0.self_attn.q_proj.lora_A.weight`), so the adapter file is the var store's
//! LoRA tensors with PEFT's `base_model.model.` prefix (`get_peft_model_state_dict`, PEFT
//! 0.21.2 `utils/save_and_load.py`). Entry points: [`crate::Policy::enable_lora`],
//! [`crate::Policy::save_adapter`], [`crate::Policy::load_adapter`],
//! [`crate::Policy::merge_lora`].

use std::collections::HashMap;
use std::path::Path;

use anyhow::{anyhow, bail, ensure, Context, Result};
use safetensors::tensor::{Dtype, SafeTensors, View};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tch::nn::{Init, Path as VarPath};
use tch::{Kind, Tensor};

/// File name of PEFT's adapter configuration (`CONFIG_NAME`).
pub const ADAPTER_CONFIG_FILE: &str = "adapter_config.json";
/// File name of PEFT's adapter weights (`SAFETENSORS_WEIGHTS_NAME`).
pub const ADAPTER_WEIGHTS_FILE: &str = "adapter_model.safetensors";
/// Prefix PEFT puts before the base model's parameter names in the adapter file
/// (`PeftModelForCausalLM.base_model` = `LoraModel`, whose `.model` is the HF model).
pub const PEFT_PREFIX: &str = "base_model.model.";
/// Projections that can carry an adapter, by their HF module names.
pub const TARGET_MODULES: &[&str] = &[
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
];

/// LoRA settings (PEFT's names where they differ: `alpha` is `lora_alpha`, `dropout` is
/// `lora_dropout`). Held by the trainer's TOML under `[lora]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoraConfig {
    /// Rank of the update `B A`.
    pub r: usize,
    /// The update is scaled by `alpha / r`.
    pub alpha: f64,
    /// Module names to adapt, from [`TARGET_MODULES`].
    pub target_modules: Vec<String>,
    /// Dropout on the adapter input; only 0 is supported (a training step must be a pure
    /// function of the weights for the log-prob recomputation to match the rollout's).
    #[serde(default)]
    pub dropout: f64,
}

impl LoraConfig {
    /// Checks rank, alpha, dropout and module names; errors name the field.
    pub fn validate(&self) -> Result<()> {
        ensure!(self.r > 0, "lora.r must be at least 1, got {}", self.r);
        ensure!(
            self.alpha.is_finite() && self.alpha > 0.0,
            "lora.alpha must be a positive number, got {}",
            self.alpha
        );
        ensure!(
            self.dropout == 0.0,
            "lora.dropout = {} is not supported: only 0 (no dropout) is",
            self.dropout
        );
        ensure!(
            !self.target_modules.is_empty(),
            "lora.target_modules is empty: name at least one of {TARGET_MODULES:?}"
        );
        for (i, m) in self.target_modules.iter().enumerate() {
            ensure!(
                TARGET_MODULES.contains(&m.as_str()),
                "lora.target_modules[{i}] = {m:?} is not a known projection; expected one of {TARGET_MODULES:?}"
            );
            ensure!(
                !self.target_modules[..i].contains(m),
                "lora.target_modules lists {m:?} twice"
            );
        }
        Ok(())
    }

    /// The factor `alpha / r` of the update.
    pub fn scaling(&self) -> f64 {
        self.alpha / self.r as f64
    }

    /// Whether the projection named `module` (`q_proj`, ...) is adapted.
    pub fn targets(&self, module: &str) -> bool {
        self.target_modules.iter().any(|m| m == module)
    }

    /// PEFT 0.21.2's `adapter_config.json` for these settings. Keys PEFT fills with its
    /// defaults are written where they change behaviour (bias, DoRA, rsLoRA, fan_in_fan_out).
    pub fn peft_json(&self, base_model_name_or_path: &str) -> Value {
        // PEFT types lora_alpha as int; write an integer when it is one.
        let alpha = if self.alpha.fract() == 0.0 && self.alpha.abs() < 1e15 {
            json!(self.alpha as i64)
        } else {
            json!(self.alpha)
        };
        json!({
            "peft_type": "LORA",
            "task_type": "CAUSAL_LM",
            "base_model_name_or_path": base_model_name_or_path,
            "r": self.r,
            "lora_alpha": alpha,
            "lora_dropout": self.dropout,
            "target_modules": self.target_modules,
            "bias": "none",
            "fan_in_fan_out": false,
            "use_rslora": false,
            "use_dora": false,
            "lora_bias": false,
            "init_lora_weights": true,
            "inference_mode": true,
            "modules_to_save": null,
            "layers_to_transform": null,
            "layers_pattern": null,
            "rank_pattern": {},
            "alpha_pattern": {},
        })
    }

    /// Reads PEFT's `adapter_config.json`, refusing settings this crate does not implement
    /// (other PEFT types, biases, DoRA, rsLoRA, per-layer ranks, transposed weights).
    pub fn from_peft_file(path: &Path) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let v: Value =
            serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        let field = |k: &str| v.get(k).filter(|x| !x.is_null());
        let at = path.display();
        let expect = |k: &str, want: Value| -> Result<()> {
            match field(k) {
                Some(x) if *x != want => {
                    bail!("{at}: `{k}` = {x} is not supported (expected {want})")
                }
                _ => Ok(()),
            }
        };
        expect("peft_type", json!("LORA"))?;
        expect("bias", json!("none"))?;
        expect("fan_in_fan_out", json!(false))?;
        expect("use_rslora", json!(false))?;
        expect("use_dora", json!(false))?;
        expect("lora_bias", json!(false))?;
        for k in ["rank_pattern", "alpha_pattern"] {
            if field(k).is_some_and(|x| x.as_object().is_some_and(|o| !o.is_empty())) {
                bail!("{at}: `{k}` (per-module ranks or alphas) is not supported");
            }
        }
        for k in [
            "modules_to_save",
            "layers_to_transform",
            "target_parameters",
        ] {
            if field(k).is_some() {
                bail!("{at}: `{k}` is not supported");
            }
        }
        let num = |k: &str| -> Result<f64> {
            field(k)
                .and_then(Value::as_f64)
                .ok_or_else(|| anyhow!("{at}: `{k}` is missing or not a number"))
        };
        let target_modules = match field("target_modules") {
            Some(Value::Array(a)) => a
                .iter()
                .map(|m| {
                    m.as_str()
                        .map(String::from)
                        .ok_or_else(|| anyhow!("{at}: `target_modules` holds a non-string {m}"))
                })
                .collect::<Result<Vec<_>>>()?,
            other => bail!(
                "{at}: `target_modules` must be a list of module names, got {}",
                other.map_or("nothing".into(), |x| x.to_string())
            ),
        };
        let cfg = Self {
            r: num("r")? as usize,
            alpha: num("lora_alpha")?,
            target_modules,
            dropout: field("lora_dropout").and_then(Value::as_f64).unwrap_or(0.0),
        };
        cfg.validate().with_context(|| format!("{at}"))?;
        Ok(cfg)
    }
}

/// The LoRA pair of one projection: `A: [r, in]`, `B: [out, r]` and the scale `alpha / r`.
#[derive(Debug)]
pub(crate) struct Adapter {
    pub(crate) a: Tensor,
    pub(crate) b: Tensor,
    pub(crate) scaling: f64,
}

impl Adapter {
    /// Creates `lora_A.weight` / `lora_B.weight` under `p` (the projection's path) in the var
    /// store's dtype, initialised as PEFT's `init_lora_weights=True`.
    pub(crate) fn new(p: &VarPath, inp: usize, out: usize, cfg: &LoraConfig) -> Self {
        // kaiming_uniform_(a=sqrt(5)) on [r, in]: gain sqrt(2 / (1 + 5)), bound
        // gain * sqrt(3 / fan_in) = 1 / sqrt(in).
        let bound = 1.0 / (inp as f64).sqrt();
        let r = cfg.r as i64;
        let a = (p / "lora_A").var(
            "weight",
            &[r, inp as i64],
            Init::Uniform {
                lo: -bound,
                up: bound,
            },
        );
        let b = (p / "lora_B").var("weight", &[out as i64, r], Init::Const(0.0));
        Self {
            a,
            b,
            scaling: cfg.scaling(),
        }
    }

    /// The adapter's output `scaling * B (A x)` for inputs `[.., in]`.
    pub(crate) fn forward(&self, x: &Tensor) -> Tensor {
        x.linear::<Tensor>(&self.a, None)
            .linear::<Tensor>(&self.b, None)
            * self.scaling
    }

    /// The dense update `scaling * B A` `[out, in]` (PEFT `Linear.get_delta_weight`).
    pub(crate) fn delta(&self) -> Tensor {
        self.b.matmul(&self.a) * self.scaling
    }
}

/// Whether a var-store name is a LoRA parameter.
pub fn is_lora_param(name: &str) -> bool {
    name.contains(".lora_A.") || name.contains(".lora_B.")
}

/// Writes `adapter_config.json` and `adapter_model.safetensors` (LoRA tensors of `params`,
/// PEFT-prefixed, with `{"format": "pt"}` metadata) into `dir`, created if missing.
pub(crate) fn save(
    dir: &Path,
    cfg: &LoraConfig,
    base_model_name_or_path: &str,
    params: &HashMap<String, Tensor>,
) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let config_path = dir.join(ADAPTER_CONFIG_FILE);
    let text = serde_json::to_string_pretty(&cfg.peft_json(base_model_name_or_path))? + "\n";
    std::fs::write(&config_path, text)
        .with_context(|| format!("writing {}", config_path.display()))?;
    let mut named: Vec<(String, Tensor)> = params
        .iter()
        .filter(|(n, _)| is_lora_param(n))
        .map(|(n, t)| (format!("{PEFT_PREFIX}{n}"), t.shallow_clone()))
        .collect();
    ensure!(
        !named.is_empty(),
        "the model has no LoRA parameters to save"
    );
    named.sort_by(|a, b| a.0.cmp(&b.0));
    write_safetensors(&dir.join(ADAPTER_WEIGHTS_FILE), &named)
}

/// One float32 tensor's bytes for the safetensors writer.
struct F32Bytes {
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl View for &F32Bytes {
    fn dtype(&self) -> Dtype {
        Dtype::F32
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> std::borrow::Cow<'_, [u8]> {
        std::borrow::Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

/// Writes `named` as float32 safetensors with the `{"format": "pt"}` metadata PEFT and
/// transformers write (tch's writer omits metadata). Adapters are small, and PEFT keeps them
/// in float32 too (`autocast_adapter_dtype`).
fn write_safetensors(path: &Path, named: &[(String, Tensor)]) -> Result<()> {
    let bytes = named
        .iter()
        .map(|(name, t)| {
            let t = t
                // host: adapters are written to disk from host memory.
                .to_device(tch::Device::Cpu)
                .to_kind(Kind::Float)
                .contiguous();
            let numel = t.numel();
            let mut data = vec![0u8; numel * 4];
            t.f_copy_data_u8(&mut data, numel)?;
            let shape = t.size().iter().map(|&d| d as usize).collect();
            Ok((name.as_str(), F32Bytes { shape, data }))
        })
        .collect::<Result<Vec<_>>>()?;
    let metadata = Some(HashMap::from([("format".to_string(), "pt".to_string())]));
    safetensors::tensor::serialize_to_file(bytes.iter().map(|(n, b)| (*n, b)), &metadata, path)
        .map_err(|e| anyhow!("writing {}: {e:?}", path.display()))
}

/// Copies the tensors of `dir/adapter_model.safetensors` into the LoRA parameters of
/// `params`; every adapter parameter must be present with its shape, and nothing else.
pub(crate) fn load_into(dir: &Path, params: &HashMap<String, Tensor>) -> Result<()> {
    let path = dir.join(ADAPTER_WEIGHTS_FILE);
    let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    let st = SafeTensors::deserialize(&bytes)
        .map_err(|e| anyhow!("reading safetensors {}: {e:?}", path.display()))?;
    let _guard = tch::no_grad_guard();
    let mut seen = 0usize;
    let mut tensors = st.tensors();
    // Sorted, so the first error reported is always the same one.
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    for (key, view) in tensors {
        let name = key.strip_prefix(PEFT_PREFIX).ok_or_else(|| {
            anyhow!(
                "tensor `{key}` in {} lacks PEFT's `{PEFT_PREFIX}` prefix",
                path.display()
            )
        })?;
        let param = params
            .get(name)
            .filter(|_| is_lora_param(name))
            .ok_or_else(|| {
                anyhow!(
                    "unexpected tensor `{key}` in {}: no such LoRA parameter (check target_modules in {ADAPTER_CONFIG_FILE})",
                    path.display()
                )
            })?;
        let shape: Vec<i64> = view.shape().iter().map(|&d| d as i64).collect();
        ensure!(
            shape == param.size(),
            "tensor `{key}` in {} has shape {shape:?}, expected {:?} (check r in {ADAPTER_CONFIG_FILE})",
            path.display(),
            param.size()
        );
        let kind = match view.dtype() {
            Dtype::F32 => Kind::Float,
            Dtype::BF16 => Kind::BFloat16,
            Dtype::F16 => Kind::Half,
            Dtype::F64 => Kind::Double,
            other => bail!("tensor `{key}` in {} has dtype {other:?}", path.display()),
        };
        let src = Tensor::f_from_data_size(view.data(), &shape, kind)?;
        param.shallow_clone().f_copy_(&src)?;
        seen += 1;
    }
    let expected = params.keys().filter(|n| is_lora_param(n)).count();
    ensure!(
        seen == expected,
        "{} holds {seen} LoRA tensors, the model has {expected}",
        path.display()
    );
    Ok(())
}
