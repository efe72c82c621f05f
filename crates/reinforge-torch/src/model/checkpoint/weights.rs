//! safetensors weights in the HF layout: one `model.safetensors`, or a
//! `model.safetensors.index.json` weight map over `model-0000i-of-0000n.safetensors` shards.
//!
//! Reading uses the `safetensors` crate directly (not `VarStore::load`) so that every error can
//! name the tensor, the file and the shapes; writing adds the `{"format": "pt"}` metadata that
//! transformers expects, which tch's writer omits.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use safetensors::tensor::{Dtype, SafeTensors, View};
use serde_json::{json, Value};
use tch::{Kind, Tensor};

/// Single-file weights (HF `SAFE_WEIGHTS_NAME`).
pub const WEIGHTS_FILE: &str = "model.safetensors";
/// Weight map of sharded weights (HF `SAFE_WEIGHTS_INDEX_NAME`).
pub const INDEX_FILE: &str = "model.safetensors.index.json";

/// Tensors some checkpoints carry that are not parameters: rotary buffers of old Llama
/// exports (transformers ignores them via `_keys_to_ignore_on_load_unexpected`).
fn ignorable(name: &str) -> bool {
    name.ends_with("rotary_emb.inv_freq")
}

/// The Hub's (transformers 4's) name of a vision-language tensor saved under transformers 5's
/// in-memory names (`model.visual.*` -> `visual.*`, `model.language_model.*` -> `model.*`:
/// the two renames of `conversion_mapping.py`'s `Qwen2VLForConditionalGeneration` entry, read
/// backwards); every other name is already the Hub's.
fn hub_name(name: &str) -> Cow<'_, str> {
    if let Some(rest) = name.strip_prefix("model.visual.") {
        Cow::Owned(format!("visual.{rest}"))
    } else if let Some(rest) = name.strip_prefix("model.language_model.") {
        Cow::Owned(format!("model.{rest}"))
    } else {
        Cow::Borrowed(name)
    }
}

/// Whether `file` names a file directly inside a directory: one normal path component (a shard
/// index naming `../x` or `/x` would read weights from anywhere).
fn is_plain_file_name(file: &str) -> bool {
    let mut c = Path::new(file).components();
    matches!(
        (c.next(), c.next()),
        (Some(std::path::Component::Normal(_)), None)
    ) && !file.contains('/')
        && !file.contains('\\')
}

/// The weight files of a checkpoint directory and, for each, the tensors the index assigns
/// to it (`None` for a single file). Like transformers, `model.safetensors` wins over an index.
fn weight_files(dir: &Path) -> Result<Vec<(PathBuf, Option<HashSet<String>>)>> {
    let single = dir.join(WEIGHTS_FILE);
    if single.is_file() {
        return Ok(vec![(single, None)]);
    }
    let index = dir.join(INDEX_FILE);
    if !index.is_file() {
        bail!(
            "no weights in {}: expected {WEIGHTS_FILE} or {INDEX_FILE}",
            dir.display()
        );
    }
    let text =
        std::fs::read_to_string(&index).with_context(|| format!("reading {}", index.display()))?;
    let value: Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", index.display()))?;
    let map = value
        .get("weight_map")
        .and_then(Value::as_object)
        .ok_or_else(|| anyhow!("{}: no `weight_map` object", index.display()))?;
    let mut by_file: BTreeMap<String, HashSet<String>> = BTreeMap::new();
    for (name, file) in map {
        let file = file.as_str().ok_or_else(|| {
            anyhow!(
                "{}: weight_map[{name:?}] is not a file name",
                index.display()
            )
        })?;
        if !is_plain_file_name(file) {
            bail!(
                "{}: weight_map[{name:?}] = {file:?} is not a file name in the checkpoint's \
                 directory (no directories, `..` or absolute paths)",
                index.display()
            );
        }
        by_file.entry(file.into()).or_default().insert(name.clone());
    }
    by_file
        .into_iter()
        .map(|(file, names)| {
            let path = dir.join(&file);
            if !path.is_file() {
                bail!(
                    "missing weight file {} (listed in {})",
                    path.display(),
                    index.display()
                );
            }
            Ok((path, Some(names)))
        })
        .collect()
}

fn kind_of(dtype: Dtype, name: &str, file: &Path) -> Result<Kind> {
    Ok(match dtype {
        Dtype::F32 => Kind::Float,
        Dtype::BF16 => Kind::BFloat16,
        Dtype::F16 => Kind::Half,
        Dtype::F64 => Kind::Double,
        other => bail!(
            "tensor `{name}` in {} has dtype {other:?}; expected F32, BF16, F16 or F64",
            file.display()
        ),
    })
}

