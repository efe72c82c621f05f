//! Answers stated before the last sentence, for responses whose last sentence states nothing.
//!
//! A small policy often states its answer early and then rambles, restates it or is cut off
//! ("7 + 3 equals 10. … 7 + 3 indeed equals"). When the last sentence states no answer
//! ([`crate::stated`], rule 3), the answer is the **last** of these candidates in the response:
//!
//! - a *computed result*: plain arithmetic followed by `=`, "equals", "is (equal to)", "gives",
//!   "makes", "yields", "results in" and a value (`8 - 3 = 5`, `6 + 1 indeed equals 7`,
//!   `8 minus 7 equals 1`, `9 * 4 is 36`), the value closing its clause;
//! - an *emphasized value*: a value alone in bold (`**16**`, `__16__`) or code (`` `16` ``), on
//!   a line of its own or right after a statement word, `=` or `:`;
//! - a first line that is only a variable-free equation (`1 + 4 = 5` above an explanation).
//!
//! The candidate is cancelled (no answer) when anything after it states another value: a later
//! statement about the result ("it also equals one", "So, 4.", "3 * 4 equals 20 in this
//! context") with a different number, a negated or hedged result (`= 5 or 6`, `= 8 is not
//! right`), or a retraction ("we discard this incorrect answer"). Restating the same value
//! ("So, 12 is it") keeps it. As everywhere in the stated policy, unevaluated arithmetic is no
//! value (`= 7 - 3`), and a left side that is not arithmetic states nothing ("the inverse of 4
//! is 1", "8 = 24").

use crate::stated::{
    first_line_equation, hypothetical, is_value_text, negated_before, number_word, skip_adverb,
    unevaluated, value_and_end, STATEMENT_WORDS,
};

/// Words between an arithmetic expression and its statement word ("8 - 3 which equals 5",
/// "6 + 1 indeed equals 7", "7 + 3 is actually equal to 10").
const LINK_WORDS: &[&str] = &[
    "is", "which", "that", "indeed", "actually", "simply", "just", "really", "also", "still",
    "exactly", "then", "clearly",
];

/// Statement words after a computed expression, longest first so "is equal to" wins over "is".
const RESULT_WORDS: &[&str] = &[
    "is equal to",
    "equal to",
    "results in",
    "result in",
    "equals",
    "gives",
    "makes",
    "yields",
    "is",
];

/// Word operators a small model writes between two numbers, with their symbols.
const WORD_OPERATORS: &[(&str, &str)] = &[
    (" multiplied by ", " * "),
    (" divided by ", " / "),
    (" plus ", " + "),
    (" minus ", " - "),
    (" times ", " * "),
    (" x ", " * "),
    (" X ", " * "),
    // "add 9 and 2, which is 11": the operands of a named operation
    (" and ", " + "),
];

/// Words that negate or hedge a stated result in its own clause.
const NEGATIONS: &[&str] = &[
    "not",
    "isn't",
    "isn’t",
    "wrong",
    "incorrect",
    "never",
    "no",
    "cannot",
    "can't",
    "doesn't",
    "or",
    "about",
    "approximately",
    "maybe",
    "perhaps",
    "either",
];

/// Phrases after an answer that retract it.
const RETRACTIONS: &[&str] = &[
    "incorrect",
    "wrong",
    "discard",
    "mistake",
    "not correct",
    "not right",
    "not the answer",
];

/// Subjects of a later statement that speak about the result ("it also equals one", "the
/// answer is 5"); an empty subject ("So, 4.") counts too.
const RESULT_SUBJECTS: &[&str] = &[
    "it",
    "this",
    "that",
    "answer",
    "result",
    "sum",
    "product",
    "difference",
    "quotient",
    "total",
];

