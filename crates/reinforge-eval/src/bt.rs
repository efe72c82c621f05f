//! Bradley-Terry maximum likelihood (ties as half wins) and the Rao-Kupper tie model, fitted by Newton's
//! method on aggregated pair counts.
//!
//! **Model and loss.** Follows FastChat `fastchat/serve/monitor/rating_systems.py`: `preprocess_for_bt`
//! deduplicates battles into unique `(model_a, model_b, outcome)` rows with counts ([`OutcomeRows`]);
//! `bt_loss_and_grad` is the weighted logistic loss `-(o log p + (1-o) log(1-p)) w` with `o` in
//! {1, 0.5, 0} ("this form naturally counts a draw as half a win and half a loss"); `compute_bt` /
//! `scale_and_offset` map the natural-log-odds strength `beta` to `init + scale * beta / ln(base)`.
//! Because the loss only depends on the model difference, all rows of one unordered pair collapse to
//! two numbers (score `s` of the lower id and games `n`, [`PairTable`]), so a fit costs O(pairs), not
//! O(battles): 1M battles among 100 models are at most 4,950 pairs.
//!
//! **Solver.** FastChat minimises with scipy L-BFGS-B (`fit_bt`, `maxiter=100`, `gtol=1e-6`), which stops
//! before the exact optimum (see the fixture README: up to 0.065 Elo off). We use full Newton steps with
//! an Armijo backtracking line search; the Hessian is a weighted graph Laplacian whose null space (the
//! common shift of all ratings) is removed by adding `c 1 1^T`, so each step is one small Cholesky solve
//! and keeps `sum(beta) = 0` (the gauge FastChat's L-BFGS keeps by starting at 0). Convergence is
//! quadratic: 4-8 iterations to machine precision from zero, 2-3 from a warm start.
//!
//! **Rao-Kupper** (Rao & Kupper 1967): `P(i > j) = pi_i / (pi_i + theta pi_j)`, a tie takes the rest, with
//! `theta = exp(kappa) >= 1`. In logits: `P(i > j) = sigmoid(d - kappa)`, `P(j > i) = sigmoid(-d - kappa)`
//! with `d = beta_i - beta_j`; fitted jointly in `(beta, kappa)` with the analytic Hessian.

use crate::io::{Battles, Outcome};
use crate::linalg::cholesky_solve;

/// Unique `(a, b, outcome)` rows with their counts, sorted by `(a, b, outcome)` as `np.unique(axis=0)`
/// sorts them in FastChat's `preprocess_for_bt`. The multinomial bootstrap resamples these counts.
#[derive(Debug, Clone, PartialEq)]
pub struct OutcomeRows {
    /// Number of models (ids `0..n_models`).
    pub n_models: usize,
    /// `model_a` id per row.
    pub a: Vec<u32>,
    /// `model_b` id per row.
    pub b: Vec<u32>,
    /// Outcome per row.
    pub outcome: Vec<Outcome>,
    /// Number of battles with this `(a, b, outcome)`.
    pub count: Vec<f64>,
}

impl OutcomeRows {
    /// Deduplicates battles into counted rows in O(N log N) (sort of packed keys).
    pub fn from_battles(b: &Battles) -> Self {
        let mut keys: Vec<u64> = (0..b.len())
            .map(|i| ((b.a[i] as u64) << 34) | ((b.b[i] as u64) << 2) | b.outcome[i] as u64)
            .collect();
        keys.sort_unstable();
        let mut rows = OutcomeRows {
            n_models: b.models.len(),
            a: vec![],
            b: vec![],
            outcome: vec![],
            count: vec![],
        };
        let mut i = 0;
        while i < keys.len() {
            let k = keys[i];
            let mut j = i + 1;
            while j < keys.len() && keys[j] == k {
                j += 1;
            }
            rows.a.push((k >> 34) as u32);
            rows.b.push(((k >> 2) & 0xffff_ffff) as u32);
            rows.outcome.push(match k & 3 {
                0 => Outcome::BWins,
                1 => Outcome::Tie,
                _ => Outcome::AWins,
            });
            rows.count.push((j - i) as f64);
            i = j;
        }
        rows
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.a.len()
    }

