//! Finding the final answer inside a response.
//!
//! Anchors, in the spirit of Math-Verify's `parser.py` extraction regexes (`final answer is`,
//! `answer:`, `\boxed{}` groups joined by `,`/`and`/`or`, plain LaTeX environments, then plain
//! numbers with thousands separators and percent suffixes), but decided by position instead of
//! regex priority: whichever anchor comes *last* in the text holds the final answer. Boxes are
//! brace-matched (no regex), so nested braces and 200 KB inputs cost one linear scan.
//!
//! Extraction never falls back: if the anchored answer cannot be parsed, the verdict is
//! "unparsable", not an earlier number.

use crate::scan::{segment_at, segments};
use crate::Target;

/// Where the extracted answer came from.
#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    /// `\boxed{}`/`\fbox{}`; the count of boxes joined into this answer.
    Boxed(usize),
    /// Text after "final answer is" / "answer:".
    Anchor,
    /// The whole input is the answer.
    Whole,
    /// The last `$...$`, `\(...\)`, `\[...\]` segment.
    Segment,
    /// The last plain number or arithmetic expression.
    Number,
    /// A multiple-choice letter.
    Letter,
    /// A final "= N" / "is N" statement in the last sentence ([`crate::stated`]).
    Statement,
}

/// An extracted answer string.
#[derive(Clone, Debug)]
pub struct Extracted {
    pub text: String,
    pub source: Source,
}

fn box_contents(s: &str) -> Vec<(usize, usize, String)> {
    let b = s.as_bytes();
    let mut out = vec![];
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        let tag = if rest.starts_with(b"\\boxed") {
            6
        } else if rest.starts_with(b"\\fbox") {
            5
        } else {
            i += 1;
            continue;
        };
        let start = i;
        let mut j = i + tag;
        while j < b.len() && b[j] == b' ' {
            j += 1;
        }
        if j < b.len() && b[j] == b'{' {
            let mut depth = 0i64;
            let mut k = j;
            let mut end = None;
            while k < b.len() {
                match b[k] {
                    b'\\' => k += 1,
                    b'{' => depth += 1,
                    b'}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = Some(k);
                            break;
                        }
                    }
                    _ => {}
                }
                k += 1;
            }
            match end {
                Some(e) => {
                    out.push((start, e + 1, s[j + 1..e].to_string()));
                    i = e + 1;
                }
                None => {
                    // unclosed: the rest of the text
                    out.push((start, b.len(), s[j + 1..].to_string()));
                    break;
                }
            }
        } else {
            // \boxed 5
            let w: String = s[j..]
                .chars()
                .take_while(|c| !c.is_whitespace() && *c != '$')
                .collect();
            let e = j + w.len();
            if !w.is_empty() {
                out.push((start, e, w));
            }
            i = e.max(i + 1);
        }
    }
    out
}

/// Text between two boxes that still joins them into one multi-part answer.
fn is_connector(between: &str) -> bool {
    if between.len() > 40 || between.contains("\n\n") || between.contains(". ") {
        return false;
    }
    let cleaned = between
        .replace("\\quad", " ")
        .replace("\\qquad", " ")
        .replace("\\text", " ")
        .replace("\\mbox", " ");
    cleaned
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| {
            !w.is_empty()
                && w.chars().any(|c| c.is_ascii_alphabetic())
                && !["and", "or"].contains(w)
        })
        .count()
        <= 3
}

const ANCHORS: &[&str] = &[
    "final answer is",
    "final answer:",
    "the answer is",
    "answer:",
    "answer is",
];

pub(crate) fn last_anchor(lower: &str) -> Option<(usize, usize)> {
    let mut best: Option<(usize, usize)> = None;
    for a in ANCHORS {
        if let Some(p) = lower.rfind(a) {
            let end = p + a.len();
            if best.is_none_or(|(bp, be)| end > be || (end == be && p < bp)) {
                best = Some((p, end));
            }
        }
    }
    best
}

