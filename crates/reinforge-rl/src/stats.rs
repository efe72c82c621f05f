//! Statistics of ragged per-token matrices (one row per completion) that the trainer logs.

use crate::masked::Matrix;

/// verl `critic/vf_explained_var` (`metric_utils.compute_data_metrics`): `1 - Var(R - V) /
/// (Var(R) + 1e-5)` over all tokens, unbiased variances as `torch.var` (0 with fewer than two
/// tokens). Pairs `returns` and `values` entry by entry.
pub fn explained_variance(returns: &Matrix, values: &Matrix) -> f64 {
    let r: Vec<f64> = returns.iter().flatten().copied().collect();
    let d: Vec<f64> = returns
        .iter()
        .zip(values)
        .flat_map(|(g, v)| g.iter().zip(v).map(|(g, v)| g - v))
        .collect();
    1.0 - unbiased_var(&d) / (unbiased_var(&r) + 1e-5)
}

/// Unbiased variance (`n - 1` denominator), 0 for fewer than two values.
fn unbiased_var(x: &[f64]) -> f64 {
    let n = x.len() as f64;
    if n < 2.0 {
        return 0.0;
    }
    let mean = x.iter().sum::<f64>() / n;
    x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)
}

/// Mean over every entry of a ragged matrix (0 when empty).
pub fn token_mean(m: &Matrix) -> f64 {
    let n: usize = m.iter().map(Vec::len).sum();
    m.iter().flatten().sum::<f64>() / n.max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn explained_variance_is_one_for_a_perfect_critic_and_zero_for_a_constant() {
        let returns = vec![vec![1.0, 0.0], vec![0.5]];
        assert!((explained_variance(&returns, &returns) - 1.0).abs() < 1e-12);
        let constant = vec![vec![0.3, 0.3], vec![0.3]];
        assert!(explained_variance(&returns, &constant).abs() < 1e-3);
        // Var(R) = 0.25 for (1, 0, 0.5); errors (0.1, -0.1, 0) have variance 0.01.
        let close = vec![vec![0.9, 0.1], vec![0.5]];
        let ev = explained_variance(&returns, &close);
        assert!((ev - (1.0 - 0.01 / (0.25 + 1e-5))).abs() < 1e-12, "{ev}");
    }

    #[test]
    fn token_mean_weighs_tokens_not_rows_and_is_zero_when_empty() {
        assert_eq!(token_mean(&vec![vec![1.0, 1.0, 1.0], vec![4.0]]), 7.0 / 4.0);
        assert_eq!(token_mean(&vec![vec![], vec![]]), 0.0);
    }

    proptest! {
        #[test]
        fn explained_variance_is_at_most_one(
            r in proptest::collection::vec(-5.0f64..5.0, 2..20),
            noise in proptest::collection::vec(-1.0f64..1.0, 20),
        ) {
            let v: Vec<f64> = r.iter().zip(&noise).map(|(a, b)| a + b).collect();
            let ev = explained_variance(&vec![r.clone()], &vec![v]);
            prop_assert!(ev <= 1.0 + 1e-12);
            prop_assert!((explained_variance(&vec![r.clone()], &vec![r]) - 1.0).abs() < 1e-12);
        }
    }
}
