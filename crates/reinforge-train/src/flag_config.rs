//! Config files of the commands whose settings are flags (the offline trainers): a TOML file of
//! `key = value` lines, a key being a flag's name (`batch_size` or `batch-size` for
//! `--batch-size`), and `--set key=value`, both read as the command's own flags, so they take
//! its parsers, defaults and checks, and a run's `config.toml` (its flags, serialised) is a
//! file this reads back. The file comes first, then the flags given, then `--set`: the last
//! value of a flag wins (the command parses with `args_override_self`).
//!
//! Written here, not with clap: the caller describes its flags ([`Flag`]), so the core names
//! no CLI crate.

use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};

/// How a flag takes values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlagKind {
    /// Present or absent (`--padding-free`): a boolean key.
    Switch,
    /// Repeatable (`--lora-target a --lora-target b`): an array key, or one value.
    Many,
    /// One value.
    One,
}

/// A flag of the command: its id (the config key, `batch_size`) and long name (`batch-size`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flag {
    pub id: String,
    pub long: String,
    pub kind: FlagKind,
}

/// `args` (a command's arguments after its name) with `--config FILE` and each
/// `--set KEY=VALUE` replaced by the flags they stand for: the file's first, then the other
/// arguments as given, then the `--set` ones. Unknown keys, sections and values of the wrong
/// shape are errors naming the file, its line and the key.
pub fn expand(args: &[String], flags: &[Flag]) -> Result<Vec<String>> {
    let mut config = None;
    let mut sets = vec![];
    let mut rest = vec![];
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| -> Result<String> {
            match a.strip_prefix(&format!("{name}=")) {
                Some(v) => Ok(v.to_string()),
                None => it
                    .next()
                    .cloned()
                    .ok_or_else(|| anyhow!("{name} needs a value")),
            }
        };
        if a == "--" {
            rest.push(a.clone());
            rest.extend(it.by_ref().cloned());
        } else if a == "--config" || a.starts_with("--config=") {
            if config.replace(value("--config")?).is_some() {
                bail!("--config is given twice; give one file (and --set for changes)");
            }
        } else if a == "--set" || a.starts_with("--set=") {
            sets.push(value("--set")?);
        } else {
            rest.push(a.clone());
        }
    }
    let mut out = match &config {
        Some(path) => file_flags(Path::new(path), flags)?,
        None => vec![],
    };
    out.extend(rest);
    for s in &sets {
        out.extend(set_flags(s, flags)?);
    }
    Ok(out)
}

/// The flag whose id or long name is `key`.
fn find<'a>(flags: &'a [Flag], key: &str) -> Option<&'a Flag> {
    flags.iter().find(|f| f.id == key || f.long == key)
}

/// The error for a key no flag has, listing the keys.
fn unknown(at: &str, key: &str, flags: &[Flag]) -> anyhow::Error {
    let known: Vec<&str> = flags.iter().map(|f| f.id.as_str()).collect();
    anyhow!(
        "{at}: unknown key `{key}`; known keys: {}",
        known.join(", ")
    )
}

/// The 1-based line of `text` that sets `key` (0 when not found).
fn line_of(text: &str, key: &str) -> usize {
    text.lines()
        .position(|l| {
            let l = l.trim_start().trim_start_matches(['"', '\'']);
            l.strip_prefix(key).is_some_and(|r| {
                r.trim_start_matches(['"', '\''])
                    .trim_start()
                    .starts_with('=')
            })
        })
        .map_or(0, |i| i + 1)
}

/// The flags the config file at `path` stands for, in its order.
fn file_flags(path: &Path, flags: &[Flag]) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading config {}", path.display()))?;
    let table: toml::Table = text
        .parse()
        .map_err(|e| anyhow!("{}: {e}", path.display()))?;
    let mut out = vec![];
    for (key, value) in &table {
        let at = format!("{} line {}", path.display(), line_of(&text, key));
        if value.is_table() {
            bail!("{at}: `[{key}]` is a section; this command's keys are flat (`key = value`)");
        }
        let flag = find(flags, key).ok_or_else(|| unknown(&at, key, flags))?;
        out.extend(value_flags(flag, value).map_err(|e| anyhow!("{at}: key `{key}`: {e}"))?);
    }
    Ok(out)
}

