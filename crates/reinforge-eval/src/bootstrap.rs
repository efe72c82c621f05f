//! Bootstrap intervals for Bradley-Terry ratings and the interval-based rank rule.
//!
//! Resampling follows FastChat `compute_bootstrap_bt` (`rating_systems.py`): the counts of the unique
//! `(a, b, outcome)` rows are redrawn as `Multinomial(N, count / N)` — the same distribution as resampling
//! the N battles with replacement — and each round is refitted. We draw the multinomial by conditional
//! binomials, warm-start each round's Newton fit from the full-data solution, and run rounds in parallel
//! with rayon; round `r` uses its own ChaCha8 stream (`seed`, stream `r`), so results are identical for
//! any thread count. Percentiles use linear interpolation (pandas/numpy `quantile` default), the rank rule
//! is FastChat's `report_elo_analysis_results`: `rank = 1 + #{models whose lower bound > my upper bound}`.

use crate::bt::{fit_bt, FitOptions, OutcomeRows, RowToPair};
use rand::{Rng, SeedableRng};
use rand_distr::{Binomial, Distribution};
use rayon::prelude::*;

/// Draws `Multinomial(n, probs)` (probabilities need not be normalised) by conditional binomials.
pub fn multinomial<R: Rng + ?Sized>(rng: &mut R, n: u64, probs: &[f64], out: &mut [f64]) {
    let mut rest_mass: f64 = probs.iter().sum();
    let mut rest_n = n;
    for (i, &p) in probs.iter().enumerate() {
        if rest_n == 0 || rest_mass <= 0.0 {
            out[i] = 0.0;
            continue;
        }
        let q = (p / rest_mass).clamp(0.0, 1.0);
        let x = if q >= 1.0 {
            rest_n
        } else {
            Binomial::new(rest_n, q)
                .expect("valid binomial")
                .sample(rng)
        };
        out[i] = x as f64;
        rest_n -= x;
        rest_mass -= p;
    }
}

/// Per-round RNG: ChaCha8 seeded with `seed`, stream `round`.
pub fn round_rng(seed: u64, round: u64) -> rand_chacha::ChaCha8Rng {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(round);
    rng
}

/// Refits Bradley-Terry on `rounds` multinomial resamples of `rows`; returns one centred strength vector
/// (natural units) per round. `warm` is the full-data solution used as the starting point.
///
/// The multinomial over rows is drawn in two exact stages — first the battles per unordered pair
/// (`Multinomial(N, pair totals)`), then the outcome split within each pair (`Multinomial(n_pair, row
/// counts)`) — which has the same distribution as one multinomial over rows (aggregation property) but
/// needs about half as many binomial draws.
pub fn bootstrap_bt(
    rows: &OutcomeRows,
    warm: &[f64],
    rounds: usize,
    seed: u64,
    opts: &FitOptions,
) -> Vec<Vec<f64>> {
    let full = RowToPair::new(rows).aggregate(&rows.count);
    let n = rows.total().round() as u64;
    let np = full.lo.len();
    let pair_totals: Vec<f64> = (0..np)
        .map(|p| full.win_lo[p] + full.win_hi[p] + full.tie[p])
        .collect();
    (0..rounds)
        .into_par_iter()
        .map_init(
            || (vec![0.0; np], full.clone()),
            |(pc, table), r| {
                let mut rng = round_rng(seed, r as u64);
                multinomial(&mut rng, n, &pair_totals, pc);
                let mut split = [0.0; 3];
                for (p, &count) in pc.iter().enumerate() {
                    let probs = [full.win_lo[p], full.tie[p], full.win_hi[p]];
                    multinomial(&mut rng, count as u64, &probs, &mut split);
                    table.win_lo[p] = split[0];
                    table.tie[p] = split[1];
                    table.win_hi[p] = split[2];
                }
                fit_bt(table, Some(warm), opts).beta
            },
        )
        .collect()
}

