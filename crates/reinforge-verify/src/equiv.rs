//! Equivalence of two parsed answers.
//!
//! Order of checks (each a named, tested policy):
//! 1. text answers: normalised string equality, optional word containment ([`Options::text_containment`]);
//! 2. sets of reals (intervals, unions, one-variable inequalities, set-builder) in canonical form;
//! 3. labels: `x = 3` vs `3`, `(p, q) = (3, 2)` vs `(3, 2)`, function definitions compared up to
//!    the name of their bound argument (`f(z) = z` vs `f(x) = x`) -- Math-Verify's grader likewise
//!    compares the right-hand side when one side is an equation with a symbol on the left;
//! 4. collections: sets and bare lists without order, tuples and matrices with order;
//! 5. relations: `l - r` of both sides proportional (positive factor for inequalities);
//! 6. numbers: exact rationals first; rational arithmetic too large to evaluate exactly is
//!    undecided (not equal, [`Ctx::undecided`]) unless both sides are the same expression; a float
//!    that overflows is undecided too; otherwise evaluation at random points with relative
//!    tolerance; decimal tolerance only when one side is a decimal literal, scaled to its digits.

use crate::eval::{approx, exact, has_marker, too_large, Mode};
use crate::expr::{Const, Expr, RelOp};
use crate::number;
use crate::realset::{self, RealSet};
use crate::sample::{close, decimal_tol, is_zero, permutations, proportional, sample_eq};
use crate::series;
use crate::{DegreePolicy, Options, PercentPolicy};

pub use crate::budget::{Ctx, WORK_BUDGET};

/// Name given by the parser to a parameter declared in the answer ("for some integer t").
pub const DECLARED_PARAM: &str = crate::parser::DECLARED_PARAM;

/// Most variants a `±` expansion may produce.
const MAX_PM: usize = 16;

/// Prepares a parsed answer for comparison: strips trailing approximations, keeps the two
/// ends of an equality chain, expands `±` into alternatives.
pub fn prep(e: &Expr) -> Expr {
    match e {
        Expr::List(v) | Expr::Set(v) => {
            let mut out = vec![];
            for x in v {
                match prep(x) {
                    Expr::List(w) if !matches!(x, Expr::List(_)) => out.extend(w),
                    y => out.push(y),
                }
            }
            let r = if matches!(e, Expr::Set(_)) {
                Expr::Set(out)
            } else {
                Expr::List(out)
            };
            match r {
                Expr::List(mut v) if v.len() == 1 => v.pop().unwrap(),
                r => r,
            }
        }
        Expr::Rel(parts, ops) => {
            let mut parts = parts.clone();
            let mut ops = ops.clone();
            if let Some(k) = ops.iter().position(|o| *o == RelOp::Approx) {
                if k > 0 {
                    parts.truncate(k + 1);
                    ops.truncate(k);
                } else {
                    return prep(parts.last().unwrap());
                }
            }
            if ops.len() >= 2 && ops.iter().all(|o| *o == RelOp::Eq) {
                let last = parts.pop().unwrap();
                parts.truncate(1);
                parts.push(last);
                ops.truncate(1);
            }
            let parts: Vec<Expr> = parts.iter().map(prep_inner).collect();
            pm_list(Expr::Rel(parts, ops))
        }
        Expr::Add(v) | Expr::Mul(v)
            if v.len() >= 2 && v.iter().all(|x| matches!(x, Expr::Matrix(_))) =>
        {
            fold_matrix(e).unwrap_or_else(|| e.clone())
        }
        _ => pm_list(prep_inner(e)),
    }
}

/// Sums and products of explicit matrices, entrywise as expression trees.
fn fold_matrix(e: &Expr) -> Option<Expr> {
    let (v, is_add) = match e {
        Expr::Add(v) => (v, true),
        Expr::Mul(v) => (v, false),
        _ => return None,
    };
    let mats: Vec<&Vec<Vec<Expr>>> = v
        .iter()
        .map(|x| {
            if let Expr::Matrix(m) = x {
                Some(m)
            } else {
                None
            }
        })
        .collect::<Option<_>>()?;
    let mut acc = mats[0].clone();
    for m in &mats[1..] {
        if is_add {
            if m.len() != acc.len() || m[0].len() != acc[0].len() {
                return None;
            }
            acc = acc
                .iter()
                .zip(m.iter())
                .map(|(r, s)| {
                    r.iter()
                        .zip(s)
                        .map(|(a, b)| Expr::Add(vec![a.clone(), b.clone()]))
                        .collect()
                })
                .collect();
        } else {
            if acc[0].len() != m.len() || acc.len() * m[0].len() * m.len() > 4096 {
                return None;
            }
            acc = (0..acc.len())
                .map(|i| {
                    (0..m[0].len())
                        .map(|j| {
                            Expr::Add(
                                (0..m.len())
                                    .map(|k| Expr::Mul(vec![acc[i][k].clone(), m[k][j].clone()]))
                                    .collect(),
                            )
                        })
                        .collect()
                })
                .collect();
        }
    }
    Some(Expr::Matrix(acc))
}

