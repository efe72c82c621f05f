//! Math answer extraction, parsing and equivalence checking. Pure Rust, bounded, never hangs.
//!
//! The verifier is the reward in RL with verifiable rewards, so it must be correct (few missed
//! equivalent answers), hard to exploit (no partial parses or fall-backs to an earlier number)
//! and fast and bounded (no signal timeouts: hard limits on input length, nesting depth, number
//! size and comparison work instead).
//!
//! ```
//! use reinforge_verify::{verify, Options, Status};
//! let v = verify("\\frac{1}{2}", "So the answer is $\\boxed{0.5}$.", &Options::default());
//! assert_eq!(v.status, Status::Correct);
//! ```
//!
//! Free text is read conservatively: only a *stated* final answer of a prediction counts (a box,
//! an "answer is" anchor, a response that is only the answer, or a final "= N" / "is N" statement
//! in the last sentence; see [`stated`] and docs/verifier.md). A response that states none scores
//! 0, and plain arithmetic that merely repeats the question (`7-3`) is not an answer. Exact
//! arithmetic stays exact; a comparison too large to decide exactly is "cannot decide"
//! ([`Verdict::cannot_decide`]), never "equal".
//!
//! Modules: [`extract`] (boxes, anchors, the lenient reading used for gold answers), [`stated`]
//! (the stated-answer policy for predictions) and [`restated`] above [`value`] (written values)
//! and [`scan`] (text positions), [`choice`] (multiple-choice letters),
//! [`numeral`] (mixed numbers, repeating decimals, digit grouping), [`normalize`] + [`lexer`] +
//! [`parser`] (text to [`expr::Expr`]), [`number`] (bounded rationals), [`eval`], [`series`]
//! (ellipsis sums and products), [`realset`], [`equiv`] (equivalence policies), [`verdict`],
//! [`cli`].

pub mod budget;
pub mod canary;
pub mod choice;
pub mod cli;
pub mod equiv;
pub mod eval;
pub mod expr;
pub mod extract;
pub mod lexer;
pub mod normalize;
pub mod number;
pub mod numeral;
pub mod parser;
pub mod probe;
pub mod realset;
pub mod restated;
pub mod sample;
pub mod scan;
pub mod series;
pub mod stated;
pub mod value;
pub mod verdict;

pub use verdict::{Status, Verdict};

use serde::{Deserialize, Serialize};

/// Longest input accepted (bytes); longer inputs are unparsable. Covers 200 KB responses.
pub const MAX_INPUT_BYTES: usize = 1 << 20;
/// Longest extracted answer that is parsed (bytes).
pub const MAX_ANSWER_BYTES: usize = 8192;
/// Default of [`Options::max_statement_bytes`]: 32 KiB, about 8k tokens of the end of a
/// response, where a response commits to its answer.
pub const MAX_STATEMENT_BYTES: usize = 32 << 10;

/// What to extract (Math-Verify's `extraction_targets`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Target {
    /// LaTeX: boxes, anchors, math segments, whole-input answers.
    Latex,
    /// Plain numbers and simple arithmetic only.
    Expr,
    /// Multiple-choice strings (letters).
    String,
}

/// Percent policy: how `p%` compares with a number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum PercentPolicy {
    /// `p%` equals `p/100`, and also `p` (the sign omitted). Default.
    #[default]
    Either,
    /// `p%` equals only `p/100`.
    Fraction,
}

/// Degree policy: how `d°` compares with a number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum DegreePolicy {
    /// `d°` equals `d` and `d·π/180`. Default.
    #[default]
    Either,
    /// `d°` equals only `d·π/180` radians.
    Radians,
    /// `d°` equals only the number `d`.
    Number,
}

/// Which final answer of a prediction counts (gold answers are always read leniently).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum AnswerPolicy {
    /// Only a stated answer: boxed, after an anchor, the whole response, or a final "= N" /
    /// "is N" statement in the last sentence; unevaluated arithmetic is refused. Default. See
    /// [`stated`].
    #[default]
    Stated,
    /// Also the last math segment or plain number anywhere in the response (Math-Verify's
    /// fallback, and this verifier's behaviour before the stated policy). Gameable on free text.
    LastValue,
}

