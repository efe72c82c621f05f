//! `reinforge judge`: every row of a file judged in batches; per-row verdicts as jsonl, the
//! position-bias summary on stderr, and (pairwise) battles for `reinforge rank`. The judge
//! itself (templates, verdicts from next-token probabilities, the `type = "judge"` reward
//! scorer) is reinforge-recipes' `judge`.

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, ValueEnum};
use reinforge_recipes::judge::rows::{judge_rows, JudgeOptions};

use super::args::{count, ModelArgs};

/// Pairwise or pointwise.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum JudgeMode {
    /// Two responses per row (`response_a`, `response_b`), judged in both orders.
    Pairwise,
    /// One response per row (`response`), rated 1 to 5.
    Pointwise,
}

/// Judge responses with a local checkpoint.
#[derive(Args, Debug)]
#[command(after_help = "\
ROWS (jsonl or parquet):
  pairwise:  {\"prompt\": TEXT, \"response_a\": TEXT, \"response_b\": TEXT,
              \"model_a\": NAME, \"model_b\": NAME (optional: for --battles),
              \"winner\": \"model_a\" | \"model_b\" (optional: the known answer, for accuracy)}
  pointwise: {\"prompt\": TEXT, \"response\": TEXT}
Pairwise rows are judged twice, with either response first; the summary reports the position
bias of single-order verdicts and of the swap-averaged ones. --battles writes the swap-averaged
winners in the battle format `reinforge rank` reads.

EXAMPLES:
  reinforge judge --model judge-ckpt --data pairs.jsonl --battles battles.jsonl
  reinforge judge --model judge-ckpt --mode pointwise --data rows.jsonl --output rated.jsonl")]
pub struct JudgeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[arg(long, value_name = "FILE")]
    pub data: PathBuf,
    #[arg(long, value_enum, default_value = "pairwise")]
    pub mode: JudgeMode,
    /// Template file (placeholders {prompt}, {response_a}, {response_b} or {response}).
    #[arg(long, value_name = "FILE")]
    pub template: Option<PathBuf>,
    /// Per-row verdicts (jsonl; default: stdout).
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Battles for `reinforge rank` (pairwise; rows need model_a and model_b).
    #[arg(long, value_name = "FILE")]
    pub battles: Option<PathBuf>,
    /// A swap-averaged P(A better) within this of 0.5 is a tie in --battles.
    #[arg(long, default_value_t = 0.05)]
    pub tie_margin: f64,
    #[arg(long, default_value_t = 8, value_parser = count)]
    pub batch_size: usize,
}

/// Runs `reinforge judge`.
pub fn run(args: &JudgeArgs) -> Result<()> {
    judge_rows(&JudgeOptions {
        model: args.model.source()?,
        data: args.data.clone(),
        pairwise: matches!(args.mode, JudgeMode::Pairwise),
        template: args.template.clone(),
        output: args.output.clone(),
        battles: args.battles.clone(),
        tie_margin: args.tie_margin,
        batch_size: args.batch_size,
    })
}
