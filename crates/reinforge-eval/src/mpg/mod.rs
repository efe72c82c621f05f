//! Project MPG (Spangher et al. 2024, arXiv 2410.22368, "Model Performance and Goodness"): many
//! benchmarks aggregated into a "Goodness" (answer accuracy) and a "Fastness" (QPS or cost) per
//! category of benchmarks and overall, with intervals, and compared with an arena leaderboard by
//! correlation.
//!
//! What follows the paper (as far as its public description goes; docs/arena.md lists the sources):
//! benchmarks are grouped into categories and the categories into one overall number; each
//! benchmark's accuracy is a Beta posterior under a binomial likelihood (correct answers out of the
//! questions) and Goodness is read from posterior samples; Fastness is a model's average response
//! rate; the validation is the Pearson correlation with Chatbot Arena ratings. What is this
//! project's choice, each a named option ([`MpgOptions`]): the Beta prior, equal weights of
//! benchmarks within a category and of categories overall, the posterior mean as the point and
//! central quantiles of the samples as the interval, the arithmetic mean of QPS (or cost) with a
//! bootstrap over benchmarks as its interval, and Spearman plus bootstrap-over-models intervals
//! next to Pearson.

pub mod compare;
pub mod render;
pub mod table;

use anyhow::{bail, Result};
use rand::SeedableRng;
use rand_distr::{Beta, Distribution};
use serde::Serialize;
use std::collections::BTreeMap;

pub use table::ResultRow;

/// How benchmarks are weighted inside a category, or categories overall.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Weighting {
    /// Every benchmark (category) counts the same.
    Equal,
    /// By number of questions (benchmarks) or number of benchmarks (categories).
    Size,
}

impl Weighting {
    /// Every variant.
    pub const ALL: [Self; 2] = [Self::Equal, Self::Size];
}

/// Which column Fastness averages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FastnessSource {
    /// Queries per second (higher is faster).
    Qps,
    /// Cost per question (lower is cheaper).
    Cost,
}

impl FastnessSource {
    /// Every variant.
    pub const ALL: [Self; 2] = [Self::Qps, Self::Cost];
}

/// Every choice the paper leaves open.
#[derive(Debug, Clone, PartialEq)]
pub struct MpgOptions {
    /// Beta prior `(a, b)` of every benchmark's accuracy (uniform: 1, 1).
    pub prior: (f64, f64),
    /// Benchmarks within a category.
    pub benchmark_weight: Weighting,
    /// Categories overall.
    pub category_weight: Weighting,
    /// Posterior samples.
    pub draws: usize,
    /// Central interval level.
    pub level: f64,
    /// Seed of the samples and bootstraps.
    pub seed: u64,
    /// Fastness column (`None`: QPS when the table has it, else cost, else no Fastness).
    pub fastness: Option<FastnessSource>,
    /// Bootstrap rounds of the Fastness intervals and the correlations.
    pub rounds: usize,
}

impl Default for MpgOptions {
    fn default() -> Self {
        MpgOptions {
            prior: (1.0, 1.0),
            benchmark_weight: Weighting::Equal,
            category_weight: Weighting::Equal,
            draws: 4000,
            level: 0.95,
            seed: 0,
            fastness: None,
            rounds: 2000,
        }
    }
}

/// A value with its interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Estimate {
    /// Point value.
    pub value: f64,
    /// Lower bound.
    pub lower: f64,
    /// Upper bound.
    pub upper: f64,
}

/// One model's scores.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelScores {
    /// Model name.
    pub model: String,
    /// Overall Goodness.
    pub goodness: Estimate,
    /// Goodness per category (in [`MpgReport::categories`] order).
    pub category_goodness: Vec<Estimate>,
    /// Overall Fastness (when the table has the column).
    pub fastness: Option<Estimate>,
    /// Fastness per category.
    pub category_fastness: Option<Vec<Estimate>>,
}

/// The whole report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MpgReport {
    /// Category names, sorted.
    pub categories: Vec<String>,
    /// Benchmarks of each category, sorted.
    pub benchmarks: Vec<Vec<String>>,
    /// Fastness column used.
    pub fastness_source: Option<FastnessSource>,
    /// Interval level.
    pub level: f64,
    /// Models, best overall Goodness first.
    pub models: Vec<ModelScores>,
}

/// One model's cell of one benchmark.
#[derive(Debug, Clone, Copy)]
struct Cell {
    correct: f64,
    questions: f64,
    speed: Option<f64>,
}

