//! Primary expressions with LaTeX commands: `\\frac`, `\\sqrt`, functions, brackets and
//! intervals, sets and set-builder notation, matrix environments.

use super::{tok_text, Parser, BUILTIN, GREEK, R};
use crate::expr::{Const, Expr};
use crate::lexer::Tok;
use crate::number;

impl Parser {
    pub(super) fn command(&mut self, c: &str) -> R<Expr> {
        match c {
            "frac" => {
                let n = self.arg()?;
                let d = self.arg()?;
                Ok(Expr::Div(n.bx(), d.bx()))
            }
            "sqrt" => {
                let mut idx = None;
                if self.eat_sym('[') {
                    let (mut v, _) = self.list_until(&[Tok::Sym(']')])?;
                    idx = v.pop();
                }
                let a = self.arg()?;
                Ok(match idx {
                    Some(n) => Expr::Func("root".into(), vec![a, n]),
                    None => Expr::Func("sqrt".into(), vec![a]),
                })
            }
            "binom" | "choose" => {
                let a = self.arg()?;
                let b = self.arg()?;
                Ok(Expr::Func("binom".into(), vec![a, b]))
            }
            "pi" => Ok(Expr::Const(Const::Pi)),
            "infty" | "infin" => Ok(Expr::Const(Const::Inf)),
            "emptyset" | "varnothing" => Ok(Expr::Set(vec![])),
            "ldots" => Ok(Expr::Sym("...".into())),
            "lfloor" | "lceil" => {
                let close = if c == "lfloor" { "rfloor" } else { "rceil" };
                let e = self.add()?;
                if !self.is_cmd(close) {
                    return Err("unclosed floor/ceil".into());
                }
                self.i += 1;
                Ok(Expr::Func(
                    if c == "lfloor" {
                        "floor".into()
                    } else {
                        "ceil".into()
                    },
                    vec![e],
                ))
            }
            "begin" => self.environment(),
            "mathbb" => {
                let a = self.arg()?;
                match a {
                    Expr::Sym(s) if s == "R" => Ok(Expr::Interval(
                        false,
                        Expr::Neg(Expr::Const(Const::Inf).bx()).bx(),
                        Expr::Const(Const::Inf).bx(),
                        false,
                    )),
                    Expr::Sym(s) => Ok(Expr::Sym(format!("\\mathbb{s}"))),
                    _ => Err("bad mathbb".into()),
                }
            }
            "exp" => Ok(Expr::Func("exp".into(), vec![self.fn_arg()?])),
            f if BUILTIN.contains(&f) => self.function(f),
            g if GREEK.contains(&g) => Ok(Expr::Sym(g.to_string())),
            "circ" => Err("stray degree sign".into()),
            other => {
                if other.len() > 40 {
                    return Err("command too long".into());
                }
                Ok(Expr::Sym(format!("\\{other}")))
            }
        }
    }

    /// Built-in function: optional `^{n}` power and `_{base}`, then the argument.
    pub(super) fn function(&mut self, f: &str) -> R<Expr> {
        let mut power = None;
        let mut base = None;
        for _ in 0..2 {
            if self.is_sym('^') {
                self.i += 1;
                power = Some(self.exponent()?);
            } else if self.is_sym('_') {
                self.i += 1;
                base = Some(self.arg()?);
            }
        }
        let mut name = match f {
            "lg" => "log10".to_string(),
            _ => f.to_string(),
        };
        // \sin^{-1} x is arcsin x
        if let Some(Expr::Neg(ref one)) = power {
            if **one == Expr::Num(number::small(1)) && ["sin", "cos", "tan"].contains(&f) {
                name = format!("arc{f}");
                power = None;
            }
        }
        let a = self.fn_arg()?;
        let mut e = match base {
            Some(b) if name == "log" => Expr::Func("logb".into(), vec![a, b]),
            _ => Expr::Func(name, vec![a]),
        };
        if let Some(p) = power {
            e = Expr::Pow(e.bx(), p.bx());
        }
        Ok(e)
    }