/// Refits Bradley-Terry for given per-row count vectors (e.g. FastChat's recorded resamples).
pub fn refit_counts(
    rows: &OutcomeRows,
    counts: &[Vec<f64>],
    warm: &[f64],
    opts: &FitOptions,
) -> Vec<Vec<f64>> {
    let map = RowToPair::new(rows);
    counts
        .par_iter()
        .map(|c| fit_bt(&map.aggregate(c), Some(warm), opts).beta)
        .collect()
}

/// Linear-interpolation quantile of already sorted data (numpy/pandas default `linear` method).
pub fn quantile_sorted(sorted: &[f64], q: f64) -> f64 {
    assert!(!sorted.is_empty(), "quantile of empty data");
    let h = (sorted.len() - 1) as f64 * q;
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(sorted.len() - 1);
    sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo])
}

/// Bootstrap summary of one model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IntervalSummary {
    /// Lower percentile (2.5 % for a 95 % interval).
    pub lower: f64,
    /// Upper percentile.
    pub upper: f64,
    /// Median over rounds.
    pub median: f64,
    /// Sample variance over rounds (ddof = 1, as pandas `var`).
    pub variance: f64,
}

/// Summarises `rounds x models` values column by column with a central `level` interval (e.g. 0.95).
pub fn summarize(rounds: &[Vec<f64>], level: f64) -> Vec<IntervalSummary> {
    let k = rounds.first().map_or(0, |r| r.len());
    let a = (1.0 - level) / 2.0;
    (0..k)
        .map(|m| {
            let mut col: Vec<f64> = rounds.iter().map(|r| r[m]).collect();
            let n = col.len() as f64;
            let mean = col.iter().sum::<f64>() / n;
            let variance = if col.len() > 1 {
                col.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1.0)
            } else {
                f64::NAN
            };
            col.sort_by(f64::total_cmp);
            IntervalSummary {
                lower: quantile_sorted(&col, a),
                upper: quantile_sorted(&col, 1.0 - a),
                median: quantile_sorted(&col, 0.5),
                variance,
            }
        })
        .collect()
}

/// FastChat's interval rank: `1 + #{j != i : lower[j] > upper[i]}`. Ties share a rank.
pub fn interval_ranks(lower: &[f64], upper: &[f64]) -> Vec<usize> {
    (0..upper.len())
        .map(|i| {
            1 + (0..lower.len())
                .filter(|&j| j != i && lower[j] > upper[i])
                .count()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multinomial_sums_and_means() {
        let probs = [5.0, 1.0, 0.0, 4.0];
        let mut rng = round_rng(1, 0);
        let mut out = [0.0; 4];
        let mut mean = [0.0; 4];
        for _ in 0..2000 {
            multinomial(&mut rng, 100, &probs, &mut out);
            assert_eq!(out.iter().sum::<f64>(), 100.0);
            assert_eq!(out[2], 0.0);
            for i in 0..4 {
                mean[i] += out[i] / 2000.0;
            }
        }
        assert!(
            (mean[0] - 50.0).abs() < 0.5 && (mean[3] - 40.0).abs() < 0.5,
            "{mean:?}"
        );
    }

    #[test]
    fn quantiles_match_numpy_linear() {
        let x = [1.0, 2.0, 4.0, 8.0, 16.0];
        // numpy.quantile([1,2,4,8,16], [0.025, 0.5, 0.975]) = 1.1, 4.0, 15.2
        assert!((quantile_sorted(&x, 0.025) - 1.1).abs() < 1e-12);
        assert_eq!(quantile_sorted(&x, 0.5), 4.0);
        assert!((quantile_sorted(&x, 0.975) - 15.2).abs() < 1e-12);
        let s = summarize(&[vec![1.0], vec![2.0], vec![3.0]], 0.5);
        assert_eq!((s[0].lower, s[0].upper, s[0].variance), (1.5, 2.5, 1.0));
    }

    #[test]
    fn rank_rule_counts_dominating_intervals() {
        // Model 0 clearly best; 1 and 2 overlap; 3 below everyone.
        let lower = [10.0, 5.0, 4.0, 0.0];
        let upper = [12.0, 8.0, 7.0, 1.0];
        assert_eq!(interval_ranks(&lower, &upper), vec![1, 2, 2, 4]);
    }
}
