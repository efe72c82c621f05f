//! The default extraction policy for predictions: only a *stated* final answer counts.
//!
//! A reward that a policy can game is worse than none, so free text is read conservatively
//! (docs/verifier.md has the same list with more examples). In order of precedence, the final
//! answer of a response is:
//!
//! 1. the last `\boxed{}` group, or the value after the last "answer is" / "answer:" anchor,
//!    whichever comes later ("The answer is 4, not 5" states 4); an anchor whose value cannot be
//!    read states nothing (no fallback);
//! 2. the whole response, when it is only math (no prose words outside `\text{}` and labels):
//!    `27`, `\frac{1}{2}`, `x = 3`; a variable-free equation states its right-hand side
//!    (`1 + 8 = 9` states 9);
//! 3. a final statement in the last sentence: the value after its last `=`, "is", "equals",
//!    "equal to", "get(s)", "gives", "makes", "it's", "therefore", "so", ... whose right-hand
//!    side is a value that closes the sentence ("It is 27", "So 3*9 = 27.", "3 + 4 = 7, easy."
//!    state 27, 27 and 7; "5-0 is 500." states 500), "N is the answer", a last sentence that is
//!    only a value or an equation, or a math segment that closes the last sentence;
//! 4. when the last sentence states nothing, an answer stated earlier ([`crate::restated`]): the
//!    last computed result (`7 + 3 equals 10` before rambling or a cut-off), bold or code value,
//!    or first-line equation, unless a later statement of another value, a hedge, a negation or a
//!    retraction cancels it;
//! 5. the whole response, when it is a short answer with words but no sentence.
//!
//! A statement whose subject is a lone number ("1 is 5", "8 = 24"), a negated one ("is not
//! equal to 4"), one inside a condition ("If 8 minus 7 equals 1, ..."), a relative clause about
//! a quantity named without numbers ("the nearest whole number, which is 10") and a false one
//! that repeats an operand ("add 3 and 7, which is 7") state nothing; neither does a term
//! (`3x`), a value cut at an operator (`8*`) or a list number ("3." after "2. ...").
//! Anything else states no answer and scores 0: numbers inside working that never states a
//! result, a truncated last sentence, "7-3 is an imaginary number" (no value after "is"). A
//! value must be evaluated: plain arithmetic between numbers (`7-3`, `3 * 9`) merely repeats the
//! question and is refused wherever it was found outside a box. The lenient policy that also
//! takes the last number or math segment is [`crate::AnswerPolicy::LastValue`].
//!
//! Bounded work: rule 1 reads the whole response, rules 2 to 5 only its last
//! [`crate::Options::max_statement_bytes`] (32 KiB by default), where a response commits to its
//! answer; a statement before them is not read, and the verdict says so.

use crate::extract::{last_anchor, marked, prose_words, Extracted, Source};
use crate::restated::hedged_count;
use crate::scan::{closed_rhs, segments, strip_delimiters, tail, top_level_equals, window, words};
use crate::value::{
    cut_at_operator, hypothetical, lone_number_subject, negated_before, number_word, numbered_item,
    value_after, value_and_end, ADVERBS, STATEMENT_WORDS,
};
pub use crate::value::{is_value_text, unevaluated};
use crate::Target;

/// Words that make a text a sentence rather than a bare answer.
const VERBS: &[&str] = &[
    "is", "are", "was", "were", "equals", "equal", "get", "gets", "got", "gives", "makes", "be",
];

/// Most words after a stated value in the last sentence ("= 7, which is right").
const MAX_CLOSING_WORDS: usize = 4;

/// Phrases after a value that state it as the answer ("10.5 is the answer").
const TRAILING_ANCHORS: &[&str] = &[
    " is the answer",
    " is the final answer",
    " is my answer",
    " is the result",
];

/// Extracts the stated final answer of a prediction (see the module docs for the policy).
///
/// Boxes and anchors are searched in all of `s`; final statements (rules 2 to 5) only in its
/// last `max_statement_bytes` bytes ([`tail`]; 0: all of `s`), so the work is bounded whatever
/// the length: a response longer than that is never a whole-response answer, and its first line
/// is not read as one.
pub fn extract_stated(
    s: &str,
    targets: &[Target],
    choices: &[String],
    lowercase: bool,
    max_statement_bytes: usize,
) -> Option<Extracted> {
    if targets == [Target::String] {
        return crate::extract::extract(s, targets, choices, lowercase);
    }
    let latex = targets.contains(&Target::Latex);
    if let Some(e) = marked(s, latex, true) {
        return Some(e);
    }
    let (offset, t) = tail(s, max_statement_bytes);
    if let Some((_, anchor_end)) = last_anchor(&s.to_ascii_lowercase()) {
        // an anchor whose answer cannot be read: no fallback to another number, except a
        // result stated in a later last sentence ("The final answer is the sum of ...
        // Therefore, 8 + 4 = 12.")
        return later_statement(t, offset, anchor_end, latex).map(|text| Extracted {
            text,
            source: Source::Statement,
        });
    }
    statement(t, offset == 0, latex)
}

