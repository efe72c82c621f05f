//! Numeric side of equivalence: closeness with decimal tolerance or rounding, evaluation at
//! seeded random points, the exact rational re-check, and proportionality of relations.

use crate::budget::Ctx;
use crate::eval::{approx, exact, Mode};
use crate::expr::Expr;
use crate::number;
use rand::{Rng, SeedableRng};

/// Numeric closeness: `float_rounding` (Math-Verify's option) if set, else decimal tolerance
/// `tol` if one side is a decimal literal, else relative 1e-9.
pub(crate) fn close(x: f64, y: f64, tol: Option<f64>, rounding: Option<u32>) -> bool {
    if x.is_nan() || y.is_nan() {
        return false;
    }
    if x.is_infinite() || y.is_infinite() {
        return x == y;
    }
    let scale = x.abs().max(y.abs()).max(1.0);
    if (x - y).abs() <= 1e-9 * scale {
        return true;
    }
    if let Some(r) = rounding {
        let k = 10f64.powi(r.min(15) as i32);
        return (x * k).round() == (y * k).round();
    }
    if let Some(t) = tol {
        return (x - y).abs() <= t * (1.0 + 1e-9) + 1e-12 * scale;
    }
    false
}

/// Tolerance implied by a decimal literal side (`0.5·10^-digits`), under the reading `m`.
pub(crate) fn decimal_tol(e: &Expr, m: Mode) -> Option<f64> {
    match e {
        Expr::Dec(_, d) => Some(0.5 * 10f64.powi(-(*d as i32))),
        Expr::Neg(a) => decimal_tol(a, m),
        Expr::Percent(a) => {
            decimal_tol(a, m).map(|t| if m.percent_fraction { t / 100.0 } else { t })
        }
        Expr::Degree(a) => decimal_tol(a, m).map(|t| {
            if m.degree_radians {
                t * std::f64::consts::PI / 180.0
            } else {
                t
            }
        }),
        _ => None,
    }
}

pub(crate) fn permutations(n: usize) -> Vec<Vec<usize>> {
    if n == 0 {
        return vec![vec![]];
    }
    let mut out = vec![];
    for p in permutations(n - 1) {
        for k in 0..=p.len() {
            let mut q = p.clone();
            q.insert(k, n - 1);
            out.push(q);
        }
    }
    out
}

/// Sample points: half positive, half negative reals, then small integers as a second chance
/// (for `(-1)^n`, factorials). Seeded, so verdicts are deterministic.
pub(crate) fn points(vars: &[String], round: usize) -> Vec<Vec<(String, f64)>> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0x5eed + round as u64);
    (0..10)
        .map(|k| {
            vars.iter()
                .map(|v| {
                    let x = match round {
                        0 => {
                            let mag = rng.gen_range(0.15..2.9);
                            if k < 6 {
                                mag
                            } else {
                                -mag
                            }
                        }
                        1 => rng.gen_range(0.05..0.95),
                        _ => rng.gen_range(1..=12) as f64,
                    };
                    (v.clone(), x)
                })
                .collect()
        })
        .collect()
}

pub(crate) fn sample_eq(a: &Expr, b: &Expr, vars: &[String], m: Mode, c: &Ctx) -> bool {
    for round in 0..3 {
        if !c.tick(10) {
            return false;
        }
        let mut good = 0;
        for env in points(vars, round) {
            let x = approx(a, &env, m);
            let y = approx(b, &env, m);
            if x.is_finite() && y.is_finite() {
                let scale = x.abs().max(y.abs()).max(1e-6);
                if (x - y).abs() > 1e-7 * scale.max(1.0) {
                    return false;
                }
                good += 1;
            }
        }
        if good >= 4 {
            return exact_recheck(a, b, vars, m);
        }
    }
    false
}

/// High-precision re-check of a floating-point match: where both sides are rational functions
/// of the variables, evaluate them exactly (bounded rationals) at two rational points; a
/// difference there overrides the float agreement (catches cancellation and near-misses such as
/// `x` vs `x + 10^{-12}`). Sides that are not rational (roots, trig) keep the float verdict.
pub(crate) fn exact_recheck(a: &Expr, b: &Expr, vars: &[String], m: Mode) -> bool {
    for (k, pt) in [(3i64, 7i64), (-5, 11)].iter().enumerate() {
        let mut aa = a.clone();
        let mut bb = b.clone();
        for (j, v) in vars.iter().enumerate() {
            let val = Expr::Num(number::Rat::new(
                (pt.0 + j as i64 * (k as i64 + 2)).into(),
                pt.1.into(),
            ));
            aa = aa.subst(v, &val);
            bb = bb.subst(v, &val);
        }
        if let (Some(x), Some(y)) = (exact(&aa, m), exact(&bb, m)) {
            if x != y {
                return false;
            }
        }
    }
    true
}

pub(crate) fn is_zero(e: &Expr, c: &Ctx) -> bool {
    let mut vars = vec![];
    e.vars(&mut vars);
    sample_eq(
        e,
        &Expr::Num(number::small(0)),
        &vars,
        Mode {
            percent_fraction: true,
            degree_radians: true,
        },
        c,
    )
}

pub(crate) fn proportional(d1: &Expr, d2: &Expr, positive: bool, c: &Ctx) -> bool {
    let mut vars = vec![];
    d1.vars(&mut vars);
    d2.vars(&mut vars);
    let m = Mode {
        percent_fraction: true,
        degree_radians: true,
    };
    for round in 0..3 {
        if !c.tick(10) {
            return false;
        }
        let mut ratio: Option<f64> = None;
        let mut good = 0;
        let mut zeros = 0;
        for env in points(&vars, round) {
            let x = approx(d1, &env, m);
            let y = approx(d2, &env, m);
            if !(x.is_finite() && y.is_finite()) {
                continue;
            }
            if x.abs() < 1e-12 && y.abs() < 1e-12 {
                zeros += 1;
                continue;
            }
            if y.abs() < 1e-12 || x.abs() < 1e-12 {
                return false;
            }
            let r = x / y;
            match ratio {
                None => ratio = Some(r),
                Some(r0) => {
                    if (r - r0).abs() > 1e-7 * r0.abs().max(1.0) {
                        return false;
                    }
                }
            }
            good += 1;
        }
        if good >= 4 {
            return !positive || ratio.unwrap() > 0.0;
        }
        if zeros >= 8 {
            return true;
        }
    }
    false
}
