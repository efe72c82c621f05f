//! The `rank` pipeline: fit, bootstrap, interval ranks, and rendering as markdown / CSV / JSON / PNG.

use crate::bootstrap::{bootstrap_bt, interval_ranks, round_rng, summarize};
use crate::bt::{fit_rk_or_bt, FitOptions, OutcomeRows, PairTable, RowToPair, Scale};
use crate::elo::{bootstrap_elo, online_elo, EloParams};
use crate::io::Battles;
use crate::style::{fit_style, params_of, style_features, STYLE_NAMES};
use anyhow::{bail, Result};
use rayon::prelude::*;
use serde::Serialize;

/// Rating method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// Bradley-Terry MLE, ties as half wins (FastChat `compute_bt`).
    Bt,
    /// Rao-Kupper: ties as a third outcome with a fitted tie parameter.
    RaoKupper,
    /// Online Elo in file order (FastChat `compute_elo`); intervals from `compute_bootstrap_elo`.
    Elo,
}

impl Method {
    /// Every variant, in declaration order (front ends list them by their serde names).
    pub const ALL: [Self; 3] = [Self::Bt, Self::RaoKupper, Self::Elo];
}

/// Everything `rank` needs besides the battles.
#[derive(Debug, Clone)]
pub struct RankConfig {
    /// Rating method.
    pub method: Method,
    /// Bootstrap rounds (0 = no intervals).
    pub rounds: usize,
    /// Seed of the bootstrap.
    pub seed: u64,
    /// Central interval level, e.g. 0.95.
    pub level: f64,
    /// `(model name, rating)` to pin.
    pub anchor: Option<(String, f64)>,
    /// Rating scale.
    pub scale: Scale,
    /// Online Elo parameters (also reported next to BT).
    pub elo: EloParams,
    /// Use FastChat style control (needs `conv_metadata`); BT only.
    pub style_control: bool,
    /// Solver settings.
    pub fit: FitOptions,
}

impl Default for RankConfig {
    fn default() -> Self {
        RankConfig {
            method: Method::Bt,
            rounds: 1000,
            seed: 0,
            level: 0.95,
            anchor: None,
            scale: Scale::default(),
            elo: EloParams::default(),
            style_control: false,
            fit: FitOptions::default(),
        }
    }
}

/// One leaderboard row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// Interval rank (1 + number of models whose lower bound beats this model's upper bound).
    pub rank: usize,
    /// Model name.
    pub model: String,
    /// Point rating.
    pub rating: f64,
    /// Lower interval bound (NaN without bootstrap).
    pub lower: f64,
    /// Upper interval bound.
    pub upper: f64,
    /// Bootstrap variance.
    pub variance: f64,
    /// Battles played.
    pub battles: u64,
    /// Wins.
    pub wins: u64,
    /// Ties.
    pub ties: u64,
    /// Losses.
    pub losses: u64,
    /// Online Elo in file order (reported with every method).
    pub elo_online: f64,
}

/// A computed leaderboard, best first.
#[derive(Debug, Clone, Serialize)]
pub struct Leaderboard {
    /// Method used.
    pub method: Method,
    /// Number of battles.
    pub n_battles: usize,
    /// Bootstrap rounds.
    pub rounds: usize,
    /// Interval level.
    pub level: f64,
    /// Rows sorted by rating, best first.
    pub rows: Vec<Row>,
    /// Rao-Kupper tie parameter `theta` (when that method is used).
    pub theta: Option<f64>,
    /// Style coefficients by name (style control only).
    pub style_coefficients: Option<Vec<(String, f64)>>,
    /// Contextual coefficients with intervals (`--ci sandwich` with style control or covariates).
    pub coefficients: Option<Vec<crate::covariates::Coefficient>>,
    /// Non-fatal problems (e.g. the fit did not converge because a model won every game).
    pub warnings: Vec<String>,
}

