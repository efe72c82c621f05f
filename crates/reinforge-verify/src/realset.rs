//! Subsets of the real line: intervals, unions, finite point sets and one-variable
//! inequalities, in one canonical form (sorted, merged pieces) so that `x \ge 0`,
//! `[0, \infty)` and `\{x \mid x \geq 0\}` compare equal.

use crate::eval::{approx, Mode};
use crate::expr::{Const, Expr, RelOp, SetOp};

/// One end of a piece: value, closedness and (when known) the expression it came from.
#[derive(Clone, Debug)]
pub struct Bound {
    pub v: f64,
    pub closed: bool,
    pub expr: Option<Expr>,
}

/// A connected piece `lo .. hi` (a point when `lo == hi`, both closed).
#[derive(Clone, Debug)]
pub struct Piece {
    pub lo: Bound,
    pub hi: Bound,
}

/// Canonical union of pieces.
pub type RealSet = Vec<Piece>;

fn cval(e: &Expr) -> Option<f64> {
    let v = approx(
        e,
        &[],
        Mode {
            percent_fraction: true,
            degree_radians: true,
        },
    );
    if v.is_nan() {
        None
    } else {
        Some(v)
    }
}

fn bound(e: &Expr, closed: bool) -> Option<Bound> {
    let v = cval(e)?;
    Some(Bound {
        v,
        closed: closed && v.is_finite(),
        expr: if v.is_finite() { Some(e.clone()) } else { None },
    })
}

fn inf(neg: bool) -> Bound {
    Bound {
        v: if neg {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        },
        closed: false,
        expr: None,
    }
}

fn whole() -> RealSet {
    vec![Piece {
        lo: inf(true),
        hi: inf(false),
    }]
}

/// Whether an expression is naturally read as a set of reals (so the other side may be too).
pub fn is_setlike(e: &Expr) -> bool {
    match e {
        Expr::Interval(..) | Expr::SetOp(..) | Expr::SetBuilder(_) => true,
        Expr::Rel(_, ops) => ops.iter().any(|o| {
            matches!(
                o,
                RelOp::Lt | RelOp::Le | RelOp::Gt | RelOp::Ge | RelOp::Ne | RelOp::In
            )
        }),
        Expr::List(v) => {
            !v.is_empty()
                && v.iter()
                    .all(|x| matches!(x, Expr::Rel(..)) && is_setlike(x))
        }
        _ => false,
    }
}

/// Converts `e` to a real set; `var` is the single variable of relations (if any).
pub fn to_set(e: &Expr, tuple_as_interval: bool) -> Option<RealSet> {
    let s = match e {
        Expr::Interval(lc, a, b, rc) => vec![Piece {
            lo: bound(a, *lc)?,
            hi: bound(b, *rc)?,
        }],
        Expr::Tuple(v) if tuple_as_interval && v.len() == 2 => vec![Piece {
            lo: bound(&v[0], false)?,
            hi: bound(&v[1], false)?,
        }],
        Expr::Set(v) => {
            let mut out = vec![];
            for x in v {
                let b = bound(x, true)?;
                if !b.v.is_finite() {
                    return None;
                }
                out.push(Piece {
                    lo: b.clone(),
                    hi: b,
                });
            }
            out
        }
        Expr::SetOp(op, a, b) => {
            let x = to_set(a, true)?;
            let y = to_set(b, true)?;
            match op {
                SetOp::Union => x.into_iter().chain(y).collect(),
                SetOp::Intersect => intersect(&x, &y),
                SetOp::Minus => minus(&x, &y)?,
            }
        }
        Expr::SetBuilder(c) => to_set(c, false)?,
        Expr::List(v) => {
            let mut out = vec![];
            for x in v {
                out.extend(to_set(x, false)?);
            }
            out
        }
        Expr::Rel(parts, ops) => rel_set(parts, ops)?,
        _ => return None,
    };
    Some(normalize(s))
}

/// The variable of a one-variable relation and the set it describes.
fn rel_set(parts: &[Expr], ops: &[RelOp]) -> Option<RealSet> {
    let mut vars = vec![];
    for p in parts {
        p.vars(&mut vars);
    }
    {
        // "0 < f(x) < 1": the non-constant middle of a chain plays the variable
        let cst = |e: &Expr| {
            let mut v = vec![];
            e.vars(&mut v);
            v.is_empty()
        };
        if parts.len() == 3
            && cst(&parts[0])
            && cst(&parts[2])
            && !matches!(parts[1], Expr::Sym(_))
            && !matches!(parts[1], Expr::Func(ref n, _) if n == "abs")
            && !vars.is_empty()
        {
            let p = vec![parts[0].clone(), Expr::Sym("__v".into()), parts[2].clone()];
            return rel_set(&p, ops);
        }
    }
    if vars.len() != 1 {
        return None;
    }
    let var = vars[0].clone();
    if ops.len() == 1 && ops[0] == RelOp::In {
        if parts[0] == Expr::Sym(var.clone()) {
            return to_set(&parts[1], true);
        }
        return None;
    }
    let mut acc = whole();
    for (k, op) in ops.iter().enumerate() {
        let s = half(&parts[k], *op, &parts[k + 1], &var)?;
        acc = intersect(&acc, &s);
    }
    Some(acc)
}

