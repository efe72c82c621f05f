//! A model together with the var store that owns its parameters, and its checkpoint files.

use std::path::Path;

use anyhow::{Context, Result};
use tch::{nn::VarStore, Device};

use crate::config::ModelConfig;
use crate::model::Transformer;

/// File name of the weights inside a checkpoint directory (HF layout).
pub const WEIGHTS_FILE: &str = "model.safetensors";
/// File name of the model configuration inside a checkpoint directory (HF layout).
pub const CONFIG_FILE: &str = "config.json";

/// A causal LM and its parameters.
pub struct Policy {
    pub vs: VarStore,
    pub model: Transformer,
}

impl Policy {
    /// A randomly initialised model on `device`; `seed` fixes the initial weights.
    pub fn new(cfg: &ModelConfig, device: Device, seed: i64) -> Result<Self> {
        cfg.validate()?;
        tch::manual_seed(seed);
        let vs = VarStore::new(device);
        let model = Transformer::new(&vs.root(), cfg);
        Ok(Self { vs, model })
    }

    /// Loads `config.json` and `model.safetensors` from a checkpoint directory.
    pub fn load(dir: &Path, device: Device) -> Result<Self> {
        let cfg = ModelConfig::load(&dir.join(CONFIG_FILE))?;
        let mut policy = Self::new(&cfg, device, 0)?;
        let weights = dir.join(WEIGHTS_FILE);
        policy
            .vs
            .load(&weights)
            .with_context(|| format!("loading weights {}", weights.display()))?;
        Ok(policy)
    }

    /// Writes `config.json` and `model.safetensors` into `dir` (created if missing).
    pub fn save(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        self.model.config().save(&dir.join(CONFIG_FILE))?;
        let weights = dir.join(WEIGHTS_FILE);
        self.vs
            .save(&weights)
            .with_context(|| format!("writing weights {}", weights.display()))
    }

    /// A frozen copy (for the KL reference model).
    pub fn frozen_copy(&self) -> Result<Self> {
        let mut vs = VarStore::new(self.vs.device());
        let model = Transformer::new(&vs.root(), self.model.config());
        vs.copy(&self.vs)?;
        vs.freeze();
        Ok(Self { vs, model })
    }

    /// The device the parameters live on.
    pub fn device(&self) -> Device {
        self.vs.device()
    }
}
