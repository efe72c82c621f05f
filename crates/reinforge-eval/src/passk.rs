//! pass@k: the unbiased estimator of Chen et al. 2021 ("Evaluating Large Language Models Trained on
//! Code", the Codex paper), `1 - C(n-c, k) / C(n, k)`.
//!
//! The binomial ratio is evaluated in the numerically stable product form used by the paper's
//! reference `pass_at_k` (numpy): `C(n-c,k)/C(n,k) = prod_{i=n-c+1..n} (1 - k/i)`, which is exactly 0
//! (so pass@k = 1) when `n - c < k`. We accumulate the product in log space (`ln_1p`) and take the
//! complement with `exp_m1`, so small pass@k values (e.g. n = 1000, c = 1, k = 1 -> 0.001) keep full
//! relative precision instead of suffering the cancellation of `1 - prod`.

/// Errors from invalid `(n, c, k)` arguments.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PassAtKError {
    /// k must satisfy 1 <= k <= n.
    #[error("pass@k needs 1 <= k <= n, got k = {k}, n = {n}")]
    BadK { n: u64, k: u64 },
    /// The number of correct samples cannot exceed the number of samples.
    #[error("pass@k needs c <= n, got c = {c}, n = {n}")]
    BadC { n: u64, c: u64 },
}

/// Checked pass@k: `1 - C(n-c,k)/C(n,k)` for `n` samples of which `c` are correct.
///
/// Returns an error when `k == 0`, `k > n` or `c > n` (the estimator is undefined there).
pub fn try_pass_at_k(n: u64, c: u64, k: u64) -> Result<f64, PassAtKError> {
    if k == 0 || k > n {
        return Err(PassAtKError::BadK { n, k });
    }
    if c > n {
        return Err(PassAtKError::BadC { n, c });
    }
    if c == 0 {
        return Ok(0.0);
    }
    if n - c < k {
        return Ok(1.0);
    }
    // ln prod_{i=n-c+1..n} (1 - k/i); every factor is in (0, 1) because i >= n-c+1 > k.
    let kf = k as f64;
    let mut log_prod = 0.0f64;
    for i in (n - c + 1)..=n {
        log_prod += (-kf / i as f64).ln_1p();
    }
    Ok(-log_prod.exp_m1())
}

/// pass@k for one problem (Chen et al. 2021, unbiased estimator, stable product form).
///
/// # Panics
/// When `k == 0`, `k > n` or `c > n`; use [`try_pass_at_k`] to get an error instead.
pub fn pass_at_k(n: u64, c: u64, k: u64) -> f64 {
    match try_pass_at_k(n, c, k) {
        Ok(v) => v,
        Err(e) => panic!("{e}"),
    }
}

/// Mean pass@k over problems for each `k` in `ks`. `counts` holds one `(n, c)` per problem.
///
/// This is how code benchmarks report pass@k (HumanEval's `estimate_pass_at_k(...).mean()`).
/// Returns NaN for every k when `counts` is empty.
///
/// # Panics
/// When some problem has `k > n` or `c > n` (see [`try_pass_at_k_curve`]).
pub fn pass_at_k_curve(counts: &[(u64, u64)], ks: &[u64]) -> Vec<f64> {
    match try_pass_at_k_curve(counts, ks) {
        Ok(v) => v,
        Err(e) => panic!("{e}"),
    }
}

/// Checked form of [`pass_at_k_curve`]; the error names the offending problem index.
pub fn try_pass_at_k_curve(counts: &[(u64, u64)], ks: &[u64]) -> anyhow::Result<Vec<f64>> {
    ks.iter()
        .map(|&k| {
            let mut sum = 0.0;
            for (idx, &(n, c)) in counts.iter().enumerate() {
                sum += try_pass_at_k(n, c, k).map_err(|e| anyhow::anyhow!("problem {idx}: {e}"))?;
            }
            Ok(sum / counts.len() as f64)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Exact pass@k as a rational with u128 arithmetic (small n only), independent of the product form.
    fn exact(n: u64, c: u64, k: u64) -> f64 {
        fn binom(n: u64, k: u64) -> u128 {
            if k > n {
                return 0;
            }
            let mut r: u128 = 1;
            for i in 0..k {
                r = r * (n - i) as u128 / (i + 1) as u128;
            }
            r
        }
        let num = binom(n - c, k);
        let den = binom(n, k);
        (den - num) as f64 / den as f64
    }

    #[test]
    fn matches_exact_binomials_small_n() {
        for n in 1..=40u64 {
            for c in 0..=n {
                for k in 1..=n {
                    let got = pass_at_k(n, c, k);
                    let want = exact(n, c, k);
                    assert!(
                        (got - want).abs() <= 1e-13 * want.abs().max(1e-300),
                        "n={n} c={c} k={k}: {got} vs {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn edge_cases() {
        assert_eq!(pass_at_k(10, 0, 1), 0.0);
        assert_eq!(pass_at_k(10, 0, 10), 0.0);
        assert_eq!(pass_at_k(10, 10, 1), 1.0);
        assert_eq!(pass_at_k(10, 10, 10), 1.0);
        // k = n: any correct sample is drawn.
        assert_eq!(pass_at_k(7, 1, 7), 1.0);
        // k = 1 is the plain fraction correct.
        assert!((pass_at_k(1000, 1, 1) - 0.001).abs() <= 1e-18);
        assert!(matches!(
            try_pass_at_k(3, 1, 4),
            Err(PassAtKError::BadK { .. })
        ));
        assert!(matches!(
            try_pass_at_k(3, 1, 0),
            Err(PassAtKError::BadK { .. })
        ));
        assert!(matches!(
            try_pass_at_k(3, 4, 1),
            Err(PassAtKError::BadC { .. })
        ));
    }

    #[test]
    #[should_panic(expected = "k <= n")]
    fn panics_on_k_above_n() {
        pass_at_k(2, 1, 3);
    }

    #[test]
    fn monotone_in_k_and_c() {
        for k in 1..50 {
            assert!(pass_at_k(50, 5, k + 1) >= pass_at_k(50, 5, k));
        }
        for c in 0..50 {
            assert!(pass_at_k(50, c + 1, 4) >= pass_at_k(50, c, 4));
        }
    }

    #[test]
    fn curve_is_mean_over_problems() {
        let counts = [(10, 3), (10, 0), (5, 5)];
        let curve = pass_at_k_curve(&counts, &[1, 2, 4]);
        for (i, &k) in [1u64, 2, 4].iter().enumerate() {
            let want = counts.iter().map(|&(n, c)| exact(n, c, k)).sum::<f64>() / 3.0;
            assert!((curve[i] - want).abs() < 1e-15);
        }
        assert!(try_pass_at_k_curve(&counts, &[6])
            .unwrap_err()
            .to_string()
            .contains("problem 2"));
    }
}