/// Multiple-choice settings (Math-Verify's `StringExtractionConfig`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StringExtraction {
    pub strings: Vec<String>,
    pub lowercase: bool,
    pub try_extract_without_anchor: bool,
}

impl Default for StringExtraction {
    fn default() -> Self {
        StringExtraction {
            strings: ["A", "B", "C", "D"].iter().map(|s| s.to_string()).collect(),
            lowercase: true,
            try_extract_without_anchor: true,
        }
    }
}

/// Per-call settings. Field names follow Math-Verify's where they overlap, so the `options`
/// objects of its test suite deserialize directly; unknown keys are ignored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Options {
    /// Extractors for gold and prediction. Default: latex + expr.
    pub extraction_targets: Vec<Target>,
    /// Compare numbers after rounding to this many decimals (Math-Verify's `float_rounding`).
    /// Unset: exact comparison, with decimal tolerance only for decimal literals.
    pub float_rounding: Option<u32>,
    /// Variable names must match (except bound arguments of function definitions and integer
    /// parameters such as `k`, `n`). `false` allows any renaming.
    pub strict: bool,
    /// Percent policy.
    pub percent: PercentPolicy,
    /// Degree policy.
    pub degrees: DegreePolicy,
    /// Accept a short text prediction whose words all occur in a sentence-long text gold.
    pub text_containment: bool,
    /// Also accept a decimal literal that is the other value truncated (not rounded) to its
    /// digits (41.494 for 41.4949...).
    pub decimal_truncation: bool,
    /// Read `1,22` as 1.22. Unset: on only for expr-only extraction (plain-text numbers).
    pub decimal_comma: Option<bool>,
    /// Multiple-choice settings.
    pub string_extraction: StringExtraction,
    /// Which final answer of a prediction counts.
    pub answer_policy: AnswerPolicy,
    /// Under the stated policy, the bytes at the end of a prediction searched for a final
    /// statement (rules 2-5 of [`stated`]); boxes and anchors are searched everywhere. A
    /// longer prediction's head is not read for statements, and its verdict's reason says so.
    /// Bounds the work of a long answerless response (issue 50). 0: read all of it.
    pub max_statement_bytes: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            extraction_targets: vec![Target::Latex, Target::Expr],
            float_rounding: None,
            strict: true,
            percent: PercentPolicy::Either,
            degrees: DegreePolicy::Either,
            text_containment: true,
            decimal_truncation: true,
            decimal_comma: None,
            string_extraction: StringExtraction::default(),
            answer_policy: AnswerPolicy::Stated,
            max_statement_bytes: MAX_STATEMENT_BYTES,
        }
    }
}

impl Options {
    fn decimal_comma(&self) -> bool {
        self.decimal_comma
            .unwrap_or(self.extraction_targets == [Target::Expr])
    }
}

/// Removes thousands separators (`7,425,000`, `1 000`) and, in decimal-comma mode, reads
/// `1,22` as `1.22`. Only commas at bracket depth 0 between digits are considered, and in the
/// default mode only when *every* such comma is followed by exactly three digits, so `5,1` stays
/// a two-element list and `(1,100)` a tuple.
fn fix_numbers(s: &str, decimal_comma: bool) -> String {
    let c: Vec<char> = s.chars().collect();
    let mut depth = 0i32;
    let mut commas = vec![];
    let mut all_thousands = true;
    for i in 0..c.len() {
        match c[i] {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            ',' if depth <= 0 => {
                let prev_digit = i > 0 && c[i - 1].is_ascii_digit();
                let three = i + 3 < c.len()
                    && (1..=3).all(|k| c.get(i + k).is_some_and(|d| d.is_ascii_digit()))
                    && !c.get(i + 4).is_some_and(|d| d.is_ascii_digit());
                if prev_digit {
                    commas.push((i, three));
                }
                if !(prev_digit && three) {
                    all_thousands = false;
                }
            }
            _ => {}
        }
    }
    let mut out: Vec<char> = Vec::with_capacity(c.len());
    let mut drop = vec![false; c.len()];
    let mut to_point = vec![false; c.len()];
    for &(i, three) in &commas {
        if decimal_comma {
            let lead: String = c[..i]
                .iter()
                .rev()
                .take_while(|d| d.is_ascii_digit())
                .collect();
            if three && lead != "0" && lead.len() <= 3 {
                drop[i] = true;
            } else if c.get(i + 1).is_some_and(|d| d.is_ascii_digit()) {
                to_point[i] = true;
            }
        } else if all_thousands && three {
            drop[i] = true;
        }
    }
    for i in 0..c.len() {
        // "1 000": space between a short digit group and exactly three digits
        if c[i] == ' '
            && i > 0
            && c[i - 1].is_ascii_digit()
            && (1..=3).all(|k| c.get(i + k).is_some_and(|d| d.is_ascii_digit()))
            && !c
                .get(i + 4)
                .is_some_and(|d| d.is_ascii_digit() || *d == '.')
        {
            let lead = c[..i]
                .iter()
                .rev()
                .take_while(|d| d.is_ascii_digit())
                .count();
            if lead <= 3 && !(i > lead && c[i - lead - 1] == '.') {
                continue;
            }
        }
        if drop[i] {
            continue;
        }
        out.push(if to_point[i] { '.' } else { c[i] });
    }
    out.into_iter().collect()
}

