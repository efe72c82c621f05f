//! `reinforge train-kto`: its arguments; the trainer is reinforge-train's `offline::kto`.

use anyhow::Result;
use clap::Args;
use reinforge_recipes::offline::kto::KtoOptions;
use reinforge_torch::train::loss::kto::{KtoConfig, KtoLoss};

use super::offline::OfflineArgs;
use crate::tools::ByName;

/// Train a checkpoint on completions labelled desirable or undesirable with KTO.
#[derive(Args, Debug, serde::Serialize)]
#[command(after_help = "\
DATA (jsonl or parquet), either unpaired rows
  {\"prompt\": TEXT or [messages], \"completion\": TEXT, \"label\": true|false}
or preference pairs {\"prompt\", \"chosen\", \"rejected\"}, unpaired as TRL does.
Rows are read in file order, in consecutive batches (as TRL's KTOTrainer requires): shuffle the
file first if its order means something. Each row's KL completion is the previous row's within
its batch.
metrics.jsonl logs TRL's names: loss, kl, rewards/chosen, rewards/rejected, rewards/margins,
logps/chosen, logps/rejected (a side absent from a batch has no value that step).

EXAMPLES:
  reinforge train-kto --model ckpt --data rows.jsonl --heldout test.jsonl --output runs/kto
  reinforge train-kto --model ckpt --data pairs.jsonl --desirable-weight 1.33 --output runs/kto
  (run it again with the same --output to continue after Ctrl-C)")]
pub struct TrainKtoArgs {
    #[command(flatten)]
    #[serde(flatten)]
    pub common: OfflineArgs,
    #[arg(long, value_parser = ByName(KtoLoss::ALL), default_value = "kto")]
    pub loss_type: KtoLoss,
    #[arg(long, default_value_t = 0.1, value_parser = crate::tools::positive)]
    pub beta: f64,
    /// Weight of the desirable rows' losses.
    #[arg(long, default_value_t = 1.0, value_parser = crate::tools::positive)]
    pub desirable_weight: f64,
    /// Weight of the undesirable rows' losses.
    #[arg(long, default_value_t = 1.0, value_parser = crate::tools::positive)]
    pub undesirable_weight: f64,
}

/// Runs `train-kto`.
pub fn train(args: &TrainKtoArgs) -> Result<()> {
    reinforge_recipes::offline::kto::train(&KtoOptions {
        common: args.common.options_of(args)?,
        loss: KtoConfig {
            loss_type: args.loss_type,
            beta: args.beta,
            desirable_weight: args.desirable_weight,
            undesirable_weight: args.undesirable_weight,
        },
    })
}
