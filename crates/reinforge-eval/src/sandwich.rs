//! arena-rank's Bradley-Terry with closed-form "sandwich" confidence intervals, plain and contextual
//! (style-controlled), in float64.
//!
//! Follows `arena_rank/models/bradley_terry.py` and `contextual_bradley_terry.py` of PyPI arena-rank
//! 0.1.1 (= lmarena/arena-rank@3900eae):
//!
//! - **Plain BT** (`BradleyTerry`): battles deduplicated into `(a, b, outcome)` rows with counts,
//!   outcomes 1 / 0.5 / 0, loss `-sum w (o d - softplus(d)) / sum w` with `d = r_a - r_b` in natural
//!   log-odds, no penalty, ratings `init + r * scale / ln(base)`. Optional inverse-propensity
//!   reweighting (`PairDataset.from_pandas(reweighted=True)`): each battle of an unordered pair weighs
//!   `1 / max(pair count, min_pair_count)`. Sandwich: `H = sum w n p(1-p) L_pair + reg I`,
//!   `G = sum (w (o - p))^2 n L_pair` (per row: `(grad * opt_weight)^2 / count`), `Cov = H^-1 G H^-1`,
//!   where `reg = hessian_reg * total battles` when every weight is 1 and `hessian_reg` otherwise.
//! - **Contextual BT** (`ContextualBradleyTerry`): per battle `z = r_a - r_b + f . c`, loss
//!   `-mean(w ll) + reg/2 |c|^2` (ratings unpenalised), features standardised (population std, 0 -> 1).
//!   Sandwich: `H = mean(w p(1-p) x x^T) + hessian_reg I` (the coefficient block gets `hessian_reg`,
//!   not `reg`), `G = mean((w (o-p))^2 x x^T) - reg^2/n c~ c~^T` with `c~ = (0, c)`,
//!   `Var = diag(H^-1 G H^-1) / n`.
//!
//! Intervals are `rating +- z_{1-alpha/2} sqrt(Var)` on the rating scale, with arena-rank's
//! `significance_level` alpha. The optimum is found by Newton's method (the existing [`crate::bt`] solver
//! for plain BT, a Newton loop here for the contextual model); arena-rank uses optax L-BFGS with
//! `gtol = ftol = 1e-9`, which stops short of the optimum (see `docs/rm_eval.md` for the measured gap),
//! so our ratings equal arena-rank's run to convergence. Both keep `sum(r) = 0` (L-BFGS from zero never
//! leaves that subspace because every rating gradient sums to zero).

use crate::bt::{fit_bt, FitOptions, PairTable, Scale};
use crate::io::{Battles, STYLE_ELEMENTS};
use crate::linalg::cholesky_solve;
use anyhow::{bail, Result};
use serde::Serialize;

/// arena-rank's options, with its defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ArenaOptions {
    /// `scale`, `base`, `init_rating` of arena-rank (400, 10, 1000).
    pub scale: Scale,
    /// Diagonal Hessian regulariser `hessian_reg` (1e-5); plain BT multiplies it by the number of
    /// battles when the data are unweighted.
    pub hessian_reg: f64,
    /// `significance_level` alpha of the two-sided interval (0.05).
    pub significance: f64,
    /// Inverse-propensity reweighting by unordered pair (`reweighted`; plain default false,
    /// contextual default true in arena-rank's `from_pandas`).
    pub reweighted: bool,
    /// `min_pair_count` floor of the reweighting (50).
    pub min_pair_count: f64,
    /// Contextual L2 penalty on the feature coefficients `reg` (1.0).
    pub reg: f64,
    /// Standardise contextual features (`normalize_features`, true).
    pub normalize_features: bool,
}

impl Default for ArenaOptions {
    fn default() -> Self {
        ArenaOptions {
            scale: Scale::default(),
            hessian_reg: 1e-5,
            significance: 0.05,
            reweighted: false,
            min_pair_count: 50.0,
            reg: 1.0,
            normalize_features: true,
        }
    }
}

