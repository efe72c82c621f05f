//! Reading and writing HF `config.json` files, and the key policy.
//!
//! Policy for keys of a `config.json`:
//! - fields of [`ModelConfig`] are read (with transformers' per-family defaults for the ones
//!   that change the math when absent: Qwen3 `head_dim` 128, Mistral `sliding_window` 4096,
//!   Qwen2/3 `max_window_layers` 28 — `configuration_*.py`, transformers 5.23);
//! - RoPE may be given as transformers 4.x `rope_theta` + `rope_scaling` or 5.x
//!   `rope_parameters`; types `default`, `linear`, `llama3` are supported, others are errors;
//! - [`HARMLESS`] keys do not change the forward pass; they are kept verbatim in
//!   [`ModelConfig::extra`] and written back on save. A few of them are checked where a value
//!   would change the math (`attention_dropout` must be 0, `partial_rotary_factor` 1);
//! - anything else is an error naming the key, unless `allow_unknown` (then it is kept in
//!   `extra` like a harmless key).

use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Map, Value};

use crate::model::config::{Family, ModelConfig, RopeScaling};
use crate::model::vision::config::VisionConfig;

/// Reading and writing a [`ModelConfig`] as a checkpoint's `config.json` live here, beside the
/// key policy, so the config types import nothing from the checkpoint module.
impl ModelConfig {
    /// Reads and validates an HF `config.json`, rejecting unknown keys (see [`parse`] for the
    /// policy and an opt-out).
    pub fn load(path: &Path) -> Result<Self> {
        read(path, false)
    }

    /// Writes an HF `config.json` that transformers and vLLM load (`architectures`,
    /// `model_type`, `torch_dtype`/`dtype` = `dtype`, ...). `dtype` is the weights' dtype name
    /// (`float32`, `bfloat16`, `float16`).
    pub fn save(&self, path: &Path, dtype: &str) -> Result<()> {
        write(self, path, dtype)
    }
}

/// Keys read into [`ModelConfig`] fields.
const FIELDS: &[&str] = &[
    "model_type",
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "max_position_embeddings",
    "rms_norm_eps",
    "rope_theta",
    "rope_scaling",
    "tie_word_embeddings",
    "attention_bias",
    "mlp_bias",
    "hidden_act",
    "sliding_window",
    "use_sliding_window",
    "max_window_layers",
    "layer_types",
    "num_experts",
    "num_local_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "norm_topk_prob",
    "mlp_only_layers",
    "decoder_sparse_step",
    "router_aux_loss_coef",
    "clip_qkv",
    "image_token_id",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
];

