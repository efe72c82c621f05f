//! `reinforge rm-eval`: how good a scorer (reward model, verifier, judge) is, from its scores:
//! PPE's correctness and human-preference metrics and RewardBench 2's scoring
//! (`reinforge_eval::{ppe, rewardbench2}`; definitions and choices in docs/rm_eval.md).

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, Subcommand};
use reinforge_eval::ppe::{
    correctness_metrics, plot_best_of_k, preference_metrics, read_correctness, read_preferences,
    Intervals, PreferenceOptions,
};
use reinforge_eval::rewardbench2;

use super::{emit, level, with_threads};

/// Evaluate a scorer from its per-response scores (PPE metrics, RewardBench 2 scoring).
#[derive(Debug, Clone, Args)]
#[command(after_help = "\
INPUTS (jsonl, one object per line; docs/rm_eval.md has the full schemas):
  correctness   {\"prompt\": ID, \"score\": x, \"correct\": true|false}   K responses per prompt
  preference    {\"model_a\", \"model_b\", \"winner\": \"model_a\"|\"model_b\"|\"tie\", \"score_a\", \"score_b\"}
  rewardbench2  {\"id\", \"subset\", \"num_correct\", \"scores\": [correct first, then incorrect]}

EXAMPLES:
  reinforge rm-eval correctness --input scores.jsonl --plot best_of_k.png
  reinforge rm-eval preference --input pairs.jsonl --intervals bootstrap --rounds 200
  reinforge rm-eval rewardbench2 --input rb2_scores.jsonl")]
pub struct RmEvalArgs {
    #[command(subcommand)]
    pub data: RmEvalData,
}

/// The kind of data scored.
#[derive(Debug, Clone, Subcommand)]
pub enum RmEvalData {
    /// K sampled responses per prompt with correctness labels: pairwise accuracy, best-of-K
    /// curve, end score, loss against the ground-truth best, row-wise Pearson, ROC AUC.
    Correctness {
        #[command(flatten)]
        io: Io,
        /// Also draw the best-of-K curve (PNG).
        #[arg(long, value_name = "PNG")]
        plot: Option<PathBuf>,
    },
    /// Human preference pairs: pairwise accuracy, the scorer-induced model ranking against the
    /// human Bradley-Terry ranking (Spearman, Kendall), separability, confidence agreement,
    /// Brier score.
    Preference {
        #[command(flatten)]
        io: Io,
        /// Leaderboard intervals: sandwich (arena-rank, deterministic) or bootstrap.
        #[arg(long, value_enum, default_value_t = IntervalKind::Sandwich)]
        intervals: IntervalKind,
        /// Bootstrap rounds.
        #[arg(long, default_value_t = 1000, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
        rounds: usize,
        /// Bootstrap seed.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Interval level.
        #[arg(long, default_value_t = 0.95, value_parser = level)]
        level: f64,
        /// Worker threads (default: all cores).
        #[arg(long, value_parser = super::count)]
        threads: Option<usize>,
    },
    /// RewardBench 2: best-of-4 accuracy per subset (ties as the reference scorer counts
    /// them), the Ties composite, the overall score.
    Rewardbench2 {
        #[command(flatten)]
        io: Io,
    },
}

/// Input and output files.
#[derive(Debug, Clone, Args)]
pub struct Io {
    /// Scores (jsonl).
    #[arg(long, short)]
    pub input: PathBuf,
    /// Write the JSON report here instead of stdout.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
}

/// Interval method of `rm-eval preference`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum IntervalKind {
    Sandwich,
    Bootstrap,
}

/// Runs `rm-eval`: the JSON report to stdout (or `--output`), a one-line summary to stderr.
pub fn run(args: &RmEvalArgs) -> Result<()> {
    match &args.data {
        RmEvalData::Correctness { io, plot } => {
            let set = read_correctness(&io.input)?;
            let r = correctness_metrics(&set)?;
            eprintln!(
                "{} prompts x {}: pairwise accuracy {:.4}, best-of-{} {:.4} (ground truth {:.4}), loss {:.4}, ROC AUC {:.4}",
                r.prompts, r.k, r.pairwise_accuracy, r.k, r.end_score,
                r.best_of_k.oracle.last().copied().unwrap_or(f64::NAN), r.loss, r.roc_auc
            );
            if let Some(p) = plot {
                plot_best_of_k(p, "best of K", &[("scorer", &r.best_of_k)])?;
            }
            emit(io.output.as_deref(), &serde_json::to_string_pretty(&r)?)
        }
        RmEvalData::Preference {
            io,
            intervals,
            rounds,
            seed,
            level,
            threads,
        } => {
            let pairs = read_preferences(&io.input)?;
            let mut opts = PreferenceOptions::default();
            opts.arena.significance = 1.0 - level;
            opts.intervals = match intervals {
                IntervalKind::Sandwich => Intervals::Sandwich,
                IntervalKind::Bootstrap => Intervals::Bootstrap {
                    rounds: *rounds,
                    seed: *seed,
                },
            };
            let r = with_threads(*threads, || preference_metrics(&pairs, &opts))??;
            eprintln!(
                "{} pairs: accuracy {:.4}, Spearman {:.4}, Kendall {:.4}, separability {:.4}, confidence agreement {:.4}, Brier {:.4}",
                r.pairs, r.pairwise_accuracy, r.spearman, r.kendall, r.separability, r.confidence_agreement, r.brier
            );
            emit(io.output.as_deref(), &serde_json::to_string_pretty(&r)?)
        }
        RmEvalData::Rewardbench2 { io } => {
            let rows = rewardbench2::read_scores(&io.input)?;
            let r = rewardbench2::score(&rows)?;
            let subsets: Vec<String> = r
                .subsets
                .iter()
                .map(|s| format!("{} {:.4}", s.subset, s.score))
                .collect();
            eprintln!(
                "RewardBench 2 overall {:.4} ({})",
                r.overall,
                subsets.join(", ")
            );
            emit(io.output.as_deref(), &serde_json::to_string_pretty(&r)?)
        }
    }
}