/// Copies the checkpoint's tensors into `params` (name -> parameter, converting dtype and
/// device). Every parameter must be found exactly with its shape; extra tensors are errors
/// except `lm_head.weight` when `tied` (transformers ties it and ignores the stored copy) and
/// rotary buffers.
pub fn load_into(dir: &Path, params: &HashMap<String, Tensor>, tied: bool) -> Result<()> {
    load_matching(dir, params, &|name| {
        ignorable(name) || tied && name == "lm_head.weight"
    })
}

/// Copies the tensors of `params` from the checkpoint, ignoring every other tensor in it (a
/// head loaded on its own); each of `params` must be found with its shape.
pub fn load_into_subset(dir: &Path, params: &HashMap<String, Tensor>) -> Result<()> {
    load_matching(dir, params, &|_| true)
}

/// [`load_into`] with `skip` deciding which tensors that are not parameters are ignored.
fn load_matching(
    dir: &Path,
    params: &HashMap<String, Tensor>,
    skip: &dyn Fn(&str) -> bool,
) -> Result<()> {
    let files = weight_files(dir)?;
    let mut seen = HashSet::new();
    let _guard = tch::no_grad_guard();
    for (path, listed) in &files {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let st = SafeTensors::deserialize(&bytes)
            .map_err(|e| anyhow!("reading safetensors {}: {e:?}", path.display()))?;
        let mut tensors = st.tensors();
        // Deterministic order, so the first error reported is always the same one.
        tensors.sort_by_key(|a| natural_key(&a.0));
        for (stored, view) in tensors {
            let name = hub_name(&stored).into_owned();
            let Some(param) = params.get(&name) else {
                if skip(&name) {
                    continue;
                }
                bail!(
                    "unexpected tensor `{name}` in {}: not a parameter of this model (check config.json)",
                    path.display()
                );
            };
            if listed.as_ref().is_some_and(|l| !l.contains(&stored)) {
                bail!(
                    "tensor `{name}` found in {} but the index assigns it to another file",
                    path.display()
                );
            }
            let shape: Vec<i64> = view.shape().iter().map(|&d| d as i64).collect();
            if shape != param.size() {
                bail!(
                    "tensor `{name}` in {} has shape {:?}, expected {:?} from config.json",
                    path.display(),
                    shape,
                    param.size()
                );
            }
            let kind = kind_of(view.dtype(), &name, path)?;
            let src = Tensor::f_from_data_size(view.data(), &shape, kind)?;
            param.shallow_clone().f_copy_(&src)?;
            seen.insert(name);
        }
    }
    let mut missing: Vec<&String> = params.keys().filter(|n| !seen.contains(*n)).collect();
    missing.sort();
    if let Some(first) = missing.first() {
        let place = match &files[..] {
            [(path, None)] => path.display().to_string(),
            _ => format!("the shards of {}", dir.join(INDEX_FILE).display()),
        };
        bail!(
            "missing tensor `{first}` in {place} ({} missing in all)",
            missing.len()
        );
    }
    Ok(())
}