/// The answer stated before the last sentence: the last candidate of the module docs, unless a
/// later statement, a negated result or a retraction cancels it.
pub(crate) fn earlier_answer(s: &str) -> Option<String> {
    let s = &s[..s.find("<|").unwrap_or(s.len())];
    let lower = s.to_ascii_lowercase();
    let mut answers: Vec<(usize, String)> =
        first_line_equation(s).map(|v| (0, v)).into_iter().collect();
    let mut others: Vec<(usize, Option<String>)> = vec![];
    for (st, en) in result_words(&lower) {
        let clause = &s[en..own_clause_end(s, en)];
        let has_digit = clause.bytes().any(|c| c.is_ascii_digit());
        if negated_before(&s[..st]) {
            others.push((st, None));
            continue;
        }
        if hypothetical(&s[..st]) {
            continue;
        }
        if arithmetic_before(&s[..st]) {
            match computed_value(s, en) {
                Some(v) => answers.push((st, v)),
                // a hedged, negated or garbled value; a cut-off "equals" says nothing
                None if negated(clause) => others.push((st, None)),
                None => match number_after(s, en) {
                    Some(n) => others.push((st, Some(n))),
                    None if has_digit => others.push((st, None)),
                    None => {}
                },
            }
        } else if speaks_of_result(&s[..st]) {
            match number_after(s, en) {
                _ if has_digit && negated(clause) => others.push((st, None)),
                Some(n) => others.push((st, Some(n))),
                None => {}
            }
        }
    }
    answers.extend(emphasized_values(s));
    let (at, value) = answers.into_iter().max_by_key(|(at, _)| *at)?;
    // a later statement of another value (or a negated one, `None`) cancels the answer
    let cancelled = others
        .iter()
        .filter(|(st, _)| *st > at)
        .any(|(_, n)| n.as_deref().is_none_or(|n| !same_number(n, &value)));
    let retracted = RETRACTIONS.iter().any(|r| lower[at..].contains(r));
    (!cancelled && !retracted).then_some(value)
}

/// The value of a computed result whose statement word ends at `en`: it must close its clause
/// (a `: ` or a relative "which" ends the clause too) and not be negated or hedged there.
fn computed_value(s: &str, en: usize) -> Option<String> {
    let (value, _) = value_and_end(&s[..clause_end(s, en)], en, false, usize::MAX)?;
    (!negated(&s[en..own_clause_end(s, en)])).then_some(value)
}

/// (start, end) byte offsets of each `=` (not `<=`, `>=`, `!=`, `==`) and result or statement
/// word of `lower`, words only at word boundaries, each position once (the longest word there).
fn result_words(lower: &str) -> Vec<(usize, usize)> {
    let b = lower.as_bytes();
    let mut out = vec![];
    let mut i = 0;
    while i < b.len() {
        let boundary = i == 0 || !b[i - 1].is_ascii_alphanumeric();
        if b[i] == b'=' {
            let prev = i.checked_sub(1).map(|j| b[j]);
            if !matches!(prev, Some(b'<' | b'>' | b'!' | b'=')) && b.get(i + 1) != Some(&b'=') {
                out.push((i, i + 1));
            }
            i += 1;
            continue;
        }
        let word = boundary
            .then(|| {
                RESULT_WORDS.iter().chain(STATEMENT_WORDS).find(|w| {
                    lower[i..].starts_with(**w)
                        && !b
                            .get(i + w.len())
                            .is_some_and(|c| c.is_ascii_alphanumeric())
                })
            })
            .flatten();
        match word {
            Some(w) => {
                out.push((i, i + w.len()));
                i += w.len();
            }
            None => i += lower[i..].chars().next().map_or(1, char::len_utf8),
        }
    }
    out
}

/// `head` without its trailing link words ("which", "indeed", "is", ...).
fn strip_links(head: &str) -> &str {
    let mut t = head.trim_end();
    loop {
        let last = t.rsplit(|c: char| c.is_whitespace()).next().unwrap_or("");
        if last.is_empty() || !LINK_WORDS.contains(&last.to_ascii_lowercase().as_str()) {
            return t;
        }
        t = t[..t.len() - last.len()].trim_end();
    }
}

/// Whether `head` ends in plain arithmetic between numbers (after dropping link words such as
/// "which" or "indeed"): `… so 8 - 3`, `the sum 7 plus 3 is`.
fn arithmetic_before(head: &str) -> bool {
    let t = strip_links(head);
    let mut e = format!(" {} ", t.trim_end_matches([',', ':']).trim_end());
    for (word, op) in WORD_OPERATORS {
        e = e.replace(word, op);
    }
    for (cmd, op) in [("\\times", "*"), ("\\cdot", "*"), ("\\div", "/")] {
        e = e.replace(cmd, op);
    }
    let e = e.trim_end();
    let start = e
        .char_indices()
        .rev()
        .find(|(_, c)| !(c.is_ascii_digit() || " .()/+-*×÷·−^".contains(*c)))
        .map_or(0, |(i, c)| i + c.len_utf8());
    let e = e[start..].trim();
    // a division between numbers is a computation here too ("6 / 2 results in 3")
    unevaluated(e) || unevaluated(&e.replace('/', "*"))
}