/// The last plain number or simple arithmetic expression, as Math-Verify's expr extraction.
pub fn last_number(s: &str) -> Option<(usize, String)> {
    let b = s.as_bytes();
    let allowed = |c: u8| c.is_ascii_digit() || b".,/+-*^() ".contains(&c);
    let mut i = b.len();
    while i > 0 {
        i -= 1;
        if !b[i].is_ascii_digit() {
            continue;
        }
        let mut st = i;
        while st > 0 && allowed(b[st - 1]) {
            st -= 1;
        }
        let mut en = i + 1;
        while en < b.len() && allowed(b[en]) {
            en += 1;
        }
        let mut run = &s[st..en];
        let lead = run.len()
            - run
                .trim_start_matches([' ', ',', '.', '+', '*', '/', '^', ')'])
                .len();
        let st2 = st + lead;
        run = run.trim_start_matches([' ', ',', '.', '+', '*', '/', '^', ')']);
        // a leading '.' of ".4" is part of the number
        let (st2, run) = if st2 > 0
            && b[st2 - 1] == b'.'
            && run.starts_with(|c: char| c.is_ascii_digit())
            && (st2 < 2 || !b[st2 - 2].is_ascii_digit())
        {
            (st2 - 1, &s[st2 - 1..st + lead + run.len()])
        } else {
            (st2, run)
        };
        let run = run.trim_end_matches([' ', ',', '.', '+', '-', '*', '/', '^', '(']);
        let before_ok = st2 == 0 || {
            let c = s[..st2].chars().last().unwrap();
            c.is_whitespace() || "=$:(".contains(c) || !c.is_ascii() && !c.is_alphabetic()
        };
        if !before_ok || run.is_empty() {
            i = st2.min(i);
            continue;
        }
        let mut text = balance(run);
        let after = s[st2 + run.len()..].trim_start();
        if after.starts_with('%')
            || after.starts_with("\\%")
            || after.starts_with("percent")
            || after.starts_with("pct")
        {
            text.push('%');
        }
        return Some((st2, text));
    }
    None
}

fn balance(run: &str) -> String {
    let mut t = run.to_string();
    loop {
        let o = t.matches('(').count();
        let c = t.matches(')').count();
        if o > c && t.starts_with('(') {
            t.remove(0);
        } else if c > o && t.ends_with(')') {
            t.pop();
        } else {
            return t.trim().to_string();
        }
    }
}

/// Number of plain prose words (letters-only runs of 3+ outside `$...$` and commands).
pub(crate) fn prose_words(s: &str) -> usize {
    let mut n = 0;
    let mut in_math = false;
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'$' {
            in_math = !in_math;
            i += 1;
            continue;
        }
        if c == b'\\' {
            // skip command name and a \text{...} body
            let st = i;
            i += 1;
            while i < b.len() && b[i].is_ascii_alphabetic() {
                i += 1;
            }
            let name = &s[st + 1..i];
            if name.starts_with("text") || name == "mbox" || name == "mathrm" {
                while i < b.len() && b[i] != b'}' {
                    i += 1;
                }
            }
            continue;
        }
        if c.is_ascii_alphabetic() {
            let st = i;
            while i < b.len() && b[i].is_ascii_alphabetic() {
                i += 1;
            }
            let w = &s[st..i];
            let next = s[i..].trim_start().chars().next();
            if !in_math && w.len() >= 3 && next != Some(':') && next != Some('=') && w != "and" {
                n += 1;
            }
            continue;
        }
        i += 1;
    }
    n
}