/// Rules 2 to 5 of the module docs on `s`, the response or (when `whole` is false) its tail.
fn statement(s: &str, whole: bool, latex: bool) -> Option<Extracted> {
    let w = words(s);
    let only = whole && only_answer(s, &w);
    if only && w.is_empty() {
        if let Some(text) = labelled_value(s, latex) {
            return Some(Extracted {
                text,
                source: Source::Statement,
            });
        }
        if unevaluated(after_label(s)) {
            // "Solve: 7 * 4" repeats the question under a label
            return None;
        }
        return Some(whole_answer(s));
    }
    let statement = last_sentence(s)
        .filter(|&(sent, terminated)| !numbered_item(s, sent, terminated))
        .and_then(|(sent, terminated)| final_statement(sent, terminated, latex))
        .or_else(|| crate::restated::earlier_answer_in(s, whole));
    match statement {
        Some(text) => Some(Extracted {
            text,
            source: Source::Statement,
        }),
        None => only.then(|| whole_answer(s)),
    }
}

/// The final statement of the last sentence of `t` (the text of `s` from byte `offset`) when
/// that sentence starts after byte `at` of `s`; a sentence that runs on from before `t` is
/// taken to start before `at`.
fn later_statement(t: &str, offset: usize, at: usize, latex: bool) -> Option<String> {
    let (sent, terminated) = last_sentence(t)?;
    let start = sent.as_ptr() as usize - t.as_ptr() as usize;
    let begun = offset == 0 || t[..start].contains(['\n', '.', '!', '?']);
    (begun && offset + start > at)
        .then(|| final_statement(sent, terminated, latex))
        .flatten()
}

/// `s` after a leading label of words and a colon ("Solve: 7 * 4" gives "7 * 4"), else `s`.
fn after_label(s: &str) -> &str {
    match s.split_once(':') {
        Some((label, rest)) if label.trim().chars().all(|c| c.is_alphabetic() || c == ' ') => {
            rest.trim()
        }
        _ => s,
    }
}

/// "Label: value" as a whole response (one label of words, one colon): the value after it.
fn labelled_value(s: &str, latex: bool) -> Option<String> {
    let colon = s.find(':')?;
    let label = s[..colon].trim();
    let is_label = !label.is_empty()
        && s.matches(':').count() == 1
        && label.chars().all(|c| c.is_alphabetic() || c == ' ');
    if !is_label {
        return None;
    }
    value_after(s, colon + 1, latex)
}

/// The whole response as the answer (the right-hand side of a variable-free equation).
fn whole_answer(s: &str) -> Extracted {
    Extracted {
        text: closed_rhs(strip_delimiters(s.trim())).to_string(),
        source: Source::Whole,
    }
}

/// Whether the whole response is a short answer with words but no sentence: at most two prose
/// words (or no digits or math at all), no verbs, no sentence break.
fn only_answer(s: &str, words: &[String]) -> bool {
    let has_digit_or_math = s
        .bytes()
        .any(|c| c.is_ascii_digit() || c == b'$' || c == b'\\');
    !s.trim().is_empty()
        && (prose_words(s) < 3 || !has_digit_or_math)
        && !words.iter().any(|x| VERBS.contains(&x.as_str()))
        && !has_sentence_break(s.trim())
}

/// A sentence break: a newline with text after it that is not display math, or `.`/`!`/`?`
/// followed by whitespace and more text.
fn has_sentence_break(t: &str) -> bool {
    sentence_starts(t).into_iter().any(|p| p > 0)
}

/// Byte offsets where sentences start (0 first), never inside a math segment. Linear time.
fn sentence_starts(t: &str) -> Vec<usize> {
    let segs = segments(t);
    let b = t.as_bytes();
    let text_end = t.trim_end().len();
    let mut out = vec![0];
    let mut k = 0;
    for i in 0..text_end.saturating_sub(1) {
        while k < segs.len() && segs[k].1 <= i {
            k += 1;
        }
        let inside = k < segs.len() && segs[k].0 < i;
        let boundary = match b[i] {
            b'\n' => true,
            b'.' | b'!' | b'?' => b[i + 1].is_ascii_whitespace(),
            _ => false,
        };
        if boundary && !inside {
            // ". \n" is one break: a blank stretch since the last start moves that start
            let last = out.len() - 1;
            if t[out[last]..i].trim().is_empty() {
                out[last] = i + 1;
            } else {
                out.push(i + 1);
            }
        }
    }
    out
}