    /// True when there are no rows.
    pub fn is_empty(&self) -> bool {
        self.a.is_empty()
    }

    /// Total number of battles.
    pub fn total(&self) -> f64 {
        self.count.iter().sum()
    }
}

/// Per unordered pair `(lo < hi)`: wins of `lo`, wins of `hi`, ties. All fits read this table.
#[derive(Debug, Clone, PartialEq)]
pub struct PairTable {
    /// Number of models.
    pub n_models: usize,
    /// Lower model id of each pair.
    pub lo: Vec<u32>,
    /// Higher model id of each pair.
    pub hi: Vec<u32>,
    /// Battles won by `lo`.
    pub win_lo: Vec<f64>,
    /// Battles won by `hi`.
    pub win_hi: Vec<f64>,
    /// Ties.
    pub tie: Vec<f64>,
}

/// Precomputed map from [`OutcomeRows`] to [`PairTable`] slots, so bootstrap rounds can re-aggregate
/// resampled counts without hashing.
#[derive(Debug, Clone)]
pub struct RowToPair {
    pair: Vec<u32>,
    /// 0: `lo` won, 1: tie, 2: `hi` won.
    kind: Vec<u8>,
    template: PairTable,
}

impl RowToPair {
    /// Builds the map and an empty pair table.
    pub fn new(rows: &OutcomeRows) -> Self {
        let mut keyed: Vec<(u64, usize)> = (0..rows.len())
            .map(|r| {
                let (x, y) = (rows.a[r].min(rows.b[r]), rows.a[r].max(rows.b[r]));
                (((x as u64) << 32) | y as u64, r)
            })
            .collect();
        keyed.sort_unstable();
        let mut pair = vec![0u32; rows.len()];
        let mut kind = vec![0u8; rows.len()];
        let mut t = PairTable {
            n_models: rows.n_models,
            lo: vec![],
            hi: vec![],
            win_lo: vec![],
            win_hi: vec![],
            tie: vec![],
        };
        let mut last = u64::MAX;
        for (key, r) in keyed {
            if key != last {
                t.lo.push((key >> 32) as u32);
                t.hi.push((key & 0xffff_ffff) as u32);
                last = key;
            }
            pair[r] = (t.lo.len() - 1) as u32;
            let a_is_lo = rows.a[r] < rows.b[r];
            kind[r] = match (rows.outcome[r], a_is_lo) {
                (Outcome::Tie, _) => 1,
                (Outcome::AWins, true) | (Outcome::BWins, false) => 0,
                _ => 2,
            };
        }
        let np = t.lo.len();
        t.win_lo = vec![0.0; np];
        t.win_hi = vec![0.0; np];
        t.tie = vec![0.0; np];
        RowToPair {
            pair,
            kind,
            template: t,
        }
    }

    /// Aggregates per-row weights (the row counts, or a bootstrap draw of them) into a pair table.
    pub fn aggregate(&self, weights: &[f64]) -> PairTable {
        let mut t = self.template.clone();
        self.aggregate_into(weights, &mut t);
        t
    }

    /// Like [`RowToPair::aggregate`], reusing `t`'s buffers (must come from this map).
    pub fn aggregate_into(&self, weights: &[f64], t: &mut PairTable) {
        t.win_lo.iter_mut().for_each(|x| *x = 0.0);
        t.win_hi.iter_mut().for_each(|x| *x = 0.0);
        t.tie.iter_mut().for_each(|x| *x = 0.0);
        for (r, &w) in weights.iter().enumerate() {
            let p = self.pair[r] as usize;
            match self.kind[r] {
                0 => t.win_lo[p] += w,
                1 => t.tie[p] += w,
                _ => t.win_hi[p] += w,
            }
        }
    }
}

impl PairTable {
    /// Aggregates battles directly.
    pub fn from_battles(b: &Battles) -> Self {
        let rows = OutcomeRows::from_battles(b);
        RowToPair::new(&rows).aggregate(&rows.count)
    }
}

