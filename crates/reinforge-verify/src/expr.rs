//! The expression tree that both gold and prediction are parsed into.
//!
//! The tree keeps the distinctions that matter for grading (decimal literal vs exact number,
//! tuple vs set vs bare list, interval ends, percent and degree markers) so that the equivalence
//! policies in [`crate::equiv`] can be explicit instead of being lost during parsing.

use crate::number::Rat;

/// Function name of a folded sum (`series.rs` folds `a_0 + a_1 + \cdots + a_k` into it).
pub const SERIES_ADD: &str = "__series_add";
/// Function name of a folded product.
pub const SERIES_MUL: &str = "__series_mul";
/// The running index of a folded series (bound; never a free variable).
pub const INDEX_VAR: &str = "__t";
/// Name prefix of an indexed family `a_i`.
pub const INDEXED: &str = "__ix:";

/// True for the function names of folded series.
pub fn is_series(name: &str) -> bool {
    name == SERIES_ADD || name == SERIES_MUL
}

/// Named constants.
#[derive(Clone, Debug, PartialEq)]
pub enum Const {
    /// π
    Pi,
    /// Euler's number e
    E,
    /// ∞ (only meaningful as an interval end)
    Inf,
}

/// Relation operators; `>`/`≥` are kept as written and flipped during comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RelOp {
    Eq,
    Lt,
    Le,
    Gt,
    Ge,
    Ne,
    Approx,
    In,
}

/// Set operators between set-valued operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetOp {
    Union,
    Intersect,
    Minus,
}

/// A parsed answer.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// Exact rational (integers, fractions of literals).
    Num(Rat),
    /// Decimal literal: exact value plus the number of digits after the point, used for the
    /// "decimal tolerance scaled to its digits" policy.
    Dec(Rat, u32),
    /// Variable (subscripts are folded into the name: `a_1`).
    Sym(String),
    /// Named constant.
    Const(Const),
    Add(Vec<Expr>),
    Mul(Vec<Expr>),
    Neg(Box<Expr>),
    Div(Box<Expr>, Box<Expr>),
    Pow(Box<Expr>, Box<Expr>),
    /// Function application: built-ins (`sin`, `sqrt`, `root`, `log`, `fact`, ...) and
    /// uninterpreted single-letter functions (`f(x)`).
    Func(String, Vec<Expr>),
    /// `a ± b` (`a` is 0 for a unary ±); expanded into a list before comparison.
    PlusMinus(Box<Expr>, Box<Expr>),
    /// `x%`
    Percent(Box<Expr>),
    /// `x°`
    Degree(Box<Expr>),
    /// `a:b`
    Ratio(Box<Expr>, Box<Expr>),
    /// Relation chain `e0 op0 e1 op1 e2 ...`
    Rel(Vec<Expr>, Vec<RelOp>),
    /// `( a, b, ... )`: ordered.
    Tuple(Vec<Expr>),
    /// `\{ a, b \}`: unordered.
    Set(Vec<Expr>),
    /// Bare list `a, b and c`: unordered (several answers).
    List(Vec<Expr>),
    /// Interval with closedness of the left and right ends.
    Interval(bool, Box<Expr>, Box<Expr>, bool),
    /// Set operation.
    SetOp(SetOp, Box<Expr>, Box<Expr>),
    /// `\{ x \mid cond \}`
    SetBuilder(Box<Expr>),
    /// Matrix rows.
    Matrix(Vec<Vec<Expr>>),
    /// Free text answer (normalised later).
    Text(String),
}

impl Expr {
    /// Boxed helper.
    pub fn bx(self) -> Box<Expr> {
        Box::new(self)
    }

    /// Collects the free variable names.
    pub fn vars(&self, out: &mut Vec<String>) {
        match self {
            Expr::Sym(s) if s == INDEX_VAR => {}
            Expr::Sym(s) => {
                if !out.contains(s) {
                    out.push(s.clone())
                }
            }
            _ => self.for_children(|c| c.vars(out)),
        }
    }

