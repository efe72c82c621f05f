//! `reinforge train-rm` and `reinforge score-rm`: their arguments; the library is
//! reinforge-train's `offline::rm`.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use reinforge_recipes::offline::rm::{lora_config, RmOptions, ScoreRmOptions};
use reinforge_recipes::offline::OfflineOptions;
use reinforge_torch::runtime::resolve_device;

use super::args::{count, ModelArgs};
use super::offline::TrackingArgs;

/// Train a reward model on preference pairs (TRL RewardTrainer's loss).
#[derive(Args, Debug, serde::Serialize)]
#[command(after_help = "\
DATA (jsonl or parquet): {\"prompt\": TEXT or [messages], \"chosen\": TEXT or [assistant messages],
                          \"rejected\": ..., \"margin\": NUMBER (optional, every row or none)}
The loss is -log σ(r_chosen - r_rejected - margin) + center_rewards_coefficient·mean((r_c + r_r)²).
metrics.jsonl logs TRL's names: loss, accuracy, margin, min_reward, mean_reward, max_reward.
The model is saved as a *ForSequenceClassification checkpoint (score.weight, one label) that
transformers' AutoModelForSequenceClassification loads; use it with `reinforge score-rm` or as
a `type = \"model\"` component of a reward spec.

EXAMPLES:
  reinforge train-rm --model ckpt --data pairs.jsonl --heldout test.jsonl --output runs/rm
  reinforge train-rm --model ckpt --data pairs.jsonl --lora-r 16 --output runs/rm-lora
  reinforge score-rm --model runs/rm/checkpoints/final --data rows.jsonl --output scored.jsonl")]
pub struct TrainRmArgs {
    #[command(flatten)]
    #[serde(flatten)]
    pub model: ModelArgs,
    /// Preference pairs.
    #[arg(long, value_name = "FILE")]
    pub data: PathBuf,
    /// Held-out pairs: accuracy and margin before and after training (report.json).
    #[arg(long, value_name = "FILE")]
    pub heldout: Option<PathBuf>,
    /// Run directory (checkpoints, metrics.jsonl, report.json); an existing one is resumed.
    #[arg(long, short, value_name = "DIR")]
    pub output: PathBuf,
    /// Optimizer steps.
    #[arg(long, default_value_t = 50, value_parser = count)]
    pub steps: usize,
    /// Pairs per step.
    #[arg(long, default_value_t = 8, value_parser = count)]
    pub batch_size: usize,
    /// AdamW learning rate (TRL's RewardConfig default 1e-4).
    #[arg(long, default_value_t = 1e-4, value_parser = crate::tools::positive)]
    pub lr: f64,
    #[arg(long, default_value_t = 0.0, value_parser = crate::tools::non_negative)]
    pub weight_decay: f64,
    #[arg(long, default_value_t = 1.0, value_parser = crate::tools::positive)]
    pub max_grad_norm: f64,
    /// TRL's center_rewards_coefficient: pulls rewards towards zero mean.
    #[arg(long, value_parser = crate::tools::non_negative)]
    pub center_rewards_coefficient: Option<f64>,
    /// Train LoRA adapters of this rank (and the score head) instead of every weight; the
    /// saved model has the adapters folded in.
    #[arg(long, value_name = "R")]
    pub lora_r: Option<usize>,
    #[arg(long, default_value_t = 32.0)]
    pub lora_alpha: f64,
    /// Save checkpoints/latest every this many steps (0: at the end and on Ctrl-C).
    #[arg(long, default_value_t = 0)]
    pub checkpoint_every: usize,
    /// Seeds the score head, the adapters and the pair order.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Use prompt text as is, without the chat template.
    #[arg(long)]
    pub raw: bool,
    #[command(flatten)]
    #[serde(flatten)]
    pub memory: super::offline::MemoryArgs,
    #[command(flatten)]
    #[serde(flatten)]
    pub tracking: TrackingArgs,
}

/// Runs `train-rm` (the device is checked before the output directory exists).
pub fn train(args: &TrainRmArgs) -> Result<()> {
    reinforge_recipes::offline::rm::train(&RmOptions {
        common: OfflineOptions {
            model: args.model.source()?,
            data: args.data.clone(),
            heldout: args.heldout.clone(),
            output: args.output.clone(),
            steps: args.steps,
            batch_size: args.batch_size,
            lr: args.lr,
            max_grad_norm: args.max_grad_norm,
            checkpoint_every: args.checkpoint_every,
            seed: args.seed,
            raw: args.raw,
            memory: args.memory.memory(),
            tracking: args.tracking.tracking(args)?,
            vision_freeze: true,
        },
        weight_decay: args.weight_decay,
        center_rewards_coefficient: args.center_rewards_coefficient,
        lora: args.lora_r.map(|r| lora_config(r, args.lora_alpha)),
    })
}

/// Score jsonl/parquet rows with a reward model.
#[derive(Args, Debug)]
#[command(after_help = "\
ROWS (jsonl or parquet): {\"prompt\": TEXT or [messages], \"response\": TEXT or [assistant messages]}
Each row is written back with \"reward\" added (jsonl, to --output or stdout).

EXAMPLE:
  reinforge score-rm --model runs/rm/checkpoints/final --data rows.jsonl --output scored.jsonl")]
pub struct ScoreRmArgs {
    /// A *ForSequenceClassification checkpoint with one label and its tokenizer.
    #[arg(long, value_name = "DIR")]
    pub model: PathBuf,
    /// cpu, cuda or cuda:N (the model runs in float32).
    #[arg(long, default_value = "cpu")]
    pub device: String,
    #[arg(long, value_name = "FILE")]
    pub data: PathBuf,
    /// Output jsonl (default: stdout).
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// The field holding the response.
    #[arg(long, default_value = "response")]
    pub response_field: String,
    #[arg(long, default_value_t = 16, value_parser = count)]
    pub batch_size: usize,
    /// Use prompt text as is, without the chat template.
    #[arg(long)]
    pub raw: bool,
    /// Also write each row's token ids (`input_ids`): what the model read, for comparing with
    /// another implementation on identical inputs.
    #[arg(long)]
    pub emit_ids: bool,
}

/// Runs `score-rm`.
pub fn score(args: &ScoreRmArgs) -> Result<()> {
    reinforge_recipes::offline::rm::score(&ScoreRmOptions {
        model: args.model.clone(),
        device: resolve_device(&args.device, "--device")?,
        data: args.data.clone(),
        output: args.output.clone(),
        response_field: args.response_field.clone(),
        batch_size: args.batch_size,
        raw: args.raw,
        emit_ids: args.emit_ids,
    })
}