/// Keys that do not change the forward pass (metadata, tokenizer ids, generation defaults, init
/// scale, training-only switches at their inference value). Kept and written back verbatim.
/// The list is every attribute that transformers' `PretrainedConfig` (4.46 and 5.23) and the
/// Llama/Qwen2/Qwen3/Mistral configuration classes write (`to_json_string(use_diff=False)`;
/// the fixtures in `fixtures/hf/configs`), plus keys GGUF conversion and original
/// SmolLM2/nanotron exports add. Values that would change the math are checked in
/// [`check_harmless`].
pub const HARMLESS: &[&str] = &[
    // Metadata and bookkeeping.
    "_name_or_path",
    "_model_name_or_path",
    "_attn_implementation_autoset",
    "_attn_implementation",
    "attn_implementation",
    "transformers_version",
    "auto_map",
    "tokenizer_class",
    "id2label",
    "label2id",
    "finetuning_task",
    "problem_type",
    "task_specific_params",
    "prefix",
    "is_llama_config",
    // Output and runtime switches (what is returned, not what is computed).
    "use_cache",
    "output_attentions",
    "output_hidden_states",
    "return_dict",
    "torchscript",
    "use_bfloat16",
    "tf_legacy_loss",
    "chunk_size_feed_forward",
    "is_decoder",
    "is_encoder_decoder",
    "tie_encoder_decoder",
    "cross_attention_hidden_size",
    // Training-only (checked: must be at the inference value) and init scale.
    "initializer_range",
    "pretraining_tp",
    "attention_dropout",
    "partial_rotary_factor",
    "add_cross_attention",
    "pruned_heads",
    "rope_interleaved",
    // Token ids the tokenizer and generation use; the forward pass does not.
    "unk_token_id",
    "sep_token_id",
    "decoder_start_token_id",
    "forced_bos_token_id",
    "forced_eos_token_id",
    // Generation defaults (4.x wrote them into config.json).
    "max_length",
    "min_length",
    "do_sample",
    "early_stopping",
    "num_beams",
    "num_beam_groups",
    "diversity_penalty",
    "temperature",
    "top_p",
    "top_k",
    "typical_p",
    "repetition_penalty",
    "length_penalty",
    "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size",
    "bad_words_ids",
    "num_return_sequences",
    "output_scores",
    "return_dict_in_generate",
    "remove_invalid_values",
    "exponential_decay_length_penalty",
    "suppress_tokens",
    "begin_suppress_tokens",
    "original_max_position_embeddings",
    // MoE: what a forward returns, and Mixtral's training-time router noise (checked: 0).
    "output_router_logits",
    "router_jitter_noise",
    // Vision-language: the prompt's other special tokens (the processor writes them; the
    // forward reads only `image_token_id`). Videos are refused where they would enter.
    "vision_start_token_id",
    "vision_end_token_id",
    "vision_token_id",
    "video_token_id",
];

/// Keys consumed here and regenerated on save.
const REGENERATED: &[&str] = &["architectures", "rope_parameters", "torch_dtype", "dtype"];

/// Reads `path` and parses it with [`parse`]; errors name the file.
pub fn read(path: &Path, allow_unknown: bool) -> Result<ModelConfig> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let value: Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    parse(&value, allow_unknown).with_context(|| format!("invalid model config {}", path.display()))
}

/// The weights' dtype a `config.json` states (`dtype`, else `torch_dtype`), if any.
pub fn stored_dtype(path: &Path) -> Result<Option<String>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let value: Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    Ok(["dtype", "torch_dtype"]
        .iter()
        .find_map(|k| value.get(*k).and_then(Value::as_str).map(String::from)))
}

/// Applies the key policy to a parsed `config.json` and validates the result.
pub fn parse(value: &Value, allow_unknown: bool) -> Result<ModelConfig> {
    let obj = value
        .as_object()
        .ok_or_else(|| anyhow!("config.json must hold a JSON object"))?;
    let family = family_of(obj)?;
    let Some(variant) = family.vision_variant() else {
        return parse_text(obj, family, allow_unknown);
    };
    let (text, vision) = split_vision_language(obj)?;
    let mut cfg = parse_text(&text, family, allow_unknown)?;
    cfg.vision = Some(VisionConfig::from_hf(variant, &vision)?);
    cfg.validate()?;
    Ok(cfg)
}

/// A vision-language `config.json` as one flat text config and its `vision_config`. The
/// transformers-5 layout nests the language model's keys in `text_config` (with its own
/// `model_type`, `qwen2_vl_text`); the Hub's transformers-4 layout has them at the top, as
/// `Qwen2VLConfig` still accepts. Top-level keys win, as there.
fn split_vision_language(obj: &Map<String, Value>) -> Result<(Map<String, Value>, Value)> {
    let mut flat = match obj.get("text_config") {
        Some(Value::Object(t)) => {
            let mut t = t.clone();
            t.remove("model_type");
            t
        }
        None | Some(Value::Null) => Map::new(),
        Some(other) => bail!("config key `text_config` must be an object, got {other}"),
    };
    for (k, v) in obj {
        if k != "text_config" && k != "vision_config" {
            flat.insert(k.clone(), v.clone());
        }
    }
    let vision = obj.get("vision_config").cloned().ok_or_else(|| {
        anyhow!("config key `vision_config` is required for a vision-language model")
    })?;
    Ok((flat, vision))
}