/// A leaderboard with sandwich intervals; vectors are indexed by model id (`Battles::models` order).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SandwichBoard {
    /// Model names.
    pub models: Vec<String>,
    /// Ratings on the chosen scale.
    pub ratings: Vec<f64>,
    /// Lower interval bounds.
    pub lower: Vec<f64>,
    /// Upper interval bounds.
    pub upper: Vec<f64>,
    /// Rating variances on the rating scale (`Var * (scale / ln base)^2`).
    pub variances: Vec<f64>,
    /// Contextual coefficients (logit units per standard deviation); empty for plain BT.
    pub coefficients: Vec<f64>,
    /// Sandwich variances of the coefficients (same scale); empty for plain BT.
    pub coefficient_variances: Vec<f64>,
    /// Standard deviation of each feature over the battles, by which it was divided (1 without
    /// `normalize_features`); empty for plain BT.
    pub feature_scales: Vec<f64>,
    /// Newton iterations.
    pub iterations: usize,
    /// Whether the solver met its tolerance.
    pub converged: bool,
}

/// Fits plain Bradley-Terry as arena-rank does and returns sandwich intervals.
pub fn sandwich_bt(b: &Battles, o: &ArenaOptions) -> Result<SandwichBoard> {
    check_options(o)?;
    if b.is_empty() {
        bail!("no battles");
    }
    let t = weighted_pairs(b, o);
    let fit = fit_bt(&t.weighted, None, &FitOptions::default());
    let mut board = bt_intervals(b, &t, &fit.beta, o);
    board.iterations = fit.iterations;
    board.converged = fit.converged;
    Ok(board)
}

/// Sandwich intervals of plain BT at given natural-log-odds ratings `beta` (id order), e.g. another
/// implementation's optimum: separates the interval formula from the solver in parity checks.
pub fn sandwich_bt_at(b: &Battles, beta: &[f64], o: &ArenaOptions) -> Result<SandwichBoard> {
    check_options(o)?;
    if beta.len() != b.models.len() {
        bail!("{} ratings given for {} models", beta.len(), b.models.len());
    }
    let t = weighted_pairs(b, o);
    Ok(bt_intervals(b, &t, beta, o))
}

fn check_options(o: &ArenaOptions) -> Result<()> {
    if !(o.significance > 0.0 && o.significance < 1.0) {
        bail!("significance must be in (0, 1), got {}", o.significance);
    }
    let valid = o.hessian_reg >= 0.0 && o.reg >= 0.0 && o.min_pair_count > 0.0;
    if !valid {
        bail!("hessian_reg and reg must be >= 0 and min_pair_count > 0");
    }
    if o.scale.base.is_nan() || o.scale.base <= 1.0 {
        bail!("rating base must be > 1, got {}", o.scale.base);
    }
    Ok(())
}

/// Pair table with raw counts, per-pair weights and the weighted table the fit minimises.
struct WeightedPairs {
    raw: PairTable,
    weight: Vec<f64>,
    weighted: PairTable,
    unweighted: bool,
}

fn weighted_pairs(b: &Battles, o: &ArenaOptions) -> WeightedPairs {
    let raw = PairTable::from_battles(b);
    let weight: Vec<f64> = (0..raw.lo.len())
        .map(|p| {
            if o.reweighted {
                1.0 / (raw.win_lo[p] + raw.win_hi[p] + raw.tie[p]).max(o.min_pair_count)
            } else {
                1.0
            }
        })
        .collect();
    let mut weighted = raw.clone();
    for (p, w) in weight.iter().enumerate() {
        weighted.win_lo[p] *= w;
        weighted.win_hi[p] *= w;
        weighted.tie[p] *= w;
    }
    // jnp.allclose(weights, 1.0): |w - 1| <= 1e-8 + 1e-5.
    let unweighted = weight.iter().all(|w| (w - 1.0).abs() <= 1e-8 + 1e-5);
    WeightedPairs {
        raw,
        weight,
        weighted,
        unweighted,
    }
}