/// Computes Goodness and Fastness. `categories` maps benchmark -> category (else every row needs its
/// `category`); `source` names the results file in errors. Every model must have every benchmark.
pub fn score(
    rows: &[(ResultRow, usize)],
    categories: Option<(&BTreeMap<String, String>, &str)>,
    source: &str,
    o: &MpgOptions,
) -> Result<MpgReport> {
    check(o)?;
    let (cats, benches) = categorise(rows, categories, source)?;
    let fastness = match o.fastness {
        Some(f) => Some(f),
        None if rows.iter().all(|(r, _)| r.qps.is_some()) => Some(FastnessSource::Qps),
        None if rows.iter().all(|(r, _)| r.cost.is_some()) => Some(FastnessSource::Cost),
        None => None,
    };
    // model -> benchmark -> cell
    let mut cells: BTreeMap<&str, BTreeMap<&str, Cell>> = BTreeMap::new();
    for (r, line) in rows {
        let at = || format!("{source}:{line}");
        let speed = match fastness {
            None => None,
            Some(FastnessSource::Qps) => Some(r.qps.ok_or_else(|| {
                anyhow::anyhow!("{}: field `qps`: missing (Fastness reads QPS)", at())
            })?),
            Some(FastnessSource::Cost) => Some(r.cost.ok_or_else(|| {
                anyhow::anyhow!("{}: field `cost`: missing (Fastness reads cost)", at())
            })?),
        };
        let cell = Cell {
            correct: r.correct().map_err(|e| anyhow::anyhow!("{}: {e}", at()))?,
            questions: r.questions,
            speed,
        };
        let m = cells.entry(&r.model).or_default();
        if m.insert(&r.benchmark, cell).is_some() {
            bail!(
                "{}: model {:?} has benchmark {:?} twice",
                at(),
                r.model,
                r.benchmark
            );
        }
    }
    let all_benches: Vec<&str> = benches.iter().flatten().map(String::as_str).collect();
    for (m, row) in &cells {
        if let Some(b) = all_benches.iter().find(|b| !row.contains_key(*b)) {
            bail!("{source}: model {m:?} has no row for benchmark {b:?} (every model needs every benchmark)");
        }
    }
    let z = (1.0 - o.level) / 2.0;
    let mut models = vec![];
    for (mi, (m, row)) in cells.iter().enumerate() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(o.seed);
        rng.set_stream(mi as u64);
        // Per benchmark: posterior mean and samples.
        let mut samples: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
        let mut means: BTreeMap<&str, f64> = BTreeMap::new();
        for b in &all_benches {
            let c = row[b];
            let (pa, pb) = (o.prior.0 + c.correct, o.prior.1 + c.questions - c.correct);
            let beta = Beta::new(pa, pb)?;
            samples.insert(b, (0..o.draws).map(|_| beta.sample(&mut rng)).collect());
            means.insert(b, pa / (pa + pb));
        }
        let bench_w = |b: &str| match o.benchmark_weight {
            Weighting::Equal => 1.0,
            Weighting::Size => row[b].questions,
        };
        let cat_w = |ci: usize| match o.category_weight {
            Weighting::Equal => 1.0,
            Weighting::Size => benches[ci].len() as f64,
        };
        // Category draws and points.
        let mut cat_draws: Vec<Vec<f64>> = vec![];
        let mut cat_points = vec![];
        for bs in &benches {
            let wsum: f64 = bs.iter().map(|b| bench_w(b)).sum();
            let point = bs
                .iter()
                .map(|b| bench_w(b) * means[b.as_str()])
                .sum::<f64>()
                / wsum;
            let draws: Vec<f64> = (0..o.draws)
                .map(|d| {
                    bs.iter()
                        .map(|b| bench_w(b) * samples[b.as_str()][d])
                        .sum::<f64>()
                        / wsum
                })
                .collect();
            cat_points.push(point);
            cat_draws.push(draws);
        }
        let cw: f64 = (0..cats.len()).map(cat_w).sum();
        let overall_point = (0..cats.len())
            .map(|c| cat_w(c) * cat_points[c])
            .sum::<f64>()
            / cw;
        let overall_draws: Vec<f64> = (0..o.draws)
            .map(|d| {
                (0..cats.len())
                    .map(|c| cat_w(c) * cat_draws[c][d])
                    .sum::<f64>()
                    / cw
            })
            .collect();
        let est = |point: f64, draws: &[f64]| {
            let mut s = draws.to_vec();
            s.sort_by(f64::total_cmp);
            Estimate {
                value: point,
                lower: crate::bootstrap::quantile_sorted(&s, z),
                upper: crate::bootstrap::quantile_sorted(&s, 1.0 - z),
            }
        };
        let category_goodness: Vec<Estimate> = cat_points
            .iter()
            .zip(&cat_draws)
            .map(|(p, d)| est(*p, d))
            .collect();
        let goodness = est(overall_point, &overall_draws);
        let (fast, cat_fast) = if fastness.is_some() {
            let (f, c) = fastness_of(row, &benches, o, &cat_w, mi as u64, z);
            (Some(f), Some(c))
        } else {
            (None, None)
        };
        models.push(ModelScores {
            model: m.to_string(),
            goodness,
            category_goodness,
            fastness: fast,
            category_fastness: cat_fast,
        });
    }
    models.sort_by(|a, b| {
        b.goodness
            .value
            .total_cmp(&a.goodness.value)
            .then_with(|| a.model.cmp(&b.model))
    });
    Ok(MpgReport {
        categories: cats,
        benchmarks: benches,
        fastness_source: fastness,
        level: o.level,
        models,
    })
}

