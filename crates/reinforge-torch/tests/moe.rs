//! The mixture-of-experts families (Qwen3-MoE, OLMoE, Mixtral) against transformers 5.23's own
//! outputs on the fixtures of `scripts/make_moe_fixtures.py` (fixtures/hf/moe/): logits, router
//! logits and top-k choices of every sparse layer, completion log-probs, greedy generation
//! with the KV cache, and a save that transformers' layout reads back.

use std::collections::HashMap;
use std::path::PathBuf;

use reinforge_torch::model::logprobs::token_logprobs;
use reinforge_torch::model::transformer::ForwardInput;
use reinforge_torch::tch::{Device, Kind, Tensor};
use reinforge_torch::train::loss::router::load_balancing_loss;
use reinforge_torch::{generate, Policy, SamplingParams, SequenceBatch};

use crate::hf_support::{max_diff, root};

const FIXTURES: [&str; 4] = [
    "qwen3_moe",
    "qwen3_moe_topk_raw",
    "olmoe_clip",
    "mixtral_window",
];

fn fixture(name: &str) -> PathBuf {
    root().join("fixtures/hf/moe").join(name)
}

fn expected(name: &str) -> HashMap<String, Tensor> {
    Tensor::read_safetensors(fixture(name).join("expected.safetensors"))
        .unwrap()
        .into_iter()
        .collect()
}

fn json(name: &str) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(fixture(name).join("expected.json")).unwrap())
        .unwrap()
}

/// Logits, router logits and choices of every sparse layer on the left-padded batch, compared
/// on the real tokens (transformers' eager attention gives a padding query a uniform view of
/// its row; reinforge lets it see itself only, so padding rows differ by design).
#[test]
fn moe_forward_matches_transformers_in_every_layer() {
    for name in FIXTURES {
        let p = Policy::load(&fixture(name), Device::Cpu).unwrap();
        let e = expected(name);
        let mask = &e["attention_mask"];
        let (logits, routes) = p.model.forward_routed(&ForwardInput {
            ids: &e["input_ids"],
            positions: &e["position_ids"],
            key_mask: &mask.to_kind(Kind::Bool),
            segments: &[],
            images: None,
        });
        let d = max_diff(&logits, &e["logits"], mask);
        assert!(d < 1e-4, "{name}: logits differ by {d}");
        let sparse: Vec<usize> =
            serde_json::from_value(json(name)["sparse_layers"].clone()).unwrap();
        let layers: Vec<usize> = routes.iter().map(|(l, _)| *l).collect();
        assert_eq!(layers, sparse, "{name}: the sparse layers");
        let real = mask.flatten(0, 1).nonzero().squeeze_dim(1);
        let pick = |t: &Tensor| t.index_select(0, &real);
        let mut worst = 0f64;
        for (l, r) in &routes {
            let want = |k: &str| pick(&e[&format!("{k}.{l}")]);
            let got_choice = pick(&r.experts);
            assert!(
                got_choice.equal(&want("topk")),
                "{name} layer {l}: top-k experts differ"
            );
            let dl = (pick(&r.logits) - want("router_logits"))
                .abs()
                .max()
                .double_value(&[]);
            let dw = (pick(&r.weights) - want("topk_weights"))
                .abs()
                .max()
                .double_value(&[]);
            assert!(
                dl < 1e-5 && dw < 1e-5,
                "{name} layer {l}: router {dl}, weights {dw}"
            );
            worst = worst.max(dl);
        }
        println!(
            "{name}: logits {d:.2e}, router logits {worst:.2e}, {} sparse layers",
            routes.len()
        );
    }
}

/// Completion log-probs and greedy generation (KV cache; Mixtral decodes past its window).
#[test]
fn moe_logprobs_and_greedy_generation_match_transformers() {
    for name in FIXTURES {
        let p = Policy::load(&fixture(name), Device::Cpu).unwrap();
        let j = json(name);
        let ids =
            |v: &serde_json::Value| -> Vec<Vec<i64>> { serde_json::from_value(v.clone()).unwrap() };
        let (prompts, completions) = (ids(&j["prompts"]), ids(&j["completions"]));
        let want: Vec<Vec<f64>> = serde_json::from_value(j["completion_logprobs"].clone()).unwrap();
        let pr: Vec<&[i64]> = prompts.iter().map(Vec::as_slice).collect();
        let co: Vec<&[i64]> = completions.iter().map(Vec::as_slice).collect();
        let (logp, _) =
            token_logprobs(&p.model, &SequenceBatch::new(&pr, &co, 0, Device::Cpu), 1.0);
        let mut worst = 0f64;
        for (i, w) in want.iter().enumerate() {
            for (t, want) in w.iter().enumerate() {
                let got = logp.double_value(&[i as i64, (prompts[i].len() + t - 1) as i64]);
                worst = worst.max((got - want).abs());
            }
        }
        assert!(worst < 1e-4, "{name}: log-probs differ by {worst}");
        let g = &j["generation"];
        let params = SamplingParams {
            temperature: 0.0,
            top_p: 1.0,
            top_k: 0,
            max_new_tokens: g["max_new_tokens"].as_u64().unwrap() as usize,
            stop_tokens: vec![],
        };
        for (prompt, want) in ids(&g["prompts"]).iter().zip(ids(&g["new_tokens"])) {
            let out = generate(
                &p.model,
                std::slice::from_ref(prompt),
                &params,
                0,
                Device::Cpu,
            );
            assert_eq!(out[0].tokens, want, "{name}: greedy tokens of {prompt:?}");
        }
        println!("{name}: log-probs {worst:.2e}, greedy generation identical");
    }
}

