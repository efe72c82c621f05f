//! The one checkpoint writer: policy (HF layout), optimizer, critic, trainer state and the
//! environment's files, written into a temporary directory that replaces the old checkpoint
//! only once complete, so a crash at any point leaves one to resume from.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
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

/// Writes `checkpoints/<tag>` of `run` so that a crash (a SIGKILL included) at any point leaves
/// a complete checkpoint to resume from ([`newest_complete`] finds it); returns its path.
/// The steps, as HF Trainer and PyTorch DCP keep the previous checkpoint until the new one is
/// whole: everything is written into `.<tag>.tmp`, the trainer state last (its presence marks
/// a complete directory); the old `<tag>` is renamed to `.<tag>.old`, the new one renamed in,
/// and only then is the old one removed. Files are not fsynced (nor are HF Trainer's): a killed
/// process loses nothing, a power loss may lose the newest checkpoint (fsyncing every save
/// doubled the test suite's checkpoint-heavy tests on this disk).
pub fn save(run: &RunDir, tag: &str, c: &Contents) -> Result<PathBuf> {
    let dir = run.checkpoint(tag);
    let tmp = run.checkpoint(&temporary(tag));
    let old = run.checkpoint(&previous(tag));
    remove_if_present(&tmp)?;
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
        remove_if_present(&old)?;
        rename(&dir, &old)?;
    }
    rename(&tmp, &dir)?;
    remove_if_present(&old)?;
    Ok(dir)
}

/// The directory a save of `tag` writes before it is complete.
fn temporary(tag: &str) -> String {
    format!(".{tag}.tmp")
}

/// Where a save of `tag` keeps the previous checkpoint until the new one is in place.
fn previous(tag: &str) -> String {
    format!(".{tag}.old")
}

/// The newest complete checkpoint of `tag` (one with its trainer state), or `None` when there
/// is none. A save killed after its new directory was complete leaves `.<tag>.tmp` whole (it
/// is then the newest); one killed between its renames leaves `.<tag>.old` as the only
/// other. Reads only (the ranks of a data-parallel job open the run together); the next save
/// clears what is left over. A `<tag>` without its state and nothing to fall back on is an
/// error, never a silent start from scratch.
pub fn newest_complete(run: &RunDir, tag: &str) -> Result<Option<PathBuf>> {
    let dir = run.checkpoint(tag);
    let candidates = [
        run.checkpoint(&temporary(tag)),
        dir.clone(),
        run.checkpoint(&previous(tag)),
    ];
    let found = candidates
        .into_iter()
        .find(|d| d.join(STATE_FILE).is_file());
    match &found {
        None if dir.exists() => bail!(
            "{} has no {STATE_FILE}: the checkpoint is incomplete and no earlier one is left; remove {} to start the run over",
            dir.display(),
            run.root.display()
        ),
        Some(f) if *f != dir => eprintln!(
            "note: the process stopped while saving {}; resuming from the newest complete checkpoint, {}",
            dir.display(),
            f.display()
        ),
        _ => {}
    }
    Ok(found)
}

fn rename(from: &Path, to: &Path) -> Result<()> {
    std::fs::rename(from, to)
        .with_context(|| format!("moving checkpoint {} to {}", from.display(), to.display()))
}

fn remove_if_present(dir: &Path) -> Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    Ok(())
}
