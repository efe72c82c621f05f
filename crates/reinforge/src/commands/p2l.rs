//! `reinforge train-p2l` and `reinforge p2l`: Prompt-to-Leaderboard (lmarena/p2l). The
//! arguments; the run, the leaderboards and routing are reinforge-train's `offline::p2l`.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use reinforge_recipes::offline::p2l::{self, LeaderboardOptions, TrainOptions};
use reinforge_torch::train::loss::p2l::P2lLoss;

use super::args::{count, ModelArgs};
use super::offline::TrackingArgs;
use crate::tools::ByName;

/// Train a Prompt-to-Leaderboard model on battles with prompts.
#[derive(Args, Debug, serde::Serialize)]
#[command(after_help = "\
BATTLES (jsonl): {\"prompt\": TEXT or [messages], \"model_a\": A, \"model_b\": B,
                  \"winner\": \"model_a\" | \"model_b\" | \"tie\" | \"tie (bothbad)\"}
Losses (lmarena/p2l p2l/model.py): bt (ties dropped), bt-tie, rk, rk-reparam, ba, grk/bag
(\"tie (bothbad)\" is a tie for losses without that outcome).
--output is a run directory: metrics.jsonl, report.json, checkpoints/latest (resumable: run
the same command again after Ctrl-C) and checkpoints/final (the model: weights, config.json,
p2l_config.json, tokenizer), which `reinforge p2l --model` reads given the run directory.

EXAMPLES:
  reinforge train-p2l --model ckpt --battles train.jsonl --heldout test.jsonl --output p2l-model
  reinforge p2l --model p2l-model --prompt 'Write a haiku about rain'")]
pub struct TrainP2lArgs {
    #[command(flatten)]
    #[serde(flatten)]
    pub model: ModelArgs,
    /// Battles to train on (jsonl).
    #[arg(long, value_name = "FILE")]
    pub battles: PathBuf,
    /// Held-out battles: log-likelihood of P2L against the single global leaderboard.
    #[arg(long, value_name = "FILE")]
    pub heldout: Option<PathBuf>,
    /// Run directory (checkpoints, metrics.jsonl, report.json); an existing one is resumed.
    /// The trained model is its checkpoints/final, which `reinforge p2l --model DIR` reads.
    #[arg(long, short, value_name = "DIR")]
    pub output: PathBuf,
    /// The loss, by its p2l name.
    #[arg(long, value_parser = ByName(P2lLoss::ALL), default_value = "bt")]
    pub loss: P2lLoss,
    /// Passes over the battles.
    #[arg(long, default_value_t = 1, value_parser = count)]
    pub epochs: usize,
    /// Battles per optimizer step.
    #[arg(long, default_value_t = 16, value_parser = count)]
    pub batch_size: usize,
    /// AdamW learning rate (backbone and heads).
    #[arg(long, default_value_t = 1e-4, value_parser = crate::tools::positive)]
    pub lr: f64,
    #[arg(long, default_value_t = 1.0, value_parser = crate::tools::positive)]
    pub max_grad_norm: f64,
    /// Save checkpoints/latest every this many steps (0: at the end and on Ctrl-C).
    #[arg(long, default_value_t = 0)]
    pub checkpoint_every: usize,
    /// Seeds the heads and the battle order.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Use prompt text as is, without the chat template.
    #[arg(long)]
    pub raw: bool,
    #[command(flatten)]
    #[serde(flatten)]
    pub tracking: TrackingArgs,
}

/// Runs `train-p2l`.
pub fn train(args: &TrainP2lArgs) -> Result<()> {
    p2l::train(&TrainOptions {
        model: args.model.source()?,
        battles: args.battles.clone(),
        heldout: args.heldout.clone(),
        output: args.output.clone(),
        loss: args.loss,
        epochs: args.epochs,
        batch_size: args.batch_size,
        lr: args.lr,
        max_grad_norm: args.max_grad_norm,
        checkpoint_every: args.checkpoint_every,
        seed: args.seed,
        raw: args.raw,
        tracking: args.tracking.tracking(args)?,
    })
}

/// Leaderboards from a trained P2L model.
#[derive(Args, Debug)]
#[command(after_help = "\
Per prompt the model gives point estimates (one coefficient vector per prompt). Over a prompt
set (--prompts), the aggregate leaderboard is the mean coefficient per model with a percentile
bootstrap interval over prompts. Ratings are 1000 + 400 log10(e) x coefficient.

EXAMPLES:
  reinforge p2l --model p2l-model --prompt 'Prove that sqrt(2) is irrational'
  reinforge p2l --model p2l-model --prompts prompts.jsonl --costs costs.json --budget 2.0")]
pub struct P2lArgs {
    /// A directory written by `reinforge train-p2l` (its run directory, which means its
    /// checkpoints/final, or any of its checkpoints).
    #[arg(long, value_name = "DIR")]
    pub model: PathBuf,
    /// One prompt.
    #[arg(long, conflicts_with = "prompts", required_unless_present = "prompts")]
    pub prompt: Option<String>,
    /// Prompts (jsonl with a `prompt` column: text or messages).
    #[arg(long, value_name = "FILE")]
    pub prompts: Option<PathBuf>,
    /// Model costs (JSON object model -> cost per call) for routing.
    #[arg(long, value_name = "FILE", requires = "budget")]
    pub costs: Option<PathBuf>,
    /// Route each prompt to the best model whose cost is at most this.
    #[arg(long, requires = "costs")]
    pub budget: Option<f64>,
    /// Bootstrap resamples of the prompt set.
    #[arg(long, default_value_t = 1000, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=1_000_000))]
    pub rounds: usize,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Write JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs `p2l`.
pub fn run(args: &P2lArgs) -> Result<()> {
    p2l::run(&LeaderboardOptions {
        model: args.model.clone(),
        prompt: args.prompt.clone(),
        prompts: args.prompts.clone(),
        costs: args.costs.clone(),
        budget: args.budget,
        rounds: args.rounds,
        seed: args.seed,
        json: args.json,
    })
}
