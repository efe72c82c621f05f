//! `tokenizer_config.json` (and the legacy `special_tokens_map.json`): the named special tokens and the chat
//! template entries, read the way transformers 5.23 reads them
//! (`PreTrainedTokenizerBase._from_pretrained` in `tokenization_utils_base.py`).

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value as Json;

use crate::error::{read_json, read_json_opt, HfError, Result};

/// File names inside a checkpoint directory.
pub const TOKENIZER_FILE: &str = "tokenizer.json";
pub const TOKENIZER_CONFIG_FILE: &str = "tokenizer_config.json";
pub const SPECIAL_TOKENS_MAP_FILE: &str = "special_tokens_map.json";
pub const CHAT_TEMPLATE_FILE: &str = "chat_template.jinja";
pub const CHAT_TEMPLATE_DIR: &str = "additional_chat_templates";
pub const GENERATION_CONFIG_FILE: &str = "generation_config.json";

/// The named special tokens transformers passes to chat templates (`SPECIAL_TOKENS_ATTRIBUTES`), in its order.
pub const SPECIAL_TOKEN_NAMES: [&str; 7] = [
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
];

/// The named special tokens of a checkpoint as strings (`None` when not set).
///
/// In tokenizer_config.json each may be a string or an `AddedToken` dict (`{"content": "<s>", ...}`); only the
/// content matters here.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpecialTokens {
    pub bos_token: Option<String>,
    pub eos_token: Option<String>,
    pub unk_token: Option<String>,
    pub sep_token: Option<String>,
    pub pad_token: Option<String>,
    pub cls_token: Option<String>,
    pub mask_token: Option<String>,
}

impl SpecialTokens {
    /// The token set under `name` (one of [`SPECIAL_TOKEN_NAMES`]).
    pub fn get(&self, name: &str) -> Option<&str> {
        match name {
            "bos_token" => self.bos_token.as_deref(),
            "eos_token" => self.eos_token.as_deref(),
            "unk_token" => self.unk_token.as_deref(),
            "sep_token" => self.sep_token.as_deref(),
            "pad_token" => self.pad_token.as_deref(),
            "cls_token" => self.cls_token.as_deref(),
            "mask_token" => self.mask_token.as_deref(),
            _ => None,
        }
    }

    fn slot(&mut self, name: &str) -> Option<&mut Option<String>> {
        Some(match name {
            "bos_token" => &mut self.bos_token,
            "eos_token" => &mut self.eos_token,
            "unk_token" => &mut self.unk_token,
            "sep_token" => &mut self.sep_token,
            "pad_token" => &mut self.pad_token,
            "cls_token" => &mut self.cls_token,
            "mask_token" => &mut self.mask_token,
            _ => return None,
        })
    }

    /// The set tokens as `(name, token)` pairs in transformers' order: what `special_tokens_map` gives templates.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &str)> + '_ {
        SPECIAL_TOKEN_NAMES
            .iter()
            .filter_map(move |&n| self.get(n).map(|t| (n, t)))
    }
}

/// One `chat_template` source: its name and text, and where it came from (for error messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateSource {
    /// `default`, or the name under which the template was stored.
    pub name: String,
    /// The Jinja source.
    pub source: String,
    /// Where it was read from, e.g. `chat_template.jinja` or `tokenizer_config.json:chat_template[tool_use]`.
    pub origin: String,
}

/// What the loader takes from tokenizer_config.json (+ special_tokens_map.json and chat template files).
#[derive(Debug, Clone)]
pub struct TokenizerConfig {
    /// The file it was read from.
    pub path: PathBuf,
    pub special: SpecialTokens,
    /// Chat templates in priority order as transformers resolves them; empty when the checkpoint has none.
    pub templates: Vec<TemplateSource>,
    /// The raw JSON object, for fields this crate does not interpret.
    pub raw: serde_json::Map<String, Json>,
}

#[derive(Deserialize)]
struct NamedTemplate {
    name: String,
    template: String,
}