/// The flags `--set KEY=VALUE` stands for: the value's text as given (a switch takes true or
/// false).
fn set_flags(assignment: &str, flags: &[Flag]) -> Result<Vec<String>> {
    let (key, raw) = assignment
        .split_once('=')
        .ok_or_else(|| anyhow!("--set {assignment:?}: expected KEY=VALUE, e.g. --set steps=20"))?;
    let (key, raw) = (key.trim(), raw.trim());
    let at = format!("--set {assignment}");
    let flag = find(flags, key).ok_or_else(|| unknown(&at, key, flags))?;
    let value = match flag.kind {
        FlagKind::Switch => match raw {
            "true" => toml::Value::Boolean(true),
            "false" => toml::Value::Boolean(false),
            _ => bail!("{at}: `{key}` is a switch (true or false), got {raw:?}"),
        },
        _ => toml::Value::String(raw.to_string()),
    };
    value_flags(flag, &value).map_err(|e| anyhow!("{at}: {e}"))
}

/// `value` as `flag`'s arguments.
fn value_flags(flag: &Flag, value: &toml::Value) -> Result<Vec<String>> {
    let long = format!("--{}", flag.long);
    match (flag.kind, value) {
        (FlagKind::Switch, toml::Value::Boolean(on)) => Ok(if *on { vec![long] } else { vec![] }),
        (FlagKind::Switch, v) => bail!("a switch takes true or false, got {v}"),
        (FlagKind::Many, toml::Value::Array(items)) => {
            let mut out = vec![];
            for item in items {
                out.extend([long.clone(), scalar(item)?]);
            }
            Ok(out)
        }
        (_, v) => Ok(vec![long, scalar(v)?]),
    }
}

/// A scalar as a flag's text (strings as they are).
fn scalar(v: &toml::Value) -> Result<String> {
    Ok(match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => f.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        toml::Value::Datetime(d) => d.to_string(),
        toml::Value::Array(_) | toml::Value::Table(_) => {
            bail!("takes one value, got {v}")
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags() -> Vec<Flag> {
        let f = |id: &str, kind| Flag {
            id: id.into(),
            long: id.replace('_', "-"),
            kind,
        };
        vec![
            f("batch_size", FlagKind::One),
            f("padding_free", FlagKind::Switch),
            f("lora_target", FlagKind::Many),
            f("lr", FlagKind::One),
        ]
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    /// The file's flags first, the given ones next, `--set` last; both key spellings; a false
    /// switch is no flag; an array repeats its flag.
    #[test]
    fn a_file_and_sets_become_flags_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(
            &path,
            "batch-size = 4\npadding_free = false\nlora_target = [\"q_proj\", \"v_proj\"]\nlr = 1e-6\n",
        )
        .unwrap();
        let args = strings(&[
            "--config",
            path.to_str().unwrap(),
            "--lr",
            "2e-6",
            "--set=batch_size=8",
        ]);
        let out = expand(&args, &flags()).unwrap();
        assert_eq!(
            out,
            strings(&[
                "--batch-size",
                "4",
                "--lora-target",
                "q_proj",
                "--lora-target",
                "v_proj",
                "--lr",
                "0.000001",
                "--lr",
                "2e-6",
                "--batch-size",
                "8",
            ])
        );
        assert_eq!(
            expand(&strings(&["--set", "padding_free=true"]), &flags()).unwrap(),
            strings(&["--padding-free"])
        );
    }

    /// Unknown keys name the file's line; sections, wrong shapes and bad switches are errors.
    #[test]
    fn bad_keys_name_the_file_line_and_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        let run = |text: &str| {
            std::fs::write(&path, text).unwrap();
            let args = strings(&["--config", path.to_str().unwrap()]);
            expand(&args, &flags()).unwrap_err().to_string()
        };
        let e = run("lr = 1.0\n\nbatch_sise = 3\n");
        assert!(e.contains("line 3: unknown key `batch_sise`"), "{e}");
        assert!(e.contains("known keys: batch_size, padding_free"), "{e}");
        assert!(run("[rl]\nlr = 1\n").contains("`[rl]` is a section"));
        assert!(run("padding_free = 1\n").contains("key `padding_free`: a switch"));
        assert!(run("lr = [1, 2]\n").contains("key `lr`: takes one value"));
        let e = expand(&strings(&["--set", "padding_free=yes"]), &flags()).unwrap_err();
        assert!(e.to_string().contains("is a switch"), "{e}");
        let e = expand(&strings(&["--set", "steps"]), &flags()).unwrap_err();
        assert!(e.to_string().contains("expected KEY=VALUE"), "{e}");
        let twice = strings(&["--config", "a", "--config", "b"]);
        assert!(expand(&twice, &flags()).is_err());
        let e = expand(&strings(&["--config", "/nonexistent/c.toml"]), &flags()).unwrap_err();
        assert!(format!("{e:#}").contains("/nonexistent/c.toml"), "{e:#}");
    }
}