/// A tensor's bytes ready for the safetensors writer.
struct Bytes {
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl View for &Bytes {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

fn to_bytes(t: &Tensor, kind: Kind) -> Result<Bytes> {
    let dtype = match kind {
        Kind::Float => Dtype::F32,
        Kind::BFloat16 => Dtype::BF16,
        Kind::Half => Dtype::F16,
        Kind::Double => Dtype::F64,
        other => bail!("cannot save weights as {other:?}"),
    };
    // host: safetensors are written from host memory.
    let t = t.to_device(tch::Device::Cpu).to_kind(kind).contiguous();
    let numel = t.numel();
    let mut data = vec![0u8; numel * kind.elt_size_in_bytes()];
    t.f_copy_data_u8(&mut data, numel)?;
    Ok(Bytes {
        dtype,
        shape: t.size().iter().map(|&d| d as usize).collect(),
        data,
    })
}

/// Orders parameter names as modules appear (`layers.2` before `layers.10`), so shards hold
/// consecutive layers.
fn natural_key(name: &str) -> Vec<(u64, String)> {
    name.split('.')
        .map(|s| match s.parse::<u64>() {
            Ok(n) => (n, String::new()),
            Err(_) => (u64::MAX, s.to_string()),
        })
        .collect()
}

/// Groups `(name, bytes)` into shards of at most `max_bytes` each, in order; a tensor larger
/// than `max_bytes` gets a shard of its own (`split_state_dict_into_shards_factory`,
/// huggingface_hub).
fn shard<T>(
    items: Vec<(String, T)>,
    size: impl Fn(&T) -> u64,
    max_bytes: u64,
) -> Vec<Vec<(String, T)>> {
    let mut shards: Vec<Vec<(String, T)>> = Vec::new();
    let mut current: Vec<(String, T)> = Vec::new();
    let mut current_size = 0u64;
    for (name, t) in items {
        let s = size(&t);
        if !current.is_empty() && current_size + s > max_bytes {
            shards.push(std::mem::take(&mut current));
            current_size = 0;
        }
        current_size += s;
        current.push((name, t));
    }
    if !current.is_empty() {
        shards.push(current);
    }
    shards
}

/// Writes `params` as safetensors in `kind`, into one `model.safetensors` or, above
/// `max_shard_bytes`, shards plus an index; removes weight files of an earlier save in `dir`.
pub fn save(
    dir: &Path,
    params: &HashMap<String, Tensor>,
    kind: Kind,
    max_shard_bytes: u64,
) -> Result<()> {
    remove_stale(dir)?;
    let mut names: Vec<&String> = params.keys().collect();
    names.sort_by_key(|n| natural_key(n));
    let sized: Vec<(String, u64)> = names
        .iter()
        .map(|n| {
            let numel = params[*n].numel() as u64;
            ((*n).clone(), numel * kind.elt_size_in_bytes() as u64)
        })
        .collect();
    let total: u64 = sized.iter().map(|(_, s)| s).sum();
    let shards = shard(sized, |s| *s, max_shard_bytes);
    let metadata = Some(HashMap::from([("format".to_string(), "pt".to_string())]));
    let n = shards.len();
    let mut weight_map = serde_json::Map::new();
    for (i, names) in shards.iter().enumerate() {
        let file = if n == 1 {
            WEIGHTS_FILE.to_string()
        } else {
            format!("model-{:05}-of-{n:05}.safetensors", i + 1)
        };
        let bytes = names
            .iter()
            .map(|(name, _)| Ok((name.clone(), to_bytes(&params[name], kind)?)))
            .collect::<Result<Vec<_>>>()?;
        let path = dir.join(&file);
        safetensors::tensor::serialize_to_file(
            bytes.iter().map(|(name, b)| (name.as_str(), b)),
            &metadata,
            &path,
        )
        .map_err(|e| anyhow!("writing {}: {e:?}", path.display()))?;
        for (name, _) in names {
            weight_map.insert(name.clone(), json!(file));
        }
    }
    if n > 1 {
        let index = json!({"metadata": {"total_size": total}, "weight_map": weight_map});
        let path = dir.join(INDEX_FILE);
        std::fs::write(&path, serde_json::to_string_pretty(&index)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Deletes `model.safetensors`, the index and `model-*-of-*.safetensors` shards in `dir`.
fn remove_stale(dir: &Path) -> Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let shard =
            name.starts_with("model-") && name.ends_with(".safetensors") && name.contains("-of-");
        if name == WEIGHTS_FILE || name == INDEX_FILE || shard {
            std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_names_stay_in_the_directory() {
        assert!(is_plain_file_name("model-00001-of-00002.safetensors"));
        for bad in [
            "../x.safetensors",
            "/etc/passwd",
            "a/b.safetensors",
            "..",
            ".",
            "",
            "a\\b",
        ] {
            assert!(!is_plain_file_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn shards_respect_the_limit_and_isolate_big_tensors() {
        let items = vec![
            ("a".into(), 4u64),
            ("b".into(), 4),
            ("c".into(), 10),
            ("d".into(), 1),
        ];
        let shards = shard(items, |s| *s, 8);
        let names: Vec<Vec<&str>> = shards
            .iter()
            .map(|s| s.iter().map(|(n, _)| n.as_str()).collect())
            .collect();
        assert_eq!(names, vec![vec!["a", "b"], vec!["c"], vec!["d"]]);
    }

    #[test]
    fn natural_order_of_layers() {
        let mut v = vec!["model.layers.10.x", "model.layers.2.x", "lm_head.weight"];
        v.sort_by_key(|n| natural_key(n));
        assert_eq!(
            v,
            vec!["lm_head.weight", "model.layers.2.x", "model.layers.10.x"]
        );
    }
}
