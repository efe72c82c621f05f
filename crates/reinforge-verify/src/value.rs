//! What a written value is ([`is_value_text`], [`unevaluated`]), how one is read after a
//! statement word (`value_after`, `value_and_end`), and the words around a statement:
//! statement words, adverbs, number words, negated or conditional heads, list numbers.
//!
//! The lenient reading after an anchor ([`crate::extract`]), earlier answers
//! ([`crate::restated`]) and the stated policy ([`crate::stated`]) all read values with these,
//! so they sit below those three and build only on [`crate::scan`].

use crate::scan::{clause, closed_rhs, first_word, segment_at, strip_delimiters, words};

/// Word forms after which a value is stated ("is 27", "equals 27", "you get 27", and the
/// conclusion words of "Therefore, 12.").
pub(crate) const STATEMENT_WORDS: &[&str] = &[
    "is",
    "are",
    "was",
    "equals",
    "equal to",
    "get",
    "gets",
    "got",
    "gives",
    "makes",
    "it's",
    "that's",
    "it’s",
    "that’s",
    "therefore",
    "thus",
    "hence",
    "so",
    "results in",
    "result in",
    "yields",
    "calculated as",
    "computed as",
    "appears",
    "appear",
    "occurs",
    "occur",
];

/// Currency signs around a stated amount ("1,000.99€", "$5" written without math).
const CURRENCY: &[char] = &['€', '£', '¥', '₹', '$'];

/// Whether the sentence `sent` is only a list number ("3." after lines that start "1." and
/// "2."): the label of an item, not a value.
pub(crate) fn numbered_item(s: &str, sent: &str, terminated: bool) -> bool {
    if sent.trim().parse::<u32>().is_err() {
        return false;
    }
    numbered_item_in(&ListNumbers::of(s), sent, terminated)
}

/// The list labels of a text: the digits that open a line before ". " ("3. Then ..."), read
/// once, so that checking every line of a response against them stays linear.
pub(crate) struct ListNumbers(std::collections::HashSet<String>);

impl ListNumbers {
    pub(crate) fn of(s: &str) -> Self {
        ListNumbers(
            s.lines()
                .filter_map(|l| {
                    let l = l.trim_start();
                    let digits = l.bytes().take_while(u8::is_ascii_digit).count();
                    (digits > 0 && l[digits..].starts_with(". ")).then(|| l[..digits].to_string())
                })
                .collect(),
        )
    }
}

/// [`numbered_item`] against the list labels of the text, read before.
pub(crate) fn numbered_item_in(items: &ListNumbers, sent: &str, terminated: bool) -> bool {
    let Ok(n) = sent.trim().parse::<u32>() else {
        return false;
    };
    let item_start = |k: u32| items.0.contains(&k.to_string());
    terminated && ((n > 1 && item_start(n - 1)) || item_start(n + 1))
}

/// Whether the statement word after `head` is negated: `head` ends in "not", "never" or a
/// "-n't" word, adverbs between allowed ("is indeed not equal to 4", "isn't 4").
pub(crate) fn negated_before(head: &str) -> bool {
    let mut t = head.trim_end();
    if let Some((rest, last)) = t.rsplit_once(' ') {
        if ADVERBS.contains(&last.to_ascii_lowercase().as_str()) {
            t = rest.trim_end();
        }
    }
    let last = t
        .rsplit(|c: char| c.is_whitespace())
        .next()
        .unwrap_or("")
        .to_ascii_lowercase();
    last == "not" || last == "never" || last.ends_with("n't") || last.ends_with("n’t")
}

/// Whether the clause of `head` (after its last `,`, `;`, `:` or sentence break) is a
/// condition: it opens with "if", "suppose", "assuming", "unless" or "when".
pub(crate) fn hypothetical(head: &str) -> bool {
    let clause = &head[head.rfind([',', ';', ':', '\n', '.']).map_or(0, |i| i + 1)..];
    let first = clause
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_ascii_lowercase();
    ["if", "suppose", "assuming", "unless", "when"].contains(&first.as_str())
}

/// Words that open a clause before its subject ("So 1 is 5").
const CLAUSE_OPENERS: &[&str] = &[
    "so",
    "then",
    "and",
    "thus",
    "hence",
    "therefore",
    "now",
    "well",
];

/// Whether the subject of a statement (the clause of `head` before its statement word) is a
/// number alone: "1 is 5" and "6 = 18" state nothing about the asked computation.
pub(crate) fn lone_number_subject(head: &str) -> bool {
    let clause_start = head.rfind([',', ';', ':', '(', '\n']).map_or(0, |i| i + 1);
    let mut subject = head[clause_start..].trim();
    if let Some((first, rest)) = subject.split_once(' ') {
        if CLAUSE_OPENERS.contains(&first.to_ascii_lowercase().as_str()) {
            subject = rest.trim();
        }
    }
    if let Some((rest, last)) = subject.rsplit_once(' ') {
        if ADVERBS.contains(&last.to_ascii_lowercase().as_str()) {
            subject = rest.trim();
        }
    }
    !subject.is_empty() && words(subject).is_empty() && is_value_text(subject)
}

