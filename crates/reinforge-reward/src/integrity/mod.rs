//! The reward-hacking monitor's pure parts (issue 27): canaries, known-wrong completions a
//! run's reward must never credit ([`canary`]); the per-step shares of credited completions
//! that repeat the prompt or were cut off, the reward–length correlation over a window, the
//! flagged completions and the report section ([`monitor`]). The trainer
//! (`reinforge-train`) feeds it every RL step.

pub mod canary;
pub mod monitor;

pub use canary::{canaries, numbers, occurs_in, Canary, CanaryKind};
pub use monitor::{
    pearson, CanaryHit, Flagged, IntegrityLog, MonitorConfig, StepCounts, Window, METRIC_KEYS,
};
