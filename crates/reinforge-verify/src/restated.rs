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
//! - a first line that is only a variable-free equation (`1 + 4 = 5` above an explanation) or
//!   only a value with a unit word at most (`8in.`);
//! - a *statement about the result* with a named subject: "it is indeed 9", "The answer to this
//!   equation is 24.", "The GCD is 1." (no word after the value; "it also equals" adds a property, not a result);
//! - a *named result*: "the answer of 17", "a result of 63" (the value closes its clause);
//! - a *count*: "\"N\" occurs exactly once.", "It occurs only once in the text." (not hedged,
//!   one number in its sentence);
//! - a value alone on a line under a line that ends in `:` ("… in several ways:\n\n0"), not a
//!   list number.
//!
//! A computed result that only repeats one of its operands and is false ("add 3 and 7, which
//! is 7") is no answer: it repeats the question.
//!
//! The candidate is cancelled (no answer) when anything after it states another value: a later
//! statement about the result ("it also equals one", "So, 4.", "3 * 4 equals 20 in this
//! context") with a different number, a negated or hedged result (`= 5 or 6`, `= 8 is not
//! right`), or a retraction ("we discard this incorrect answer"). Restating the same value
//! ("So, 12 is it") keeps it. As everywhere in the stated policy, unevaluated arithmetic is no
//! value (`= 7 - 3`), and a left side that is not arithmetic states nothing ("the inverse of 4
//! is 1", "8 = 24").

use crate::scan::{closed_rhs, first_word, top_level_equals, window, words};
use crate::value::{
    hypothetical, is_value_text, lone_number_subject, negated_before, number_word, numbered_item,
    numbered_item_in, skip_adverb, unevaluated, value_and_end, ListNumbers, STATEMENT_WORDS,
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
    "gcd",
    "lcm",
    "divisor",
    "count",
];

/// The answer stated before the last sentence: the last candidate of the module docs, unless a
/// later statement, a negated result or a retraction cancels it.
#[cfg(test)]
pub(crate) fn earlier_answer(s: &str) -> Option<String> {
    earlier_answer_in(s, true)
}

/// [`earlier_answer`] of `s`, the whole response (`whole`) or its tail, whose first line is not
/// the response's and so states nothing as a first line.
pub(crate) fn earlier_answer_in(s: &str, whole: bool) -> Option<String> {
    let s = &s[..s.find("<|").unwrap_or(s.len())];
    let full = s;
    let lower = s.to_ascii_lowercase();
    let first_line = || first_line_equation(s).or_else(|| first_line_value(s));
    let mut answers: Vec<(usize, String)> = whole
        .then(first_line)
        .flatten()
        .map(|v| (0, v))
        .into_iter()
        .collect();
    let mut others: Vec<(usize, Option<String>)> = vec![];
    for (word_st, word_en) in result_words(&lower) {
        // each statement is read inside its window: bounded work per statement word
        let (lo, s) = window(full, word_st, word_en);
        let (st, en) = (word_st - lo, word_en - lo);
        let clause = &s[en..own_clause_end(s, en)];
        let has_digit = clause.bytes().any(|c| c.is_ascii_digit());
        if negated_before(&s[..st]) {
            others.push((word_st, None));
            continue;
        }
        if hypothetical(&s[..st]) {
            continue;
        }
        if arithmetic_before(&s[..st]) {
            match computed_value(s, en) {
                // "3 and 7, which is 7": a number of the question, not the result
                Some(v) if repeated_operand(&s[..st], &v) => others.push((word_st, None)),
                Some(v) => answers.push((word_st, v)),
                // a hedged, negated or garbled value; a cut-off "equals" says nothing
                None if negated(clause) => others.push((word_st, None)),
                None => match number_after(s, en) {
                    Some(n) => others.push((word_st, Some(n))),
                    None if starts_with_term(&s[en..]) => others.push((word_st, None)),
                    None => {}
                },
            }
        } else if COUNT_WORDS.contains(&&lower[word_st..word_en]) {
            // "\"N\" occurs exactly once.", "It occurs only once in the text."
            match count_value(s, en) {
                Some(v) if !negated(clause) => answers.push((word_st, v)),
                _ => {}
            }
        } else if speaks_of_result(&s[..st]) {
            match subject_value(s, st, en) {
                // "it is indeed 9", "The answer to this equation is 24."
                Some(v) if !negated(clause) => answers.push((word_st, v)),
                _ => {}
            }
            match number_after(s, en) {
                _ if has_digit && negated(clause) => others.push((word_st, None)),
                Some(n) => others.push((word_st, Some(n))),
                // "So, the result is 3x.": a result that is no number cancels an earlier one
                None if starts_with_term(&s[en..]) => others.push((word_st, None)),
                None => {}
            }
        }
    }
    let s = full;
    answers.extend(emphasized_values(s));
    answers.extend(named_results(s));
    answers.extend(introduced_lines(s));
    let (at, value) = answers.into_iter().max_by_key(|(at, _)| *at)?;
    // a later statement of another value (or a negated one, `None`) cancels the answer
    let cancelled = others
        .iter()
        .filter(|(st, _)| *st > at)
        .any(|(_, n)| n.as_deref().is_none_or(|n| !same_number(n, &value)));
    let retracted = RETRACTIONS.iter().any(|r| lower[at..].contains(r));
    (!cancelled && !retracted).then_some(value)
}

