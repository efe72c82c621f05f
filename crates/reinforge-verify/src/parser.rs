//! Recursive-descent parser from tokens to [`Expr`].
//!
//! Grammar (loosest first): list (`,` `;` `and` `or`) > relation chain (`= < \le \in \approx`) >
//! ratio `a:b` > set operators (`\cup`) > sum (`+ - \pm`) > product (`* / \cdot`, implicit) >
//! unary minus > power > postfix (`! % °`) > primary. The shape follows latex2sympy's grammar
//! (functions without parentheses take the following implicit product, `\frac13` reads single
//! digits) but every recursion is depth-checked ([`MAX_DEPTH`]) and every loop consumes a token,
//! so parsing is linear and can never hang.

use crate::expr::{Const, Expr, RelOp, SetOp};
use crate::lexer::Tok;
use crate::number;

mod items;
mod primary;
mod units;
use items::parse_item;

/// Variable name given to a parameter the answer declares ("... for some integer t").
pub const DECLARED_PARAM: &str = "__param";

/// Deepest nesting accepted; deeper inputs are unparsable rather than a stack risk.
pub const MAX_DEPTH: usize = 48;

type R<T> = Result<T, String>;

/// Letters read as function names when directly followed by `(`.
const FN_LETTERS: &[char] = &[
    'f', 'g', 'h', 'F', 'G', 'H', 'P', 'Q', 'W', 'T', 'S', 'L', 'V',
];

const BUILTIN: &[&str] = &[
    "sin", "cos", "tan", "sec", "csc", "cot", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh",
    "ln", "log", "exp", "lg", "arccot", "arcsec", "arccsc",
];

const GREEK: &[&str] = &[
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "varepsilon",
    "zeta",
    "eta",
    "theta",
    "vartheta",
    "iota",
    "kappa",
    "lambda",
    "mu",
    "nu",
    "xi",
    "rho",
    "sigma",
    "tau",
    "upsilon",
    "phi",
    "varphi",
    "chi",
    "psi",
    "omega",
    "Gamma",
    "Delta",
    "Theta",
    "Lambda",
    "Xi",
    "Sigma",
    "Phi",
    "Psi",
    "Omega",
    "ell",
];

/// Parser state over an owned token vector (owned so `\frac13` can split a digit run).
pub struct Parser {
    t: Vec<Tok>,
    i: usize,
    depth: usize,
    abs: usize,
}

fn is_sep_word(t: &Tok) -> bool {
    match t {
        Tok::Word(w) => w.eq_ignore_ascii_case("and") || w.eq_ignore_ascii_case("or"),
        Tok::Text(s) => s
            .split(|c: char| !c.is_alphanumeric())
            .any(|w| w == "and" || w == "or"),
        _ => false,
    }
}

impl Parser {
    /// New parser over `t`.
    pub fn new(t: Vec<Tok>) -> Self {
        Parser {
            t,
            i: 0,
            depth: 0,
            abs: 0,
        }
    }

