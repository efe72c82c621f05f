//! The vision tower's settings, read from the `vision_config` object of a Qwen2-VL or
//! Qwen2.5-VL `config.json` in either layout: transformers 5's (`in_channels`, `rope_parameters`)
//! and the Hub's transformers-4 one (`in_chans`, `spatial_patch_size`, no rope key).
//! Field names differ between the two towers (Qwen2-VL's `embed_dim` is Qwen2.5-VL's
//! `hidden_size`), so they are normalised here to what the tower computes with.

use anyhow::{anyhow, bail, Result};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

/// Which tower: Qwen2-VL (LayerNorm, QuickGELU MLP, full attention per image) or Qwen2.5-VL
/// (RMSNorm, SwiGLU MLP with biases, window attention outside `fullatt_block_indexes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VisionVariant {
    Qwen2Vl,
    Qwen25Vl,
}

/// The tower's hyper-parameters, normalised across the two variants and layouts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VisionConfig {
    pub variant: VisionVariant,
    /// Vision blocks.
    pub depth: usize,
    /// Width of the blocks (Qwen2-VL `embed_dim`, Qwen2.5-VL `hidden_size`).
    pub width: usize,
    /// Width of a block's MLP (Qwen2-VL `embed_dim * mlp_ratio`, Qwen2.5-VL `intermediate_size`).
    pub mlp_width: usize,
    /// Width of the merger's output: the language model's hidden size (Qwen2-VL
    /// `hidden_size`, Qwen2.5-VL `out_hidden_size`).
    pub out_size: usize,
    pub num_heads: usize,
    pub in_channels: usize,
    pub patch_size: usize,
    pub temporal_patch_size: usize,
    pub spatial_merge_size: usize,
    /// The blocks' MLP activation: `quick_gelu` (Qwen2-VL) or `silu` (Qwen2.5-VL).
    pub hidden_act: String,
    /// Theta of the 2-D (axial) vision rotary embedding.
    pub rope_theta: f64,
    /// Qwen2.5-VL: window side in pixels of the windowed blocks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_size: Option<usize>,
    /// Qwen2.5-VL: the blocks with full attention over each image.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fullatt_block_indexes: Vec<usize>,
}

/// Keys of a `vision_config` that do not change the tower's math.
const HARMLESS: &[&str] = &[
    "model_type",
    "dtype",
    "torch_dtype",
    "initializer_range",
    "tokens_per_second",
    "_attn_implementation_autoset",
];

