//! How pass@k changed between two evaluations of the same problems (before and after
//! training), with paired bootstrap intervals: problems are resampled with replacement and the
//! same draw is used for both evaluations, so the interval of the difference accounts for the
//! problems' shared difficulty. Answers the question "does RL add new solutions or select among
//! existing ones?": a pass@1 gain with no pass@k gain at large k is selection.

use rand::Rng;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::bootstrap::{quantile_sorted, round_rng};
use crate::decompose::Interval;
use crate::passk::try_pass_at_k;

/// k = 1, 2, 4, ... up to n, with n itself always included.
pub fn k_values(n: u64) -> Vec<u64> {
    let mut ks: Vec<u64> = std::iter::successors(Some(1u64), |k| Some(k * 2))
        .take_while(|&k| k <= n)
        .collect();
    if ks.last() != Some(&n) {
        ks.push(n);
    }
    ks
}

/// pass@k before and after, their difference, and percentile bootstrap intervals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PassAtKChange {
    pub k: u64,
    pub before: f64,
    pub after: f64,
    pub delta: f64,
    pub before_interval: Interval,
    pub after_interval: Interval,
    pub delta_interval: Interval,
}

/// Per-problem pass@k values for every k (rows: problems).
fn per_problem(counts: &[(u64, u64)], ks: &[u64]) -> anyhow::Result<Vec<Vec<f64>>> {
    counts
        .iter()
        .enumerate()
        .map(|(i, &(n, c))| {
            ks.iter()
                .map(|&k| try_pass_at_k(n, c, k).map_err(|e| anyhow::anyhow!("problem {i}: {e}")))
                .collect()
        })
        .collect()
}

/// [`PassAtKChange`] for each of `ks`, from `(n, c)` per problem before and after (the same
/// problems in the same order), with `rounds` paired bootstrap resamples at `level`
/// (e.g. 0.95), reproducible from `seed`.
pub fn paired_pass_at_k_change(
    before: &[(u64, u64)],
    after: &[(u64, u64)],
    ks: &[u64],
    rounds: usize,
    level: f64,
    seed: u64,
) -> anyhow::Result<Vec<PassAtKChange>> {
    anyhow::ensure!(
        before.len() == after.len() && !before.is_empty(),
        "paired pass@k needs the same non-empty set of problems before and after ({} vs {})",
        before.len(),
        after.len()
    );
    anyhow::ensure!(
        rounds > 0 && level > 0.0 && level < 1.0,
        "bad bootstrap settings"
    );
    let (b, a) = (per_problem(before, ks)?, per_problem(after, ks)?);
    let n = b.len();
    let mean = |rows: &[Vec<f64>], picks: &[usize], j: usize| -> f64 {
        picks.iter().map(|&i| rows[i][j]).sum::<f64>() / picks.len() as f64
    };
    let all: Vec<usize> = (0..n).collect();
    // draws[r][j] = (before, after) means of resample r at ks[j].
    let draws: Vec<Vec<(f64, f64)>> = (0..rounds as u64)
        .into_par_iter()
        .map(|r| {
            let mut rng = round_rng(seed, r);
            let picks: Vec<usize> = (0..n).map(|_| rng.gen_range(0..n)).collect();
            (0..ks.len())
                .map(|j| (mean(&b, &picks, j), mean(&a, &picks, j)))
                .collect()
        })
        .collect();
    let tail = (1.0 - level) / 2.0;
    let interval = |values: Vec<f64>| {
        let mut v = values;
        v.sort_by(f64::total_cmp);
        Interval {
            lower: quantile_sorted(&v, tail),
            upper: quantile_sorted(&v, 1.0 - tail),
        }
    };
    Ok(ks
        .iter()
        .enumerate()
        .map(|(j, &k)| {
            let (before, after) = (mean(&b, &all, j), mean(&a, &all, j));
            PassAtKChange {
                k,
                before,
                after,
                delta: after - before,
                before_interval: interval(draws.iter().map(|d| d[j].0).collect()),
                after_interval: interval(draws.iter().map(|d| d[j].1).collect()),
                delta_interval: interval(draws.iter().map(|d| d[j].1 - d[j].0).collect()),
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k_values_are_powers_of_two_then_n() {
        assert_eq!(k_values(64), vec![1, 2, 4, 8, 16, 32, 64]);
        assert_eq!(k_values(10), vec![1, 2, 4, 8, 10]);
        assert_eq!(k_values(1), vec![1]);
    }

    /// Sharpening: every problem the base solved sometimes is solved always after, none new.
    /// pass@1 rises with an interval above zero; pass@n does not move at all.
    #[test]
    fn selection_raises_pass_at_1_but_not_pass_at_n() {
        let before: Vec<(u64, u64)> = (0..40)
            .map(|i| (8, if i % 2 == 0 { 2 } else { 0 }))
            .collect();
        let after: Vec<(u64, u64)> = (0..40)
            .map(|i| (8, if i % 2 == 0 { 8 } else { 0 }))
            .collect();
        let ch = paired_pass_at_k_change(&before, &after, &k_values(8), 500, 0.95, 1).unwrap();
        let (first, last) = (&ch[0], ch.last().unwrap());
        assert!((first.before - 0.125).abs() < 1e-12 && (first.after - 0.5).abs() < 1e-12);
        assert!(first.delta_interval.lower > 0.0, "{first:?}");
        assert_eq!(last.k, 8);
        assert!(
            last.delta.abs() < 1e-12 && last.delta_interval.contains(0.0),
            "{last:?}"
        );
        // Paired: the difference's interval is far narrower than the levels' intervals.
        let width = |i: &Interval| i.upper - i.lower;
        assert!(
            width(&first.delta_interval)
                < width(&first.before_interval) + width(&first.after_interval)
        );
    }

    /// New solutions: problems never solved before are solved after; pass@n rises.
    #[test]
    fn new_solutions_raise_pass_at_n() {
        let before = vec![(4, 0); 30];
        let after: Vec<(u64, u64)> = (0..30).map(|i| (4, u64::from(i % 3 == 0))).collect();
        let ch = paired_pass_at_k_change(&before, &after, &[1, 4], 500, 0.9, 2).unwrap();
        assert!((ch[1].after - 10.0 / 30.0).abs() < 1e-12);
        assert!(ch[1].delta_interval.lower > 0.0, "{:?}", ch[1]);
    }

    #[test]
    fn mismatched_or_bad_inputs_are_errors() {
        assert!(paired_pass_at_k_change(&[(4, 1)], &[], &[1], 10, 0.9, 0).is_err());
        assert!(paired_pass_at_k_change(&[(4, 5)], &[(4, 1)], &[1], 10, 0.9, 0).is_err());
        assert!(paired_pass_at_k_change(&[(4, 1)], &[(4, 1)], &[8], 10, 0.9, 0).is_err());
        assert!(paired_pass_at_k_change(&[(4, 1)], &[(4, 1)], &[1], 0, 0.9, 0).is_err());
    }
}
