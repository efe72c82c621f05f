//! `reinforge rank`: a leaderboard from pairwise battles.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;
use reinforge_eval::bt::{FitOptions, Scale};
use reinforge_eval::covariates::read::read_covariate_battles;
use reinforge_eval::covariates::{
    check_varies, features, with_transforms, CovariateSpec, Transform,
};
use reinforge_eval::elo::EloParams;
use reinforge_eval::leaderboard::{rank, Method, RankConfig};
use reinforge_eval::sandwich_board::{sandwich_leaderboard, SandwichConfig};

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

/// `--covariate NAME=FIELD_A,FIELD_B`.
fn parse_covariate(s: &str) -> Result<CovariateSpec, String> {
    CovariateSpec::parse(s).map_err(|e| e.to_string())
}

/// `--covariate-transform [NAME=]TRANSFORM`.
fn parse_transform(s: &str) -> Result<(Option<String>, Transform), String> {
    let (name, t) = match s.rsplit_once('=') {
        Some((n, t)) => (Some(n.trim().to_string()), t.trim()),
        None => (None, s.trim()),
    };
    let names: Vec<String> = Transform::ALL
        .iter()
        .map(|v| serde_json::to_value(v).map_or(String::new(), |j| j.as_str().unwrap_or("").into()))
        .collect();
    let i = names.iter().position(|n| n == t).ok_or_else(|| {
        format!(
            "unknown transform {t:?} (expected one of {})",
            names.join(", ")
        )
    })?;
    if name.as_deref() == Some("") {
        return Err(format!("expected [NAME=]TRANSFORM, got {s:?}"));
    }
    Ok((name, Transform::ALL[i]))
}

/// Leaderboard from pairwise battles (Chatbot Arena JSONL): Bradley-Terry, Rao-Kupper or online Elo,
/// with seeded multinomial-bootstrap intervals and interval-based ranks.
///
/// Input lines: {"model_a": "...", "model_b": "...", "winner": "model_a" | "model_b" | "tie" |
/// "tie (bothbad)"}; other fields are ignored. With --style-control each line also needs FastChat's
/// "conv_metadata" (sum_assistant_{a,b}_tokens, header_count_{a,b}, list_count_{a,b}, bold_count_{a,b}).
/// Malformed lines, unknown winners and self-battles are errors that name the line.
///
/// Covariates (Search Arena): --ci sandwich --covariate cites=conv_metadata.cites_a,conv_metadata.cites_b
/// fits the covariates jointly with the ratings (arena-rank's contextual model) and reports each
/// coefficient with its interval; the leaderboard is then controlled for them (docs/arena.md).
#[derive(Debug, Clone, Args)]
pub struct RankArgs {
    /// Battles JSONL file.
    #[arg(long, short)]
    pub input: PathBuf,
    /// Rating method: bt (ties = half wins, FastChat compute_bt), rao-kupper (ties modelled), elo (online, file order).
    #[arg(long, value_parser = ByName(&Method::ALL), default_value = "bt")]
    pub method: Method,
    /// Intervals: `bootstrap` (seeded multinomial resampling, FastChat) or `sandwich`
    /// (arena-rank's closed-form H⁻¹ G H⁻¹ in float64, BT only; with --style-control its
    /// contextual model, reweighted by default as arena-rank's).
    #[arg(long, value_enum, default_value_t = CiMethod::Bootstrap)]
    pub ci: CiMethod,
    /// Bootstrap rounds for the intervals (0 = none; at most 1000000).
    #[arg(long, default_value_t = 1000, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=1_000_000))]
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
    /// --ci sandwich: arena-rank's diagonal Hessian regulariser `hessian_reg` (plain BT scales
    /// it by the number of battles).
    #[arg(long, default_value_t = 1e-5, value_parser = non_negative)]
    pub hessian_reg: f64,
    /// --ci sandwich: inverse-propensity reweighting by model pair (`reweighted`; default off
    /// for plain BT, on with --style-control, as arena-rank's defaults).
    #[arg(long)]
    pub reweighted: Option<bool>,
    /// --ci sandwich --style-control / --covariate: L2 penalty `reg` on the coefficients (per
    /// standard deviation of each feature, arena-rank's default 1; 0 = unpenalised maximum likelihood).
    #[arg(long, default_value_t = 1.0, value_parser = non_negative)]
    pub reg: f64,
    /// A per-battle covariate NAME=FIELD_A,FIELD_B (repeatable; needs --ci sandwich): model A's and
    /// model B's numbers at dotted paths of each battle's JSON, e.g.
    /// cites=conv_metadata.cites_a,conv_metadata.cites_b. A value is a number, or an array or
    /// object of numbers that is summed (a multi-turn battle's per-turn counts).
    #[arg(long = "covariate", value_name = "NAME=FIELD_A,FIELD_B", value_parser = parse_covariate)]
    pub covariates: Vec<CovariateSpec>,
    /// How a covariate's pair (a, b) becomes its feature: diff-over-sum ((a-b)/(a+b), zero sum -> 1;
    /// the default), diff-over-sum-plus-one (FastChat's (a-b)/(a+b+1)), diff (a-b), log-ratio
    /// (ln(1+a) - ln(1+b)). TRANSFORM applies to every covariate, NAME=TRANSFORM to one (repeatable).
    #[arg(long = "covariate-transform", value_name = "[NAME=]TRANSFORM", value_parser = parse_transform)]
    pub covariate_transforms: Vec<(Option<String>, Transform)>,
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

/// How `rank` computes intervals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CiMethod {
    Bootstrap,
    Sandwich,
}

/// Runs `rank`: reads battles, computes the leaderboard, writes the table (and plot).
pub fn run(args: &RankArgs) -> Result<()> {
    if args.base <= 1.0 {
        bail!("--base must be > 1, got {}", args.base);
    }
    let (b, covariates) = if args.covariates.is_empty() {
        if !args.covariate_transforms.is_empty() {
            bail!("--covariate-transform needs --covariate");
        }
        let b = reinforge_eval::io::read_battles(&args.input, args.style_control)?;
        (b, None)
    } else {
        if args.ci != CiMethod::Sandwich {
            bail!("--covariate fits the contextual model of --ci sandwich; add --ci sandwich");
        }
        let specs = with_transforms(&args.covariates, &args.covariate_transforms)?;
        let c = read_covariate_battles(&args.input, args.style_control, &specs)?;
        let f = features(&specs, &c.raw, &c.lines)?;
        check_varies(&specs, &f)?;
        (c.battles, Some(f))
    };
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
    let lb = match args.ci {
        CiMethod::Bootstrap => with_threads(args.threads, || rank(&b, &cfg))??,
        CiMethod::Sandwich => {
            let s = SandwichConfig {
                hessian_reg: args.hessian_reg,
                reweighted: args.reweighted,
                reg: args.reg,
                covariate_names: args.covariates.iter().map(|c| c.name.clone()).collect(),
            };
            sandwich_leaderboard(&b, &cfg, &s, covariates.as_deref())?
        }
    };
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