/// A first line that is only a variable-free equation with a value on the right (`1 + 4 = 5`
/// before an explanation): its right-hand side. Used only when the last sentence states nothing.
fn first_line_equation(s: &str) -> Option<String> {
    let line = s.trim_start().lines().next()?.trim();
    let rhs = closed_rhs(line);
    let lhs = &line[..top_level_equals(line).first().copied().unwrap_or(0)];
    // "1 = 1" restates a number; only a computation on the left states a result
    let is_equation = rhs.len() < line.len() && words(line).is_empty() && !lone_number_subject(lhs);
    (is_equation && is_value_text(rhs)).then(|| rhs.to_string())
}

/// A first line that is only a value, a unit word at most after it (`8in.`, `12 apples`, `7`),
/// before more text: that value. Not a list number ("1." above "2.", "1. Absendance"), not `3x`
/// (a term).
fn first_line_value(s: &str) -> Option<String> {
    let line = s.trim_start().lines().next()?.trim();
    if numbered_item(s, line.trim_end_matches('.'), line.ends_with('.')) {
        return None;
    }
    let body = line.strip_suffix('.').unwrap_or(line).trim_end();
    let split = first_word(body).unwrap_or(body.len());
    let (value, unit) = (body[..split].trim(), &body[split..]);
    let unit_ok =
        unit.is_empty() || (unit.len() >= 2 && unit.chars().all(|c| c.is_ascii_alphabetic()));
    // "1. Absendance": a list label before a word, not a value with a unit
    let label = value.ends_with('.') && !unit.is_empty();
    (unit_ok && !label && !value.contains(['(', ')']) && is_value_text(value))
        .then(|| value.to_string())
}

/// The value of a computed result whose statement word ends at `en`: it must close its clause
/// (a `: ` or a relative "which" ends the clause too), not be negated or hedged there, and not
/// open a list.
fn computed_value(s: &str, en: usize) -> Option<String> {
    let (value, end) = value_and_end(&s[..clause_end(s, en)], en, false, usize::MAX)?;
    // "equals 15, 17, 20, ...": a list of values, not one
    let list = s[end..]
        .strip_prefix(',')
        .is_some_and(|t| t.trim_start().starts_with(|c: char| c.is_ascii_digit()));
    (!negated(&s[en..own_clause_end(s, en)]) && !list).then_some(value)
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
    // a run of link words is short ("which is actually"); a long one is no link
    for _ in 0..MAX_LINK_WORDS {
        let last = t.rsplit(|c: char| c.is_whitespace()).next().unwrap_or("");
        if last.is_empty() || !LINK_WORDS.contains(&last.to_ascii_lowercase().as_str()) {
            return t;
        }
        t = t[..t.len() - last.len()].trim_end();
    }
    t
}

/// Most link words stripped between an arithmetic expression and its statement word.
const MAX_LINK_WORDS: usize = 8;

/// Whether `head` ends in plain arithmetic between numbers (after dropping link words such as
/// "which" or "indeed"): `… so 8 - 3`, `the sum 7 plus 3 is`.
fn arithmetic_before(head: &str) -> bool {
    arithmetic_tail(head).is_some()
}

