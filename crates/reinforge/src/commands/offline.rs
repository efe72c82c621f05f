//! The arguments every offline preference command shares (`train-dpo`, `train-orpo`,
//! `train-kto`), and the tracking ones every offline trainer takes (those and `train-rm`,
//! `train-p2l`); the run itself is reinforge-train's `offline`.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use reinforge_recipes::offline::OfflineOptions;
use reinforge_train::config::LoggingConfig;
use reinforge_train::trainer::Tracking;
use serde::Serialize;
use serde_json::Value;

use super::args::{count, ModelArgs};

/// Arguments every offline preference command takes.
#[derive(Args, Debug, Serialize)]
pub struct OfflineArgs {
    #[command(flatten)]
    #[serde(flatten)]
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
    /// Keep a vision-language model's vision tower fixed (`false`: train it too, full
    /// fine-tuning only; TRL's and verl's default is frozen).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub vision_freeze: bool,
    #[command(flatten)]
    #[serde(flatten)]
    pub memory: MemoryArgs,
    #[command(flatten)]
    #[serde(flatten)]
    pub tracking: TrackingArgs,
}

impl OfflineArgs {
    /// The library's settings (the device resolved and checked); MLflow records these
    /// arguments as the run's parameters.
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
            memory: self.memory.memory(),
            tracking: self.tracking.tracking(self)?,
            vision_freeze: self.vision_freeze,
        })
    }

    /// [`Self::options`] with `command`'s arguments (these and the command's own) as the
    /// MLflow parameters and the run's `config.toml`.
    pub fn options_of(&self, command: &impl Serialize) -> Result<OfflineOptions> {
        let mut options = self.options()?;
        options.tracking = self.tracking.tracking(command)?;
        Ok(options)
    }
}

/// The memory tools of the offline trainers (docs/memory.md): the token budget of a forward
/// pass, activation checkpointing and padding-free packing; none changes the result.
#[derive(Args, Debug, Clone, Copy, Serialize)]
pub struct MemoryArgs {
    /// Reads a step's rows in micro-batches of at most N tokens (a pair counts both its
    /// sequences) and backpropagates the loss through them afterwards: less memory for one
    /// more forward pass, the same gradient (0: the whole step at once).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub max_tokens_per_microbatch: usize,
    /// Recompute each decoder layer's activations in the backward pass (TRL's name): less
    /// memory, the same gradient.
    #[arg(long)]
    pub gradient_checkpointing: bool,
    /// Rows concatenated without padding, each attending only to itself (TRL's
    /// padding_free): no pad token computed, the same loss.
    #[arg(long)]
    pub padding_free: bool,
}

impl MemoryArgs {
    /// The library's settings.
    pub fn memory(&self) -> reinforge_torch::Memory {
        reinforge_torch::Memory {
            max_tokens_per_microbatch: self.max_tokens_per_microbatch,
            gradient_checkpointing: self.gradient_checkpointing,
            padding_free: self.padding_free,
            // Offline rows rarely repeat a prompt (a DPO pair's two sides run through the
            // preference trainers' own packing).
            shared_prompts: false,
            // The process default (set by main): offline steps are not the RL step whose
            // peak the compact heap is for.
            heap: reinforge_torch::heap::policy(),
        }
    }
}

/// What every offline trainer takes besides its settings: its config file and `--set` (read
/// as its flags before clap parses them: `reinforge_train::flag_config`), and `--tensorboard`,
/// `--mlflow-uri`, `--mlflow-experiment` (`reinforge train`'s `[logging]`).
#[derive(Args, Debug, Clone, Serialize)]
pub struct TrackingArgs {
    /// Settings from a TOML file of `key = value` (a key is a flag's name: `batch_size =
    /// 8`), such as the `config.toml` every run writes; flags given beside it win.
    #[arg(long, value_name = "FILE")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// One setting, after the file and the flags (`--set batch_size=8`); repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    #[serde(skip)]
    pub set: Vec<String>,
    /// Write <output>/tensorboard/events.out.tfevents.* with every scalar of metrics.jsonl.
    #[arg(long)]
    pub tensorboard: bool,
    /// MLflow tracking server (http://host:port): the command's options as parameters, every
    /// scalar of metrics.jsonl at its step, metrics.jsonl as an artifact at the end. An
    /// unreachable server warns once and the run goes on.
    #[arg(long, value_name = "URL", value_parser = http_url)]
    pub mlflow_uri: Option<String>,
    /// MLflow experiment the run goes into (created when the server has none).
    #[arg(long, value_name = "NAME", default_value = "reinforge")]
    pub mlflow_experiment: String,
}

impl TrackingArgs {
    /// The library's tracking settings, `command`'s arguments as the parameters and as the
    /// run's `config.toml`.
    pub fn tracking(&self, command: &impl Serialize) -> Result<Tracking> {
        Ok(Tracking {
            logging: LoggingConfig {
                tensorboard: self.tensorboard,
                mlflow_uri: self.mlflow_uri.clone().unwrap_or_default(),
                mlflow_experiment: self.mlflow_experiment.clone(),
            },
            params: params(command),
            config: Some(toml::to_string(command).context("the settings as TOML")?),
        })
    }
}

/// `--mlflow-uri`: an http:// or https:// URL (the check `logging.mlflow_uri` gets).
fn http_url(s: &str) -> Result<String, String> {
    if s.starts_with("http://") || s.starts_with("https://") {
        Ok(s.to_string())
    } else {
        Err(format!(
            "an http:// or https:// URL of an MLflow tracking server, got {s:?}"
        ))
    }
}

/// A command's arguments as MLflow parameters: each option by its flag name (`batch-size`),
/// its value as text; options not given and without a default are left out.
pub fn params(command: &impl Serialize) -> Vec<(String, String)> {
    let Ok(Value::Object(fields)) = serde_json::to_value(command) else {
        return Vec::new();
    };
    fields
        .into_iter()
        .filter_map(|(k, v)| {
            let value = match v {
                Value::Null => return None,
                Value::String(s) => s,
                v => v.to_string(),
            };
            Some((k.replace('_', "-"), value))
        })
        .collect()
}