fn prep_inner(e: &Expr) -> Expr {
    match e {
        Expr::Tuple(v) => Expr::Tuple(v.iter().map(prep_inner).collect()),
        Expr::Set(_) | Expr::List(_) => prep(e),
        _ => e.clone(),
    }
}

fn pm_list(e: Expr) -> Expr {
    if !e.any(&|x| matches!(x, Expr::PlusMinus(..))) {
        return e;
    }
    let mut out = vec![e];
    while let Some(pos) = out
        .iter()
        .position(|x| x.any(&|y| matches!(y, Expr::PlusMinus(..))))
    {
        if out.len() > MAX_PM {
            break;
        }
        let x = out.remove(pos);
        let mut done = false;
        let plus = replace_pm(&x, false, &mut done);
        let mut done2 = false;
        let minus = replace_pm(&x, true, &mut done2);
        out.push(plus);
        out.push(minus);
    }
    if out.len() == 1 {
        out.pop().unwrap()
    } else {
        Expr::List(out)
    }
}

fn replace_pm(e: &Expr, neg: bool, done: &mut bool) -> Expr {
    if *done {
        return e.clone();
    }
    if let Expr::PlusMinus(a, b) = e {
        *done = true;
        let b = if neg {
            Expr::Neg(b.clone())
        } else {
            (**b).clone()
        };
        return Expr::Add(vec![(**a).clone(), b]);
    }
    e.map_children(&mut |c| replace_pm(c, neg, done))
}

/// Top-level equivalence of a prepared gold and prediction.
pub fn equivalent(g: &Expr, p: &Expr, c: &Ctx) -> bool {
    if series::has_ellipsis(g) || series::has_ellipsis(p) {
        // both sides, so indexed symbols `a_k` read the same way on each
        return eq(&prep(&series::fold(g)), &prep(&series::fold(p)), c);
    }
    eq(&prep(g), &prep(p), c)
}

fn is_label(e: &Expr) -> bool {
    match e {
        Expr::Sym(_) => true,
        Expr::Func(n, args) => {
            n.len() == 1
                || n == "abs" && args.iter().all(is_label)
                || n.starts_with(series::INDEXED)
                    && args
                        .iter()
                        .all(|a| is_label(a) || matches!(a, Expr::Num(_)))
        }
        Expr::Mul(v) | Expr::Tuple(v) => v.iter().all(is_label),
        Expr::Div(a, b) | Expr::Ratio(a, b) => is_label(a) && is_label(b),
        Expr::Pow(a, b) => is_label(a) && matches!(**b, Expr::Num(_)),
        _ => false,
    }
}

/// `Some(rhs)` when `e` is `label = rhs` (or `x \in S`).
fn label_rhs(e: &Expr) -> Option<&Expr> {
    match e {
        Expr::Rel(p, ops)
            if ops.len() == 1
                && (ops[0] == RelOp::Eq || ops[0] == RelOp::In)
                && is_label(&p[0])
                && !is_label(&p[1]) =>
        {
            Some(&p[1])
        }
        Expr::Rel(p, ops)
            if ops.len() == 1
                && ops[0] == RelOp::Eq
                && is_label(&p[0])
                && is_label(&p[1])
                && matches!(p[0], Expr::Func(..) | Expr::Tuple(_)) =>
        {
            Some(&p[1])
        }
        _ => None,
    }
}

/// Bound argument names of a function definition `f(x, y) = ...`.
fn def_args(e: &Expr) -> Option<(&str, Vec<&str>)> {
    if let Expr::Rel(p, ops) = e {
        if ops.len() == 1 && ops[0] == RelOp::Eq {
            if let Expr::Func(n, args) = &p[0] {
                let names: Option<Vec<&str>> = args
                    .iter()
                    .map(|a| {
                        if let Expr::Sym(s) = a {
                            Some(s.as_str())
                        } else {
                            None
                        }
                    })
                    .collect();
                return names.map(|v| (n.as_str(), v));
            }
        }
    }
    None
}

