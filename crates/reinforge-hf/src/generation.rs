//! `generation_config.json`: a checkpoint's sampling defaults, with transformers' own defaults for whatever it
//! leaves out (`GenerationConfig._get_default_generation_params` in
//! `transformers/generation/configuration_utils.py`, 5.23). When the file is missing, transformers derives the
//! config from the model's `config.json` (`GenerationConfig.from_model_config`); so does [`GenerationConfig::from_dir`]
//! for the token ids.

use std::path::Path;

use serde::de::DeserializeOwned;
use serde_json::Value as Json;

use crate::config::GENERATION_CONFIG_FILE;
use crate::error::{read_json, read_json_opt, HfError, Result};

/// Sampling defaults of a checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerationConfig {
    /// Sample (true) or decode greedily (false). transformers' default: false.
    pub do_sample: bool,
    /// Default 1.0.
    pub temperature: f64,
    /// Default 1.0 (no nucleus cut).
    pub top_p: f64,
    /// Default 50; 0 disables the cut.
    pub top_k: usize,
    /// Default none.
    pub min_p: Option<f64>,
    /// Default 1.0 (none).
    pub repetition_penalty: f64,
    /// New tokens to generate; takes precedence over `max_length` when set.
    pub max_new_tokens: Option<usize>,
    /// Prompt + completion length cap. Default 20.
    pub max_length: usize,
    pub bos_token_id: Option<u32>,
    /// Every stop id (`eos_token_id` may be an int or a list).
    pub eos_token_ids: Vec<u32>,
    pub pad_token_id: Option<u32>,
}

impl Default for GenerationConfig {
    fn default() -> Self {
        Self {
            do_sample: false,
            temperature: 1.0,
            top_p: 1.0,
            top_k: 50,
            min_p: None,
            repetition_penalty: 1.0,
            max_new_tokens: None,
            max_length: 20,
            bos_token_id: None,
            eos_token_ids: Vec::new(),
            pad_token_id: None,
        }
    }
}

impl GenerationConfig {
    /// Reads `dir/generation_config.json`; without it, the token ids of `dir/config.json` (if present) over
    /// transformers' defaults.
    pub fn from_dir(dir: &Path) -> Result<Self> {
        let path = dir.join(GENERATION_CONFIG_FILE);
        if path.is_file() {
            return Self::from_file(&path);
        }
        let model_config = dir.join("config.json");
        match read_json_opt::<serde_json::Map<String, Json>>(&model_config)? {
            Some(map) => Self::from_json(&model_config, &Json::Object(map), true),
            None => Ok(Self::default()),
        }
    }

    /// Reads one generation_config.json file (it must exist).
    pub fn from_file(path: &Path) -> Result<Self> {
        let json: Json = read_json(path, "generation config")?;
        Self::from_json(path, &json, false)
    }

    /// Builds the config from parsed JSON; `ids_only` takes only the token ids (for a model config.json).
    fn from_json(path: &Path, json: &Json, ids_only: bool) -> Result<Self> {
        let map = json.as_object().ok_or_else(|| HfError::Field {
            path: path.to_path_buf(),
            field: "(top level)".into(),
            message: "expected a JSON object".into(),
        })?;
        let ids = |name: &str| token_ids(path, name, map.get(name));
        let d = Self::default();
        let mut cfg = Self {
            bos_token_id: ids("bos_token_id")?.first().copied(),
            eos_token_ids: ids("eos_token_id")?,
            pad_token_id: ids("pad_token_id")?.first().copied(),
            ..d.clone()
        };
        if !ids_only {
            let f = Fields { path, map };
            cfg.do_sample = f.get("do_sample")?.unwrap_or(d.do_sample);
            cfg.temperature = f.get("temperature")?.unwrap_or(d.temperature);
            cfg.top_p = f.get("top_p")?.unwrap_or(d.top_p);
            cfg.top_k = f.get("top_k")?.unwrap_or(d.top_k);
            cfg.min_p = f.get("min_p")?;
            cfg.repetition_penalty = f.get("repetition_penalty")?.unwrap_or(d.repetition_penalty);
            cfg.max_new_tokens = f.get("max_new_tokens")?;
            cfg.max_length = f.get("max_length")?.unwrap_or(d.max_length);
        }
        Ok(cfg)
    }
}

/// Typed access to one field at a time, so a type error names its field.
struct Fields<'a> {
    path: &'a Path,
    map: &'a serde_json::Map<String, Json>,
}

impl Fields<'_> {
    /// `None` when absent or `null`.
    fn get<T: DeserializeOwned>(&self, name: &str) -> Result<Option<T>> {
        match self.map.get(name) {
            None | Some(Json::Null) => Ok(None),
            Some(v) => T::deserialize(v.clone())
                .map(Some)
                .map_err(|e| HfError::Field {
                    path: self.path.to_path_buf(),
                    field: name.to_string(),
                    message: e.to_string(),
                }),
        }
    }
}

/// Token ids from `null`, an int, or a list of ints.
fn token_ids(path: &Path, field: &str, v: Option<&Json>) -> Result<Vec<u32>> {
    let bad = |found: &Json| HfError::Field {
        path: path.to_path_buf(),
        field: field.to_string(),
        message: format!("expected a token id or a list of token ids, found {found}"),
    };
    let one = |x: &Json| {
        x.as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| bad(x))
    };
    match v {
        None | Some(Json::Null) => Ok(Vec::new()),
        Some(Json::Array(items)) => items.iter().map(one).collect(),
        Some(x) => Ok(vec![one(x)?]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<GenerationConfig> {
        let json: Json = serde_json::from_str(text).unwrap();
        GenerationConfig::from_json(Path::new("generation_config.json"), &json, false)
    }

    #[test]
    fn missing_fields_take_transformers_defaults() {
        let cfg = parse(r#"{"eos_token_id": 7, "transformers_version": "5.23.0"}"#).unwrap();
        assert_eq!(cfg.eos_token_ids, vec![7]);
        assert!(!cfg.do_sample);
        assert_eq!((cfg.temperature, cfg.top_p, cfg.top_k), (1.0, 1.0, 50));
        assert_eq!(cfg.max_length, 20);
        assert_eq!(cfg.max_new_tokens, None);
    }

    #[test]
    fn eos_list_and_nulls() {
        let cfg = parse(
            r#"{"eos_token_id": [3, 9], "pad_token_id": null, "top_k": 0, "temperature": null}"#,
        )
        .unwrap();
        assert_eq!(cfg.eos_token_ids, vec![3, 9]);
        assert_eq!(cfg.pad_token_id, None);
        assert_eq!(cfg.top_k, 0);
        assert_eq!(cfg.temperature, 1.0);
    }

    #[test]
    fn bad_ids_name_the_field() {
        let err = parse(r#"{"eos_token_id": "two"}"#).unwrap_err().to_string();
        assert!(
            err.contains("eos_token_id") && err.contains("generation_config.json"),
            "{err}"
        );
        let err = parse(r#"{"eos_token_id": [1, -1]}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("eos_token_id"), "{err}");
        let err = parse(r#"{"temperature": "hot"}"#).unwrap_err().to_string();
        assert!(err.contains("`temperature`"), "{err}");
    }
}
