//! Sums and products written with an ellipsis: `a_0 + a_1 + \cdots + a_k`,
//! `(v - a_1)(v - a_2) \cdots (v - a_n)`, `1^2 + 2^2 + \ldots + n^2`.
//!
//! The parser reads `\cdots`/`\ldots`/`\dots` as the placeholder symbol `...`. When a sum or
//! product holds exactly one placeholder, the terms written around it are aligned: they must
//! have the same shape and differ only at *index positions* (integers, symbols and linear
//! combinations of them), each of which moves by a constant integer step from term to term.
//! The run is then replaced by `Func(SERIES_ADD | SERIES_MUL, [template, count])`, where the
//! template is written in the index variable [`INDEX_VAR`] = 0, 1, ..., count. Terms that do not
//! fit the pattern (the `v` in `v(1 - a_1/v) \cdots`) stay ordinary terms; a run that cannot be
//! aligned is left exactly as written (so it only ever equals the same text).
//!
//! Subscripted symbols `a_{k-1}` become the indexed family `Func("__ix:a", [k - 1])`, evaluated
//! like an unknown function of the index, so `a_k + a_{k-1} + \ldots + a_0` and
//! `a_0 + a_1 + \cdots + a_k` evaluate to the same value for every integer `k`. Evaluation
//! ([`approx_series`], in `eval.rs` with the expression's other values) needs the count to be a non-negative integer and is bounded by
//! [`MAX_WORK`] node evaluations, so adversarial counts answer NaN instead of running long.

use crate::eval::{approx, Mode};
use crate::expr::Expr;

pub use crate::eval::{approx_series, MAX_WORK};
pub use crate::expr::{is_series, INDEXED, INDEX_VAR, SERIES_ADD, SERIES_MUL};

fn is_ellipsis(e: &Expr) -> bool {
    matches!(e, Expr::Sym(s) if s == "...")
}

/// True if some sum or product contains an ellipsis placeholder.
pub fn has_ellipsis(e: &Expr) -> bool {
    e.any(&|x| matches!(x, Expr::Add(v) | Expr::Mul(v) if v.iter().any(is_ellipsis)))
}

/// Integers, symbols and sums/products/negations of them: what an index position may hold.
fn index_like(e: &Expr) -> bool {
    match e {
        Expr::Num(_) => true,
        Expr::Sym(s) => !s.starts_with("__") && s != "...",
        Expr::Neg(a) => index_like(a),
        Expr::Add(v) | Expr::Mul(v) => !v.is_empty() && v.iter().all(index_like),
        _ => false,
    }
}

/// `a_{k-1}` → `Func("__ix:a", [k - 1])` when the base is a plain name and the subscript an
/// index expression; other symbols are kept.
fn index_symbol(name: &str) -> Option<Expr> {
    let (base, sub) = name.split_once('_')?;
    if base.is_empty() || !base.chars().all(|c| c.is_ascii_alphabetic()) || sub.is_empty() {
        return None;
    }
    if sub.len() > 40 {
        return None;
    }
    let toks = crate::lexer::lex(sub)?;
    let idx = crate::parser::Parser::new(toks).parse_top().ok()?;
    index_like(&idx).then(|| Expr::Func(format!("{INDEXED}{base}"), vec![idx]))
}

fn index_symbols(e: &Expr) -> Expr {
    match e {
        Expr::Sym(s) => index_symbol(s).unwrap_or_else(|| e.clone()),
        _ => e.map_children(&mut index_symbols),
    }
}

/// Rewrites subscripted symbols as indexed families and folds every ellipsis sum or product it
/// can align (bottom-up; a series inside another series' terms is left as written).
pub fn fold(e: &Expr) -> Expr {
    fold_series(&index_symbols(e))
}

fn fold_series(e: &Expr) -> Expr {
    let e = e.map_children(&mut fold_series);
    match &e {
        Expr::Add(v) => fold_run(v, true).unwrap_or(e),
        Expr::Mul(v) => fold_run(v, false).unwrap_or(e),
        _ => e,
    }
}

/// Parallel walk of `f` and `l`: the common template with holes `Sym("__h{j}")`, pushing the
/// (first, last) values of every hole. `None` if the shapes differ.
fn align(f: &Expr, l: &Expr, holes: &mut Vec<(Expr, Expr)>) -> Option<Expr> {
    if f == l {
        return Some(f.clone());
    }
    if index_like(f) && index_like(l) {
        // `n(n+1)` against `1 \cdot 2`: one hole per factor when the shapes agree
        if matches!((f, l), (Expr::Add(x), Expr::Add(y)) | (Expr::Mul(x), Expr::Mul(y)) if x.len() == y.len())
        {
            let mut inner = holes.clone();
            if let Some(t) = align_children(f, l, &mut inner) {
                *holes = inner;
                return Some(t);
            }
        }
        holes.push((f.clone(), l.clone()));
        return Some(Expr::Sym(format!("__h{}", holes.len() - 1)));
    }
    if std::mem::discriminant(f) != std::mem::discriminant(l) {
        return None;
    }
    let same_head = match (f, l) {
        (Expr::Func(a, x), Expr::Func(b, y)) => a == b && x.len() == y.len(),
        (Expr::Add(x), Expr::Add(y))
        | (Expr::Mul(x), Expr::Mul(y))
        | (Expr::Tuple(x), Expr::Tuple(y)) => x.len() == y.len(),
        (Expr::Neg(_), _)
        | (Expr::Div(..), _)
        | (Expr::Pow(..), _)
        | (Expr::Percent(_), _)
        | (Expr::Degree(_), _) => true,
        _ => false,
    };
    if !same_head {
        return None;
    }
    align_children(f, l, holes)
}

