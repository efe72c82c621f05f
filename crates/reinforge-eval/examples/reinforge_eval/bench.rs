//! Synthetic workloads and timers behind `scripts/bench_rank.sh` (the reference libraries are timed on
//! the same generated data in the same run by `scripts/bench_rank.py`).

use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, StandardNormal};
use reinforge_eval::bootstrap::bootstrap_bt;
use reinforge_eval::bt::{fit_bt, FitOptions, OutcomeRows, RowToPair};
use reinforge_eval::io::{Battles, Outcome};
use serde::Serialize;
use std::io::Write;
use std::time::Instant;

/// Generates `n_battles` battles among `n_models` models with Bradley-Terry strengths ~ N(0, 1)
/// (about 174 Elo standard deviation), Davidson-style ties (about 30 %) and uniformly random pairs.
pub fn synthetic_battles(n_models: usize, n_battles: usize, seed: u64) -> Battles {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let strength: Vec<f64> = (0..n_models)
        .map(|_| StandardNormal.sample(&mut rng))
        .collect();
    let names: Vec<String> = (0..n_models).map(|i| format!("model-{i:03}")).collect();
    let mut b = Battles {
        models: names,
        ..Battles::default()
    };
    b.a.reserve(n_battles);
    b.b.reserve(n_battles);
    b.outcome.reserve(n_battles);
    for _ in 0..n_battles {
        let i = rng.gen_range(0..n_models);
        let mut j = rng.gen_range(0..n_models - 1);
        if j >= i {
            j += 1;
        }
        let d = strength[i] - strength[j];
        let (pa, pb) = (
            1.0 / (1.0 + (-(d - 0.6)).exp()),
            1.0 / (1.0 + (-(-d - 0.6)).exp()),
        );
        let u: f64 = rng.gen();
        b.a.push(i as u32);
        b.b.push(j as u32);
        b.outcome.push(if u < pa {
            Outcome::AWins
        } else if u < pa + pb {
            Outcome::BWins
        } else {
            Outcome::Tie
        });
    }
    b
}

/// Writes battles as Arena JSONL.
pub fn write_battles_jsonl(b: &Battles, path: &std::path::Path) -> anyhow::Result<()> {
    let f = std::fs::File::create(path)?;
    let mut w = std::io::BufWriter::new(f);
    for i in 0..b.len() {
        let label = match b.outcome[i] {
            Outcome::AWins => "model_a",
            Outcome::BWins => "model_b",
            Outcome::Tie => "tie",
        };
        writeln!(
            w,
            "{{\"model_a\":\"{}\",\"model_b\":\"{}\",\"winner\":\"{}\"}}",
            b.models[b.a[i] as usize], b.models[b.b[i] as usize], label
        )?;
    }
    w.flush()?;
    Ok(())
}

/// Timings of one `rank`-style run, in seconds.
#[derive(Debug, Clone, Serialize)]
pub struct RankTimings {
    /// Battles.
    pub n_battles: usize,
    /// Models.
    pub n_models: usize,
    /// Unique (a, b, outcome) rows.
    pub n_rows: usize,
    /// Bootstrap rounds.
    pub rounds: usize,
    /// Rayon threads.
    pub threads: usize,
    /// Parsing the JSONL file (when one was given).
    pub parse_s: Option<f64>,
    /// Deduplication into rows and pair aggregation.
    pub aggregate_s: f64,
    /// Point fit (Newton, from zero).
    pub fit_s: f64,
    /// Newton iterations of the point fit.
    pub fit_iterations: usize,
    /// All bootstrap rounds.
    pub bootstrap_s: f64,
    /// aggregate + fit + bootstrap (excludes parsing).
    pub total_s: f64,
    /// Peak resident memory of the process (VmHWM), MiB.
    pub peak_rss_mib: Option<f64>,
}

/// Peak resident set size of this process in MiB (Linux `/proc/self/status` VmHWM).
pub fn peak_rss_mib() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// Times aggregation, the point fit and `rounds` bootstrap refits on in-memory battles.
pub fn time_rank(b: &Battles, rounds: usize, seed: u64, parse_s: Option<f64>) -> RankTimings {
    let opts = FitOptions::default();
    let t0 = Instant::now();
    let rows = OutcomeRows::from_battles(b);
    let table = RowToPair::new(&rows).aggregate(&rows.count);
    let aggregate_s = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let fit = fit_bt(&table, None, &opts);
    let fit_s = t1.elapsed().as_secs_f64();
    let t2 = Instant::now();
    let boot = bootstrap_bt(&rows, &fit.beta, rounds, seed, &opts);
    let bootstrap_s = t2.elapsed().as_secs_f64();
    assert_eq!(boot.len(), rounds);
    RankTimings {
        n_battles: b.len(),
        n_models: b.models.len(),
        n_rows: rows.len(),
        rounds,
        threads: rayon::current_num_threads(),
        parse_s,
        aggregate_s,
        fit_s,
        fit_iterations: fit.iterations,
        bootstrap_s,
        total_s: aggregate_s + fit_s + bootstrap_s,
        peak_rss_mib: peak_rss_mib(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_data_and_timer_are_consistent() {
        let b = synthetic_battles(12, 20_000, 3);
        assert_eq!(b.len(), 20_000);
        assert!(b.a.iter().zip(&b.b).all(|(x, y)| x != y));
        let ties = b.outcome.iter().filter(|o| **o == Outcome::Tie).count() as f64 / 20_000.0;
        assert!((0.15..0.45).contains(&ties), "{ties}");
        let t = time_rank(&b, 10, 1, None);
        assert_eq!((t.n_models, t.rounds), (12, 10));
        assert!(t.n_rows <= 12 * 11 * 3 && t.fit_iterations > 0);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("b.jsonl");
        write_battles_jsonl(&b, &p).unwrap();
        let back = reinforge_eval::io::read_battles(&p, false).unwrap();
        assert_eq!(back.len(), b.len());
        assert_eq!(back.outcome, b.outcome);
    }
}