/// [`parse`] for a text decoder's keys (a vision-language model's language side included).
fn parse_text(
    obj: &Map<String, Value>,
    family: Family,
    allow_unknown: bool,
) -> Result<ModelConfig> {
    let mut fields = Map::new();
    let mut extra = Map::new();
    for (key, v) in obj {
        let key = key.as_str();
        if FIELDS.contains(&key) {
            if key.ends_with("_token_id") && v.is_array() {
                // Llama 3 lists several end tokens; the model math does not use them.
                extra.insert(key.into(), v.clone());
            } else if !v.is_null() {
                fields.insert(key.into(), v.clone());
            }
        } else if HARMLESS.contains(&key) || allow_unknown && !REGENERATED.contains(&key) {
            extra.insert(key.into(), v.clone());
        } else if !REGENERATED.contains(&key) {
            bail!(
                "unknown config key `{key}`: reinforge's {} implementation does not read it and \
                 it is not on the list of known-harmless keys (allow unknown config keys to ignore it)",
                family.model_type()
            );
        }
    }
    check_harmless(obj)?;
    fields.insert("model_type".into(), json!(family.model_type()));
    // Mixtral's name for it (transformers' Qwen3-MoE config writes it too).
    if let Some(n) = fields.remove("num_local_experts") {
        fields.entry("num_experts").or_insert(n);
    }
    family_defaults(family, obj, &mut fields);
    let rope = rope_from(obj, &fields)?;
    fields.remove("rope_scaling");
    if let Some(theta) = rope.theta {
        fields.insert("rope_theta".into(), json!(theta));
    }
    if let Some(sections) = rope.mrope_section {
        fields.insert("mrope_section".into(), sections);
    } else if family.vision_variant().is_some() {
        // `Qwen2VLRotaryEmbedding`'s default when the key is absent (transformers 5.23).
        fields.insert("mrope_section".into(), json!([16, 24, 24]));
    }
    if matches!(family, Family::Qwen2 | Family::Qwen2Vl | Family::Qwen25Vl) {
        // Qwen2's q/k/v bias is not a config switch (`Qwen2Attention`, transformers 5.23).
        fields.remove("attention_bias");
    }
    let mut cfg: ModelConfig =
        serde_json::from_value(Value::Object(fields)).map_err(|e| anyhow!("config.json: {e}"))?;
    cfg.rope_scaling = rope.scaling;
    cfg.extra = extra;
    if family.vision_variant().is_none() {
        cfg.validate()?;
    }
    Ok(cfg)
}

/// The family from `model_type`, cross-checked with `architectures` when both are present.
fn family_of(obj: &Map<String, Value>) -> Result<Family> {
    let arch = match obj.get("architectures") {
        None | Some(Value::Null) => None,
        Some(Value::Array(a)) if a.len() == 1 && a[0].is_string() => a[0].as_str(),
        Some(other) => bail!("config key `architectures` must list one class name, got {other}"),
    };
    let model_type = obj.get("model_type").and_then(Value::as_str);
    match (model_type, arch) {
        (Some(mt), Some(a)) => {
            let family =
                Family::from_model_type(mt).with_context(|| format!("architectures = [{a:?}]"))?;
            let by_arch =
                Family::from_architecture(a).with_context(|| format!("model_type = {mt:?}"))?;
            if by_arch != family {
                bail!("config keys disagree: architectures = [{a:?}] but model_type = {mt:?}");
            }
            Ok(family)
        }
        (Some(mt), None) => Family::from_model_type(mt),
        (None, Some(a)) => Family::from_architecture(a),
        (None, None) => bail!("config.json names no architecture: `model_type` is missing"),
    }
}

