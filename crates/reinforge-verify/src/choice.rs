//! Multiple-choice answers under the default (LaTeX + expression) targets.
//!
//! When the gold is a single choice letter, the prediction's stated letter is compared instead
//! of parsing it as math: `**(B)**`, `B) 42`, `(B) 42`, `B: 42`, `\boxed{B}`, "The answer is
//! B: 42" and "Option B" all state B. The letter must be marked as a choice (brackets, a
//! following `)`/`.`/`:`, bold, a box or an anchor), so the article in "A cat has 4 legs" is not
//! read as choice A.

use crate::extract::{marked, Source};
use crate::StringExtraction;
use regex::Regex;
use std::sync::LazyLock;

/// A choice letter at the start of `t`, with its formatting and optional option text.
fn leading_letter(t: &str) -> Option<char> {
    static LETTER: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(
            r"^[\s*_]*(?i:(?:option|choice)\s+)?[\s*_]*(?:[(\[][\s*_]*([A-Za-z])[\s*_]*[)\]]|([A-Za-z])[*_]*(?:[).:]|\s*$|\s+[-–—]\s))",
        )
        .unwrap()
    });
    let c = LETTER.captures(t.trim_start())?;
    c.get(1).or(c.get(2))?.as_str().chars().next()
}

/// `letter` as one of the configured choices (case-folded when `lowercase`).
fn as_choice(letter: char, se: &StringExtraction) -> Option<String> {
    let norm = |x: &str| {
        if se.lowercase {
            x.to_lowercase()
        } else {
            x.to_string()
        }
    };
    let l = norm(&letter.to_string());
    se.strings.iter().any(|c| norm(c) == l).then_some(l)
}

/// The gold's choice letter, when the whole gold is one (`B`, `(B)`, `B)`, `**B**`).
pub fn gold_letter(gold: &str, se: &StringExtraction) -> Option<String> {
    let g = gold.trim().trim_matches('$').trim();
    let short = g.chars().filter(|c| c.is_alphanumeric()).count() == 1;
    if !short {
        return None;
    }
    as_choice(leading_letter(g)?, se)
}

/// The prediction's stated choice letter: in the last box or after the last anchor, else at
/// the start of the response or of its last line.
pub fn stated_letter(pred: &str, se: &StringExtraction) -> Option<String> {
    if let Some(e) = marked(pred, true, false) {
        let text = match e.source {
            Source::Boxed(_) => e.text,
            _ => anchored_rest(pred).unwrap_or(e.text),
        };
        return leading_letter(&text).and_then(|l| as_choice(l, se));
    }
    let last_line = pred.trim().lines().last().unwrap_or("");
    [pred, last_line]
        .iter()
        .find_map(|t| leading_letter(t).and_then(|l| as_choice(l, se)))
}

/// The raw text after the last "answer is" / "answer:" anchor (the letter's formatting kept).
fn anchored_rest(pred: &str) -> Option<String> {
    let lower = pred.to_ascii_lowercase();
    let at = ["answer is", "answer:"]
        .iter()
        .filter_map(|a| lower.rfind(a).map(|p| p + a.len()))
        .max()?;
    Some(pred[at..].trim_start_matches([' ', ':']).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn letter(p: &str) -> Option<String> {
        stated_letter(p, &StringExtraction::default())
    }

    #[test]
    fn formatted_letters_and_option_text() {
        for p in [
            "**(B)**",
            "B) 42",
            "(B) 42",
            "The answer is B: 42",
            "The answer is **B**.",
            "\\boxed{B}",
            "Option B",
            "We compare.\nB. 42",
        ] {
            assert_eq!(letter(p).as_deref(), Some("b"), "{p}");
        }
    }

    #[test]
    fn articles_and_words_are_not_letters() {
        assert_eq!(letter("A cat has 4 legs"), None);
        assert_eq!(letter("Because 42 is even"), None);
        assert_eq!(gold_letter("A cat", &StringExtraction::default()), None);
        assert_eq!(
            gold_letter("(C)", &StringExtraction::default()).as_deref(),
            Some("c")
        );
    }
}
