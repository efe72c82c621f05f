//! Evaluation of expression trees: exact (bounded rationals) and floating point.
//!
//! Exact evaluation is attempted first; anything irrational or symbolic falls back to `f64`
//! evaluation. Rational arithmetic that is merely too large ([`too_large`]) does not: its
//! comparison is undecided. Uninterpreted functions (`f(x)`) evaluate to a fixed smooth
//! pseudo-random function of their arguments, so `f(a) = f(b)` comparisons behave like
//! comparisons of unknown functions.

use crate::expr::{is_series, Const, Expr, INDEX_VAR, SERIES_ADD};
use crate::number::{self, Rat};
use num_traits::{Signed, Zero};

/// How the named policies read percent and degree markers during one evaluation.
#[derive(Clone, Copy, Debug, Default)]
pub struct Mode {
    /// `x%` means `x/100` (true) or the bare number `x` (false).
    pub percent_fraction: bool,
    /// `x°` means `x·π/180` (true) or the bare number `x` (false).
    pub degree_radians: bool,
}

/// Exact value of a constant expression, if it is rational and small enough.
pub fn exact(e: &Expr, m: Mode) -> Option<Rat> {
    Some(match e {
        Expr::Num(r) | Expr::Dec(r, _) => r.clone(),
        Expr::Neg(a) => -exact(a, m)?,
        Expr::Add(v) => {
            let mut acc = Rat::zero();
            for x in v {
                acc = number::add(&acc, &exact(x, m)?)?;
            }
            acc
        }
        Expr::Mul(v) => {
            let mut acc = number::small(1);
            for x in v {
                acc = number::mul(&acc, &exact(x, m)?)?;
            }
            acc
        }
        Expr::Div(a, b) | Expr::Ratio(a, b) => number::div(&exact(a, m)?, &exact(b, m)?)?,
        Expr::Pow(a, b) => {
            let bb = exact(b, m)?;
            let aa = exact(a, m)?;
            if bb.is_integer() {
                number::pow(&aa, &bb)?
            } else if bb == Rat::new(1.into(), 2.into()) {
                number::sqrt_exact(&aa)?
            } else {
                return None;
            }
        }
        Expr::Percent(a) => {
            let v = exact(a, m)?;
            if m.percent_fraction {
                number::div(&v, &number::small(100))?
            } else {
                v
            }
        }
        Expr::Degree(a) => {
            if m.degree_radians {
                return None;
            }
            exact(a, m)?
        }
        Expr::Func(f, args) if args.len() == 1 => {
            let a = exact(&args[0], m)?;
            match f.as_str() {
                "sqrt" => number::sqrt_exact(&a)?,
                "abs" => a.abs(),
                "floor" => a.floor(),
                "ceil" => a.ceil(),
                "fact" => number::factorial(&a)?,
                _ => return None,
            }
        }
        _ => return None,
    })
}

/// Whether `e` holds rational arithmetic that is exact in principle but beyond the size limits
/// of [`number`] (a power tower such as `2^{2^{100}}`, a huge factorial). Such a value cannot be
/// compared in floating point without losing the difference, so its comparison is undecided.
pub fn too_large(e: &Expr, m: Mode) -> bool {
    e.any(&|x| node_too_large(x, m))
}

/// One node whose operands all evaluate exactly but which does not, for size alone (not
/// irrationality or division by zero).
fn node_too_large(e: &Expr, m: Mode) -> bool {
    let all_exact = |v: &[&Expr]| v.iter().all(|x| exact(x, m).is_some());
    let refused = || exact(e, m).is_none();
    match e {
        Expr::Neg(a) | Expr::Percent(a) => all_exact(&[a]) && refused(),
        Expr::Add(v) | Expr::Mul(v) => all_exact(&v.iter().collect::<Vec<_>>()) && refused(),
        Expr::Div(a, b) | Expr::Ratio(a, b) => {
            exact(b, m).is_some_and(|d| !d.is_zero()) && all_exact(&[a]) && refused()
        }
        Expr::Pow(a, b) => match (exact(a, m), exact(b, m)) {
            (Some(base), Some(p)) => {
                p.is_integer() && !(base.is_zero() && p.is_negative()) && refused()
            }
            _ => false,
        },
        Expr::Func(f, args) if f == "fact" && args.len() == 1 => {
            exact(&args[0], m).is_some_and(|n| n.is_integer() && !n.is_negative()) && refused()
        }
        _ => false,
    }
}

fn hash_name(s: &str) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in s.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

fn coef(h: u64, k: u32) -> f64 {
    let x = h.rotate_left(k * 13) ^ (k as u64).wrapping_mul(0x9E3779B97F4A7C15);
    0.5 + (x % 10_000) as f64 / 10_000.0
}

/// Lanczos approximation of Γ(x) for real x.
pub fn gamma(x: f64) -> f64 {
    if x < 0.5 {
        if (x - x.round()).abs() < 1e-12 {
            return f64::NAN;
        }
        return std::f64::consts::PI / ((std::f64::consts::PI * x).sin() * gamma(1.0 - x));
    }
    const G: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.5203681218851,
        -1259.1392167224028,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507343278686905,
        -0.13857109526572012,
        9.984_369_578_019_572e-6,
        1.5056327351493116e-7,
    ];
    let x = x - 1.0;
    let mut a = G[0];
    let t = x + 7.5;
    for (i, g) in G.iter().enumerate().skip(1) {
        a += g / (x + i as f64);
    }
    (2.0 * std::f64::consts::PI).sqrt() * t.powf(x + 0.5) * (-t).exp() * a
}