fn eq(g: &Expr, p: &Expr, c: &Ctx) -> bool {
    if !c.tick(1) {
        return false;
    }
    if g == p {
        return true;
    }
    if matches!(g, Expr::Text(_)) || matches!(p, Expr::Text(_)) {
        return text_eq(g, p, c);
    }
    if realset::is_setlike(g) || realset::is_setlike(p) {
        if let (Some(a), Some(b)) = (realset::to_set(g, true), realset::to_set(p, true)) {
            return set_eq(&a, &b, c);
        }
    }
    // function definitions: rename the bound arguments of the prediction
    if let (Some((gn, ga)), Some((pn, pa))) = (def_args(g), def_args(p)) {
        if gn == pn && ga.len() == pa.len() {
            if let (Expr::Rel(gp, _), Expr::Rel(pp, _)) = (g, p) {
                let mut r = pp[1].clone();
                let tmp: Vec<String> = (0..pa.len()).map(|k| format!("__arg{k}")).collect();
                for (k, a) in pa.iter().enumerate() {
                    r = r.subst(a, &Expr::Sym(tmp[k].clone()));
                }
                for (k, a) in ga.iter().enumerate() {
                    r = r.subst(&tmp[k], &Expr::Sym(a.to_string()));
                }
                return eq(&gp[1], &r, c);
            }
        }
    }
    match (label_rhs(g), label_rhs(p)) {
        (Some(a), Some(b)) => return eq(a, b, c),
        (Some(a), None) if !matches!(p, Expr::Rel(..)) && eq(a, p, c) => return true,
        (None, Some(b)) if !matches!(g, Expr::Rel(..)) && eq(g, b, c) => return true,
        _ => {}
    }
    match (g, p) {
        (Expr::List(a) | Expr::Set(a), Expr::List(b) | Expr::Set(b)) => {
            return multiset_eq(a, b, c)
        }
        (Expr::Tuple(a), Expr::Tuple(b)) => return ordered_eq(a, b, c),
        (Expr::Tuple(a), Expr::List(b) | Expr::Set(b))
        | (Expr::List(a) | Expr::Set(a), Expr::Tuple(b)) => return ordered_eq(a, b, c),
        (Expr::Matrix(a), Expr::Matrix(b)) => {
            return a.len() == b.len() && a.iter().zip(b).all(|(x, y)| ordered_eq(x, y, c));
        }
        (Expr::Matrix(m), Expr::Tuple(t)) | (Expr::Tuple(t), Expr::Matrix(m)) => {
            if m.len() == 1 || m.iter().all(|r| r.len() == 1) {
                let flat: Vec<Expr> = m.iter().flatten().cloned().collect();
                return ordered_eq(&flat, t, c);
            }
            return false;
        }
        _ => {}
    }
    if ordering_eq(g, p, c) {
        return true;
    }
    match (g, p) {
        (Expr::List(v) | Expr::Set(v) | Expr::Tuple(v), x)
        | (x, Expr::List(v) | Expr::Set(v) | Expr::Tuple(v)) => {
            return v.len() == 1 && !x.is_collection() && eq_pair(g, p, &v[0], x, c);
        }
        (Expr::Matrix(_), _) | (_, Expr::Matrix(_)) => return false,
        _ => {}
    }
    match (g, p) {
        (Expr::Rel(..), Expr::Rel(..)) => rel_eq(g, p, c),
        (Expr::Rel(..), s) => rel_scalar(g, s, c),
        (s, Expr::Rel(pp, ops)) => {
            // a computed chain in the prediction, `\frac12 \$ = \frac{10}{9}`: its value is the right side
            let mut lv = vec![];
            pp[0].vars(&mut lv);
            if ops.len() == 1 && ops[0] == RelOp::Eq && lv.is_empty() && scalar_eq(s, &pp[1], c) {
                return true;
            }
            rel_scalar(p, s, c)
        }
        _ => scalar_eq(g, p, c),
    }
}