/// Extracts the final answer of `s` for the given extraction targets, with the lenient policy
/// used for gold answers (and for predictions under [`crate::AnswerPolicy::LastValue`]): after
/// boxes and anchors, a whole-input answer, else the last math segment or plain number.
pub fn extract(
    s: &str,
    targets: &[Target],
    choices: &[String],
    lowercase: bool,
) -> Option<Extracted> {
    if targets == [Target::String] {
        return extract_letter(s, choices, lowercase);
    }
    let latex = targets.contains(&Target::Latex);
    if let Some(e) = marked(s, latex, false) {
        return Some(e);
    }
    if !latex {
        return last_number(s).map(|(_, t)| Extracted {
            text: t,
            source: Source::Number,
        });
    }
    let prose = prose_words(s);
    let has_digit_or_math = s
        .bytes()
        .any(|c| c.is_ascii_digit() || c == b'$' || c == b'\\');
    let segs = segments(s);
    let mut outside = String::new();
    let mut last = 0;
    for (st, en, _) in &segs {
        outside.push_str(&s[last..*st]);
        last = *en;
    }
    outside.push_str(&s[last..]);
    let words_outside = outside
        .split(|c: char| !c.is_ascii_alphabetic())
        .any(|w| w.len() >= 2 && !["and", "or", "pct", "percent", "percentage"].contains(&w));
    let seg_mode = !segs.is_empty() && words_outside;
    if !seg_mode && (prose < 3 || !has_digit_or_math) {
        return Some(Extracted {
            text: s.to_string(),
            source: Source::Whole,
        });
    }
    let seg = segs.last().map(|(a, b, c)| {
        let after = s[*b..].trim_start();
        let pct =
            after.starts_with('%') || after.starts_with("percent") || after.starts_with("pct");
        (*a, *b, if pct { format!("{c}%") } else { c.clone() })
    });
    let num = last_number(s);
    match (seg, num) {
        (Some((st, _, c)), Some((np, _))) if st >= np || np < st + c.len() + 2 => Some(Extracted {
            text: c,
            source: Source::Segment,
        }),
        (Some(_), Some((_, t))) | (None, Some((_, t))) => Some(Extracted {
            text: t,
            source: Source::Number,
        }),
        (Some((_, _, c)), None) => Some(Extracted {
            text: c,
            source: Source::Segment,
        }),
        (None, None) => None,
    }
}

/// The answer marked as final: the last `\boxed{}` group (boxes joined by connectors) or the
/// text after the last "answer is" / "answer:" anchor, whichever comes later. `stated` selects
/// the conservative reading of plain text after an anchor ([`crate::value::value_after`]).
pub(crate) fn marked(s: &str, latex: bool, stated: bool) -> Option<Extracted> {
    let lower = s.to_ascii_lowercase();
    let boxes = if latex { box_contents(s) } else { vec![] };
    // group trailing boxes joined by connectors
    let mut group: Vec<&(usize, usize, String)> = vec![];
    for bx in boxes.iter().rev() {
        if let Some(first) = group.last() {
            if bx.1 <= first.0 && is_connector(&s[bx.1..first.0]) {
                group.push(bx);
                continue;
            }
            break;
        }
        group.push(bx);
    }
    group.reverse();
    let anchor = last_anchor(&lower);
    let box_start = group.first().map(|b| b.0);
    match (anchor, box_start) {
        (Some((_, ae)), bs) if bs.is_none_or(|b| ae > b) => {
            let stated_value = if stated {
                crate::value::value_after(s, ae, latex)
            } else {
                None
            };
            // under the stated policy, the lenient reading must hold no prose ("3 because ...")
            let lenient = after_anchor(s, ae, latex)
                .filter(|t| !stated || (crate::value::no_prose(t) && !operand_in_words(s, ae, t)));
            if let Some(t) = stated_value.or(lenient) {
                return Some(Extracted {
                    text: t,
                    source: Source::Anchor,
                });
            }
        }
        _ => {}
    }
    if group.is_empty() {
        return None;
    }
    let text = group
        .iter()
        .map(|b| b.2.as_str())
        .collect::<Vec<_>>()
        .join(" , ");
    Some(Extracted {
        text,
        source: Source::Boxed(group.len()),
    })
}

/// Word operators (and "and", which joins operands): a number next to one is an operand of
/// arithmetic written in words.
const OPERATOR_WORDS: &[&str] = &[
    "plus",
    "minus",
    "times",
    "divided",
    "multiplied",
    "over",
    "and",
];

/// Names of operations: "the sum of 3" names an operand, not a result.
const OPERATION_NOUNS: &[&str] = &[
    "multiplication",
    "addition",
    "subtraction",
    "division",
    "sum",
    "product",
    "difference",
    "quotient",
];

