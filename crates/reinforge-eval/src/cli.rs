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

/// Tournaments: rank models from pairwise outcomes with a Swiss-system, seeded single-elimination or
/// round-robin schedule, and measure how many comparisons each schedule needs.
///
/// A tournament chooses *which* pairs to compare. Round-robin compares every pair (N(N-1)/2 per
/// repetition); a Swiss system plays R rounds of N/2 matches, pairing models with equal running scores
/// (LLM Swiss Round, arXiv:2512.21010); a seeded single-elimination bracket needs only N-1 matches and
/// ranks by the round a model was knocked out in (ArenaRL, arXiv:2601.06487). Each match is best of
/// --best-of comparisons, stopping once decided.
///
/// Oracle mode (--input battles.jsonl, Chatbot Arena layout as for `rank`): every comparison is drawn
/// from the recorded outcomes of that pair plus --prior-games pseudo-games from a Rao-Kupper fit of all
/// battles (the fit alone answers pairs that never met). The
/// tournament is repeated --repeats times; models are listed by mean position and compared with the
/// full-data Bradley-Terry leaderboard (Kendall tau-b). Example:
///   tournament --input battles.jsonl --scheme swiss --rounds 8 --repeats 100
///
/// Simulation mode (--simulate --models N): a judge with known Bradley-Terry strengths; every scheme in
/// --scheme (default: all) runs over a grid of budgets (--rounds x --best-of; random pairs + BT at the
/// same budgets), repeated --repeats times, reporting mean Kendall tau-b against the truth vs mean
/// comparisons, and the comparisons each scheme needed to reach --target. Example:
///   tournament --simulate --models 64 --best-of 1,3 --repeats 50 --plot tau.png
#[derive(Debug, Clone, Args)]
pub struct TournamentArgs {
    /// Scheme(s): swiss (points, then Buchholz), swiss-bt (Swiss pairings, Bradley-Terry ranking),
    /// single-elim (seeded knockout), round-robin (all pairs), random-bt (random pairs + Bradley-Terry).
    /// Oracle mode takes one (default swiss); simulation takes a comma-separated list (default all).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub scheme: Vec<crate::tournament::Scheme>,
    /// Battles JSONL file to replay as the judge (oracle mode).
    #[arg(
        long,
        short,
        required_unless_present = "simulate",
        conflicts_with = "simulate"
    )]
    pub input: Option<PathBuf>,
    /// Use a simulated judge with known strengths instead of --input.
    #[arg(long)]
    pub simulate: bool,
    /// Number of simulated models.
    #[arg(long, default_value_t = 16)]
    pub models: usize,
    /// Swiss rounds. Oracle mode: one value (default ceil(log2 N) + 2, enough to separate the top and
    /// to order the field roughly). Simulation: the grid (default 1, 2, 3, 4, 5, 6, 8, 10, 12, 16, ...
    /// below N).
    #[arg(long, value_delimiter = ',')]
    pub rounds: Vec<usize>,
    /// Comparisons per match (games per pair for round-robin); odd values avoid drawn matches. Oracle
    /// mode: one value; simulation: the grid. Default 1.
    #[arg(long, value_delimiter = ',')]
    pub best_of: Vec<usize>,
    /// Oracle mode: pseudo-games from the fitted Rao-Kupper model added to every pair's recorded
    /// outcomes, so a pair seen once is not replayed as a certainty (0 = replay the counts exactly).
    #[arg(long, default_value_t = crate::tournament::DEFAULT_PRIOR_GAMES)]
    pub prior_games: f64,
    /// Comparisons of random-bt in oracle mode (default: what the Swiss schedule would use).
    #[arg(long)]
    pub comparisons: Option<usize>,
    /// Knockout seeding: random, or anchor (ArenaRL: one match of every model against an anchor model,
    /// seeds by result; costs N-1 extra matches).
    #[arg(long, value_enum, default_value_t = crate::tournament::sim::SeedMode::Random)]
    pub seeding: crate::tournament::sim::SeedMode,
    /// Anchor model for --seeding anchor in oracle mode (default: the model with the median full-data
    /// Bradley-Terry rating, a typical reference answer).
    #[arg(long)]
    pub anchor: Option<String>,
    /// Knockout order among models eliminated in the same round: bt (Bradley-Terry fit of the games
    /// played) or seed.
    #[arg(long, value_enum, default_value_t = crate::tournament::ElimTiebreak::Bt)]
    pub tiebreak: crate::tournament::ElimTiebreak,
    /// Simulated log-strengths: even (evenly spaced over --spread) or normal (sd --spread, redrawn per
    /// repeat).
    #[arg(long, value_enum, default_value_t = crate::tournament::sim::StrengthDist::Even)]
    pub dist: crate::tournament::sim::StrengthDist,
    /// Range (even) or standard deviation (normal) of simulated natural-log strengths; 4 spans win
    /// probabilities from 0.98 (best vs worst) down to near 0.5 between neighbours.
    #[arg(long, default_value_t = 4.0)]
    pub spread: f64,
    /// Simulated ties: Rao-Kupper kappa (0 = no ties; 0.5 gives 24% ties between equal models).
    #[arg(long, default_value_t = 0.0)]
    pub tie_kappa: f64,
    /// Kendall tau-b target for the "comparisons needed" summary (simulation).
    #[arg(long, default_value_t = 0.9)]
    pub target: f64,
    /// Seed (results do not depend on the thread count).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Repetitions: Monte Carlo runs in oracle mode (default 20), runs per grid point in simulation
    /// (default 32).
    #[arg(long)]
    pub repeats: Option<usize>,
    /// Table format.
    #[arg(long, value_enum, default_value_t = Format::Markdown)]
    pub format: Format,
    /// Write the table here instead of stdout.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// Also write a PNG: Kendall tau vs comparisons per scheme (simulation), or each model's position
    /// range over repetitions (oracle mode).
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Worker threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
}