/// Policy "orderings": a strict chain of at least three items (`b < a < d < c`, or all `>`)
/// equals the same items listed in the chain's order (`b, a, d, c`). The items must be distinct
/// bare symbols or all constants, so a range such as `1 < x < 3` is never read as an ordering.
fn ordering_eq(g: &Expr, p: &Expr, c: &Ctx) -> bool {
    let (parts, ops, list) = match (g, p) {
        (Expr::Rel(parts, ops), Expr::List(l)) | (Expr::List(l), Expr::Rel(parts, ops)) => {
            (parts, ops, l)
        }
        _ => return false,
    };
    let strict = ops.iter().all(|o| *o == RelOp::Lt) || ops.iter().all(|o| *o == RelOp::Gt);
    if !strict || parts.len() < 3 || parts.len() != list.len() {
        return false;
    }
    let names: Vec<&str> = parts
        .iter()
        .filter_map(|x| match x {
            Expr::Sym(s) => Some(s.as_str()),
            _ => None,
        })
        .collect();
    let distinct_syms =
        names.len() == parts.len() && (0..names.len()).all(|i| !names[..i].contains(&names[i]));
    let consts = parts.iter().all(|x| {
        let mut v = vec![];
        x.vars(&mut v);
        v.is_empty()
    });
    (distinct_syms || consts) && ordered_eq(parts, list, c)
}

fn eq_pair(g: &Expr, _p: &Expr, inner: &Expr, other: &Expr, c: &Ctx) -> bool {
    if g.is_collection() {
        eq(inner, other, c)
    } else {
        eq(other, inner, c)
    }
}

fn ordered_eq(a: &[Expr], b: &[Expr], c: &Ctx) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| eq(x, y, c))
}

/// Set semantics: every element of each side equals some element of the other (repeats
/// carry no extra answers, so they neither help nor hurt).
fn multiset_eq(a: &[Expr], b: &[Expr], c: &Ctx) -> bool {
    if a.is_empty() || b.is_empty() {
        return a.is_empty() && b.is_empty();
    }
    if a.len() > 4 * b.len() || b.len() > 4 * a.len() {
        return false;
    }
    let mut hit_b = vec![false; b.len()];
    for x in a {
        let mut found = false;
        for (k, y) in b.iter().enumerate() {
            if eq(x, y, c) {
                hit_b[k] = true;
                found = true;
            }
        }
        if !found {
            return false;
        }
    }
    hit_b.iter().all(|h| *h)
}

fn set_eq(a: &RealSet, b: &RealSet, c: &Ctx) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let bound_eq = |x: &realset::Bound, y: &realset::Bound| -> bool {
        if x.v.is_infinite() || y.v.is_infinite() {
            return x.v == y.v;
        }
        if x.closed != y.closed {
            return false;
        }
        match (&x.expr, &y.expr) {
            (Some(e1), Some(e2)) => scalar_eq(e1, e2, c),
            _ => close(x.v, y.v, None, c.opts.float_rounding),
        }
    };
    a.iter()
        .zip(b)
        .all(|(x, y)| bound_eq(&x.lo, &y.lo) && bound_eq(&x.hi, &y.hi))
}

fn flip(parts: &[Expr], ops: &[RelOp]) -> (Vec<Expr>, Vec<RelOp>) {
    if ops.iter().all(|o| matches!(o, RelOp::Gt | RelOp::Ge)) {
        let p: Vec<Expr> = parts.iter().rev().cloned().collect();
        let o: Vec<RelOp> = ops
            .iter()
            .rev()
            .map(|o| {
                if *o == RelOp::Gt {
                    RelOp::Lt
                } else {
                    RelOp::Le
                }
            })
            .collect();
        (p, o)
    } else {
        (parts.to_vec(), ops.to_vec())
    }
}

fn rel_eq(g: &Expr, p: &Expr, c: &Ctx) -> bool {
    let (Expr::Rel(gp, go), Expr::Rel(pp, po)) = (g, p) else {
        return false;
    };
    let (gp, go) = flip(gp, go);
    let (pp, po) = flip(pp, po);
    if go != po {
        return false;
    }
    if ordered_eq(&gp, &pp, c) {
        return true;
    }
    if go.len() != 1 {
        return false;
    }
    let d = |l: &Expr, r: &Expr| Expr::Add(vec![l.clone(), Expr::Neg(r.clone().bx())]);
    match go[0] {
        RelOp::Eq | RelOp::Ne => proportional(&d(&gp[0], &gp[1]), &d(&pp[0], &pp[1]), false, c),
        RelOp::Lt | RelOp::Le => proportional(&d(&gp[1], &gp[0]), &d(&pp[1], &pp[0]), true, c),
        _ => false,
    }
}

