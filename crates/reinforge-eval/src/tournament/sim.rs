//! Simulation: how many comparisons does each scheme need to recover a known ranking?
//!
//! For `N` players with known Bradley-Terry log-strengths (evenly spaced, or drawn normal), every scheme
//! runs on a grid of budgets (Swiss rounds x best-of, knockout best-of, round-robin games per pair, and
//! random pairs + BT at the budgets the other schemes used), repeated over seeds. Each run is scored by
//! Kendall's tau-b between its ranking and the truth, and by whether it put the true best first. This is
//! the Monte Carlo protocol of Sziklai, Csató & Biró, "The efficacy of tournament designs" (2022), with
//! the ArenaRL question (arXiv:2601.06487: how close does an `O(N)` bracket get to the `O(N^2)`
//! round-robin?) as the x axis.
//!
//! Determinism: repeat `r` draws its strengths from stream `r` of the seed, and each (setting, repeat)
//! run has its own ChaCha8 stream, so results do not depend on the thread count. Strengths are assigned
//! to player ids in a random order, so no id-based tie-break can leak the true ranking.

use super::{
    kendall_tau_b, run_scheme, BtJudge, ElimTiebreak, Scheme, SchemeParams, Seeding,
    TournamentResult,
};
use crate::bootstrap::round_rng;
use anyhow::{bail, Result};
use rand::seq::SliceRandom;
use rand::Rng;
use rayon::prelude::*;
use serde::Serialize;
use std::path::Path;

/// How the known log-strengths are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StrengthDist {
    /// Evenly spaced over `[-spread/2, spread/2]` (every neighbour gap equal: a clean difficulty knob).
    Even,
    /// Drawn `Normal(0, spread)` per repeat (a realistic population with near-ties).
    Normal,
}

impl StrengthDist {
    /// Every variant, in declaration order (front ends list them by their serde names).
    pub const ALL: [Self; 2] = [Self::Even, Self::Normal];
}

/// Knockout seeding used in simulations (random, or ArenaRL's anchor with a random anchor player).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SeedMode {
    /// Random bracket.
    Random,
    /// Seed by one match against an anchor player (ArenaRL); costs `n - 1` extra matches.
    Anchor,
}

impl SeedMode {
    /// Every variant, in declaration order (front ends list them by their serde names).
    pub const ALL: [Self; 2] = [Self::Random, Self::Anchor];
}

/// Simulation settings. Random-bt runs at the (rounded) mean comparison counts of the other schemes'
/// grid points, merging counts within 8% of each other.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// Number of players.
    pub n_models: usize,
    /// Strength layout.
    pub dist: StrengthDist,
    /// Range (even) or standard deviation (normal) of the natural-log strengths.
    pub spread: f64,
    /// Rao-Kupper tie parameter of the simulated judge (0 = no ties).
    pub tie_kappa: f64,
    /// Schemes to run (random-bt reuses the budgets of the others).
    pub schemes: Vec<Scheme>,
    /// Swiss round counts; empty = [`default_rounds`].
    pub rounds: Vec<usize>,
    /// Best-of values (games per pair for round-robin); empty = `[1]`.
    pub best_of: Vec<usize>,
    /// Repetitions per setting.
    pub repeats: usize,
    /// Master seed.
    pub seed: u64,
    /// Knockout seeding.
    pub seeding: SeedMode,
    /// Knockout order within an elimination round.
    pub tiebreak: ElimTiebreak,
    /// Kendall-tau target for the "comparisons needed" summary.
    pub target: f64,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            n_models: 16,
            dist: StrengthDist::Even,
            spread: 4.0,
            tie_kappa: 0.0,
            schemes: vec![
                Scheme::Swiss,
                Scheme::SwissBt,
                Scheme::SingleElim,
                Scheme::RoundRobin,
                Scheme::RandomBt,
            ],
            rounds: vec![],
            best_of: vec![1],
            repeats: 32,
            seed: 0,
            seeding: SeedMode::Random,
            tiebreak: ElimTiebreak::Bt,
            target: 0.9,
        }
    }
}

/// Swiss round counts tried by default: 1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, ... below `n`.
pub fn default_rounds(n: usize) -> Vec<usize> {
    let mut r = vec![1, 2, 3, 4, 5, 6];
    let mut x = 8;
    while x < n {
        r.push(x);
        r.push(x + x / 4);
        r.push(x + x / 2);
        x *= 2;
    }
    r.retain(|&v| v < n.max(2));
    r.sort_unstable();
    r.dedup();
    r
}

