//! DERL's atomic reward primitives over one arithmetic completion, and their weighted
//! composition. Every primitive is a pure function of the task, the problem and the completion
//! text (before `<eos>`) with a value in [0, 1]; a truncated completion earns nothing from any.

use std::fmt;
use std::str::FromStr;

use reinforge_tasks::{ArithTask, Pattern, Problem};
use serde::{Deserialize, Serialize};

/// One atomic reward primitive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Primitive {
    /// 1 when the final answer equals the sum (the hand-written default reward).
    Exact,
    /// Share of the answer's digits (zero-padded to `digits + 1`) equal to the sum's.
    Digits,
    /// Share of the reference column steps (`a+b+carry=ss`, carries included) written
    /// correctly, in order.
    Carries,
    /// 1 when the completion follows the columns pattern (the one that succeeds more often).
    Pattern,
    /// 1 up to the length of a full columns solution, then that length over the completion's.
    Length,
    /// 1 when there is exactly one `>` followed by `digits + 1` digits.
    Format,
}

impl Primitive {
    /// Every primitive, in the meta-policy's order.
    pub const ALL: [Primitive; 6] = [
        Primitive::Exact,
        Primitive::Digits,
        Primitive::Carries,
        Primitive::Pattern,
        Primitive::Length,
        Primitive::Format,
    ];

    /// Stable lower-case name used in state files and reports.
    pub fn name(self) -> &'static str {
        match self {
            Primitive::Exact => "exact",
            Primitive::Digits => "digits",
            Primitive::Carries => "carries",
            Primitive::Pattern => "pattern",
            Primitive::Length => "length",
            Primitive::Format => "format",
        }
    }

    /// The primitive's value for `completion` of `p` (0 when truncated).
    pub fn value(self, task: &ArithTask, p: &Problem, completion: &str, truncated: bool) -> f64 {
        if truncated {
            return 0.0;
        }
        match self {
            Primitive::Exact => exact(task, p, completion),
            Primitive::Digits => digits(task, p, completion),
            Primitive::Carries => carries(task, p, completion),
            Primitive::Pattern => pattern(task, completion),
            Primitive::Length => length(task, p, completion),
            Primitive::Format => format(task, completion),
        }
    }
}

impl fmt::Display for Primitive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Primitive {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> anyhow::Result<Self> {
        Primitive::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Primitive::ALL.iter().map(|p| p.name()).collect();
                anyhow::anyhow!("unknown primitive `{s}`; valid: {}", names.join(", "))
            })
    }
}

/// The exact verifier's reward.
pub fn exact(task: &ArithTask, p: &Problem, completion: &str) -> f64 {
    task.verify(p, completion).reward()
}

/// The text after the single `>`, if there is exactly one.
fn answer(completion: &str) -> Option<&str> {
    let mut parts = completion.split('>');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(_), Some(a), None) => Some(a),
        _ => None,
    }
}

/// The reference sum zero-padded to `digits + 1` digits.
fn reference_answer(task: &ArithTask, p: &Problem) -> String {
    format!("{:0w$}", p.a + p.b, w = task.digits as usize + 1)
}

/// Per-digit partial credit: matching positions of the answer and the padded sum, over the
/// sum's width (a longer or shorter answer loses the positions it misses).
pub fn digits(task: &ArithTask, p: &Problem, completion: &str) -> f64 {
    let Some(given) = answer(completion) else {
        return 0.0;
    };
    let reference = reference_answer(task, p);
    let matching = given
        .bytes()
        .zip(reference.bytes())
        .filter(|(g, r)| g == r)
        .count();
    matching as f64 / given.len().max(reference.len()) as f64
}

/// Share of the reference column steps that appear, in order, as the completion's steps.
pub fn carries(task: &ArithTask, p: &Problem, completion: &str) -> f64 {
    let reference = task.completion(p, Pattern::Columns);
    let working = reference.split('>').next().unwrap_or_default();
    let expected: Vec<&str> = working.split(',').collect();
    let written: Vec<&str> = completion
        .split('>')
        .next()
        .unwrap_or_default()
        .split(',')
        .collect();
    let right = expected
        .iter()
        .zip(&written)
        .filter(|(e, w)| e == w)
        .count();
    right as f64 / expected.len().max(1) as f64
}

/// 1 when the completion opens with a column step (the columns pattern).
pub fn pattern(task: &ArithTask, completion: &str) -> f64 {
    f64::from(u8::from(task.classify(completion) == Pattern::Columns))
}

/// 1 while the completion is no longer than the columns reference, then that length over its.
pub fn length(task: &ArithTask, p: &Problem, completion: &str) -> f64 {
    let limit = task.completion(p, Pattern::Columns).len();
    let len = completion.len();
    if len <= limit {
        1.0
    } else {
        limit as f64 / len as f64
    }
}

/// 1 when the answer is one `>` then exactly `digits + 1` digits.
pub fn format(task: &ArithTask, completion: &str) -> f64 {
    let ok = answer(completion).is_some_and(|a| {
        a.len() == task.digits as usize + 1 && a.bytes().all(|c| c.is_ascii_digit())
    });
    f64::from(u8::from(ok))
}

