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

use crate::extract::{last_anchor, marked, prose_words, segment_at, segments, Extracted, Source};
use crate::Target;

/// Words that make a text a sentence rather than a bare answer.
const VERBS: &[&str] = &[
    "is", "are", "was", "were", "equals", "equal", "get", "gets", "got", "gives", "makes", "be",
];

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
pub fn extract_stated(
    s: &str,
    targets: &[Target],
    choices: &[String],
    lowercase: bool,
) -> Option<Extracted> {
    if targets == [Target::String] {
        return crate::extract::extract(s, targets, choices, lowercase);
    }
    let latex = targets.contains(&Target::Latex);
    if let Some(e) = marked(s, latex, true) {
        return Some(e);
    }
    if let Some((_, anchor_end)) = last_anchor(&s.to_ascii_lowercase()) {
        // an anchor whose answer cannot be read: no fallback to another number, except a
        // result stated in a later last sentence ("The final answer is the sum of ...
        // Therefore, 8 + 4 = 12.")
        return later_statement(s, anchor_end, latex).map(|text| Extracted {
            text,
            source: Source::Statement,
        });
    }
    let w = words(s);
    let whole = only_answer(s, &w);
    if whole && w.is_empty() {
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
        .or_else(|| crate::restated::earlier_answer(s));
    match statement {
        Some(text) => Some(Extracted {
            text,
            source: Source::Statement,
        }),
        None => whole.then(|| whole_answer(s)),
    }
}

/// A first line that is only a variable-free equation with a value on the right (`1 + 4 = 5`
/// before an explanation): its right-hand side. Used only when the last sentence states nothing.
pub(crate) fn first_line_equation(s: &str) -> Option<String> {
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
pub(crate) fn first_line_value(s: &str) -> Option<String> {
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

/// Whether the sentence `sent` is only a list number ("3." after lines that start "1." and
/// "2."): the label of an item, not a value.
pub(crate) fn numbered_item(s: &str, sent: &str, terminated: bool) -> bool {
    let Ok(n) = sent.trim().parse::<u32>() else {
        return false;
    };
    let item_start = |k: u32| {
        s.lines()
            .any(|l| l.trim_start().starts_with(&format!("{k}. ")))
    };
    terminated && ((n > 1 && item_start(n - 1)) || item_start(n + 1))
}

/// The final statement of the last sentence when that sentence starts after byte offset `at`.
fn later_statement(s: &str, at: usize, latex: bool) -> Option<String> {
    let (sent, terminated) = last_sentence(s)?;
    let start = sent.as_ptr() as usize - s.as_ptr() as usize;
    (start > at)
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

/// Prose words of `t`: runs of two or more ASCII letters, lower-cased, outside math segments,
/// LaTeX command names and `\text{}`-like bodies, and not labels (a word directly followed by
/// `:` or `=`, as in "Minimum = 1").
fn words(t: &str) -> Vec<String> {
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

/// `t` without surrounding `$`, `$$`, `\(...\)`, `\[...\]` when they enclose all of it.
fn strip_delimiters(t: &str) -> &str {
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
fn top_level_equals(t: &str) -> Vec<usize> {
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
fn closed_rhs(t: &str) -> &str {
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
    for &(st, at) in ends.iter().rev() {
        if negated_before(&sent[..st]) {
            // "1 is indeed not equal to 4" denies a value
            return None;
        }
        if lone_number_subject(&sent[..st])
            || hypothetical(&sent[..st])
            || about_a_quantity(&sent[..st])
        {
            // "1 is 5", "6 = 18": a number said to be another is no computed result;
            // "If 8 minus 7 equals 1, ...": a condition, not a result;
            // "the nearest whole number, which is 10": a property of another quantity
            continue;
        }
        // "there are 12 sequences that ...": a count keeps its noun phrase
        let counting = counts_things(sent, at);
        let occurrences = counting
            && !sent[..at].to_ascii_lowercase().ends_with("there are")
            && !sent[..at].to_ascii_lowercase().ends_with("there is");
        if occurrences && hedged_count(&sent[at..]) {
            // "appears twice or three times", "occurs about 5 times"
            return None;
        }
        let (tail_words, limit) = if counting {
            (usize::MAX, usize::MAX)
        } else {
            (terminated as usize, MAX_CLOSING_WORDS)
        };
        if let Some((v, end)) = value_and_end(sent, at, latex, tail_words) {
            if crate::restated::repeated_operand(&sent[..st], &v) {
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

/// Whether the text after a count verb ("appears", "occurs"), up to a quote, hedges (a negation
/// or hedge word) or names more than one number ("twice or three times", "twice, 3 times").
pub(crate) fn hedged_count(t: &str) -> bool {
    // quoted text is what is counted in, not what is said
    let t = &t[..t.find(['"', '“']).unwrap_or(t.len())];
    let numbers = t
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| w.starts_with(|c: char| c.is_ascii_digit()) || number_word(w).is_some())
        .count();
    numbers > 1 || crate::restated::negated(t)
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
fn lone_number_subject(head: &str) -> bool {
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
const ADVERBS: &[&str] = &[
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

/// `t` up to its first clause break: `,`/`;` followed by a space or the end, `!`, `?`, `(` after
/// a space, a sentence end or a newline.
fn clause(t: &str) -> &str {
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
fn first_word(t: &str) -> Option<usize> {
    prose_letters(t).next()
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

    fn stated(s: &str) -> Option<String> {
        extract_stated(s, &[Target::Latex, Target::Expr], &[], true).map(|e| e.text)
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