/// Solver settings shared by the Bradley-Terry and Rao-Kupper fits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FitOptions {
    /// Stop when the gradient's max-norm is below `tol * max(1, total games)` (gradient in game units).
    pub tol: f64,
    /// Maximum Newton iterations.
    pub max_iter: usize,
    /// Optional L2 penalty `prior/2 * |beta|^2` (0 = plain MLE). Makes the fit finite when a model won or
    /// lost every game, at the price of shrinking ratings toward the mean.
    pub prior: f64,
}

impl Default for FitOptions {
    fn default() -> Self {
        FitOptions {
            tol: 1e-12,
            max_iter: 100,
            prior: 0.0,
        }
    }
}

/// A fitted strength vector.
#[derive(Debug, Clone, PartialEq)]
pub struct BtFit {
    /// Natural log-odds strengths, `sum = 0` (before any anchoring).
    pub beta: Vec<f64>,
    /// Rao-Kupper `kappa = ln(theta)` (0 for Bradley-Terry).
    pub kappa: f64,
    /// Newton iterations used.
    pub iterations: usize,
    /// Whether the gradient tolerance was met. False typically means a model won or lost all its games
    /// (the MLE is infinite) or the comparison graph is disconnected.
    pub converged: bool,
    /// Final gradient max-norm.
    pub grad_inf: f64,
    /// Final negative log-likelihood (plus penalty).
    pub loss: f64,
}

