//! Small dense linear algebra for Newton steps (the systems are at most a few hundred unknowns).

/// Solves `A x = b` for symmetric positive definite `A` (row-major `n x n`) by Cholesky factorisation,
/// overwriting `a` with the factor and `b` with the solution. Returns `false` when `A` is not
/// numerically positive definite (then `a` and `b` are garbage).
pub fn cholesky_solve(a: &mut [f64], b: &mut [f64], n: usize) -> bool {
    debug_assert_eq!(a.len(), n * n);
    debug_assert_eq!(b.len(), n);
    // In-place lower-triangular factor L with A = L L^T (only the lower triangle is read).
    for j in 0..n {
        let (upper, lower) = a.split_at_mut(j * n);
        let row_j = &mut lower[..n];
        let d = row_j[j] - dot(&row_j[..j], &row_j[..j]);
        if d <= 0.0 || !d.is_finite() {
            return false;
        }
        row_j[j] = d.sqrt();
        let _ = upper;
        for i in (j + 1)..n {
            let (up, low) = a.split_at_mut(i * n);
            let rj = &up[j * n..j * n + n];
            let ri = &mut low[..n];
            ri[j] = (ri[j] - dot(&ri[..j], &rj[..j])) / rj[j];
        }
    }
    // Forward substitution L y = b.
    for i in 0..n {
        let ri = &a[i * n..i * n + n];
        let mut s = b[i];
        for k in 0..i {
            s -= ri[k] * b[k];
        }
        b[i] = s / ri[i];
    }
    // Back substitution L^T x = y.
    for i in (0..n).rev() {
        let mut s = b[i];
        for k in (i + 1)..n {
            s -= a[k * n + i] * b[k];
        }
        b[i] = s / a[i * n + i];
    }
    true
}

/// Dot product written so that the compiler vectorises it (four independent accumulators).
#[inline]
pub fn dot(x: &[f64], y: &[f64]) -> f64 {
    let n = x.len().min(y.len());
    let (x, y) = (&x[..n], &y[..n]);
    let mut acc = [0.0f64; 4];
    let chunks = n / 4;
    for c in 0..chunks {
        for l in 0..4 {
            acc[l] += x[4 * c + l] * y[4 * c + l];
        }
    }
    let mut s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    for k in 4 * chunks..n {
        s += x[k] * y[k];
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn solves_spd_system() {
        // A = M M^T + I for a fixed M.
        let n = 5;
        let m: Vec<f64> = (0..n * n)
            .map(|i| ((i * 7 % 11) as f64 - 5.0) / 3.0)
            .collect();
        let mut a = vec![0.0; n * n];
        for i in 0..n {
            for j in 0..n {
                a[i * n + j] = (0..n).map(|k| m[i * n + k] * m[j * n + k]).sum::<f64>()
                    + if i == j { 1.0 } else { 0.0 };
            }
        }
        let x_true: Vec<f64> = (0..n).map(|i| i as f64 - 1.5).collect();
        let mut b: Vec<f64> = (0..n)
            .map(|i| (0..n).map(|j| a[i * n + j] * x_true[j]).sum())
            .collect();
        let mut f = a.clone();
        assert!(cholesky_solve(&mut f, &mut b, n));
        for i in 0..n {
            assert!((b[i] - x_true[i]).abs() < 1e-10, "{b:?}");
        }
        let mut neg = vec![-1.0, 0.0, 0.0, 1.0];
        assert!(!cholesky_solve(&mut neg, &mut [1.0, 1.0], 2));
    }
}
