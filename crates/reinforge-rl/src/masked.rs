//! Masked batch statistics over `B x T` matrices, with verl's conventions
//! (`verl/utils/torch_functional.py` @ 1dda039: `masked_mean`, `masked_var`, `masked_whiten`).
//! They are shared by the estimators that whiten over the whole batch (GAE, REINFORCE++, GDPO).

/// A `B x T` matrix of `f64`, row-major: one row per response, one column per token.
pub type Matrix = Vec<Vec<f64>>;

/// `Σ x·m / (Σ m + 1e-8)` over the whole batch (verl `masked_mean`: the `1e-8` keeps an empty
/// mask finite, and is why a full mask does not give the plain mean to the last bit).
pub fn masked_mean(values: &Matrix, mask: &Matrix) -> f64 {
    let (mut s, mut n) = (0.0, 0.0);
    for (vr, mr) in values.iter().zip(mask) {
        for (v, m) in vr.iter().zip(mr) {
            s += v * m;
            n += m;
        }
    }
    s / (n + 1e-8)
}

/// Unbiased masked variance: `masked_mean((x - mean)²) · n/(n-1)` with `n = Σ m`
/// (verl `masked_var(unbiased=True)`).
///
/// # Panics
/// When fewer than two tokens are valid (verl raises there too).
pub fn masked_var(values: &Matrix, mask: &Matrix) -> f64 {
    let mean = masked_mean(values, mask);
    let centred: Matrix = values
        .iter()
        .map(|r| r.iter().map(|v| (v - mean).powi(2)).collect())
        .collect();
    let var = masked_mean(&centred, mask);
    let n: f64 = mask.iter().flatten().sum();
    assert!(
        n >= 2.0,
        "masked_var needs at least 2 valid tokens, got {n}"
    );
    var * (n / (n - 1.0))
}

/// `(x - mean) / sqrt(var + 1e-8)` at every position (masked ones included, as verl does), with
/// the masked mean and unbiased masked variance of the whole batch (verl `masked_whiten`).
pub fn masked_whiten(values: &Matrix, mask: &Matrix) -> Matrix {
    let mean = masked_mean(values, mask);
    let inv_std = 1.0 / (masked_var(values, mask) + 1e-8).sqrt();
    values
        .iter()
        .map(|r| r.iter().map(|v| (v - mean) * inv_std).collect())
        .collect()
}

/// Row sums (verl `token_level_rewards.sum(dim=-1)`: the outcome score of each response).
pub fn row_sums(m: &Matrix) -> Vec<f64> {
    m.iter().map(|r| r.iter().sum()).collect()
}

/// Broadcasts one scalar per row over the row's mask: `s_i · m_it`.
pub fn broadcast(scalars: &[f64], mask: &Matrix) -> Matrix {
    scalars
        .iter()
        .zip(mask)
        .map(|(s, mr)| mr.iter().map(|m| s * m).collect())
        .collect()
}

/// Elementwise product of two matrices of the same shape.
pub fn hadamard(a: &Matrix, b: &Matrix) -> Matrix {
    a.iter()
        .zip(b)
        .map(|(x, y)| x.iter().zip(y).map(|(p, q)| p * q).collect())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whiten_ignores_masked_junk_in_the_statistics() {
        let v = vec![vec![1.0, 3.0, 100.0]];
        let m = vec![vec![1.0, 1.0, 0.0]];
        let w = masked_whiten(&v, &m);
        // mean 2, unbiased var 2: (1-2)/sqrt(2), (3-2)/sqrt(2); the junk is whitened, not zeroed.
        let s = (2.0f64 + 1e-8).sqrt();
        assert!((w[0][0] + 1.0 / s).abs() < 1e-7 && (w[0][1] - 1.0 / s).abs() < 1e-7);
        assert!(w[0][2] > 60.0);
    }
}