/// Fastness: per category the arithmetic mean of the benchmarks' QPS (or cost), overall the
/// category-weighted mean; intervals from resampling each category's benchmarks with replacement.
fn fastness_of(
    row: &BTreeMap<&str, Cell>,
    benches: &[Vec<String>],
    o: &MpgOptions,
    cat_w: &dyn Fn(usize) -> f64,
    stream: u64,
    z: f64,
) -> (Estimate, Vec<Estimate>) {
    let vals: Vec<Vec<f64>> = benches
        .iter()
        .map(|bs| {
            bs.iter()
                .map(|b| row[b.as_str()].speed.unwrap_or(f64::NAN))
                .collect()
        })
        .collect();
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let cw: f64 = (0..benches.len()).map(cat_w).sum();
    let overall = |cats: &[f64]| {
        cats.iter()
            .enumerate()
            .map(|(c, v)| cat_w(c) * v)
            .sum::<f64>()
            / cw
    };
    let points: Vec<f64> = vals.iter().map(|v| mean(v)).collect();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(o.seed ^ 0x6661_7374);
    rng.set_stream(stream);
    let mut cat_rounds: Vec<Vec<f64>> = vec![vec![]; benches.len()];
    let mut all_rounds = vec![];
    for _ in 0..o.rounds {
        let r: Vec<f64> = vals
            .iter()
            .map(|v| {
                let n = v.len();
                (0..n)
                    .map(|_| v[rand::Rng::gen_range(&mut rng, 0..n)])
                    .sum::<f64>()
                    / n as f64
            })
            .collect();
        for (c, x) in r.iter().enumerate() {
            cat_rounds[c].push(*x);
        }
        all_rounds.push(overall(&r));
    }
    let est = |point: f64, mut s: Vec<f64>| {
        if s.is_empty() {
            return Estimate {
                value: point,
                lower: f64::NAN,
                upper: f64::NAN,
            };
        }
        s.sort_by(f64::total_cmp);
        Estimate {
            value: point,
            lower: crate::bootstrap::quantile_sorted(&s, z),
            upper: crate::bootstrap::quantile_sorted(&s, 1.0 - z),
        }
    };
    let cats = points
        .iter()
        .zip(cat_rounds)
        .map(|(p, r)| est(*p, r))
        .collect();
    (est(overall(&points), all_rounds), cats)
}

/// The sorted categories and each category's sorted benchmarks.
fn categorise(
    rows: &[(ResultRow, usize)],
    map: Option<(&BTreeMap<String, String>, &str)>,
    source: &str,
) -> Result<(Vec<String>, Vec<Vec<String>>)> {
    let mut cat_of: BTreeMap<String, String> = BTreeMap::new();
    match map {
        Some((m, file)) => {
            for (r, line) in rows {
                let Some(c) = m.get(&r.benchmark) else {
                    bail!(
                        "category file {file}: no category for benchmark {:?} (used at {source}:{line})",
                        r.benchmark
                    );
                };
                cat_of.insert(r.benchmark.clone(), c.clone());
            }
            if let Some(b) = m.keys().find(|b| !cat_of.contains_key(*b)) {
                bail!(
                    "category file {file}: benchmark {b:?} is not in {source} (a misspelt name?)"
                );
            }
        }
        None => {
            for (r, line) in rows {
                let Some(c) = r.category.as_ref().filter(|c| !c.is_empty()) else {
                    bail!(
                        "{source}:{line}: field `category`: missing (give it or a category file)"
                    );
                };
                if let Some(old) = cat_of.insert(r.benchmark.clone(), c.clone()) {
                    if old != *c {
                        bail!(
                            "{source}:{line}: benchmark {:?} is in category {old:?} and {c:?}",
                            r.benchmark
                        );
                    }
                }
            }
        }
    }
    let mut by_cat: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (b, c) in &cat_of {
        by_cat.entry(c.clone()).or_default().push(b.clone());
    }
    let cats: Vec<String> = by_cat.keys().cloned().collect();
    let benches: Vec<Vec<String>> = by_cat.into_values().collect();
    Ok((cats, benches))
}

fn check(o: &MpgOptions) -> Result<()> {
    let (a, b) = o.prior;
    if !(a.is_finite() && b.is_finite() && a > 0.0 && b > 0.0) {
        bail!("the Beta prior needs a > 0 and b > 0, got ({a}, {b})");
    }
    if o.draws < 1 || !(o.level > 0.0 && o.level < 1.0) {
        bail!("draws must be >= 1 and the level in (0, 1)");
    }
    Ok(())
}