/// Whether a statement with `head` before its word speaks about the result: its clause is
/// empty ("So, 4", ", results in 1") or ends in a word of [`RESULT_SUBJECTS`] ("it also equals
/// one"); not a relative clause about a value ("16, which is 9 more").
fn speaks_of_result(head: &str) -> bool {
    let clause = &head[head.rfind([',', ';', ':', '\n', '.']).map_or(0, |i| i + 1)..];
    let raw_last = clause
        .split_whitespace()
        .last()
        .unwrap_or("")
        .to_ascii_lowercase();
    if raw_last == "which" {
        return false;
    }
    let t = strip_links(clause).trim();
    let last = t
        .rsplit(|c: char| !c.is_ascii_alphabetic())
        .next()
        .unwrap_or("")
        .to_ascii_lowercase();
    t.is_empty() || RESULT_SUBJECTS.contains(&last.as_str())
}

/// The number right after byte offset `en` (a statement word), as written: digits with a sign
/// and a decimal point, or a number word; not the start of an expression (`8 + 4`).
fn number_after(s: &str, en: usize) -> Option<String> {
    let rest = skip_adverb(s[en..].trim_start_matches([' ', ':', ',', '*', '"', '`', '\t']));
    if let Some((n, len)) = number_word(rest) {
        // "one of those things" is a pronoun, not a number
        return (!rest[len..].starts_with(" of ")).then(|| n.to_string());
    }
    let len = rest
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || c == '.' || (i == 0 && c == '-')))
        .map_or(rest.len(), |(i, _)| i);
    let token = rest[..len].trim_end_matches('.');
    let next = rest[len..].trim_start().chars().next();
    let expression = next.is_some_and(|c| "+-*/×÷=^".contains(c));
    (token.bytes().any(|c| c.is_ascii_digit()) && !expression).then(|| token.to_string())
}

/// Whether two written numbers have the same value (plain decimals; anything else compares as
/// text).
fn same_number(a: &str, b: &str) -> bool {
    match (a.trim().parse::<f64>(), b.trim().parse::<f64>()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a.trim() == b.trim(),
    }
}

/// End of the clause that holds the value after `at`: a `: ` or a relative " which " ends it
/// too ("4 + 0 = 4: why ...", "equals 40 which is ...").
fn clause_end(s: &str, at: usize) -> usize {
    let colon = s[at..].find(": ").map_or(s.len(), |p| at + p);
    let which = s[at..].find(" which ").map_or(s.len(), |p| at + p);
    colon.min(which)
}

/// End of the clause that starts at `at`: the next `,`, `;`, `:`, newline or sentence end.
fn own_clause_end(s: &str, at: usize) -> usize {
    let b = s.as_bytes();
    (at..b.len())
        .find(|&i| {
            matches!(b[i], b'\n' | b',' | b';' | b':')
                || (matches!(b[i], b'.' | b'!' | b'?')
                    && b.get(i + 1).is_none_or(|c| c.is_ascii_whitespace()))
        })
        .unwrap_or(b.len())
}

/// Whether `t` holds a negation or hedge word.
fn negated(t: &str) -> bool {
    t.to_ascii_lowercase()
        .split(|c: char| !(c.is_ascii_alphabetic() || c == '\'' || c == '’'))
        .any(|w| NEGATIONS.contains(&w))
}

/// Values alone in bold or code, as (byte offset, value), on a line of their own or right after
/// a statement word, `=` or `:`.
fn emphasized_values(s: &str) -> Vec<(usize, String)> {
    let mut out = vec![];
    for mark in ["**", "__", "`"] {
        let mut from = 0;
        while let Some(p) = s[from..].find(mark) {
            let open = from + p;
            let body = open + mark.len();
            let Some(q) = s[body..].find(mark) else { break };
            let close = body + q + mark.len();
            let inner = s[body..body + q].trim().trim_end_matches(['.', ',']).trim();
            if !inner.contains('\n') && is_value_text(inner) && introduced(s, open, close) {
                out.push((open, inner.to_string()));
            }
            from = close;
        }
    }
    out
}