fn bt_intervals(b: &Battles, t: &WeightedPairs, beta: &[f64], o: &ArenaOptions) -> SandwichBoard {
    let k = b.models.len();
    let total: f64 = b.len() as f64;
    let reg = o.hessian_reg * if t.unweighted { total } else { 1.0 };
    let mut h = vec![0.0; k * k];
    let mut g = vec![0.0; k * k];
    let r = &t.raw;
    for p in 0..r.lo.len() {
        let (i, j) = (r.lo[p] as usize, r.hi[p] as usize);
        let n = r.win_lo[p] + r.win_hi[p] + r.tie[p];
        let q = sigmoid(beta[i] - beta[j]);
        let w = t.weight[p];
        let hv = w * n * q * (1.0 - q);
        let gv = w
            * w
            * (r.win_lo[p] * (1.0 - q).powi(2)
                + r.win_hi[p] * q * q
                + r.tie[p] * (0.5 - q).powi(2));
        add_pair(&mut h, k, i, j, hv);
        add_pair(&mut g, k, i, j, gv);
    }
    for i in 0..k {
        h[i * k + i] += reg;
    }
    let var = sandwich_diag(&h, &g, k, k, 1.0);
    board(b, beta, &var, vec![], o)
}

#[inline]
fn add_pair(m: &mut [f64], k: usize, i: usize, j: usize, v: f64) {
    m[i * k + i] += v;
    m[j * k + j] += v;
    m[i * k + j] -= v;
    m[j * k + i] -= v;
}

/// `diag(H^-1 G H^-1) / n` for symmetric positive definite `H` (`dim x dim`, row-major) whose first
/// `k` unknowns are ratings.
///
/// `u = (1_k, 0)` (a common rating shift) is an eigenvector of both arena-rank matrices: `H u =
/// hessian_reg u` and `G u = 0`. Inverting `H` as is amplifies rounding along `u` by
/// `1 / hessian_reg`; since `G u = 0`, replacing `H` by `H + s u u^T` leaves `H^-1 G H^-1` unchanged
/// in exact arithmetic and makes the system well conditioned.
fn sandwich_diag(h: &[f64], g: &[f64], dim: usize, k: usize, n: f64) -> Vec<f64> {
    let mut h = h.to_vec();
    let s = (0..k).map(|i| h[i * dim + i]).sum::<f64>() / (k * k).max(1) as f64;
    for i in 0..k {
        for j in 0..k {
            h[i * dim + j] += s;
        }
    }
    // X = H^-1, column by column (dim Cholesky solves; dim is the number of models plus features).
    let mut x = vec![0.0; dim * dim];
    for c in 0..dim {
        let mut a = h.clone();
        let mut e = vec![0.0; dim];
        e[c] = 1.0;
        if !cholesky_solve(&mut a, &mut e, dim) {
            return vec![f64::NAN; dim];
        }
        for r in 0..dim {
            x[r * dim + c] = e[r];
        }
    }
    // diag(X G X)_i = sum_b (X G)_ib X_bi.
    let mut out = vec![0.0; dim];
    for i in 0..dim {
        let xi = &x[i * dim..(i + 1) * dim];
        let mut s = 0.0;
        for bcol in 0..dim {
            let mut xg = 0.0;
            for a in 0..dim {
                xg += xi[a] * g[a * dim + bcol];
            }
            s += xg * x[bcol * dim + i];
        }
        out[i] = s / n;
    }
    out
}