/// Computes the leaderboard of `b` under `cfg`.
pub fn rank(b: &Battles, cfg: &RankConfig) -> Result<Leaderboard> {
    if b.is_empty() {
        bail!("no battles");
    }
    if !(0.0 < cfg.level && cfg.level < 1.0) {
        bail!("interval level must be in (0, 1), got {}", cfg.level);
    }
    let anchor = match &cfg.anchor {
        None => None,
        Some((m, r)) => match b.models.iter().position(|x| x == m) {
            Some(i) => Some((i, *r)),
            None => bail!("anchor model {m:?} does not appear in the battles"),
        },
    };
    let shift = |ratings: &mut Vec<f64>| {
        if let Some((i, r)) = anchor {
            let d = r - ratings[i];
            ratings.iter_mut().for_each(|x| *x += d);
        }
    };
    let mut warnings = vec![];
    let mut theta = None;
    let mut style_coefficients = None;
    let (point, rounds): (Vec<f64>, Vec<Vec<f64>>) = match (cfg.method, cfg.style_control) {
        (Method::Bt, true) => {
            let f = style_features(b)?;
            let fit = fit_style(b, &f, None, 0.5, None);
            style_coefficients = Some(
                STYLE_NAMES
                    .iter()
                    .map(|s| s.to_string())
                    .zip(fit.coefficients)
                    .collect(),
            );
            let warm = params_of(&fit);
            let n = b.len();
            let uniform = vec![1.0; n];
            let rounds: Vec<Vec<f64>> = (0..cfg.rounds)
                .into_par_iter()
                .map(|r| {
                    let mut rng = round_rng(cfg.seed, r as u64);
                    let mut w = vec![0.0; n];
                    crate::bootstrap::multinomial(&mut rng, n as u64, &uniform, &mut w);
                    let mut x = fit_style(b, &f, Some(&w), 0.5, Some(&warm)).ratings;
                    shift(&mut x);
                    x
                })
                .collect();
            let mut p = fit.ratings;
            shift(&mut p);
            (p, rounds)
        }
        (_, true) => bail!("style control is only available with --method bt"),
        (Method::Bt, false) | (Method::RaoKupper, false) => {
            let rk = cfg.method == Method::RaoKupper;
            let rows = OutcomeRows::from_battles(b);
            let table = RowToPair::new(&rows).aggregate(&rows.count);
            let fit = fit_rk_or_bt(&table, rk, None, &cfg.fit);
            if !fit.converged {
                warnings.push(format!(
                    "fit did not converge (gradient {:.3e} after {} iterations): some model may have won or lost all its games, or the comparison graph is disconnected; consider --prior",
                    fit.grad_inf, fit.iterations
                ));
            }
            if rk {
                theta = Some(fit.kappa.exp());
            }
            let betas = if rk {
                let map = RowToPair::new(&rows);
                let n = rows.total().round() as u64;
                (0..cfg.rounds)
                    .into_par_iter()
                    .map(|r| {
                        let mut rng = round_rng(cfg.seed, r as u64);
                        let mut w = vec![0.0; rows.len()];
                        crate::bootstrap::multinomial(&mut rng, n, &rows.count, &mut w);
                        fit_rk_or_bt(&map.aggregate(&w), true, None, &cfg.fit).beta
                    })
                    .collect()
            } else {
                bootstrap_bt(&rows, &fit.beta, cfg.rounds, cfg.seed, &cfg.fit)
            };
            let sc = cfg.scale;
            (
                sc.ratings(&fit.beta, anchor),
                betas.iter().map(|x| sc.ratings(x, anchor)).collect(),
            )
        }
        (Method::Elo, false) => {
            let mut p = online_elo(b, &cfg.elo);
            shift(&mut p);
            let mut rounds = bootstrap_elo(b, &cfg.elo, cfg.rounds, cfg.seed);
            rounds.iter_mut().for_each(&shift);
            (p, rounds)
        }
    };
    let elo = online_elo(b, &cfg.elo);
    let k = b.models.len();
    let (lower, upper, variance) = if rounds.is_empty() {
        (vec![f64::NAN; k], vec![f64::NAN; k], vec![f64::NAN; k])
    } else {
        let s = summarize(&rounds, cfg.level);
        (
            s.iter().map(|x| x.lower).collect(),
            s.iter().map(|x| x.upper).collect(),
            s.iter().map(|x| x.variance).collect(),
        )
    };
    // Without intervals, rank by point rating (ties share a rank).
    let ranks = if rounds.is_empty() {
        interval_ranks(&point, &point)
    } else {
        interval_ranks(&lower, &upper)
    };
    let games = b.battles_per_model();
    let rec = b.record_per_model();
    let mut rows: Vec<Row> = (0..k)
        .map(|i| Row {
            rank: ranks[i],
            model: b.models[i].clone(),
            rating: point[i],
            lower: lower[i],
            upper: upper[i],
            variance: variance[i],
            battles: games[i],
            wins: rec[i].0,
            ties: rec[i].1,
            losses: rec[i].2,
            elo_online: elo[i],
        })
        .collect();
    rows.sort_by(|x, y| {
        y.rating
            .total_cmp(&x.rating)
            .then_with(|| x.model.cmp(&y.model))
    });
    Ok(Leaderboard {
        method: cfg.method,
        n_battles: b.len(),
        rounds: cfg.rounds,
        level: cfg.level,
        rows,
        theta,
        style_coefficients,
        coefficients: None,
        warnings,
    })
}

