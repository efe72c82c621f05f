//! The arguments every offline preference command shares (`train-dpo`, `train-orpo`,
//! `train-kto`); the run itself is reinforge-train's `offline`.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use reinforge_train::offline::OfflineOptions;

use super::args::{count, ModelArgs};

/// Arguments every offline preference command takes.
#[derive(Args, Debug)]
pub struct OfflineArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Training rows (jsonl or parquet).
    #[arg(long, value_name = "FILE")]
    pub data: PathBuf,
    /// Held-out rows: the command's metrics before and after training, in report.json.
    #[arg(long, value_name = "FILE")]
    pub heldout: Option<PathBuf>,
    /// Run directory (checkpoints, metrics.jsonl, report.json); an existing one is resumed.
    #[arg(long, short, value_name = "DIR")]
    pub output: PathBuf,
    /// Optimizer steps.
    #[arg(long, default_value_t = 50, value_parser = count)]
    pub steps: usize,
    /// Rows (pairs, for paired data) per step.
    #[arg(long, default_value_t = 8, value_parser = count)]
    pub batch_size: usize,
    /// AdamW learning rate (TRL's DPOConfig, ORPOConfig and KTOConfig default 1e-6).
    #[arg(long, default_value_t = 1e-6, value_parser = crate::tools::positive)]
    pub lr: f64,
    #[arg(long, default_value_t = 1.0, value_parser = crate::tools::positive)]
    pub max_grad_norm: f64,
    /// Save checkpoints/latest every this many steps (0: at the end and on Ctrl-C).
    #[arg(long, default_value_t = 0)]
    pub checkpoint_every: usize,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Use prompt text as is, without the chat template.
    #[arg(long)]
    pub raw: bool,
    /// Reads a step's rows in micro-batches of at most N tokens (a pair counts both its
    /// sequences) and backpropagates the loss through them afterwards: less memory for one
    /// more forward pass, the same gradient (0: the whole step at once).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub max_tokens_per_microbatch: usize,
}

impl OfflineArgs {
    /// The library's settings (the device resolved and checked).
    pub fn options(&self) -> Result<OfflineOptions> {
        Ok(OfflineOptions {
            model: self.model.source()?,
            data: self.data.clone(),
            heldout: self.heldout.clone(),
            output: self.output.clone(),
            steps: self.steps,
            batch_size: self.batch_size,
            lr: self.lr,
            max_grad_norm: self.max_grad_norm,
            checkpoint_every: self.checkpoint_every,
            seed: self.seed,
            raw: self.raw,
            memory: reinforge_torch::Memory {
                max_tokens_per_microbatch: self.max_tokens_per_microbatch,
                ..Default::default()
            },
        })
    }
}