/// Inverse of the standard normal CDF: Acklam's rational approximation refined by two Halley steps
/// on `libm::erfc` (full double precision; `jax.scipy.stats.norm.ppf` is Cephes `ndtri`).
#[allow(clippy::excessive_precision)]
pub fn normal_quantile(p: f64) -> f64 {
    if !(p > 0.0 && p < 1.0) {
        return if p == 0.0 {
            f64::NEG_INFINITY
        } else if p == 1.0 {
            f64::INFINITY
        } else {
            f64::NAN
        };
    }
    const A: [f64; 6] = [
        -3.969683028665376e+01,
        2.209460984245205e+02,
        -2.759285104469687e+02,
        1.383577518672690e+02,
        -3.066479806614716e+01,
        2.506628277459239e+00,
    ];
    const B: [f64; 5] = [
        -5.447609879822406e+01,
        1.615858368580409e+02,
        -1.556989798598866e+02,
        6.680131188771972e+01,
        -1.328068155288572e+01,
    ];
    const C: [f64; 6] = [
        -7.784894002430293e-03,
        -3.223964580411365e-01,
        -2.400758277161838e+00,
        -2.549732539343734e+00,
        4.374664141464968e+00,
        2.938163982698783e+00,
    ];
    const D: [f64; 4] = [
        7.784695709041462e-03,
        3.224671290700398e-01,
        2.445134137142996e+00,
        3.754408661907416e+00,
    ];
    let tail = |q: f64| {
        let s = (-2.0 * q.ln()).sqrt();
        (((((C[0] * s + C[1]) * s + C[2]) * s + C[3]) * s + C[4]) * s + C[5])
            / ((((D[0] * s + D[1]) * s + D[2]) * s + D[3]) * s + 1.0)
    };
    let mut x = if p < 0.02425 {
        tail(p)
    } else if p > 1.0 - 0.02425 {
        -tail(1.0 - p)
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    };
    for _ in 0..2 {
        let e = 0.5 * libm::erfc(-x / std::f64::consts::SQRT_2) - p;
        let u = e * (2.0 * std::f64::consts::PI).sqrt() * (x * x / 2.0).exp();
        x -= u / (1.0 + x * u / 2.0);
    }
    x
}

fn board(
    b: &Battles,
    beta: &[f64],
    var: &[f64],
    coefficients: Vec<f64>,
    o: &ArenaOptions,
) -> SandwichBoard {
    let alpha = o.scale.scale / o.scale.base.ln();
    let z = normal_quantile(1.0 - o.significance / 2.0);
    let rating = |x: f64| x * alpha + o.scale.init;
    let k = b.models.len();
    SandwichBoard {
        models: b.models.clone(),
        ratings: beta.iter().map(|&x| rating(x)).collect(),
        lower: (0..k)
            .map(|i| rating(beta[i] - z * var[i].sqrt()))
            .collect(),
        upper: (0..k)
            .map(|i| rating(beta[i] + z * var[i].sqrt()))
            .collect(),
        variances: var[..k].iter().map(|v| v * alpha * alpha).collect(),
        coefficient_variances: var[k..k + coefficients.len()].to_vec(),
        feature_scales: vec![1.0; coefficients.len()],
        coefficients,
        iterations: 0,
        converged: true,
    }
}

/// The contextual fit's coefficients with intervals at `o.significance`, named by `names` (one per
/// feature column), on arena-rank's standardised scale and per unit of the feature.
pub fn coefficient_table(
    board: &SandwichBoard,
    names: &[String],
    o: &ArenaOptions,
) -> Result<Vec<crate::covariates::Coefficient>> {
    if names.len() != board.coefficients.len() {
        bail!(
            "{} names for {} coefficients",
            names.len(),
            board.coefficients.len()
        );
    }
    let z = normal_quantile(1.0 - o.significance / 2.0);
    Ok(names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let (c, se, sd) = (
                board.coefficients[i],
                board.coefficient_variances[i].max(0.0).sqrt(),
                board.feature_scales[i],
            );
            crate::covariates::Coefficient {
                name: name.clone(),
                per_sd: c,
                per_sd_lower: c - z * se,
                per_sd_upper: c + z * se,
                per_unit: c / sd,
                lower: (c - z * se) / sd,
                upper: (c + z * se) / sd,
                std_error: se / sd,
                feature_sd: sd,
                unpenalised_per_unit: None,
            }
        })
        .collect())
}

#[inline]
fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

