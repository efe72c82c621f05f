//! Multi-digit addition with two written solution patterns.
//!
//! A prompt is `347+865=` (operands zero-padded to `digits` digits). A completion is one of:
//!
//! * **direct**: `>1212`, the sum (zero-padded to `digits + 1` digits) with no working;
//! * **columns**: `7+5+0=12,4+6+1=11,3+8+1=12>1212`, one step per column from the units up,
//!   each adding the two digits and the carry in, then the sum read off the steps.
//!
//! Both end with `<eos>`. The direct pattern asks a small model to propagate every carry in one
//! shot, so after the same SFT it succeeds far less often than the columns pattern: the gap RL
//! is expected to exploit by choosing the columns pattern more often.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::tokenizer::CharTokenizer;

/// Characters the task's prompts and completions use.
pub const ALPHABET: &str = "0123456789+=,>";

/// The solution pattern a completion follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pattern {
    /// The sum straight away: `>1212`.
    Direct,
    /// Column-by-column addition with explicit carries, then the sum.
    Columns,
    /// Anything else (malformed output).
    Other,
}

impl Pattern {
    /// The patterns a well-formed completion can follow, in report order.
    pub const SOLUTION_PATTERNS: [Pattern; 2] = [Pattern::Direct, Pattern::Columns];
    /// Every class the classifier can return.
    pub const ALL: [Pattern; 3] = [Pattern::Direct, Pattern::Columns, Pattern::Other];

    /// Stable lower-case name used in configs, metrics and reports.
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Direct => "direct",
            Pattern::Columns => "columns",
            Pattern::Other => "other",
        }
    }
}

/// The outcome of checking a completion's final answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Correct,
    Incorrect,
    /// No single final answer could be read (no `>`, several `>`, or non-digits after it).
    Unparsable,
}

impl Verdict {
    /// The reward RLVR uses: 1 for a correct answer, 0 otherwise.
    pub fn reward(self) -> f64 {
        if self == Verdict::Correct {
            1.0
        } else {
            0.0
        }
    }
}

/// One addition problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem {
    pub a: u64,
    pub b: u64,
}

/// Which problems a draw comes from: the training and held-out sets never share a problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    Train,
    Heldout,
}

/// The addition task with operands of `digits` digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArithTask {
    pub digits: u32,
}

/// One held-out problem in this many (by a hash of the problem, so the split is fixed for a
/// given `digits` whatever the seed).
const HELDOUT_ONE_IN: u64 = 8;

impl ArithTask {
    /// A task with `digits`-digit operands (1 to 9).
    pub fn new(digits: u32) -> Self {
        assert!(
            (1..=9).contains(&digits),
            "digits must be in 1..=9, got {digits}"
        );
        Self { digits }
    }

    /// The character tokenizer for this task.
    pub fn tokenizer() -> CharTokenizer {
        CharTokenizer::new(ALPHABET)
    }

    fn bound(&self) -> u64 {
        10u64.pow(self.digits)
    }

    /// The prompt text, e.g. `347+865=`.
    pub fn prompt(&self, p: &Problem) -> String {
        let w = self.digits as usize;
        format!("{:0w$}+{:0w$}=", p.a, p.b)
    }

    /// The reference completion of `p` in `pattern` (without `<eos>`).
    /// `Pattern::Other` has no reference and panics.
    pub fn completion(&self, p: &Problem, pattern: Pattern) -> String {
        let answer = format!(">{:0w$}", p.a + p.b, w = self.digits as usize + 1);
        match pattern {
            Pattern::Direct => answer,
            Pattern::Columns => {
                let mut steps = Vec::with_capacity(self.digits as usize);
                let (mut a, mut b, mut carry) = (p.a, p.b, 0);
                for _ in 0..self.digits {
                    let (da, db) = (a % 10, b % 10);
                    let s = da + db + carry;
                    steps.push(format!("{da}+{db}+{carry}={s:02}"));
                    carry = s / 10;
                    a /= 10;
                    b /= 10;
                }
                steps.join(",") + &answer
            }
            Pattern::Other => panic!("Pattern::Other has no reference completion"),
        }
    }

    fn is_heldout(&self, p: &Problem) -> bool {
        splitmix64(p.a * self.bound() + p.b).is_multiple_of(HELDOUT_ONE_IN)
    }

    /// Draws one problem of `split` uniformly.
    pub fn sample(&self, rng: &mut impl Rng, split: Split) -> Problem {
        loop {
            let p = Problem {
                a: rng.gen_range(0..self.bound()),
                b: rng.gen_range(0..self.bound()),
            };
            if self.is_heldout(&p) == (split == Split::Heldout) {
                return p;
            }
        }
    }

