//! `reinforge rank`: a leaderboard from pairwise battles.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;
use reinforge_eval::bt::{FitOptions, Scale};
use reinforge_eval::elo::EloParams;
use reinforge_eval::leaderboard::{rank, Method, RankConfig};

use super::{count, emit, finite, level, non_negative, positive, with_threads, ByName, Format};

/// Parses `MODEL=RATING` (the model name may itself contain `=`; the last one splits).
pub fn parse_anchor(s: &str) -> Result<(String, f64), String> {
    let (m, r) = s
        .rsplit_once('=')
        .ok_or_else(|| format!("expected MODEL=RATING, got {s:?}"))?;
    let r: f64 = r
        .trim()
        .parse()
        .map_err(|e| format!("rating in {s:?}: {e}"))?;
    if m.is_empty() || !r.is_finite() {
        return Err(format!(
            "expected MODEL=RATING with a finite rating, got {s:?}"
        ));
    }
    Ok((m.to_string(), r))
}

/// Leaderboard from pairwise battles (Chatbot Arena JSONL): Bradley-Terry, Rao-Kupper or online Elo,
/// with seeded multinomial-bootstrap intervals and interval-based ranks.
///
/// Input lines: {"model_a": "...", "model_b": "...", "winner": "model_a" | "model_b" | "tie" |
/// "tie (bothbad)"}; other fields are ignored. With --style-control each line also needs FastChat's
/// "conv_metadata" (sum_assistant_{a,b}_tokens, header_count_{a,b}, list_count_{a,b}, bold_count_{a,b}).
/// Malformed lines, unknown winners and self-battles are errors that name the line.
#[derive(Debug, Clone, Args)]
pub struct RankArgs {
    /// Battles JSONL file.
    #[arg(long, short)]
    pub input: PathBuf,
    /// Rating method: bt (ties = half wins, FastChat compute_bt), rao-kupper (ties modelled), elo (online, file order).
    #[arg(long, value_parser = ByName(&Method::ALL), default_value = "bt")]
    pub method: Method,
    /// Bootstrap rounds for the intervals (0 = none).
    #[arg(long, default_value_t = 1000)]
    pub rounds: usize,
    /// Bootstrap seed (results do not depend on the thread count).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Central interval level, between 0 and 1.
    #[arg(long, default_value_t = 0.95, value_parser = level)]
    pub level: f64,
    /// Pin one model's rating, e.g. --anchor "mixtral-8x7b-instruct-v0.1=1114"; default: mean rating = --init.
    #[arg(long, value_parser = parse_anchor)]
    pub anchor: Option<(String, f64)>,
    /// Rating points per factor --base of odds (> 0).
    #[arg(long, default_value_t = 400.0, value_parser = positive)]
    pub scale: f64,
    /// Odds base of the rating scale (> 1).
    #[arg(long, default_value_t = 10.0, value_parser = finite)]
    pub base: f64,
    /// Mean rating (without --anchor) and online-Elo starting rating.
    #[arg(long, default_value_t = 1000.0, value_parser = finite)]
    pub init: f64,
    /// Online Elo K factor (>= 0).
    #[arg(long, default_value_t = 4.0, value_parser = non_negative)]
    pub k: f64,
    /// FastChat style control (length, headers, lists, bold as covariates; BT only).
    #[arg(long)]
    pub style_control: bool,
    /// L2 penalty on log-strengths (0 = exact MLE); keeps ratings finite for undefeated models.
    #[arg(long, default_value_t = 0.0, value_parser = non_negative)]
    pub prior: f64,
    /// Table format.
    #[arg(long, value_enum, default_value_t = Format::Markdown)]
    pub format: Format,
    /// Write the table here instead of stdout.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// Also write a PNG forest plot of ratings and intervals here.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Worker threads (default: all cores).
    #[arg(long, value_parser = count)]
    pub threads: Option<usize>,
}

/// Runs `rank`: reads battles, computes the leaderboard, writes the table (and plot).
pub fn run(args: &RankArgs) -> Result<()> {
    if args.base <= 1.0 {
        bail!("--base must be > 1, got {}", args.base);
    }
    let b = reinforge_eval::io::read_battles(&args.input, args.style_control)?;
    if b.is_empty() {
        bail!("{}: no battles", args.input.display());
    }
    let cfg = RankConfig {
        method: args.method,
        rounds: args.rounds,
        seed: args.seed,
        level: args.level,
        anchor: args.anchor.clone(),
        scale: Scale {
            scale: args.scale,
            base: args.base,
            init: args.init,
        },
        elo: EloParams {
            k: args.k,
            scale: args.scale,
            base: args.base,
            init: args.init,
        },
        style_control: args.style_control,
        fit: FitOptions {
            prior: args.prior,
            ..FitOptions::default()
        },
    };
    let lb = with_threads(args.threads, || rank(&b, &cfg))??;
    for w in &lb.warnings {
        eprintln!("warning: {w}");
    }
    let text = match args.format {
        Format::Markdown => lb.to_markdown(),
        Format::Csv => lb.to_csv(),
        Format::Json => lb.to_json(),
    };
    emit(args.output.as_deref(), &text)?;
    if let Some(p) = &args.plot {
        lb.plot(p)?;
    }
    Ok(())
}
