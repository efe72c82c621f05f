//! Arguments shared by the checkpoint commands: which model, where, in which dtype, and how
//! prompts are read and rendered.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;
use reinforge_tasks::{DataColumns, PromptFormat};
use reinforge_torch::model::checkpoint::LoadOptions;
use reinforge_torch::runtime::resolve_device;
use reinforge_torch::Kind;

use reinforge_recipes::loaded::ModelSource;

use super::{LoadedModel, PromptStyle};

/// `--model`, `--device`, `--dtype`.
#[derive(Args, Debug, Clone, serde::Serialize)]
pub struct ModelArgs {
    /// Hugging Face checkpoint directory: config.json, model.safetensors (or a sharded
    /// index), tokenizer.json, tokenizer_config.json.
    #[arg(long, value_name = "DIR")]
    pub model: PathBuf,
    /// cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Compute dtype: f32, bf16 or f16 (default: f32 on CPU, bf16 on CUDA).
    #[arg(long, value_parser = ["f32", "float32", "float", "bf16", "bfloat16", "f16", "float16", "half"])]
    pub dtype: Option<String>,
    /// Float32 weights with bfloat16 autocast: the training precision (`bf16 = true`, as TRL's
    /// `bf16=True`), unlike `--dtype bf16`, which converts the weights (as vLLM's `--dtype`).
    #[arg(long, conflicts_with = "dtype")]
    pub autocast_bf16: bool,
    /// CPU threads of libtorch (default: libtorch's own choice, usually one per core).
    #[arg(long, value_parser = count)]
    pub threads: Option<usize>,
}

impl ModelArgs {
    /// The load options these arguments describe.
    pub fn load_options(&self) -> Result<LoadOptions> {
        let mut opts = LoadOptions::for_device(resolve_device(&self.device, "--device")?);
        if let Some(d) = &self.dtype {
            opts.kind = parse_dtype(d)?;
        }
        if self.autocast_bf16 {
            opts.kind = Kind::Float;
            reinforge_torch::precision::set_bf16(true)?;
        }
        Ok(opts)
    }

    /// The library's description of the model to load (the device resolved and checked).
    pub fn source(&self) -> Result<ModelSource> {
        Ok(ModelSource {
            dir: self.model.clone(),
            options: self.load_options()?,
            threads: self.threads,
        })
    }

    /// Sets the thread count (when given), then loads the model and tokenizer.
    pub fn load(&self) -> Result<LoadedModel> {
        self.source()?.load()
    }
}

/// Parses `f32`, `bf16`, `f16` (and the torch spellings).
pub fn parse_dtype(s: &str) -> Result<Kind> {
    Ok(match s {
        "f32" | "float32" | "float" => Kind::Float,
        "bf16" | "bfloat16" => Kind::BFloat16,
        "f16" | "float16" | "half" => Kind::Half,
        _ => bail!("dtype must be f32, bf16 or f16, got {s:?}"),
    })
}

/// `--batch-size`, `--num-samples`, `--max-new-tokens`: a count of at least 1.
pub fn count(s: &str) -> Result<usize, String> {
    crate::tools::count(s)
}

/// `--temperature`: finite and >= 0 (0 is greedy).
pub fn temperature(s: &str) -> Result<f64, String> {
    crate::tools::non_negative(s)
}

/// `--top-p`: in (0, 1].
pub fn top_p(s: &str) -> Result<f64, String> {
    let v = crate::tools::finite(s)?;
    if v > 0.0 && v <= 1.0 {
        Ok(v)
    } else {
        Err(format!("must be in (0, 1], got {v}"))
    }
}

/// `--top-k`: >= 0 (0 = off).
pub fn top_k(s: &str) -> Result<i64, String> {
    let v: i64 = s.trim().parse().map_err(|e| format!("{e}"))?;
    if v >= 0 {
        Ok(v)
    } else {
        Err(format!("must be >= 0 (0 = off), got {v}"))
    }
}

/// Which columns of a jsonl/parquet file hold the prompt, and how it is rendered.
#[derive(Args, Debug, Clone)]
pub struct PromptArgs {
    /// Column holding the prompt: a string, or a list of {role, content} messages.
    #[arg(long, default_value = "prompt", value_name = "NAME")]
    pub prompt_column: String,
    /// Use text prompts as they are, without the chat template.
    #[arg(long)]
    pub raw: bool,
    /// System message put first when a conversation has none.
    #[arg(long, value_name = "TEXT")]
    pub system: Option<String>,
}

impl PromptArgs {
    /// Columns to read, with no answer column.
    pub fn columns(&self) -> DataColumns {
        DataColumns {
            prompt: self.prompt_column.clone(),
            prompt_format: PromptFormat::Auto,
            answer: None,
            images: Some("images".into()),
        }
    }

    /// The rendering style.
    pub fn style(&self) -> PromptStyle {
        PromptStyle {
            raw: self.raw,
            system: self.system.clone(),
        }
    }
}