/// The plain arithmetic that ends `head` (see [`arithmetic_before`]) with word operators
/// written as symbols, and whether an "and" stands for the operator ("add 9 and 2").
fn arithmetic_tail(head: &str) -> Option<(String, bool)> {
    let t = strip_links(head);
    let core = t.trim_end_matches([',', ':']).trim_end();
    // only the words that may be arithmetic are rewritten: bounded work per statement word
    let core = &core[arithmetic_start(core)..];
    let mut e = glued_times(&format!(" {core} "));
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
        .find(|(_, c)| !(c.is_ascii_digit() || " .()/+-*×÷·−–^".contains(*c)))
        .map_or(0, |(i, c)| i + c.len_utf8());
    let e = e[start..].trim();
    // a division between numbers is a computation here too ("6 / 2 results in 3")
    let computed = unevaluated(e) || unevaluated(&e.replace('/', "*"));
    computed.then(|| {
        let uses_and = t.to_ascii_lowercase().contains(" and ");
        (e.to_string(), uses_and)
    })
}

/// Where the words of `t` that may belong to its closing arithmetic start: the byte offset of
/// the last word that cannot (it keeps a character no rewriting of [`arithmetic_tail`] turns
/// into arithmetic, so nothing before it reaches the expression), or 0.
fn arithmetic_start(t: &str) -> usize {
    let mut end = t.len();
    loop {
        let head = t[..end].trim_end();
        let start = head
            .char_indices()
            .rev()
            .find(|(_, c)| c.is_whitespace())
            .map_or(0, |(i, c)| i + c.len_utf8());
        let word = &head[start..];
        if word.is_empty() || start == 0 {
            return 0;
        }
        if !may_be_arithmetic(word) {
            return start;
        }
        end = start;
    }
}

/// Whether a word may be part of plain arithmetic once [`arithmetic_tail`] rewrites it: a word
/// operator, or numbers, operators and the LaTeX operators only.
fn may_be_arithmetic(word: &str) -> bool {
    const PARTS: &[&str] = &[
        "multiplied",
        "by",
        "divided",
        "plus",
        "minus",
        "times",
        "and",
    ];
    if PARTS.contains(&word) {
        return true;
    }
    let mut w = word.to_string();
    for cmd in ["\\times", "\\cdot", "\\div"] {
        w = w.replace(cmd, "");
    }
    w.chars()
        .all(|c| c.is_ascii_digit() || c == 'x' || c == 'X' || ".()/+-*×÷·−–^".contains(c))
}

/// `t` with an `x` between two digits written as `*` (`4x5 = 20`).
fn glued_times(t: &str) -> String {
    let b = t.as_bytes();
    t.char_indices()
        .map(|(i, c)| {
            let between =
                i > 0 && b.get(i + 1).is_some_and(u8::is_ascii_digit) && b[i - 1].is_ascii_digit();
            if (c == 'x' || c == 'X') && between {
                '*'
            } else {
                c
            }
        })
        .collect()
}

/// Whether `value`, stated after the arithmetic that ends `head`, only repeats one of its
/// numbers and is the value of no reading of it: `3 + 7, which is 7` (an "and" may be any of
/// `+ - * /`: "multiply 3 and 4, which is 12" is a result). A false value that is no operand
/// ("5-0 is 500") is still a stated (wrong) answer; what cannot be evaluated is no repeat.
pub(crate) fn repeated_operand(head: &str, value: &str) -> bool {
    let Some((e, uses_and)) = arithmetic_tail(head) else {
        return false;
    };
    let Ok(v) = value.trim().parse::<f64>() else {
        return false;
    };
    let readings: Vec<String> = if uses_and {
        ["+", "-", "*", "/"]
            .iter()
            .flat_map(|op| {
                let swapped = e.replacen('+', op, 1);
                [swapped.clone(), reversed(&swapped)]
            })
            .collect()
    } else {
        vec![e.clone()]
    };
    let values: Vec<f64> = readings.iter().filter_map(|r| evaluate(r)).collect();
    let false_value = !values.is_empty()
        && values
            .iter()
            .all(|x| (x - v).abs() > 1e-9 * v.abs().max(1.0));
    false_value && operands(&e).contains(&v)
}

