//! Tokeniser for LaTeX and plain-text math.
//!
//! Works on the output of [`crate::normalize::canonical`]. Text commands (`\text`, `\mbox`,
//! `\textbf`, `\mathrm` of a word, ...) become [`Tok::Text`]; plain words of several letters
//! become [`Tok::Word`]; single letters are variables. Numbers keep their written decimal digits.

/// One token.
#[derive(Clone, Debug, PartialEq)]
pub enum Tok {
    /// Number literal: integer digits and fractional digits (`None` when no point was written).
    Num(String, Option<String>),
    /// Single-letter variable.
    Ident(char),
    /// Multi-letter plain word.
    Word(String),
    /// `\name`
    Cmd(String),
    /// Contents of a text command.
    Text(String),
    /// Punctuation / operator character.
    Sym(char),
    /// `\{`
    LSet,
    /// `\}`
    RSet,
    /// `\\` row separator
    RowSep,
}

/// Commands whose argument is text.
const TEXT_CMDS: &[&str] = &[
    "text",
    "textbf",
    "textit",
    "textrm",
    "textnormal",
    "mbox",
    "textsf",
    "texttt",
    "hbox",
    "textup",
    "emph",
];
/// Commands that are dropped (their braced argument is kept as a group).
const STYLE_CMDS: &[&str] = &[
    "mathbf",
    "boldsymbol",
    "mathit",
    "mathcal",
    "vec",
    "overline",
    "bar",
    "hat",
    "mathsf",
    "bm",
    "mathnormal",
    "widehat",
    "overrightarrow",
    "tilde",
    "mathscr",
    "mathfrak",
    "underline",
    "boxed",
    "fbox",
    "unicode",
    "color",
    "operatorname",
];

/// Hard cap on tokens per answer (inputs beyond it are unparsable).
pub const MAX_TOKENS: usize = 4000;

/// Tokenises `s`; `None` when the input exceeds [`MAX_TOKENS`] or has unbalanced text braces.
pub fn lex(s: &str) -> Option<Vec<Tok>> {
    let c: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        if out.len() > MAX_TOKENS {
            return None;
        }
        let ch = c[i];
        if ch.is_whitespace() {
            i += 1;
            continue;
        }
        if ch.is_ascii_digit() || (ch == '.' && c.get(i + 1).is_some_and(|d| d.is_ascii_digit())) {
            let st = i;
            while i < c.len() && c[i].is_ascii_digit() {
                i += 1;
            }
            let int: String = c[st..i].iter().collect();
            let mut frac = None;
            if i < c.len() && c[i] == '.' && c.get(i + 1).is_some_and(|d| d.is_ascii_digit()) {
                i += 1;
                let fs = i;
                while i < c.len() && c[i].is_ascii_digit() {
                    i += 1;
                }
                frac = Some(c[fs..i].iter().collect());
            } else if i < c.len()
                && c[i] == '.'
                && !int.is_empty()
                && !c.get(i + 1).is_some_and(|d| d.is_alphabetic())
            {
                // "2." -- trailing point, no digits: plain integer.
                i += 1;
            }
            // ordinal suffix: 15th, 1st, 2nd, 3rd
            let rest: String = c[i..c.len().min(i + 3)].iter().collect();
            for suf in ["st", "nd", "rd", "th"] {
                if rest.starts_with(suf) && !c.get(i + 2).is_some_and(|x| x.is_ascii_alphabetic()) {
                    i += 2;
                    break;
                }
            }
            out.push(Tok::Num(
                if int.is_empty() { "0".into() } else { int },
                frac,
            ));
            continue;
        }
        if ch.is_alphabetic() {
            let st = i;
            while i < c.len()
                && c[i].is_alphabetic()
                && !(i > st && c[i - 1].is_lowercase() && c[i].is_uppercase())
            {
                i += 1;
            }
            let w: String = c[st..i].iter().collect();
            if w.chars().count() == 1 {
                out.push(Tok::Ident(ch));
            } else if is_word(&w) {
                out.push(Tok::Word(w));
            } else {
                // product of single-letter variables: "xy", "ab"
                out.extend(w.chars().map(Tok::Ident));
            }
            continue;
        }
        if ch == '\\' {
            let nx = c.get(i + 1).copied();
            match nx {
                Some('{') => {
                    out.push(Tok::LSet);
                    i += 2;
                    continue;
                }
                Some('}') => {
                    out.push(Tok::RSet);
                    i += 2;
                    continue;
                }
                Some('\\') => {
                    out.push(Tok::RowSep);
                    i += 2;
                    continue;
                }
                Some(a) if a.is_ascii_alphabetic() => {
                    let st = i + 1;
                    i += 1;
                    while i < c.len() && c[i].is_ascii_alphabetic() {
                        i += 1;
                    }
                    let name: String = c[st..i].iter().collect();
                    if TEXT_CMDS.contains(&name.as_str()) || name == "mathrm" {
                        let (body, ni) = brace_arg(&c, i)?;
                        i = ni;
                        let t = body.trim().to_string();
                        if name == "mathrm" && (t == "e" || t == "i" || t == "d") {
                            out.push(Tok::Ident(t.chars().next().unwrap()));
                        } else if name == "mathrm"
                            && t.chars().count() == 1
                            && !t.chars().all(|x| x.is_ascii_alphabetic())
                        {
                            out.extend(lex(&t)?);
                        } else if let Some(f) = FUNC_WORDS.iter().find(|f| **f == t) {
                            out.push(Tok::Cmd(f.to_string()));
                        } else if !t.is_empty() && t.chars().all(|x| x.is_ascii_digit() || x == '.')
                        {
                            out.extend(lex(&t)?);
                        } else {
                            out.push(Tok::Text(t));
                        }
                        continue;
                    }
                    if STYLE_CMDS.contains(&name.as_str()) {
                        if name == "operatorname" {
                            let (body, ni) = brace_arg(&c, i)?;
                            i = ni;
                            out.push(Tok::Cmd(body.trim().to_string()));
                        }
                        continue;
                    }
                    out.push(Tok::Cmd(name));
                    continue;
                }
                Some(_) => {
                    i += 2;
                    continue;
                }
                None => {
                    i += 1;
                    continue;
                }
            }
        }
        if "+-*/^_!=<>,;:|()[]{}'&%".contains(ch) {
            out.push(Tok::Sym(ch));
        } else if ch == '?' || ch == '"' || ch == '`' {
            out.push(Tok::Sym('?'));
        }
        // other characters (quotes, stray unicode) are ignored
        i += 1;
    }
    Some(out)
}

