//! One top-level item of an answer: label prefixes (`Maximum: 2`), text-only items, trailing
//! qualifiers (`\\text{ for all } x`) and declared parameters (`\\text{ for some integer } t`).

use super::{tok_text, Parser, DECLARED_PARAM, R};
use crate::expr::Expr;
use crate::lexer::Tok;

fn is_qualifier(t: &Tok) -> bool {
    match t {
        Tok::Word(w) => {
            ["for", "where", "when", "with", "if"].contains(&w.to_ascii_lowercase().as_str())
        }
        Tok::Text(s) => {
            let l = s.trim().to_ascii_lowercase();
            ["for", "where", "when", "with", "if", "is "]
                .iter()
                .any(|q| l.starts_with(q))
        }
        _ => false,
    }
}

/// Parses one top-level item. Returns `None` for an item with nothing in it.
pub(super) fn parse_item(mut toks: Vec<Tok>) -> R<Option<Expr>> {
    // Label prefix "Maximum: 2", "Sequence 1: ..."
    if toks.len() > 2 {
        if let Tok::Word(_) = toks[0] {
            let colon = if toks[1] == Tok::Sym(':') {
                Some(1)
            } else if matches!(toks[1], Tok::Num(..)) && toks.get(2) == Some(&Tok::Sym(':')) {
                Some(2)
            } else {
                None
            };
            if let Some(k) = colon {
                toks.drain(..=k);
            }
        }
    }
    let has_math = toks.iter().any(|t| {
        !matches!(
            t,
            Tok::Word(_) | Tok::Text(_) | Tok::Sym('.') | Tok::Sym('?')
        )
    });
    if !has_math {
        if toks.is_empty() {
            return Ok(None);
        }
        let s: Vec<String> = toks.iter().map(tok_text).collect();
        return Ok(Some(Expr::Text(s.join(" "))));
    }
    // qualifiers after the math: "x = 1 \text{ for all } x"
    let first_math = toks
        .iter()
        .position(|t| !matches!(t, Tok::Word(_) | Tok::Text(_)))
        .unwrap_or(0);
    let mut declared = None;
    if let Some(q) = toks.iter().skip(first_math + 1).position(is_qualifier) {
        let at = first_math + 1 + q;
        // "\\text{ for some integer } t": t is a declared (existential) parameter
        if let (Some(Tok::Text(s)), Some(Tok::Ident(v))) = (toks.get(at), toks.get(at + 1)) {
            let l = s.to_ascii_lowercase();
            if l.contains("some") || l.contains("integer") || l.contains("arbitrary") {
                declared = Some(v.to_string());
            }
        }
        toks.truncate(at);
    }
    // trailing unit annotations
    while matches!(toks.last(), Some(Tok::Text(_)) | Some(Tok::Sym('.'))) {
        toks.pop();
    }
    let mut p = Parser::new(toks);
    let e = p.rel()?;
    p.skip_units();
    if p.i < p.t.len() {
        return Err(format!("unexpected trailing input at token {}", p.i));
    }
    Ok(Some(match declared {
        Some(v) => e.subst(&v, &Expr::Sym(DECLARED_PARAM.into())),
        None => e,
    }))
}