/// The numbers of plain arithmetic, in order.
fn operands(e: &str) -> Vec<f64> {
    e.split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter_map(|t| t.parse().ok())
        .collect()
}

/// `a op b` as `b op a` (a subtraction or division stated in the other order).
fn reversed(e: &str) -> String {
    match e.find(|c: char| "+-*/".contains(c)) {
        Some(i) if i > 0 => format!("{} {} {}", e[i + 1..].trim(), &e[i..i + 1], e[..i].trim()),
        _ => e.to_string(),
    }
}

/// The value of plain arithmetic (numbers, `+ - * / × ÷ · −`, parentheses), or None when it is
/// not well formed or divides by zero. Recursion depth is bounded by the parentheses.
fn evaluate(e: &str) -> Option<f64> {
    let tokens: Vec<char> = e.chars().filter(|c| !c.is_whitespace()).collect();
    if tokens.len() > 200 {
        return None;
    }
    let mut pos = 0;
    let v = sum(&tokens, &mut pos)?;
    (pos == tokens.len() && v.is_finite()).then_some(v)
}

/// A sum of products from `pos` (see [`evaluate`]).
fn sum(t: &[char], pos: &mut usize) -> Option<f64> {
    let mut v = product(t, pos)?;
    while let Some(&c) = t.get(*pos) {
        if !matches!(c, '+' | '-' | '−' | '–') {
            break;
        }
        *pos += 1;
        let r = product(t, pos)?;
        v = if c == '+' { v + r } else { v - r };
    }
    Some(v)
}

/// A product of factors from `pos` (see [`evaluate`]).
fn product(t: &[char], pos: &mut usize) -> Option<f64> {
    let mut v = factor(t, pos)?;
    while let Some(&c) = t.get(*pos) {
        if !matches!(c, '*' | '×' | '·' | '/' | '÷') {
            break;
        }
        *pos += 1;
        let r = factor(t, pos)?;
        v = if matches!(c, '/' | '÷') {
            (r != 0.0).then(|| v / r)?
        } else {
            v * r
        };
    }
    Some(v)
}

/// A number, a signed factor or a parenthesised sum from `pos` (see [`evaluate`]).
fn factor(t: &[char], pos: &mut usize) -> Option<f64> {
    match t.get(*pos)? {
        '(' => {
            *pos += 1;
            let v = sum(t, pos)?;
            (t.get(*pos) == Some(&')')).then(|| *pos += 1)?;
            Some(v)
        }
        '-' | '−' | '–' => {
            *pos += 1;
            factor(t, pos).map(|v| -v)
        }
        _ => {
            let start = *pos;
            while t.get(*pos).is_some_and(|c| c.is_ascii_digit() || *c == '.') {
                *pos += 1;
            }
            t[start..*pos].iter().collect::<String>().parse().ok()
        }
    }
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
    t.is_empty() || RESULT_SUBJECTS.contains(&last.as_str()) || names_the_result(clause)
}

/// Whether a clause opens with a noun phrase that names the result ("The answer to this
/// mathematical equation", "so the result of the sum"), after a clause opener.
fn names_the_result(clause: &str) -> bool {
    let lower = clause.trim_start().to_ascii_lowercase();
    let lower = ["so ", "thus ", "hence ", "therefore ", "now ", "and "]
        .iter()
        .find_map(|o| lower.strip_prefix(o))
        .unwrap_or(&lower)
        .trim_start();
    [
        "the answer",
        "the final answer",
        "the result",
        "the final result",
        "the greatest common",
        "their greatest common",
    ]
    .iter()
    .any(|p| lower.starts_with(p) && !lower[p.len()..].starts_with(char::is_alphabetic))
}

/// The value a statement about the result states ("it is indeed 9", "the answer to this is
/// 24"): a named subject (not an empty clause, not "it also equals", which adds a property),
/// a value closing its clause with no word after it.
fn subject_value(s: &str, st: usize, en: usize) -> Option<String> {
    let head = &s[..st];
    let clause = &head[head.rfind([',', ';', ':', '\n', '.']).map_or(0, |i| i + 1)..];
    let lower = clause.to_ascii_lowercase();
    let side_remark = lower
        .split_whitespace()
        .any(|w| w == "also" || w == "which");
    if strip_links(clause).trim().is_empty() || side_remark {
        return None;
    }
    let end = own_clause_end(s, en);
    value_and_end(&s[..end], en, false, 0).map(|(v, _)| v)
}