/// Whether the answer `t`, first found after the anchor ending at `at`, stands next to a word
/// operator ("The final answer is the infinite decimal 1 plus itself") or follows a named
/// operation ("a multiplication of 0 by any number"): unevaluated arithmetic.
fn operand_in_words(s: &str, at: usize, t: &str) -> bool {
    let Some(p) = s[at..].find(t).map(|p| at + p) else {
        return false;
    };
    let next = s[p + t.len()..].split_whitespace().next().unwrap_or("");
    let mut before = s[at..p].split_whitespace().rev();
    let (prev, noun) = (before.next().unwrap_or(""), before.next().unwrap_or(""));
    let letters = |w: &str| {
        w.to_ascii_lowercase()
            .replace(|c: char| !c.is_ascii_alphabetic(), "")
    };
    // "a multiplication of 0 by any number": the operand of a named operation
    if letters(prev) == "of" && OPERATION_NOUNS.contains(&letters(noun).as_str()) {
        return true;
    }
    [next, prev].iter().any(|w| {
        OPERATOR_WORDS.contains(
            &w.to_ascii_lowercase()
                .trim_matches(|c: char| !c.is_ascii_alphabetic()),
        )
    })
}

/// The answer after an anchor: a math segment, else the sentence (reduced to what follows its
/// last " is ", else to its last number).
fn after_anchor(s: &str, at: usize, latex: bool) -> Option<String> {
    let rest = s[at..].trim_start_matches([' ', ':', '*', '\n']);
    let at = s.len() - rest.len();
    if latex {
        if let Some((c, _)) = segment_at(s, at) {
            return Some(c);
        }
    }
    let mut end = rest.len();
    for stop in [". ", ".\n", "\n", " I hope", "<|"] {
        if let Some(p) = rest.find(stop) {
            end = end.min(p);
        }
    }
    let sentence = rest[..end].trim_end_matches(['.', ' ']);
    if sentence.len() > 400 {
        return None;
    }
    if !latex {
        return last_number(sentence).map(|(_, t)| t);
    }
    if prose_words(sentence) < 2 {
        return Some(sentence.to_string());
    }
    if let Some(p) = sentence.rfind(" is ") {
        return Some(sentence[p + 4..].to_string());
    }
    if let Some((_, _, c)) = segments(sentence).pop() {
        return Some(c);
    }
    last_number(sentence).map(|(_, t)| t)
}

/// Multiple-choice letter: after the last "answer" anchor, else the first standalone
/// occurrence (which covers "A. Because ..."), as Math-Verify's `StringExtractionConfig` orders
/// its patterns.
fn extract_letter(s: &str, choices: &[String], lowercase: bool) -> Option<Extracted> {
    let norm = |x: &str| {
        if lowercase {
            x.to_lowercase()
        } else {
            x.to_string()
        }
    };
    let is_choice = |w: &str| choices.iter().any(|c| norm(c) == norm(w));
    let first_choice = |t: &str| {
        t.split(|c: char| c.is_whitespace() || ".,:;()*".contains(c))
            .find(|w| !w.is_empty() && is_choice(w))
            .map(|w| Extracted {
                text: norm(w),
                source: Source::Letter,
            })
    };
    // ASCII lowering keeps byte offsets valid for slicing `s`
    if let Some((_, ae)) = last_anchor(&s.to_ascii_lowercase()) {
        if let Some(e) = first_choice(&s[ae..]) {
            return Some(e);
        }
    }
    first_choice(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    const LE: &[Target] = &[Target::Latex, Target::Expr];

    #[test]
    fn last_boxed_wins_and_nested_braces_match() {
        let e = extract(
            "first \\boxed{1}. Then, after checking it all again, \\boxed{\\frac{1}{2}}.",
            LE,
            &[],
            true,
        )
        .unwrap();
        assert_eq!(e.text, "\\frac{1}{2}");
        assert_eq!(e.source, Source::Boxed(1));
    }

    #[test]
    fn adjacent_boxes_form_one_answer() {
        let e = extract("so \\boxed{1} and \\boxed{2}", LE, &[], true).unwrap();
        assert_eq!(e.source, Source::Boxed(2));
    }

    #[test]
    fn later_final_answer_beats_earlier_box() {
        let e = extract("\\boxed{255}. So the total is 10,455. Final Answer: The final answer is $10,455$. I hope", LE, &[], true).unwrap();
        assert_eq!(e.text, "10,455");
    }

    #[test]
    fn glued_digits_are_not_numbers() {
        assert!(last_number("AZYUK2A").is_none());
        assert_eq!(last_number("it is 1,000.99m2 ok").unwrap().1, "1,000.99");
    }
}
