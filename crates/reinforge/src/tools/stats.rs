//! `reinforge stats`: rliable statistics over runs x tasks.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use reinforge_eval::scores::{compute, read_scores};

use super::{count, emit, finite, level, Format};

/// rliable aggregate statistics per algorithm: IQM, mean, median, optimality gap with stratified-bootstrap
/// intervals, probability of improvement between every pair, and performance profiles.
///
/// Input lines: {"algorithm": "...", "run": 0, "task": "...", "score": 0.5} (one cell per line; every
/// algorithm needs the same tasks and a full runs x tasks grid), or {"algorithm": "...", "scores":
/// [[run 0 task scores...], ...]} (a whole matrix; tasks in column order).
#[derive(Debug, Clone, Args)]
pub struct StatsArgs {
    /// Scores JSONL file.
    #[arg(long, short)]
    pub input: PathBuf,
    /// Bootstrap replications, at least 1 (rliable's get_interval_estimates default is 50000).
    #[arg(long, default_value_t = 2000, value_parser = count)]
    pub reps: usize,
    /// Bootstrap seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Central interval level, between 0 and 1.
    #[arg(long, default_value_t = 0.95, value_parser = level)]
    pub level: f64,
    /// Optimality-gap threshold gamma.
    #[arg(long, default_value_t = 1.0, value_parser = finite)]
    pub gamma: f64,
    /// Thresholds for performance profiles (comma separated); default 51 points over the score range.
    #[arg(long, value_delimiter = ',', value_parser = finite)]
    pub taus: Vec<f64>,
    /// Table format.
    #[arg(long, value_enum, default_value_t = Format::Markdown)]
    pub format: Format,
    /// Write the table here instead of stdout.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// Directory for PNG plots (aggregates.png, improvement.png, profiles.png).
    #[arg(long)]
    pub plot_dir: Option<PathBuf>,
}

/// Runs `stats`.
pub fn run(args: &StatsArgs) -> Result<()> {
    let set = read_scores(&args.input)?;
    if set.algorithms.is_empty() {
        anyhow::bail!("{}: no scores", args.input.display());
    }
    let report = compute(
        &set, args.reps, args.seed, args.level, args.gamma, &args.taus,
    );
    let text = match args.format {
        Format::Json => serde_json::to_string_pretty(&report)?,
        Format::Csv => report.to_csv(),
        Format::Markdown => report.to_markdown(),
    };
    emit(args.output.as_deref(), &text)?;
    if let Some(d) = &args.plot_dir {
        report.plot(d)?;
    }
    Ok(())
}