/// One grid point, averaged over repeats.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimRow {
    /// Scheme.
    pub scheme: Scheme,
    /// Swiss rounds (bracket rounds for single-elim; none otherwise).
    pub rounds: Option<usize>,
    /// Best-of (games per pair for round-robin; 1 for random-bt).
    pub best_of: usize,
    /// Mean comparisons per run.
    pub comparisons: f64,
    /// Mean Kendall tau-b against the true strengths.
    pub tau: f64,
    /// Standard deviation of tau over repeats.
    pub tau_sd: f64,
    /// Share of runs that ranked the true best first (split evenly when tied for first).
    pub top1: f64,
    /// Number of runs averaged.
    pub runs: usize,
}

/// Simulation result: settings echo plus one row per grid point.
#[derive(Debug, Clone, Serialize)]
pub struct SimReport {
    /// Number of players.
    pub n_models: usize,
    /// Strength layout.
    pub dist: StrengthDist,
    /// Range / standard deviation of log-strengths.
    pub spread: f64,
    /// Tie parameter.
    pub tie_kappa: f64,
    /// Repetitions per setting.
    pub repeats: usize,
    /// Master seed.
    pub seed: u64,
    /// Kendall-tau target of the summary.
    pub target: f64,
    /// Rows, grouped by scheme, by comparisons within a scheme.
    pub rows: Vec<SimRow>,
    /// Per scheme: the cheapest row reaching `target` (mean comparisons), if any.
    pub needed: Vec<(Scheme, Option<f64>)>,
}

#[derive(Debug, Clone, Copy)]
struct Setting {
    scheme: Scheme,
    rounds: Option<usize>,
    best_of: usize,
    budget: usize,
}

/// True log-strengths of repeat `r`, assigned to ids in random order.
pub fn true_strengths(cfg: &SimConfig, repeat: u64) -> Vec<f64> {
    let n = cfg.n_models;
    let mut rng = round_rng(cfg.seed ^ 0x7374_7265_6e67, repeat);
    let mut beta: Vec<f64> = match cfg.dist {
        StrengthDist::Even if n > 1 => (0..n)
            .map(|i| cfg.spread * (i as f64 / (n - 1) as f64 - 0.5))
            .collect(),
        StrengthDist::Even => vec![0.0; n],
        StrengthDist::Normal => (0..n)
            .map(|_| cfg.spread * rng.sample::<f64, _>(rand_distr::StandardNormal))
            .collect(),
    };
    beta.shuffle(&mut rng);
    beta
}

fn run_setting(s: &Setting, cfg: &SimConfig, beta: &[f64], stream: u64) -> TournamentResult {
    let n = cfg.n_models;
    let mut rng = round_rng(cfg.seed, stream);
    let mut judge = BtJudge::with_rng(beta.to_vec(), cfg.tie_kappa, round_rng(!cfg.seed, stream));
    let seeding = match cfg.seeding {
        SeedMode::Random => Seeding::Random,
        SeedMode::Anchor => Seeding::Anchor(rng.gen_range(0..n)),
    };
    let p = SchemeParams {
        rounds: s.rounds.unwrap_or(1),
        best_of: s.best_of,
        budget: s.budget,
        seeding,
        tiebreak: cfg.tiebreak,
    };
    run_scheme(s.scheme, n, &p, &mut judge, &mut rng)
}

fn top1_credit(res: &TournamentResult, beta: &[f64]) -> f64 {
    let best = (0..beta.len())
        .max_by(|&a, &b| beta[a].total_cmp(&beta[b]))
        .unwrap_or(0);
    let firsts: Vec<usize> = res
        .standings
        .iter()
        .take_while(|s| s.rank == 1)
        .map(|s| s.player)
        .collect();
    if firsts.contains(&best) {
        1.0 / firsts.len() as f64
    } else {
        0.0
    }
}

