//! Tournaments over recorded battles: a [`BattleOracle`] answers each comparison, the tournament is
//! repeated (Monte Carlo, as LLM Swiss Round's expected win score `E[S_m]`, arXiv:2512.21010), and the
//! result is compared with the Bradley-Terry leaderboard of the full battles.

use super::{kendall_tau_b, run_scheme, BattleOracle, Scheme, SchemeParams};
use crate::bootstrap::round_rng;
use crate::bt::Scale;
use crate::io::Battles;
use anyhow::{bail, Result};
use rayon::prelude::*;
use serde::Serialize;
use std::path::Path;

/// Settings of an oracle run.
#[derive(Debug, Clone, PartialEq)]
pub struct OracleConfig {
    /// Scheme.
    pub scheme: Scheme,
    /// Knobs (for [`super::Seeding::Anchor`], the anchor id refers to the battles' model ids).
    pub params: SchemeParams,
    /// Monte Carlo repetitions.
    pub repeats: usize,
    /// Master seed (repeat `r` uses stream `r`).
    pub seed: u64,
    /// Pseudo-games of the model prior per pair ([`super::DEFAULT_PRIOR_GAMES`] by default).
    pub prior_games: f64,
}

/// One model's line, aggregated over repetitions.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OracleRow {
    /// Position by mean tournament position (1 = best).
    pub rank: usize,
    /// Model name.
    pub model: String,
    /// Mean of the scheme's points (Swiss match points, knockout rounds survived, ...): the expected score.
    pub mean_points: f64,
    /// Mean final position (shared positions count as such).
    pub mean_position: f64,
    /// 5th percentile of the position over repetitions.
    pub position_lo: f64,
    /// 95th percentile of the position over repetitions.
    pub position_hi: f64,
    /// Share of repetitions this model finished first (split when tied).
    pub won: f64,
    /// Full-data Bradley-Terry rating (Elo scale, mean 1000).
    pub bt_rating: f64,
    /// Position in the full-data Bradley-Terry leaderboard.
    pub bt_rank: usize,
}

/// Oracle tournament summary.
#[derive(Debug, Clone, Serialize)]
pub struct OracleReport {
    /// Scheme.
    pub scheme: Scheme,
    /// Number of models.
    pub n_models: usize,
    /// Battles in the input.
    pub n_battles: usize,
    /// Repetitions.
    pub repeats: usize,
    /// Swiss rounds (as configured).
    pub rounds: usize,
    /// Best-of.
    pub best_of: usize,
    /// Pseudo-games of the model prior per pair ([`BattleOracle::with_prior_games`]).
    pub prior_games: f64,
    /// Mean comparisons per tournament.
    pub comparisons: f64,
    /// Share of comparisons between pairs absent from the battles (answered by the fitted model alone).
    pub fallback_share: f64,
    /// Mean Kendall tau-b of one tournament's ranking against full-data BT.
    pub tau_mean: f64,
    /// Standard deviation of that tau over repetitions.
    pub tau_sd: f64,
    /// Kendall tau-b of the mean-position ranking (all repetitions) against full-data BT.
    pub tau_aggregate: f64,
    /// Rows, best mean position first.
    pub rows: Vec<OracleRow>,
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    let h = (sorted.len() - 1) as f64 * q;
    let (i, f) = (h.floor() as usize, h - h.floor());
    sorted[i] + f * (sorted[(i + 1).min(sorted.len() - 1)] - sorted[i])
}

