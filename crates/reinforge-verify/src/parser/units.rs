//! Unit annotations inside products (`3\text{ cm}^2`, `5 meters`): skipped, so the number is
//! compared; the verifier's unit policy decides what units mean.

use super::{is_sep_word, Parser, BUILTIN};
use crate::lexer::Tok;

impl Parser {
    /// Skips unit annotations (`\text{ cm}^2`, plain unit words) inside a product.
    pub(super) fn skip_units(&mut self) {
        loop {
            match self.peek() {
                Some(Tok::Text(_)) if !self.peek().is_some_and(is_sep_word) => {
                    self.i += 1;
                    if self.is_sym('^') {
                        self.i += 1;
                        self.skip_group();
                    }
                }
                Some(Tok::Word(w))
                    if !is_sep_word(&Tok::Word(w.clone()))
                        && !BUILTIN.contains(&w.as_str())
                        && !matches!(w.as_str(), "pi" | "infty" | "sqrt")
                        && !matches!(
                            self.peek_at(1),
                            Some(Tok::Sym('=')) | Some(Tok::Sym('(')) | Some(Tok::Sym('_'))
                        ) =>
                {
                    self.i += 1;
                    if self.is_sym('^') {
                        self.i += 1;
                        self.skip_group();
                    }
                }
                _ => return,
            }
        }
    }

    pub(super) fn skip_group(&mut self) {
        if self.eat_sym('{') {
            let mut d = 1;
            while let Some(t) = self.peek().cloned() {
                self.i += 1;
                match t {
                    Tok::Sym('{') => d += 1,
                    Tok::Sym('}') => {
                        d -= 1;
                        if d == 0 {
                            return;
                        }
                    }
                    _ => {}
                }
            }
        } else if self.peek().is_some() {
            self.i += 1;
        }
    }
}