#[inline]
fn softplus(x: f64) -> f64 {
    x.max(0.0) + (-x.abs()).exp().ln_1p()
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

fn bt_loss(t: &PairTable, beta: &[f64], prior: f64) -> f64 {
    let mut loss = 0.0;
    for p in 0..t.lo.len() {
        let d = beta[t.lo[p] as usize] - beta[t.hi[p] as usize];
        let s = t.win_lo[p] + 0.5 * t.tie[p];
        let f = t.win_hi[p] + 0.5 * t.tie[p];
        loss += s * softplus(-d) + f * softplus(d);
    }
    loss + 0.5 * prior * beta.iter().map(|x| x * x).sum::<f64>()
}

/// Fits Bradley-Terry with ties as half wins (FastChat `compute_bt`'s model) by Newton's method.
///
/// `init` warm-starts the solver (bootstrap rounds start from the full-data fit). The result is centred
/// (`sum(beta) = 0`).
pub fn fit_bt(t: &PairTable, init: Option<&[f64]>, opts: &FitOptions) -> BtFit {
    let k = t.n_models;
    let mut beta = match init {
        Some(x) => x.to_vec(),
        None => vec![0.0; k],
    };
    center(&mut beta);
    let total: f64 = t.win_lo.iter().chain(&t.win_hi).chain(&t.tie).sum();
    let gtol = opts.tol * total.max(1.0);
    let mut g = vec![0.0; k];
    let mut h = vec![0.0; k * k];
    let mut trial = vec![0.0; k];
    let mut loss = bt_loss(t, &beta, opts.prior);
    let mut it = 0;
    let mut converged = false;
    let mut grad_inf;
    loop {
        g.iter_mut().for_each(|x| *x = 0.0);
        h.iter_mut().for_each(|x| *x = 0.0);
        for p in 0..t.lo.len() {
            let (i, j) = (t.lo[p] as usize, t.hi[p] as usize);
            let n = t.win_lo[p] + t.win_hi[p] + t.tie[p];
            if n == 0.0 {
                continue;
            }
            let s = t.win_lo[p] + 0.5 * t.tie[p];
            let q = sigmoid(beta[i] - beta[j]);
            let r = s - n * q;
            g[i] -= r;
            g[j] += r;
            let w = n * q * (1.0 - q);
            h[i * k + i] += w;
            h[j * k + j] += w;
            h[i * k + j] -= w;
            h[j * k + i] -= w;
        }
        for i in 0..k {
            g[i] += opts.prior * beta[i];
            h[i * k + i] += opts.prior;
        }
        grad_inf = g.iter().fold(0.0f64, |m, x| m.max(x.abs()));
        if grad_inf <= gtol {
            converged = true;
            break;
        }
        if it >= opts.max_iter {
            break;
        }
        it += 1;
        let mut step: Vec<f64> = g.iter().map(|x| -x).collect();
        if !newton_direction(&mut h, &mut step, k, None) {
            break;
        }
        let slope: f64 = g.iter().zip(&step).map(|(a, b)| a * b).sum();
        let mut tstep = 1.0;
        let mut accepted = false;
        if -slope < 1e-2 {
            // Newton decrement below 0.1: inside the quadratic-convergence region, where the predicted
            // decrease is smaller than the rounding noise of the summed loss. Take the full step.
            for i in 0..k {
                trial[i] = beta[i] + step[i];
            }
            loss = bt_loss(t, &trial, opts.prior);
            accepted = true;
        }
        for _ in 0..if accepted { 0 } else { 40 } {
            for i in 0..k {
                trial[i] = beta[i] + tstep * step[i];
            }
            let l = bt_loss(t, &trial, opts.prior);
            if l <= loss + 1e-4 * tstep * slope || (l - loss).abs() <= 1e-15 * loss.abs() {
                loss = l;
                accepted = true;
                break;
            }
            tstep *= 0.5;
        }
        if !accepted {
            break;
        }
        std::mem::swap(&mut beta, &mut trial);
        let max_step = step.iter().fold(0.0f64, |m, x| m.max(x.abs())) * tstep;
        if max_step < 1e-14 * (1.0 + beta.iter().fold(0.0f64, |m, x| m.max(x.abs()))) {
            // The step is below rounding: we are at the optimum to machine precision.
            converged = true;
            break;
        }
    }
    center(&mut beta);
    BtFit {
        beta,
        kappa: 0.0,
        iterations: it,
        converged,
        grad_inf,
        loss,
    }
}

/// Solves the Newton system `(H + c 1 1^T) x = b` over the first `k` unknowns (the rating block, whose
/// null space is the common shift); extra unknowns beyond `k` (up to `dim`) are left unprojected.
/// Retries with a growing ridge if the matrix is singular (disconnected comparison graph).
fn newton_direction(h: &mut [f64], b: &mut [f64], k: usize, dim: Option<usize>) -> bool {
    let dim = dim.unwrap_or(k);
    let mean_diag = (0..k).map(|i| h[i * dim + i]).sum::<f64>() / k.max(1) as f64;
    let c = mean_diag.max(1e-12) / k.max(1) as f64;
    for i in 0..k {
        for j in 0..k {
            h[i * dim + j] += c;
        }
    }
    let rhs = b.to_vec();
    let mut ridge = 0.0;
    for _ in 0..8 {
        let mut a = h.to_vec();
        for i in 0..dim {
            a[i * dim + i] += ridge;
        }
        b.copy_from_slice(&rhs);
        if cholesky_solve(&mut a, b, dim) && b.iter().all(|x| x.is_finite()) {
            return true;
        }
        ridge = if ridge == 0.0 {
            1e-10 * mean_diag.max(1e-12)
        } else {
            ridge * 100.0
        };
    }
    false
}

fn center(beta: &mut [f64]) {
    if beta.is_empty() {
        return;
    }
    let m = beta.iter().sum::<f64>() / beta.len() as f64;
    beta.iter_mut().for_each(|x| *x -= m);
}

/// Rating scale of a leaderboard: `rating = init + scale * beta / ln(base)` (FastChat `scale_and_offset`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scale {
    /// Points per factor `base` of odds (400).
    pub scale: f64,
    /// Odds base (10).
    pub base: f64,
    /// Mean rating when no anchor is set (1000).
    pub init: f64,
}

impl Default for Scale {
    fn default() -> Self {
        Scale {
            scale: 400.0,
            base: 10.0,
            init: 1000.0,
        }
    }
}