/// Runs `cfg.repeats` tournaments against the battles oracle and summarises them.
pub fn run_oracle(b: &Battles, cfg: &OracleConfig) -> Result<OracleReport> {
    let n = b.models.len();
    if n < 2 {
        bail!("need at least 2 models, found {n}");
    }
    if cfg.repeats == 0 {
        bail!("--repeats must be >= 1");
    }
    let oracle = BattleOracle::new(b, cfg.seed).with_prior_games(cfg.prior_games);
    let beta = oracle.beta().to_vec();
    let runs: Vec<_> = (0..cfg.repeats)
        .into_par_iter()
        .map(|r| {
            let mut judge = oracle.clone();
            judge.reseed(cfg.seed, 2 * r as u64);
            let mut rng = round_rng(cfg.seed, 2 * r as u64 + 1);
            let res = run_scheme(cfg.scheme, n, &cfg.params, &mut judge, &mut rng);
            let tau = kendall_tau_b(&res.rank_score, &beta);
            (res, tau, judge.fallbacks())
        })
        .collect();
    let m = cfg.repeats as f64;
    let mut points = vec![0.0; n];
    let mut positions = vec![Vec::with_capacity(cfg.repeats); n];
    let mut won = vec![0.0; n];
    for (res, _, _) in &runs {
        let firsts = res.standings.iter().filter(|s| s.rank == 1).count() as f64;
        for s in &res.standings {
            points[s.player] += s.points / m;
            positions[s.player].push(s.rank as f64);
            if s.rank == 1 {
                won[s.player] += 1.0 / firsts / m;
            }
        }
    }
    let mean_pos: Vec<f64> = positions
        .iter()
        .map(|v| v.iter().sum::<f64>() / m)
        .collect();
    let ratings = Scale::default().ratings(&beta, None);
    let mut bt_order: Vec<usize> = (0..n).collect();
    bt_order.sort_by(|&x, &y| beta[y].total_cmp(&beta[x]));
    let mut bt_rank = vec![0; n];
    for (i, &p) in bt_order.iter().enumerate() {
        bt_rank[p] = i + 1;
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&x, &y| {
        mean_pos[x]
            .total_cmp(&mean_pos[y])
            .then(points[y].total_cmp(&points[x]))
            .then(bt_rank[x].cmp(&bt_rank[y]))
    });
    let rows = order
        .iter()
        .enumerate()
        .map(|(i, &p)| {
            let mut v = positions[p].clone();
            v.sort_by(|a, b| a.total_cmp(b));
            OracleRow {
                rank: i + 1,
                model: b.models[p].clone(),
                mean_points: points[p],
                mean_position: mean_pos[p],
                position_lo: quantile(&v, 0.05),
                position_hi: quantile(&v, 0.95),
                won: won[p],
                bt_rating: ratings[p],
                bt_rank: bt_rank[p],
            }
        })
        .collect();
    let taus: Vec<f64> = runs.iter().map(|r| r.1).collect();
    let tau_mean = taus.iter().sum::<f64>() / m;
    let tau_var = taus.iter().map(|t| (t - tau_mean).powi(2)).sum::<f64>() / (m - 1.0).max(1.0);
    let comps: f64 = runs.iter().map(|r| r.0.n_comparisons() as f64).sum();
    let fallbacks: f64 = runs.iter().map(|r| r.2 as f64).sum();
    let neg_pos: Vec<f64> = mean_pos.iter().map(|x| -x).collect();
    Ok(OracleReport {
        scheme: cfg.scheme,
        n_models: n,
        n_battles: b.len(),
        repeats: cfg.repeats,
        rounds: cfg.params.rounds,
        best_of: cfg.params.best_of,
        prior_games: cfg.prior_games,
        comparisons: comps / m,
        fallback_share: if comps > 0.0 { fallbacks / comps } else { 0.0 },
        tau_mean,
        tau_sd: tau_var.sqrt(),
        tau_aggregate: kendall_tau_b(&neg_pos, &beta),
        rows,
    })
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

impl OracleReport {
    /// Markdown: summary lines, then the table.
    pub fn to_markdown(&self) -> String {
        let setting = match self.scheme {
            Scheme::Swiss | Scheme::SwissBt => {
                format!("{} rounds, best of {}", self.rounds, self.best_of)
            }
            Scheme::RoundRobin => format!("{} games per pair", self.best_of),
            Scheme::SingleElim => format!("best of {}", self.best_of),
            Scheme::RandomBt => "random pairs".to_string(),
        };
        let mut s = format!(
            "{} tournament over {} models ({setting}), {} repetitions against the battles oracle \
             (empirical pair outcomes plus {} Rao-Kupper pseudo-games; the model alone for pairs that never met).\n\n\
             Comparisons per tournament: {:.1} (the input has {} battles); {:.1}% between pairs that never met.\n\
             Kendall tau-b vs full-data Bradley-Terry: one tournament {:.4} (sd {:.4}); mean position over all repetitions {:.4}.\n\n\
             | Rank | Model | Mean points | Mean position | 90% position range | Won | BT rating | BT rank |\n\
             |---:|---|---:|---:|---|---:|---:|---:|\n",
            self.scheme.name(),
            self.n_models,
            self.repeats,
            self.prior_games,
            self.comparisons,
            self.n_battles,
            100.0 * self.fallback_share,
            self.tau_mean,
            self.tau_sd,
            self.tau_aggregate
        );
        for r in &self.rows {
            s += &format!(
                "| {} | {} | {:.3} | {:.2} | {:.0} – {:.0} | {:.3} | {:.1} | {} |\n",
                r.rank,
                r.model.replace('|', "\\|"),
                r.mean_points,
                r.mean_position,
                r.position_lo,
                r.position_hi,
                r.won,
                r.bt_rating,
                r.bt_rank
            );
        }
        s
    }

    /// CSV with a header row.
    pub fn to_csv(&self) -> String {
        let mut s = String::from(
            "rank,model,mean_points,mean_position,position_lo,position_hi,won,bt_rating,bt_rank\n",
        );
        for r in &self.rows {
            s += &format!(
                "{},{},{},{},{},{},{},{},{}\n",
                r.rank,
                csv_field(&r.model),
                r.mean_points,
                r.mean_position,
                r.position_lo,
                r.position_hi,
                r.won,
                r.bt_rating,
                r.bt_rank
            );
        }
        s
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("serialisable")
    }

    /// PNG: mean tournament position per model with its 90% range over repetitions, best at the top.
    pub fn plot(&self, path: &Path) -> Result<()> {
        let rows: Vec<reinforge_plot::IntervalRow> = self
            .rows
            .iter()
            .map(|r| reinforge_plot::IntervalRow {
                label: r.model.clone(),
                value: r.mean_position,
                lower: r.position_lo,
                upper: r.position_hi,
            })
            .collect();
        reinforge_plot::interval_chart(
            path,
            &format!(
                "{} tournament positions over {} repetitions",
                self.scheme.name(),
                self.repeats
            ),
            "position (1 = best)",
            &rows,
        )
    }
}