/// The value stated right after byte offset `at` of `s`: a math segment (its right-hand side
/// when it is a variable-free equation), else a plain value that fills the clause up to `,`,
/// `;`, `!`, `?`, a parenthesis or the end, followed by at most one word (a unit).
pub(crate) fn value_after(s: &str, at: usize, latex: bool) -> Option<String> {
    value_and_end(s, at, latex, 1).map(|(v, _)| v)
}

/// [`value_after`] allowing `tail_words` words after the value in its clause, with the byte
/// offset where the value's clause ends.
pub(crate) fn value_and_end(
    s: &str,
    at: usize,
    latex: bool,
    tail_words: usize,
) -> Option<(String, usize)> {
    let rest = skip_adverb(s[at..].trim_start_matches([' ', ':', ',', '*', '\t']));
    let at = s.len() - rest.len();
    if let Some((n, len)) = number_word(rest) {
        let tail = clause(&rest[len..]);
        let ok = words(tail).len() <= tail_words && !tail.bytes().any(|c| c.is_ascii_digit());
        return ok.then(|| (n.to_string(), at + len + tail.len()));
    }
    if latex {
        if let Some((c, end)) = segment_at(s, at) {
            let tail = clause(&s[end..]);
            let value = closed_rhs(c.trim()).to_string();
            return (words(tail).len() <= tail_words).then_some((value, end + tail.len()));
        }
    }
    let clause = clause(rest);
    let split = first_word(clause).unwrap_or(clause.len());
    if glued_letter(clause, split) {
        // "3x", "2y": an algebraic term, not a value with a unit
        return None;
    }
    let value = unwrap_value(&clause[..split]);
    let tail = &clause[split..];
    let tail_ok = words(tail).len() <= tail_words && !tail.bytes().any(|c| c.is_ascii_digit());
    (tail_ok && is_value_text(value)).then(|| (value.to_string(), at + clause.len()))
}

/// Whether the prose letter at `split` of `t` is a variable letter (`x`, `y`, `z`, `n`) glued
/// to a digit before it (`3x`; not `8in`, `3 x`, `5m` or `1,000.99m²`).
fn glued_letter(t: &str, split: usize) -> bool {
    let b = t.as_bytes();
    let run = b[split.min(b.len())..]
        .iter()
        .take_while(|c| c.is_ascii_alphabetic())
        .count();
    let variable = b.get(split).is_some_and(|c| b"xyzn".contains(c));
    let power = t[split.min(t.len())..]
        .chars()
        .nth(1)
        .is_some_and(|c| "²³^".contains(c));
    split > 0 && b[split - 1].is_ascii_digit() && run == 1 && variable && !power
}

/// Marks around a written value: bold, code and quotes (`**16**`, `` `16` ``, `"58."`).
const VALUE_WRAPPERS: &[char] = &['*', '`', '"', '“', '”'];

/// `t` without the punctuation that closes it (`,`, a single `.`), the marks of
/// [`VALUE_WRAPPERS`] and currency signs, repeatedly: `"58."` and `**16**.` give 58 and 16.
fn unwrap_value(t: &str) -> &str {
    let ellipsis = t.contains("..");
    let mut v = t.trim();
    loop {
        let next = v
            .trim_end_matches(|c: char| c == ',' || (c == '.' && !ellipsis))
            .trim()
            .trim_matches(VALUE_WRAPPERS)
            .trim()
            .trim_matches(CURRENCY)
            .trim();
        // a closing parenthesis without its opener belongs to the text around: "(8 + 3 = 11)"
        let next = match next.strip_suffix(')') {
            Some(inner) if next.matches('(').count() < next.matches(')').count() => inner,
            _ => next,
        };
        if next.len() == v.len() {
            return v;
        }
        v = next;
    }
}

/// Adverbs between a statement word and its value ("is indeed 0", "is actually 10").
pub(crate) const ADVERBS: &[&str] = &[
    "indeed", "actually", "simply", "just", "exactly", "really", "clearly", "still", "also", "only",
];

/// `t` without one leading adverb from [`ADVERBS`].
pub(crate) fn skip_adverb(t: &str) -> &str {
    let lower = t.get(..12.min(t.len())).unwrap_or(t).to_ascii_lowercase();
    for a in ADVERBS {
        if lower.starts_with(a) && t[a.len()..].starts_with(' ') {
            return t[a.len()..].trim_start();
        }
    }
    t
}

/// Number words a small model writes for small results.
const NUMBER_WORDS: &[&str] = &[
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
    "twenty",
];