#[inline]
fn softplus(x: f64) -> f64 {
    x.max(0.0) + (-x.abs()).exp().ln_1p()
}

// ------------------------------------------------------------------------------------- contextual

/// Style features of lmarena's arena-rank example (`examples/lmarena.ipynb`): per style element
/// (tokens, headers, lists, bold; [`STYLE_ELEMENTS`] order) `(x_a - x_b) / (x_a + x_b)`, a zero sum
/// replaced by 1. FastChat's variant ([`crate::style::style_features`]) adds 1 to the sum instead.
pub fn arena_style_features(b: &Battles) -> Result<Vec<Vec<f64>>> {
    let st = b.style.as_ref().ok_or_else(|| {
        anyhow::anyhow!("battles were read without style metadata (conv_metadata)")
    })?;
    let half = STYLE_ELEMENTS.len() / 2;
    Ok(st
        .iter()
        .map(|s| {
            (0..half)
                .map(|k| {
                    let sum = s[k] + s[k + half];
                    (s[k] - s[k + half]) / if sum == 0.0 { 1.0 } else { sum }
                })
                .collect()
        })
        .collect())
}

/// arena-rank's `normalize_features`: `(x - mean) / std` per column, population std, 0 replaced by 1.
/// Returns the divisors.
fn standardize(f: &mut [Vec<f64>]) -> Vec<f64> {
    let (n, d) = (f.len() as f64, f.first().map_or(0, |r| r.len()));
    (0..d)
        .map(|c| {
            let mean = f.iter().map(|r| r[c]).sum::<f64>() / n;
            let var = f.iter().map(|r| (r[c] - mean).powi(2)).sum::<f64>() / n;
            let sd = if var.sqrt() == 0.0 { 1.0 } else { var.sqrt() };
            f.iter_mut().for_each(|r| r[c] = (r[c] - mean) / sd);
            sd
        })
        .collect()
}

/// Per-battle weights of arena-rank's contextual reweighting: `1 / max(pair count, min_pair_count)`,
/// divided by their mean; all 1 without reweighting.
fn battle_weights(b: &Battles, o: &ArenaOptions) -> Vec<f64> {
    if !o.reweighted {
        return vec![1.0; b.len()];
    }
    let mut counts = std::collections::HashMap::new();
    let key = |i: usize| (b.a[i].min(b.b[i]), b.a[i].max(b.b[i]));
    for i in 0..b.len() {
        *counts.entry(key(i)).or_insert(0.0f64) += 1.0;
    }
    let mut w: Vec<f64> = (0..b.len())
        .map(|i| 1.0 / counts[&key(i)].max(o.min_pair_count))
        .collect();
    let mean = w.iter().sum::<f64>() / w.len() as f64;
    w.iter_mut().for_each(|x| *x /= mean);
    w
}

/// Fits arena-rank's contextual Bradley-Terry on per-battle `features` (one row per battle, raw; they
/// are standardised when `o.normalize_features`) and returns sandwich intervals and coefficients.
pub fn sandwich_contextual(
    b: &Battles,
    features: &[Vec<f64>],
    o: &ArenaOptions,
) -> Result<SandwichBoard> {
    check_options(o)?;
    if b.is_empty() {
        bail!("no battles");
    }
    if features.len() != b.len() {
        bail!("{} feature rows for {} battles", features.len(), b.len());
    }
    let nf = features[0].len();
    if let Some(i) = features.iter().position(|r| r.len() != nf) {
        bail!(
            "feature row {i} has {} values, row 0 has {nf}",
            features[i].len()
        );
    }
    if let Some(i) = features
        .iter()
        .position(|r| r.iter().any(|x| !x.is_finite()))
    {
        bail!("feature row {i} has a non-finite value");
    }
    let mut f = features.to_vec();
    let scales = if o.normalize_features {
        standardize(&mut f)
    } else {
        vec![1.0; nf]
    };
    let w = battle_weights(b, o);
    let k = b.models.len();
    let (x, iterations, converged) = fit_contextual(b, &f, &w, o.reg, k, nf);
    let var = contextual_sandwich(b, &f, &w, &x, o, k, nf);
    let mut out = board(b, &x[..k], &var, x[k..].to_vec(), o);
    out.feature_scales = scales;
    out.iterations = iterations;
    out.converged = converged;
    Ok(out)
}

