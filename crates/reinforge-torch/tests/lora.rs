//! LoRA adapters: a fresh adapter changes nothing, only adapters train, saved adapters load in
//! PEFT (scripts/check_peft_adapter.py, run with the project's .venv) with the same logits,
//! and merged checkpoints compute what the adapted model computes.

use crate::hf_support;

use std::path::{Path, PathBuf};

use hf_support::{batch, fixture, run_python};
use reinforge_torch::model::lora::{is_lora_param, ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE};
use reinforge_torch::tch::{Device, Kind, Tensor};
use reinforge_torch::{AdamW, AdamWConfig, LoraConfig, Policy};

const ALL: &[&str] = &[
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
];

fn lora(r: usize, alpha: f64, targets: &[&str]) -> LoraConfig {
    LoraConfig {
        r,
        alpha,
        target_modules: targets.iter().map(|s| s.to_string()).collect(),
        dropout: 0.0,
    }
}

fn logits(p: &Policy) -> Tensor {
    let (ids, mask, pos) = batch(p.model.config().vocab_size as i64);
    hf_support::logits(p, &ids, &mask, &pos)
}

fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
    (a - b).abs().max().double_value(&[])
}

/// `steps` AdamW updates on the next-token loss of the batch.
fn train(p: &Policy, steps: usize) {
    let mut opt = AdamW::new(&p.vs, AdamWConfig::default());
    let (ids, _, _) = batch(p.model.config().vocab_size as i64);
    for _ in 0..steps {
        opt.zero_grad();
        let lp = logits(p).narrow(1, 0, 9).log_softmax(-1, Kind::Float);
        let next = ids.narrow(1, 1, 9).unsqueeze(-1);
        let loss = -lp.gather(-1, &next, false).mean(Kind::Float);
        loss.backward();
        opt.step(2e-2);
    }
}

/// Writes the batch and `logits` as the reference file the Python checkers read.
fn write_reference(p: &Policy, logits: &Tensor, path: &Path) {
    let (ids, mask, pos) = batch(p.model.config().vocab_size as i64);
    let named = [
        ("input_ids", ids),
        ("attention_mask", mask),
        ("position_ids", pos),
        ("logits", logits.to_kind(Kind::Float).contiguous()),
    ];
    Tensor::write_safetensors(&named, path).unwrap();
}

#[test]
fn fresh_adapter_leaves_logits_unchanged() {
    let mut p = Policy::load(&fixture("llama"), Device::Cpu).unwrap();
    let before = logits(&p);
    p.enable_lora(&lora(4, 8.0, ALL)).unwrap();
    assert_eq!(max_diff(&logits(&p), &before), 0.0);

    let vars = p.vs.variables();
    let a = &vars["model.layers.1.mlp.down_proj.lora_A.weight"];
    let b = &vars["model.layers.1.mlp.down_proj.lora_B.weight"];
    // down_proj: in = intermediate_size 96, out = hidden 64. A ~ U(±1/sqrt(96)), B = 0.
    assert_eq!(a.size(), [4, 96]);
    assert_eq!(b.size(), [64, 4]);
    assert_eq!(b.abs().max().double_value(&[]), 0.0);
    let bound = 1.0 / 96f64.sqrt();
    let amax = a.abs().max().double_value(&[]);
    assert!(amax <= bound && amax > 0.8 * bound, "{amax} vs {bound}");
}

#[test]
fn only_adapters_train() {
    let mut p = Policy::load(&fixture("qwen2"), Device::Cpu).unwrap();
    let full = p.trainable_parameters();
    let base: Vec<(String, Tensor)> =
        p.vs.variables()
            .into_iter()
            .map(|(n, t)| (n, t.copy()))
            .collect();
    let targets = ["q_proj", "v_proj", "down_proj"];
    p.enable_lora(&lora(2, 4.0, &targets)).unwrap();

    let cfg = p.model.config().clone();
    let (h, kv) = (cfg.hidden_size as i64, cfg.kv_heads() as i64);
    let (q, v) = (
        (cfg.num_attention_heads * cfg.head_dim()) as i64,
        kv * cfg.head_dim() as i64,
    );
    let i = cfg.intermediate_size as i64;
    let per_layer = 2 * ((h + q) + (h + v) + (i + h));
    assert_eq!(
        p.trainable_parameters(),
        per_layer * cfg.num_hidden_layers as i64
    );
    assert!(p.trainable_parameters() < full);
    assert_eq!(
        p.vs.trainable_variables().len(),
        2 * targets.len() * cfg.num_hidden_layers
    );
    for (name, t) in p.vs.variables() {
        assert_eq!(t.requires_grad(), is_lora_param(&name), "{name}");
    }

    train(&p, 3);
    let vars = p.vs.variables();
    for (name, before) in &base {
        assert!(vars[name].equal(before), "base weight {name} changed");
    }
    let b = &vars["model.layers.0.self_attn.q_proj.lora_B.weight"];
    assert!(
        b.abs().max().double_value(&[]) > 1e-3,
        "adapter did not train"
    );
}