impl Scale {
    /// Converts centred strengths to ratings; with `anchor = Some((model, rating))` everything is shifted
    /// so that `model` gets `rating` (FastChat's `baseline_model`/`baseline_rating`).
    pub fn ratings(&self, beta: &[f64], anchor: Option<(usize, f64)>) -> Vec<f64> {
        let f = self.scale / self.base.ln();
        let mut r: Vec<f64> = beta.iter().map(|b| self.init + f * b).collect();
        if let Some((m, v)) = anchor {
            let shift = v - r[m];
            r.iter_mut().for_each(|x| *x += shift);
        }
        r
    }
}

/// Fits Rao-Kupper when `rao_kupper` is set, otherwise Bradley-Terry (warm-started from `init`).
pub fn fit_rk_or_bt(
    t: &PairTable,
    rao_kupper: bool,
    init: Option<&[f64]>,
    opts: &FitOptions,
) -> BtFit {
    if rao_kupper {
        fit_rao_kupper(t, opts)
    } else {
        fit_bt(t, init, opts)
    }
}

// ----------------------------------------------------------------------------------------- Rao-Kupper

fn rk_loss(t: &PairTable, beta: &[f64], kappa: f64, prior: f64) -> f64 {
    let mut loss = 0.0;
    for p in 0..t.lo.len() {
        let d = beta[t.lo[p] as usize] - beta[t.hi[p] as usize];
        // -log sigmoid(x) = softplus(-x); P(tie) = 1 - a - b computed as a difference of sigmoids.
        let la = softplus(-(d - kappa));
        let lb = softplus(-(-d - kappa));
        let pt = tie_prob(d, kappa);
        loss += t.win_lo[p] * la + t.win_hi[p] * lb;
        if t.tie[p] > 0.0 {
            loss -= t.tie[p] * pt.ln();
        }
    }
    loss + 0.5 * prior * beta.iter().map(|x| x * x).sum::<f64>()
}

/// `1 - sigmoid(d - kappa) - sigmoid(-d - kappa)` without cancellation:
/// `= sigmoid(kappa - d) - sigmoid(-d - kappa)`.
#[inline]
fn tie_prob(d: f64, kappa: f64) -> f64 {
    (sigmoid(kappa - d) - sigmoid(-d - kappa)).max(1e-300)
}