/// Contextual loss `-mean(w ll) + reg/2 |c|^2`.
fn contextual_loss(b: &Battles, f: &[Vec<f64>], w: &[f64], x: &[f64], reg: f64, k: usize) -> f64 {
    let mut l = 0.0;
    for (i, wi) in w.iter().enumerate() {
        let z = logit(b, f, x, i, k);
        l += wi * (softplus(z) - z * b.outcome[i].score_a());
    }
    l / b.len() as f64 + 0.5 * reg * x[k..].iter().map(|c| c * c).sum::<f64>()
}

#[inline]
fn logit(b: &Battles, f: &[Vec<f64>], x: &[f64], i: usize, k: usize) -> f64 {
    x[b.a[i] as usize] - x[b.b[i] as usize] + crate::linalg::dot(&f[i], &x[k..])
}

/// Accumulates `sum v_i x_i x_i^T` with `x_i = (e_a - e_b, f_i)` into `m` (`dim x dim`).
fn accumulate(m: &mut [f64], dim: usize, k: usize, a: usize, bb: usize, f: &[f64], v: f64) {
    add_pair(m, dim, a, bb, v);
    for (c, &fc) in f.iter().enumerate() {
        let vc = v * fc;
        m[a * dim + k + c] += vc;
        m[(k + c) * dim + a] += vc;
        m[bb * dim + k + c] -= vc;
        m[(k + c) * dim + bb] -= vc;
        for (d, &fd) in f.iter().enumerate() {
            m[(k + c) * dim + k + d] += vc * fd;
        }
    }
}

/// Newton's method with Armijo backtracking; the rating block's null space (a common shift) is
/// removed by adding `s 1 1^T` to it, which keeps `sum(r) = 0`.
fn fit_contextual(
    b: &Battles,
    f: &[Vec<f64>],
    w: &[f64],
    reg: f64,
    k: usize,
    nf: usize,
) -> (Vec<f64>, usize, bool) {
    let dim = k + nf;
    let n = b.len() as f64;
    let mut x = vec![0.0; dim];
    let mut loss = contextual_loss(b, f, w, &x, reg, k);
    for it in 0..200 {
        let mut g = vec![0.0; dim];
        let mut h = vec![0.0; dim * dim];
        for i in 0..b.len() {
            let (a, bb) = (b.a[i] as usize, b.b[i] as usize);
            let p = sigmoid(logit(b, f, &x, i, k));
            let e = w[i] * (p - b.outcome[i].score_a()) / n;
            g[a] += e;
            g[bb] -= e;
            for c in 0..nf {
                g[k + c] += e * f[i][c];
            }
            accumulate(&mut h, dim, k, a, bb, &f[i], w[i] * p * (1.0 - p) / n);
        }
        for c in 0..nf {
            g[k + c] += reg * x[k + c];
            h[(k + c) * dim + k + c] += reg;
        }
        let ginf = g.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        if ginf < 1e-14 {
            return (x, it, true);
        }
        let mean_diag = (0..k).map(|i| h[i * dim + i]).sum::<f64>() / k as f64;
        for i in 0..k {
            for j in 0..k {
                h[i * dim + j] += mean_diag / k as f64;
            }
        }
        let mut step: Vec<f64> = g.iter().map(|v| -v).collect();
        if !cholesky_solve(&mut h, &mut step, dim) {
            return (x, it, false);
        }
        let slope: f64 = g.iter().zip(&step).map(|(a, s)| a * s).sum();
        let mut t = 1.0;
        let mut moved = false;
        for _ in 0..40 {
            let trial: Vec<f64> = x.iter().zip(&step).map(|(a, s)| a + t * s).collect();
            let l = contextual_loss(b, f, w, &trial, reg, k);
            if l <= loss + 1e-4 * t * slope || (l - loss).abs() <= 1e-15 * loss.abs() {
                let max_step = step.iter().fold(0.0f64, |m, s| m.max(s.abs())) * t;
                x = trial;
                loss = l;
                moved = true;
                if max_step < 1e-13 {
                    return (x, it + 1, true);
                }
                break;
            }
            t *= 0.5;
        }
        if !moved {
            return (x, it, ginf < 1e-10);
        }
    }
    (x, 200, false)
}

