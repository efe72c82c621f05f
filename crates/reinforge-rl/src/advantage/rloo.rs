//! RLOO, leave-one-out baselines (Ahmadian et al. 2024, arXiv:2402.14740), both verl variants.

use crate::advantage::AdvantageOutput;
use crate::groups::Groups;
use crate::masked::{broadcast, row_sums, Matrix};

/// verl `compute_rloo_outcome_advantage` (core_algos.py @ 1dda039): for a group of `n > 1`,
/// `s·n/(n-1) - mean·n/(n-1)` = `s - mean of the others`; a singleton keeps its raw score.
pub fn rloo_outcome(token_level_rewards: &Matrix, mask: &Matrix, index: &[i64]) -> AdvantageOutput {
    let mut scores = row_sums(token_level_rewards);
    for rows in Groups::from_index(index).iter() {
        let n = rows.len() as f64;
        if rows.len() > 1 {
            let mean = rows.iter().map(|&i| scores[i]).sum::<f64>() / n;
            for &i in rows {
                scores[i] = scores[i] * n / (n - 1.0) - mean * n / (n - 1.0);
            }
        }
    }
    AdvantageOutput::same(broadcast(&scores, mask))
}

/// verl `compute_rloo_vectorized_outcome_advantage` (core_algos.py @ 1dda039):
/// `(n·s - Σ_g s) / max(n-1, 1)`, and 0 for a singleton (unlike [`rloo_outcome`]).
pub fn rloo_vectorized_outcome(
    token_level_rewards: &Matrix,
    mask: &Matrix,
    index: &[i64],
) -> AdvantageOutput {
    let scores = row_sums(token_level_rewards);
    let mut adv = vec![0.0; scores.len()];
    for rows in Groups::from_index(index).iter() {
        let c = rows.len() as f64;
        let sum: f64 = rows.iter().map(|&i| scores[i]).sum();
        for &i in rows {
            adv[i] = if rows.len() > 1 {
                (c * scores[i] - sum) / (c - 1.0)
            } else {
                0.0
            };
        }
    }
    AdvantageOutput::same(broadcast(&adv, mask))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leave_one_out_by_hand() {
        let r = vec![vec![1.0], vec![0.0], vec![0.0], vec![5.0]];
        let m = vec![vec![1.0]; 4];
        let idx = [0, 0, 0, 1];
        let a = rloo_outcome(&r, &m, &idx).advantages;
        assert!((a[0][0] - 1.0).abs() < 1e-12 && (a[1][0] + 0.5).abs() < 1e-12);
        assert_eq!(a[3][0], 5.0, "singleton keeps its score");
        let v = rloo_vectorized_outcome(&r, &m, &idx).advantages;
        assert!((v[0][0] - 1.0).abs() < 1e-12 && v[3][0] == 0.0);
    }
}