/// Fits the Rao-Kupper model (ties as their own outcome, `theta = exp(kappa)`) by damped Newton on
/// `(beta, kappa)`. With no ties in the data `kappa` is 0 and this is plain Bradley-Terry without ties.
pub fn fit_rao_kupper(t: &PairTable, opts: &FitOptions) -> BtFit {
    let k = t.n_models;
    let total_ties: f64 = t.tie.iter().sum();
    if total_ties == 0.0 {
        return fit_bt(t, None, opts);
    }
    let dim = k + 1;
    let mut beta = vec![0.0; k];
    // Start kappa from the tie rate of equal models: P(tie) = tanh(kappa/2).
    let total: f64 = t.win_lo.iter().chain(&t.win_hi).sum::<f64>() + total_ties;
    let tie_rate = (total_ties / total).clamp(1e-6, 1.0 - 1e-6);
    let mut kappa = 2.0 * tie_rate.atanh();
    let gtol = opts.tol * total.max(1.0);
    let mut loss = rk_loss(t, &beta, kappa, opts.prior);
    let (mut it, mut converged, mut grad_inf) = (0, false, f64::INFINITY);
    let mut trial = vec![0.0; k];
    while it <= opts.max_iter {
        let mut g = vec![0.0; dim];
        let mut h = vec![0.0; dim * dim];
        for p in 0..t.lo.len() {
            let (i, j) = (t.lo[p] as usize, t.hi[p] as usize);
            let d = beta[i] - beta[j];
            let (w, l, tt) = (t.win_lo[p], t.win_hi[p], t.tie[p]);
            let a = sigmoid(d - kappa);
            let b = sigmoid(-d - kappa);
            let aa = a * (1.0 - a);
            let bb = b * (1.0 - b);
            // Derivatives of the log-likelihood l(d, kappa) of this pair.
            let mut ld = w * (1.0 - a) - l * (1.0 - b);
            let mut lk = -w * (1.0 - a) - l * (1.0 - b);
            let mut ldd = -w * aa - l * bb;
            let mut ldk = w * aa - l * bb;
            let mut lkk = -w * aa - l * bb;
            if tt > 0.0 {
                let tp = tie_prob(d, kappa);
                let a2 = aa * (1.0 - 2.0 * a);
                let b2 = bb * (1.0 - 2.0 * b);
                let (td, tk) = (-aa + bb, aa + bb);
                let (tdd, tdk, tkk) = (-a2 - b2, a2 - b2, -a2 - b2);
                ld += tt * td / tp;
                lk += tt * tk / tp;
                ldd += tt * (tdd / tp - td * td / (tp * tp));
                ldk += tt * (tdk / tp - td * tk / (tp * tp));
                lkk += tt * (tkk / tp - tk * tk / (tp * tp));
            }
            // Loss = -l; d = beta_i - beta_j.
            g[i] -= ld;
            g[j] += ld;
            g[k] -= lk;
            h[i * dim + i] -= ldd;
            h[j * dim + j] -= ldd;
            h[i * dim + j] += ldd;
            h[j * dim + i] += ldd;
            h[i * dim + k] -= ldk;
            h[k * dim + i] -= ldk;
            h[j * dim + k] += ldk;
            h[k * dim + j] += ldk;
            h[k * dim + k] -= lkk;
        }
        for i in 0..k {
            g[i] += opts.prior * beta[i];
            h[i * dim + i] += opts.prior;
        }
        grad_inf = g.iter().fold(0.0f64, |m, x| m.max(x.abs()));
        if grad_inf <= gtol {
            converged = true;
            break;
        }
        if it == opts.max_iter {
            break;
        }
        it += 1;
        let mut step: Vec<f64> = g.iter().map(|x| -x).collect();
        if !newton_direction(&mut h, &mut step, k, Some(dim)) {
            // Not locally convex: fall back to a gradient step.
            step = g.iter().map(|x| -x / total.max(1.0)).collect();
        }
        let slope: f64 = g.iter().zip(&step).map(|(a, b)| a * b).sum();
        let mut ts = 1.0;
        let mut accepted = false;
        for _ in 0..50 {
            for i in 0..k {
                trial[i] = beta[i] + ts * step[i];
            }
            let kt = (kappa + ts * step[k]).max(1e-12);
            let lt = rk_loss(t, &trial, kt, opts.prior);
            if lt <= loss + 1e-4 * ts * slope || (lt - loss).abs() <= 1e-15 * loss.abs() {
                loss = lt;
                kappa = kt;
                std::mem::swap(&mut beta, &mut trial);
                accepted = true;
                break;
            }
            ts *= 0.5;
        }
        if !accepted {
            break;
        }
    }
    center(&mut beta);
    BtFit {
        beta,
        kappa,
        iterations: it,
        converged,
        grad_inf,
        loss,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn synthetic(strengths: &[f64], n: usize, tie_kappa: Option<f64>, seed: u64) -> Battles {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let names: Vec<String> = (0..strengths.len()).map(|i| format!("m{i}")).collect();
        let mut rows = vec![];
        for _ in 0..n {
            let i = rng.gen_range(0..strengths.len());
            let mut j = rng.gen_range(0..strengths.len() - 1);
            if j >= i {
                j += 1;
            }
            let d = strengths[i] - strengths[j];
            let u: f64 = rng.gen();
            let o = match tie_kappa {
                None => {
                    if u < sigmoid(d) {
                        Outcome::AWins
                    } else {
                        Outcome::BWins
                    }
                }
                Some(k) => {
                    if u < sigmoid(d - k) {
                        Outcome::AWins
                    } else if u < sigmoid(d - k) + sigmoid(-d - k) {
                        Outcome::BWins
                    } else {
                        Outcome::Tie
                    }
                }
            };
            rows.push((i, j, o));
        }
        Battles::from_triples(
            rows.iter()
                .map(|&(i, j, o)| (names[i].as_str(), names[j].as_str(), o)),
        )
        .unwrap()
    }

    #[test]
    fn newton_solution_zeroes_the_per_battle_gradient() {
        let b = synthetic(&[0.0, 0.5, -0.3, 1.2, 0.1], 3000, Some(0.4), 1);
        let fit = fit_bt(&PairTable::from_battles(&b), None, &FitOptions::default());
        assert!(fit.converged && fit.iterations < 15, "{fit:?}");
        // Gradient of the per-battle loss (FastChat bt_loss_and_grad with weights 1) at the fit.
        let mut g = vec![0.0; b.models.len()];
        for i in 0..b.len() {
            let (x, y) = (b.a[i] as usize, b.b[i] as usize);
            let r = b.outcome[i].score_a() - sigmoid(fit.beta[x] - fit.beta[y]);
            g[x] -= r;
            g[y] += r;
        }
        assert!(g.iter().all(|v| v.abs() < 1e-8), "{g:?}");
        assert!(fit.beta.iter().sum::<f64>().abs() < 1e-12);
    }

    #[test]
    fn recovers_strengths_and_warm_start_agrees() {
        let truth = [0.0, 0.8, -0.6, 1.5, -1.2, 0.3];
        let b = synthetic(&truth, 60_000, None, 7);
        let t = PairTable::from_battles(&b);
        let fit = fit_bt(&t, None, &FitOptions::default());
        let mean = truth.iter().sum::<f64>() / truth.len() as f64;
        // Model ids follow first appearance; map back through the names.
        for (id, name) in b.models.iter().enumerate() {
            let m: usize = name[1..].parse().unwrap();
            assert!(
                (fit.beta[id] - (truth[m] - mean)).abs() < 0.05,
                "{name}: {}",
                fit.beta[id]
            );
        }
        let warm = fit_bt(&t, Some(&fit.beta), &FitOptions::default());
        assert!(warm.iterations <= 1);
        for (x, y) in warm.beta.iter().zip(&fit.beta) {
            assert!((x - y).abs() < 1e-12);
        }
    }

    #[test]
    fn rao_kupper_recovers_tie_parameter() {
        let truth = [0.0, 0.7, -0.5, 1.0];
        let b = synthetic(&truth, 80_000, Some(0.5), 3);
        let fit = fit_rao_kupper(&PairTable::from_battles(&b), &FitOptions::default());
        assert!(fit.converged, "{fit:?}");
        assert!((fit.kappa - 0.5).abs() < 0.03, "kappa {}", fit.kappa);
        let mean = truth.iter().sum::<f64>() / 4.0;
        for (id, name) in b.models.iter().enumerate() {
            let m: usize = name[1..].parse().unwrap();
            assert!((fit.beta[id] - (truth[m] - mean)).abs() < 0.05);
        }
    }

    #[test]
    fn anchor_and_scale() {
        let s = Scale::default();
        let r = s.ratings(&[10f64.ln(), -(10f64.ln())], None);
        assert!((r[0] - 1400.0).abs() < 1e-9 && (r[1] - 600.0).abs() < 1e-9);
        let r = s.ratings(&[10f64.ln(), -(10f64.ln())], Some((1, 1114.0)));
        assert!((r[1] - 1114.0).abs() < 1e-9 && (r[0] - 1914.0).abs() < 1e-9);
    }

    #[test]
    fn rows_are_sorted_and_counted() {
        let b = Battles::from_triples([
            ("x", "y", Outcome::Tie),
            ("y", "x", Outcome::AWins),
            ("x", "y", Outcome::Tie),
            ("x", "y", Outcome::BWins),
        ])
        .unwrap();
        let r = OutcomeRows::from_battles(&b);
        assert_eq!(r.a, [0, 0, 1]);
        assert_eq!(r.outcome, [Outcome::BWins, Outcome::Tie, Outcome::AWins]);
        assert_eq!(r.count, [1.0, 2.0, 1.0]);
        let t = RowToPair::new(&r).aggregate(&r.count);
        assert_eq!((t.win_lo[0], t.win_hi[0], t.tie[0]), (0.0, 2.0, 2.0));
    }
}