    /// Function argument: parenthesised group, or the following implicit product (`\sin 2x`).
    pub(super) fn fn_arg(&mut self) -> R<Expr> {
        self.enter()?;
        let r = if self.is_sym('(') || self.is_sym('{') {
            let e = self.postfix()?;
            if self.is_sym('^') {
                self.i += 1;
                let p = self.exponent()?;
                Ok(Expr::Pow(e.bx(), p.bx()))
            } else {
                Ok(e)
            }
        } else {
            let mut fs = vec![self.power()?];
            while self.starts_primary()
                && !matches!(self.peek(), Some(Tok::Cmd(c)) if BUILTIN.contains(&c.as_str()))
                && !matches!(self.peek(), Some(Tok::Word(w)) if BUILTIN.contains(&w.as_str()))
            {
                let before = self.i;
                fs.push(self.power()?);
                if self.i == before {
                    break;
                }
            }
            Ok(if fs.len() == 1 {
                fs.pop().unwrap()
            } else {
                Expr::Mul(fs)
            })
        };
        self.leave();
        r
    }

    pub(super) fn bracket(&mut self, open: char) -> R<Expr> {
        let (mut v, close) = self.list_until(&[Tok::Sym(')'), Tok::Sym(']')])?;
        let close = if close == Tok::Sym(')') { ')' } else { ']' };
        match (open, close, v.len()) {
            (_, _, 0) => Err("empty brackets".into()),
            ('(', ')', 1) | ('[', ']', 1) => Ok(v.pop().unwrap()),
            ('(', ')', _) => Ok(Expr::Tuple(v)),
            (_, _, 2) => {
                let b = v.pop().unwrap();
                let a = v.pop().unwrap();
                Ok(Expr::Interval(open == '[', a.bx(), b.bx(), close == ']'))
            }
            ('[', ']', _) => Ok(Expr::Tuple(v)),
            _ => Err("mismatched brackets".into()),
        }
    }

    pub(super) fn set_body(&mut self) -> R<Expr> {
        // set-builder if a '|' or ':' appears at depth 0 before the closing \}
        let mut d = 0i32;
        let mut bar = None;
        for k in self.i..self.t.len() {
            match &self.t[k] {
                Tok::Sym('(') | Tok::Sym('[') | Tok::Sym('{') | Tok::LSet => d += 1,
                Tok::Sym(')') | Tok::Sym(']') | Tok::Sym('}') => d -= 1,
                Tok::RSet => {
                    if d == 0 {
                        break;
                    }
                    d -= 1
                }
                Tok::Sym('|') | Tok::Sym(':') if d == 0 => {
                    bar = Some(k);
                    break;
                }
                _ => {}
            }
        }
        if let Some(k) = bar {
            self.i = k + 1;
            let (mut v, _) = self.list_until(&[Tok::RSet])?;
            let cond = if v.len() == 1 {
                v.pop().unwrap()
            } else {
                Expr::List(v)
            };
            return Ok(Expr::SetBuilder(cond.bx()));
        }
        let (v, _) = self.list_until(&[Tok::RSet])?;
        Ok(Expr::Set(v))
    }

    pub(super) fn environment(&mut self) -> R<Expr> {
        let name = self.env_name()?;
        if ![
            "pmatrix",
            "bmatrix",
            "matrix",
            "array",
            "vmatrix",
            "Bmatrix",
            "smallmatrix",
        ]
        .contains(&name.as_str())
        {
            return Err(format!("unsupported environment {name}"));
        }
        if name == "array" {
            self.skip_group();
        }
        let mut rows: Vec<Vec<Expr>> = vec![vec![]];
        loop {
            match self.peek() {
                None => return Err("unclosed environment".into()),
                Some(Tok::Cmd(c)) if c == "end" => {
                    self.i += 1;
                    self.env_name()?;
                    break;
                }
                Some(Tok::Sym('&')) => {
                    self.i += 1;
                }
                Some(Tok::RowSep) => {
                    self.i += 1;
                    rows.push(vec![]);
                }
                _ => {
                    let before = self.i;
                    let e = self.rel()?;
                    if self.i == before {
                        return Err("no progress".into());
                    }
                    rows.last_mut().unwrap().push(e);
                }
            }
        }
        rows.retain(|r| !r.is_empty());
        if rows.is_empty() || rows.iter().any(|r| r.len() != rows[0].len()) {
            return Err("ragged matrix".into());
        }
        Ok(Expr::Matrix(rows))
    }

    pub(super) fn env_name(&mut self) -> R<String> {
        self.expect_sym('{')?;
        let mut s = String::new();
        while let Some(t) = self.peek().cloned() {
            self.i += 1;
            if t == Tok::Sym('}') {
                return Ok(s);
            }
            s.push_str(&tok_text(&t));
        }
        Err("bad environment".into())
    }
}
