//! Layering of a run's configuration as TOML values: a config file over the defaults, then
//! `--set a.b=value` overrides. The schema (every key and its type) is the default config
//! serialised with its optional keys filled in; a `--set` value is read as the type of its
//! key, and `reinforge train --help` lists the keys from the same schema.

use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};

use crate::config::TrainConfig;
use crate::presets::{apply_preset, explicit_rl_keys, preset_names};

/// Overlays `top` onto `base`, table by table.
pub(crate) fn merge(base: &mut toml::Value, top: toml::Value) {
    match (base, top) {
        (toml::Value::Table(b), toml::Value::Table(t)) => {
            for (k, v) in t {
                match b.get_mut(&k) {
                    Some(existing) if existing.is_table() && v.is_table() => merge(existing, v),
                    _ => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (b, t) => *b = t,
    }
}

/// Every settable key with a value of its type: the defaults plus the keys that default to
/// absent (`name`, the optional `model.*` fields), which serialise to nothing.
pub fn schema() -> Result<toml::Value> {
    let mut example = TrainConfig {
        name: Some(String::new()),
        ..TrainConfig::default()
    };
    let m = &mut example.model;
    for field in [
        &mut m.num_key_value_heads,
        &mut m.head_dim,
        &mut m.sliding_window,
        &mut m.max_window_layers,
    ] {
        field.get_or_insert(0);
    }
    for field in [
        &mut m.bos_token_id,
        &mut m.eos_token_id,
        &mut m.pad_token_id,
    ] {
        field.get_or_insert(0);
    }
    Ok(toml::Value::try_from(example)?)
}

/// The schema's type name of a value, as `--help` and errors print it.
fn type_name(v: &toml::Value) -> &'static str {
    match v {
        toml::Value::String(_) => "string",
        toml::Value::Integer(_) => "integer",
        toml::Value::Float(_) => "float",
        toml::Value::Boolean(_) => "boolean",
        toml::Value::Datetime(_) => "datetime",
        toml::Value::Array(_) => "array",
        toml::Value::Table(_) => "table",
    }
}

/// Reads the text of a `--set` value as the type of the schema value `like`: a string key
/// takes the text as it is (`name=123` is the string "123"), a float key takes integers and
/// `nan`/`inf` (range checks come later, naming the key), the others their TOML form.
fn typed_value(raw: &str, like: &toml::Value) -> Option<toml::Value> {
    let parsed = format!("v = {raw}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"));
    match (like, parsed) {
        (toml::Value::String(_), Some(toml::Value::String(s))) if raw.starts_with(['"', '\'']) => {
            Some(toml::Value::String(s))
        }
        (toml::Value::String(_), _) => Some(toml::Value::String(raw.to_string())),
        (toml::Value::Float(_), Some(toml::Value::Integer(i))) => {
            Some(toml::Value::Float(i as f64))
        }
        (toml::Value::Float(_), None) => raw.parse::<f64>().ok().map(toml::Value::Float),
        (l, Some(v)) if l.same_type(&v) => Some(v),
        _ => None,
    }
}

/// Applies one `a.b.c=value` override to `root`, reading the value as the type `schema` gives
/// the key. Unknown keys, sections and ill-typed values are errors naming the key.
pub(crate) fn apply_override(
    root: &mut toml::Value,
    schema: &toml::Value,
    assignment: &str,
) -> Result<()> {
    let (key, raw) = assignment.split_once('=').ok_or_else(|| {
        anyhow!("--set {assignment:?}: expected KEY=VALUE, e.g. --set rl.steps=20")
    })?;
    let (key, raw) = (key.trim(), raw.trim());
    let parts: Vec<&str> = key.split('.').collect();
    let (last, sections) = parts
        .split_last()
        .ok_or_else(|| anyhow!("--set {assignment:?}: empty key"))?;
    let mut node = root;
    let mut like = schema;
    for (i, part) in sections.iter().enumerate() {
        let here = &parts[..i];
        like = like
            .get(part)
            .filter(|v| v.is_table())
            .ok_or_else(|| unknown(key, part, like))?;
        node = node
            .as_table_mut()
            .ok_or_else(|| anyhow!("--set {key}: `{}` is not a section", here.join(".")))?
            .entry(part.to_string())
            .or_insert(toml::Value::Table(Default::default()));
    }
    let expected = like.get(last).ok_or_else(|| unknown(key, last, like))?;
    if expected.is_table() {
        bail!("--set {key}: `{key}` is a section; set one of its keys");
    }
    let value = typed_value(raw, expected).ok_or_else(|| {
        anyhow!(
            "--set {key}={raw}: `{key}` is of type {}, got {raw:?}",
            type_name(expected)
        )
    })?;
    node.as_table_mut()
        .ok_or_else(|| anyhow!("--set {key}: the parent of `{key}` is not a section"))?
        .insert(last.to_string(), value);
    Ok(())
}

/// The error for a key or section that the schema table `like` lacks.
fn unknown(key: &str, part: &str, like: &toml::Value) -> anyhow::Error {
    let known = like
        .as_table()
        .map(|t| t.keys().cloned().collect::<Vec<_>>().join(", "))
        .unwrap_or_default();
    anyhow!("--set {key}: unknown key `{part}`; known keys here: {known}")
}

/// Every leaf of `v` as (`a.b.c`, its value as text; strings without quotes), in the
/// table's order: the keys as `--set` spells them (`reinforge explain`, MLflow parameters).
pub fn flat_keys(v: &toml::Value, prefix: &str, out: &mut Vec<(String, String)>) {
    match v {
        toml::Value::Table(t) => {
            for (k, v) in t {
                flat_keys(v, &format!("{prefix}{k}."), out);
            }
        }
        toml::Value::String(s) => out.push((prefix.trim_end_matches('.').into(), s.clone())),
        other => out.push((prefix.trim_end_matches('.').into(), other.to_string())),
    }
}

/// One line per settable key, `key = default  (type)`, for `reinforge train --help`.
pub fn keys_help() -> String {
    let (Ok(schema), Ok(defaults)) = (schema(), toml::Value::try_from(TrainConfig::default()))
    else {
        return String::new();
    };
    let mut lines = Vec::new();
    leaf_lines(&schema, Some(&defaults), "", &mut lines);
    lines.join("\n")
}

fn leaf_lines(
    schema: &toml::Value,
    default: Option<&toml::Value>,
    prefix: &str,
    out: &mut Vec<String>,
) {
    let Some(table) = schema.as_table() else {
        return;
    };
    // Plain keys first, then sections, as config.toml lays them out.
    let (leaves, sections): (Vec<_>, Vec<_>) = table.iter().partition(|(_, v)| !v.is_table());
    for (k, v) in leaves.into_iter().chain(sections) {
        let key = format!("{prefix}{k}");
        let d = default.and_then(|d| d.get(k));
        if v.is_table() {
            leaf_lines(v, d, &format!("{key}."), out);
            continue;
        }
        let shown = d.map_or_else(|| "(unset)".to_string(), |d| d.to_string());
        let mut line = format!("  {key} = {shown}  ({})", type_name(v));
        if key == "rl.algorithm" {
            line += &format!(": one of {}, a preset of the [rl] keys", preset_names());
        }
        out.push(line);
    }
}

/// `[grpo]` (the RL section's old name, [`crate::config::RL_ALIAS`]) renamed `[rl]` in a
/// parsed config file, with a note; both at once is an error naming the file.
fn rl_alias_in_file(file: &mut toml::Value, path: &Path) -> Result<()> {
    let Some(table) = file.as_table_mut() else {
        return Ok(());
    };
    let Some(old) = table.remove(crate::config::RL_ALIAS) else {
        return Ok(());
    };
    if table.contains_key("rl") {
        bail!(
            "{}: both [rl] and [grpo] (its old name); keep one",
            path.display()
        );
    }
    eprintln!(
        "note: {}: [grpo] is read as [rl] (its new name)",
        path.display()
    );
    table.insert("rl".into(), old);
    Ok(())
}

/// `--set grpo.KEY=...` read as `--set rl.KEY=...`, with one note.
fn rl_alias_in_sets(overrides: &[String]) -> Vec<String> {
    let prefix = format!("{}.", crate::config::RL_ALIAS);
    let renamed: Vec<String> = overrides
        .iter()
        .map(|o| match o.trim_start().strip_prefix(&prefix) {
            Some(rest) => format!("rl.{rest}"),
            None => o.clone(),
        })
        .collect();
    if renamed.as_slice() != overrides {
        eprintln!("note: --set grpo.KEY is read as rl.KEY (the section's new name)");
    }
    renamed
}

/// Resolution lives here, beside the layering it uses, so `config` (the schema) imports
/// neither this module nor the presets' expansion.
impl TrainConfig {
    /// The default config with the file at `path` (if any) and the `key=value` overrides on top.
    pub fn resolve(path: Option<&Path>, overrides: &[String]) -> Result<Self> {
        Self::resolve_from(Self::default(), path, overrides)
    }

    /// [`Self::resolve`] for `reinforge train --model/--data`: the defaults are
    /// [`Self::data_run_defaults`] (a pretrained checkpoint, not the toy experiment).
    pub fn resolve_data_run(path: Option<&Path>, overrides: &[String]) -> Result<Self> {
        Self::resolve_from(Self::data_run_defaults(), path, overrides)
    }

    /// `base`, then the file at `path`, then `overrides`, then the preset's unset options.
    fn resolve_from(base: Self, path: Option<&Path>, overrides: &[String]) -> Result<Self> {
        let mut value = toml::Value::try_from(base)?;
        let mut file = None;
        if let Some(path) = path {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading config {}", path.display()))?;
            let mut parsed: toml::Value = text
                .parse()
                .map_err(|e| anyhow!("{}: {e}", path.display()))?;
            rl_alias_in_file(&mut parsed, path)?;
            merge(&mut value, parsed.clone());
            file = Some(parsed);
        }
        let overrides = &rl_alias_in_sets(overrides);
        let schema = schema()?;
        for o in overrides {
            apply_override(&mut value, &schema, o)?;
        }
        apply_preset(&mut value, &explicit_rl_keys(file.as_ref(), overrides))?;
        let source = path.map_or_else(|| "the defaults".to_string(), |p| p.display().to_string());
        // serde_path_to_error names the key at fault (`sft.steps`), which toml's value
        // deserialiser does not.
        let cfg: Self = serde_path_to_error::deserialize(value).map_err(|e| {
            anyhow!(
                "invalid config (from {source} and --set): key `{}`: {}",
                e.path(),
                e.inner().message()
            )
        })?;
        cfg.validate()?;
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every leaf key of a TOML table, dotted.
    fn leaf_keys(v: &toml::Value, prefix: &str, out: &mut Vec<String>) {
        for (k, v) in v.as_table().into_iter().flatten() {
            let key = format!("{prefix}{k}");
            if v.is_table() {
                leaf_keys(v, &format!("{key}."), out);
            } else {
                out.push(key);
            }
        }
    }

    #[test]
    fn help_lists_every_key_of_the_default_config_with_its_type() {
        let help = keys_help();
        let mut keys = Vec::new();
        leaf_keys(
            &toml::Value::try_from(TrainConfig::default()).unwrap(),
            "",
            &mut keys,
        );
        assert!(keys.len() > 50, "{keys:?}");
        for key in &keys {
            assert!(
                help.lines()
                    .any(|l| l.trim_start().starts_with(&format!("{key} = "))),
                "--help misses {key}"
            );
        }
        assert!(help.contains("rl.weight_decay = 0.0  (float)"), "{help}");
        assert!(help.contains("name = (unset)  (string)"), "{help}");
        assert!(help.contains("dr_grpo"));
    }

    fn set(o: &str) -> Result<toml::Value> {
        let mut root = toml::Value::try_from(TrainConfig::default()).unwrap();
        apply_override(&mut root, &schema().unwrap(), o).map(|()| root)
    }

    #[test]
    fn values_take_the_type_of_their_key() {
        let v = set("name=123").unwrap();
        assert_eq!(v["name"].as_str(), Some("123"));
        assert_eq!(set("name=nan").unwrap()["name"].as_str(), Some("nan"));
        assert_eq!(set("name=\"a b\"").unwrap()["name"].as_str(), Some("a b"));
        assert_eq!(set("rl.lr=1").unwrap()["rl"]["lr"].as_float(), Some(1.0));
        assert!(set("rl.temperature=nan").unwrap()["rl"]["temperature"]
            .as_float()
            .unwrap()
            .is_nan());
        assert_eq!(
            set("model.head_dim=16").unwrap()["model"]["head_dim"].as_integer(),
            Some(16)
        );
        assert_eq!(
            set("device=true").unwrap()["device"].as_str(),
            Some("true"),
            "a string key keeps the text"
        );
    }

    #[test]
    fn wrong_types_name_the_key_and_the_type() {
        let e = set("rl.steps=fast").unwrap_err().to_string();
        assert!(e.contains("`rl.steps` is of type integer"), "{e}");
        let e = set("rl.lr=fast").unwrap_err().to_string();
        assert!(e.contains("`rl.lr` is of type float"), "{e}");
        let e = set("rl.ignore_eos=1").unwrap_err().to_string();
        assert!(e.contains("`rl.ignore_eos` is of type boolean"), "{e}");
        let e = set("rl.steps=2.5").unwrap_err().to_string();
        assert!(e.contains("rl.steps"), "{e}");
        let e = set("rl.stepz=3").unwrap_err().to_string();
        assert!(
            e.contains("unknown key `stepz`") && e.contains("steps"),
            "{e}"
        );
        let e = set("grpx.steps=3").unwrap_err().to_string();
        assert!(e.contains("unknown key `grpx`"), "{e}");
        let e = set("rl.advantage=3").unwrap_err().to_string();
        assert!(e.contains("is a section"), "{e}");
        assert!(set("grpo").unwrap_err().to_string().contains("KEY=VALUE"));
    }
}