    /// `n` problems of `split` drawn with a generator seeded by `seed`.
    pub fn problems(&self, seed: u64, n: usize, split: Split) -> Vec<Problem> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..n).map(|_| self.sample(&mut rng, split)).collect()
    }

    /// Checks the final answer of `completion` (text before `<eos>`) against `p`.
    pub fn verify(&self, p: &Problem, completion: &str) -> Verdict {
        let mut parts = completion.split('>');
        let (Some(_), Some(answer), None) = (parts.next(), parts.next(), parts.next()) else {
            return Verdict::Unparsable;
        };
        // At most 20 digits fit a u64; anything longer cannot be a sum of two u64 operands here.
        if answer.is_empty() || answer.len() > 19 || !answer.bytes().all(|c| c.is_ascii_digit()) {
            return Verdict::Unparsable;
        }
        match answer.parse::<u64>() {
            Ok(v) if v == p.a + p.b => Verdict::Correct,
            Ok(_) => Verdict::Incorrect,
            Err(_) => Verdict::Unparsable,
        }
    }

    /// Names the pattern `completion` follows, from its opening: `>` then digits is direct;
    /// a first column step `d+d+d=dd` is columns; anything else is other.
    pub fn classify(&self, completion: &str) -> Pattern {
        let bytes = completion.as_bytes();
        if bytes.first() == Some(&b'>') {
            return Pattern::Direct;
        }
        let shape = b"d+d+d=dd";
        let is_step = bytes.len() >= shape.len()
            && shape.iter().zip(bytes).all(|(&s, &c)| {
                if s == b'd' {
                    c.is_ascii_digit()
                } else {
                    s == c
                }
            });
        if is_step {
            Pattern::Columns
        } else {
            Pattern::Other
        }
    }
}

/// SplitMix64: a fixed, well-mixed hash so the held-out split does not depend on the seed.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: Problem = Problem { a: 347, b: 865 };

    #[test]
    fn prompt_and_reference_completions() {
        let t = ArithTask::new(3);
        assert_eq!(t.prompt(&P), "347+865=");
        assert_eq!(t.prompt(&Problem { a: 7, b: 42 }), "007+042=");
        assert_eq!(t.completion(&P, Pattern::Direct), ">1212");
        assert_eq!(
            t.completion(&P, Pattern::Columns),
            "7+5+0=12,4+6+1=11,3+8+1=12>1212"
        );
        assert_eq!(
            t.completion(&Problem { a: 1, b: 2 }, Pattern::Columns),
            "1+2+0=03,0+0+0=00,0+0+0=00>0003"
        );
    }

    #[test]
    fn references_verify_and_classify() {
        let t = ArithTask::new(4);
        for p in t.problems(3, 200, Split::Train) {
            for pat in Pattern::SOLUTION_PATTERNS {
                let c = t.completion(&p, pat);
                assert_eq!(t.verify(&p, &c), Verdict::Correct, "{c}");
                assert_eq!(t.classify(&c), pat, "{c}");
            }
        }
    }

    #[test]
    fn verifier_on_hand_written_completions() {
        let t = ArithTask::new(3);
        assert_eq!(t.verify(&P, ">1212"), Verdict::Correct);
        assert_eq!(
            t.verify(&P, ">01212"),
            Verdict::Correct,
            "leading zeros are the same number"
        );
        assert_eq!(t.verify(&P, ">1211"), Verdict::Incorrect);
        assert_eq!(
            t.verify(&P, "7+5+0=12,4+6+1=11,3+8+1=12>1112"),
            Verdict::Incorrect,
            "wrong answer after right steps"
        );
        assert_eq!(
            t.verify(&P, "1212"),
            Verdict::Unparsable,
            "no answer marker"
        );
        assert_eq!(t.verify(&P, ">"), Verdict::Unparsable, "empty answer");
        assert_eq!(
            t.verify(&P, ">12,12"),
            Verdict::Unparsable,
            "non-digits are not skipped"
        );
        assert_eq!(
            t.verify(&P, ">1212>1212"),
            Verdict::Unparsable,
            "two answers never count"
        );
        assert_eq!(
            t.verify(&P, ">99999999999999999999999"),
            Verdict::Unparsable
        );
    }

    #[test]
    fn classifier_on_hand_written_completions() {
        let t = ArithTask::new(3);
        assert_eq!(t.classify(">1212"), Pattern::Direct);
        assert_eq!(t.classify(">"), Pattern::Direct);
        assert_eq!(
            t.classify("7+5+0=12,4+6"),
            Pattern::Columns,
            "a truncated columns solution"
        );
        assert_eq!(t.classify("7+5+0=1"), Pattern::Other);
        assert_eq!(t.classify("1212"), Pattern::Other);
        assert_eq!(t.classify(""), Pattern::Other);
    }

    #[test]
    fn splits_are_disjoint_and_seeded() {
        let t = ArithTask::new(2);
        let train = t.problems(1, 2000, Split::Train);
        let held = t.problems(1, 300, Split::Heldout);
        assert!(held.iter().all(|h| !train.contains(h)));
        assert_eq!(
            t.problems(9, 50, Split::Train),
            t.problems(9, 50, Split::Train)
        );
        assert_ne!(
            t.problems(9, 50, Split::Train),
            t.problems(10, 50, Split::Train)
        );
    }
}