fn rel_scalar(rel: &Expr, s: &Expr, c: &Ctx) -> bool {
    let Expr::Rel(parts, ops) = rel else {
        return false;
    };
    if ops.len() != 1 || ops[0] != RelOp::Eq || s.is_collection() {
        return false;
    }
    let (l, r) = (&parts[0], &parts[1]);
    // an identity (both sides equal) may be answered by its value
    if scalar_eq(l, r, c) {
        return eq(r, s, c);
    }
    // implicit equation: the prediction solves it for a variable it does not contain
    let mut rv = vec![];
    rel.vars(&mut rv);
    let mut sv = vec![];
    s.vars(&mut sv);
    for v in rv.iter().filter(|v| !sv.contains(v)) {
        let diff = Expr::Add(vec![l.subst(v, s), Expr::Neg(r.subst(v, s).bx())]);
        if is_zero(&diff, c) {
            return true;
        }
    }
    false
}

fn text_words(s: &str) -> Vec<String> {
    let l = s.to_lowercase().replace("\\text", " ");
    // named policy: "infinitely many" / "infinite" name the value infinity
    if [
        "infinitely many",
        "infinite",
        "infinity",
        "infinitely many solutions",
    ]
    .contains(&l.trim())
    {
        return vec!["infinity".into()];
    }
    l.split(|ch: char| !ch.is_alphanumeric())
        .filter(|w| !w.is_empty() && !["the", "a", "an", "and", "or", "is", "text"].contains(w))
        .map(|w| {
            w.strip_suffix('s')
                .filter(|x| x.len() > 2)
                .unwrap_or(w)
                .to_string()
        })
        .collect()
}

fn as_text(e: &Expr) -> Option<String> {
    Some(match e {
        Expr::Text(s) | Expr::Sym(s) => s.clone(),
        Expr::Const(Const::E) => "e".into(),
        Expr::Const(Const::Pi) => "pi".into(),
        Expr::Const(Const::Inf) => "infinity".into(),
        Expr::Mul(v) => v.iter().map(as_text).collect::<Option<Vec<_>>>()?.join(""),
        Expr::Num(n) => n.to_string(),
        _ => return None,
    })
}

fn text_eq(g: &Expr, p: &Expr, c: &Ctx) -> bool {
    let (Some(a), Some(b)) = (as_text(g), as_text(p)) else {
        return false;
    };
    let (wa, wb) = (text_words(&a), text_words(&b));
    if wa.is_empty() || wb.is_empty() {
        return false;
    }
    if wa == wb {
        return true;
    }
    // Policy `text_containment`: a short prediction whose words all occur in a sentence-long gold.
    c.opts.text_containment
        && matches!(g, Expr::Text(_))
        && wa.len() >= 3
        && wb.len() <= 6
        && wb.iter().all(|w| wa.contains(w))
}

fn modes(a: &Expr, b: &Expr, o: &Options) -> Vec<Mode> {
    let (pa, da) = has_marker(a);
    let (pb, db) = has_marker(b);
    let pcts: &[bool] = if pa || pb {
        match o.percent {
            PercentPolicy::Either => &[true, false],
            PercentPolicy::Fraction => &[true],
        }
    } else {
        &[true]
    };
    let degs: &[bool] = if da || db {
        match o.degrees {
            DegreePolicy::Either => &[false, true],
            DegreePolicy::Radians => &[true],
            DegreePolicy::Number => &[false],
        }
    } else {
        &[false]
    };
    let mut out = vec![];
    for &p in pcts {
        for &d in degs {
            out.push(Mode {
                percent_fraction: p,
                degree_radians: d,
            });
        }
    }
    out
}

/// A non-finite float value of an expression that does not mention infinity: an overflow, so
/// the float comparison cannot decide.
fn overflowed(v: f64, e: &Expr) -> bool {
    v.is_infinite() && !e.any(&|x| matches!(x, Expr::Const(Const::Inf)))
}

/// Scalar equivalence under the percent/degree policies.
pub fn scalar_eq(a: &Expr, b: &Expr, c: &Ctx) -> bool {
    if !c.tick(1) {
        return false;
    }
    if a.is_collection() || b.is_collection() {
        return false;
    }
    modes(a, b, c.opts)
        .into_iter()
        .any(|m| scalar_eq_mode(a, b, m, c))
}

