//! `reinforge train-sft`: its arguments; the trainer is reinforge-train's `offline::sft`.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;
use reinforge_recipes::offline::rm::lora_config;
use reinforge_recipes::offline::sft::SftOptions;
use reinforge_recipes::offline::sft_rows::{LossTokens, SftFormat, Tokenization};
use reinforge_train::sft::LrSchedule;

use super::args::count;
use super::offline::OfflineArgs;
use crate::tools::ByName;

/// Supervised fine-tuning of a checkpoint on your rows (TRL SFTTrainer's formats and loss).
#[derive(Args, Debug, serde::Serialize)]
#[command(
    mut_arg("lr", |a| a.default_value("2e-5").help("AdamW learning rate (TRL's SFTConfig default 2e-5)")),
    after_help = "\
DATA (jsonl or parquet), TRL's SFT formats (--format auto picks the first the rows have):
  {\"messages\": [{\"role\": \"user\", \"content\": ...}, {\"role\": \"assistant\", \"content\": ...}]}
  {\"prompt\": TEXT or [messages], \"completion\": TEXT or [assistant messages]}
  {\"text\": TEXT}
Conversations are rendered with the checkpoint's chat template. --loss-tokens completion (the
default) trains on the completion, on the assistant turns of a conversation (found with any
template, no {% generation %} tags needed) and on all of a text row; `all` trains on every token
(TRL's default for `messages`). Text rows and text completions get the EOS appended.
The loss is the token-mean NLL over the whole step's batch (every rank's rows).
metrics.jsonl: loss, grad_norm, lr, tokens; report.json: rows, tokens, held-out loss before/after.

EXAMPLES:
  reinforge train-sft --model ckpt --data chat.jsonl --heldout test.jsonl --output runs/sft
  reinforge train-sft --model ckpt --data chat.jsonl --lora-r 16 --padding-free --output runs/sft-lora
  torchrun --nproc-per-node 2 $(which reinforge) train-sft ...   (data parallel over 2 processes)
  (run it again with the same --output to continue after Ctrl-C)"
)]
pub struct TrainSftArgs {
    #[command(flatten)]
    #[serde(flatten)]
    pub common: OfflineArgs,
    #[arg(long, value_parser = ByName(SftFormat::ALL), default_value = "auto")]
    pub format: SftFormat,
    /// Which tokens the loss is computed on: completion (TRL's completion_only_loss /
    /// assistant_only_loss) or all.
    #[arg(long, value_parser = ByName(LossTokens::ALL), default_value = "completion")]
    pub loss_tokens: LossTokens,
    /// Longest row in tokens; longer rows are cut, keeping the start (TRL's max_length).
    #[arg(long, default_value_t = 1024, value_parser = count)]
    pub max_length: usize,
    /// transformers' lr_scheduler_type.
    #[arg(long, value_parser = ByName(LrSchedule::ALL), default_value = "linear")]
    pub lr_scheduler_type: LrSchedule,
    #[arg(long, default_value_t = 0)]
    pub warmup_steps: usize,
    /// Train LoRA adapters of this rank on every attention and MLP projection instead of
    /// every weight (checkpoints/final-adapter is the PEFT adapter).
    #[arg(long, value_name = "R", value_parser = count)]
    pub lora_r: Option<usize>,
    #[arg(long, default_value_t = 32.0, value_parser = crate::tools::positive)]
    pub lora_alpha: f64,
    /// Also write the tokenised training rows (jsonl: input_ids, completion_mask), to see
    /// exactly what is trained on or to feed the same ids to another trainer.
    #[arg(long, value_name = "FILE")]
    pub write_tokens: Option<PathBuf>,
}

/// Runs `train-sft`.
pub fn train(args: &TrainSftArgs) -> Result<()> {
    if args.common.raw {
        bail!("--raw does not apply to train-sft: text rows are used as they are, conversations are rendered by the chat template");
    }
    let common = args.common.options_of(args)?;
    reinforge_recipes::offline::sft::train(&SftOptions {
        common,
        tokenization: Tokenization {
            format: args.format,
            loss_tokens: args.loss_tokens,
            max_length: args.max_length,
        },
        schedule: args.lr_scheduler_type,
        warmup_steps: args.warmup_steps,
        lora: args.lora_r.map(|r| lora_config(r, args.lora_alpha)),
        write_tokens: args.write_tokens.clone(),
    })
}
