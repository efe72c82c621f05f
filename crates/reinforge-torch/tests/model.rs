//! Model, sampling and checkpoint behaviour on a tiny configuration.

use reinforge_torch::model::cache::KvCache;
use reinforge_torch::model::transformer::{positions_from_mask, ForwardInput};
use reinforge_torch::sample::{filter_top_k_top_p, generate, left_pad, SamplingParams};
use reinforge_torch::tch::{Device, Kind, Tensor};
use reinforge_torch::{ModelConfig, Policy};

fn tiny(tie: bool, bias: bool) -> ModelConfig {
    serde_json::from_value(serde_json::json!({
        "vocab_size": 11, "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
        "tie_word_embeddings": tie, "attention_bias": bias, "rms_norm_eps": 1e-6
    }))
    .unwrap()
}

fn full_logits(p: &Policy, ids: &Tensor, mask: &Tensor) -> Tensor {
    let positions = positions_from_mask(mask);
    p.model.forward(
        &ForwardInput {
            ids,
            positions: &positions,
            key_mask: mask,
            segments: &[],
            images: None,
        },
        None,
        false,
    )
}

#[test]
fn forward_shapes_and_parameter_names() {
    for (tie, bias) in [(true, false), (false, true)] {
        let p = Policy::new(&tiny(tie, bias), Device::Cpu, 0).unwrap();
        let ids = Tensor::from_slice(&[1i64, 2, 3, 4, 5, 6]).view([2, 3]);
        let mask = Tensor::ones([2, 3], (Kind::Bool, Device::Cpu));
        assert_eq!(full_logits(&p, &ids, &mask).size(), vec![2, 3, 11]);
        let names = p.vs.variables();
        assert!(names.contains_key("model.layers.1.self_attn.k_proj.weight"));
        assert_eq!(
            names["model.layers.0.self_attn.k_proj.weight"].size(),
            vec![8, 16],
            "GQA: 2 kv heads of width 4"
        );
        assert_eq!(names.contains_key("lm_head.weight"), !tie);
        assert_eq!(
            names.contains_key("model.layers.0.self_attn.q_proj.bias"),
            bias
        );
    }
}

#[test]
fn finite_difference_gradient_check() {
    let mut p = Policy::new(&tiny(false, true), Device::Cpu, 1).unwrap();
    p.vs.double();
    let ids = Tensor::from_slice(&[1i64, 5, 3, 7, 2, 9, 4, 4]).view([2, 4]);
    let mask = Tensor::ones([2, 4], (Kind::Bool, Device::Cpu));
    let probe = reinforge_torch::runtime::with_generator(|| {
        Tensor::randn([2, 4, 11], (Kind::Double, Device::Cpu))
    });
    let objective = |p: &Policy| {
        (full_logits(p, &ids, &mask).log_softmax(-1, Kind::Double) * &probe).sum(Kind::Double)
    };
    objective(&p).backward();
    let vars = p.vs.variables();
    for name in [
        "model.layers.0.self_attn.q_proj.weight",
        "model.layers.1.mlp.gate_proj.weight",
        "model.norm.weight",
        "model.layers.0.self_attn.v_proj.bias",
        "model.embed_tokens.weight",
    ] {
        let w = &vars[name];
        let grad = w.grad();
        for flat in [0i64, 3, 7] {
            let analytic = grad.flatten(0, -1).double_value(&[flat]);
            let eps = 1e-6;
            let bump = |d: f64| {
                let _guard = reinforge_torch::tch::no_grad_guard();
                let view = w.flatten(0, -1);
                let _ = view.get(flat).g_add_scalar_(d);
            };
            bump(eps);
            let up = objective(&p).double_value(&[]);
            bump(-2.0 * eps);
            let down = objective(&p).double_value(&[]);
            bump(eps);
            let numeric = (up - down) / (2.0 * eps);
            assert!(
                (numeric - analytic).abs() <= 1e-6 * (1.0 + analytic.abs()),
                "{name}[{flat}]: numeric {numeric} vs analytic {analytic}"
            );
        }
    }
}

