//! Prompt-to-Leaderboard aggregates: per-prompt coefficient vectors (one Bradley-Terry
//! coefficient per model) summarised over a prompt set, with a percentile bootstrap over
//! prompts, and the router that picks each prompt's best model under a cost budget.

use anyhow::{bail, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Rating points per unit of coefficient: `400 / ln 10`, Elo's scale.
pub const ELO_PER_NAT: f64 = 400.0 / std::f64::consts::LN_10;

/// Percentile (2.5%, 97.5%) bounds of the mean coefficient per model over prompt resamples.
pub fn bootstrap_means(coefs: &[Vec<f64>], rounds: usize, seed: u64) -> (Vec<f64>, Vec<f64>) {
    let (n, m) = (coefs.len(), coefs.first().map_or(0, Vec::len));
    if n < 2 || rounds == 0 {
        return (vec![f64::NAN; m], vec![f64::NAN; m]);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut draws: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); m];
    for _ in 0..rounds {
        let mut sum = vec![0.0; m];
        for _ in 0..n {
            let c = &coefs[rng.gen_range(0..n)];
            for j in 0..m {
                sum[j] += c[j];
            }
        }
        for j in 0..m {
            draws[j].push(sum[j] / n as f64);
        }
    }
    let q = |v: &mut Vec<f64>, p: f64| {
        v.sort_by(f64::total_cmp);
        v[((p * (v.len() - 1) as f64).round() as usize).min(v.len() - 1)]
    };
    let lo = draws.iter_mut().map(|v| q(v, 0.025)).collect();
    let hi = draws.iter_mut().map(|v| q(v, 0.975)).collect();
    (lo, hi)
}

/// Per prompt, the model with the highest coefficient among those costing at most `budget`.
pub fn route(
    models: &[String],
    coefs: &[Vec<f64>],
    costs: &[f64],
    budget: f64,
) -> Result<Vec<String>> {
    let allowed: Vec<usize> = (0..models.len()).filter(|&j| costs[j] <= budget).collect();
    if allowed.is_empty() {
        bail!("--budget {budget}: no model costs that little");
    }
    Ok(coefs
        .iter()
        .map(|c| {
            let best = allowed
                .iter()
                .copied()
                .max_by(|&a, &b| c[a].total_cmp(&c[b]))
                .unwrap_or(allowed[0]);
            models[best].clone()
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_to_the_best_affordable_model_and_bootstraps_only_a_set() {
        let models: Vec<String> = ["a", "b", "c"].iter().map(|m| m.to_string()).collect();
        let coefs = vec![vec![2.0, 1.0, 0.5], vec![0.0, 1.0, 3.0]];
        let routes = route(&models, &coefs, &[10.0, 1.0, 1.0], 2.0).unwrap();
        assert_eq!(routes, ["b", "c"]);
        assert!(route(&models, &coefs, &[10.0, 5.0, 5.0], 2.0).is_err());
        let (lo, hi) = bootstrap_means(&coefs, 200, 0);
        for j in 0..3 {
            let (min, max) = (coefs[0][j].min(coefs[1][j]), coefs[0][j].max(coefs[1][j]));
            assert!(min <= lo[j] && lo[j] <= hi[j] && hi[j] <= max);
        }
        let (lo, _) = bootstrap_means(&coefs[..1], 200, 0);
        assert!(lo.iter().all(|x| x.is_nan()), "one prompt has no interval");
    }
}
