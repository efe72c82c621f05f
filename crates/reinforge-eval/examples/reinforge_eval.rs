//! Benchmark driver for `scripts/bench_rank.sh` and `scripts/bench_stats.sh`, pure Rust (no
//! libtorch): synthetic battles, timed `rank` fits, and `stats` as JSON. The user-facing commands
//! are `reinforge rank|passk|stats|tournament`.

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
            let b = reinforge_eval::bench::synthetic_battles(models, battles, seed);
            reinforge_eval::bench::write_battles_jsonl(&b, &output)
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
                let t = reinforge_eval::bench::time_rank(&b, 0, 0, None);
                single = single.min(t.aggregate_s + t.fit_s);
            }
            let timings = reinforge_eval::bench::time_rank(&b, rounds, 0, Some(parse_s));
            let mut v = serde_json::to_value(&timings)?;
            v["single_fit_incl_aggregation_best_s"] = serde_json::json!(single);
            println!("{}", serde_json::to_string(&v)?);
            Ok(())
        }
    }
}
