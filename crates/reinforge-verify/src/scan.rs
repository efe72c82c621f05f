//! Where things lie in a response's text: math segments (`$...$`, `\(...\)`, `\[...\]`),
//! prose words and letters outside them, clause ends and top-level `=` signs.
//!
//! Positions only, no answer policy and no other module: [`crate::value`], [`crate::extract`],
//! [`crate::restated`] and [`crate::stated`] all read text with these, so they sit below them.

/// The math segment starting at `i` (after optional spaces), if any: (content, end).
pub(crate) fn segment_at(s: &str, i: usize) -> Option<(String, usize)> {
    segment_at_memo(s, i, &mut [usize::MAX; 4])
}

/// [`segment_at`], remembering in `none_from[k]` the offset from which the closer of the k-th
/// delimiter pair is known to be absent: a scan over many unclosed openers (`\(` without `\)`)
/// looks for each closer once, not once per opener.
fn segment_at_memo(s: &str, i: usize, none_from: &mut [usize; 4]) -> Option<(String, usize)> {
    let t = &s[i..];
    let off = t.len() - t.trim_start().len();
    let t = t.trim_start();
    let base = i + off;
    for (k, (open, close)) in [("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$")]
        .into_iter()
        .enumerate()
    {
        if let Some(r) = t.strip_prefix(open) {
            let r_at = base + open.len();
            if r_at >= none_from[k] {
                return None;
            }
            // an escaped dollar `\$` inside math is a currency sign, not the closer
            let mut from = 0;
            let end = loop {
                let Some(e) = r[from..].find(close).map(|e| from + e) else {
                    none_from[k] = r_at;
                    return None;
                };
                if close == "$" && e > 0 && r.as_bytes()[e - 1] == b'\\' {
                    from = e + 1;
                    continue;
                }
                break e;
            };
            return Some((r[..end].to_string(), base + open.len() + end + close.len()));
        }
    }
    None
}

/// All math segments `(start, end, content)`.
pub(crate) fn segments(s: &str) -> Vec<(usize, usize, String)> {
    let mut out = vec![];
    let b = s.as_bytes();
    let mut none_from = [usize::MAX; 4];
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'$'
            || (b[i] == b'\\' && i + 1 < b.len() && (b[i + 1] == b'(' || b[i + 1] == b'['))
        {
            if i > 0 && b[i - 1] == b'\\' {
                i += 1;
                continue;
            }
            if let Some((c, e)) = segment_at_memo(s, i, &mut none_from) {
                out.push((i, e, c));
                i = e;
                continue;
            }
        }
        i += 1;
    }
    out
}

/// Prose words of `t`: runs of two or more ASCII letters, lower-cased, outside math segments,
/// LaTeX command names and `\text{}`-like bodies, and not labels (a word directly followed by
/// `:` or `=`, as in "Minimum = 1").
pub(crate) fn words(t: &str) -> Vec<String> {
    let mut outside = String::with_capacity(t.len());
    let mut last = 0;
    for (st, en, _) in segments(t) {
        outside.push_str(&t[last..st]);
        outside.push(' ');
        last = en;
    }
    outside.push_str(&t[last..]);
    let b = outside.as_bytes();
    let mut out = vec![];
    let mut i = 0;
    while i < b.len() {
        let command = b[i] == b'\\';
        if command {
            i += 1;
        }
        let st = i;
        while i < b.len() && b[i].is_ascii_alphabetic() {
            i += 1;
        }
        let name = &outside[st..i];
        if command && ["text", "textbf", "textit", "mbox", "mathrm"].contains(&name) {
            i += outside[i..].find('}').unwrap_or(outside.len() - i);
        }
        // only a word looks ahead (once, over the spaces that follow it): linear overall
        let word = !command && name.len() >= 2;
        if word && !outside[i..].trim_start().starts_with([':', '=']) {
            out.push(name.to_ascii_lowercase());
        }
        if i == st {
            i += outside[i..].chars().next().map_or(1, char::len_utf8);
        }
    }
    out
}

/// `t` without surrounding `$`, `$$`, `\(...\)`, `\[...\]` when they enclose all of it.
pub(crate) fn strip_delimiters(t: &str) -> &str {
    match segment_at(t, 0) {
        Some((c, end)) if t[end..].trim().is_empty() => {
            let open = t.len() - t.trim_start().len();
            let from = t[open..].find(c.as_str()).map_or(open, |p| open + p);
            t[from..from + c.len()].trim()
        }
        _ => t,
    }
}

