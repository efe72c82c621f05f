//! Robust aggregate metrics for few-run evaluations, following rliable (Agarwal et al. 2021,
//! google-research/rliable): `rliable/metrics.py` (`aggregate_iqm`, `aggregate_mean`, `aggregate_median`,
//! `aggregate_optimality_gap`, `probability_of_improvement`) and `rliable/library.py`
//! (`StratifiedBootstrap`, `StratifiedIndependentBootstrap`, `get_interval_estimates` with the percentile
//! method, `create_performance_profile` with `run_score_deviation` / `mean_score_deviation`).
//!
//! Scores are a `runs x tasks` matrix per algorithm. The stratified bootstrap resamples runs with
//! replacement independently within each task (rliable draws an index per (run, task) cell), seeded per
//! round (ChaCha8 stream = round) so intervals do not depend on the thread count.

use crate::bootstrap::{quantile_sorted, round_rng};
use anyhow::{bail, Result};
use rand::Rng;
use rayon::prelude::*;
use serde::Serialize;

/// A `runs x tasks` score matrix, row-major.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScoreMatrix {
    /// Number of runs (seeds).
    pub runs: usize,
    /// Number of tasks.
    pub tasks: usize,
    /// `data[r * tasks + t]`.
    pub data: Vec<f64>,
}

impl ScoreMatrix {
    /// Builds a matrix from rows (one per run); all rows must have the same length.
    pub fn from_rows(rows: &[Vec<f64>]) -> Result<Self> {
        let tasks = rows.first().map_or(0, |r| r.len());
        if rows.is_empty() || tasks == 0 {
            bail!("score matrix must have at least one run and one task");
        }
        if let Some((i, r)) = rows.iter().enumerate().find(|(_, r)| r.len() != tasks) {
            bail!("run {i} has {} task scores, expected {tasks}", r.len());
        }
        Ok(ScoreMatrix {
            runs: rows.len(),
            tasks,
            data: rows.concat(),
        })
    }

    /// Score of run `r` on task `t`.
    pub fn at(&self, r: usize, t: usize) -> f64 {
        self.data[r * self.tasks + t]
    }

    fn task_means(&self) -> Vec<f64> {
        (0..self.tasks)
            .map(|t| (0..self.runs).map(|r| self.at(r, t)).sum::<f64>() / self.runs as f64)
            .collect()
    }

    /// One stratified resample: within each task, runs drawn with replacement.
    pub fn stratified_resample<R: Rng + ?Sized>(&self, rng: &mut R) -> ScoreMatrix {
        let mut data = vec![0.0; self.data.len()];
        for r in 0..self.runs {
            for t in 0..self.tasks {
                data[r * self.tasks + t] = self.at(rng.gen_range(0..self.runs), t);
            }
        }
        ScoreMatrix {
            runs: self.runs,
            tasks: self.tasks,
            data,
        }
    }
}

/// Interquartile mean over all runs and tasks: scipy `trim_mean(x, 0.25)` on the flattened scores,
/// which drops `floor(0.25 n)` values at each end (rliable `aggregate_iqm`).
pub fn iqm(m: &ScoreMatrix) -> f64 {
    let mut v = m.data.clone();
    v.sort_by(f64::total_cmp);
    let cut = (0.25 * v.len() as f64) as usize;
    let kept = &v[cut..v.len() - cut];
    kept.iter().sum::<f64>() / kept.len() as f64
}

/// Mean over tasks of the per-task mean over runs (rliable `aggregate_mean`).
pub fn mean(m: &ScoreMatrix) -> f64 {
    let tm = m.task_means();
    tm.iter().sum::<f64>() / tm.len() as f64
}

/// Median over tasks of the per-task mean over runs (rliable `aggregate_median`; numpy median averages
/// the two middle values).
pub fn median(m: &ScoreMatrix) -> f64 {
    let mut tm = m.task_means();
    tm.sort_by(f64::total_cmp);
    quantile_sorted(&tm, 0.5)
}

