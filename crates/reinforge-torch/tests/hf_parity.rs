//! Logits and log-probs of the Hugging Face fixtures (fixtures/hf/models/, built by
//! scripts/make_hf_fixtures.py with transformers) against transformers' own outputs.

use crate::hf_support;

use hf_support::{fixture, max_diff, FIXTURES};
use std::collections::HashMap;

use reinforge_torch::model::cache::KvCache;
use reinforge_torch::model::logprobs::token_logprobs;
use reinforge_torch::model::transformer::{positions_from_mask, ForwardInput};
use reinforge_torch::tch::{Device, Kind, Tensor};
use reinforge_torch::{LoadOptions, Policy, SequenceBatch};

fn expected(name: &str) -> HashMap<String, Tensor> {
    Tensor::read_safetensors(fixture(name).join("expected.safetensors"))
        .unwrap()
        .into_iter()
        .collect()
}

fn logits(p: &Policy, e: &HashMap<String, Tensor>) -> Tensor {
    hf_support::logits(p, &e["input_ids"], &e["attention_mask"], &e["position_ids"])
}

#[test]
fn logits_match_transformers_in_f32() {
    for name in FIXTURES {
        let p = Policy::load(&fixture(name), Device::Cpu).unwrap();
        let e = expected(name);
        let d = max_diff(&logits(&p, &e), &e["logits"], &e["attention_mask"]);
        println!("{name}: max |logits - transformers| = {d:.3e}");
        assert!(d < 1e-4, "{name}: max abs diff {d}");
        // The comparison is not vacuous: logits are O(1) and vary across positions.
        assert!(e["logits"].abs().max().double_value(&[]) > 1.0);
    }
}

#[test]
fn completion_logprobs_match_transformers() {
    for name in FIXTURES {
        let p = Policy::load(&fixture(name), Device::Cpu).unwrap();
        let text = std::fs::read_to_string(fixture(name).join("expected.json")).unwrap();
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        let ids =
            |key: &str| -> Vec<Vec<i64>> { serde_json::from_value(json[key].clone()).unwrap() };
        let (prompts, completions) = (ids("prompts"), ids("completions"));
        let want: Vec<Vec<f64>> =
            serde_json::from_value(json["completion_logprobs"].clone()).unwrap();
        let pr: Vec<&[i64]> = prompts.iter().map(Vec::as_slice).collect();
        let co: Vec<&[i64]> = completions.iter().map(Vec::as_slice).collect();
        let batch = SequenceBatch::new(&pr, &co, 0, Device::Cpu);
        let (logp, _) = token_logprobs(&p.model, &batch, 1.0);
        let mut worst = 0f64;
        for (i, w) in want.iter().enumerate() {
            assert_eq!(w.len(), completions[i].len());
            for (j, want) in w.iter().enumerate() {
                let got = logp.double_value(&[i as i64, (prompts[i].len() + j - 1) as i64]);
                worst = worst.max((got - want).abs());
            }
        }
        println!("{name}: max |logprob - transformers| = {worst:.3e}");
        assert!(worst < 1e-4, "{name}: {worst}");
    }
}

#[test]
fn bf16_checkpoint_runs_in_f32_and_bf16() {
    let dir = fixture("llama_bf16");
    let e = expected("llama_bf16");
    let mut opts = LoadOptions::for_device(Device::Cpu);
    opts.kind = Kind::BFloat16;
    let p = Policy::load_with(&dir, &opts).unwrap();
    assert_eq!(p.kind(), Kind::BFloat16);
    let got = logits(&p, &e);
    let vs_hf_bf16 = max_diff(&got, &e["logits_bf16"], &e["attention_mask"]);
    let vs_f32 = max_diff(&got, &e["logits"], &e["attention_mask"]);
    println!("bf16 compute: max diff vs transformers bf16 {vs_hf_bf16:.3e}, vs f32 reference {vs_f32:.3e}");
    // bf16 keeps 8 mantissa bits: one ulp of a logit near 4 is 0.03, and the two bf16
    // computations round in different places, so a few ulps apart is expected.
    assert!(vs_hf_bf16 < 0.25, "{vs_hf_bf16}");
    assert!(vs_f32 < 0.25, "{vs_f32}");
    // ... yet bf16 really ran: it is not bit-identical to the f32 reference.
    assert!(vs_f32 > 1e-4, "{vs_f32}");
}

/// Token-by-token decoding with the KV cache reproduces the full forward pass, also where
/// Mistral's sliding window (8) is shorter than the sequence (12), and for Qwen3's q/k norms.
#[test]
fn kv_cache_decoding_matches_full_forward_with_window() {
    for name in ["mistral", "qwen3", "llama_rope3"] {
        let p = Policy::load(&fixture(name), Device::Cpu).unwrap();
        let e = expected(name);
        let (ids, mask) = (&e["input_ids"], e["attention_mask"].to_kind(Kind::Bool));
        let full = logits(&p, &e);
        let t = ids.size()[1];
        let mut cache = KvCache::new(p.model.config().num_hidden_layers);
        let positions = positions_from_mask(&mask);
        let mut steps = Vec::new();
        for i in 0..t {
            let out = p.model.forward(
                &ForwardInput {
                    ids: &ids.narrow(1, i, 1),
                    positions: &positions.narrow(1, i, 1),
                    key_mask: &mask.narrow(1, 0, i + 1),
                    segments: &[],
                    images: None,
                },
                Some(&mut cache),
                false,
            );
            steps.push(out);
        }
        let stepped = Tensor::cat(&steps, 1);
        let d = max_diff(&stepped, &full, &e["attention_mask"]);
        assert!(d < 1e-4, "{name}: cached decoding differs by {d}");
    }
}

/// The parity above is not vacuous: dropping the llama3 RoPE remap, Mistral's window or
/// Qwen3's q/k norms from the config moves the logits far beyond the tolerance.
#[test]
fn architecture_switches_change_the_logits() {
    type Edit<'a> = (&'a str, &'a dyn Fn(&mut serde_json::Value));
    let edits: [Edit; 3] = [
        ("llama_rope3", &|c| {
            c["rope_scaling"] = serde_json::Value::Null
        }),
        ("mistral", &|c| {
            c["sliding_window"] = serde_json::Value::Null
        }),
        ("qwen3", &|c| {
            c["model_type"] = "llama".into();
            c["architectures"] = serde_json::json!(["LlamaForCausalLM"]);
        }),
    ];
    for (name, edit) in edits {
        let dir = tempfile::tempdir().unwrap();
        for entry in std::fs::read_dir(fixture(name)).unwrap() {
            let path = entry.unwrap().path();
            std::fs::copy(&path, dir.path().join(path.file_name().unwrap())).unwrap();
        }
        let cfg_path = dir.path().join("config.json");
        let mut cfg: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&cfg_path).unwrap()).unwrap();
        edit(&mut cfg);
        std::fs::write(&cfg_path, cfg.to_string()).unwrap();
        let e = expected(name);
        let result = Policy::load(dir.path(), Device::Cpu);
        match result {
            Ok(p) => {
                let d = max_diff(&logits(&p, &e), &e["logits"], &e["attention_mask"]);
                assert!(d > 1e-2, "{name}: edited config still matches ({d})");
            }
            // Qwen3 weights under a Llama config: q_norm/k_norm are unexpected tensors.
            Err(err) => assert!(
                format!("{err:#}")
                    .contains("unexpected tensor `model.layers.0.self_attn.k_norm.weight`"),
                "{name}: {err:#}"
            ),
        }
    }
}