fn scalar_eq_mode(a: &Expr, b: &Expr, m: Mode, c: &Ctx) -> bool {
    let (ta, tb) = (decimal_tol(a, m), decimal_tol(b, m));
    let tol = match (ta, tb) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, y) => x.or(y),
    };
    let rounding = c.opts.float_rounding;
    // Truncation policy: a decimal literal may also be the other value cut (not rounded) to
    // its digits, e.g. 41.494 for 41.4949...
    let truncated = |x: f64, y: f64| -> bool {
        if rounding.is_some() || !c.opts.decimal_truncation {
            return false;
        }
        let (dec, other, t) = match (ta, tb) {
            (Some(t), None) => (x, y, t),
            (None, Some(t)) => (y, x, t),
            _ => return false,
        };
        dec.signum() == other.signum()
            && dec.abs() <= other.abs()
            && other.abs() - dec.abs() < 2.0 * t
    };
    if let (Some(x), Some(y)) = (exact(a, m), exact(b, m)) {
        if x == y {
            return true;
        }
        if tol.is_none() && rounding.is_none() {
            return false;
        }
        let (fx, fy) = (number::to_f64(&x), number::to_f64(&y));
        return close(fx, fy, tol, rounding) || truncated(fx, fy);
    }
    if too_large(a, m) || too_large(b, m) {
        // exact arithmetic refused the size; floating point would round the difference away
        c.mark_undecided();
        return a == b;
    }
    let mut va = vec![];
    a.vars(&mut va);
    let mut vb = vec![];
    b.vars(&mut vb);
    if va.is_empty() && vb.is_empty() {
        let (fx, fy) = (approx(a, &[], m), approx(b, &[], m));
        if overflowed(fx, a) || overflowed(fy, b) {
            c.mark_undecided();
            return false;
        }
        return close(fx, fy, tol, rounding)
            || (fx.is_finite() && fy.is_finite() && truncated(fx, fy));
    }
    va.sort();
    vb.sort();
    if va == vb {
        return sample_eq(a, b, &va, m, c);
    }
    // variable names differ: rename when allowed
    let only_a: Vec<&String> = va.iter().filter(|v| !vb.contains(v)).collect();
    let only_b: Vec<&String> = vb.iter().filter(|v| !va.contains(v)).collect();
    if only_a.len() != only_b.len() || only_a.len() > 3 {
        return false;
    }
    let param = |v: &&String| ["k", "n", "m", "t", "j", "l", "s", "C", "c"].contains(&v.as_str());
    // a parameter the prediction declares ("for some integer t") may stand for any one gold name
    let declared = |v: &[&String]| v.len() == 1 && v[0] == DECLARED_PARAM;
    if c.opts.strict
        && (!only_a.iter().all(param) || !only_b.iter().all(param))
        && !declared(&only_a)
        && !declared(&only_b)
    {
        return false;
    }
    for perm in permutations(only_b.len()) {
        let mut bb = b.clone();
        for (k, &pi) in perm.iter().enumerate() {
            bb = bb.subst(only_b[pi], &Expr::Sym(format!("__r{k}")));
        }
        for (k, v) in only_a.iter().enumerate() {
            bb = bb.subst(&format!("__r{k}"), &Expr::Sym((*v).clone()));
        }
        if sample_eq(a, &bb, &va, m, c) {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use crate::{verify, Options};

    fn ok(g: &str, p: &str) -> bool {
        verify(g, p, &Options::default()).correct()
    }

    #[test]
    fn strict_chain_equals_items_listed_in_its_order() {
        assert!(ok("b < a < d < c", "b, a, d, c"));
        assert!(ok("c > d > a", "c, d, a"));
        assert!(ok("b, a, d, c", "b < a < d < c"));
        assert!(ok("\\sqrt{2} < 1.5 < 2", "\\sqrt{2}, 1.5, 2"));
    }

    #[test]
    fn chains_are_not_orderings_otherwise() {
        // another order, a non-strict chain, a range of a variable, a repeated item
        assert!(!ok("b < a < d < c", "a, b, c, d"));
        assert!(!ok("b < a < d < c", "c, d, a, b"));
        assert!(!ok("b \\le a \\le d", "b, a, d"));
        assert!(!ok("1 < x < 3", "1, x, 3"));
        assert!(!ok("a < b < a", "a, b, a"));
        assert!(!ok("a < b", "a, b"));
    }
}
