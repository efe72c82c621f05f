//! The model configuration, read from and written to an HF-style `config.json`.

use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// Architecture hyper-parameters of a Llama/Qwen2-family decoder, with the field names of
/// Hugging Face `config.json` so real checkpoints' files read unchanged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    /// `llama`, `qwen2` or `qwen3`-style families share this implementation.
    #[serde(default = "default_model_type")]
    pub model_type: String,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    /// Grouped-query attention: heads share key/value projections in groups. Defaults to
    /// `num_attention_heads` (plain multi-head attention), as in HF.
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
    /// Defaults to `hidden_size / num_attention_heads`.
    #[serde(default)]
    pub head_dim: Option<usize>,
    #[serde(default = "default_max_pos")]
    pub max_position_embeddings: usize,
    #[serde(default = "default_eps")]
    pub rms_norm_eps: f64,
    #[serde(default = "default_theta")]
    pub rope_theta: f64,
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// Bias on the q/k/v projections (Qwen2 has it; Llama does not).
    #[serde(default)]
    pub attention_bias: bool,
    #[serde(default = "default_act")]
    pub hidden_act: String,
    #[serde(default)]
    pub bos_token_id: Option<i64>,
    #[serde(default)]
    pub eos_token_id: Option<i64>,
    #[serde(default)]
    pub pad_token_id: Option<i64>,
}

fn default_model_type() -> String {
    "llama".into()
}
fn default_max_pos() -> usize {
    2048
}
fn default_eps() -> f64 {
    1e-6
}
fn default_theta() -> f64 {
    10_000.0
}
fn default_act() -> String {
    "silu".into()
}

impl ModelConfig {
    /// Number of key/value heads (GQA groups).
    pub fn kv_heads(&self) -> usize {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    /// Width of one attention head.
    pub fn head_dim(&self) -> usize {
        self.head_dim
            .unwrap_or(self.hidden_size / self.num_attention_heads)
    }

    /// Checks the invariants the implementation relies on, naming the offending field.
    pub fn validate(&self) -> Result<()> {
        let positive = [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("num_key_value_heads", self.kv_heads()),
            ("max_position_embeddings", self.max_position_embeddings),
        ];
        for (name, v) in positive {
            if v == 0 {
                bail!("config field `{name}` must be positive, got 0");
            }
        }
        if self.num_attention_heads % self.kv_heads() != 0 {
            bail!(
                "config field `num_key_value_heads` ({}) must divide `num_attention_heads` ({})",
                self.kv_heads(),
                self.num_attention_heads
            );
        }
        if self.head_dim() % 2 != 0 {
            bail!(
                "head dimension must be even for rotary embeddings, got {}",
                self.head_dim()
            );
        }
        if self.hidden_act != "silu" {
            bail!(
                "config field `hidden_act` must be \"silu\" (SwiGLU), got {:?}",
                self.hidden_act
            );
        }
        Ok(())
    }

    /// Reads and validates `config.json`.
    pub fn load(path: &Path) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let cfg: Self =
            serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        cfg.validate()
            .with_context(|| format!("invalid model config {}", path.display()))?;
        Ok(cfg)
    }

    /// Writes `config.json` (pretty-printed, HF field names).
    pub fn save(&self, path: &Path) -> Result<()> {
        std::fs::write(path, serde_json::to_string_pretty(self)? + "\n")
            .with_context(|| format!("writing {}", path.display()))
    }
}