/// Chat-template tokens (`<|im_start|>`) end the response; a closing "I hope it is correct."
/// is a courtesy, not the last sentence.
/// Also says whether the sentence was terminated by `.`, `!` or `?` (not cut off).
pub fn last_sentence(s: &str) -> Option<(&str, bool)> {
    let t = s[..s.find("<|").unwrap_or(s.len())].trim_end();
    let starts = sentence_starts(t);
    let mut k = starts.len() - 1;
    let courtesy = |st: usize| {
        t[st..]
            .trim_start()
            .to_ascii_lowercase()
            .starts_with("i hope")
    };
    if k > 0 && courtesy(starts[k]) {
        k -= 1;
    }
    let end = starts.get(k + 1).copied().unwrap_or(t.len());
    let mut sent = t[starts[k]..end].trim();
    let terminated = (sent.ends_with('.') && !sent.ends_with("..")) || sent.ends_with(['!', '?']);
    if terminated {
        sent = sent[..sent.len() - 1].trim_end();
    }
    (!sent.is_empty()).then_some((sent, terminated))
}

/// The stated value of a last sentence: the sentence itself when it holds no words, else the
/// value after its last statement word or `=` that is followed by one, else the value before
/// "is the answer".
/// A unit word may follow the value only in a terminated sentence (`is 2 multiplied` may be cut
/// off mid-phrase).
fn final_statement(sent: &str, terminated: bool, latex: bool) -> Option<String> {
    if words(sent).is_empty() && sent.bytes().any(|c| c.is_ascii_digit()) {
        let v = closed_rhs(strip_delimiters(sent));
        // an expression cut off at an operator ("8*") or a list cut off after a comma
        // ("1, 2, 4, 6,") states nothing: an earlier answer may
        return (!cut_at_operator(v) && !v.ends_with(',')).then(|| v.to_string());
    }
    let mut ends = statement_ends(sent);
    ends.sort_unstable_by_key(|&(_, en)| en);
    for &(word_st, word_at) in ends.iter().rev() {
        // each statement is read inside its window: bounded work per statement word
        let (lo, w) = window(sent, word_st, word_at);
        let (st, at) = (word_st - lo, word_at - lo);
        if negated_before(&w[..st]) {
            // "1 is indeed not equal to 4" denies a value
            return None;
        }
        if lone_number_subject(&w[..st]) || hypothetical(&w[..st]) || about_a_quantity(&w[..st]) {
            // "1 is 5", "6 = 18": a number said to be another is no computed result;
            // "If 8 minus 7 equals 1, ...": a condition, not a result;
            // "the nearest whole number, which is 10": a property of another quantity
            continue;
        }
        // "there are 12 sequences that ...": a count keeps its noun phrase
        let counting = counts_things(w, at);
        let occurrences = counting
            && !w[..at].to_ascii_lowercase().ends_with("there are")
            && !w[..at].to_ascii_lowercase().ends_with("there is");
        if occurrences && hedged_count(&w[at..]) {
            // "appears twice or three times", "occurs about 5 times"
            return None;
        }
        let (tail_words, limit) = if counting {
            (usize::MAX, usize::MAX)
        } else {
            (terminated as usize, MAX_CLOSING_WORDS)
        };
        if let Some((v, end)) = value_and_end(w, at, latex, tail_words) {
            let end = lo + end;
            if crate::restated::repeated_operand(&w[..st], &v) {
                // "add 3 and 7, which is 7": an operand repeated, not the result
                return None;
            }
            // the value must close the sentence: at most a short remark may follow
            let after = &sent[end..];
            let closes = words(after).len() <= limit && !after.bytes().any(|c| c.is_ascii_digit());
            return closes.then_some(v);
        }
    }
    value_before_anchor(sent).or_else(|| closing_segment(sent, latex))
}

/// Whether a statement with `head` before its word is a relative clause about a quantity named
/// without numbers ("round down to the nearest whole number, which is 10"): the clause before
/// ", which" holds a noun but no digit, operator or result word.
fn about_a_quantity(head: &str) -> bool {
    let Some(p) = head.to_ascii_lowercase().rfind(", which") else {
        return false;
    };
    if !head[p + 7..]
        .split_whitespace()
        .all(|w| ADVERBS.contains(&w) || w == "then")
    {
        return false;
    }
    let before = &head[..p];
    let clause = &before[before
        .rfind([',', ';', ':', '\n', '.', '('])
        .map_or(0, |i| i + 1)..];
    // the noun phrase the relative clause is about: its last three words
    let antecedent = clause
        .split_whitespace()
        .rev()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ");
    let lower = antecedent.to_ascii_lowercase();
    let numeric = antecedent
        .bytes()
        .any(|c| c.is_ascii_digit() || b"+-*/=".contains(&c))
        || antecedent
            .split_whitespace()
            .any(|w| number_word(w).is_some());
    let result = [
        "answer",
        "result",
        "sum",
        "product",
        "difference",
        "quotient",
        "total",
        "add",
        "multiply",
        "subtract",
        "divide",
    ]
    .iter()
    .any(|w| lower.contains(w));
    !antecedent.trim().is_empty() && !numeric && !result
}

