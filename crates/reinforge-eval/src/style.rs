//! Style control: Bradley-Terry with style covariates, as FastChat `compute_style_control`
//! (`fastchat/serve/monitor/rating_systems.py`: `preprocess_for_style`, `fit_contextual_bt`,
//! `contextual_bt_loss_and_grad`).
//!
//! Features: for each of FastChat's four style elements (answer tokens, headers, lists, bold),
//! `(x_a - x_b) / (x_a + x_b + 1)` (`apply_ratio = [1,1,1,1]`, `add_one=True`), then standardised over the
//! battles with the population standard deviation (`np.std`). Model:
//! `logit P(a wins) = ln(10) (r_a - r_b) + f . w` with outcomes 1 / 0.5 / 0 per battle, and an L2 penalty `reg/2 * |params|^2 / 2` with
//! `reg = 0.5` on ratings and coefficients together (FastChat's `half_reg = reg / 2`, loss term
//! `half_reg * <params, params>`). Ratings are `1000 + 400 r`. We minimise the same penalised loss by
//! Newton's method (strictly convex thanks to the penalty) instead of L-BFGS-B.

use crate::io::Battles;
use crate::linalg::cholesky_solve;

/// Number of style covariates (FastChat's V1 elements, A minus B).
pub const N_STYLE: usize = 4;

/// Names of the style coefficients, in order.
pub const STYLE_NAMES: [&str; N_STYLE] = ["length", "headers", "lists", "bold"];

/// Normalised style features per battle (FastChat `preprocess_for_style`). Errors if `b.style` is absent.
pub fn style_features(b: &Battles) -> anyhow::Result<Vec<[f64; N_STYLE]>> {
    let st = b
        .style
        .as_ref()
        .ok_or_else(|| anyhow::anyhow!("battles were read without style metadata"))?;
    let n = st.len() as f64;
    let mut f: Vec<[f64; N_STYLE]> = st
        .iter()
        .map(|s| std::array::from_fn(|k| (s[k] - s[k + N_STYLE]) / (s[k] + s[k + N_STYLE] + 1.0)))
        .collect();
    for k in 0..N_STYLE {
        let mean = f.iter().map(|x| x[k]).sum::<f64>() / n;
        let var = f.iter().map(|x| (x[k] - mean).powi(2)).sum::<f64>() / n;
        let sd = var.sqrt();
        if sd == 0.0 || !sd.is_finite() {
            anyhow::bail!(
                "style feature {:?} is constant over all battles; cannot standardise",
                STYLE_NAMES[k]
            );
        }
        f.iter_mut().for_each(|x| x[k] = (x[k] - mean) / sd);
    }
    Ok(f)
}

/// Result of a style-controlled fit.
#[derive(Debug, Clone, PartialEq)]
pub struct StyleFit {
    /// Ratings `1000 + 400 r` indexed by model id.
    pub ratings: Vec<f64>,
    /// Style coefficients (logit units per standard deviation), in [`STYLE_NAMES`] order.
    pub coefficients: [f64; N_STYLE],
    /// Newton iterations.
    pub iterations: usize,
}

