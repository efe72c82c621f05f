//! Hugging Face checkpoint directories: `config.json` + safetensors weights (single file or
//! sharded with an index), read from and written in the layout transformers and vLLM load.
//!
//! Entry points are [`crate::Policy::load_with`] / [`crate::Policy::save_with`] with
//! [`LoadOptions`] / [`SaveOptions`]; [`copy_aux_files`] carries a source model's tokenizer and
//! generation files over to a trained checkpoint.

pub mod config_json;
pub mod weights;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use tch::{Device, Kind};

pub use weights::{INDEX_FILE, WEIGHTS_FILE};

/// File name of the model configuration inside a checkpoint directory.
pub const CONFIG_FILE: &str = "config.json";

/// Default shard limit when saving: 5 GB (transformers 4.x's default `max_shard_size`; 5.x
/// uses 50GB). Smaller files upload and download more robustly and stay under the Hub's
/// recommended file size; vLLM reads either.
pub const DEFAULT_MAX_SHARD_BYTES: u64 = 5_000_000_000;

/// Files of a model directory that are not weights or `config.json` but belong with them:
/// tokenizer, chat template, generation defaults and (vision-language) the image processor's
/// settings.
pub const AUX_FILES: &[&str] = &[
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
    "chat_template.json",
    "generation_config.json",
    "preprocessor_config.json",
];

/// How to load a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoadOptions {
    pub device: Device,
    /// Compute (and parameter) dtype: `Float`, `BFloat16` or `Half`. Stored weights of any
    /// of these dtypes are converted.
    pub kind: Kind,
    /// Keep unknown `config.json` keys (written back on save) instead of failing on them.
    pub allow_unknown_config_keys: bool,
}

impl LoadOptions {
    /// The usual inference choice for `device`: float32 on CPU, bfloat16 on CUDA/MPS.
    pub fn for_device(device: Device) -> Self {
        let kind = match device {
            // host: the inference dtype for CPU.
            Device::Cpu => Kind::Float,
            _ => Kind::BFloat16,
        };
        Self {
            device,
            kind,
            allow_unknown_config_keys: false,
        }
    }

    /// float32 on `device`: what training (AdamW on full-precision weights) needs.
    pub fn f32(device: Device) -> Self {
        Self {
            kind: Kind::Float,
            ..Self::for_device(device)
        }
    }

    /// Checks that `kind` is a floating dtype the model runs in.
    pub(crate) fn check(&self) -> Result<()> {
        if !matches!(
            self.kind,
            Kind::Float | Kind::BFloat16 | Kind::Half | Kind::Double
        ) {
            bail!("unsupported compute dtype {:?}", self.kind);
        }
        Ok(())
    }
}

/// How to save a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SaveOptions {
    /// Dtype of the written weights; `None` keeps the parameters' dtype.
    pub kind: Option<Kind>,
    /// Shard the weights above this many bytes per file.
    pub max_shard_bytes: u64,
}

impl Default for SaveOptions {
    fn default() -> Self {
        Self {
            kind: None,
            max_shard_bytes: DEFAULT_MAX_SHARD_BYTES,
        }
    }
}

/// transformers' name of a dtype (`torch_dtype` in `config.json`).
pub fn dtype_name(kind: Kind) -> Result<&'static str> {
    Ok(match kind {
        Kind::Float => "float32",
        Kind::BFloat16 => "bfloat16",
        Kind::Half => "float16",
        Kind::Double => "float64",
        other => bail!("no transformers dtype name for {other:?}"),
    })
}

/// Copies the tokenizer, chat template and generation files ([`AUX_FILES`]) that exist in
/// `src` into `dst` (created if missing), so a trained checkpoint is usable on its own.
/// Returns the copied paths.
pub fn copy_aux_files(src: &Path, dst: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dst).with_context(|| format!("creating {}", dst.display()))?;
    let mut copied = Vec::new();
    for name in AUX_FILES {
        let from = src.join(name);
        if from.is_file() {
            let to = dst.join(name);
            std::fs::copy(&from, &to)
                .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
            copied.push(to);
        }
    }
    Ok(copied)
}