/// "there are N ...", "appears twice in the text": a count stated with its noun phrase after
/// it (any length).
fn counts_things(sent: &str, at: usize) -> bool {
    let head = sent[..at].to_ascii_lowercase();
    [
        "there are",
        "there is",
        "appears",
        "appear",
        "occurs",
        "occur",
    ]
    .iter()
    .any(|w| head.ends_with(w))
}

/// A math segment that closes the last sentence ("We find that $x < 3$.", "Answer: $9$",
/// "Therefore $x \geq 5$ is the solution."): its content, or its right-hand side when it is a
/// variable-free equation. Plain arithmetic is still refused later ([`unevaluated`]).
fn closing_segment(sent: &str, latex: bool) -> Option<String> {
    if !latex {
        return None;
    }
    let (_, end, content) = segments(sent).pop()?;
    let after = &sent[end..];
    let closes =
        words(after).len() <= MAX_CLOSING_WORDS && !after.bytes().any(|c| c.is_ascii_digit());
    closes.then(|| closed_rhs(content.trim()).to_string())
}

/// (start, end) byte offsets of each `=` and statement word of `sent`.
fn statement_ends(sent: &str) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = top_level_equals(sent)
        .into_iter()
        .map(|i| (i, i + 1))
        .collect();
    let lower = sent.to_ascii_lowercase();
    for w in STATEMENT_WORDS {
        let mut from = 0;
        while let Some(p) = lower[from..].find(w) {
            let st = from + p;
            let en = st + w.len();
            let alpha = |i: Option<&u8>| i.is_some_and(|c| c.is_ascii_alphabetic());
            let before = st.checked_sub(1).and_then(|j| lower.as_bytes().get(j));
            if !alpha(before) && !alpha(lower.as_bytes().get(en)) {
                out.push((st, en));
            }
            from = en;
        }
    }
    out
}

/// "N is the answer": the value that ends the clause before a trailing anchor phrase.
fn value_before_anchor(sent: &str) -> Option<String> {
    let lower = sent.to_ascii_lowercase();
    let p = TRAILING_ANCHORS
        .iter()
        .filter_map(|a| lower.find(a))
        .min()?;
    let head = sent[..p].trim_end();
    let clause_start = head.rfind([',', ';', ':']).map_or(0, |i| i + 1);
    let value = head[clause_start..].trim();
    is_value_text(value).then(|| value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stated(s: &str) -> Option<String> {
        extract_stated(s, &[Target::Latex, Target::Expr], &[], true, 0).map(|e| e.text)
    }

    #[test]
    fn final_statements_in_free_text() {
        assert_eq!(stated("It is 27").as_deref(), Some("27"));
        assert_eq!(stated("So 3*9 = 27.").as_deref(), Some("27"));
        assert_eq!(stated("3 + 4 = 7, easy.").as_deref(), Some("7"));
        assert_eq!(stated("5-0 is 500.").as_deref(), Some("500"));
        assert_eq!(stated("In total, you get 14.").as_deref(), Some("14"));
        assert_eq!(
            stated("10.5 is the answer to 5 + 9.").as_deref(),
            Some("10.5")
        );
        assert_eq!(stated("1 + 8 = 9").as_deref(), Some("9"));
        assert_eq!(stated("0 * 1 = zero.").as_deref(), Some("0"));
        assert_eq!(stated("So 0 * 3 is indeed 0.").as_deref(), Some("0"));
        assert_eq!(stated("The answer is one-third."), None);
        assert_eq!(
            stated("Therefore, 12.\nI hope it is correct.").as_deref(),
            Some("12")
        );
        assert_eq!(stated("so 5 apples are left over"), None);
        assert_eq!(
            stated("It is 2 \\times 10^{-10} m.").as_deref(),
            Some("2 \\times 10^{-10}")
        );
        assert_eq!(stated("It is 3 \\times 9."), None, "unevaluated");
        assert!(!is_value_text("12 +"), "cut off at an operator");
        assert_eq!(stated("1 is indeed not equal to 4."), None, "negated");
        assert_eq!(stated("If 3 + 4 = 7, we are done"), None, "a condition");
    }

    #[test]
    fn no_stated_answer_gives_none() {
        assert_eq!(stated("7-3 is an imaginary number in this case"), None);
        assert_eq!(
            stated("We add 3 and 4 to get 7, then go on to multiply"),
            None
        );
        assert_eq!(
            stated("First 5 apples.\nThen we count 2 and 3 and so on"),
            None
        );
        assert_eq!(stated("so 2 is 2 more than 0"), None);
    }
}
