//! `reinforge mpg`: Project MPG's Goodness and Fastness from a table of benchmark results, and
//! their agreement with an arena leaderboard.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use reinforge_eval::mpg::compare::compare;
use reinforge_eval::mpg::table::{read_arena, read_categories, read_results};
use reinforge_eval::mpg::{render, score, FastnessSource, MpgOptions, Weighting};

use super::{count, emit, level, positive, ByName, Format};

/// `--prior A,B`: a Beta prior with both parameters > 0.
fn prior(s: &str) -> Result<(f64, f64), String> {
    let (a, b) = s
        .split_once(',')
        .ok_or_else(|| format!("expected A,B (e.g. 1,1), got {s:?}"))?;
    Ok((positive(a)?, positive(b)?))
}

/// Project MPG (Spangher et al. 2024, arXiv 2410.22368): aggregates per-model, per-benchmark results
/// into a "Goodness" (accuracy) and a "Fastness" (QPS or cost) per category of benchmarks and
/// overall, with intervals; with --arena, Pearson and Spearman correlations of Goodness with an arena
/// leaderboard, with bootstrap intervals.
///
/// Input rows (csv with a header, or jsonl): model, benchmark, questions, and correct or accuracy
/// (a fraction); optional category, qps, cost. Categories come from the category column or
/// --categories (csv benchmark,category or a JSON object). Each benchmark's accuracy is a Beta
/// posterior; Goodness is read from posterior samples. docs/arena.md says which parts are the paper's
/// and which are options of this implementation.
#[derive(Debug, Clone, Args)]
pub struct MpgArgs {
    /// Results table (.csv, else jsonl).
    #[arg(long, short)]
    pub input: PathBuf,
    /// Benchmark -> category mapping (.csv with benchmark,category, else a JSON object); without it
    /// every row needs a `category`.
    #[arg(long)]
    pub categories: Option<PathBuf>,
    /// Arena leaderboard to compare with (.csv or .json from `reinforge rank`, or jsonl; columns
    /// model and rating).
    #[arg(long)]
    pub arena: Option<PathBuf>,
    /// Beta prior A,B of every benchmark's accuracy.
    #[arg(long, default_value = "1,1", value_parser = prior)]
    pub prior: (f64, f64),
    /// Weights of benchmarks within a category: equal, or size (by number of questions).
    #[arg(long, value_parser = ByName(&Weighting::ALL), default_value = "equal")]
    pub benchmark_weight: Weighting,
    /// Weights of categories overall: equal, or size (by number of benchmarks).
    #[arg(long, value_parser = ByName(&Weighting::ALL), default_value = "equal")]
    pub category_weight: Weighting,
    /// Fastness column: qps or cost (default: qps when every row has it, else cost, else none).
    #[arg(long, value_parser = ByName(&FastnessSource::ALL))]
    pub fastness: Option<FastnessSource>,
    /// Posterior samples per benchmark.
    #[arg(long, default_value_t = 4000, value_parser = count)]
    pub draws: usize,
    /// Bootstrap rounds (Fastness intervals, correlations).
    #[arg(long, default_value_t = 2000, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
    pub rounds: usize,
    /// Central interval level, between 0 and 1.
    #[arg(long, default_value_t = 0.95, value_parser = level)]
    pub level: f64,
    /// Seed of the samples and bootstraps.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Markdown)]
    pub format: Format,
    /// Write here instead of stdout.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
}

/// Runs `mpg`.
pub fn run(args: &MpgArgs) -> Result<()> {
    let rows = read_results(&args.input)?;
    let cats = match &args.categories {
        Some(p) => Some((read_categories(p)?, p.display().to_string())),
        None => None,
    };
    let o = MpgOptions {
        prior: args.prior,
        benchmark_weight: args.benchmark_weight,
        category_weight: args.category_weight,
        draws: args.draws,
        level: args.level,
        seed: args.seed,
        fastness: args.fastness,
        rounds: args.rounds,
    };
    let report = score(
        &rows,
        cats.as_ref().map(|(m, f)| (m, f.as_str())),
        &args.input.display().to_string(),
        &o,
    )?;
    let cmp = match &args.arena {
        Some(p) => Some(compare(
            &report,
            &read_arena(p)?,
            args.rounds,
            args.level,
            args.seed,
        )?),
        None => None,
    };
    let text = match args.format {
        Format::Markdown => render::markdown(&report, cmp.as_ref()),
        Format::Csv => render::csv(&report),
        Format::Json => {
            serde_json::to_string_pretty(&serde_json::json!({"mpg": report, "arena": cmp}))? + "\n"
        }
    };
    emit(args.output.as_deref(), &text)
}