impl TokenizerConfig {
    /// Reads `dir/tokenizer_config.json` (required), `dir/special_tokens_map.json` (optional) and the chat
    /// template files.
    pub fn from_dir(dir: &Path) -> Result<Self> {
        let path = dir.join(TOKENIZER_CONFIG_FILE);
        let raw: serde_json::Map<String, Json> = read_json(&path, "tokenizer config")?;
        let mut special = SpecialTokens::default();
        for name in SPECIAL_TOKEN_NAMES {
            if let Some(v) = raw.get(name) {
                *special.slot(name).expect("known name") = token_content(&path, name, v)?;
            }
        }
        // Legacy layout: without `added_tokens_decoder`, transformers merges special_tokens_map.json over the
        // config's values (tokenization_utils_base.py, `_from_pretrained`, "Legacy: read special_tokens_map.json").
        if !raw.contains_key("added_tokens_decoder") {
            let map_path = dir.join(SPECIAL_TOKENS_MAP_FILE);
            if let Some(map) = read_json_opt::<serde_json::Map<String, Json>>(&map_path)? {
                for (name, v) in &map {
                    if let Some(slot) = special.slot(name) {
                        if let Some(tok) = token_content(&map_path, name, v)? {
                            *slot = Some(tok);
                        }
                    }
                }
            }
        }
        let templates = collect_templates(dir, &path, &raw)?;
        Ok(Self {
            path,
            special,
            templates,
            raw,
        })
    }
}

/// A special token's text: a string, an AddedToken dict's `content`, or `None` for JSON null.
fn token_content(path: &Path, field: &str, v: &Json) -> Result<Option<String>> {
    match v {
        Json::Null => Ok(None),
        Json::String(s) => Ok(Some(s.clone())),
        Json::Object(m) => match m.get("content") {
            Some(Json::String(s)) => Ok(Some(s.clone())),
            _ => Err(HfError::Field {
                path: path.to_path_buf(),
                field: field.to_string(),
                message: "an AddedToken object needs a string `content`".into(),
            }),
        },
        other => Err(HfError::Field {
            path: path.to_path_buf(),
            field: field.to_string(),
            message: format!("expected a string or an AddedToken object, found {other}"),
        }),
    }
}

/// Chat templates as transformers 5.23 finds them: `chat_template.jinja` (the default) and
/// `additional_chat_templates/*.jinja` take priority over the config's `chat_template`, which is either one
/// string or a list of `{name, template}`.
fn collect_templates(
    dir: &Path,
    config_path: &Path,
    raw: &serde_json::Map<String, Json>,
) -> Result<Vec<TemplateSource>> {
    let mut out = Vec::new();
    let file = dir.join(CHAT_TEMPLATE_FILE);
    if file.is_file() {
        out.push(TemplateSource {
            name: "default".into(),
            source: crate::error::read_text(&file, "chat template")?,
            origin: CHAT_TEMPLATE_FILE.into(),
        });
    }
    let extra_dir = dir.join(CHAT_TEMPLATE_DIR);
    if extra_dir.is_dir() {
        let entries = std::fs::read_dir(&extra_dir).map_err(|source| HfError::Io {
            path: extra_dir.clone(),
            source,
        })?;
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "jinja"))
            .collect();
        files.sort();
        for p in files {
            let name = p
                .file_stem()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            out.push(TemplateSource {
                origin: format!("{CHAT_TEMPLATE_DIR}/{name}.jinja"),
                source: crate::error::read_text(&p, "chat template")?,
                name,
            });
        }
    }
    if !out.is_empty() {
        return Ok(out);
    }
    match raw.get("chat_template") {
        None | Some(Json::Null) => {}
        Some(Json::String(s)) => out.push(TemplateSource {
            name: "default".into(),
            source: s.clone(),
            origin: format!("{TOKENIZER_CONFIG_FILE}:chat_template"),
        }),
        Some(v @ Json::Array(_)) => {
            let list: Vec<NamedTemplate> =
                serde_json::from_value(v.clone()).map_err(|e| HfError::Field {
                    path: config_path.to_path_buf(),
                    field: "chat_template".into(),
                    message: format!("expected a list of {{name, template}} objects: {e}"),
                })?;
            for t in list {
                out.push(TemplateSource {
                    origin: format!("{TOKENIZER_CONFIG_FILE}:chat_template[{}]", t.name),
                    name: t.name,
                    source: t.template,
                });
            }
        }
        Some(other) => {
            return Err(HfError::Field {
                path: config_path.to_path_buf(),
                field: "chat_template".into(),
                message: format!("expected a string or a list of named templates, found {other}"),
            })
        }
    }
    Ok(out)
}
