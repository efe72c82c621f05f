//! `trainer_state.json`: where a run continues from. One schema for every kind of run.

use serde::{Deserialize, Serialize};

/// Version written by this build. Version 1 (no `version` key) is read too: the arithmetic
/// pipeline's `{phase, step, task_digits, sft_seconds, grpo_seconds}` and the dataset runs'
/// `{step, seconds}`.
pub const STATE_VERSION: u32 = 2;

/// Which phase of training a checkpoint was taken in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Supervised fine-tuning.
    Sft,
    /// Policy iterations (every RL preset, PPO included); `"grpo"` on disk, as before.
    #[default]
    #[serde(rename = "grpo")]
    Rl,
    /// Offline preference optimisation (DPO, ORPO, KTO); `"dpo"` on disk, as before.
    #[serde(rename = "dpo")]
    Preference,
    /// Reward-model training.
    Rm,
    /// Prompt-to-Leaderboard training (`train-p2l`).
    P2l,
}

impl Phase {
    /// Name of the phase's progress bar and of its log file's prefix (the on-disk names).
    pub fn label(self) -> &'static str {
        match self {
            Phase::Sft => "sft",
            Phase::Rl => "grpo",
            Phase::Preference => "dpo",
            Phase::Rm => "rm",
            Phase::P2l => "p2l",
        }
    }
}

/// `checkpoints/<tag>/trainer_state.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainerState {
    /// Schema version ([`STATE_VERSION`]; 1 when absent).
    #[serde(default = "v1")]
    pub version: u32,
    #[serde(default)]
    pub phase: Phase,
    /// Steps of `phase` completed.
    pub step: usize,
    /// Wall-clock seconds spent so far in SFT and in policy iterations (carried across
    /// resumes).
    #[serde(default)]
    pub sft_seconds: f64,
    #[serde(default, alias = "seconds")]
    pub grpo_seconds: f64,
    /// Seconds of preference optimisation (absent before it existed).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dpo_seconds: f64,
    /// Seconds of reward-model training (absent before it existed).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rm_seconds: f64,
    /// Seconds of P2L training (absent before it existed).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub p2l_seconds: f64,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

fn v1() -> u32 {
    1
}

impl TrainerState {
    /// The state at the start of `phase`.
    pub fn start(phase: Phase) -> Self {
        Self {
            version: STATE_VERSION,
            phase,
            step: 0,
            sft_seconds: 0.0,
            grpo_seconds: 0.0,
            dpo_seconds: 0.0,
            rm_seconds: 0.0,
            p2l_seconds: 0.0,
        }
    }

    /// Seconds spent in `phase`.
    pub fn seconds_mut(&mut self, phase: Phase) -> &mut f64 {
        match phase {
            Phase::Sft => &mut self.sft_seconds,
            Phase::Rl => &mut self.grpo_seconds,
            Phase::Preference => &mut self.dpo_seconds,
            Phase::Rm => &mut self.rm_seconds,
            Phase::P2l => &mut self.p2l_seconds,
        }
    }
}
