//! Text clean-up applied before lexing.
//!
//! Mirrors the kind of LaTeX normalisation Math-Verify performs through latex2sympy2_extended's
//! `normalize_latex` (basic LaTeX cleanup, units, malformed operators), but as a single linear pass
//! of string rewrites: no regex back-tracking, so the cost is linear in the input length.

/// Repairs escapes swallowed by Python/JSON string literals: a TAB, form feed, backspace or
/// vertical tab immediately followed by a letter was almost certainly `\t`, `\f`, `\b`, `\v` of a
/// LaTeX command (`\text`, `\frac`, `\beta`, `\vec`). Newlines are left alone: in real responses a
/// newline followed by a word is ordinary prose.
pub fn repair_escapes(s: &str) -> String {
    let mut t = collapse_doubled(&restore_controls(s));
    if t.contains("<sup>") {
        t = t.replace("<sup>", "^{").replace("</sup>", "}");
    }
    if t.chars().any(|c| ('\u{2460}'..='\u{2473}').contains(&c)) {
        // circled numbers ①..⑳ enumerate statements: "②③" lists statements 2 and 3
        t = t
            .chars()
            .map(|c| {
                if ('\u{2460}'..='\u{2473}').contains(&c) {
                    format!(" {} ,", c as u32 - 0x2460 + 1)
                } else {
                    c.to_string()
                }
            })
            .collect();
    }
    t
}

fn restore_controls(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    let chars: Vec<char> = s.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        let next_alpha = chars.get(i + 1).is_some_and(|n| n.is_ascii_alphabetic());
        match c {
            '\t' if next_alpha => out.push_str("\\t"),
            '\u{0c}' if next_alpha => out.push_str("\\f"),
            '\u{08}' if next_alpha => out.push_str("\\b"),
            '\u{0b}' if next_alpha => out.push_str("\\v"),
            _ => out.push(c),
        }
    }
    out
}

/// `\\frac` copied from a raw string means `\frac`; a row break `\\` followed by a command is
/// written with three backslashes and is left alone.
fn collapse_doubled(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next_alpha = chars.get(i + 1).is_some_and(|n| n.is_ascii_alphabetic());
        let _ = next_alpha;
        match c {
            '\\' if (i == 0 || chars[i - 1] != '\\')
                && chars.get(i + 1) == Some(&'\\')
                && chars.get(i + 2).is_some_and(|n| {
                    n.is_ascii_alphabetic()
                        || *n == '{'
                        || *n == '}'
                        || *n == '('
                        || *n == ')'
                        || *n == '['
                        || *n == ']'
                }) =>
            {
                // Doubled backslash copied from a raw string: `\\frac` means `\frac`.
                out.push('\\');
                i += 1;
            }
            _ => out.push(c),
        }
        i += 1;
    }
    out
}

/// Unicode and LaTeX spelling variants mapped to one canonical spelling.
const REPLACEMENTS: &[(&str, &str)] = &[
    ("\\dfrac", "\\frac"),
    ("\\tfrac", "\\frac"),
    ("\\cfrac", "\\frac"),
    ("\\dbinom", "\\binom"),
    ("\\tbinom", "\\binom"),
    ("\\leqslant", "\\le "),
    ("\\geqslant", "\\ge "),
    ("\\leq", "\\le "),
    ("\\geq", "\\ge "),
    ("\\neq", "\\ne "),
    ("\\lt", "<"),
    ("\\gt", ">"),
    ("\\textcirc", "\\circ"),
    ("\\degree", "^\\circ"),
    ("\\displaystyle", " "),
    ("\\left", ""),
    ("\\right", ""),
    ("\\bigg", ""),
    ("\\Bigg", ""),
    ("\\big", ""),
    ("\\Big", ""),
    ("\\middle", ""),
    ("\\mid", "|"),
    ("\\vert", "|"),
    ("\\lvert", "|"),
    ("\\rvert", "|"),
    ("\\quad", " , "),
    ("\\qquad", " , "),
    ("{, }", ""),
    ("\\%", "%"),
    ("\\$", " "),
    ("{,}", ""),
    ("\\dots", "\\ldots"),
    ("\\cdots", "\\ldots"),
    ("\\tan^{-1}", "\\arctan"),
    ("\\sin^{-1}", "\\arcsin"),
    ("\\cos^{-1}", "\\arccos"),
    ("<=", "\\le "),
    (">=", "\\ge "),
    ("!=", "\\ne "),
    ("−", "-"),
    ("–", "-"),
    ("×", "\\times "),
    ("·", "\\cdot "),
    ("÷", "\\div "),
    ("≤", "\\le "),
    ("≥", "\\ge "),
    ("⩽", "\\le "),
    ("⩾", "\\ge "),
    ("≠", "\\ne "),
    ("≈", "\\approx "),
    ("∞", "\\infty "),
    ("π", "\\pi "),
    ("∪", "\\cup "),
    ("∩", "\\cap "),
    ("∈", "\\in "),
    ("√", "\\sqrt "),
    ("°", "^\\circ "),
    ("＞", ">"),
    ("＜", "<"),
    ("，", ","),
    ("：", ":"),
    ("；", ";"),
    ("（", "("),
    ("）", ")"),
    ("∀", "\\forall "),
    ("<sup>", "^{"),
    ("</sup>", "}"),
    ("€", " "),
    ("£", " "),
    ("¥", " "),
    ("²", "^2"),
    ("³", "^3"),
];