/// Runs `tournament`: oracle mode with --input, simulation with --simulate.
pub fn run_tournament(args: &TournamentArgs) -> Result<()> {
    use crate::tournament::{oracle, sim, Scheme, SchemeParams, Seeding};
    if args.best_of.contains(&0) || args.rounds.contains(&0) {
        bail!("--rounds and --best-of values must be >= 1");
    }
    if !(args.prior_games.is_finite() && args.prior_games >= 0.0) {
        bail!("--prior-games must be finite and >= 0");
    }
    if args.simulate {
        let cfg = sim::SimConfig {
            n_models: args.models,
            dist: args.dist,
            spread: args.spread,
            tie_kappa: args.tie_kappa,
            schemes: if args.scheme.is_empty() {
                sim::SimConfig::default().schemes
            } else {
                args.scheme.clone()
            },
            rounds: args.rounds.clone(),
            best_of: args.best_of.clone(),
            repeats: args.repeats.unwrap_or(32),
            seed: args.seed,
            seeding: args.seeding,
            tiebreak: args.tiebreak,
            target: args.target,
        };
        let report = with_threads(args.threads, || sim::simulate(&cfg))??;
        let text = match args.format {
            Format::Markdown => report.to_markdown(),
            Format::Csv => report.to_csv(),
            Format::Json => report.to_json(),
        };
        emit(args.output.as_deref(), &text)?;
        if let Some(p) = &args.plot {
            report.plot(p)?;
        }
        return Ok(());
    }
    let Some(input) = &args.input else {
        bail!("give --input battles.jsonl or --simulate");
    };
    let scheme = match args.scheme.as_slice() {
        [] => Scheme::Swiss,
        [s] => *s,
        _ => bail!("oracle mode runs one --scheme at a time"),
    };
    if args.rounds.len() > 1 || args.best_of.len() > 1 {
        bail!("oracle mode takes one --rounds and one --best-of value (grids are for --simulate)");
    }
    let b = crate::io::read_battles(input, false)?;
    let n = b.models.len();
    let rounds = args
        .rounds
        .first()
        .copied()
        .unwrap_or((n.max(2) as f64).log2().ceil() as usize + 2);
    let best_of = args.best_of.first().copied().unwrap_or(1);
    let seeding =
        match args.seeding {
            sim::SeedMode::Random => Seeding::Random,
            sim::SeedMode::Anchor => Seeding::Anchor(match &args.anchor {
                Some(name) => b.models.iter().position(|m| m == name).with_context(|| {
                    format!("anchor model {name:?} does not appear in the battles")
                })?,
                None => {
                    let oracle = crate::tournament::BattleOracle::new(&b, args.seed);
                    let beta = oracle.beta();
                    let mut order: Vec<usize> = (0..n).collect();
                    order.sort_by(|&x, &y| beta[y].total_cmp(&beta[x]));
                    order[n / 2]
                }
            }),
        };
    let cfg = oracle::OracleConfig {
        scheme,
        params: SchemeParams {
            rounds,
            best_of,
            budget: args.comparisons.unwrap_or(rounds * (n / 2) * best_of),
            seeding,
            tiebreak: args.tiebreak,
        },
        repeats: args.repeats.unwrap_or(20),
        seed: args.seed,
        prior_games: args.prior_games,
    };
    let report = with_threads(args.threads, || oracle::run_oracle(&b, &cfg))??;
    let text = match args.format {
        Format::Markdown => report.to_markdown(),
        Format::Csv => report.to_csv(),
        Format::Json => report.to_json(),
    };
    emit(args.output.as_deref(), &text)?;
    if let Some(p) = &args.plot {
        report.plot(p)?;
    }
    Ok(())
}