fn evaluate(settings: &[Setting], cfg: &SimConfig, strengths: &[Vec<f64>]) -> Vec<SimRow> {
    let reps = cfg.repeats;
    let runs: Vec<(f64, f64, f64)> = (0..settings.len() * reps)
        .into_par_iter()
        .map(|k| {
            let (si, r) = (k / reps, k % reps);
            let s = &settings[si];
            let stream = ((s.scheme as u64) << 56) ^ ((si as u64) << 24) ^ r as u64;
            let res = run_setting(s, cfg, &strengths[r], stream);
            let tau = kendall_tau_b(&res.rank_score, &strengths[r]);
            (
                tau,
                res.n_comparisons() as f64,
                top1_credit(&res, &strengths[r]),
            )
        })
        .collect();
    settings
        .iter()
        .enumerate()
        .map(|(si, s)| {
            let chunk = &runs[si * reps..(si + 1) * reps];
            let m = reps as f64;
            let tau = chunk.iter().map(|x| x.0).sum::<f64>() / m;
            let var = chunk.iter().map(|x| (x.0 - tau).powi(2)).sum::<f64>() / (m - 1.0).max(1.0);
            SimRow {
                scheme: s.scheme,
                rounds: s.rounds,
                best_of: s.best_of,
                comparisons: chunk.iter().map(|x| x.1).sum::<f64>() / m,
                tau,
                tau_sd: var.sqrt(),
                top1: chunk.iter().map(|x| x.2).sum::<f64>() / m,
                runs: reps,
            }
        })
        .collect()
}

/// Runs the simulation grid. Errors on fewer than 2 models, no repeats or an empty scheme list.
pub fn simulate(cfg: &SimConfig) -> Result<SimReport> {
    let n = cfg.n_models;
    if n < 2 || cfg.repeats == 0 || cfg.schemes.is_empty() {
        bail!("simulation needs at least 2 models, 1 repeat and 1 scheme");
    }
    if !(cfg.spread.is_finite() && cfg.spread >= 0.0 && cfg.tie_kappa >= 0.0) {
        bail!("--spread and --tie-kappa must be finite and >= 0");
    }
    let rounds = if cfg.rounds.is_empty() {
        default_rounds(n)
    } else {
        cfg.rounds.clone()
    };
    let best_of = if cfg.best_of.is_empty() {
        vec![1]
    } else {
        cfg.best_of.clone()
    };
    if rounds.contains(&0) || best_of.contains(&0) {
        bail!("--rounds and --best-of values must be >= 1");
    }
    let strengths: Vec<Vec<f64>> = (0..cfg.repeats as u64)
        .map(|r| true_strengths(cfg, r))
        .collect();
    let mut settings = Vec::new();
    let bracket_rounds = n.next_power_of_two().trailing_zeros() as usize;
    for &scheme in &cfg.schemes {
        for &b in &best_of {
            match scheme {
                Scheme::Swiss | Scheme::SwissBt => {
                    settings.extend(rounds.iter().map(|&r| Setting {
                        scheme,
                        rounds: Some(r),
                        best_of: b,
                        budget: 0,
                    }))
                }
                Scheme::SingleElim | Scheme::RoundRobin => settings.push(Setting {
                    scheme,
                    rounds: (scheme == Scheme::SingleElim).then_some(bracket_rounds),
                    best_of: b,
                    budget: 0,
                }),
                Scheme::RandomBt => {}
            }
        }
    }
    let mut rows = evaluate(&settings, cfg, &strengths);
    if cfg.schemes.contains(&Scheme::RandomBt) {
        let mut budgets: Vec<usize> = if rows.is_empty() {
            let per_round = n / 2;
            rounds
                .iter()
                .flat_map(|r| best_of.iter().map(move |b| r * per_round * b))
                .collect()
        } else {
            rows.iter()
                .map(|r| r.comparisons.round() as usize)
                .collect()
        };
        budgets.retain(|&b| b > 0);
        budgets.sort_unstable();
        // Budgets within 8% of a smaller one add rows, not information.
        let mut kept: Vec<usize> = Vec::new();
        for b in budgets {
            if kept.last().is_none_or(|&k| b as f64 > 1.08 * k as f64) {
                kept.push(b);
            }
        }
        let budgets = kept;
        let rs: Vec<Setting> = budgets
            .iter()
            .map(|&budget| Setting {
                scheme: Scheme::RandomBt,
                rounds: None,
                best_of: 1,
                budget,
            })
            .collect();
        rows.extend(evaluate(&rs, cfg, &strengths));
    }
    let pos = |s: Scheme| {
        cfg.schemes
            .iter()
            .position(|&x| x == s)
            .unwrap_or(usize::MAX)
    };
    rows.sort_by(|a, b| {
        pos(a.scheme)
            .cmp(&pos(b.scheme))
            .then(a.comparisons.total_cmp(&b.comparisons))
    });
    let needed = cfg
        .schemes
        .iter()
        .map(|&s| {
            let c = rows
                .iter()
                .filter(|r| r.scheme == s && r.tau >= cfg.target)
                .map(|r| r.comparisons)
                .min_by(|a, b| a.total_cmp(b));
            (s, c)
        })
        .collect();
    Ok(SimReport {
        n_models: n,
        dist: cfg.dist,
        spread: cfg.spread,
        tie_kappa: cfg.tie_kappa,
        repeats: cfg.repeats,
        seed: cfg.seed,
        target: cfg.target,
        rows,
        needed,
    })
}