/// Harmless keys whose value would change the math if it were not the inference default.
fn check_harmless(obj: &Map<String, Value>) -> Result<()> {
    let must_be_off = [
        ("add_cross_attention", "cross-attention"),
        ("rope_interleaved", "interleaved (GPT-J style) RoPE"),
    ];
    for (key, what) in must_be_off {
        if obj.get(key).and_then(Value::as_bool) == Some(true) {
            bail!("config key `{key}` = true is not supported ({what} is not implemented)");
        }
    }
    if let Some(Value::Object(heads)) = obj.get("pruned_heads") {
        if !heads.is_empty() {
            bail!(
                "config key `pruned_heads` is not empty: pruned attention heads are not supported"
            );
        }
    }
    if let Some(j) = obj.get("router_jitter_noise").and_then(Value::as_f64) {
        if j != 0.0 {
            bail!("config key `router_jitter_noise` = {j} is not supported (routing is deterministic)");
        }
    }
    if let Some(p) = obj.get("attention_dropout").and_then(Value::as_f64) {
        if p != 0.0 {
            bail!(
                "config key `attention_dropout` = {p} is not supported (reinforge has no dropout)"
            );
        }
    }
    let partial = obj.get("partial_rotary_factor").or_else(|| {
        obj.get("rope_parameters")
            .and_then(|r| r.get("partial_rotary_factor"))
    });
    if let Some(f) = partial.and_then(Value::as_f64) {
        if f != 1.0 {
            bail!("config key `partial_rotary_factor` = {f} is not supported (only full rotary)");
        }
    }
    Ok(())
}

/// transformers' class defaults for absent keys that change the math (`configuration_*.py`,
/// transformers 5.23).
fn family_defaults(family: Family, obj: &Map<String, Value>, fields: &mut Map<String, Value>) {
    let mut default = |key: &str, v: Value| {
        fields.entry(key.to_string()).or_insert(v);
    };
    match family {
        Family::Llama => {
            default("max_position_embeddings", json!(2048));
        }
        Family::Qwen2Vl | Family::Qwen25Vl => {
            default("max_position_embeddings", json!(32768));
            default("max_window_layers", json!(80));
        }
        Family::Qwen2 | Family::Qwen3 | Family::Qwen3Moe => {
            default("max_position_embeddings", json!(32768));
            default("max_window_layers", json!(28));
            if family == Family::Qwen3 {
                default("head_dim", json!(128));
            }
            if family == Family::Qwen3Moe {
                // Qwen3MoeConfig: no head_dim of its own (hidden / heads), 128 experts, top 8.
                default("num_experts", json!(128));
                default("num_experts_per_tok", json!(8));
                default("moe_intermediate_size", json!(768));
            }
        }
        Family::Olmoe => {
            default("max_position_embeddings", json!(4096));
            default("num_experts", json!(64));
            default("num_experts_per_tok", json!(8));
        }
        Family::Mixtral => {
            default("max_position_embeddings", json!(4096 * 32));
            default("num_experts_per_tok", json!(2));
            default("num_experts", json!(8));
        }
        Family::Mistral => {
            default("max_position_embeddings", json!(4096 * 32));
            // 4096 only when the key is absent; `null` switches the window off.
            if !obj.contains_key("sliding_window") {
                default("sliding_window", json!(4096));
            }
        }
    }
}

/// The RoPE keys of a `config.json`.
struct Rope {
    theta: Option<f64>,
    scaling: Option<RopeScaling>,
    /// M-RoPE's split of the frequencies over the three position streams (vision-language).
    mrope_section: Option<Value>,
}

