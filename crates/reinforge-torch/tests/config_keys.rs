//! The config.json key policy against what transformers itself writes: every configuration
//! class of the implemented families (transformers 4.46 and 5.23, `fixtures/hf/configs`) and
//! SmolLM2 as transformers 5.23 saves it after loading the GGUF file.

use crate::hf_support;

use std::path::PathBuf;

use reinforge_torch::model::checkpoint::config_json::{parse, write};
use reinforge_torch::Family;
use serde_json::{json, Value};

fn config_files() -> Vec<PathBuf> {
    let root = hf_support::root().join("fixtures/hf/configs");
    let mut files = vec![];
    for entry in walk(&root) {
        if entry.extension().is_some_and(|e| e == "json") {
            files.push(entry);
        }
    }
    files.sort();
    files
}

fn walk(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut out = vec![];
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

fn read(path: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn every_config_transformers_writes_loads_and_keeps_its_keys() {
    let files = config_files();
    // 4 families x 5.23, 3 x 4.46 (no Qwen3 yet), SmolLM2 from GGUF.
    assert!(
        files.len() >= 8,
        "expected the config fixtures, found {files:?}"
    );
    for path in files {
        let value = read(&path);
        let cfg = parse(&value, false).unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
        let family = cfg.family().unwrap();
        assert_eq!(
            family.model_type(),
            value["model_type"],
            "{}",
            path.display()
        );
        // Written back: every key of the source with a value is in the saved file (values of
        // fields may be normalised, e.g. rope_parameters into rope_theta/rope_scaling).
        let out = tempfile::tempdir().unwrap();
        let saved = out.path().join("config.json");
        write(&cfg, &saved, "float32").unwrap();
        let saved = read(&saved);
        for (key, v) in value.as_object().unwrap() {
            if key == "rope_parameters" || v.is_null() {
                continue;
            }
            assert!(
                saved.get(key).is_some(),
                "{}: key `{key}` lost on save",
                path.display()
            );
        }
        // And the saved file loads to the same configuration.
        let again = parse(&saved, false).unwrap();
        assert_eq!(again.hidden_size, cfg.hidden_size);
        assert_eq!(again.rope_theta, cfg.rope_theta);
        assert_eq!(again.family().unwrap(), family);
    }
}

#[test]
fn smollm2_from_gguf_reads_its_shape() {
    let path = hf_support::root().join("fixtures/hf/configs/smollm2-135m-instruct-from-gguf.json");
    let cfg = parse(&read(&path), false).unwrap();
    assert_eq!(cfg.family().unwrap(), Family::Llama);
    assert_eq!(
        (cfg.num_hidden_layers, cfg.hidden_size, cfg.kv_heads()),
        (30, 576, 3)
    );
    assert_eq!(cfg.rope_theta, 100000.0);
    assert!(cfg.tie_word_embeddings);
    assert_eq!(cfg.extra["unk_token_id"], json!(0));
}

/// Harmless keys whose value would change the computation stay errors, naming the key.
#[test]
fn harmless_keys_with_computing_values_are_errors() {
    let base = read(&hf_support::root().join("fixtures/hf/configs/transformers-5.23.0/llama.json"));
    let cases: [(&str, Value, &str); 4] = [
        ("rope_interleaved", json!(true), "`rope_interleaved`"),
        ("add_cross_attention", json!(true), "`add_cross_attention`"),
        ("pruned_heads", json!({"0": [1]}), "`pruned_heads`"),
        ("attention_dropout", json!(0.1), "`attention_dropout`"),
    ];
    for (key, value, expected) in cases {
        let mut cfg = base.clone();
        cfg[key] = value;
        let err = format!("{:#}", parse(&cfg, false).unwrap_err());
        assert!(err.contains(expected), "{key}: {err}");
    }
    // At their inference values they load.
    let mut cfg = base.clone();
    cfg["rope_interleaved"] = json!(false);
    cfg["pruned_heads"] = json!({});
    parse(&cfg, false).unwrap();
}

/// A RoPE error names the key the file used.
#[test]
fn rope_errors_name_the_key_the_file_used() {
    let mut cfg =
        read(&hf_support::root().join("fixtures/hf/configs/transformers-5.23.0/llama.json"));
    cfg["rope_parameters"] = json!({"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0});
    let err = format!("{:#}", parse(&cfg, false).unwrap_err());
    assert!(err.contains("rope_parameters.rope_type"), "{err}");
    assert!(!err.contains("rope_scaling"), "{err}");

    let mut cfg =
        read(&hf_support::root().join("fixtures/hf/configs/transformers-4.46.3/llama.json"));
    cfg["rope_scaling"] = json!({"rope_type": "yarn", "factor": 4.0});
    let err = format!("{:#}", parse(&cfg, false).unwrap_err());
    assert!(err.contains("rope_scaling.rope_type"), "{err}");
}
