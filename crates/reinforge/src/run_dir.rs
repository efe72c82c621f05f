//! The run directory: resolved config, metrics, checkpoints, evaluations and the report.
//!
//! ```text
//! runs/<name>/
//!   config.toml          resolved config, reusable with --config
//!   sft_metrics.jsonl    one object per SFT step
//!   metrics.jsonl        one object per GRPO step
//!   eval_sft.json        held-out evaluation of the SFT model (before RL)
//!   eval_rl.json         held-out evaluation after RL
//!   summary.json         pass@1 before/after, pattern shares, timings (for scripts)
//!   report.md, *.png     what a person reads
//!   checkpoints/<tag>/   model.safetensors, config.json, optimizer.safetensors, trainer_state.json
//!                        (PPO: critic.safetensors, critic_optimizer.safetensors)
//! ```

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use reinforge_torch::{AdamW, Policy};
use serde::{de::DeserializeOwned, Deserialize, Serialize};

use crate::config::TrainConfig;
use crate::critic::CriticState;

/// Which stage of the pipeline a checkpoint was taken in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Sft,
    Grpo,
}

/// `trainer_state.json`: where to continue from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainerState {
    pub phase: Phase,
    /// Steps of `phase` completed.
    pub step: usize,
    /// Operand digits of the arithmetic task the model was trained on.
    pub task_digits: u32,
    /// Wall-clock seconds spent so far in SFT and GRPO (carried across resumes).
    pub sft_seconds: f64,
    pub grpo_seconds: f64,
}

/// Paths and writers of one run.
#[derive(Debug, Clone)]
pub struct RunDir {
    pub root: PathBuf,
}

impl RunDir {
    /// Creates a fresh run directory for `cfg`, refusing to overwrite a previous run.
    pub fn create(cfg: &TrainConfig) -> Result<Self> {
        let root = Path::new(&cfg.runs_dir).join(cfg.run_name());
        if root.join("config.toml").exists() {
            bail!(
                "{} already holds a run; continue it with `reinforge train --resume {}`, or pick another name with --set name=NEW",
                root.display(),
                root.display()
            );
        }
        std::fs::create_dir_all(root.join("checkpoints"))
            .with_context(|| format!("creating {}", root.display()))?;
        write_atomic(&root.join("config.toml"), cfg.to_toml().as_bytes())?;
        Ok(Self { root })
    }

    /// Opens an existing run directory and its resolved config.
    pub fn open(root: &Path) -> Result<(Self, TrainConfig)> {
        let path = root.join("config.toml");
        if !path.exists() {
            bail!("{} is not a run directory (no config.toml)", root.display());
        }
        let cfg = TrainConfig::resolve(Some(&path), &[])?;
        Ok((
            Self {
                root: root.to_path_buf(),
            },
            cfg,
        ))
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    pub fn checkpoint(&self, tag: &str) -> PathBuf {
        self.root.join("checkpoints").join(tag)
    }

    /// Saves model, optimizer and trainer state under `checkpoints/<tag>`, atomically: the files
    /// are written to a temporary directory that is then renamed over the old checkpoint.
    pub fn save_checkpoint(
        &self,
        tag: &str,
        policy: &Policy,
        opt: Option<&AdamW>,
        state: &TrainerState,
    ) -> Result<PathBuf> {
        self.save_checkpoint_with_critic(tag, policy, opt, None, state)
    }

    /// [`RunDir::save_checkpoint`] plus, for PPO, the critic's weights and (when `opt` is
    /// given, i.e. in resumable checkpoints) its optimizer state.
    pub fn save_checkpoint_with_critic(
        &self,
        tag: &str,
        policy: &Policy,
        opt: Option<&AdamW>,
        critic: Option<&CriticState>,
        state: &TrainerState,
    ) -> Result<PathBuf> {
        let dir = self.checkpoint(tag);
        let tmp = self.checkpoint(&format!(".{tag}.tmp"));
        let _ = std::fs::remove_dir_all(&tmp);
        policy.save(&tmp)?;
        if let Some(opt) = opt {
            opt.save(&tmp.join("optimizer.safetensors"))?;
        }
        if let Some(critic) = critic {
            critic.save(&tmp, opt.is_some())?;
        }
        write_json(&tmp.join("trainer_state.json"), state)?;
        std::fs::write(
            tmp.join("char_tokenizer.json"),
            serde_json::to_string(&reinforge_tasks::ArithTask::tokenizer())?,
        )?;
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::rename(&tmp, &dir)
            .with_context(|| format!("moving checkpoint into {}", dir.display()))?;
        Ok(dir)
    }

    /// Appends one JSON object as a line of `file`.
    pub fn append_jsonl(&self, file: &str, value: &impl Serialize) -> Result<()> {
        let path = self.path(file);
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        writeln!(f, "{}", serde_json::to_string(value)?)
            .with_context(|| format!("writing {}", path.display()))
    }

    /// Keeps the first `lines` lines of `file` (dropping steps logged after the checkpoint a
    /// resumed run continues from, so no step appears twice).
    pub fn truncate_jsonl(&self, file: &str, lines: usize) -> Result<()> {
        let path = self.path(file);
        if !path.exists() {
            return Ok(());
        }
        let kept: Vec<String> = BufReader::new(File::open(&path)?)
            .lines()
            .take(lines)
            .collect::<std::io::Result<_>>()?;
        let mut text = kept.join("\n");
        if !kept.is_empty() {
            text.push('\n');
        }
        write_atomic(&path, text.as_bytes())
    }

    /// Reads every line of a jsonl file of the run.
    pub fn read_jsonl<T: DeserializeOwned>(&self, file: &str) -> Result<Vec<T>> {
        let path = self.path(file);
        if !path.exists() {
            return Ok(vec![]);
        }
        BufReader::new(File::open(&path)?)
            .lines()
            .enumerate()
            .map(|(i, line)| {
                serde_json::from_str(&line?)
                    .with_context(|| format!("{}:{}", path.display(), i + 1))
            })
            .collect()
    }
}

/// Writes pretty JSON atomically.
pub fn write_json(path: &Path, value: &impl Serialize) -> Result<()> {
    write_atomic(
        path,
        (serde_json::to_string_pretty(value)? + "\n").as_bytes(),
    )
}

/// Reads a JSON file, naming it in errors.
pub fn read_json<T: DeserializeOwned>(path: &Path) -> Result<T> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// Writes through a temporary file and a rename, so a crash never leaves a half-written file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp~");
    std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}