#[test]
fn kv_cache_decoding_matches_full_recompute() {
    let p = Policy::new(&tiny(true, false), Device::Cpu, 2).unwrap();
    let prompts = vec![vec![3i64, 4, 5, 6], vec![7i64, 8]];
    let (ids, mask) = left_pad(&prompts, 0, Device::Cpu);
    let mut cache = KvCache::new(2);
    let positions = positions_from_mask(&mask);
    let mut step_logits = vec![p.model.forward(
        &ForwardInput {
            ids: &ids,
            positions: &positions,
            key_mask: &mask,
            segments: &[],
            images: None,
        },
        Some(&mut cache),
        true,
    )];
    let mut all_ids = ids.shallow_clone();
    let mut all_mask = mask.shallow_clone();
    for new in [[1i64, 2], [9, 10], [4, 4]] {
        let tok = Tensor::from_slice(&new).view([2, 1]);
        all_ids = Tensor::cat(&[&all_ids, &tok], 1);
        all_mask = Tensor::cat(
            &[&all_mask, &Tensor::ones([2, 1], (Kind::Bool, Device::Cpu))],
            1,
        );
        let pos = positions_from_mask(&all_mask).narrow(1, all_ids.size()[1] - 1, 1);
        step_logits.push(p.model.forward(
            &ForwardInput {
                ids: &tok,
                positions: &pos,
                key_mask: &all_mask,
                segments: &[],
                images: None,
            },
            Some(&mut cache),
            true,
        ));
    }
    let full = full_logits(&p, &all_ids, &all_mask);
    let l = ids.size()[1];
    for (i, cached) in step_logits.iter().enumerate() {
        let reference = full.narrow(1, l - 1 + i as i64, 1);
        let diff = (cached - &reference).abs().max().double_value(&[]);
        assert!(diff < 1e-5, "step {i}: max |cached - full| = {diff}");
    }
    // Left padding is invisible: the short prompt alone gives the same last logits.
    let alone = Tensor::from_slice(&[7i64, 8, 2, 10, 4]).view([1, 5]);
    let alone_logits = full_logits(&p, &alone, &Tensor::ones([1, 5], (Kind::Bool, Device::Cpu)));
    let padded_row = full.get(1).narrow(0, 2, 5);
    assert!(
        (alone_logits.get(0) - padded_row)
            .abs()
            .max()
            .double_value(&[])
            < 1e-5
    );
}

#[test]
fn sampling_respects_stop_tokens_lengths_and_logprobs() {
    let p = Policy::new(&tiny(true, false), Device::Cpu, 3).unwrap();
    let prompts = vec![vec![3i64, 4], vec![5i64, 6, 7], vec![8i64]];
    let params = SamplingParams {
        temperature: 1.0,
        top_p: 1.0,
        top_k: 0,
        max_new_tokens: 12,
        stop_tokens: vec![2],
    };
    let draw = || {
        reinforge_torch::runtime::with_seed(0, || {
            generate(&p.model, &prompts, &params, 0, Device::Cpu)
        })
    };
    let out = draw();
    assert_eq!(out, draw(), "seeded sampling repeats");
    for c in &out {
        assert_eq!(c.tokens.len(), c.logprobs.len());
        assert!(c.tokens.len() <= 12);
        let stops = c.tokens.iter().filter(|&&t| t == 2).count();
        assert_eq!(c.truncated, stops == 0);
        if !c.truncated {
            assert_eq!(
                *c.tokens.last().unwrap(),
                2,
                "generation ends at the stop token"
            );
        }
        assert!(c.logprobs.iter().all(|&l| l <= 0.0 && l.is_finite()));
    }
    // The sampler's log-probs are those a full forward pass assigns (what the trainer
    // recomputes), for every row: also after finished rows have left the decoding batch.
    for (prompt, c) in prompts.iter().zip(&out) {
        let mut seq = prompt.clone();
        seq.extend(&c.tokens);
        let ids = Tensor::from_slice(&seq).view([1, -1]);
        let logits = full_logits(
            &p,
            &ids,
            &Tensor::ones([1, seq.len() as i64], (Kind::Bool, Device::Cpu)),
        );
        let logp = logits.log_softmax(-1, Kind::Float);
        for (j, (&tok, &lp)) in c.tokens.iter().zip(&c.logprobs).enumerate() {
            let reference = logp.double_value(&[0, (prompt.len() - 1 + j) as i64, tok]);
            assert!(
                (reference - lp as f64).abs() < 1e-4,
                "token {j}: {reference} vs {lp}"
            );
        }
    }
}

#[test]
fn greedy_top_k_and_top_p_filters() {
    let logits = Tensor::from_slice(&[2.0f32, 1.0, 0.0, -1.0])
        .log_softmax(-1, Kind::Float)
        .view([1, 4]);
    let kept = |t: Tensor| {
        Vec::<f32>::try_from(t.flatten(0, -1))
            .unwrap()
            .iter()
            .map(|v| v.is_finite())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        kept(filter_top_k_top_p(&logits, 2, 1.0)),
        vec![true, true, false, false]
    );
    // Probabilities ≈ 0.644, 0.237, 0.087, 0.032: top-p 0.7 keeps the first two, 0.5 just the first.
    assert_eq!(
        kept(filter_top_k_top_p(&logits, 0, 0.7)),
        vec![true, true, false, false]
    );
    assert_eq!(
        kept(filter_top_k_top_p(&logits, 0, 0.5)),
        vec![true, false, false, false]
    );
    let p = Policy::new(&tiny(true, false), Device::Cpu, 4).unwrap();
    let greedy = SamplingParams {
        temperature: 0.0,
        max_new_tokens: 5,
        ..Default::default()
    };
    let a = generate(&p.model, &[vec![3, 4]], &greedy, 0, Device::Cpu);
    let b = generate(&p.model, &[vec![3, 4]], &greedy, 0, Device::Cpu);
    assert_eq!(a, b, "greedy decoding is deterministic without a seed");
}

