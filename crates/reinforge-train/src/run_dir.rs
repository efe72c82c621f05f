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
//!   checkpoints/<tag>/   model.safetensors, config.json, optimizer.safetensors, trainer_state.json,
//!                        the environment's files (tokenizer); PPO: critic.safetensors,
//!                        critic_optimizer.safetensors (written by `crate::trainer::checkpoint`)
//! ```

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{de::DeserializeOwned, Serialize};

use crate::config::TrainConfig;

/// Paths and writers of one run.
#[derive(Debug, Clone)]
pub struct RunDir {
    pub root: PathBuf,
}

impl RunDir {
    /// Creates a fresh run directory for `cfg`, refusing to overwrite a previous run.
    pub fn create(cfg: &TrainConfig) -> Result<Self> {
        Self::create_with(cfg, &cfg.to_toml())
    }

    /// Creates the run directory of a dataset run (its `config.toml` omits the unused toy
    /// sections, see [`TrainConfig::to_data_run_toml`]).
    pub fn create_data_run(cfg: &TrainConfig) -> Result<Self> {
        Self::create_with(cfg, &cfg.to_data_run_toml())
    }

    /// Creates `<runs_dir>/<name>` holding `config` as `config.toml`; refuses an existing run.
    fn create_with(cfg: &TrainConfig, config: &str) -> Result<Self> {
        let root = Path::new(&cfg.runs_dir).join(cfg.run_name());
        // Data-parallel ranks other than 0 use the directory rank 0 creates.
        if let Some(env) = reinforge_torch::dist::DistEnv::from_env()?.filter(|e| e.rank > 0) {
            let deadline = std::time::Instant::now() + crate::dp::timeout();
            while !root.join("config.toml").exists() {
                if std::time::Instant::now() > deadline {
                    bail!(
                        "rank {}: rank 0 did not create {}",
                        env.rank,
                        root.display()
                    );
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            return Ok(Self { root });
        }
        if root.join("config.toml").exists() {
            bail!(
                "{} already holds a run; continue it with `reinforge train --resume {}`, or pick another name with --set name=NEW",
                root.display(),
                root.display()
            );
        }
        std::fs::create_dir_all(root.join("checkpoints"))
            .with_context(|| format!("creating {}", root.display()))?;
        write_atomic(&root.join("config.toml"), config.as_bytes())?;
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

/// Writes `rows` as JSON Lines atomically.
pub fn write_jsonl<T: Serialize>(path: &Path, rows: &[T]) -> Result<()> {
    let mut text = String::new();
    for r in rows {
        text += &serde_json::to_string(r)?;
        text.push('\n');
    }
    write_atomic(path, text.as_bytes())
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
