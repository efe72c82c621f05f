//! `reinforge train-orpo`: its arguments; the trainer is reinforge-train's `offline::orpo`.

use anyhow::Result;
use clap::Args;
use reinforge_recipes::offline::orpo::{OrpoOptions, PromptBos};

use super::offline::OfflineArgs;
use crate::tools::ByName;

/// Train a checkpoint on preference pairs with ORPO (no reference model).
#[derive(Args, Debug, serde::Serialize)]
#[command(after_help = "\
DATA (jsonl or parquet): {\"prompt\": TEXT or [messages], \"chosen\": TEXT, \"rejected\": TEXT}
Loss (TRL ORPOTrainer): mean NLL of the chosen sequences (prompt included, as TRL counts it)
minus beta * mean log-sigmoid of the log odds ratio of the per-token mean log-probs.
metrics.jsonl logs TRL's names: loss, rewards/chosen, rewards/rejected, rewards/accuracies,
rewards/margins, logps/chosen, logps/rejected, nll_loss, log_odds_ratio, log_odds_chosen.

EXAMPLES:
  reinforge train-orpo --model ckpt --data pairs.jsonl --heldout test.jsonl --output runs/orpo
  (run it again with the same --output to continue after Ctrl-C)")]
pub struct TrainOrpoArgs {
    #[command(flatten)]
    #[serde(flatten)]
    pub common: OfflineArgs,
    /// Weight of the odds-ratio term (TRL's ORPOConfig.beta, the paper's lambda).
    #[arg(long, default_value_t = 0.1, value_parser = crate::tools::positive)]
    pub beta: f64,
    /// Whether every prompt starts with the tokenizer's BOS: `tokenizer` (as the tokenizer
    /// and chat template produce it, like train-dpo and TRL's DPOTrainer) or `always` (prepend
    /// it when missing, as TRL's ORPOTrainer.tokenize_row does).
    #[arg(long, value_parser = ByName(PromptBos::ALL), default_value = "tokenizer")]
    pub prompt_bos: PromptBos,
}

/// Runs `train-orpo`.
pub fn train(args: &TrainOrpoArgs) -> Result<()> {
    reinforge_recipes::offline::orpo::train(&OrpoOptions {
        common: args.common.options_of(args)?,
        beta: args.beta,
        prompt_bos: args.prompt_bos,
    })
}