/// Whether the span `open..close` stands on a line of its own (a closing `.` allowed) or comes
/// right after a statement word, `=` or `:`.
fn introduced(s: &str, open: usize, close: usize) -> bool {
    let line_start = s[..open].rfind('\n').map_or(0, |i| i + 1);
    let line_end = s[close..].find('\n').map_or(s.len(), |i| close + i);
    let before = s[line_start..open].trim_end();
    let alone = before.is_empty() && s[close..line_end].trim().trim_end_matches('.').is_empty();
    let lower = before.to_ascii_lowercase();
    let after_word = RESULT_WORDS.iter().chain(STATEMENT_WORDS).any(|w| {
        lower.ends_with(w) && !lower[..lower.len() - w.len()].ends_with(char::is_alphabetic)
    });
    alone || before.ends_with(['=', ':']) || after_word
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn computed_results_need_arithmetic_on_the_left() {
        assert!(arithmetic_before("So 8 - 3 "));
        assert!(arithmetic_before("the difference 8 - 3 which "));
        assert!(arithmetic_before("In other words, 6 + 1 indeed "));
        assert!(arithmetic_before("8 minus 7 "));
        assert!(arithmetic_before("In this case, 6 divided by 2 "));
        assert!(arithmetic_before("5 x 9 "));
        assert!(arithmetic_before("simply add 9 and 2, which "));
        assert!(!arithmetic_before("the inverse of 4 "));
        assert!(!arithmetic_before("6 "));
        assert!(!arithmetic_before("x "));
    }

    #[test]
    fn the_last_candidate_wins() {
        assert_eq!(
            earlier_answer("3 + 4 = 8. No wait, 3 + 4 = 7. And then some").as_deref(),
            Some("7")
        );
        assert_eq!(
            earlier_answer("**12** is a guess. Then 3 + 4 = 7. And so").as_deref(),
            Some("7")
        );
        assert_eq!(
            earlier_answer("3 + 4 = 7. The result is **8**, and so").as_deref(),
            Some("8")
        );
    }

    #[test]
    fn hedges_negations_and_retractions_state_nothing() {
        assert_eq!(earlier_answer("So 3 + 3 = 5 or 6. Then we"), None);
        assert_eq!(earlier_answer("So 3 + 3 is about 6. Then we"), None);
        assert_eq!(earlier_answer("2 * 4 = 8 is not right. Then we"), None);
        assert_eq!(earlier_answer("2 * 4 = 8. But 8 is wrong, so"), None);
        assert_eq!(earlier_answer("2 * 4 = 8. The answer is not 8, so"), None);
        assert_eq!(earlier_answer("So 7 - 3 = 7 - 3. Then we"), None);
        assert_eq!(
            earlier_answer("If 8 minus 7 equals 1, 1 + 3 is more. What"),
            None
        );
        assert_eq!(earlier_answer("8 - 7 = 1. But 8 - 7 is not 1, so"), None);
    }

    #[test]
    fn later_statements_of_another_value_cancel_the_answer() {
        assert_eq!(
            earlier_answer("3 * 4 = 12. By itself, it also equals one. And"),
            None
        );
        assert_eq!(earlier_answer("6 - 4 equals 2. So, 4. \n\nFor"), None);
        assert_eq!(
            earlier_answer("since 3 * 5 equals 15, results in 1 reinforced 5."),
            None
        );
        assert_eq!(
            earlier_answer("6 * 4 = 24. We discard this incorrect answer. And"),
            None
        );
        // the same value restated, a relative clause about it, or another quantity keep it
        assert_eq!(
            earlier_answer("8 + 4 = 12. So it is 12 here. So, 8 + 4 indeed equals").as_deref(),
            Some("12")
        );
        assert_eq!(
            earlier_answer("9 + 7 = 16, which is indeed 9 more than 16. And").as_deref(),
            Some("16")
        );
        assert_eq!(
            earlier_answer("6 * 3 = 18\n\n8 = 24\nint x = 0;").as_deref(),
            Some("18")
        );
    }

    #[test]
    fn numbers_after_statement_words() {
        assert_eq!(number_after("is 12.", 2).as_deref(), Some("12"));
        assert_eq!(number_after("is -3, so", 2).as_deref(), Some("-3"));
        assert_eq!(number_after("equals one", 6).as_deref(), Some("1"));
        assert_eq!(
            number_after("so, 8 + 4", 2),
            None,
            "an expression, not a value"
        );
        assert_eq!(number_after("It's just one of those", 4), None, "a pronoun");
        assert!(same_number("12", "12.0"));
        assert!(!same_number("12", "21"));
    }
}
