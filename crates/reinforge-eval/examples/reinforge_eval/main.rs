//! Benchmark driver for `scripts/bench_rank.sh` and `scripts/bench_stats.sh`, pure Rust (no
//! libtorch): synthetic battles, timed `rank` fits, and `stats` as JSON. The user-facing commands
//! are `reinforge rank|passk|stats|tournament`.

mod bench;

use anyhow::Result;
use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "reinforge-eval",
    about = "Leaderboards, pass@k, rliable statistics and tournaments"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// rliable aggregate statistics as JSON (what `reinforge stats --format json` prints).
    Stats {
        /// Scores JSONL.
        #[arg(long)]
        input: PathBuf,
        /// Bootstrap replications.
        #[arg(long, default_value_t = 2000)]
        reps: usize,
        /// Profile thresholds (comma separated).
        #[arg(long, value_delimiter = ',')]
        taus: Vec<f64>,
        /// Output format: json only (accepted for command-line parity with `reinforge stats`).
        #[arg(long, default_value = "json", value_parser = ["json"])]
        format: String,
    },
    /// Generate synthetic battles as JSONL (benchmark input).
    GenBattles {
        /// Output JSONL path.
        #[arg(long)]
        output: PathBuf,
        /// Number of models.
        #[arg(long, default_value_t = 100)]
        models: usize,
        /// Number of battles.
        #[arg(long, default_value_t = 1_000_000)]
        battles: usize,
        /// Seed.
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
    /// Generate Search Arena battles with known ratings and covariate effects (docs/arena.md).
    GenSearchBattles {
        /// Output JSONL path.
        #[arg(long)]
        output: PathBuf,
        /// Number of models (weakest first: m00, m01, ...).
        #[arg(long, default_value_t = 10)]
        models: usize,
        /// Number of battles.
        #[arg(long, default_value_t = 20_000)]
        battles: usize,
        /// Strongest minus weakest strength, natural log-odds.
        #[arg(long, default_value_t = 1.5)]
        spread: f64,
        /// Largest number of turns per battle (counts written per turn when > 1).
        #[arg(long, default_value_t = 1)]
        max_turns: usize,
        /// Covariate NAME=EFFECT,MEAN_WEAKEST,MEAN_STRONGEST (repeatable; default cites=2,6,1).
        #[arg(long)]
        covariate: Vec<String>,
        /// Seed.
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
    /// Time parse + aggregate + BT fit + bootstrap on a battles file; prints JSON.
    BenchRank {
        /// Battles JSONL.
        #[arg(long)]
        input: PathBuf,
        /// Bootstrap rounds.
        #[arg(long, default_value_t = 1000)]
        rounds: usize,
        /// Repetitions of the single fit timing (best of).
        #[arg(long, default_value_t = 5)]
        fit_reps: usize,
    },
    /// arena-rank's BT fit with sandwich intervals as JSON (`scripts/check_sandwich.py`).
    Sandwich {
        /// Battles JSONL.
        #[arg(long)]
        input: PathBuf,
        /// Contextual BT on the lmarena example's style features (needs `conv_metadata`).
        #[arg(long)]
        style: bool,
        /// arena-rank's inverse-propensity reweighting by pair.
        #[arg(long)]
        reweighted: bool,
        /// Floor of the pair count in the reweighting.
        #[arg(long, default_value_t = 50.0)]
        min_pair_count: f64,
        /// Contextual L2 penalty on the coefficients.
        #[arg(long, default_value_t = 1.0)]
        reg: f64,
        /// Covariates NAME=FIELD_A,FIELD_B (contextual BT on them, after the style features if any).
        #[arg(long)]
        covariate: Vec<String>,
        /// JSON object {model: natural-log-odds rating}: intervals at these ratings, no fit (plain BT).
        #[arg(long)]
        at: Option<PathBuf>,
        /// Repetitions of the timed fit (best of; the battles are in memory).
        #[arg(long, default_value_t = 1)]
        reps: usize,
    },
    /// PPE reward-model metrics of a scores JSONL as JSON (`scripts/check_ppe.py`).
    Ppe {
        /// Correctness scores JSONL (see `reinforge_eval::ppe`).
        #[arg(long)]
        correctness: Option<PathBuf>,
        /// Human-preference pairs JSONL (see `reinforge_eval::ppe`).
        #[arg(long)]
        preference: Option<PathBuf>,
        /// Bootstrap rounds for the leaderboards' intervals (0 = arena-rank's sandwich intervals).
        #[arg(long, default_value_t = 0)]
        bootstrap_rounds: usize,
    },
    /// RewardBench 2 scores of a scores JSONL as JSON (`scripts/check_rewardbench2.py`).
    Rewardbench2 {
        /// Scores JSONL, one line per prompt (see `reinforge_eval::rewardbench2`).
        #[arg(long)]
        input: PathBuf,
    },
}

fn main() -> Result<()> {
    match Cli::parse().cmd {
        Cmd::Stats {
            input, reps, taus, ..
        } => {
            anyhow::ensure!(reps >= 1, "--reps must be at least 1");
            let set = reinforge_eval::scores::read_scores(&input)?;
            let report = reinforge_eval::scores::compute(&set, reps, 0, 0.95, 1.0, &taus);
            println!("{}", serde_json::to_string_pretty(&report)?);
            Ok(())
        }
        Cmd::GenBattles {
            output,
            models,
            battles,
            seed,
        } => {
            let b = bench::synthetic_battles(models, battles, seed);
            bench::write_battles_jsonl(&b, &output)
        }
        Cmd::GenSearchBattles {
            output,
            models,
            battles,
            spread,
            max_turns,
            covariate,
            seed,
        } => {
            use reinforge_eval::covariates::sim::{simulate, SearchSim, SimCovariate};
            let mut sim = SearchSim {
                models,
                battles,
                spread,
                max_turns,
                seed,
                ..SearchSim::default()
            };
            if !covariate.is_empty() {
                sim.covariates = covariate
                    .iter()
                    .map(|c| {
                        let (name, rest) = c.split_once('=').ok_or_else(|| {
                            anyhow::anyhow!(
                                "expected NAME=EFFECT,MEAN_WEAKEST,MEAN_STRONGEST, got {c:?}"
                            )
                        })?;
                        let v = rest
                            .split(',')
                            .map(|x| x.trim().parse::<f64>())
                            .collect::<Result<Vec<f64>, _>>()
                            .map_err(|e| anyhow::anyhow!("{c:?}: {e}"))?;
                        anyhow::ensure!(
                            v.len() == 3,
                            "expected NAME=EFFECT,MEAN_WEAKEST,MEAN_STRONGEST, got {c:?}"
                        );
                        Ok(SimCovariate {
                            name: name.to_string(),
                            effect: v[0],
                            mean_weakest: v[1],
                            mean_strongest: v[2],
                        })
                    })
                    .collect::<Result<Vec<_>>>()?;
            }
            let s = simulate(&sim)?;
            std::fs::write(&output, s.to_jsonl())?;
            let truth: Vec<serde_json::Value> = s
                .models
                .iter()
                .zip(&s.strengths)
                .map(|(m, x)| serde_json::json!({"model": m, "strength": x, "rating": 1000.0 + 400.0 / 10f64.ln() * x}))
                .collect();
            println!(
                "{}",
                serde_json::to_string_pretty(
                    &serde_json::json!({"truth": truth, "effects": sim.covariates.iter().map(|c| (c.name.clone(), c.effect)).collect::<Vec<_>>()})
                )?
            );
            Ok(())
        }
        Cmd::BenchRank {
            input,
            rounds,
            fit_reps,
        } => {
            let t = std::time::Instant::now();
            let b = reinforge_eval::io::read_battles(&input, false)?;
            let parse_s = t.elapsed().as_secs_f64();
            // Best-of timing of a single fit from the in-memory battle arrays (aggregation included).
            let mut single = f64::INFINITY;
            for _ in 0..fit_reps.max(1) {
                let t = bench::time_rank(&b, 0, 0, None);
                single = single.min(t.aggregate_s + t.fit_s);
            }
            let timings = bench::time_rank(&b, rounds, 0, Some(parse_s));
            let mut v = serde_json::to_value(&timings)?;
            v["single_fit_incl_aggregation_best_s"] = serde_json::json!(single);
            println!("{}", serde_json::to_string(&v)?);
            Ok(())
        }
        Cmd::Sandwich {
            input,
            style,
            reweighted,
            min_pair_count,
            reg,
            covariate,
            at,
            reps,
        } => {
            let o = reinforge_eval::sandwich::ArenaOptions {
                reweighted,
                min_pair_count,
                reg,
                ..Default::default()
            };
            sandwich(&input, style, &covariate, o, at, reps)
        }
        Cmd::Ppe {
            correctness,
            preference,
            bootstrap_rounds,
        } => {
            let mut out = serde_json::Map::new();
            if let Some(p) = correctness {
                let data = reinforge_eval::ppe::read_correctness(&p)?;
                let r = reinforge_eval::ppe::correctness_metrics(&data)?;
                out.insert("correctness".into(), serde_json::to_value(r)?);
            }
            if let Some(p) = preference {
                let data = reinforge_eval::ppe::read_preferences(&p)?;
                let opts = reinforge_eval::ppe::PreferenceOptions {
                    intervals: if bootstrap_rounds > 0 {
                        reinforge_eval::ppe::Intervals::Bootstrap {
                            rounds: bootstrap_rounds,
                            seed: 0,
                        }
                    } else {
                        reinforge_eval::ppe::Intervals::Sandwich
                    },
                    ..Default::default()
                };
                let r = reinforge_eval::ppe::preference_metrics(&data, &opts)?;
                out.insert("preference".into(), serde_json::to_value(r)?);
            }
            println!("{}", serde_json::to_string_pretty(&out)?);
            Ok(())
        }
        Cmd::Rewardbench2 { input } => {
            let rows = reinforge_eval::rewardbench2::read_scores(&input)?;
            let r = reinforge_eval::rewardbench2::score(&rows)?;
            println!("{}", serde_json::to_string_pretty(&r)?);
            Ok(())
        }
    }
}

fn sandwich(
    input: &std::path::Path,
    style: bool,
    covariate: &[String],
    o: reinforge_eval::sandwich::ArenaOptions,
    at: Option<PathBuf>,
    reps: usize,
) -> Result<()> {
    use reinforge_eval::covariates::{features, read::read_covariate_battles, CovariateSpec};
    use reinforge_eval::sandwich::{
        arena_style_features, coefficient_table, sandwich_bt, sandwich_bt_at, sandwich_contextual,
    };
    let specs = covariate
        .iter()
        .map(|s| CovariateSpec::parse(s))
        .collect::<Result<Vec<_>>>()?;
    let (b, cov) = if specs.is_empty() {
        let b = reinforge_eval::io::read_battles(input, style)?;
        let n = b.len();
        (b, vec![vec![]; n])
    } else {
        let c = read_covariate_battles(input, style, &specs)?;
        let cov = features(&specs, &c.raw, &c.lines)?;
        (c.battles, cov)
    };
    // Style features first, then the covariates (as `reinforge rank` orders them).
    let contextual_features = || -> Result<Vec<Vec<f64>>> {
        let mut f = if style {
            arena_style_features(&b)?
        } else {
            vec![vec![]; b.len()]
        };
        for (row, x) in f.iter_mut().zip(&cov) {
            row.extend(x);
        }
        Ok(f)
    };
    let mut best = f64::INFINITY;
    let mut board = None;
    for _ in 0..reps.max(1) {
        let t = std::time::Instant::now();
        let r = if let Some(path) = &at {
            let text = std::fs::read_to_string(path)?;
            let m: std::collections::HashMap<String, f64> = serde_json::from_str(&text)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            let beta = b
                .models
                .iter()
                .map(|name| {
                    m.get(name).copied().ok_or_else(|| {
                        anyhow::anyhow!("{}: no rating for {name:?}", path.display())
                    })
                })
                .collect::<Result<Vec<f64>>>()?;
            sandwich_bt_at(&b, &beta, &o)?
        } else if style || !specs.is_empty() {
            sandwich_contextual(&b, &contextual_features()?, &o)?
        } else {
            sandwich_bt(&b, &o)?
        };
        best = best.min(t.elapsed().as_secs_f64());
        board = Some(r);
    }
    let board = board.expect("at least one repetition");
    let names: Vec<String> = (0..board.coefficients.len())
        .map(|i| format!("f{i}"))
        .collect();
    let table = coefficient_table(&board, &names, &o)?;
    let mut v = serde_json::to_value(board)?;
    v["coefficient_table"] = serde_json::to_value(table)?;
    v["fit_with_intervals_best_s"] = serde_json::json!(best);
    println!("{}", serde_json::to_string(&v)?);
    Ok(())
}