/// Applies [`REPLACEMENTS`], drops `$` delimiters, and reads percent words.
pub fn canonical(s: &str) -> String {
    let mut t = s.to_string();
    for (a, b) in REPLACEMENTS {
        if t.contains(a) {
            t = replace_cmd(&t, a, b);
        }
    }
    t = t.replace('$', " ");
    t = drop_thin_space(&t);
    // "percent", "percentage", "pct" after a number mean %, as in Math-Verify's percent suffixes.
    for w in ["percentage", "percent", "pct"] {
        if t.contains(w) {
            t = replace_word(&t, w, "%");
        }
    }
    t
}

/// Replaces a LaTeX command only when it is not the prefix of a longer command
/// (`\le` must not rewrite `\left`).
fn replace_cmd(s: &str, pat: &str, rep: &str) -> String {
    let is_cmd =
        pat.starts_with('\\') && pat[1..].chars().all(|c| c.is_ascii_alphabetic()) && pat.len() > 1;
    if !is_cmd {
        return s.replace(pat, rep);
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(pos) = rest.find(pat) {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + pat.len()..];
        if after
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic())
        {
            out.push_str(pat);
        } else {
            out.push_str(rep);
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

/// Removes `\!` (negative thin space, used as `11,\! 111`) with the spaces after it, unless the
/// backslash is the second half of a `\\` row break.
fn drop_thin_space(s: &str) -> String {
    if !s.contains("\\!") {
        return s.to_string();
    }
    let c: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < c.len() {
        if c[i] == '\\' && c.get(i + 1) == Some(&'!') && (i == 0 || c[i - 1] != '\\') {
            i += 2;
            while i < c.len() && c[i] == ' ' {
                i += 1;
            }
            continue;
        }
        out.push(c[i]);
        i += 1;
    }
    out
}

fn replace_word(s: &str, w: &str, rep: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(pos) = rest.find(w) {
        let before_ok = rest[..pos]
            .chars()
            .last()
            .is_none_or(|c| !c.is_ascii_alphabetic() && c != '\\');
        let after = &rest[pos + w.len()..];
        let after_ok = after
            .chars()
            .next()
            .is_none_or(|c| !c.is_ascii_alphabetic());
        out.push_str(&rest[..pos]);
        out.push_str(if before_ok && after_ok { rep } else { w });
        rest = after;
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swallowed_escapes_are_restored() {
        assert_eq!(repair_escapes("$\text{13}$"), "$\\text{13}$");
        assert_eq!(repair_escapes("\\\\frac{1}{2}"), "\\frac{1}{2}");
        assert_eq!(repair_escapes("a\nb"), "a\nb");
    }

    #[test]
    fn commands_are_not_rewritten_inside_longer_ones() {
        assert_eq!(canonical("\\left(x\\le 2\\right)").trim(), "(x\\le 2)");
        assert_eq!(canonical("11,\\! 111").trim(), "11,111");
        assert_eq!(repair_escapes("1 \\\\\\frac{1}{2}"), "1 \\\\\\frac{1}{2}");
        assert!(canonical("28 percent").contains('%'));
        assert!(!canonical("percentile").contains('%'));
    }
}