#[test]
fn checkpoint_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let p = Policy::new(&tiny(false, true), Device::Cpu, 5).unwrap();
    p.save(dir.path()).unwrap();
    assert!(
        dir.path().join("model.safetensors").exists() && dir.path().join("config.json").exists()
    );
    let q = Policy::load(dir.path(), Device::Cpu).unwrap();
    let ids = Tensor::from_slice(&[1i64, 2, 3]).view([1, 3]);
    let mask = Tensor::ones([1, 3], (Kind::Bool, Device::Cpu));
    assert_eq!(
        (full_logits(&p, &ids, &mask) - full_logits(&q, &ids, &mask))
            .abs()
            .max()
            .double_value(&[]),
        0.0
    );
    let err = Policy::load(&dir.path().join("missing"), Device::Cpu)
        .err()
        .unwrap();
    assert!(format!("{err:#}").contains("config.json"), "{err:#}");
}

/// Continuous batching: a prompt admitted into a running batch (a longer prompt, so the
/// running rows' cache is left-padded, and a shorter one) decodes what it decodes alone, and
/// the rows already running are unchanged; the hook sees each row end once.
#[test]
fn rows_admitted_mid_batch_decode_as_they_would_alone() {
    use reinforge_torch::{generate_with, GenerateHooks, RowEnd, StepControl, StepToken};
    let p = Policy::new(&tiny(true, false), Device::Cpu, 5).unwrap();
    let params = SamplingParams {
        temperature: 0.0,
        max_new_tokens: 9,
        ..Default::default()
    };
    let running = vec![vec![1, 5, 6], vec![1, 7]];
    let admitted = vec![vec![1, 2, 3, 4, 5, 6, 7], vec![1, 3]];
    let alone = |prompts: &[Vec<i64>]| generate(&p.model, prompts, &params, 0, Device::Cpu);
    let want: Vec<_> = running
        .iter()
        .chain(&admitted)
        .map(|q| alone(std::slice::from_ref(q)).remove(0))
        .collect();
    let mut step = 0;
    let mut ends = vec![0; 4];
    let mut hook = |toks: &[StepToken]| {
        step += 1;
        for t in toks {
            if t.end.is_some() {
                ends[t.row] += 1;
                assert_eq!(t.end == Some(RowEnd::Length), want[t.row].truncated);
            }
        }
        StepControl {
            stop: false,
            admit: if step == 3 {
                admitted.iter().map(|q| (q.clone(), 9)).collect()
            } else {
                vec![]
            },
            end: vec![],
        }
    };
    let mut hooks = GenerateHooks {
        top_logprobs: 0,
        on_step: Some(&mut hook),
        row_rng: None,
    };
    let got = generate_with(&p.model, &running, &params, 0, Device::Cpu, &mut hooks);
    assert_eq!(got.len(), 4);
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.tokens, w.tokens);
        for (a, b) in g.logprobs.iter().zip(&w.logprobs) {
            assert!((a - b).abs() < 1e-4, "{a} vs {b}");
        }
    }
    assert_eq!(ends, vec![1; 4]);
}

/// With per-row noise a row samples the same tokens whatever else is in its batch (what lets
/// data-parallel ranks reproduce one process), and different seeds or rows draw differently.
#[test]
fn per_row_sampling_does_not_depend_on_the_batch() {
    use reinforge_torch::sample::{generate_with, GenerateHooks, RowRng};
    let p = Policy::new(&tiny(true, false), Device::Cpu, 5).unwrap();
    let params = SamplingParams {
        temperature: 1.0,
        max_new_tokens: 12,
        ..Default::default()
    };
    let prompts: Vec<Vec<i64>> = vec![vec![1, 5, 6], vec![1, 5, 6], vec![1, 7], vec![1, 2, 3, 4]];
    let draw = |rows: std::ops::Range<usize>, seed: u64| {
        let mut hooks = GenerateHooks {
            row_rng: Some(RowRng {
                seed,
                row_offset: rows.start,
            }),
            ..GenerateHooks::default()
        };
        generate_with(
            &p.model,
            &prompts[rows],
            &params,
            0,
            Device::Cpu,
            &mut hooks,
        )
    };
    let all = draw(0..4, 9);
    let tail = draw(2..4, 9);
    assert_eq!(all[2].tokens, tail[0].tokens);
    assert_eq!(all[3].tokens, tail[1].tokens);
    // Same prompt, different rows: different noise, so different samples.
    assert_ne!(all[0].tokens, all[1].tokens);
    assert_ne!(draw(0..4, 10)[0].tokens, all[0].tokens);
}