    /// Calls `f` on every direct child.
    pub fn for_children(&self, mut f: impl FnMut(&Expr)) {
        match self {
            Expr::Num(_) | Expr::Dec(..) | Expr::Sym(_) | Expr::Const(_) | Expr::Text(_) => {}
            Expr::Add(v)
            | Expr::Mul(v)
            | Expr::Func(_, v)
            | Expr::Tuple(v)
            | Expr::Set(v)
            | Expr::List(v)
            | Expr::Rel(v, _) => v.iter().for_each(f),
            Expr::Neg(a) | Expr::Percent(a) | Expr::Degree(a) | Expr::SetBuilder(a) => f(a),
            Expr::Div(a, b)
            | Expr::Pow(a, b)
            | Expr::PlusMinus(a, b)
            | Expr::Ratio(a, b)
            | Expr::Interval(_, a, b, _)
            | Expr::SetOp(_, a, b) => {
                f(a);
                f(b)
            }
            Expr::Matrix(rows) => rows.iter().flatten().for_each(f),
        }
    }

    /// Rebuilds the node with `f` applied to every direct child.
    pub fn map_children(&self, f: &mut dyn FnMut(&Expr) -> Expr) -> Expr {
        let b = |f: &mut dyn FnMut(&Expr) -> Expr, e: &Expr| Box::new(f(e));
        match self {
            Expr::Num(_) | Expr::Dec(..) | Expr::Sym(_) | Expr::Const(_) | Expr::Text(_) => {
                self.clone()
            }
            Expr::Add(v) => Expr::Add(v.iter().map(&mut *f).collect()),
            Expr::Mul(v) => Expr::Mul(v.iter().map(&mut *f).collect()),
            Expr::Func(n, v) => Expr::Func(n.clone(), v.iter().map(&mut *f).collect()),
            Expr::Tuple(v) => Expr::Tuple(v.iter().map(&mut *f).collect()),
            Expr::Set(v) => Expr::Set(v.iter().map(&mut *f).collect()),
            Expr::List(v) => Expr::List(v.iter().map(&mut *f).collect()),
            Expr::Rel(v, ops) => Expr::Rel(v.iter().map(&mut *f).collect(), ops.clone()),
            Expr::Neg(a) => Expr::Neg(b(f, a)),
            Expr::Percent(a) => Expr::Percent(b(f, a)),
            Expr::Degree(a) => Expr::Degree(b(f, a)),
            Expr::SetBuilder(a) => Expr::SetBuilder(b(f, a)),
            Expr::Div(x, y) => Expr::Div(b(f, x), b(f, y)),
            Expr::Pow(x, y) => Expr::Pow(b(f, x), b(f, y)),
            Expr::PlusMinus(x, y) => Expr::PlusMinus(b(f, x), b(f, y)),
            Expr::Ratio(x, y) => Expr::Ratio(b(f, x), b(f, y)),
            Expr::Interval(l, x, y, r) => Expr::Interval(*l, b(f, x), b(f, y), *r),
            Expr::SetOp(o, x, y) => Expr::SetOp(*o, b(f, x), b(f, y)),
            Expr::Matrix(rows) => Expr::Matrix(
                rows.iter()
                    .map(|r| r.iter().map(&mut *f).collect())
                    .collect(),
            ),
        }
    }

    /// Whether any node satisfies `pred`.
    pub fn any(&self, pred: &dyn Fn(&Expr) -> bool) -> bool {
        if pred(self) {
            return true;
        }
        let mut found = false;
        self.for_children(|c| {
            if !found && c.any(pred) {
                found = true
            }
        });
        found
    }

    /// Number of nodes (used to bound work).
    pub fn size(&self) -> usize {
        let mut n = 1;
        self.for_children(|c| n += c.size());
        n
    }

    /// True for collection-like nodes (answers with several parts).
    pub fn is_collection(&self) -> bool {
        matches!(
            self,
            Expr::Tuple(_) | Expr::Set(_) | Expr::List(_) | Expr::Matrix(_)
        )
    }

    /// Replaces every occurrence of variable `name` by `with`.
    pub fn subst(&self, name: &str, with: &Expr) -> Expr {
        match self {
            Expr::Sym(s) if s == name => with.clone(),
            _ => self.map_children(&mut |c| c.subst(name, with)),
        }
    }
}