/// The RoPE settings from 4.x keys (`rope_theta`, `rope_scaling`, whose type `mrope` is
/// default RoPE with `mrope_section`) or a 5.x `rope_parameters` object.
fn rope_from(obj: &Map<String, Value>, fields: &Map<String, Value>) -> Result<Rope> {
    let key = match obj.get("rope_parameters") {
        Some(Value::Object(_)) => "rope_parameters",
        _ => "rope_scaling",
    };
    let (theta, scaling) = match obj.get("rope_parameters") {
        Some(Value::Object(p)) => {
            if p.values().any(Value::is_object) {
                bail!("config key `rope_parameters`: per-layer-type RoPE is not supported");
            }
            let theta = p.get("rope_theta").and_then(Value::as_f64);
            let mut rest = p.clone();
            rest.remove("rope_theta");
            rest.remove("partial_rotary_factor");
            (
                theta.or_else(|| fields.get("rope_theta").and_then(Value::as_f64)),
                rest,
            )
        }
        Some(Value::Null) | None => {
            let theta = fields.get("rope_theta").and_then(Value::as_f64);
            match obj.get("rope_scaling") {
                Some(Value::Object(s)) => (theta, s.clone()),
                Some(Value::Null) | None => (theta, Map::new()),
                Some(other) => bail!("config key `rope_scaling` must be an object, got {other}"),
            }
        }
        Some(other) => bail!("config key `rope_parameters` must be an object, got {other}"),
    };
    let mut scaling = scaling;
    let mrope_section = scaling.remove("mrope_section");
    let rope_type = scaling
        .get("rope_type")
        .or_else(|| scaling.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("default");
    // transformers 4's spelling of M-RoPE; 5 reads it as the default type with sections.
    let default = rope_type == "default" || rope_type == "mrope" && mrope_section.is_some();
    if default {
        return Ok(Rope {
            theta,
            scaling: None,
            mrope_section,
        });
    }
    let mut rs: RopeScaling = serde_json::from_value(Value::Object(scaling.clone()))
        .map_err(|e| anyhow!("config key `{key}` (rope_type {rope_type:?}): {e}"))?;
    rs.validate(key)?;
    if rs.rope_type == "llama3" {
        // HF gives a top-level `original_max_position_embeddings` priority, then defaults to
        // `max_position_embeddings` (`standardize_rope_params`, transformers 5.23).
        let top = obj
            .get("original_max_position_embeddings")
            .and_then(Value::as_u64);
        let max_pos = fields
            .get("max_position_embeddings")
            .and_then(Value::as_u64);
        rs.original_max_position_embeddings = top
            .map(|v| v as usize)
            .or(rs.original_max_position_embeddings)
            .or(max_pos.map(|v| v as usize));
    }
    Ok(Rope {
        theta,
        scaling: Some(rs),
        mrope_section,
    })
}

/// Writes `cfg` as an HF `config.json`: `cfg.extra` first, then every field in transformers
/// 4.x layout (`rope_theta` + `rope_scaling`, which transformers 5.x and vLLM also read), and
/// `dtype` / `torch_dtype` (5.x / 4.x spelling).
pub fn write(cfg: &ModelConfig, path: &Path, dtype: &str) -> Result<()> {
    let family = cfg.family()?;
    let mut m = cfg.extra.clone();
    let mut put = |k: &str, v: Value| {
        m.insert(k.to_string(), v);
    };
    put("architectures", json!([family.architecture()]));
    put("model_type", json!(family.model_type()));
    put("vocab_size", json!(cfg.vocab_size));
    put("hidden_size", json!(cfg.hidden_size));
    put("intermediate_size", json!(cfg.intermediate_size));
    put("num_hidden_layers", json!(cfg.num_hidden_layers));
    put("num_attention_heads", json!(cfg.num_attention_heads));
    put("num_key_value_heads", json!(cfg.kv_heads()));
    put("head_dim", json!(cfg.head_dim()));
    put(
        "max_position_embeddings",
        json!(cfg.max_position_embeddings),
    );
    put("rms_norm_eps", json!(cfg.rms_norm_eps));
    if let Some(sections) = &cfg.mrope_section {
        // transformers 5's layout: the only one its vision-language configs write.
        put(
            "rope_parameters",
            json!({"rope_type": "default", "rope_theta": cfg.rope_theta, "mrope_section": sections}),
        );
    } else {
        put("rope_theta", json!(cfg.rope_theta));
        put("rope_scaling", serde_json::to_value(&cfg.rope_scaling)?);
    }
    put("tie_word_embeddings", json!(cfg.tie_word_embeddings));
    put("hidden_act", json!(cfg.hidden_act));
    match family {
        Family::Llama => {
            put("attention_bias", json!(cfg.attention_bias));
            put("mlp_bias", json!(cfg.mlp_bias));
        }
        Family::Qwen3 | Family::Qwen3Moe | Family::Olmoe => {
            put("attention_bias", json!(cfg.attention_bias))
        }
        Family::Qwen2 | Family::Qwen2Vl | Family::Qwen25Vl | Family::Mistral | Family::Mixtral => {}
    }
    if family.is_moe() {
        let experts = if family == Family::Mixtral {
            "num_local_experts"
        } else {
            "num_experts"
        };
        put(experts, json!(cfg.num_experts));
        put("num_experts_per_tok", json!(cfg.num_experts_per_tok));
        let optional = [
            ("moe_intermediate_size", json!(cfg.moe_intermediate_size)),
            ("norm_topk_prob", json!(cfg.norm_topk_prob)),
            ("mlp_only_layers", json!(cfg.mlp_only_layers)),
            ("decoder_sparse_step", json!(cfg.decoder_sparse_step)),
            ("router_aux_loss_coef", json!(cfg.router_aux_loss_coef)),
            ("clip_qkv", json!(cfg.clip_qkv)),
        ];
        for (k, v) in optional.into_iter().filter(|(_, v)| !v.is_null()) {
            put(k, v);
        }
    }
    match family {
        Family::Mistral | Family::Mixtral => put("sliding_window", json!(cfg.sliding_window)),
        Family::Qwen2 | Family::Qwen3 | Family::Qwen3Moe | Family::Qwen2Vl | Family::Qwen25Vl => {
            put("sliding_window", json!(cfg.sliding_window));
            put("use_sliding_window", json!(cfg.use_sliding_window));
            let default_layers = if family.vision_variant().is_some() {
                80
            } else {
                28
            };
            put(
                "max_window_layers",
                json!(cfg.max_window_layers.unwrap_or(default_layers)),
            );
            if let Some(types) = &cfg.layer_types {
                put("layer_types", json!(types));
            }
        }
        Family::Llama | Family::Olmoe => {}
    }
    for (k, v) in [
        ("bos_token_id", cfg.bos_token_id),
        ("eos_token_id", cfg.eos_token_id),
        ("pad_token_id", cfg.pad_token_id),
    ] {
        if let Some(id) = v {
            put(k, json!(id));
        }
    }
    if let Some(id) = cfg.image_token_id {
        put("image_token_id", json!(id));
    }
    put("dtype", json!(dtype));
    put("torch_dtype", json!(dtype));
    if let Some(vision) = &cfg.vision {
        m = nest_vision_language(m, &cfg.extra, family, vision);
    }
    std::fs::write(
        path,
        serde_json::to_string_pretty(&Value::Object(m))? + "\n",
    )
    .with_context(|| format!("writing {}", path.display()))
}

/// Keys a vision-language `config.json` keeps at its top level in transformers 5's layout
/// (`Qwen2VLConfig.to_dict`); the language model's keys go into `text_config`.
const VISION_LANGUAGE_TOP: &[&str] = &[
    "architectures",
    "model_type",
    "image_token_id",
    "tie_word_embeddings",
    "dtype",
    "torch_dtype",
];

/// The flat `m` in transformers 5's nested layout: the language model's keys in
/// `text_config` (`model_type` `<family>_text`), the tower's in `vision_config`, the top
/// level keeping [`VISION_LANGUAGE_TOP`] and the loaded file's harmless keys.
fn nest_vision_language(
    m: Map<String, Value>,
    extra: &Map<String, Value>,
    family: Family,
    vision: &VisionConfig,
) -> Map<String, Value> {
    let mut top = Map::new();
    let mut text = Map::new();
    for (k, v) in m {
        if VISION_LANGUAGE_TOP.contains(&k.as_str()) || extra.contains_key(&k) {
            top.insert(k, v);
        } else {
            text.insert(k, v);
        }
    }
    text.insert(
        "model_type".into(),
        json!(format!("{}_text", family.model_type())),
    );
    top.insert("text_config".into(), Value::Object(text));
    top.insert("vision_config".into(), vision.to_hf());
    top
}