/// Byte offsets of the top-level `=` signs of `t` (not in braces or brackets, not part of
/// `<=`, `>=`, `!=`, `==`).
pub(crate) fn top_level_equals(t: &str) -> Vec<usize> {
    let b = t.as_bytes();
    let mut depth = 0i32;
    let mut out = vec![];
    for i in 0..b.len() {
        match b[i] {
            b'{' | b'(' | b'[' => depth += 1,
            b'}' | b')' | b']' => depth -= 1,
            b'=' if depth == 0 => {
                let prev = i.checked_sub(1).map(|j| b[j]);
                let next = b.get(i + 1).copied();
                if !matches!(prev, Some(b'<' | b'>' | b'!' | b'=' | b'\\')) && next != Some(b'=') {
                    out.push(i);
                }
            }
            _ => {}
        }
    }
    out
}

/// The right-hand side of the last `=` when `t` is an equation whose left-hand side holds no
/// variables (`1 + 8 = 9`, `7 \times 2 = 14`); otherwise `t` (`x = 3` is a labelled answer).
pub(crate) fn closed_rhs(t: &str) -> &str {
    let eqs = top_level_equals(t);
    match (eqs.first(), eqs.last()) {
        (Some(&first), Some(&last)) if words_or_letters(&t[..first]) == 0 => t[last + 1..].trim(),
        _ => t,
    }
}

/// Byte offsets of the ASCII letters of `t` that are prose, not part of a LaTeX command name.
fn prose_letters(t: &str) -> impl Iterator<Item = usize> + '_ {
    let b = t.as_bytes();
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < b.len() {
            if b[i] == b'\\' {
                i += 1;
                while i < b.len() && b[i].is_ascii_alphabetic() {
                    i += 1;
                }
                continue;
            }
            i += 1;
            if b[i - 1].is_ascii_alphabetic() {
                return Some(i - 1);
            }
        }
        None
    })
}

/// Number of ASCII letters of `t` outside LaTeX command names.
fn words_or_letters(t: &str) -> usize {
    prose_letters(t).count()
}

/// `t` up to its first clause break: `,`/`;` followed by a space or the end, `!`, `?`, `(` after
/// a space, a sentence end or a newline.
pub(crate) fn clause(t: &str) -> &str {
    let b = t.as_bytes();
    for i in 0..b.len() {
        let next_space = b.get(i + 1).is_none_or(|c| c.is_ascii_whitespace());
        let brk = match b[i] {
            b',' | b';' => next_space,
            b'.' => next_space && (i == 0 || b[i - 1] != b'.'),
            b'!' | b'?' | b'\n' => true,
            b'(' => i > 0 && b[i - 1] == b' ',
            _ => false,
        };
        if brk {
            return &t[..i];
        }
    }
    t
}

/// Byte offset of the first prose letter of `t` (not part of a LaTeX command name).
pub(crate) fn first_word(t: &str) -> Option<usize> {
    prose_letters(t).next()
}

/// How many bytes before and after a statement word or marked value the statement readings
/// ([`crate::stated`], [`crate::restated`]) look at: its clause, the arithmetic before it and
/// the value after it are read inside this window. Each candidate then costs a bounded amount
/// of work, so a response's reading is linear in its length (issue 50, item 2); a clause longer
/// than this without a clause break is read only this far from the word.
pub const STATEMENT_WINDOW: usize = 256;

/// The window of `s` around `st..en` ([`STATEMENT_WINDOW`] bytes either side): its byte offset
/// in `s` and its text. A window cut before `st` starts after the next whitespace, so that it
/// does not open on part of a word.
pub(crate) fn window(s: &str, st: usize, en: usize) -> (usize, &str) {
    let mut lo = st.saturating_sub(STATEMENT_WINDOW);
    while !s.is_char_boundary(lo) {
        lo -= 1;
    }
    if lo > 0 {
        if let Some(p) = s[lo..st].find(char::is_whitespace) {
            lo += p;
        }
    }
    let mut hi = en.saturating_add(STATEMENT_WINDOW).min(s.len());
    while !s.is_char_boundary(hi) {
        hi += 1;
    }
    (lo, &s[lo..hi])
}

/// The last `max` bytes of `s` (all of `s` when `max` is 0 or `s` is no longer), starting after
/// a whitespace so that no word is cut: its byte offset in `s` and its text. The stated-answer
/// search reads statements only there ([`crate::Options::max_statement_bytes`]), which bounds
/// its work whatever the response's length.
pub(crate) fn tail(s: &str, max: usize) -> (usize, &str) {
    if max == 0 || s.len() <= max {
        return (0, s);
    }
    let mut lo = s.len() - max;
    while !s.is_char_boundary(lo) {
        lo += 1;
    }
    if let Some(p) = s[lo..].find(char::is_whitespace) {
        lo += p;
    }
    (lo, &s[lo..])
}
