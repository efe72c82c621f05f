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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run_dir::write_json;

    #[test]
    fn a_run_opens_fresh_then_resumes_from_its_saved_state() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir {
            root: dir.path().to_path_buf(),
        };
        let fresh = Start::open(&run, Phase::Sft).unwrap();
        assert!(!fresh.resumed && !fresh.has_progress(Phase::Sft));
        assert_eq!(fresh.state, TrainerState::start(Phase::Sft));
        let mut saved = TrainerState::start(Phase::Rl);
        saved.step = 4;
        std::fs::create_dir_all(&fresh.latest).unwrap();
        write_json(&fresh.latest.join(STATE_FILE), &saved).unwrap();
        let again = Start::open(&run, Phase::Sft).unwrap();
        assert!(again.resumed && again.has_progress(Phase::Sft));
        assert_eq!(
            (again.state, again.latest),
            (saved, run.checkpoint("latest"))
        );
    }
}
