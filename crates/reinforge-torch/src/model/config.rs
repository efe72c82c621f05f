//! The model configuration, read from and written to an HF-style `config.json`.
//!
//! The struct is also the `[model]` table of reinforge's training TOML (serde derive, unknown
//! keys rejected). Reading a real checkpoint's `config.json` goes through
//! `checkpoint/config_json.rs`, which applies the key policy (harmless keys kept, keys
//! that would change the math but are unsupported rejected by name) and accepts both the
//! transformers 4.x (`rope_theta` + `rope_scaling`) and 5.x (`rope_parameters`) layouts.

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::model::vision::config::{VisionConfig, VisionVariant};

/// The decoder families this crate implements. They share one transformer; the differences
/// (biases, q/k norms, sliding windows, a dense or a sparse MLP) are switches of
/// [`ModelConfig`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// `LlamaForCausalLM` (Llama 2/3.x, and reinforge's own tiny models).
    Llama,
    /// `Qwen2ForCausalLM` (Qwen2, Qwen2.5): q/k/v bias always on, o_proj without bias.
    Qwen2,
    /// `Qwen3ForCausalLM`: per-head RMSNorm of queries and keys, explicit `head_dim`.
    Qwen3,
    /// `MistralForCausalLM`: optional sliding-window attention on every layer.
    Mistral,
    /// `Qwen3MoeForCausalLM`: Qwen3 with sparse MLPs (`mlp_only_layers`, `decoder_sparse_step`
    /// choose the dense layers; `norm_topk_prob`).
    Qwen3Moe,
    /// `OlmoeForCausalLM`: sparse MLPs, q/k RMSNorm over the whole projection, `clip_qkv`.
    Olmoe,
    /// `MixtralForCausalLM`: Mistral with sparse MLPs (`block_sparse_moe`, `w1`/`w3`/`w2`).
    Mixtral,
    /// `Qwen2VLForConditionalGeneration`: a Qwen2 language model (q/k/v bias, no o bias) with
    /// M-RoPE over three position streams, reading the image features of a vision tower
    /// ([`crate::model::vision`]) at its image-placeholder tokens.
    Qwen2Vl,
    /// `Qwen2_5_VLForConditionalGeneration`: the same language model beside the Qwen2.5-VL
    /// tower (RMSNorm, SwiGLU, window attention).
    Qwen25Vl,
}

impl Family {
    /// Every supported family, for error messages.
    pub const ALL: [Family; 9] = [
        Family::Llama,
        Family::Qwen2,
        Family::Qwen3,
        Family::Mistral,
        Family::Qwen3Moe,
        Family::Olmoe,
        Family::Mixtral,
        Family::Qwen2Vl,
        Family::Qwen25Vl,
    ];

    /// The family of an HF `model_type`, or an error naming it and the supported ones.
    pub fn from_model_type(model_type: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|f| f.model_type() == model_type)
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "unsupported architecture: model_type `{model_type}`; supported: {}",
                    Self::supported()
                )
            })
    }

    /// The family of an HF `architectures` entry (`LlamaForCausalLM`, ...).
    pub fn from_architecture(arch: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|f| f.architecture() == arch)
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "unsupported architecture `{arch}`; supported: {}",
                    Self::supported()
                )
            })
    }

    /// HF `model_type`.
    pub fn model_type(self) -> &'static str {
        match self {
            Family::Llama => "llama",
            Family::Qwen2 => "qwen2",
            Family::Qwen3 => "qwen3",
            Family::Mistral => "mistral",
            Family::Qwen3Moe => "qwen3_moe",
            Family::Olmoe => "olmoe",
            Family::Mixtral => "mixtral",
            Family::Qwen2Vl => "qwen2_vl",
            Family::Qwen25Vl => "qwen2_5_vl",
        }
    }

    /// Whether the family's MLPs are sparse (a router over experts).
    pub fn is_moe(self) -> bool {
        matches!(self, Family::Qwen3Moe | Family::Olmoe | Family::Mixtral)
    }

    /// The vision tower of a vision-language family (`None`: a text-only decoder).
    pub fn vision_variant(self) -> Option<VisionVariant> {
        match self {
            Family::Qwen2Vl => Some(VisionVariant::Qwen2Vl),
            Family::Qwen25Vl => Some(VisionVariant::Qwen25Vl),
            _ => None,
        }
    }

    /// HF causal-LM class name, written into `architectures`.
    pub fn architecture(self) -> &'static str {
        match self {
            Family::Llama => "LlamaForCausalLM",
            Family::Qwen2 => "Qwen2ForCausalLM",
            Family::Qwen3 => "Qwen3ForCausalLM",
            Family::Mistral => "MistralForCausalLM",
            Family::Qwen3Moe => "Qwen3MoeForCausalLM",
            Family::Olmoe => "OlmoeForCausalLM",
            Family::Mixtral => "MixtralForCausalLM",
            Family::Qwen2Vl => "Qwen2VLForConditionalGeneration",
            Family::Qwen25Vl => "Qwen2_5_VLForConditionalGeneration",
        }
    }

    fn supported() -> String {
        Self::ALL
            .map(|f| format!("{} ({})", f.architecture(), f.model_type()))
            .join(", ")
    }
}

