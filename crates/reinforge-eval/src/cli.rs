//! Command-line front ends: one clap `Args` struct and one `run_*` function per subcommand, for the
//! `reinforge` binary to wire as `reinforge rank|passk|stats|tournament`.

use crate::bt::{FitOptions, Scale};
use crate::elo::EloParams;
use crate::leaderboard::{rank, Method, RankConfig};
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Output format of tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// GitHub-flavoured markdown table.
    Markdown,
    /// Comma-separated values with a header row.
    Csv,
    /// Pretty-printed JSON.
    Json,
}

/// Writes `text` to `path`, or to stdout when `path` is `None`.
pub(crate) fn emit(path: Option<&Path>, text: &str) -> Result<()> {
    match path {
        Some(p) => {
            if let Some(d) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            }
            std::fs::write(p, text).with_context(|| format!("writing {}", p.display()))
        }
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())?;
            out.flush()?;
            Ok(())
        }
    }
}

/// Runs `f` on a rayon pool of `threads` threads (all cores when `None`).
pub(crate) fn with_threads<T: Send>(
    threads: Option<usize>,
    f: impl FnOnce() -> T + Send,
) -> Result<T> {
    match threads {
        None => Ok(f()),
        Some(n) => Ok(rayon::ThreadPoolBuilder::new()
            .num_threads(n.max(1))
            .build()?
            .install(f)),
    }
}

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
    #[arg(long, value_enum, default_value_t = Method::Bt)]
    pub method: Method,
    /// Bootstrap rounds for the intervals (0 = none).
    #[arg(long, default_value_t = 1000)]
    pub rounds: usize,
    /// Bootstrap seed (results do not depend on the thread count).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Central interval level.
    #[arg(long, default_value_t = 0.95)]
    pub level: f64,
    /// Pin one model's rating, e.g. --anchor "mixtral-8x7b-instruct-v0.1=1114"; default: mean rating = --init.
    #[arg(long, value_parser = parse_anchor)]
    pub anchor: Option<(String, f64)>,
    /// Rating points per factor --base of odds.
    #[arg(long, default_value_t = 400.0)]
    pub scale: f64,
    /// Odds base of the rating scale.
    #[arg(long, default_value_t = 10.0)]
    pub base: f64,
    /// Mean rating (without --anchor) and online-Elo starting rating.
    #[arg(long, default_value_t = 1000.0)]
    pub init: f64,
    /// Online Elo K factor.
    #[arg(long, default_value_t = 4.0)]
    pub k: f64,
    /// FastChat style control (length, headers, lists, bold as covariates; BT only).
    #[arg(long)]
    pub style_control: bool,
    /// L2 penalty on log-strengths (0 = exact MLE); keeps ratings finite for undefeated models.
    #[arg(long, default_value_t = 0.0)]
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
    #[arg(long)]
    pub threads: Option<usize>,
}