fn opt(x: Option<usize>) -> String {
    x.map_or_else(|| "-".to_string(), |v| v.to_string())
}

impl SimReport {
    /// One-line description of the strength model.
    pub fn describe(&self) -> String {
        let n = self.n_models;
        let strengths = match self.dist {
            StrengthDist::Even => {
                let gap = self.spread / (n.max(2) - 1) as f64;
                format!(
                    "log-strengths evenly spaced over [{:.2}, {:.2}] (neighbour gap {gap:.3}, P(stronger neighbour wins) = {:.3})",
                    -self.spread / 2.0,
                    self.spread / 2.0,
                    1.0 / (1.0 + (-gap).exp())
                )
            }
            StrengthDist::Normal => {
                format!("log-strengths ~ Normal(0, {:.2}) per repeat", self.spread)
            }
        };
        format!(
            "{n} models, {strengths}, tie kappa {}, {} repeats, seed {}",
            self.tie_kappa, self.repeats, self.seed
        )
    }

    /// Markdown: the grid table, then the comparisons each scheme needed to reach the target tau.
    pub fn to_markdown(&self) -> String {
        let mut s = format!(
            "Simulation: {}.\n\n| Scheme | Rounds | Best of | Comparisons | Kendall tau | sd | P(true best first) |\n|---|---:|---:|---:|---:|---:|---:|\n",
            self.describe()
        );
        for r in &self.rows {
            s += &format!(
                "| {} | {} | {} | {:.1} | {:.4} | {:.4} | {:.3} |\n",
                r.scheme.name(),
                opt(r.rounds),
                r.best_of,
                r.comparisons,
                r.tau,
                r.tau_sd,
                r.top1
            );
        }
        s += &format!(
            "\nComparisons needed for mean Kendall tau >= {} (cheapest grid point):\n\n| Scheme | Comparisons |\n|---|---:|\n",
            self.target
        );
        for (scheme, c) in &self.needed {
            let v = c.map_or_else(|| "not reached".to_string(), |c| format!("{c:.1}"));
            s += &format!("| {} | {v} |\n", scheme.name());
        }
        s
    }

    /// CSV with a header row.
    pub fn to_csv(&self) -> String {
        let mut s = String::from("scheme,rounds,best_of,comparisons,tau,tau_sd,top1,runs\n");
        for r in &self.rows {
            s += &format!(
                "{},{},{},{},{},{},{},{}\n",
                r.scheme.name(),
                r.rounds.map_or_else(String::new, |v| v.to_string()),
                r.best_of,
                r.comparisons,
                r.tau,
                r.tau_sd,
                r.top1,
                r.runs
            );
        }
        s
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("serialisable")
    }

    /// PNG: mean Kendall tau against mean comparisons (log2 x axis), one line per scheme (Swiss lines
    /// split by best-of).
    pub fn plot(&self, path: &Path) -> Result<()> {
        let mut series: Vec<reinforge_plot::Series> = Vec::new();
        for r in &self.rows {
            let name = match r.scheme {
                Scheme::Swiss | Scheme::SwissBt => {
                    format!("{} (best of {})", r.scheme.name(), r.best_of)
                }
                s => s.name().to_string(),
            };
            match series.iter_mut().find(|s| s.name == name) {
                Some(s) => s.points.push((r.comparisons, r.tau)),
                None => series.push(reinforge_plot::Series {
                    name,
                    points: vec![(r.comparisons, r.tau)],
                }),
            }
        }
        for s in &mut series {
            s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        reinforge_plot::line_chart(
            path,
            &format!(
                "Kendall tau vs comparisons ({} models, {} repeats)",
                self.n_models, self.repeats
            ),
            "comparisons (log2 scale)",
            "mean Kendall tau-b",
            &series,
            true,
        )
    }
}
