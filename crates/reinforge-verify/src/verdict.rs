//! Verdicts: the outcome of one check, with a short reason.

use serde::{Deserialize, Serialize};

/// Outcome category.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The prediction is equivalent to the gold.
    Correct,
    /// Both parsed, not equivalent.
    Incorrect,
    /// The prediction's answer could not be found or parsed (never a fallback to another value).
    UnparsablePred,
    /// The gold could not be found or parsed: a data problem, not the policy's fault.
    UnparsableGold,
}

/// Result of [`crate::verify`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub status: Status,
    pub reason: String,
    /// The comparison was too large to decide exactly (huge powers, factorials): scored as
    /// [`Status::Incorrect`], never as equal.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub undecided: bool,
}

impl Verdict {
    /// New verdict.
    pub fn new(status: Status, reason: &str) -> Self {
        Verdict {
            status,
            reason: reason.to_string(),
            undecided: false,
        }
    }
    /// "Cannot decide": an exact comparison that would exceed the size limits. Scores 0.
    pub fn cannot_decide(reason: &str) -> Self {
        Verdict {
            status: Status::Incorrect,
            reason: format!("cannot decide: {reason}"),
            undecided: true,
        }
    }
    /// Whether the reward should be positive.
    pub fn correct(&self) -> bool {
        self.status == Status::Correct
    }
}