/// Parses an extracted answer string into an expression.
pub fn parse_answer(s: &str, opts: &Options) -> Result<expr::Expr, String> {
    if s.len() > MAX_ANSWER_BYTES {
        return Err("answer too long".into());
    }
    let s = normalize::repair_escapes(s);
    let s = numeral::rewrite(&s);
    let s = normalize::canonical(&s);
    let s = fix_numbers(s.trim(), opts.decimal_comma());
    let toks = lexer::lex(&s).ok_or("too many tokens or unbalanced text")?;
    parser::Parser::new(toks).parse_top()
}

fn count_items(e: &expr::Expr) -> usize {
    match e {
        expr::Expr::List(v) | expr::Expr::Set(v) => v.len(),
        _ => 1,
    }
}

/// The prediction's final answer under the options' [`AnswerPolicy`].
fn extract_pred(pred: &str, opts: &Options) -> Option<extract::Extracted> {
    let (t, se) = (&opts.extraction_targets, &opts.string_extraction);
    match opts.answer_policy {
        AnswerPolicy::Stated => {
            let max = opts.max_statement_bytes;
            stated::extract_stated(pred, t, &se.strings, se.lowercase, max)
        }
        AnswerPolicy::LastValue => extract::extract(pred, t, &se.strings, se.lowercase),
    }
}

/// The value `verify` would read from `pred` under `opts`'s answer policy, as written (the
/// right-hand side of an equation, without `$` and a final `.`), or `None` when it states
/// none. The reward-hacking monitor looks for it in the prompt (`reinforge_reward::integrity`).
pub fn stated_answer(pred: &str, opts: &Options) -> Option<String> {
    if pred.len() > MAX_INPUT_BYTES {
        return None;
    }
    let text = extract_pred(&normalize::repair_escapes(pred), opts)?.text;
    let value = text.rsplit('=').next().unwrap_or(&text);
    let value = value.trim_matches(|c: char| c.is_whitespace() || c == '$' || c == '.');
    (!value.is_empty()).then(|| value.to_string())
}

/// Verdict of a multiple-choice comparison (`pred` is the stated letter, if any).
fn choice_verdict(gold: &str, pred: Option<String>) -> Verdict {
    match pred {
        Some(p) if p == gold => Verdict::new(Status::Correct, "same choice"),
        Some(_) => Verdict::new(Status::Incorrect, "different choice"),
        None => Verdict::new(Status::UnparsablePred, "no stated choice in prediction"),
    }
}