/// Optimality gap `gamma - mean(min(score, gamma))` over all runs and tasks (rliable
/// `aggregate_optimality_gap`, default `gamma = 1`).
pub fn optimality_gap(m: &ScoreMatrix, gamma: f64) -> f64 {
    gamma - m.data.iter().map(|x| x.min(gamma)).sum::<f64>() / m.data.len() as f64
}

/// Average over tasks of P(X > Y) where X and Y are random runs of the two algorithms on that task,
/// counting ties as 1/2: the Mann-Whitney U statistic over `n_x n_y` (rliable
/// `probability_of_improvement`; identical task columns give exactly 0.5, as there).
pub fn probability_of_improvement(x: &ScoreMatrix, y: &ScoreMatrix) -> Result<f64> {
    if x.tasks != y.tasks {
        bail!(
            "probability of improvement needs the same tasks: {} vs {}",
            x.tasks,
            y.tasks
        );
    }
    let mut total = 0.0;
    for t in 0..x.tasks {
        let cx: Vec<f64> = (0..x.runs).map(|r| x.at(r, t)).collect();
        let cy: Vec<f64> = (0..y.runs).map(|r| y.at(r, t)).collect();
        if cx == cy {
            total += 0.5;
            continue;
        }
        let mut u = 0.0;
        for a in &cx {
            for b in &cy {
                u += if a > b {
                    1.0
                } else if a == b {
                    0.5
                } else {
                    0.0
                };
            }
        }
        total += u / (cx.len() * cy.len()) as f64;
    }
    Ok(total / x.tasks as f64)
}

/// Score distribution at each `tau`: the fraction of all (run, task) scores above `tau`
/// (rliable `run_score_deviation`), or with `average` the fraction of per-task mean scores above `tau`
/// (`mean_score_deviation`).
pub fn performance_profile(m: &ScoreMatrix, taus: &[f64], average: bool) -> Vec<f64> {
    let vals = if average {
        m.task_means()
    } else {
        m.data.clone()
    };
    taus.iter()
        .map(|&tau| vals.iter().filter(|&&v| v > tau).count() as f64 / vals.len() as f64)
        .collect()
}

/// A point estimate with a percentile-bootstrap interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Estimate {
    /// Statistic on the original data.
    pub point: f64,
    /// Lower bound.
    pub lower: f64,
    /// Upper bound.
    pub upper: f64,
}

/// Percentile interval of `stat` under the stratified bootstrap (`reps` rounds, seeded).
pub fn stratified_interval(
    m: &ScoreMatrix,
    stat: &(dyn Fn(&ScoreMatrix) -> Vec<f64> + Sync),
    reps: usize,
    seed: u64,
    level: f64,
) -> Vec<Estimate> {
    let point = stat(m);
    let samples: Vec<Vec<f64>> = (0..reps)
        .into_par_iter()
        .map(|r| stat(&m.stratified_resample(&mut round_rng(seed, r as u64))))
        .collect();
    percentile_estimates(&point, &samples, level)
}

/// Percentile interval of a two-sample statistic with each input resampled independently (rliable
/// `StratifiedIndependentBootstrap`), e.g. probability of improvement.
pub fn stratified_interval_pair(
    x: &ScoreMatrix,
    y: &ScoreMatrix,
    stat: &(dyn Fn(&ScoreMatrix, &ScoreMatrix) -> f64 + Sync),
    reps: usize,
    seed: u64,
    level: f64,
) -> Estimate {
    let point = stat(x, y);
    let samples: Vec<Vec<f64>> = (0..reps)
        .into_par_iter()
        .map(|r| {
            let mut rng = round_rng(seed, r as u64);
            let xs = x.stratified_resample(&mut rng);
            let ys = y.stratified_resample(&mut rng);
            vec![stat(&xs, &ys)]
        })
        .collect();
    percentile_estimates(&[point], &samples, level)[0]
}