/// Runs `rank`: reads battles, computes the leaderboard, writes the table (and plot).
pub fn run_rank(args: &RankArgs) -> Result<()> {
    let b = crate::io::read_battles(&args.input, args.style_control)?;
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
    if args.base <= 1.0 || args.scale <= 0.0 {
        bail!("--base must be > 1 and --scale > 0");
    }
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

/// pass@k and maj@k curves (k = 1, 2, 4, ...) with bootstrap intervals over problems.
///
/// Input lines carry "problem" (string or number) plus one of: "n" and "c" (sample and correct counts);
/// "correct" (one sample, optional "answer" for maj@k); or "verdicts" (all samples, optional parallel
/// "answers"). pass@k is Chen et al.'s unbiased estimator in its stable product form; maj@k is exact
/// (majority answer among k samples drawn without replacement, ties split evenly) and is reported only
/// when every problem has answers.
#[derive(Debug, Clone, Args)]
pub struct PassKArgs {
    /// Samples JSONL file.
    #[arg(long, short)]
    pub input: PathBuf,
    /// k values (comma separated); default 1, 2, 4, ... up to the smallest n.
    #[arg(long, value_delimiter = ',')]
    pub k: Vec<u64>,
    /// Bootstrap rounds over problems.
    #[arg(long, default_value_t = 2000)]
    pub rounds: usize,
    /// Bootstrap seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Central interval level.
    #[arg(long, default_value_t = 0.95)]
    pub level: f64,
    /// Table format.
    #[arg(long, value_enum, default_value_t = Format::Markdown)]
    pub format: Format,
    /// Write the table here instead of stdout.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// Also write a PNG of the curves (log2 k axis) here.
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

/// Runs `passk`.
pub fn run_passk(args: &PassKArgs) -> Result<()> {
    let f = std::fs::File::open(&args.input)
        .with_context(|| format!("opening {}", args.input.display()))?;
    let problems = crate::samples::parse_samples(
        std::io::BufReader::new(f),
        &args.input.display().to_string(),
    )?;
    if problems.is_empty() {
        bail!("{}: no problems", args.input.display());
    }
    let ks = if args.k.is_empty() {
        crate::samples::default_ks(&problems)
    } else {
        args.k.clone()
    };
    let pass = crate::samples::pass_table(&problems, &ks)?;
    let pass_curve =
        crate::samples::mean_with_intervals(&pass, &ks, args.rounds, args.seed, args.level);
    let maj_curve = if problems.iter().all(|p| !p.answers.is_empty()) {
        let t: Vec<Vec<f64>> = problems
            .iter()
            .map(|p| {
                ks.iter()
                    .map(|&k| crate::samples::maj_at_k(p, k).unwrap_or(f64::NAN))
                    .collect()
            })
            .collect();
        Some(crate::samples::mean_with_intervals(
            &t,
            &ks,
            args.rounds,
            args.seed ^ 0x6d616a,
            args.level,
        ))
    } else {
        None
    };
    let text = match args.format {
        Format::Json => serde_json::to_string_pretty(&serde_json::json!({
            "problems": problems.len(), "level": args.level, "rounds": args.rounds,
            "pass_at_k": pass_curve, "maj_at_k": maj_curve,
        }))?,
        Format::Csv => {
            let mut s = String::from("metric,k,value,lower,upper\n");
            for (name, c) in [("pass", Some(&pass_curve)), ("maj", maj_curve.as_ref())] {
                for p in c.into_iter().flatten() {
                    s += &format!("{name}@k,{},{},{},{}\n", p.k, p.value, p.lower, p.upper);
                }
            }
            s
        }
        Format::Markdown => {
            let pct = (args.level * 100.0).round();
            let mut s = format!("{} problems; {pct}% bootstrap intervals over problems ({} rounds)\n\n| k | pass@k | interval |", problems.len(), args.rounds);
            s += if maj_curve.is_some() {
                " maj@k | interval |\n|---:|---:|---|---:|---|\n"
            } else {
                "\n|---:|---:|---|\n"
            };
            for (i, p) in pass_curve.iter().enumerate() {
                s += &format!(
                    "| {} | {:.4} | {:.4} – {:.4} |",
                    p.k, p.value, p.lower, p.upper
                );
                if let Some(m) = &maj_curve {
                    s += &format!(
                        " {:.4} | {:.4} – {:.4} |",
                        m[i].value, m[i].lower, m[i].upper
                    );
                }
                s += "\n";
            }
            s
        }
    };
    emit(args.output.as_deref(), &text)?;
    if let Some(p) = &args.plot {
        let to_series =
            |name: &str, c: &[crate::samples::CurvePoint]| reinforge_plot::IntervalSeries {
                name: name.to_string(),
                points: c
                    .iter()
                    .map(|q| (q.k as f64, q.value, q.lower, q.upper))
                    .collect(),
            };
        let mut series = vec![to_series("pass@k", &pass_curve)];
        if let Some(m) = &maj_curve {
            series.push(to_series("maj@k", m));
        }
        reinforge_plot::line_chart_with_intervals(
            p,
            &format!("pass@k over {} problems", problems.len()),
            "k",
            "score",
            &series,
            true,
        )?;
    }
    Ok(())
}

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
    /// Bootstrap replications (rliable's get_interval_estimates default is 50000).
    #[arg(long, default_value_t = 2000)]
    pub reps: usize,
    /// Bootstrap seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Central interval level.
    #[arg(long, default_value_t = 0.95)]
    pub level: f64,
    /// Optimality-gap threshold gamma.
    #[arg(long, default_value_t = 1.0)]
    pub gamma: f64,
    /// Thresholds for performance profiles (comma separated); default 51 points over the score range.
    #[arg(long, value_delimiter = ',')]
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
pub fn run_stats(args: &StatsArgs) -> Result<()> {
    let report = crate::scores::stats_report(args)?;
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
