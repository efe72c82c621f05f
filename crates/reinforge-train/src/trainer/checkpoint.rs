//! The one checkpoint writer: policy (HF layout), optimizer, critic, trainer state and the
//! environment's files, written into a temporary directory that is then renamed over the old
//! checkpoint, so a crash never leaves half a checkpoint under the name.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use reinforge_torch::train::optim::Moments;
use reinforge_torch::{AdamW, Policy};

use super::critic::CriticState;
use super::TrainerState;
use crate::run_dir::{write_json, RunDir};

/// File name of the policy's AdamW state inside a checkpoint directory.
pub const OPTIMIZER_FILE: &str = "optimizer.safetensors";
/// File name of the trainer state inside a checkpoint directory.
pub const STATE_FILE: &str = "trainer_state.json";

/// Writes files into a checkpoint directory.
pub type DirWriter<'a> = &'a dyn Fn(&Path) -> Result<()>;

/// What goes into one checkpoint.
pub struct Contents<'a> {
    pub policy: &'a Policy,
    /// The optimizer: resumable checkpoints only (the critic's optimizer goes with it).
    pub opt: Option<&'a AdamW>,
    pub critic: Option<&'a CriticState>,
    pub state: &'a TrainerState,
    /// Task files (tokenizer, LoRA adapter, ...) written into the directory last.
    pub files: DirWriter<'a>,
    /// Writes the model in place of `policy.save` when set.
    pub model_writer: Option<DirWriter<'a>>,
    /// Sharded optimizer moments gathered from every rank (ZeRO-1).
    pub gathered: Option<&'a Moments>,
}

/// Writes `checkpoints/<tag>` of `run` atomically; returns its path.
pub fn save(run: &RunDir, tag: &str, c: &Contents) -> Result<PathBuf> {
    let dir = run.checkpoint(tag);
    let tmp = run.checkpoint(&format!(".{tag}.tmp"));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).with_context(|| format!("removing {}", tmp.display()))?;
    }
    match c.model_writer {
        Some(write) => write(&tmp)?,
        None => c.policy.save(&tmp)?,
    }
    (c.files)(&tmp)?;
    if let Some(opt) = c.opt {
        opt.save_gathered(&tmp.join(OPTIMIZER_FILE), c.gathered)?;
    }
    if let Some(critic) = c.critic {
        critic.save(&tmp, c.opt.is_some())?;
    }
    write_json(&tmp.join(STATE_FILE), c.state)?;
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    std::fs::rename(&tmp, &dir)
        .with_context(|| format!("moving checkpoint {} into {}", tmp.display(), dir.display()))?;
    Ok(dir)
}
