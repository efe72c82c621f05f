//! `reinforge tournament`: Swiss, single-elimination and round-robin schedules, replayed from
//! battles or simulated.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use reinforge_eval::tournament::sim::{self, SeedMode, StrengthDist};
use reinforge_eval::tournament::{ElimTiebreak, Scheme};

use super::{count, emit, non_negative, with_threads, ByName, Format};

/// `--target`: a Kendall tau-b, between -1 and 1.
fn tau(s: &str) -> Result<f64, String> {
    let v = super::finite(s)?;
    if (-1.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("must be a Kendall tau between -1 and 1, got {v}"))
    }
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
    #[arg(long, value_delimiter = ',', value_parser = ByName(&Scheme::ALL))]
    pub scheme: Vec<Scheme>,
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
    /// Number of simulated models (2 to 4096).
    #[arg(long, default_value_t = 16, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=4096))]
    pub models: usize,
    /// Swiss rounds. Oracle mode: one value (default ceil(log2 N) + 2, enough to separate the top and
    /// to order the field roughly). Simulation: the grid (default 1, 2, 3, 4, 5, 6, 8, 10, 12, 16, ...
    /// below N).
    #[arg(long, value_delimiter = ',', value_parser = count)]
    pub rounds: Vec<usize>,
    /// Comparisons per match (games per pair for round-robin); odd values avoid drawn matches. Oracle
    /// mode: one value; simulation: the grid. Default 1.
    #[arg(long, value_delimiter = ',', value_parser = count)]
    pub best_of: Vec<usize>,
    /// Oracle mode: pseudo-games from the fitted Rao-Kupper model added to every pair's recorded
    /// outcomes, so a pair seen once is not replayed as a certainty (0 = replay the counts exactly).
    #[arg(long, default_value_t = reinforge_eval::tournament::DEFAULT_PRIOR_GAMES, value_parser = non_negative)]
    pub prior_games: f64,
    /// Comparisons of random-bt in oracle mode (default: what the Swiss schedule would use).
    #[arg(long, value_parser = count)]
    pub comparisons: Option<usize>,
    /// Knockout seeding: random, or anchor (ArenaRL: one match of every model against an anchor model,
    /// seeds by result; costs N-1 extra matches).
    #[arg(long, value_parser = ByName(&SeedMode::ALL), default_value = "random")]
    pub seeding: SeedMode,
    /// Anchor model for --seeding anchor in oracle mode (default: the model with the median full-data
    /// Bradley-Terry rating, a typical reference answer).
    #[arg(long)]
    pub anchor: Option<String>,
    /// Knockout order among models eliminated in the same round: bt (Bradley-Terry fit of the games
    /// played) or seed.
    #[arg(long, value_parser = ByName(&ElimTiebreak::ALL), default_value = "bt")]
    pub tiebreak: ElimTiebreak,
    /// Simulated log-strengths: even (evenly spaced over --spread) or normal (sd --spread, redrawn per
    /// repeat).
    #[arg(long, value_parser = ByName(&StrengthDist::ALL), default_value = "even")]
    pub dist: StrengthDist,
    /// Range (even) or standard deviation (normal) of simulated natural-log strengths; 4 spans win
    /// probabilities from 0.98 (best vs worst) down to near 0.5 between neighbours.
    #[arg(long, default_value_t = 4.0, value_parser = non_negative)]
    pub spread: f64,
    /// Simulated ties: Rao-Kupper kappa (0 = no ties; 0.5 gives 24% ties between equal models).
    #[arg(long, default_value_t = 0.0, value_parser = non_negative)]
    pub tie_kappa: f64,
    /// Kendall tau-b target for the "comparisons needed" summary (simulation).
    #[arg(long, default_value_t = 0.9, value_parser = tau)]
    pub target: f64,
    /// Seed (results do not depend on the thread count).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Repetitions: Monte Carlo runs in oracle mode (default 20), runs per grid point in simulation
    /// (default 32).
    #[arg(long, value_parser = count)]
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
    #[arg(long, value_parser = count)]
    pub threads: Option<usize>,
}

/// Runs `tournament`: oracle mode with --input, simulation with --simulate.
pub fn run(args: &TournamentArgs) -> Result<()> {
    use reinforge_eval::tournament::{oracle, SchemeParams, Seeding};
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
    let b = reinforge_eval::io::read_battles(input, false)?;
    if b.is_empty() {
        bail!("{}: no battles", input.display());
    }
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
                None => reinforge_eval::tournament::BattleOracle::new(&b, args.seed).median_model(),
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