/// Set of `var` satisfying `l op r`, for `l - r` linear in `var` or `|var| op c`.
fn half(l: &Expr, op: RelOp, r: &Expr, var: &str) -> Option<RealSet> {
    let (op, l, r) = match op {
        RelOp::Gt => (RelOp::Lt, r, l),
        RelOp::Ge => (RelOp::Le, r, l),
        o => (o, l, r),
    };
    let m = Mode {
        percent_fraction: true,
        degree_radians: true,
    };
    let f = |x: f64| approx(l, &[(var.to_string(), x)], m) - approx(r, &[(var.to_string(), x)], m);
    // |x| op c
    let abs_of_var = |e: &Expr| matches!(e, Expr::Func(n, a) if n == "abs" && a.len() == 1 && a[0] == Expr::Sym(var.to_string()));
    if abs_of_var(l) || abs_of_var(r) {
        let (c, var_left) = if abs_of_var(l) { (r, true) } else { (l, false) };
        let cb = bound(c, true)?;
        let neg = Bound {
            v: -cb.v,
            closed: cb.closed,
            expr: cb.expr.clone().map(|e| Expr::Neg(e.bx())),
        };
        let strict = op == RelOp::Lt;
        return Some(match (op, var_left) {
            (RelOp::Lt | RelOp::Le, true) => vec![Piece {
                lo: Bound {
                    closed: !strict,
                    ..neg
                },
                hi: Bound {
                    closed: !strict,
                    ..cb
                },
            }],
            (RelOp::Lt | RelOp::Le, false) => vec![
                Piece {
                    lo: inf(true),
                    hi: Bound {
                        closed: !strict,
                        ..neg
                    },
                },
                Piece {
                    lo: Bound {
                        closed: !strict,
                        ..cb
                    },
                    hi: inf(false),
                },
            ],
            _ => return None,
        });
    }
    let f0 = f(0.0);
    let a = f(1.0) - f0;
    if !a.is_finite()
        || a.abs() < 1e-12
        || (f(2.0) - f0 - 2.0 * a).abs() > 1e-9 * (1.0 + a.abs())
        || (f(-3.0) - f0 + 3.0 * a).abs() > 1e-9 * (1.0 + a.abs())
    {
        return None;
    }
    let root = -f0 / a;
    let rexpr = if *l == Expr::Sym(var.to_string()) {
        Some(r.clone())
    } else if *r == Expr::Sym(var.to_string()) {
        Some(l.clone())
    } else {
        None
    };
    let b = |closed: bool| Bound {
        v: root,
        closed,
        expr: rexpr.clone(),
    };
    let below = a > 0.0; // f < 0 <=> var < root
    Some(match op {
        RelOp::Eq => vec![Piece {
            lo: b(true),
            hi: b(true),
        }],
        RelOp::Ne => vec![
            Piece {
                lo: inf(true),
                hi: b(false),
            },
            Piece {
                lo: b(false),
                hi: inf(false),
            },
        ],
        RelOp::Lt | RelOp::Le => {
            let c = op == RelOp::Le;
            if below {
                vec![Piece {
                    lo: inf(true),
                    hi: b(c),
                }]
            } else {
                vec![Piece {
                    lo: b(c),
                    hi: inf(false),
                }]
            }
        }
        _ => return None,
    })
}

fn lo_key(b: &Bound) -> (f64, u8) {
    (b.v, if b.closed { 0 } else { 1 })
}

/// Sorts and merges overlapping or touching pieces.
pub fn normalize(mut s: RealSet) -> RealSet {
    s.retain(|p| p.lo.v < p.hi.v || (p.lo.v == p.hi.v && p.lo.closed && p.hi.closed));
    s.sort_by(|a, b| {
        lo_key(&a.lo)
            .partial_cmp(&lo_key(&b.lo))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    let mut out: RealSet = vec![];
    for p in s {
        if let Some(last) = out.last_mut() {
            let touches =
                p.lo.v < last.hi.v || (p.lo.v == last.hi.v && (p.lo.closed || last.hi.closed));
            if touches {
                if p.hi.v > last.hi.v || (p.hi.v == last.hi.v && p.hi.closed) {
                    last.hi = p.hi;
                }
                continue;
            }
        }
        out.push(p);
    }
    out
}

fn intersect(x: &RealSet, y: &RealSet) -> RealSet {
    let mut out = vec![];
    for a in x {
        for b in y {
            let lo = if a.lo.v > b.lo.v || (a.lo.v == b.lo.v && !a.lo.closed) {
                a.lo.clone()
            } else {
                b.lo.clone()
            };
            let hi = if a.hi.v < b.hi.v || (a.hi.v == b.hi.v && !a.hi.closed) {
                a.hi.clone()
            } else {
                b.hi.clone()
            };
            out.push(Piece { lo, hi });
        }
    }
    normalize(out)
}

/// `x \ y` where `y` is a finite set of points.
fn minus(x: &RealSet, y: &RealSet) -> Option<RealSet> {
    let mut cur = x.clone();
    for p in y {
        if p.lo.v != p.hi.v {
            return None;
        }
        let mut next = vec![];
        for q in cur {
            if p.lo.v > q.lo.v && p.lo.v < q.hi.v {
                next.push(Piece {
                    lo: q.lo.clone(),
                    hi: Bound {
                        closed: false,
                        ..p.lo.clone()
                    },
                });
                next.push(Piece {
                    lo: Bound {
                        closed: false,
                        ..p.lo.clone()
                    },
                    hi: q.hi.clone(),
                });
            } else if p.lo.v == q.lo.v && p.lo.v == q.hi.v {
            } else {
                let mut q = q;
                if p.lo.v == q.lo.v {
                    q.lo.closed = false;
                }
                if p.lo.v == q.hi.v {
                    q.hi.closed = false;
                }
                next.push(q);
            }
        }
        cur = next;
    }
    Some(cur)
}

/// Used by [`crate::equiv`]: the infinity constant.
pub fn is_inf(e: &Expr) -> bool {
    matches!(e, Expr::Const(Const::Inf))
}