/// [`align`] applied child by child (same variant and arity).
fn align_children(f: &Expr, l: &Expr, holes: &mut Vec<(Expr, Expr)>) -> Option<Expr> {
    let mut lc = vec![];
    l.for_children(|c| lc.push(c.clone()));
    let mut k = 0;
    let mut failed = false;
    let t = f.map_children(&mut |c| {
        let r = if failed {
            None
        } else {
            align(c, &lc[k], holes)
        };
        k += 1;
        r.unwrap_or_else(|| {
            failed = true;
            Expr::Sym("__fail".into())
        })
    });
    (!failed).then_some(t)
}

/// Free variables of the hole values, for numeric checks.
fn check_points(exprs: &[&Expr]) -> Vec<Vec<(String, f64)>> {
    let mut vars = vec![];
    for e in exprs {
        e.vars(&mut vars);
    }
    [[1.37, 2.0], [2.71, 5.0], [-0.83, 3.0]]
        .iter()
        .enumerate()
        .map(|(k, base)| {
            vars.iter()
                .enumerate()
                .map(|(j, v)| (v.clone(), base[j % 2] + 0.61 * (j + k) as f64))
                .collect()
        })
        .collect()
}

/// Whether `e` evaluates to the same finite constant `c` at every check point.
fn is_const(e: &Expr, c: f64, pts: &[Vec<(String, f64)>]) -> bool {
    pts.iter().all(|env| {
        let x = approx(e, env, Mode::default());
        x.is_finite() && (x - c).abs() <= 1e-9 * c.abs().max(1.0)
    })
}

fn sub(a: &Expr, b: &Expr) -> Expr {
    Expr::Add(vec![a.clone(), Expr::Neg(b.clone().bx())])
}

fn int(k: i64) -> Expr {
    if k < 0 {
        Expr::Neg(Expr::Num(crate::number::small(-k)).bx())
    } else {
        Expr::Num(crate::number::small(k))
    }
}

/// Folds the run around the single ellipsis of a sum (`add`) or product, if it aligns.
fn fold_run(v: &[Expr], add: bool) -> Option<Expr> {
    let dots: Vec<usize> = (0..v.len()).filter(|&k| is_ellipsis(&v[k])).collect();
    let [e] = dots[..] else { return None };
    if e == 0 || e + 1 >= v.len() {
        return None;
    }
    let last = &v[e + 1];
    if last.any(&|x| matches!(x, Expr::Func(n, _) if is_series(n))) {
        return None;
    }
    // the run: the terms just before the ellipsis that share the last term's template
    let mut template = None;
    let mut start = e;
    let mut rows: Vec<Vec<(Expr, Expr)>> = vec![];
    while start > 0 {
        let mut holes = vec![];
        let Some(t) = align(&v[start - 1], last, &mut holes) else {
            break;
        };
        if holes.is_empty() || template.as_ref().is_some_and(|t0| *t0 != t) {
            break;
        }
        template = Some(t);
        rows.insert(0, holes);
        start -= 1;
    }
    let template = template?;
    let nh = rows[0].len();
    let lasts: Vec<&Expr> = rows[0].iter().map(|h| &h.1).collect();
    let firsts: Vec<&Expr> = rows[0].iter().map(|h| &h.0).collect();
    let mut all: Vec<&Expr> = rows.iter().flatten().map(|h| &h.0).collect();
    all.extend(lasts.iter().copied());
    let pts = check_points(&all);
    // steps: from the first two written terms, else +1 (-1 when the last is a smaller constant)
    let mut steps = vec![];
    for j in 0..nh {
        let d = if rows.len() >= 2 {
            let x = approx(&sub(&rows[1][j].0, firsts[j]), &pts[0], Mode::default());
            if !x.is_finite() || x != x.round() || x == 0.0 || x.abs() > 1e6 {
                return None;
            }
            x as i64
        } else {
            let x = approx(&sub(lasts[j], firsts[j]), &pts[0], Mode::default());
            if is_const(&sub(lasts[j], firsts[j]), x, &pts) && x < 0.0 {
                -1
            } else {
                1
            }
        };
        steps.push(d);
    }
    // every written term sits on the progression
    for (p, row) in rows.iter().enumerate() {
        for j in 0..nh {
            let off = sub(&row[j].0, firsts[j]);
            if !is_const(&off, (p as i64 * steps[j]) as f64, &pts) {
                return None;
            }
        }
    }
    // count of steps from the first to the last term, the same for every hole
    let count = Expr::Div(sub(lasts[0], firsts[0]).bx(), int(steps[0]).bx());
    for j in 1..nh {
        let at_end = Expr::Add(vec![
            firsts[j].clone(),
            Expr::Mul(vec![int(steps[j]), count.clone()]),
        ]);
        if !is_const(&sub(&at_end, lasts[j]), 0.0, &pts) {
            return None;
        }
    }
    let mut body = template;
    for j in 0..nh {
        let at = Expr::Add(vec![
            firsts[j].clone(),
            Expr::Mul(vec![int(steps[j]), Expr::Sym(INDEX_VAR.into())]),
        ]);
        body = body.subst(&format!("__h{j}"), &at);
    }
    let series = Expr::Func(
        (if add { SERIES_ADD } else { SERIES_MUL }).into(),
        vec![body, count],
    );
    let mut out: Vec<Expr> = v[..start].to_vec();
    out.push(series);
    out.extend(v[e + 2..].iter().cloned());
    Some(match (out.len(), add) {
        (1, _) => out.pop().unwrap(),
        (_, true) => Expr::Add(out),
        (_, false) => Expr::Mul(out),
    })
}