/// Fits FastChat's contextual Bradley-Terry. `weights` (per battle, e.g. bootstrap counts) default to 1.
pub fn fit_style(
    b: &Battles,
    features: &[[f64; N_STYLE]],
    weights: Option<&[f64]>,
    reg: f64,
    init: Option<&[f64]>,
) -> StyleFit {
    let k = b.models.len();
    let dim = k + N_STYLE;
    let alpha = 10f64.ln();
    let mut x = init.map_or_else(|| vec![0.0; dim], |v| v.to_vec());
    let mut it = 0;
    let loss = |x: &[f64]| -> f64 {
        let mut l = 0.25 * reg * x.iter().map(|v| v * v).sum::<f64>();
        for i in 0..b.len() {
            let w = weights.map_or(1.0, |w| w[i]);
            if w == 0.0 {
                continue;
            }
            let z = logit(x, b, features, i, k, alpha);
            let o = b.outcome[i].score_a();
            l += w * (o * softplus(-z) + (1.0 - o) * softplus(z));
        }
        l
    };
    let mut cur = loss(&x);
    while it < 100 {
        let mut g: Vec<f64> = x.iter().map(|v| 0.5 * reg * v).collect();
        let mut h = vec![0.0; dim * dim];
        for d in 0..dim {
            h[d * dim + d] = 0.5 * reg;
        }
        for i in 0..b.len() {
            let w = weights.map_or(1.0, |w| w[i]);
            if w == 0.0 {
                continue;
            }
            let (ia, ib) = (b.a[i] as usize, b.b[i] as usize);
            let z = logit(&x, b, features, i, k, alpha);
            let p = 1.0 / (1.0 + (-z).exp());
            let e = w * (b.outcome[i].score_a() - p);
            let v = w * p * (1.0 - p);
            // x_i = (alpha e_a - alpha e_b, f_i)
            let idx = [ia, ib, k, k + 1, k + 2, k + 3];
            let f = &features[i];
            let val = [alpha, -alpha, f[0], f[1], f[2], f[3]];
            for (u, &iu) in idx.iter().enumerate() {
                g[iu] -= e * val[u];
                for (t, &it2) in idx.iter().enumerate() {
                    h[iu * dim + it2] += v * val[u] * val[t];
                }
            }
        }
        let gi = g.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        if gi < 1e-10 * (b.len() as f64).max(1.0) {
            break;
        }
        it += 1;
        let mut step: Vec<f64> = g.iter().map(|v| -v).collect();
        if !cholesky_solve(&mut h, &mut step, dim) {
            break;
        }
        let slope: f64 = g.iter().zip(&step).map(|(a, b)| a * b).sum();
        let mut t = 1.0;
        let mut moved = false;
        for _ in 0..40 {
            let trial: Vec<f64> = x.iter().zip(&step).map(|(a, s)| a + t * s).collect();
            let l = loss(&trial);
            if l <= cur + 1e-4 * t * slope || (l - cur).abs() <= 1e-15 * cur.abs() {
                x = trial;
                cur = l;
                moved = true;
                break;
            }
            t *= 0.5;
        }
        if !moved {
            break;
        }
    }
    StyleFit {
        ratings: x[..k].iter().map(|r| 1000.0 + 400.0 * r).collect(),
        coefficients: std::array::from_fn(|j| x[k + j]),
        iterations: it,
    }
}

#[inline]
fn softplus(x: f64) -> f64 {
    x.max(0.0) + (-x.abs()).exp().ln_1p()
}

#[inline]
fn logit(x: &[f64], b: &Battles, f: &[[f64; N_STYLE]], i: usize, k: usize, alpha: f64) -> f64 {
    let mut z = alpha * (x[b.a[i] as usize] - x[b.b[i] as usize]);
    for j in 0..N_STYLE {
        z += f[i][j] * x[k + j];
    }
    z
}

/// Parameters of a fit (ratings in `r` units followed by coefficients), for warm starts.
pub fn params_of(fit: &StyleFit) -> Vec<f64> {
    fit.ratings
        .iter()
        .map(|r| (r - 1000.0) / 400.0)
        .chain(fit.coefficients)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::Outcome;
    use rand::{Rng, SeedableRng};

    /// Data where longer answers win regardless of the model: the length coefficient must come out
    /// positive and clearly larger than the others, and model ratings close to each other.
    #[test]
    fn detects_length_bias() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
        let mut b = Battles {
            models: vec!["p".into(), "q".into(), "r".into()],
            ..Battles::default()
        };
        let mut st = vec![];
        for _ in 0..4000 {
            let i = rng.gen_range(0..3u32);
            let j = (i + rng.gen_range(1..3u32)) % 3;
            let (la, lb) = (rng.gen_range(10.0..500.0f64), rng.gen_range(10.0..500.0f64));
            let z = 3.0 * (la - lb) / (la + lb + 1.0);
            let o = if rng.gen::<f64>() < 1.0 / (1.0 + (-z).exp()) {
                Outcome::AWins
            } else {
                Outcome::BWins
            };
            b.a.push(i);
            b.b.push(j);
            b.outcome.push(o);
            let hdr = rng.gen_range(0..4) as f64;
            st.push([
                la,
                hdr,
                rng.gen_range(0..3) as f64,
                1.0,
                lb,
                rng.gen_range(0..4) as f64,
                1.0,
                rng.gen_range(0..2) as f64,
            ]);
        }
        b.style = Some(st);
        let f = style_features(&b).unwrap();
        let fit = fit_style(&b, &f, None, 0.5, None);
        assert!(fit.coefficients[0] > 0.5, "{:?}", fit.coefficients);
        for c in &fit.coefficients[1..] {
            assert!(c.abs() < 0.2, "{:?}", fit.coefficients);
        }
        let spread = fit.ratings.iter().cloned().fold(f64::MIN, f64::max)
            - fit.ratings.iter().cloned().fold(f64::MAX, f64::min);
        assert!(spread < 25.0, "{:?}", fit.ratings);
        // Mean rating stays at 1000 (the penalty's gradient balances the zero-sum likelihood gradient).
        assert!((fit.ratings.iter().sum::<f64>() / 3.0 - 1000.0).abs() < 1e-6);
    }
}