impl VisionConfig {
    /// Reads a `vision_config` object (either layout); unknown keys are errors naming them.
    pub fn from_hf(variant: VisionVariant, value: &Value) -> Result<Self> {
        let obj = value
            .as_object()
            .ok_or_else(|| anyhow!("config key `vision_config` must be an object"))?;
        let get = |keys: &[&str]| {
            keys.iter()
                .find_map(|k| obj.get(*k).filter(|v| !v.is_null()))
        };
        let size = |keys: &[&str], default: Option<usize>| -> Result<usize> {
            match get(keys) {
                Some(v) => v.as_u64().map(|n| n as usize).ok_or_else(|| {
                    anyhow!(
                        "config key `vision_config.{}` must be a whole number",
                        keys[0]
                    )
                }),
                None => default
                    .ok_or_else(|| anyhow!("config key `vision_config.{}` is required", keys[0])),
            }
        };
        let known: &[&str] = match variant {
            VisionVariant::Qwen2Vl => &["embed_dim", "hidden_size", "mlp_ratio", "num_heads"],
            VisionVariant::Qwen25Vl => &[
                "hidden_size",
                "intermediate_size",
                "out_hidden_size",
                "num_heads",
                "window_size",
                "fullatt_block_indexes",
            ],
        };
        let common = [
            "depth",
            "hidden_act",
            "in_channels",
            "in_chans",
            "patch_size",
            "spatial_patch_size",
            "temporal_patch_size",
            "spatial_merge_size",
            "rope_parameters",
        ];
        if let Some(key) = obj.keys().find(|k| {
            !known.contains(&k.as_str())
                && !common.contains(&k.as_str())
                && !HARMLESS.contains(&k.as_str())
        }) {
            bail!("unknown config key `vision_config.{key}`: the vision tower does not read it");
        }
        let rope_theta = rope_theta(obj)?;
        let (width, mlp_width, out_size) = match variant {
            VisionVariant::Qwen2Vl => {
                let width = size(&["embed_dim"], Some(1280))?;
                let ratio = get(&["mlp_ratio"]).and_then(Value::as_f64).unwrap_or(4.0);
                (
                    width,
                    (width as f64 * ratio) as usize,
                    size(&["hidden_size"], Some(3584))?,
                )
            }
            VisionVariant::Qwen25Vl => (
                size(&["hidden_size"], Some(1280))?,
                size(&["intermediate_size"], Some(3420))?,
                size(&["out_hidden_size"], Some(3584))?,
            ),
        };
        let default_act = match variant {
            VisionVariant::Qwen2Vl => "quick_gelu",
            VisionVariant::Qwen25Vl => "silu",
        };
        let cfg = Self {
            variant,
            depth: size(&["depth"], Some(32))?,
            width,
            mlp_width,
            out_size,
            num_heads: size(&["num_heads"], Some(16))?,
            in_channels: size(&["in_channels", "in_chans"], Some(3))?,
            patch_size: size(&["patch_size", "spatial_patch_size"], Some(14))?,
            temporal_patch_size: size(&["temporal_patch_size"], Some(2))?,
            spatial_merge_size: size(&["spatial_merge_size"], Some(2))?,
            hidden_act: get(&["hidden_act"])
                .and_then(Value::as_str)
                .unwrap_or(default_act)
                .to_string(),
            rope_theta,
            window_size: match variant {
                VisionVariant::Qwen25Vl => Some(size(&["window_size"], Some(112))?),
                VisionVariant::Qwen2Vl => None,
            },
            fullatt_block_indexes: match get(&["fullatt_block_indexes"]) {
                Some(v) => serde_json::from_value(v.clone()).map_err(|e| {
                    anyhow!("config key `vision_config.fullatt_block_indexes`: {e}")
                })?,
                None if variant == VisionVariant::Qwen25Vl => vec![7, 15, 23, 31],
                None => Vec::new(),
            },
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// The `vision_config` object in transformers 5's layout for this variant (what
    /// `save_pretrained` writes), which [`Self::from_hf`] reads back to `self`.
    pub fn to_hf(&self) -> Value {
        let mut m = Map::new();
        let mut put = |k: &str, v: Value| {
            m.insert(k.to_string(), v);
        };
        match self.variant {
            VisionVariant::Qwen2Vl => {
                put("model_type", json!("qwen2_vl_vision"));
                put("embed_dim", json!(self.width));
                // transformers' default is the integer 4; keep a whole ratio whole.
                let ratio = match self.mlp_width % self.width {
                    0 => json!(self.mlp_width / self.width),
                    _ => json!(self.mlp_width as f64 / self.width as f64),
                };
                put("mlp_ratio", ratio);
                put("hidden_size", json!(self.out_size));
            }
            VisionVariant::Qwen25Vl => {
                put("model_type", json!("qwen2_5_vl_vision"));
                put("hidden_size", json!(self.width));
                put("intermediate_size", json!(self.mlp_width));
                put("out_hidden_size", json!(self.out_size));
                put("window_size", json!(self.window_size));
                put("fullatt_block_indexes", json!(self.fullatt_block_indexes));
            }
        }
        put("depth", json!(self.depth));
        put("num_heads", json!(self.num_heads));
        put("in_channels", json!(self.in_channels));
        put("patch_size", json!(self.patch_size));
        put("temporal_patch_size", json!(self.temporal_patch_size));
        put("spatial_merge_size", json!(self.spatial_merge_size));
        put("hidden_act", json!(self.hidden_act));
        put(
            "rope_parameters",
            json!({"rope_type": "axial", "rope_theta": self.rope_theta}),
        );
        Value::Object(m)
    }

    /// Width of one attention head of the tower.
    pub fn head_dim(&self) -> usize {
        self.width / self.num_heads
    }

    /// Length of one flattened patch: channels x temporal patch x patch x patch.
    pub fn patch_dim(&self) -> usize {
        self.in_channels * self.temporal_patch_size * self.patch_size * self.patch_size
    }

    /// Checks what the tower relies on, naming the field.
    pub fn validate(&self) -> Result<()> {
        for (name, v) in [
            ("depth", self.depth),
            ("width", self.width),
            ("num_heads", self.num_heads),
            ("patch_size", self.patch_size),
            ("temporal_patch_size", self.temporal_patch_size),
            ("spatial_merge_size", self.spatial_merge_size),
        ] {
            if v == 0 {
                bail!("config field `vision_config.{name}` must be positive, got 0");
            }
        }
        if !self.width.is_multiple_of(self.num_heads) || !self.head_dim().is_multiple_of(4) {
            bail!(
                "config field `vision_config.num_heads` ({}) must split the width ({}) into heads of a multiple of 4",
                self.num_heads,
                self.width
            );
        }
        let act_ok = match self.variant {
            VisionVariant::Qwen2Vl => {
                matches!(self.hidden_act.as_str(), "quick_gelu" | "gelu" | "silu")
            }
            VisionVariant::Qwen25Vl => self.hidden_act == "silu",
        };
        if !act_ok {
            bail!(
                "config field `vision_config.hidden_act` = {:?} is not supported",
                self.hidden_act
            );
        }
        if let Some(bad) = self
            .fullatt_block_indexes
            .iter()
            .find(|&&i| i >= self.depth)
        {
            bail!(
                "config field `vision_config.fullatt_block_indexes` names block {bad} of {}",
                self.depth
            );
        }
        Ok(())
    }
}

/// The vision rope theta: `rope_parameters.rope_theta` (transformers 5, type `axial`), else
/// transformers' default 10000.
fn rope_theta(obj: &Map<String, Value>) -> Result<f64> {
    let Some(p) = obj.get("rope_parameters").filter(|v| !v.is_null()) else {
        return Ok(10_000.0);
    };
    let kind = p
        .get("rope_type")
        .and_then(Value::as_str)
        .unwrap_or("axial");
    if kind != "axial" {
        bail!("config key `vision_config.rope_parameters.rope_type` = {kind:?} is not supported (axial only)");
    }
    Ok(p.get("rope_theta")
        .and_then(Value::as_f64)
        .unwrap_or(10_000.0))
}
