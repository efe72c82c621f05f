//! The memory estimate of `reinforge explain`: float32 parameters, gradients and AdamW's two
//! moments (sharded by ZeRO-1), a frozen reference model when a KL term needs one, PPO's
//! critic, and the activations one micro-batch keeps for its backward pass.

use reinforge_torch::model::config::QkNorm;
use reinforge_torch::ModelConfig;
use serde::Serialize;

use reinforge_train::config::{TrainConfig, GAE};

/// Parameters of a decoder of the supported families, as its safetensors hold them:
/// embeddings, per layer q/k/v/o (biases where the family has them), q/k norms, the SwiGLU
/// MLP (or a sparse layer's experts and router) and two RMSNorms, the final norm and an
/// untied head.
pub fn parameter_count(m: &ModelConfig) -> u64 {
    let (h, i, v) = (
        m.hidden_size as u64,
        m.intermediate_size as u64,
        m.vocab_size as u64,
    );
    let (heads, kv, d) = (
        m.num_attention_heads as u64,
        m.kv_heads() as u64,
        m.head_dim() as u64,
    );
    let (q, k) = (heads * d, kv * d);
    let mut layer = h * q + 2 * h * k + q * h + 2 * h;
    if m.qkv_bias() {
        layer += q + 2 * k;
    }
    if m.o_bias() {
        layer += h;
    }
    layer += match m.qk_norm() {
        QkNorm::None => 0,
        QkNorm::PerHead => 2 * d,
        QkNorm::Whole => q + k,
    };
    // A dense layer's SwiGLU, or a sparse layer's experts and router.
    let experts = m.num_experts.unwrap_or(0) as u64;
    let ffn: u64 = (0..m.num_hidden_layers)
        .map(|l| match m.layer_is_sparse(l) {
            true => experts * 3 * h * m.expert_size() as u64 + experts * h,
            false => 3 * h * i,
        })
        .sum();
    let head = if m.tie_word_embeddings { 0 } else { v * h };
    v * h + m.num_hidden_layers as u64 * layer + ffn + h + head
}

/// Bytes per rank (float32 training state; the estimate, not a measurement).
#[derive(Debug, Clone, Serialize)]
pub struct MemoryEstimate {
    pub parameters: u64,
    pub parameter_bytes: u64,
    pub gradient_bytes: u64,
    /// AdamW's two moments, divided over the ranks with `zero_stage = 1`.
    pub adamw_bytes: u64,
    /// The frozen reference model (rl.beta > 0).
    pub reference_bytes: u64,
    /// PPO's critic: backbone and value head with gradients and moments.
    pub critic_bytes: u64,
    /// What one micro-batch keeps for the backward pass.
    pub activation_bytes: u64,
    pub total_bytes: u64,
}

impl MemoryEstimate {
    /// The estimate for `cfg` on `world` ranks, with `tokens` tokens per forward pass.
    pub fn new(cfg: &TrainConfig, world: usize, m: &ModelConfig, tokens: usize) -> Self {
        let p = parameter_count(m);
        let params = 4 * p;
        let zero1 = cfg.zero_stage == 1 && world > 1;
        let adamw = if zero1 {
            (8 * p).div_ceil(world as u64)
        } else {
            8 * p
        };
        let reference = if cfg.grpo.beta > 0.0 { params } else { 0 };
        let critic = if cfg.grpo.advantage_estimator == GAE {
            16 * (p + m.hidden_size as u64)
        } else {
            0
        };
        let activations = activation_bytes(cfg, m, tokens as u64);
        Self {
            parameters: p,
            parameter_bytes: params,
            gradient_bytes: params,
            adamw_bytes: adamw,
            reference_bytes: reference,
            critic_bytes: critic,
            activation_bytes: activations,
            total_bytes: 2 * params + adamw + reference + critic + activations,
        }
    }

    /// The MEMORY block of the report.
    pub fn text(&self) -> String {
        let row =
            |name: &str, b: u64, how: &str| format!("  {name:<20} {:>10}   {how}\n", bytes(b));
        let mut s = format!(
            "MEMORY (estimate per rank, float32 state)\n  parameters           {} ({})\n",
            self.parameters,
            bytes(self.parameter_bytes)
        );
        s += &row("gradients", self.gradient_bytes, "4 bytes per parameter");
        s += &row(
            "AdamW moments",
            self.adamw_bytes,
            "8 bytes per parameter (/ ranks with zero_stage = 1)",
        );
        if self.reference_bytes > 0 {
            s += &row("reference model", self.reference_bytes, "rl.beta > 0");
        }
        if self.critic_bytes > 0 {
            s += &row(
                "critic",
                self.critic_bytes,
                "PPO: weights, gradients, moments",
            );
        }
        s += &row("activations", self.activation_bytes, "one micro-batch's backward (memory.gradient_checkpointing keeps one hidden state per layer)");
        s += &row(
            "total",
            self.total_bytes,
            "plus libtorch's workspace and the sampler's KV cache",
        );
        s
    }
}

/// Per token and layer a decoder layer keeps its two norms' inputs and outputs (4H), q and
/// the attention output (2 q), k and v (2 k) and the MLP's gate, up and product (3I); the
/// log-prob pass holds a 512-row chunk of logits (twice: logits and softmax). With gradient
/// checkpointing only each layer's input is kept, plus one layer recomputed at a time.
fn activation_bytes(cfg: &TrainConfig, m: &ModelConfig, tokens: u64) -> u64 {
    let (h, i) = (m.hidden_size as u64, m.intermediate_size as u64);
    let q = (m.num_attention_heads * m.head_dim()) as u64;
    let k = (m.kv_heads() * m.head_dim()) as u64;
    let per_layer = 4 * h + 2 * q + 2 * k + 3 * i;
    let layers = m.num_hidden_layers as u64;
    let kept = if cfg.memory.gradient_checkpointing {
        layers * h + per_layer
    } else {
        layers * per_layer
    };
    let element = if cfg.bf16 { 2 } else { 4 };
    let logits = 2 * 4 * tokens.min(512) * m.vocab_size as u64;
    element * tokens * kept + logits
}

/// `b` bytes in binary units.
pub fn bytes(b: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = b as f64;
    let mut u = 0;
    while x >= 1024.0 && u + 1 < units.len() {
        x /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{x:.1} {}", units[u])
    }
}