/// Floating-point value under variable assignment `env` (unknown variables give NaN).
pub fn approx(e: &Expr, env: &[(String, f64)], m: Mode) -> f64 {
    match e {
        Expr::Num(r) | Expr::Dec(r, _) => number::to_f64(r),
        Expr::Sym(s) => env
            .iter()
            .find(|(n, _)| n == s)
            .map(|(_, v)| *v)
            .unwrap_or(f64::NAN),
        Expr::Const(Const::Pi) => std::f64::consts::PI,
        Expr::Const(Const::E) => std::f64::consts::E,
        Expr::Const(Const::Inf) => f64::INFINITY,
        Expr::Neg(a) => -approx(a, env, m),
        Expr::Add(v) => v.iter().map(|x| approx(x, env, m)).sum(),
        Expr::Mul(v) => v.iter().map(|x| approx(x, env, m)).product(),
        Expr::Div(a, b) | Expr::Ratio(a, b) => {
            let d = approx(b, env, m);
            if d == 0.0 {
                f64::NAN
            } else {
                approx(a, env, m) / d
            }
        }
        Expr::Pow(a, b) => {
            let x = approx(a, env, m);
            let y = approx(b, env, m);
            if x < 0.0 && y.fract() != 0.0 {
                // odd roots of negatives: (-8)^(1/3) = -2
                let inv = 1.0 / y;
                if (inv - inv.round()).abs() < 1e-9 && (inv.round() as i64) % 2 != 0 {
                    return -(-x).powf(y);
                }
                return f64::NAN;
            }
            x.powf(y)
        }
        Expr::Percent(a) => {
            let v = approx(a, env, m);
            if m.percent_fraction {
                v / 100.0
            } else {
                v
            }
        }
        Expr::Degree(a) => {
            let v = approx(a, env, m);
            if m.degree_radians {
                v * std::f64::consts::PI / 180.0
            } else {
                v
            }
        }
        Expr::Func(f, args) if args.len() == 2 && is_series(f) => {
            approx_series(f, &args[0], &args[1], env, m)
        }
        Expr::Func(f, args) => {
            let a: Vec<f64> = args.iter().map(|x| approx(x, env, m)).collect();
            let x = a.first().copied().unwrap_or(f64::NAN);
            match (f.as_str(), a.len()) {
                ("sin", 1) => x.sin(),
                ("cos", 1) => x.cos(),
                ("tan", 1) => x.tan(),
                ("sec", 1) => 1.0 / x.cos(),
                ("csc", 1) => 1.0 / x.sin(),
                ("cot", 1) => 1.0 / x.tan(),
                ("arcsin", 1) => x.asin(),
                ("arccos", 1) => x.acos(),
                ("arctan", 1) => x.atan(),
                ("arccot", 1) => (1.0 / x).atan(),
                ("arcsec", 1) => (1.0 / x).acos(),
                ("arccsc", 1) => (1.0 / x).asin(),
                ("sinh", 1) => x.sinh(),
                ("cosh", 1) => x.cosh(),
                ("tanh", 1) => x.tanh(),
                ("ln", 1) | ("log", 1) => x.ln(),
                ("log10", 1) => x.log10(),
                ("logb", 2) => x.ln() / a[1].ln(),
                ("exp", 1) => x.exp(),
                ("sqrt", 1) => x.sqrt(),
                ("root", 2) => {
                    let n = a[1];
                    if x < 0.0 && n.fract() == 0.0 && (n as i64) % 2 != 0 {
                        -(-x).powf(1.0 / n)
                    } else {
                        x.powf(1.0 / n)
                    }
                }
                ("abs", 1) => x.abs(),
                ("floor", 1) => x.floor(),
                ("ceil", 1) => x.ceil(),
                ("fact", 1) => gamma(x + 1.0),
                ("binom", 2) => gamma(x + 1.0) / (gamma(a[1] + 1.0) * gamma(x - a[1] + 1.0)),
                _ => {
                    // uninterpreted function: fixed smooth function of its arguments
                    let h = hash_name(f);
                    let mut acc = coef(h, 0);
                    for (k, v) in a.iter().enumerate() {
                        let k = k as u32 + 1;
                        acc += (coef(h, k) * v + coef(h, k + 7)).sin() * coef(h, k + 3)
                            + 0.3 * coef(h, k + 5) * v;
                    }
                    acc
                }
            }
        }
        _ => f64::NAN,
    }
}

/// True if the expression mentions percent or degree markers (so both readings are tried).
pub fn has_marker(e: &Expr) -> (bool, bool) {
    (
        e.any(&|x| matches!(x, Expr::Percent(_))),
        e.any(&|x| matches!(x, Expr::Degree(_))),
    )
}

/// Most term evaluations times template size one series evaluation may cost.
pub const MAX_WORK: usize = 200_000;

/// Value of a folded series: `count` must be a non-negative integer (NaN otherwise, or when
/// the evaluation would exceed [`MAX_WORK`]).
pub fn approx_series(name: &str, body: &Expr, count: &Expr, env: &[(String, f64)], m: Mode) -> f64 {
    let n = approx(count, env, m);
    if !n.is_finite() || n < -1e-9 || n > MAX_WORK as f64 || (n - n.round()).abs() > 1e-9 {
        return f64::NAN;
    }
    let n = n.round() as usize;
    if (n + 1).saturating_mul(body.size()) > MAX_WORK {
        return f64::NAN;
    }
    let mut env: Vec<(String, f64)> = env.to_vec();
    env.push((INDEX_VAR.into(), 0.0));
    let at = env.len() - 1;
    let mut acc = if name == SERIES_ADD { 0.0 } else { 1.0 };
    for t in 0..=n {
        env[at].1 = t as f64;
        let x = approx(body, &env, m);
        if name == SERIES_ADD {
            acc += x;
        } else {
            acc *= x;
        }
    }
    acc
}