/// Convenience: pair table of battles (re-exported for callers that only need a point fit).
pub fn pair_table(b: &Battles) -> PairTable {
    PairTable::from_battles(b)
}

/// The coefficients' table: per unit of the feature (comparable with a known effect) and per
/// standard deviation (arena-rank's scale, the one its `reg` penalises).
fn coefficients_markdown(c: &[crate::covariates::Coefficient], level: f64) -> String {
    let pct = (level * 100.0).round();
    let mut s = format!(
        "\n| Coefficient | Per unit | {pct}% interval | Per sd | {pct}% interval | Feature sd | Unpenalised per unit |\n|---|---:|---|---:|---|---:|---:|\n"
    );
    for r in c {
        let free = r
            .unpenalised_per_unit
            .map_or("-".to_string(), |v| format!("{v:+.4}"));
        s += &format!(
            "| {} | {:+.4} | {:+.4} – {:+.4} | {:+.4} | {:+.4} – {:+.4} | {:.4} | {free} |\n",
            r.name.replace('|', "\\|"),
            r.per_unit,
            r.lower,
            r.upper,
            r.per_sd,
            r.per_sd_lower,
            r.per_sd_upper,
            r.feature_sd
        );
    }
    s
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

impl Leaderboard {
    /// Markdown table (GitHub flavour).
    pub fn to_markdown(&self) -> String {
        let pct = (self.level * 100.0).round();
        let mut s = format!(
            "| Rank | Model | Rating | {pct}% interval | Battles | W / T / L | Online Elo |\n|---:|---|---:|---|---:|---|---:|\n"
        );
        for r in &self.rows {
            let ci = if r.lower.is_nan() {
                "-".to_string()
            } else {
                format!(
                    "{:.1} – {:.1} (+{:.1} / -{:.1})",
                    r.lower,
                    r.upper,
                    r.upper - r.rating,
                    r.rating - r.lower
                )
            };
            s += &format!(
                "| {} | {} | {:.1} | {} | {} | {} / {} / {} | {:.1} |\n",
                r.rank,
                r.model.replace('|', "\\|"),
                r.rating,
                ci,
                r.battles,
                r.wins,
                r.ties,
                r.losses,
                r.elo_online
            );
        }
        if let Some(t) = self.theta {
            s += &format!("\nRao-Kupper tie parameter theta = {t:.4}\n");
        }
        if let Some(c) = &self.coefficients {
            s += &coefficients_markdown(c, self.level);
        } else if let Some(c) = &self.style_coefficients {
            s += "\nStyle coefficients: ";
            s += &c
                .iter()
                .map(|(n, v)| format!("{n} {v:+.4}"))
                .collect::<Vec<_>>()
                .join(", ");
            s += "\n";
        }
        for w in &self.warnings {
            s += &format!("\nWarning: {w}\n");
        }
        s
    }

    /// CSV with a header row.
    pub fn to_csv(&self) -> String {
        let mut s = String::from(
            "rank,model,rating,lower,upper,variance,battles,wins,ties,losses,elo_online\n",
        );
        for r in &self.rows {
            s += &format!(
                "{},{},{},{},{},{},{},{},{},{},{}\n",
                r.rank,
                csv_field(&r.model),
                r.rating,
                r.lower,
                r.upper,
                r.variance,
                r.battles,
                r.wins,
                r.ties,
                r.losses,
                r.elo_online
            );
        }
        s
    }

    /// Pretty JSON (NaN bounds become `null`).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("serialisable")
    }

    /// Forest plot of ratings with intervals, best at the top.
    pub fn plot(&self, path: &std::path::Path) -> Result<()> {
        let rows: Vec<reinforge_plot::IntervalRow> = self
            .rows
            .iter()
            .map(|r| reinforge_plot::IntervalRow {
                label: r.model.clone(),
                value: r.rating,
                lower: if r.lower.is_nan() { r.rating } else { r.lower },
                upper: if r.upper.is_nan() { r.rating } else { r.upper },
            })
            .collect();
        let title = format!(
            "{} ratings, {:.0}% bootstrap intervals ({} battles, {} rounds)",
            match self.method {
                Method::Bt => "Bradley-Terry",
                Method::RaoKupper => "Rao-Kupper",
                Method::Elo => "Online Elo",
            },
            self.level * 100.0,
            self.n_battles,
            self.rounds
        );
        reinforge_plot::interval_chart(path, &title, "rating", &rows)
    }
}
