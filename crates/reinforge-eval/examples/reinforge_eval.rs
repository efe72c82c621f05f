//! Stand-alone driver for the evaluation subcommands (the `reinforge` binary wires the same `cli` functions)
//! plus the benchmark helpers used by `scripts/bench_rank.sh`. Pure Rust, no libtorch:
//! `cargo run --release -p reinforge-eval --example reinforge_eval -- rank --input battles.jsonl`.

use anyhow::Result;
use clap::{Parser, Subcommand};
use reinforge_eval::cli;
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
    /// Leaderboard from pairwise battles.
    Rank(cli::RankArgs),
    /// pass@k / maj@k curves.
    Passk(cli::PassKArgs),
    /// rliable aggregate statistics.
    Stats(cli::StatsArgs),
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
        Cmd::Rank(a) => cli::run_rank(&a),
        Cmd::Passk(a) => cli::run_passk(&a),
        Cmd::Stats(a) => cli::run_stats(&a),
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
