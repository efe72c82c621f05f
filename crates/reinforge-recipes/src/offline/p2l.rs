//! Prompt-to-Leaderboard (lmarena/p2l): a transformer reads a prompt and outputs one
//! Bradley-Terry coefficient per model (plus the loss's tie parameters); trained on battles
//! with the prompt that was asked, it gives a leaderboard per prompt, an aggregate over a
//! prompt set, and a router. `train` runs through the one trainer (phase `p2l`); the tensor
//! work is reinforge-torch's `P2lModel` and `GlobalFit`.

mod battles;
mod leaderboard;
mod train;

use std::path::{Path, PathBuf};

use reinforge_torch::train::loss::p2l::P2lLoss;
use serde::{Deserialize, Serialize};

pub use leaderboard::{run, LeaderboardOptions};
pub use train::{train, TrainOptions};

/// The run's settings, saved with the model (`p2l_config.json`).
pub const P2L_CONFIG: &str = "p2l_config.json";

/// What a trained P2L model directory records besides its weights.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct P2lConfig {
    /// Competitors, in coefficient order.
    pub models: Vec<String>,
    pub loss: P2lLoss,
    pub raw: bool,
    /// The checkpoint the backbone started from.
    pub source: PathBuf,
}

/// The model directory `dir` names: `dir` itself when it holds a P2L model (a checkpoint, or
/// the output of a build before train-p2l wrote a run directory), else the run directory's
/// `checkpoints/final`.
pub fn model_dir(dir: &Path) -> PathBuf {
    let last = dir.join("checkpoints").join("final");
    if !dir.join(P2L_CONFIG).exists() && last.join(P2L_CONFIG).exists() {
        last
    } else {
        dir.to_path_buf()
    }
}
