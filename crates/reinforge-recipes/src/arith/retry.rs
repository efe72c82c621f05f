//! The arithmetic task as a multi-turn episode with feedback (`task.attempts > 1`): after a
//! wrong or unparsable answer the environment poses the same problem again (`<bos>` and the
//! problem, the tokens a fresh attempt starts with), up to `task.attempts` attempts; an answer
//! right at attempt `k` (0-based) scores `1 / (k + 1)`, so a first-try answer is worth most.
//! The episode's label (for `pattern/*_share`) is its first attempt's solution pattern.

use anyhow::Result;
use reinforge_tasks::{ArithTask, Pattern, Problem, Verdict};

use reinforge_train::multi_turn::Turns;

/// One episode: the problem, its prompt ids, the attempt under way, and how it went.
pub struct Attempts {
    pub problem: Problem,
    pub prompt: Vec<i64>,
    pub attempt: usize,
    pub solved_at: Option<usize>,
    pub first_pattern: Option<Pattern>,
}

impl Attempts {
    /// The episode's reward: `1 / (k + 1)` for an answer right at attempt `k`, else 0.
    pub fn reward(&self) -> f64 {
        self.solved_at.map_or(0.0, |k| 1.0 / (k as f64 + 1.0))
    }
}

/// The environment's side: verify each attempt, pose the problem again after a miss.
pub struct Retry<'a> {
    pub task: &'a ArithTask,
}

impl Turns for Retry<'_> {
    type State = Attempts;

    fn step(&self, ep: &mut Attempts, turn: &[i64], truncated: bool) -> Result<Option<Vec<i64>>> {
        let text = ArithTask::tokenizer().decode(turn);
        if ep.first_pattern.is_none() {
            ep.first_pattern = Some(self.task.classify(&text));
        }
        let verdict = if truncated {
            Verdict::Unparsable
        } else {
            self.task.verify(&ep.problem, &text)
        };
        if verdict == Verdict::Correct {
            ep.solved_at = Some(ep.attempt);
            return Ok(None);
        }
        ep.attempt += 1;
        Ok(Some(ep.prompt.clone()))
    }
}
