//! Opening a run where it stands, the same way for every kind of run (the default experiment,
//! dataset runs, the offline preference trainers, the reward model): from
//! `checkpoints/latest` and its trainer state when the run directory has one, otherwise at
//! the first step of the run's first phase.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use reinforge_torch::{LoraConfig, Policy};

use super::checkpoint::{newest_complete, STATE_FILE};
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
    /// Opens `run` whose training begins with `first`: from the newest complete `latest`
    /// checkpoint ([`newest_complete`]: a save the process died in leaves the previous one, or
    /// its finished new one). A run that logged steps but has no checkpoint is refused: it
    /// would start over and its metrics would no longer describe its weights.
    pub fn open(run: &RunDir, first: Phase) -> Result<Self> {
        let Some(latest) = newest_complete(run, "latest")? else {
            refuse_metrics_without_checkpoint(run)?;
            return Ok(Self {
                latest: run.checkpoint("latest"),
                state: TrainerState::start(first),
                resumed: false,
            });
        };
        let state = read_json::<TrainerState>(&latest.join(STATE_FILE))?;
        Ok(Self {
            latest,
            state,
            resumed: true,
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

/// The metrics files a run's phases write (`Trainer::run_phase`'s plans).
const METRICS_FILES: [&str; 2] = ["metrics.jsonl", "sft_metrics.jsonl"];

/// An error when `run` has logged steps (a non-empty metrics file) but holds no checkpoint.
fn refuse_metrics_without_checkpoint(run: &RunDir) -> Result<()> {
    for name in METRICS_FILES {
        let path = run.path(name);
        if std::fs::metadata(&path).is_ok_and(|m| m.len() > 0) {
            bail!(
                "{} records steps but {} holds no complete checkpoint (the run stopped before its first one; rl.checkpoint_every sets how often they are saved): remove {} to start over",
                path.display(),
                run.root.join("checkpoints").display(),
                run.root.display()
            );
        }
    }
    Ok(())
}

/// Writes `checkpoints/final-adapter`: the LoRA adapter of `policy` alone, in PEFT's layout,
/// with the tokenizer files of `source` (the base model).
pub fn save_final_adapter(run: &RunDir, policy: &Policy, source: &Path) -> Result<()> {
    let adapter = run.checkpoint("final-adapter");
    policy.save_adapter(&adapter, &source.to_string_lossy())?;
    reinforge_torch::copy_aux_files(source, &adapter)?;
    Ok(())
}