/// Checks `pred` (a response or a bare answer) against `gold`.
///
/// The gold's answer is extracted leniently (it is trusted); the prediction's under
/// [`Options::answer_policy`], by default only a *stated* final answer (see [`stated`]): a
/// response that states none scores [`Status::UnparsablePred`]. Numbers are compared exactly at
/// any size; a comparison too large to decide exactly is [`Verdict::cannot_decide`], never
/// "equal".
pub fn verify(gold: &str, pred: &str, opts: &Options) -> Verdict {
    if gold.len() > MAX_INPUT_BYTES {
        return Verdict::new(Status::UnparsableGold, "gold longer than the input limit");
    }
    if pred.len() > MAX_INPUT_BYTES {
        return Verdict::new(
            Status::UnparsablePred,
            "prediction longer than the input limit",
        );
    }
    let gold = &normalize::repair_escapes(gold);
    let pred = &normalize::repair_escapes(pred);
    let t = &opts.extraction_targets;
    let se = &opts.string_extraction;
    let Some(g) = extract::extract(gold, t, &se.strings, se.lowercase) else {
        return Verdict::new(Status::UnparsableGold, "no answer found in gold");
    };
    if t.as_slice() != [Target::String] {
        if let Some(gl) = choice::gold_letter(gold, se) {
            return choice_verdict(&gl, choice::stated_letter(pred, se));
        }
    }
    let mut v = verify_extracted(gold, &g, pred, opts);
    if let Some(note) = unread_head(pred, opts) {
        v.reason = format!("{} ({note})", v.reason);
    }
    v
}

/// What a verdict on `pred` says when its head was not read for statements
/// ([`Options::max_statement_bytes`]), if it was not.
fn unread_head(pred: &str, opts: &Options) -> Option<String> {
    let max = opts.max_statement_bytes;
    let stated = opts.answer_policy == AnswerPolicy::Stated
        && opts.extraction_targets.as_slice() != [Target::String];
    (stated && max > 0 && pred.len() > max).then(|| {
        format!(
            "statements read in the last {max} of {} bytes only: max_statement_bytes",
            pred.len()
        )
    })
}

/// The verdict on `pred` against the gold answer `g` extracted from `gold` (not a choice
/// letter): the prediction's answer under the answer policy, parsed and compared.
fn verify_extracted(gold: &str, g: &extract::Extracted, pred: &str, opts: &Options) -> Verdict {
    let t = &opts.extraction_targets;
    let se = &opts.string_extraction;
    let Some(p) = extract_pred(pred, opts) else {
        return Verdict::new(Status::UnparsablePred, "no stated answer in prediction");
    };
    if opts.answer_policy == AnswerPolicy::Stated
        && !matches!(p.source, extract::Source::Boxed(_))
        && stated::unevaluated(&p.text)
    {
        return Verdict::new(
            Status::UnparsablePred,
            "unevaluated arithmetic is not a stated answer",
        );
    }
    if t.as_slice() == [Target::String] {
        let n = |x: &str| {
            if se.lowercase {
                x.to_lowercase()
            } else {
                x.to_string()
            }
        };
        return if n(&g.text) == n(&p.text) {
            Verdict::new(Status::Correct, "same choice")
        } else {
            Verdict::new(Status::Incorrect, "different choice")
        };
    }
    let ge = match parse_answer(&g.text, opts) {
        Ok(e) => e,
        Err(e) => return Verdict::new(Status::UnparsableGold, &format!("gold: {e}")),
    };
    let pe = match parse_answer(&p.text, opts) {
        Ok(e) => e,
        Err(e) => return Verdict::new(Status::UnparsablePred, &format!("prediction: {e}")),
    };
    let ctx = equiv::Ctx::new(opts);
    // a text prediction against a prose gold (a sentence with some math in it): compare with the
    // whole sentence as text (the `text_containment` policy decides)
    let prose_gold = matches!(g.source, extract::Source::Segment | extract::Source::Number)
        && matches!(pe, expr::Expr::Text(_));
    if prose_gold && equiv::equivalent(&expr::Expr::Text(gold.replace('$', " ")), &pe, &ctx) {
        return Verdict::new(Status::Correct, "equivalent text");
    }
    if equiv::equivalent(&ge, &pe, &ctx) {
        Verdict::new(Status::Correct, "equivalent")
    } else if ctx.undecided() {
        Verdict::cannot_decide("too large to compare exactly")
    } else if matches!(p.source, extract::Source::Boxed(n) if n > 1)
        && count_items(&equiv::prep(&ge)) == 1
    {
        Verdict::new(
            Status::Incorrect,
            "several boxed answers for a single-valued gold",
        )
    } else {
        Verdict::new(Status::Incorrect, "not equivalent")
    }
}
