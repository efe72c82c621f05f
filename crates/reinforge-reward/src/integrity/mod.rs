//! The reward-hacking monitor's pure parts (issue 27): canaries, known-wrong completions a
//! run's reward must never credit (made by `reinforge_verify::canary`); the per-step shares of credited completions
//! that repeat the prompt or were cut off, the reward–length correlation over a window, the
//! flagged completions and the report section ([`monitor`]). The trainer
//! (`reinforge-train`) feeds it every RL step.

pub mod monitor;

pub use monitor::{
    pearson, CanaryHit, Flagged, IntegrityLog, MonitorConfig, StepCounts, Window, METRIC_KEYS,
};
pub use reinforge_verify::canary::{canaries, numbers, occurs_in, Canary, CanaryKind};

use crate::Scored;

/// Which canaries a reward credited, from their scores: a verifier component's verdict, or,
/// for a reward without one, a reward above the empty canary's for the same row (`rows[i]`
/// names canary `i`'s row; the empty canary itself is never credited that way).
pub fn credited(rows: &[usize], kinds: &[CanaryKind], scores: &[Scored]) -> Vec<bool> {
    let empty = |row: usize| {
        (0..rows.len())
            .find(|&j| rows[j] == row && kinds[j] == CanaryKind::Empty)
            .map_or(0.0, |j| scores[j].total)
    };
    (0..scores.len())
        .map(|i| {
            scores[i]
                .credited
                .unwrap_or(kinds[i] != CanaryKind::Empty && scores[i].total > empty(rows[i]))
        })
        .collect()
}
