//! `reinforge explain`: what a training config means before any compute (reinforge-train's
//! `explain`), resolved exactly as `reinforge train` resolves it.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use reinforge_recipes::explain::{explain, toy_model, ModelShape};
use reinforge_torch::ModelConfig;
use reinforge_train::config::TrainConfig;

/// Arguments of `reinforge explain`.
#[derive(Args)]
#[command(after_help = "\
Prints, for the config `reinforge train` would run with the same --config/--set (and --model):
  rows per step and per data-parallel rank, mini-batches and optimizer steps per step,
  tokens and rows per micro-batch, a memory estimate (parameters, gradients, AdamW, activations),
  and each key's TRL GRPOConfig / verl equivalent, listing the keys that have none.
Nothing is trained or loaded: --model reads only DIR/config.json.

EXAMPLES:
  reinforge explain                                        the default experiment
  reinforge explain --nproc 2 --set grpo.mini_batches=4    per-rank rows on 2 ranks
  reinforge explain --model Qwen2.5-0.5B-Instruct --prompt-tokens 300 --set memory.max_tokens_per_microbatch=8192
  reinforge explain --config runs/default-seed0/config.toml --json | jq .rows_per_rank")]
pub struct ExplainArgs {
    /// TOML config to start from, as for `train` (defaults fill every key it leaves out).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Override one key, as for `train` (repeatable; applied after --config).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// A Hugging Face checkpoint directory: only its config.json is read (the shape for the
    /// memory estimate), and the defaults are those of `train --model` (TRL's for pretrained models).
    #[arg(long, value_name = "DIR")]
    pub model: Option<PathBuf>,
    /// Data-parallel ranks, as `train --nproc N` (or torchrun's WORLD_SIZE) would run.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = crate::tools::count)]
    pub nproc: usize,
    /// Tokens of the longest prompt, special tokens and chat template included (with --model;
    /// the toy task knows its own).
    #[arg(long, value_name = "N", default_value_t = 512, value_parser = crate::tools::count)]
    pub prompt_tokens: usize,
    /// Print the figures as one JSON object instead of the report.
    #[arg(long)]
    pub json: bool,
}

/// Resolves the config and prints its explanation.
pub fn run(args: &ExplainArgs) -> Result<()> {
    let (cfg, shape) = match &args.model {
        Some(dir) => {
            let cfg = TrainConfig::resolve_data_run(args.config.as_deref(), &args.set)?;
            let path = dir.join("config.json");
            let config =
                ModelConfig::load(&path).with_context(|| format!("reading {}", path.display()))?;
            let shape = ModelShape {
                source: path.display().to_string(),
                config,
                longest_prompt: args.prompt_tokens,
            };
            (cfg, shape)
        }
        None => {
            let cfg = TrainConfig::resolve(args.config.as_deref(), &args.set)?;
            cfg.validate_arith()?;
            let shape = toy_model(&cfg);
            (cfg, shape)
        }
    };
    let e = explain(&cfg, args.nproc, &shape)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&e)?);
    } else {
        print!("{}", e.text(&cfg));
    }
    Ok(())
}