fn percentile_estimates(point: &[f64], samples: &[Vec<f64>], level: f64) -> Vec<Estimate> {
    let a = (1.0 - level) / 2.0;
    (0..point.len())
        .map(|j| {
            let mut col: Vec<f64> = samples.iter().map(|s| s[j]).collect();
            col.sort_by(f64::total_cmp);
            Estimate {
                point: point[j],
                lower: quantile_sorted(&col, a),
                upper: quantile_sorted(&col, 1.0 - a),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(rows: &[&[f64]]) -> ScoreMatrix {
        ScoreMatrix::from_rows(&rows.iter().map(|r| r.to_vec()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn point_estimates_by_hand() {
        // 3 runs x 4 tasks = 12 scores; trim_mean(0.25) drops 3 at each end.
        let x = m(&[
            &[0.1, 0.9, 0.5, 2.0],
            &[0.2, 0.8, 0.4, 1.5],
            &[0.3, 0.7, 0.6, -1.0],
        ]);
        let mut all = x.data.clone();
        all.sort_by(f64::total_cmp);
        let want_iqm = all[3..9].iter().sum::<f64>() / 6.0;
        assert!((iqm(&x) - want_iqm).abs() < 1e-15);
        // Task means 0.2, 0.8, 0.5, 0.8333..: mean and median (average of 0.5 and 0.8).
        let tm = [0.2, 0.8, 0.5, 2.5 / 3.0];
        assert!((mean(&x) - tm.iter().sum::<f64>() / 4.0).abs() < 1e-15);
        assert!((median(&x) - 0.65).abs() < 1e-15);
        // Optimality gap clips 2.0 and 1.5 to 1.
        let clipped: f64 = [0.1, 0.9, 0.5, 1.0, 0.2, 0.8, 0.4, 1.0, 0.3, 0.7, 0.6, -1.0]
            .iter()
            .sum();
        assert!((optimality_gap(&x, 1.0) - (1.0 - clipped / 12.0)).abs() < 1e-15);
        assert_eq!(
            performance_profile(&x, &[0.45, 10.0], false),
            vec![7.0 / 12.0, 0.0]
        );
        assert_eq!(performance_profile(&x, &[0.45], true), vec![0.75]);
    }

    #[test]
    fn probability_of_improvement_cases() {
        let x = m(&[&[1.0, 5.0], &[2.0, 5.0]]);
        let y = m(&[&[0.0, 5.0], &[2.0, 5.0]]);
        // Task 0: pairs (1,0)>,(1,2)<,(2,0)>,(2,2)= -> 2.5/4; task 1 identical columns -> 0.5.
        assert!(
            (probability_of_improvement(&x, &y).unwrap() - (2.5 / 4.0 + 0.5) / 2.0).abs() < 1e-15
        );
        assert!((probability_of_improvement(&x, &x).unwrap() - 0.5).abs() < 1e-15);
        let p_xy = probability_of_improvement(&x, &y).unwrap();
        let p_yx = probability_of_improvement(&y, &x).unwrap();
        assert!((p_xy + p_yx - 1.0).abs() < 1e-15);
    }

    #[test]
    fn stratified_bootstrap_keeps_tasks_and_covers_point() {
        let rows: Vec<Vec<f64>> = (0..10)
            .map(|r| (0..5).map(|t| t as f64 + 0.1 * r as f64).collect())
            .collect();
        let x = ScoreMatrix::from_rows(&rows).unwrap();
        let s = x.stratified_resample(&mut round_rng(1, 0));
        // Each task column only contains values from that task.
        for r in 0..10 {
            for t in 0..5 {
                assert!((s.at(r, t) - t as f64).abs() < 0.95 && s.at(r, t) >= t as f64);
            }
        }
        let est = stratified_interval(&x, &|m| vec![iqm(m), mean(m)], 500, 3, 0.95);
        for e in &est {
            assert!(
                e.lower <= e.point && e.point <= e.upper && e.upper - e.lower > 0.0,
                "{e:?}"
            );
        }
        let single = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let again =
            single.install(|| stratified_interval(&x, &|m| vec![iqm(m), mean(m)], 500, 3, 0.95));
        assert_eq!(est, again);
    }
}