/// Function names that may appear as plain words or in `\text{}`.
pub const FUNC_WORDS: &[&str] = &[
    "sin", "cos", "tan", "sec", "csc", "cot", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh",
    "ln", "log", "exp", "sqrt", "lg",
];

/// Decides whether a run of letters is a word (text) rather than a product of variables.
fn is_word(w: &str) -> bool {
    if FUNC_WORDS.contains(&w) || w == "pi" || w == "infty" {
        return true;
    }
    let n = w.chars().count();
    if n >= 4 {
        return true;
    }
    const SHORT: &[&str] = &[
        "and", "or", "the", "day", "days", "is", "of", "for", "all", "are", "odd", "yes", "no",
        "not", "one", "two", "six", "ten", "cm", "km", "mm", "kg", "min", "sec", "hrs", "hr", "ft",
        "in", "am", "pm", "to", "at", "by", "be", "it", "if", "so", "as", "an", "on", "we", "any",
        "max", "mod", "gcd", "lcm", "det", "deg", "way", "yen", "won", "set", "its", "has", "cup",
        "big", "off", "can", "get", "use", "per",
    ];
    SHORT.contains(&w) || SHORT.contains(&w.to_ascii_lowercase().as_str())
}

/// Reads a `{...}` argument starting at `i` (after optional spaces); returns body and next index.
fn brace_arg(c: &[char], mut i: usize) -> Option<(String, usize)> {
    while i < c.len() && c[i] == ' ' {
        i += 1;
    }
    if i >= c.len() || c[i] != '{' {
        // single token argument
        if i < c.len() {
            return Some((c[i].to_string(), i + 1));
        }
        return Some((String::new(), i));
    }
    let mut depth = 0usize;
    let st = i + 1;
    while i < c.len() {
        match c[i] {
            '\\' => i += 1,
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some((c[st..i].iter().collect(), i + 1));
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_words_and_text() {
        let t = lex("12.50 + xy \\text{ cm} Maximum").unwrap();
        assert_eq!(t[0], Tok::Num("12".into(), Some("50".into())));
        assert_eq!(t[2], Tok::Ident('x'));
        assert_eq!(t[3], Tok::Ident('y'));
        assert_eq!(t[4], Tok::Text("cm".into()));
        assert_eq!(t[5], Tok::Word("Maximum".into()));
    }

    #[test]
    fn ordinals_and_sets() {
        let t = lex("15th \\{1\\}").unwrap();
        assert_eq!(
            t,
            vec![
                Tok::Num("15".into(), None),
                Tok::LSet,
                Tok::Num("1".into(), None),
                Tok::RSet
            ]
        );
    }
}