/// Where queries and keys are RMS-normalised before RoPE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QkNorm {
    None,
    /// Each head's `head_dim` values (Qwen3's `q_norm`/`k_norm`).
    PerHead,
    /// The whole projection, all heads at once (OLMoE).
    Whole,
}

/// RoPE frequency scaling (`rope_scaling` in transformers 4.x configs, the non-default part of
/// `rope_parameters` in 5.x). Supported types: `linear` and `llama3`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RopeScaling {
    /// `linear` or `llama3` (older configs spell the key `type`).
    #[serde(alias = "type")]
    pub rope_type: String,
    pub factor: f64,
    /// llama3 only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub low_freq_factor: Option<f64>,
    /// llama3 only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub high_freq_factor: Option<f64>,
    /// llama3: the pre-training context length (defaults to `max_position_embeddings`, as HF).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_max_position_embeddings: Option<usize>,
}

/// Architecture hyper-parameters of a Llama/Qwen2/Qwen3/Mistral decoder, with the field names
/// of Hugging Face `config.json` so real checkpoints' files read unchanged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// `llama`, `qwen2`, `qwen3` or `mistral` (see [`Family`]).
    #[serde(default = "default_model_type")]
    pub model_type: String,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    /// Grouped-query attention: heads share key/value projections in groups. Defaults to
    /// `num_attention_heads` (plain multi-head attention), as in HF.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_key_value_heads: Option<usize>,
    /// Defaults to `hidden_size / num_attention_heads` (Qwen3 configs always state it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_dim: Option<usize>,
    #[serde(default = "default_max_pos")]
    pub max_position_embeddings: usize,
    #[serde(default = "default_eps")]
    pub rms_norm_eps: f64,
    #[serde(default = "default_theta")]
    pub rope_theta: f64,
    /// RoPE frequency scaling (Llama 3.x uses `llama3`); `None` is plain RoPE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_scaling: Option<RopeScaling>,
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// Bias on the attention projections: q/k/v/o for Llama and Qwen3 (HF semantics). Qwen2
    /// always has q/k/v bias and no o bias whatever this says; Mistral has none.
    #[serde(default)]
    pub attention_bias: bool,
    /// Bias on the MLP projections (Llama only).
    #[serde(default)]
    pub mlp_bias: bool,
    #[serde(default = "default_act")]
    pub hidden_act: String,
    /// Sliding attention window in tokens: keys more than `window - 1` positions back are
    /// masked. Mistral applies it on every layer; Qwen2/Qwen3 only with `use_sliding_window`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sliding_window: Option<usize>,
    /// Qwen2/Qwen3: whether `sliding_window` is used at all.
    #[serde(default)]
    pub use_sliding_window: bool,
    /// Qwen2/Qwen3: layers at index `>=` this use the sliding window (when `layer_types` is
    /// absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_window_layers: Option<usize>,
    /// Qwen2/Qwen3 (transformers 5): `full_attention` or `sliding_attention` per layer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer_types: Option<Vec<String>>,
    /// Experts of each sparse MLP (MoE families; Mixtral's `num_local_experts`).
    #[serde(
        default,
        alias = "num_local_experts",
        skip_serializing_if = "Option::is_none"
    )]
    pub num_experts: Option<usize>,
    /// Experts each token is routed to (top-k).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_experts_per_tok: Option<usize>,
    /// Width of one expert (Qwen3-MoE; OLMoE and Mixtral experts are `intermediate_size`
    /// wide, and Qwen3-MoE's dense layers are too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_intermediate_size: Option<usize>,
    /// Renormalise the top-k routing weights to sum to 1 (Mixtral always does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub norm_topk_prob: Option<bool>,
    /// Qwen3-MoE: layers with a dense MLP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mlp_only_layers: Option<Vec<usize>>,
    /// Qwen3-MoE: layer `i` is sparse when `(i + 1) % decoder_sparse_step == 0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decoder_sparse_step: Option<usize>,
    /// Weight of the load-balancing loss in training (`router_aux_loss_coef`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router_aux_loss_coef: Option<f64>,
    /// OLMoE: queries, keys and values clamped to `[-clip_qkv, clip_qkv]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clip_qkv: Option<f64>,
    /// Vision-language families: how the head dimension's frequency pairs split over the
    /// temporal, height and width position streams (M-RoPE; `mrope_section`, summing to
    /// `head_dim / 2`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mrope_section: Option<Vec<usize>>,
    /// Vision-language families: the placeholder token whose embeddings the image features
    /// replace, one token per merged patch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_token_id: Option<i64>,
    /// Vision-language families: the vision tower (`vision_config`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vision: Option<VisionConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bos_token_id: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eos_token_id: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pad_token_id: Option<i64>,
    /// Keys of a loaded `config.json` that do not change the math (`transformers_version`,
    /// `initializer_range`, a list-valued `eos_token_id`, ...), written back verbatim on save.
    #[serde(skip)]
    pub extra: Map<String, Value>,
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