    fn peek(&self) -> Option<&Tok> {
        self.t.get(self.i)
    }
    fn peek_at(&self, k: usize) -> Option<&Tok> {
        self.t.get(self.i + k)
    }
    fn is_sym(&self, c: char) -> bool {
        self.peek() == Some(&Tok::Sym(c))
    }
    fn is_cmd(&self, n: &str) -> bool {
        matches!(self.peek(), Some(Tok::Cmd(c)) if c == n)
    }
    fn eat_sym(&mut self, c: char) -> bool {
        if self.is_sym(c) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn expect_sym(&mut self, c: char) -> R<()> {
        if self.eat_sym(c) {
            Ok(())
        } else {
            Err(format!("expected '{c}' at token {}", self.i))
        }
    }
    fn enter(&mut self) -> R<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            Err("nesting too deep".into())
        } else {
            Ok(())
        }
    }
    fn leave(&mut self) {
        self.depth -= 1;
    }

    /// Parses the whole token vector as an answer (possibly a list of several answers).
    pub fn parse_top(mut self) -> R<Expr> {
        let words = self
            .t
            .iter()
            .filter(|t| matches!(t, Tok::Word(_) | Tok::Text(_)))
            .count();
        let textish = self.t.iter().all(|t| {
            matches!(
                t,
                Tok::Word(_)
                    | Tok::Text(_)
                    | Tok::Ident(_)
                    | Tok::Sym('.')
                    | Tok::Sym(',')
                    | Tok::Sym('?')
                    | Tok::Sym('\'')
            )
        });
        if words >= 1 && textish && (words >= 2 || self.t.len() == 1) {
            let s: Vec<String> = self.t.iter().map(tok_text).collect();
            return Ok(Expr::Text(s.join(" ")));
        }
        let groups = self.split_top();
        let mut out: Vec<Expr> = Vec::new();
        let mut multi_groups = false;
        let ngroups = groups.len();
        for g in groups {
            let mut items = Vec::new();
            for it in g {
                if let Some(e) = parse_item(it)? {
                    items.push(e);
                }
            }
            if items.len() > 1 && ngroups > 1 {
                multi_groups = true;
            }
            match items.len() {
                0 => {}
                1 => out.push(items.pop().unwrap()),
                _ => out.push(Expr::List(items)),
            }
        }
        if out.is_empty() {
            return Err("empty answer".into());
        }
        if out.len() == 1 {
            return Ok(out.pop().unwrap());
        }
        if !multi_groups {
            // flatten groups of single items
            let mut flat = Vec::new();
            for e in out {
                match e {
                    Expr::List(v) => flat.extend(v),
                    e => flat.push(e),
                }
            }
            return Ok(Expr::List(flat));
        }
        Ok(Expr::List(out))
    }

    /// Splits tokens at bracket depth 0 into `;`-groups of `,`/and/or items.
    fn split_top(&mut self) -> Vec<Vec<Vec<Tok>>> {
        let mut groups = vec![vec![vec![]]];
        let mut depth = 0i32;
        let toks = std::mem::take(&mut self.t);
        // `\Rightarrow` / `\implies`: keep only what follows the last one.
        let start = toks
            .iter()
            .rposition(|t| matches!(t, Tok::Cmd(c) if c == "Rightarrow" || c == "implies" || c == "Longrightarrow" || c == "therefore"))
            .map(|p| p + 1)
            .unwrap_or(0);
        // a verb phrase "\\text{ is both a necessary ...}" ends the answer
        let end = toks
            .iter()
            .position(|t| matches!(t, Tok::Text(s) if s.trim_start().starts_with("is ")))
            .filter(|&p| p > start)
            .unwrap_or(toks.len());
        for t in toks.into_iter().take(end).skip(start) {
            match &t {
                Tok::Sym('(') | Tok::Sym('[') | Tok::Sym('{') | Tok::LSet => depth += 1,
                Tok::Sym(')') | Tok::Sym(']') | Tok::Sym('}') | Tok::RSet => depth -= 1,
                Tok::Cmd(c) if c == "begin" => depth += 1,
                Tok::Cmd(c) if c == "end" => depth -= 1,
                _ => {}
            }
            if depth <= 0 {
                if t == Tok::Sym(';') {
                    groups.push(vec![vec![]]);
                    continue;
                }
                if t == Tok::Sym(',') || is_sep_word(&t) {
                    groups.last_mut().unwrap().push(vec![]);
                    continue;
                }
            }
            groups.last_mut().unwrap().last_mut().unwrap().push(t);
        }
        groups
    }

    fn list_until(&mut self, closers: &[Tok]) -> R<(Vec<Expr>, Tok)> {
        self.enter()?;
        let mut items = Vec::new();
        loop {
            if let Some(t) = self.peek() {
                if closers.contains(t) {
                    let t = t.clone();
                    self.i += 1;
                    self.leave();
                    return Ok((items, t));
                }
            } else {
                return Err("unclosed bracket".into());
            }
            if self.eat_sym(',') || self.eat_sym(';') {
                continue;
            }
            if self.peek().is_some_and(is_sep_word) {
                self.i += 1;
                continue;
            }
            let before = self.i;
            items.push(self.rel()?);
            if self.i == before {
                return Err("no progress".into());
            }
        }
    }

    /// Relation chain.
    pub fn rel(&mut self) -> R<Expr> {
        self.enter()?;
        let first = self.ratio()?;
        let mut parts = vec![first];
        let mut ops = vec![];
        while let Some(op) = self.relop() {
            ops.push(op);
            parts.push(self.ratio()?);
        }
        self.leave();
        if ops.is_empty() {
            Ok(parts.pop().unwrap())
        } else {
            Ok(Expr::Rel(parts, ops))
        }
    }

    fn relop(&mut self) -> Option<RelOp> {
        let op = match self.peek()? {
            Tok::Sym('=') => RelOp::Eq,
            Tok::Sym('<') => {
                if self.peek_at(1) == Some(&Tok::Sym('=')) {
                    self.i += 1;
                    RelOp::Le
                } else {
                    RelOp::Lt
                }
            }
            Tok::Sym('>') => {
                if self.peek_at(1) == Some(&Tok::Sym('=')) {
                    self.i += 1;
                    RelOp::Ge
                } else {
                    RelOp::Gt
                }
            }
            Tok::Cmd(c) => match c.as_str() {
                "le" => RelOp::Le,
                "ge" => RelOp::Ge,
                "ne" => RelOp::Ne,
                "approx" | "simeq" | "sim" | "cong" => RelOp::Approx,
                "in" => RelOp::In,
                "equiv" => RelOp::Eq,
                _ => return None,
            },
            _ => return None,
        };
        self.i += 1;
        while self.eat_sym('=') {}
        Some(op)
    }

    fn ratio(&mut self) -> R<Expr> {
        self.setexpr()
    }

    fn setexpr(&mut self) -> R<Expr> {
        let mut a = self.add()?;
        loop {
            let op = match self.peek() {
                Some(Tok::Cmd(c)) if c == "cup" || c == "cupdot" => SetOp::Union,
                Some(Tok::Cmd(c)) if c == "cap" => SetOp::Intersect,
                Some(Tok::Cmd(c)) if c == "setminus" || c == "backslash" => SetOp::Minus,
                _ => break,
            };
            self.i += 1;
            let b = self.add()?;
            a = Expr::SetOp(op, a.bx(), b.bx());
        }
        Ok(a)
    }

    fn add(&mut self) -> R<Expr> {
        self.enter()?;
        let mut terms = vec![self.mul()?];
        loop {
            if self.eat_sym('+') {
                terms.push(self.mul()?);
            } else if self.eat_sym('-') {
                let b = self.mul()?;
                if terms.len() == 1 && is_setlike(&terms[0]) && is_setlike(&b) {
                    let a = terms.pop().unwrap();
                    terms.push(Expr::SetOp(SetOp::Minus, a.bx(), b.bx()));
                } else {
                    terms.push(Expr::Neg(b.bx()));
                }
            } else if self.is_cmd("pm") || self.is_cmd("mp") {
                let neg = self.is_cmd("mp");
                self.i += 1;
                let b = self.mul()?;
                let b = if neg { Expr::Neg(b.bx()) } else { b };
                let a = single_or(std::mem::take(&mut terms), Expr::Add);
                terms.push(Expr::PlusMinus(a.bx(), b.bx()));
            } else {
                break;
            }
        }
        self.leave();
        Ok(single_or(terms, Expr::Add))
    }

    fn starts_primary(&self) -> bool {
        match self.peek() {
            Some(Tok::Num(..)) | Some(Tok::Ident(_)) | Some(Tok::LSet) => true,
            Some(Tok::Sym(c)) => *c == '(' || *c == '{' || (*c == '|' && self.abs == 0),
            Some(Tok::Cmd(c)) => !matches!(
                c.as_str(),
                "le" | "ge"
                    | "ne"
                    | "approx"
                    | "in"
                    | "cup"
                    | "cap"
                    | "setminus"
                    | "pm"
                    | "mp"
                    | "cdot"
                    | "times"
                    | "div"
                    | "end"
                    | "rfloor"
                    | "rceil"
                    | "sim"
                    | "simeq"
                    | "cong"
                    | "equiv"
                    | "Rightarrow"
                    | "implies"
                    | "to"
                    | "rightarrow"
                    | "cupdot"
                    | "backslash"
            ),
            Some(Tok::Word(w)) => !(w.eq_ignore_ascii_case("and") || w.eq_ignore_ascii_case("or")),
            Some(Tok::Text(_)) => false,
            _ => false,
        }
    }

    fn mul(&mut self) -> R<Expr> {
        self.enter()?;
        let mut fs = vec![self.unary()?];
        loop {
            self.skip_units();
            if self.eat_sym('*') || self.is_cmd("cdot") || self.is_cmd("times") {
                if matches!(self.peek(), Some(Tok::Cmd(_))) {
                    self.i += 1;
                }
                fs.push(self.unary()?);
            } else if self.is_sym(':') && self.peek_at(1) != Some(&Tok::Sym('=')) {
                self.i += 1;
                let d = self.unary()?;
                let n = single_or(std::mem::take(&mut fs), Expr::Mul);
                fs.push(Expr::Ratio(n.bx(), d.bx()));
            } else if self.eat_sym('/') || self.is_cmd("div") {
                if self.is_cmd("div") {
                    self.i += 1;
                }
                let d = self.unary()?;
                let n = single_or(std::mem::take(&mut fs), Expr::Mul);
                fs.push(Expr::Div(n.bx(), d.bx()));
            } else if self.starts_primary() {
                let before = self.i;
                fs.push(self.power()?);
                if self.i == before {
                    break;
                }
            } else {
                break;
            }
        }
        self.leave();
        Ok(single_or(fs, Expr::Mul))
    }

    fn unary(&mut self) -> R<Expr> {
        self.enter()?;
        let r = if self.eat_sym('-') {
            Ok(Expr::Neg(self.unary()?.bx()))
        } else if self.eat_sym('+') {
            self.unary()
        } else if self.is_cmd("pm") || self.is_cmd("mp") {
            self.i += 1;
            Ok(Expr::PlusMinus(
                Expr::Num(number::small(0)).bx(),
                self.unary()?.bx(),
            ))
        } else {
            self.power()
        };
        self.leave();
        r
    }

    fn power(&mut self) -> R<Expr> {
        self.enter()?;
        let base = self.postfix()?;
        let r = if self.is_sym('^') {
            self.i += 1;
            if matches!(self.peek(), Some(Tok::Text(_)))
                || (self.is_sym('{')
                    && matches!(self.peek_at(1), Some(Tok::Text(_)))
                    && self.peek_at(2) == Some(&Tok::Sym('}')))
            {
                // ordinal or unit superscript: 12^{\mathrm{th}}, cm^{\text{2}}
                self.skip_group();
                Ok(base)
            } else if self.is_cmd("circ") {
                self.i += 1;
                self.postfix_ops(Expr::Degree(base.bx()))
            } else if self.is_sym('{')
                && self.peek_at(1) == Some(&Tok::Cmd("circ".into()))
                && self.peek_at(2) == Some(&Tok::Sym('}'))
            {
                self.i += 3;
                self.postfix_ops(Expr::Degree(base.bx()))
            } else {
                let e = self.exponent()?;
                self.postfix_ops(Expr::Pow(base.bx(), e.bx()))
            }
        } else {
            Ok(base)
        };
        self.leave();
        r
    }

    fn exponent(&mut self) -> R<Expr> {
        if self.eat_sym('-') {
            return Ok(Expr::Neg(self.exponent()?.bx()));
        }
        if self.eat_sym('{') {
            let (mut v, _) = self.list_until(&[Tok::Sym('}')])?;
            return if v.len() == 1 {
                Ok(v.pop().unwrap())
            } else {
                Err("bad exponent".into())
            };
        }
        if self.is_sym('(') {
            return self.primary();
        }
        self.power_operand()
    }

    fn power_operand(&mut self) -> R<Expr> {
        let e = self.primary()?;
        // x^n! style is rare; keep postfix for numbers only
        Ok(e)
    }

    fn postfix(&mut self) -> R<Expr> {
        let e = self.primary()?;
        self.postfix_ops(e)
    }

    fn postfix_ops(&mut self, mut e: Expr) -> R<Expr> {
        loop {
            if self.eat_sym('!') {
                e = Expr::Func("fact".into(), vec![e]);
            } else if self.eat_sym('%') {
                e = Expr::Percent(e.bx());
            } else if self.eat_sym('\'') {
                e = Expr::Func("prime".into(), vec![e]);
            } else if self.is_sym('_') {
                self.i += 1;
                let sub = self.subscript_text()?;
                e = match e {
                    Expr::Sym(s) => Expr::Sym(format!("{s}_{sub}")),
                    // base-n numerals like 204_5 keep their subscript as part of the value
                    Expr::Num(n) => Expr::Sym(format!("{n}_{sub}")),
                    other => other,
                };
            } else {
                return Ok(e);
            }
        }
    }

    fn subscript_text(&mut self) -> R<String> {
        let mut s = String::new();
        if self.eat_sym('{') {
            let mut d = 1;
            while let Some(t) = self.peek().cloned() {
                self.i += 1;
                match t {
                    Tok::Sym('{') => d += 1,
                    Tok::Sym('}') => {
                        d -= 1;
                        if d == 0 {
                            return Ok(s);
                        }
                    }
                    _ => {}
                }
                s.push_str(&tok_text(&t));
                if s.len() > 200 {
                    return Err("subscript too long".into());
                }
            }
            return Err("unclosed subscript".into());
        }
        match self.peek().cloned() {
            Some(Tok::Num(i, _)) => {
                // LaTeX takes one digit: a_12 is a_{1}2; keep common multi-digit reading.
                self.i += 1;
                s.push_str(&i);
            }
            Some(t) => {
                self.i += 1;
                s.push_str(&tok_text(&t));
            }
            None => return Err("dangling _".into()),
        }
        Ok(s)
    }

    /// `{...}` argument or a single token (single digit of a digit run, as TeX reads `\frac13`).
    fn arg(&mut self) -> R<Expr> {
        self.enter()?;
        let r = if self.eat_sym('{') {
            let (mut v, _) = self.list_until(&[Tok::Sym('}')])?;
            match v.len() {
                1 => Ok(v.pop().unwrap()),
                0 => Err("empty argument".into()),
                _ => Ok(Expr::List(v)),
            }
        } else if let Some(Tok::Num(int, None)) = self.peek().cloned() {
            if int.len() > 1 {
                let first = &int[..1];
                self.t[self.i] = Tok::Num(int[1..].to_string(), None);
                number::int(first)
                    .map(Expr::Num)
                    .ok_or_else(|| "bad number".into())
            } else {
                self.i += 1;
                number::int(&int)
                    .map(Expr::Num)
                    .ok_or_else(|| "bad number".into())
            }
        } else {
            self.primary()
        };
        self.leave();
        r
    }

    fn primary(&mut self) -> R<Expr> {
        self.enter()?;
        // leading annotations: "\text{only } x = 0"
        while matches!(self.peek(), Some(Tok::Text(_))) {
            self.i += 1;
        }
        let t = self
            .peek()
            .cloned()
            .ok_or_else(|| "unexpected end".to_string())?;
        self.i += 1;
        let r = match t {
            Tok::Num(int, frac) => self.number(int, frac),
            Tok::Ident(c) => self.ident(c),
            Tok::Word(w) => self.word(w),
            Tok::Cmd(c) => self.command(&c),
            Tok::LSet => self.set_body(),
            Tok::Sym('(') => self.bracket('('),
            Tok::Sym('[') => self.bracket('['),
            Tok::Sym('{') => {
                let (mut v, _) = self.list_until(&[Tok::Sym('}')])?;
                match v.len() {
                    0 => Ok(Expr::Set(vec![])),
                    1 => Ok(v.pop().unwrap()),
                    _ => Ok(Expr::Set(v)),
                }
            }
            Tok::Sym('|') => {
                self.abs += 1;
                let e = self.add();
                self.abs -= 1;
                let e = e?;
                self.expect_sym('|')?;
                Ok(Expr::Func("abs".into(), vec![e]))
            }
            Tok::Text(s) => Ok(Expr::Text(s)),
            other => Err(format!("unexpected token {other:?}")),
        };
        self.leave();
        r
    }

    fn number(&mut self, int: String, frac: Option<String>) -> R<Expr> {
        let v = match &frac {
            None => Expr::Num(number::int(&int).ok_or("number too long")?),
            Some(f) => {
                if f.len() > 300 {
                    return Err("number too long".into());
                }
                let all = number::int(&format!("{int}{f}")).ok_or("bad number")?;
                Expr::Dec(all / number::pow10(f.len() as u32), f.len() as u32)
            }
        };
        // mixed number: 2\frac{1}{3}
        if frac.is_none() && self.is_cmd("frac") {
            let save = self.i;
            self.i += 1;
            if let (Ok(Expr::Num(a)), Ok(Expr::Num(b))) = (self.arg(), self.arg()) {
                if let (Expr::Num(w), Some(q)) = (&v, number::div(&a, &b)) {
                    let neg_free = w >= &number::small(0);
                    if neg_free {
                        return Ok(Expr::Num(w + q));
                    }
                }
            }
            self.i = save;
        }
        Ok(v)
    }

    fn ident(&mut self, c: char) -> R<Expr> {
        if FN_LETTERS.contains(&c) && self.is_sym('(') {
            self.i += 1;
            let (args, _) = self.list_until(&[Tok::Sym(')')])?;
            return Ok(Expr::Func(c.to_string(), args));
        }
        if c == 'e' && !self.is_sym('_') {
            return Ok(Expr::Const(Const::E));
        }
        Ok(Expr::Sym(c.to_string()))
    }

    fn word(&mut self, w: String) -> R<Expr> {
        match w.as_str() {
            "pi" => Ok(Expr::Const(Const::Pi)),
            "infty" => Ok(Expr::Const(Const::Inf)),
            "sqrt" => Ok(Expr::Func("sqrt".into(), vec![self.fn_arg()?])),
            f if BUILTIN.contains(&f) => self.function(f),
            _ => {
                if self.is_sym('(') {
                    self.i += 1;
                    let (args, _) = self.list_until(&[Tok::Sym(')')])?;
                    return Ok(Expr::Func(w, args));
                }
                Ok(Expr::Sym(w))
            }
        }
    }
}

fn is_setlike(e: &Expr) -> bool {
    matches!(
        e,
        Expr::Set(_) | Expr::SetBuilder(_) | Expr::Interval(..) | Expr::SetOp(..)
    )
}

/// Plain-text rendering of a token (subscripts, environment names, text answers).
pub fn tok_text(t: &Tok) -> String {
    match t {
        Tok::Num(i, None) => i.clone(),
        Tok::Num(i, Some(f)) => format!("{i}.{f}"),
        Tok::Ident(c) => c.to_string(),
        Tok::Word(w) => w.clone(),
        Tok::Cmd(c) => c.clone(),
        Tok::Text(s) => s.clone(),
        Tok::Sym(c) => c.to_string(),
        Tok::LSet => "{".into(),
        Tok::RSet => "}".into(),
        Tok::RowSep => ";".into(),
    }
}

/// The only item of `items`, or all of them under `wrap` (a sum or product of one term is the
/// term itself).
fn single_or(mut items: Vec<Expr>, wrap: fn(Vec<Expr>) -> Expr) -> Expr {
    if items.len() == 1 {
        items.pop().expect("one item")
    } else {
        wrap(items)
    }
}