#[cfg(test)]
mod tests {
    use crate::{verify, Options};

    fn ok(g: &str, p: &str) -> bool {
        verify(g, p, &Options::default()).correct()
    }

    #[test]
    fn ellipsis_sums_fold_in_either_direction() {
        assert!(ok(
            "a_k + a_{k-1} + \\ldots + a_0",
            "a_0 + a_1 + a_2 + \\cdots + a_k"
        ));
        assert!(ok("1 + 2 + \\cdots + n", "\\frac{n(n+1)}{2}"));
        assert!(ok("1^2 + 2^2 + \\dots + n^2", "\\frac{n(n+1)(2n+1)}{6}"));
        assert!(ok("1 + 3 + 5 + \\cdots + (2n-1)", "n^2"));
        assert!(ok(
            "x + x^2 + \\cdots + x^n",
            "x + x^2 + x^3 + \\ldots + x^n"
        ));
        assert!(ok("1 + 2 + \\cdots + 100", "5050"));
        assert!(ok(
            "\\frac{1}{1\\cdot 2} + \\frac{1}{2 \\cdot 3} + \\cdots + \\frac{1}{n(n+1)}",
            "\\frac{n}{n+1}"
        ));
    }

    #[test]
    fn ellipsis_sums_reject_different_ranges_and_terms() {
        assert!(!ok(
            "a_0 + a_1 + \\cdots + a_k",
            "a_1 + a_2 + \\cdots + a_k"
        ));
        assert!(!ok(
            "a_0 + a_1 + \\cdots + a_k",
            "a_0 + a_1 + \\cdots + a_{k+1}"
        ));
        assert!(!ok("1 + 2 + \\cdots + n", "\\frac{n(n-1)}{2}"));
        assert!(!ok(
            "1 + 3 + 5 + \\cdots + (2n-1)",
            "1 + 2 + 3 + \\cdots + n"
        ));
        assert!(!ok("1^2 + 2^2 + \\dots + n^2", "1^3 + 2^3 + \\dots + n^3"));
        assert!(!ok("1 + 2 + \\cdots + 100", "5000"));
        // a written term off the progression is not folded, so it only equals itself
        assert!(!ok("1 + 2 + 4 + \\cdots + n", "\\frac{n(n+1)}{2}"));
    }

    #[test]
    fn ellipsis_products_with_extra_factors() {
        let g = "\\frac{(v - a_1)(v - a_2) \\cdots (v - a_n)}{v^{n-1}}";
        assert!(ok(
            g,
            "v \\left(1 - \\frac{a_1}{v}\\right)\\left(1 - \\frac{a_2}{v}\\right) \\cdots \\left(1 - \\frac{a_n}{v}\\right)"
        ));
        assert!(!ok(
            g,
            "v (1 - \\frac{a_1}{v})(1 - \\frac{a_2}{v}) \\cdots (1 - \\frac{a_n}{v})(1 - \\frac{a_n}{v})"
        ));
        assert!(!ok(g, "(v - a_1)(v - a_2) \\cdots (v - a_n)"));
        assert!(ok("1 \\cdot 2 \\cdots n", "n!"));
        assert!(!ok("1 \\cdot 2 \\cdots n", "(n+1)!"));
    }

    #[test]
    fn huge_counts_are_bounded() {
        let t = std::time::Instant::now();
        assert!(!ok("1 + 2 + \\cdots + 10^{12}", "5"));
        assert!(!ok(
            "1 + 2 + \\cdots + 999999999999999999999999999",
            "1 + 2 + \\cdots + 999999999999999999999999999 + 1"
        ));
        assert!(t.elapsed().as_millis() < 50);
    }
}
