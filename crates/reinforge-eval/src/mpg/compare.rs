//! MPG against an arena leaderboard: Pearson (the paper's validation) and Spearman correlations of
//! Goodness with the arena rating over the models both list, with percentile-bootstrap intervals
//! from resampling models with replacement (rounds where a resample is constant are skipped).

use super::{Estimate, MpgReport};
use crate::bootstrap::quantile_sorted;
use crate::ppe::{pearson, spearman};
use anyhow::{bail, Result};
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::collections::HashMap;

/// Correlations of one Goodness (overall or a category) with the arena.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Correlation {
    /// `overall` or the category name.
    pub scope: String,
    /// Pearson correlation with its interval.
    pub pearson: Estimate,
    /// Spearman correlation with its interval.
    pub spearman: Estimate,
}

/// The comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ArenaComparison {
    /// Models in both inputs, in the report's order.
    pub models: Vec<String>,
    /// Models of the MPG table the arena does not list.
    pub missing_from_arena: Vec<String>,
    /// Overall first, then each category.
    pub correlations: Vec<Correlation>,
}

/// Compares `report` with `arena` (model -> rating); needs at least 3 common models.
pub fn compare(
    report: &MpgReport,
    arena: &HashMap<String, f64>,
    rounds: usize,
    level: f64,
    seed: u64,
) -> Result<ArenaComparison> {
    let common: Vec<usize> = (0..report.models.len())
        .filter(|&i| arena.contains_key(&report.models[i].model))
        .collect();
    if common.len() < 3 {
        bail!(
            "only {} model(s) are in both the MPG table and the arena leaderboard; correlations need at least 3",
            common.len()
        );
    }
    let y: Vec<f64> = common
        .iter()
        .map(|&i| arena[&report.models[i].model])
        .collect();
    let mut scopes: Vec<(String, Vec<f64>)> = vec![(
        "overall".into(),
        common
            .iter()
            .map(|&i| report.models[i].goodness.value)
            .collect(),
    )];
    for (c, name) in report.categories.iter().enumerate() {
        scopes.push((
            name.clone(),
            common
                .iter()
                .map(|&i| report.models[i].category_goodness[c].value)
                .collect(),
        ));
    }
    let z = (1.0 - level) / 2.0;
    let n = common.len();
    let correlations = scopes
        .into_iter()
        .map(|(scope, x)| {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            let (mut ps, mut ss) = (vec![], vec![]);
            for _ in 0..rounds {
                let idx: Vec<usize> = (0..n).map(|_| rng.gen_range(0..n)).collect();
                let xs: Vec<f64> = idx.iter().map(|&i| x[i]).collect();
                let ys: Vec<f64> = idx.iter().map(|&i| y[i]).collect();
                if let Some(p) = pearson(&xs, &ys).filter(|p| p.is_finite()) {
                    ps.push(p);
                    ss.push(spearman(&xs, &ys));
                }
            }
            let est = |point: f64, mut s: Vec<f64>| {
                s.retain(|v| v.is_finite());
                s.sort_by(f64::total_cmp);
                let (lower, upper) = if s.is_empty() {
                    (f64::NAN, f64::NAN)
                } else {
                    (quantile_sorted(&s, z), quantile_sorted(&s, 1.0 - z))
                };
                Estimate {
                    value: point,
                    lower,
                    upper,
                }
            };
            Correlation {
                pearson: est(pearson(&x, &y).unwrap_or(f64::NAN), ps),
                spearman: est(spearman(&x, &y), ss),
                scope,
            }
        })
        .collect();
    Ok(ArenaComparison {
        models: common
            .iter()
            .map(|&i| report.models[i].model.clone())
            .collect(),
        missing_from_arena: report
            .models
            .iter()
            .filter(|m| !arena.contains_key(&m.model))
            .map(|m| m.model.clone())
            .collect(),
        correlations,
    })
}