impl Default for ModelConfig {
    /// A tiny Llama (vocab 512, hidden 64, 2 layers, 4 heads / 2 key-value heads): a
    /// starting point for struct-update syntax, not a model anyone trains as is.
    fn default() -> Self {
        Self {
            model_type: default_model_type(),
            vocab_size: 512,
            hidden_size: 64,
            intermediate_size: 192,
            num_hidden_layers: 2,
            num_attention_heads: 4,
            num_key_value_heads: Some(2),
            head_dim: None,
            max_position_embeddings: default_max_pos(),
            rms_norm_eps: default_eps(),
            rope_theta: default_theta(),
            rope_scaling: None,
            tie_word_embeddings: false,
            attention_bias: false,
            mlp_bias: false,
            hidden_act: default_act(),
            sliding_window: None,
            use_sliding_window: false,
            max_window_layers: None,
            layer_types: None,
            num_experts: None,
            num_experts_per_tok: None,
            moe_intermediate_size: None,
            norm_topk_prob: None,
            mlp_only_layers: None,
            decoder_sparse_step: None,
            router_aux_loss_coef: None,
            clip_qkv: None,
            mrope_section: None,
            image_token_id: None,
            vision: None,
            bos_token_id: None,
            eos_token_id: None,
            pad_token_id: None,
            extra: Map::new(),
        }
    }
}

/// The most parameters a config may describe (10^13: 40 TB in float32).
pub const MAX_PARAMETERS: f64 = 1e13;

impl ModelConfig {
    /// The decoder family of `model_type` (an error names an unsupported one).
    pub fn family(&self) -> Result<Family> {
        Family::from_model_type(&self.model_type)
    }

    /// [`Self::family`] after [`Self::validate`] succeeded.
    pub(crate) fn family_checked(&self) -> Family {
        self.family().expect("model config validated")
    }