/// A number word (zero to twenty, or a count: "once", "twice", "thrice") at the start of `t`,
/// as (value, byte length); not the start of a longer phrase such as "one-third" or "one/two".
pub(crate) fn number_word(t: &str) -> Option<(usize, usize)> {
    let len = t.bytes().take_while(|c| c.is_ascii_alphabetic()).count();
    if t[len..].starts_with(['-', '/', '\'']) {
        return None;
    }
    let w = t[..len].to_ascii_lowercase();
    let count = ["once", "twice", "thrice"]
        .iter()
        .position(|x| *x == w)
        .map(|n| n + 1);
    NUMBER_WORDS
        .iter()
        .position(|x| *x == w)
        .or(count)
        .map(|n| (n, len))
}

/// LaTeX commands a written value may contain.
const VALUE_COMMANDS: &[&str] = &[
    "\\times",
    "\\cdot",
    "\\frac",
    "\\dfrac",
    "\\tfrac",
    "\\overline",
    "\\bar",
    "\\dot",
    "\\ldots",
    "\\dots",
    "\\cdots",
    "\\sqrt",
    "\\pi",
    "\\%",
    "\\,",
    "\\;",
    "\\!",
    "\\left",
    "\\right",
    "\\infty",
];

/// Whether `t` has no prose words (math, numbers, `\text{}` bodies and labels only).
pub(crate) fn no_prose(t: &str) -> bool {
    words(t).is_empty()
}

/// Whether `t` is written as a single value: digits with number punctuation (grouping, decimal
/// point, `/`, `%`, repeating-decimal marks, a leading sign), vulgar fractions and the LaTeX of
/// fractions, roots and π; and not unevaluated arithmetic ([`unevaluated`]).
pub fn is_value_text(t: &str) -> bool {
    let t = strip_delimiters(t.trim());
    if !t.bytes().any(|c| c.is_ascii_digit()) || unevaluated(t) || cut_at_operator(t) {
        return false;
    }
    let mut rest = t.to_string();
    for c in VALUE_COMMANDS {
        rest = rest.replace(c, " ");
    }
    rest.chars().all(|c| {
        c.is_ascii_digit()
            || " .,'’/%()-+−…{}^_*×·\u{2009}\u{202F}\u{00A0}".contains(c)
            || "½⅓⅔¼¾⅕⅖⅗⅘⅙⅚⅛⅜⅝⅞π".contains(c)
    })
}

/// Whether `t` ends in an operator: an expression cut off mid-way ("So, 12 +"), not a value.
pub(crate) fn cut_at_operator(t: &str) -> bool {
    t.trim_end()
        .ends_with(['+', '-', '*', '×', '÷', '/', '·', '−', '='])
}

/// Whether `t` is plain arithmetic left unevaluated: only numbers, parentheses or brackets and
/// operators, with a `+ - * × ÷ ·` (or `\times`, `\cdot`, `\div`) between two numbers, as in
/// `7-3`, `3 * 9` or `8 * [2]`; or whole numbers side by side (`7 9`). A leading sign, lists, powers, roots and anything with letters are left to the
/// comparison (`2 \times 10^{-10}` and `17 + 10\sqrt{6}` are values).
pub fn unevaluated(t: &str) -> bool {
    let mut s = t.to_string();
    for (cmd, op) in [("\\times", "*"), ("\\cdot", "*"), ("\\div", "/")] {
        s = s.replace(cmd, op);
    }
    if juxtaposed(&s) {
        return true;
    }
    let c: Vec<char> = s.chars().filter(|c| !c.is_whitespace()).collect();
    let plain = c
        .iter()
        .all(|&x| x.is_ascii_digit() || ".()[]/+-*×÷·−–".contains(x));
    plain
        && (1..c.len().saturating_sub(1)).any(|i| {
            let op = matches!(c[i], '+' | '-' | '*' | '×' | '÷' | '·' | '−' | '–');
            let left = c[i - 1].is_ascii_digit() || matches!(c[i - 1], ')' | ']');
            let right = c[i + 1].is_ascii_digit() || matches!(c[i + 1], '(' | '[');
            op && left && right
        })
}

/// Whether `t` is whole numbers side by side ("7 9", the question's factors repeated; read as
/// a product by the parser), not one number with space grouping ("1 000 000").
fn juxtaposed(t: &str) -> bool {
    let parts: Vec<&str> = t.split_whitespace().collect();
    let numbers = parts.len() > 1 && parts.iter().all(|p| p.bytes().all(|c| c.is_ascii_digit()));
    let grouping = || parts.iter().skip(1).all(|p| p.len() == 3) && parts[0].len() <= 3;
    numbers && !grouping()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unevaluated_arithmetic() {
        assert!(unevaluated("7-3"));
        assert!(unevaluated("3 \\times 9"));
        assert!(!unevaluated("-3"));
        assert!(!unevaluated("x-3"));
        assert!(!unevaluated("\\frac{1}{2}"));
        assert!(!unevaluated("2^{10}"));
        assert!(!unevaluated("2, -6-4 \\sqrt{2}"));
        assert!(!unevaluated("2 \\times 10^{-10}"));
    }
}
