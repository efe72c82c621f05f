//! Opening a run where it stands, the same way for every kind of run (the default experiment,
//! dataset runs, the offline preference trainers, the reward model): from
//! `checkpoints/latest` and its trainer state when the run directory has one, otherwise at
//! the first step of the run's first phase.

use std::path::{Path, PathBuf};

use anyhow::Result;
use reinforge_torch::{LoraConfig, Policy};

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

impl Start {
    /// Sets `policy` (the run's starting model) up for this start: LoRA adapters of `lora`
    /// created (seeded by `seed`) or, when resumed, reloaded from `latest/adapter` onto it; a
    /// resumed full run's weights read from `latest`.
    pub fn prepare_policy(
        &self,
        policy: &mut Policy,
        lora: Option<&LoraConfig>,
        seed: u64,
    ) -> Result<()> {
        match (lora, self.resumed) {
            // The adapter's own adapter_config.json sets LoRA up again.
            (Some(_), true) => policy.load_adapter(&self.latest.join("adapter"))?,
            (Some(l), false) => {
                // libtorch's default generator is not fixed across processes: seed the adapters.
                let init = crate::seeds::step_seed(seed, crate::seeds::PHASE_INIT, 0);
                reinforge_torch::runtime::with_seed(crate::seeds::torch_seed(init), || {
                    policy.enable_lora(l)
                })?
            }
            (None, true) => *policy = Policy::load(&self.latest, policy.device())?,
            (None, false) => {}
        }
        Ok(())
    }
}

/// Writes `checkpoints/final-adapter`: the LoRA adapter of `policy` alone, in PEFT's layout,
/// with the tokenizer files of `source` (the base model).
pub fn save_final_adapter(run: &RunDir, policy: &Policy, source: &Path) -> Result<()> {
    let adapter = run.checkpoint("final-adapter");
    policy.save_adapter(&adapter, &source.to_string_lossy())?;
    reinforge_torch::copy_aux_files(source, &adapter)?;
    Ok(())
}