    /// Number of key/value heads (GQA groups).
    pub fn kv_heads(&self) -> usize {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    /// Width of one attention head.
    pub fn head_dim(&self) -> usize {
        self.head_dim
            .unwrap_or(self.hidden_size / self.num_attention_heads)
    }

    /// Whether q/k/v projections carry a bias.
    pub fn qkv_bias(&self) -> bool {
        match self.family_checked() {
            Family::Qwen2 | Family::Qwen2Vl | Family::Qwen25Vl => true,
            Family::Mistral | Family::Mixtral => false,
            Family::Llama | Family::Qwen3 | Family::Qwen3Moe | Family::Olmoe => self.attention_bias,
        }
    }

    /// Whether the output projection carries a bias.
    pub fn o_bias(&self) -> bool {
        match self.family_checked() {
            Family::Qwen2 | Family::Qwen2Vl | Family::Qwen25Vl => false,
            Family::Mistral | Family::Mixtral => false,
            Family::Llama | Family::Qwen3 | Family::Qwen3Moe | Family::Olmoe => self.attention_bias,
        }
    }

    /// The RMSNorm of queries and keys before RoPE: per head (Qwen3, Qwen3-MoE), over the
    /// whole projection (OLMoE), or none.
    pub fn qk_norm(&self) -> QkNorm {
        match self.family_checked() {
            Family::Qwen3 | Family::Qwen3Moe => QkNorm::PerHead,
            Family::Olmoe => QkNorm::Whole,
            _ => QkNorm::None,
        }
    }

    /// Whether layer `i`'s MLP is sparse (`Qwen3MoeDecoderLayer`: not in `mlp_only_layers` and
    /// `(i + 1) % decoder_sparse_step == 0`; every layer of OLMoE and Mixtral).
    pub fn layer_is_sparse(&self, i: usize) -> bool {
        match self.family_checked() {
            Family::Qwen3Moe => {
                let dense = self.mlp_only_layers.as_deref().unwrap_or(&[]);
                let step = self.decoder_sparse_step.unwrap_or(1);
                !dense.contains(&i) && (i + 1).is_multiple_of(step)
            }
            Family::Olmoe | Family::Mixtral => true,
            _ => false,
        }
    }

    /// Width of one expert.
    pub fn expert_size(&self) -> usize {
        self.moe_intermediate_size.unwrap_or(self.intermediate_size)
    }

    /// Whether the top-k routing weights are renormalised (Mixtral: always; the others:
    /// `norm_topk_prob`, false by default as in their transformers configs).
    pub fn renormalise_topk(&self) -> bool {
        self.family_checked() == Family::Mixtral || self.norm_topk_prob.unwrap_or(false)
    }

    /// The sliding window of layer `i`, `None` for full attention (HF semantics per family:
    /// `MistralAttention`, and `Qwen2Config.__post_init__`'s `layer_types`, transformers 5.23).
    pub fn layer_window(&self, i: usize) -> Option<usize> {
        match self.family_checked() {
            Family::Mistral | Family::Mixtral => self.sliding_window,
            Family::Qwen2 | Family::Qwen3 | Family::Qwen3Moe => {
                let window = self.sliding_window.filter(|_| self.use_sliding_window)?;
                let sliding = match &self.layer_types {
                    Some(types) => types[i] == "sliding_attention",
                    None => i >= self.max_window_layers.unwrap_or(0),
                };
                sliding.then_some(window)
            }
            // Sliding windows on a vision-language model are refused by `validate`.
            Family::Llama | Family::Olmoe | Family::Qwen2Vl | Family::Qwen25Vl => None,
        }
    }

    /// Checks the invariants the implementation relies on, naming the offending field.
    /// Every size at most its bound (far above released models: vocabularies of 262k, hidden
    /// sizes of 16k, 126 layers, 10M positions; below what overflows a tensor's byte count),
    /// and the parameter count at most
    /// [`MAX_PARAMETERS`]: sizes past them overflow a tensor's byte count or ask for memory
    /// no device has, where libtorch would abort instead of answering.
    fn validate_sizes(&self) -> Result<()> {
        let sizes = [
            ("vocab_size", self.vocab_size, 1 << 24),
            ("hidden_size", self.hidden_size, 1 << 18),
            ("intermediate_size", self.intermediate_size, 1 << 20),
            ("num_hidden_layers", self.num_hidden_layers, 1 << 12),
            ("num_attention_heads", self.num_attention_heads, 1 << 12),
            ("num_key_value_heads", self.kv_heads(), 1 << 12),
            (
                "max_position_embeddings",
                self.max_position_embeddings,
                1 << 26,
            ),
            ("head_dim", self.head_dim(), 1 << 12),
            ("moe_intermediate_size", self.expert_size(), 1 << 20),
            ("num_experts", self.num_experts.unwrap_or(0), 1 << 12),
        ];
        for (name, v, limit) in sizes {
            if v > limit {
                bail!("config field `{name}` = {v} is above {limit}, past any model this build can hold");
            }
        }
        let params = self.parameter_estimate();
        if params > MAX_PARAMETERS {
            bail!(
                "the config describes about {params:.3e} parameters, above the {MAX_PARAMETERS:.0e} this build can hold (check vocab_size, hidden_size, intermediate_size, num_hidden_layers)"
            );
        }
        Ok(())
    }

    /// About how many parameters the decoder has (embeddings, attention, MLPs or experts), in
    /// floating point so that no product overflows.
    pub fn parameter_estimate(&self) -> f64 {
        let (h, v) = (self.hidden_size as f64, self.vocab_size as f64);
        let hd = self.head_dim() as f64;
        let attn = h * hd * (2.0 * self.num_attention_heads as f64 + 2.0 * self.kv_heads() as f64);
        let experts = self.num_experts.unwrap_or(1).max(1) as f64;
        let mlp = 3.0 * h * self.expert_size().max(self.intermediate_size) as f64 * experts;
        let embed = if self.tie_word_embeddings {
            v * h
        } else {
            2.0 * v * h
        };
        embed + self.num_hidden_layers as f64 * (attn + mlp)
    }

    pub fn validate(&self) -> Result<()> {
        let family = self.family()?;
        // The head count divides `hidden_size` in `head_dim()`: checked first.
        if self.num_attention_heads == 0 {
            bail!("config field `num_attention_heads` must be positive, got 0");
        }
        self.validate_sizes()?;
        let positive = [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("num_key_value_heads", self.kv_heads()),
            ("max_position_embeddings", self.max_position_embeddings),
            ("head_dim", self.head_dim()),
        ];
        for (name, v) in positive {
            if v == 0 {
                bail!("config field `{name}` must be positive, got 0");
            }
        }
        if !self.num_attention_heads.is_multiple_of(self.kv_heads()) {
            bail!(
                "config field `num_key_value_heads` ({}) must divide `num_attention_heads` ({})",
                self.kv_heads(),
                self.num_attention_heads
            );
        }
        if !self.head_dim().is_multiple_of(2) {
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
        if self.mlp_bias && family != Family::Llama {
            bail!(
                "config field `mlp_bias` is only supported for llama, not {}",
                self.model_type
            );
        }
        if self.attention_bias && matches!(family, Family::Mistral | Family::Mixtral) {
            bail!(
                "config field `attention_bias` = true is not supported for {}",
                self.model_type
            );
        }
        if self.sliding_window == Some(0) {
            bail!("config field `sliding_window` must be positive, got 0");
        }
        if matches!(family, Family::Llama | Family::Olmoe) && self.sliding_window.is_some() {
            bail!(
                "config field `sliding_window` is not supported for {}",
                self.model_type
            );
        }
        if let Some(types) = &self.layer_types {
            if types.len() != self.num_hidden_layers {
                bail!(
                    "config field `layer_types` has {} entries for {} layers",
                    types.len(),
                    self.num_hidden_layers
                );
            }
            if let Some(bad) = types
                .iter()
                .find(|t| *t != "full_attention" && *t != "sliding_attention")
            {
                bail!("config field `layer_types`: unsupported layer type {bad:?}");
            }
        }
        if let Some(rs) = &self.rope_scaling {
            rs.validate("rope_scaling")?;
        }
        self.validate_vision(family)?;
        self.validate_moe(family)
    }

    /// The vision-language fields: required and consistent for the VL families (M-RoPE
    /// sections that cover the head, an image token inside the vocabulary, a tower whose
    /// output width is the hidden size), absent otherwise.
    fn validate_vision(&self, family: Family) -> Result<()> {
        let Some(variant) = family.vision_variant() else {
            let set = [
                ("mrope_section", self.mrope_section.is_some()),
                ("image_token_id", self.image_token_id.is_some()),
                ("vision_config", self.vision.is_some()),
            ];
            if let Some((name, _)) = set.iter().find(|(_, on)| *on) {
                bail!(
                    "config field `{name}` is only read by the vision-language families, not {}",
                    self.model_type
                );
            }
            return Ok(());
        };
        if self.use_sliding_window {
            bail!(
                "config field `use_sliding_window` = true is not supported for {}",
                self.model_type
            );
        }
        if self.rope_scaling.is_some() {
            bail!(
                "config field `rope_scaling`: only the default M-RoPE is supported for {}",
                self.model_type
            );
        }
        let Some(sections) = &self.mrope_section else {
            bail!(
                "config field `mrope_section` is required for {}",
                self.model_type
            );
        };
        if sections.len() != 3 || sections.iter().sum::<usize>() != self.head_dim() / 2 {
            bail!(
                "config field `mrope_section` = {sections:?} must be three sizes summing to head_dim / 2 = {}",
                self.head_dim() / 2
            );
        }
        match self.image_token_id {
            Some(id) if (0..self.vocab_size as i64).contains(&id) => {}
            Some(id) => bail!(
                "config field `image_token_id` = {id} is outside the vocabulary (0..{})",
                self.vocab_size
            ),
            None => bail!(
                "config field `image_token_id` is required for {}",
                self.model_type
            ),
        }
        let Some(vision) = &self.vision else {
            bail!(
                "config field `vision_config` is required for {}",
                self.model_type
            );
        };
        vision.validate()?;
        if vision.variant != variant {
            bail!(
                "config field `vision_config` describes the {:?} tower, not {}'s",
                vision.variant,
                self.model_type
            );
        }
        if vision.out_size != self.hidden_size {
            bail!(
                "config field `vision_config` merges to width {} but `hidden_size` is {}",
                vision.out_size,
                self.hidden_size
            );
        }
        Ok(())
    }

    /// The sparse-MLP fields: required and consistent for the MoE families, absent otherwise.
    fn validate_moe(&self, family: Family) -> Result<()> {
        if !family.is_moe() {
            let set = [
                ("num_experts", self.num_experts.is_some()),
                ("num_experts_per_tok", self.num_experts_per_tok.is_some()),
                ("clip_qkv", self.clip_qkv.is_some()),
            ];
            if let Some((name, _)) = set.iter().find(|(_, on)| *on) {
                bail!(
                    "config field `{name}` is only read by the MoE families, not {}",
                    self.model_type
                );
            }
            return Ok(());
        }
        let (Some(e), Some(k)) = (self.num_experts, self.num_experts_per_tok) else {
            bail!(
                "config fields `num_experts` and `num_experts_per_tok` are required for {}",
                self.model_type
            );
        };
        if e == 0 || k == 0 || k > e {
            bail!("config fields `num_experts_per_tok` ({k}) must be between 1 and `num_experts` ({e})");
        }
        if self.expert_size() == 0 || self.decoder_sparse_step == Some(0) {
            bail!(
                "config fields `moe_intermediate_size` and `decoder_sparse_step` must be positive"
            );
        }
        if let Some(c) = self.clip_qkv {
            if family != Family::Olmoe || !(c.is_finite() && c > 0.0) {
                bail!(
                    "config field `clip_qkv` must be positive and is OLMoE's only, got {c} for {}",
                    self.model_type
                );
            }
        }
        Ok(())
    }
}

impl RopeScaling {
    /// Checks the type and the parameters it needs, naming them under `key`: the config key
    /// the file used (`rope_scaling` in 4.x layout, `rope_parameters` in 5.x).
    pub fn validate(&self, key: &str) -> Result<()> {
        match self.rope_type.as_str() {
            "linear" => {}
            "llama3" => {
                for (field, v) in [
                    ("low_freq_factor", self.low_freq_factor),
                    ("high_freq_factor", self.high_freq_factor),
                ] {
                    if v.is_none() {
                        bail!("config field `{key}.{field}` is required for rope_type llama3");
                    }
                }
                if self.low_freq_factor == self.high_freq_factor {
                    bail!("config fields `{key}.low_freq_factor` and `high_freq_factor` must differ");
                }
            }
            other => bail!(
                "config field `{key}.rope_type` = {other:?} is not supported (supported: default, linear, llama3)"
            ),
        }
        if self.factor.is_nan() || self.factor <= 0.0 {
            bail!(
                "config field `{key}.factor` must be positive, got {}",
                self.factor
            );
        }
        Ok(())
    }
}
