//! Broken or unsupported checkpoints fail with errors that name the file, tensor or key.

use crate::hf_support;

use hf_support::fixture;
use std::path::Path;

use reinforge_torch::tch::{Device, Kind, Tensor};
use reinforge_torch::{LoadOptions, Policy};
use serde_json::{json, Value};

/// A scratch copy of a fixture directory.
fn copy_of(name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(fixture(name)).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, dir.path().join(path.file_name().unwrap())).unwrap();
    }
    dir
}

fn edit_config(dir: &Path, edit: impl FnOnce(&mut Value)) {
    let path = dir.join("config.json");
    let mut cfg: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut cfg);
    std::fs::write(&path, serde_json::to_string_pretty(&cfg).unwrap()).unwrap();
}

fn load_err(dir: &Path) -> String {
    match Policy::load(dir, Device::Cpu) {
        Ok(_) => panic!("loading {} should fail", dir.display()),
        Err(e) => format!("{e:#}"),
    }
}

fn assert_mentions(err: &str, parts: &[&str]) {
    for part in parts {
        assert!(
            err.contains(part),
            "error {err:?} does not mention {part:?}"
        );
    }
}

/// Rewrites the single weight file through `edit` of its (name, tensor) list.
fn edit_weights(dir: &Path, edit: impl FnOnce(&mut Vec<(String, Tensor)>)) {
    let path = dir.join("model.safetensors");
    let mut tensors = Tensor::read_safetensors(&path).unwrap();
    edit(&mut tensors);
    Tensor::write_safetensors(&tensors, &path).unwrap();
}

#[test]
fn missing_config_and_weight_files() {
    let dir = copy_of("llama");
    std::fs::remove_file(dir.path().join("config.json")).unwrap();
    assert_mentions(&load_err(dir.path()), &["config.json"]);

    let dir = copy_of("llama");
    std::fs::remove_file(dir.path().join("model.safetensors")).unwrap();
    assert_mentions(
        &load_err(dir.path()),
        &[
            "no weights",
            "model.safetensors",
            "model.safetensors.index.json",
        ],
    );

    let dir = copy_of("llama_sharded");
    std::fs::remove_file(dir.path().join("model-00002-of-00004.safetensors")).unwrap();
    assert_mentions(
        &load_err(dir.path()),
        &[
            "missing weight file",
            "model-00002-of-00004.safetensors",
            "index.json",
        ],
    );
}

#[test]
fn missing_and_unexpected_tensors() {
    let dir = copy_of("qwen2");
    edit_weights(dir.path(), |t| {
        t.retain(|(n, _)| n != "model.layers.1.self_attn.k_proj.bias")
    });
    assert_mentions(
        &load_err(dir.path()),
        &[
            "missing tensor",
            "model.layers.1.self_attn.k_proj.bias",
            "model.safetensors",
        ],
    );

    let dir = copy_of("qwen2");
    edit_weights(dir.path(), |t| {
        t.push((
            "model.layers.0.mlp.extra.weight".into(),
            Tensor::zeros([2], (Kind::Float, Device::Cpu)),
        ))
    });
    assert_mentions(
        &load_err(dir.path()),
        &[
            "unexpected tensor",
            "model.layers.0.mlp.extra.weight",
            "model.safetensors",
        ],
    );

    // A tied model may carry a stored lm_head copy (transformers ignores it).
    let dir = copy_of("qwen2");
    edit_weights(dir.path(), |t| {
        let embed = t
            .iter()
            .find(|(n, _)| n == "model.embed_tokens.weight")
            .unwrap()
            .1
            .copy();
        t.push(("lm_head.weight".into(), embed));
    });
    Policy::load(dir.path(), Device::Cpu).unwrap();
}

#[test]
fn mismatched_shape_names_tensor_shapes_and_file() {
    let dir = copy_of("llama");
    edit_config(dir.path(), |c| c["intermediate_size"] = json!(100));
    assert_mentions(
        &load_err(dir.path()),
        &[
            "model.layers.0.mlp.down_proj.weight",
            "[64, 96]",
            "[64, 100]",
            "model.safetensors",
        ],
    );
}

#[test]
fn unknown_config_key_is_an_error_unless_allowed() {
    let dir = copy_of("mistral");
    edit_config(dir.path(), |c| c["logit_softcap"] = json!(30.0));
    assert_mentions(
        &load_err(dir.path()),
        &["unknown config key `logit_softcap`", "config.json"],
    );

    let mut opts = LoadOptions::f32(Device::Cpu);
    opts.allow_unknown_config_keys = true;
    let p = Policy::load_with(dir.path(), &opts).unwrap();
    // Kept and written back on save.
    let out = tempfile::tempdir().unwrap();
    p.save(out.path()).unwrap();
    let saved = std::fs::read_to_string(out.path().join("config.json")).unwrap();
    assert!(saved.contains("\"logit_softcap\": 30.0"), "{saved}");
}

#[test]
fn unsupported_architecture_and_math_changing_values() {
    type Case<'a> = (&'a str, Box<dyn Fn(&mut Value)>, &'a [&'a str]);
    let cases: [Case; 6] = [
        (
            "llama",
            Box::new(|c| {
                c["model_type"] = json!("gemma");
                c["architectures"] = json!(["GemmaForCausalLM"]);
            }),
            &["unsupported architecture", "gemma", "LlamaForCausalLM"],
        ),
        (
            "llama",
            Box::new(|c| c["architectures"] = json!(["Qwen2ForCausalLM"])),
            &["architectures", "Qwen2ForCausalLM", "llama"],
        ),
        (
            "llama_rope3",
            Box::new(|c| c["rope_scaling"] = json!({"rope_type": "yarn", "factor": 4.0})),
            &["rope_scaling", "yarn"],
        ),
        (
            "qwen2",
            Box::new(|c| c["attention_dropout"] = json!(0.1)),
            &["attention_dropout"],
        ),
        (
            "llama",
            Box::new(|c| c["hidden_act"] = json!("gelu")),
            &["hidden_act", "gelu"],
        ),
        (
            "qwen3",
            Box::new(|c| c["quantization_config"] = json!({"quant_method": "gptq"})),
            &["quantization_config"],
        ),
    ];
    for (name, edit, parts) in cases {
        let dir = copy_of(name);
        edit_config(dir.path(), edit);
        assert_mentions(&load_err(dir.path()), parts);
    }
}

#[test]
fn both_rope_layouts_read_the_same() {
    // transformers 5.x writes `rope_parameters`; 4.x (and most Hub files) `rope_theta` +
    // `rope_scaling`. The llama_rope3 fixture uses the latter; rewrite it as the former.
    let dir = copy_of("llama_rope3");
    edit_config(dir.path(), |c| {
        let mut params = c["rope_scaling"].clone();
        params["rope_theta"] = c["rope_theta"].clone();
        let obj = c.as_object_mut().unwrap();
        obj.remove("rope_scaling");
        obj.remove("rope_theta");
        obj.insert("rope_parameters".into(), params);
    });
    let a = Policy::load(&fixture("llama_rope3"), Device::Cpu).unwrap();
    let b = Policy::load(dir.path(), Device::Cpu).unwrap();
    let (ca, cb) = (a.model.config(), b.model.config());
    assert_eq!(ca.rope_theta, 500000.0);
    assert_eq!(ca.rope_theta, cb.rope_theta);
    assert_eq!(ca.rope_scaling, cb.rope_scaling);
    assert_eq!(ca.rope_scaling.as_ref().unwrap().rope_type, "llama3");
}