/// Trains adapters on `fixture`, saves them, and checks the PEFT layout here; returns the
/// (base, adapter, reference) triple for the PEFT checker.
fn trained_adapter(fixture_name: &str, cfg: &LoraConfig, dir: &Path) -> (Policy, [PathBuf; 3]) {
    let base = fixture(fixture_name);
    let mut p = Policy::load(&base, Device::Cpu).unwrap();
    let plain = logits(&p);
    p.enable_lora(cfg).unwrap();
    train(&p, 3);
    let ours = logits(&p);
    let change = max_diff(&ours, &plain);
    assert!(
        change > 1e-3,
        "{fixture_name}: training moved logits by {change} only"
    );

    let adapter = dir.join(format!("{fixture_name}_adapter"));
    p.save_adapter(&adapter, &base.display().to_string())
        .unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(adapter.join(ADAPTER_CONFIG_FILE)).unwrap())
            .unwrap();
    assert_eq!(json["peft_type"], "LORA");
    assert_eq!(json["task_type"], "CAUSAL_LM");
    assert_eq!(json["r"], cfg.r);
    assert_eq!(json["lora_alpha"].as_f64().unwrap(), cfg.alpha);
    assert_eq!(json["lora_dropout"], 0.0);
    assert_eq!(json["bias"], "none");
    assert_eq!(json["fan_in_fan_out"], false);
    assert_eq!(
        json["target_modules"],
        serde_json::json!(cfg.target_modules)
    );
    let tensors = Tensor::read_safetensors(adapter.join(ADAPTER_WEIGHTS_FILE)).unwrap();
    let layers = p.model.config().num_hidden_layers;
    assert_eq!(tensors.len(), 2 * cfg.target_modules.len() * layers);
    assert!(tensors
        .iter()
        .any(|(n, _)| n == "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"));

    // The adapter reloads here onto a fresh base, bit-exactly.
    let mut again = Policy::load(&base, Device::Cpu).unwrap();
    again.load_adapter(&adapter).unwrap();
    assert_eq!(again.model.lora_config(), Some(cfg));
    assert_eq!(max_diff(&logits(&again), &ours), 0.0);

    let reference = dir.join(format!("{fixture_name}_reference.safetensors"));
    write_reference(&p, &ours, &reference);
    (p, [base, adapter, reference])
}

#[test]
fn saved_adapters_load_in_peft_and_merge_to_the_same_model() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("llama", lora(4, 16.0, ALL)),
        (
            "qwen2",
            lora(8, 8.0, &["q_proj", "k_proj", "v_proj", "o_proj"]),
        ),
    ];
    let mut triples = Vec::new();
    let mut merged_pairs = Vec::new();
    for (name, cfg) in &cases {
        let (mut p, triple) = trained_adapter(name, cfg, dir.path());
        let ours = logits(&p);

        // A full save of the LoRA policy holds the merged model and no adapter tensors.
        let merged_dir = dir.path().join(format!("{name}_merged"));
        p.save(&merged_dir).unwrap();
        let saved = Tensor::read_safetensors(merged_dir.join("model.safetensors")).unwrap();
        assert!(saved.iter().all(|(n, _)| !n.contains("lora")));
        let merged = Policy::load(&merged_dir, Device::Cpu).unwrap();
        let d_saved = max_diff(&logits(&merged), &ours);
        println!("{name}: max |merged save - adapter model| = {d_saved:.3e}");
        assert!(d_saved <= 1e-5, "{name}: {d_saved}");

        // The KL reference copy computes what the adapted policy computes.
        let frozen = p.frozen_copy().unwrap();
        assert!(max_diff(&logits(&frozen), &ours) <= 1e-5);

        // Merging in place: a plain, fully trainable model with the same logits.
        p.merge_lora().unwrap();
        assert!(p.model.lora_config().is_none());
        assert!(p.vs.variables().keys().all(|n| !is_lora_param(n)));
        assert!(p.vs.variables().values().all(|t| t.requires_grad()));
        assert_eq!(p.trainable_parameters(), merged.trainable_parameters());
        let d_merged = max_diff(&logits(&p), &ours);
        println!("{name}: max |merge_lora() - adapter model| = {d_merged:.3e}");
        assert!(d_merged <= 1e-5, "{name}: {d_merged}");

        merged_pairs.push(merged_dir);
        merged_pairs.push(triple[2].clone());
        triples.extend(triple);
    }
    let diffs = run_python("check_peft_adapter.py", &triples);
    assert_eq!(diffs.len(), cases.len());
    for ((name, _), d) in cases.iter().zip(&diffs) {
        println!("{name}: max |reinforge LoRA - PEFT| = {d:.3e}");
        assert!(*d <= 1e-5, "{name}: {d}");
    }
    // transformers reads the merged checkpoints as the same model too.
    let diffs = run_python("check_hf_checkpoint.py", &merged_pairs);
    for ((name, _), d) in cases.iter().zip(&diffs) {
        println!("{name}: max |merged checkpoint in transformers - reinforge LoRA| = {d:.3e}");
        assert!(*d <= 1e-5, "{name}: {d}");
    }
}

