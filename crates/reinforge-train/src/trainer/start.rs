//! Opening a run where it stands, the same way for every kind of run (the default experiment,
//! dataset runs, the offline preference trainers, the reward model): from
//! `checkpoints/latest` and its trainer state when the run directory has one, otherwise at
//! the first step of the run's first phase.

use std::path::PathBuf;

use anyhow::Result;

use super::checkpoint::STATE_FILE;
use super::{Phase, TrainerState};
use crate::run_dir::{read_json, RunDir};

/// Where a run continues from.
#[derive(Debug, Clone, PartialEq)]
pub struct Start {
    /// `checkpoints/latest` (it may not exist yet).
    pub latest: PathBuf,
    /// The saved state, or the start of the first phase.
    pub state: TrainerState,
    /// Whether `latest` holds a saved state: weights and optimizer state load from it.
    pub resumed: bool,
}

impl Start {
    /// Opens `run` whose training begins with `first`.
    pub fn open(run: &RunDir, first: Phase) -> Result<Self> {
        let latest = run.checkpoint("latest");
        let file = latest.join(STATE_FILE);
        let resumed = file.exists();
        let state = if resumed {
            read_json::<TrainerState>(&file)?
        } else {
            TrainerState::start(first)
        };
        Ok(Self {
            latest,
            state,
            resumed,
        })
    }

    /// Whether the run has trained at all (a state saved at the very start of its first
    /// phase has not: its weights are the initial ones).
    pub fn has_progress(&self, first: Phase) -> bool {
        self.state.step > 0 || self.state.phase != first
    }
}