/// A composed reward: primitives that are on, each with its weight; the reward is the
/// weighted mean of their values (0 when none is on).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Composition {
    pub terms: Vec<(Primitive, f64)>,
}

impl Composition {
    /// The hand-written default: the exact answer alone.
    pub fn default_reward() -> Self {
        Self {
            terms: vec![(Primitive::Exact, 1.0)],
        }
    }

    /// The composed reward of `completion`.
    pub fn reward(&self, task: &ArithTask, p: &Problem, completion: &str, truncated: bool) -> f64 {
        let total: f64 = self.terms.iter().map(|(_, w)| w).sum();
        if total <= 0.0 {
            return 0.0;
        }
        self.terms
            .iter()
            .map(|&(prim, w)| w * prim.value(task, p, completion, truncated))
            .sum::<f64>()
            / total
    }

    /// `exact*1 + digits*0.5`, or `none`.
    pub fn describe(&self) -> String {
        if self.terms.is_empty() {
            return "none".into();
        }
        self.terms
            .iter()
            .map(|(p, w)| format!("{p}*{w}"))
            .collect::<Vec<_>>()
            .join(" + ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: Problem = Problem { a: 347, b: 865 };

    fn task() -> ArithTask {
        ArithTask::new(3)
    }

    #[test]
    fn exact_credits_only_the_sum() {
        assert_eq!(exact(&task(), &P, ">1212"), 1.0);
        assert_eq!(exact(&task(), &P, ">1213"), 0.0);
        assert_eq!(exact(&task(), &P, "1212"), 0.0);
    }

    #[test]
    fn digits_gives_partial_credit_per_position() {
        assert_eq!(digits(&task(), &P, ">1212"), 1.0);
        assert_eq!(digits(&task(), &P, ">1213"), 0.75);
        assert_eq!(digits(&task(), &P, ">12"), 0.5);
        assert_eq!(digits(&task(), &P, ">121200"), 4.0 / 6.0);
        assert_eq!(digits(&task(), &P, "no answer"), 0.0);
        assert_eq!(digits(&task(), &P, ">12>12"), 0.0);
    }

    #[test]
    fn carries_counts_correct_column_steps_in_order() {
        let full = task().completion(&P, Pattern::Columns);
        assert_eq!(carries(&task(), &P, &full), 1.0);
        // The second step's carry in is wrong (0 instead of 1).
        let one_wrong = "7+5+0=12,4+6+0=10,3+8+1=12>1212";
        assert!((carries(&task(), &P, one_wrong) - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(carries(&task(), &P, ">1212"), 0.0);
    }

    #[test]
    fn pattern_is_one_for_columns_only() {
        let full = task().completion(&P, Pattern::Columns);
        assert_eq!(pattern(&task(), &full), 1.0);
        assert_eq!(pattern(&task(), ">1212"), 0.0);
        assert_eq!(pattern(&task(), "junk"), 0.0);
    }

    #[test]
    fn length_decays_past_a_full_columns_solution() {
        let full = task().completion(&P, Pattern::Columns);
        assert_eq!(length(&task(), &P, &full), 1.0);
        assert_eq!(length(&task(), &P, ">1212"), 1.0);
        let twice = format!("{full}{full}");
        assert!((length(&task(), &P, &twice) - 0.5).abs() < 1e-12);
    }

    #[test]
    fn format_wants_one_answer_of_the_padded_width() {
        assert_eq!(format(&task(), ">1212"), 1.0);
        assert_eq!(format(&task(), ">0012"), 1.0);
        assert_eq!(format(&task(), ">12"), 0.0);
        assert_eq!(format(&task(), ">12a2"), 0.0);
        assert_eq!(format(&task(), ">1212>1"), 0.0);
    }

    #[test]
    fn truncated_completions_earn_nothing() {
        for prim in Primitive::ALL {
            assert_eq!(prim.value(&task(), &P, ">1212", true), 0.0, "{prim}");
        }
    }

    #[test]
    fn composition_is_the_weighted_mean() {
        let c = Composition {
            terms: vec![(Primitive::Exact, 1.0), (Primitive::Digits, 3.0)],
        };
        // exact 0, digits 0.75: (0 + 3 * 0.75) / 4.
        assert!((c.reward(&task(), &P, ">1213", false) - 0.5625).abs() < 1e-12);
        assert_eq!(
            Composition { terms: vec![] }.reward(&task(), &P, ">1212", false),
            0.0
        );
        assert_eq!(
            Composition::default_reward().reward(&task(), &P, ">1212", false),
            1.0
        );
        assert_eq!(c.describe(), "exact*1 + digits*3");
    }

    #[test]
    fn names_round_trip_and_unknown_names_list_the_valid_ones() {
        for p in Primitive::ALL {
            assert_eq!(p.name().parse::<Primitive>().unwrap(), p);
        }
        let err = "carry".parse::<Primitive>().unwrap_err().to_string();
        assert!(err.contains("carries"), "{err}");
    }
}
