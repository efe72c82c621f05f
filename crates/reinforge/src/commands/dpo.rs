//! `reinforge train-dpo`: its arguments; the trainer is reinforge-train's `offline::dpo`.

use anyhow::Result;
use clap::Args;
use reinforge_recipes::offline::dpo::DpoOptions;
use reinforge_torch::train::loss::dpo::{DpoConfig, DpoLoss, FDivergence};

use super::offline::OfflineArgs;
use crate::tools::ByName;

/// Train a checkpoint on preference pairs with a DPO-family loss (TRL's loss types).
#[derive(Args, Debug, serde::Serialize)]
#[command(after_help = "\
DATA (jsonl or parquet): {\"prompt\": TEXT or [messages], \"chosen\": TEXT, \"rejected\": TEXT}
Losses (TRL DPOConfig.loss_type): sigmoid (DPO), hinge, ipo, exo_pair, nca_pair, robust,
bco_pair, sppo_hard, aot, aot_unpaired, apo_zero, apo_down, discopop, sft, sigmoid_norm.
metrics.jsonl logs TRL's names: loss, rewards/chosen, rewards/rejected, rewards/accuracies,
rewards/margins, logps/chosen, logps/rejected.

EXAMPLES:
  reinforge train-dpo --model ckpt --data pairs.jsonl --heldout test.jsonl --output runs/dpo
  reinforge train-dpo --model ckpt --data pairs.jsonl --loss-type ipo --beta 0.5 --output runs/ipo
  (run it again with the same --output to continue after Ctrl-C)")]
pub struct TrainDpoArgs {
    #[command(flatten)]
    #[serde(flatten)]
    pub common: OfflineArgs,
    #[arg(long, value_parser = ByName(DpoLoss::ALL), default_value = "sigmoid")]
    pub loss_type: DpoLoss,
    #[arg(long, default_value_t = 0.1, value_parser = crate::tools::positive)]
    pub beta: f64,
    #[arg(long, default_value_t = 0.0, value_parser = crate::tools::non_negative)]
    pub label_smoothing: f64,
    #[arg(long, value_parser = ByName(FDivergence::ALL), default_value = "reverse_kl")]
    pub f_divergence_type: FDivergence,
    #[arg(long, default_value_t = 1.0)]
    pub f_alpha_divergence_coef: f64,
    #[arg(long, default_value_t = 0.05, value_parser = crate::tools::positive)]
    pub discopop_tau: f64,
}

/// Runs `train-dpo`.
pub fn train(args: &TrainDpoArgs) -> Result<()> {
    reinforge_recipes::offline::dpo::train(&DpoOptions {
        common: args.common.options_of(args)?,
        loss: DpoConfig {
            losses: vec![(args.loss_type, 1.0)],
            beta: args.beta,
            label_smoothing: args.label_smoothing,
            f_divergence: args.f_divergence_type,
            f_alpha_divergence_coef: args.f_alpha_divergence_coef,
            discopop_tau: args.discopop_tau,
        },
    })
}