/// A saved MoE checkpoint has transformers' names and config keys, and loads back to the same
/// logits.
#[test]
fn moe_checkpoints_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["qwen3_moe_topk_raw", "mixtral_window"] {
        let p = Policy::load(&fixture(name), Device::Cpu).unwrap();
        let out = dir.path().join(name);
        p.save(&out).unwrap();
        let cfg: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap())
                .unwrap();
        let experts = if name == "mixtral_window" {
            "num_local_experts"
        } else {
            "num_experts"
        };
        assert_eq!(cfg[experts], 8, "{name}: {cfg}");
        let names: Vec<String> = Tensor::read_safetensors(out.join("model.safetensors"))
            .unwrap()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        let want = if name == "mixtral_window" {
            "model.layers.0.block_sparse_moe.experts.7.w2.weight"
        } else {
            "model.layers.2.mlp.experts.7.down_proj.weight"
        };
        assert!(names.iter().any(|n| n == want), "{name}: {want} missing");
        let e = expected(name);
        let back = Policy::load(&out, Device::Cpu).unwrap();
        let run = |p: &Policy| {
            crate::hf_support::logits(p, &e["input_ids"], &e["attention_mask"], &e["position_ids"])
        };
        assert_eq!(
            max_diff(&run(&p), &run(&back), &e["attention_mask"]),
            0.0,
            "{name}"
        );
    }
}

/// transformers' `load_balancing_loss_func` with the attention mask, the causal-LM loss plus
/// `router_aux_loss_coef` times it, and that loss's gradient with respect to every router
/// (torch autograd in the fixture script; here libtorch's, through reinforge's forward).
#[test]
fn aux_loss_and_router_gradients_match_transformers() {
    for name in FIXTURES {
        let p = Policy::load(&fixture(name), Device::Cpu).unwrap();
        let e = expected(name);
        let cfg = p.model.config().clone();
        let mask = &e["attention_mask"];
        let (logits, routes) = p.model.forward_routed(&ForwardInput {
            ids: &e["input_ids"],
            positions: &e["position_ids"],
            key_mask: &mask.to_kind(Kind::Bool),
            segments: &[],
            images: None,
        });
        let layers: Vec<usize> = routes.iter().map(|(l, _)| *l).collect();
        let routes: Vec<_> = routes.into_iter().map(|(_, r)| r).collect();
        let k = cfg.num_experts_per_tok.unwrap() as i64;
        let aux = load_balancing_loss(&routes, k, Some(mask)).unwrap();
        let rel = |got: f64, want: f64| (got - want).abs() / want.abs().max(1e-12);
        let want_aux = e["aux_loss"].double_value(&[]);
        assert!(
            rel(aux.double_value(&[]), want_aux) < 1e-5,
            "{name}: aux {aux:?} vs {want_aux}"
        );
        // Next-token cross-entropy over the labelled tokens (the fixture's `labels` leave out
        // tokens predicted from padding), plus the weighted aux loss.
        let t = logits.size()[1];
        let labels = e["labels"].narrow(1, 1, t - 1);
        let ce = logits
            .narrow(1, 0, t - 1)
            .reshape([-1, cfg.vocab_size as i64])
            .cross_entropy_loss::<Tensor>(
                &labels.reshape([-1]),
                None,
                reinforge_torch::tch::Reduction::Mean,
                -100,
                0.0,
            );
        let coef = cfg.router_aux_loss_coef.unwrap();
        let loss = &ce + &aux * coef;
        assert!(
            rel(ce.double_value(&[]), e["ce_loss"].double_value(&[])) < 1e-5,
            "{name}: CE"
        );
        assert!(
            rel(loss.double_value(&[]), e["loss"].double_value(&[])) < 1e-5,
            "{name}: loss"
        );
        loss.backward();
        let vars = p.vs.variables();
        let module = if name == "mixtral_window" {
            "block_sparse_moe"
        } else {
            "mlp"
        };
        for l in layers {
            let grad = vars[&format!("model.layers.{l}.{module}.gate.weight")].grad();
            let want = &e[&format!("grad.router.{l}")];
            let scale = want.abs().max().double_value(&[]);
            let d = (&grad - want).abs().max().double_value(&[]) / scale;
            assert!(
                scale > 0.0 && d < 1e-5,
                "{name} layer {l}: router gradient off by {d} (relative)"
            );
        }
        println!(
            "{name}: aux {:.6} (transformers {want_aux:.6}), router gradients within 1e-5",
            aux.double_value(&[])
        );
    }
}