#[test]
fn bad_settings_are_clear_errors() {
    let mut p = Policy::load(&fixture("llama"), Device::Cpu).unwrap();
    let err = |cfg: LoraConfig| format!("{:#}", cfg.validate().unwrap_err());

    let e = err(LoraConfig {
        dropout: 0.05,
        ..lora(4, 8.0, &["q_proj"])
    });
    assert!(e.contains("lora.dropout = 0.05"), "{e}");
    let e = err(lora(4, 8.0, &["q_proj", "c_attn"]));
    assert!(
        e.contains("lora.target_modules[1] = \"c_attn\"") && e.contains("q_proj"),
        "{e}"
    );
    assert!(err(lora(0, 8.0, &["q_proj"])).contains("lora.r"));
    assert!(err(lora(4, 8.0, &[])).contains("target_modules is empty"));
    assert!(err(lora(4, 8.0, &["v_proj", "v_proj"])).contains("twice"));

    // enable_lora validates too, and leaves the policy untouched on error.
    let e = p
        .enable_lora(&lora(4, 8.0, &["lm_head"]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("\"lm_head\""), "{e}");
    assert!(p.model.lora_config().is_none());
    assert!(p.vs.variables().values().all(|t| t.requires_grad()));

    let dir = tempfile::tempdir().unwrap();
    let e = p.save_adapter(dir.path(), "x").unwrap_err().to_string();
    assert!(e.contains("LoRA is not enabled"), "{e}");
    p.enable_lora(&lora(4, 8.0, &["q_proj"])).unwrap();
    let e = p
        .enable_lora(&lora(4, 8.0, &["q_proj"]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("already enabled"), "{e}");

    // An adapter for another rank names the tensor and the file.
    p.save_adapter(dir.path(), "x").unwrap();
    let mut other = Policy::load(&fixture("llama"), Device::Cpu).unwrap();
    let cfg_path = dir.path().join(ADAPTER_CONFIG_FILE);
    let text = std::fs::read_to_string(&cfg_path)
        .unwrap()
        .replace("\"r\": 4", "\"r\": 2");
    std::fs::write(&cfg_path, text).unwrap();
    let e = format!("{:#}", other.load_adapter(dir.path()).unwrap_err());
    assert!(
        e.contains("q_proj.lora_") && e.contains(ADAPTER_WEIGHTS_FILE) && e.contains("check r in"),
        "{e}"
    );
}

#[test]
fn config_deserialises_with_default_dropout_and_rejects_unknown_keys() {
    let cfg: LoraConfig =
        serde_json::from_str(r#"{"r": 8, "alpha": 16, "target_modules": ["q_proj", "v_proj"]}"#)
            .unwrap();
    assert_eq!(cfg, lora(8, 16.0, &["q_proj", "v_proj"]));
    assert_eq!(cfg.scaling(), 2.0);
    let e = serde_json::from_str::<LoraConfig>(
        r#"{"r": 8, "alpha": 16, "target_modules": ["q_proj"], "lora_dropout": 0.1}"#,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("lora_dropout"), "{e}");
}
