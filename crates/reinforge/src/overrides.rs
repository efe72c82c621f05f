//! Layering of a run's configuration as TOML values: a config file over the defaults, then
//! `--set a.b=value` overrides, each checked against the keys and types the defaults have.

use anyhow::{anyhow, bail, Result};

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

/// Applies one `a.b.c=value` override. The value is parsed as TOML (`3`, `0.5`, `true`,
/// `"text"`), falling back to a bare string. The key must exist in the config.
pub(crate) fn apply_override(root: &mut toml::Value, assignment: &str) -> Result<()> {
    let (key, raw) = assignment.split_once('=').ok_or_else(|| {
        anyhow!("--set {assignment:?}: expected KEY=VALUE, e.g. --set grpo.steps=20")
    })?;
    let key = key.trim();
    let raw = raw.trim();
    let value = format!("v = {raw}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_string()));
    let mut node = root;
    let parts: Vec<&str> = key.split('.').collect();
    for (i, part) in parts.iter().enumerate() {
        let table = node
            .as_table_mut()
            .ok_or_else(|| anyhow!("--set {key}: `{}` is not a section", parts[..i].join(".")))?;
        if i + 1 == parts.len() {
            match table.get(*part) {
                Some(old) if !old.is_table() || value.is_table() => {
                    let expected = old.type_str();
                    let value = coerce(value, old)
                        .ok_or_else(|| anyhow!("--set {key}={raw}: expected a {expected}"))?;
                    table.insert(part.to_string(), value);
                }
                Some(_) => bail!("--set {key}: `{key}` is a section; set one of its keys"),
                None if is_optional_key(key) => {
                    table.insert(part.to_string(), value);
                }
                None => bail!(
                    "--set {key}: unknown key; known keys here: {}",
                    known_keys(table)
                ),
            }
            return Ok(());
        }
        if !table.contains_key(*part) {
            bail!(
                "--set {key}: unknown section `{part}`; known keys here: {}",
                known_keys(table)
            );
        }
        node = table.get_mut(*part).expect("checked above");
    }
    unreachable!("split always yields at least one part")
}

/// Keys that default to absent (`None`) and so do not appear in the serialised defaults.
fn is_optional_key(key: &str) -> bool {
    matches!(
        key,
        "name"
            | "model.num_key_value_heads"
            | "model.head_dim"
            | "model.bos_token_id"
            | "model.eos_token_id"
            | "model.pad_token_id"
    )
}

/// Integers are accepted where floats are expected (`--set grpo.lr=1` means 1.0).
fn coerce(value: toml::Value, like: &toml::Value) -> Option<toml::Value> {
    match (like, value) {
        (toml::Value::Float(_), toml::Value::Integer(i)) => Some(toml::Value::Float(i as f64)),
        (l, v) if l.same_type(&v) => Some(v),
        _ => None,
    }
}

fn known_keys(table: &toml::Table) -> String {
    table.keys().cloned().collect::<Vec<_>>().join(", ")
}