fn contextual_sandwich(
    b: &Battles,
    f: &[Vec<f64>],
    w: &[f64],
    x: &[f64],
    o: &ArenaOptions,
    k: usize,
    nf: usize,
) -> Vec<f64> {
    let dim = k + nf;
    let n = b.len() as f64;
    let mut h = vec![0.0; dim * dim];
    let mut g = vec![0.0; dim * dim];
    for i in 0..b.len() {
        let (a, bb) = (b.a[i] as usize, b.b[i] as usize);
        let p = sigmoid(logit(b, f, x, i, k));
        accumulate(&mut h, dim, k, a, bb, &f[i], w[i] * p * (1.0 - p) / n);
        let r = w[i] * (b.outcome[i].score_a() - p);
        accumulate(&mut g, dim, k, a, bb, &f[i], r * r / n);
    }
    for d in 0..dim {
        h[d * dim + d] += o.hessian_reg;
    }
    for c in 0..nf {
        for d in 0..nf {
            g[(k + c) * dim + k + d] -= o.reg * o.reg / n * x[k + c] * x[k + d];
        }
    }
    sandwich_diag(&h, &g, dim, k, n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::Outcome;

    #[test]
    fn normal_quantile_matches_known_values() {
        assert!((normal_quantile(0.975) - 1.959963984540054).abs() < 1e-14);
        assert!((normal_quantile(0.5)).abs() < 1e-15);
        assert!((normal_quantile(0.001) + 3.090232306167813).abs() < 1e-12);
        assert!(normal_quantile(1.5).is_nan());
    }

    /// The sandwich with well-specified data is close to the inverse-Hessian (model-based) variance:
    /// for two models the MLE variance of `d` is `1 / (n p (1-p))`.
    #[test]
    fn two_model_sandwich_matches_fisher_variance() {
        let mut rows = vec![];
        for i in 0..1000 {
            rows.push((
                "x",
                "y",
                if i % 4 == 0 {
                    Outcome::BWins
                } else {
                    Outcome::AWins
                },
            ));
        }
        let b = Battles::from_triples(rows).unwrap();
        let o = ArenaOptions::default();
        let s = sandwich_bt(&b, &o).unwrap();
        // beta_x - beta_y = ln 3, each beta = +-ln(3)/2. Along v = (1, -1)/sqrt 2, H has eigenvalue
        // 2 hv + eps (hv = n p (1-p), eps = 1e-5 n) and G has 2 hv (at the MLE E(o-p)^2 = p(1-p)), so
        // var(beta_x) = 2 hv / (2 hv + eps)^2 / 2; var(d)/4 = 1 / (4 hv) when eps = 0.
        let alpha = 400.0 / 10f64.ln();
        let (hv, eps): (f64, f64) = (1000.0 * 0.75 * 0.25, 1e-5 * 1000.0);
        let var_d = 4.0 * hv / (2.0 * hv + eps).powi(2);
        assert!((s.ratings[0] - (1000.0 + alpha * 3f64.ln() / 2.0)).abs() < 1e-9);
        assert!(
            (s.variances[0] - var_d / 4.0 * alpha * alpha).abs() < 1e-6 * s.variances[0],
            "{:?}",
            s.variances
        );
        let e = sandwich_bt(
            &b,
            &ArenaOptions {
                significance: 1.0,
                ..o
            },
        )
        .unwrap_err();
        assert!(e.to_string().contains("significance"), "{e}");
    }
}