/// Verbs of a count ("appears twice", "occurs 3 times").
const COUNT_WORDS: &[&str] = &["appears", "appear", "occurs", "occur"];

/// The count stated after a count verb ending at `en`: a value that opens its clause, any words
/// but no number after it ("once in the text"), and no hedge or second number in its sentence.
fn count_value(s: &str, en: usize) -> Option<String> {
    let sentence_end = s[en..].find(". ").map_or(s.len(), |p| en + p);
    let sentence_end = s[en..sentence_end]
        .find('\n')
        .map_or(sentence_end, |p| en + p);
    if hedged_count(&s[en..sentence_end]) {
        return None;
    }
    value_and_end(&s[..own_clause_end(s, en)], en, false, usize::MAX).map(|(v, _)| v)
}

/// Whether the text after a count verb ("appears", "occurs"), up to a quote, hedges (a negation
/// or hedge word) or names more than one number ("twice or three times", "twice, 3 times").
pub(crate) fn hedged_count(t: &str) -> bool {
    // quoted text is what is counted in, not what is said
    let t = &t[..t.find(['"', '“']).unwrap_or(t.len())];
    let numbers = t
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| w.starts_with(|c: char| c.is_ascii_digit()) || number_word(w).is_some())
        .count();
    numbers > 1 || negated(t)
}

/// Results named with "of": "the surprising answer of 17, which ...", "results in a result of
/// 63." (the value closes its clause, nothing negates it).
fn named_results(s: &str) -> Vec<(usize, String)> {
    let lower = s.to_ascii_lowercase();
    let mut out = vec![];
    for phrase in ["answer of ", "result of "] {
        for (word_p, _) in lower.match_indices(phrase) {
            let (lo, s) = window(s, word_p, word_p + phrase.len());
            let p = word_p - lo;
            let at = p + phrase.len();
            let end = own_clause_end(s, at);
            let start = s[..p]
                .rfind([',', ';', ':', '\n', '.'])
                .map_or(0, |i| i + 1);
            let value = value_and_end(&s[..end], at, false, 0).map(|(v, _)| v);
            match value {
                Some(v) if !negated(&s[start..end]) => out.push((word_p, v)),
                _ => {}
            }
        }
    }
    out
}

/// Values alone on a line after a line that ends in `:` ("… in several ways:\n\n0"), as (byte
/// offset, value); not list numbers, not unevaluated arithmetic.
fn introduced_lines(s: &str) -> Vec<(usize, String)> {
    let items = ListNumbers::of(s);
    let mut out = vec![];
    let mut previous = "";
    let mut offset = 0;
    for line in s.split_inclusive('\n') {
        let text = line.trim();
        let body = text.strip_suffix('.').unwrap_or(text).trim_end();
        let value = previous.ends_with(':')
            && !numbered_item_in(&items, body, text.ends_with('.'))
            && body
                .bytes()
                .all(|c| c.is_ascii_digit() || b"-.,/ ".contains(&c))
            && !body.contains(", ")
            && is_value_text(body);
        if value {
            out.push((offset, body.to_string()));
        }
        if !text.is_empty() {
            previous = text;
        }
        offset += line.len();
    }
    out
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
    // "3x" is a term, not the number 3
    let after = &rest.as_bytes()[len..];
    let term = after.first().is_some_and(|c| b"xyzn".contains(c))
        && !after.get(1).is_some_and(u8::is_ascii_alphabetic);
    (token.bytes().any(|c| c.is_ascii_digit()) && !expression && !term).then(|| token.to_string())
}

/// Whether `t` starts, after spaces and a colon, with a term such as `3x` (digits glued to a
/// variable letter).
fn starts_with_term(t: &str) -> bool {
    let t = t.trim_start_matches([' ', ':']).as_bytes();
    let digits = t.iter().take_while(|c| c.is_ascii_digit()).count();
    digits > 0
        && t.get(digits).is_some_and(|c| b"xyzn".contains(c))
        && !t.get(digits + 1).is_some_and(u8::is_ascii_alphabetic)
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
    let (lo, s) = window(s, open, close);
    let (open, close) = (open - lo, close - lo);
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
