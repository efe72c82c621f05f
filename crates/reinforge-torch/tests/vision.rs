//! The Qwen2-VL and Qwen2.5-VL vision towers against transformers 5.23's own intermediate
//! tensors on the fixtures of `scripts/make_vlm_fixtures.py` (fixtures/hf/vlm/): the patch
//! embeddings, the blocks' output and the merged image embeddings, from the fixture's pixel
//! values and grid layout; the two `config.json` layouts read to one tower config; and the
//! whole model's logits (M-RoPE positions and image features spliced at the placeholders).

use std::collections::HashMap;
use std::path::PathBuf;

use reinforge_hf::vision::ImageProcessor;
use reinforge_torch::model::checkpoint::config_json::parse;
use reinforge_torch::model::config::{Family, ModelConfig};
use reinforge_torch::model::images::{Image, ImageInput, VisionBatch};
use reinforge_torch::model::logprobs::{token_logprobs, token_logprobs_in_microbatches, Entropy};
use reinforge_torch::model::transformer::ForwardInput;
use reinforge_torch::model::vision::config::{VisionConfig, VisionVariant};
use reinforge_torch::model::vision::tower::{VisionLayout, VisionTower};
use reinforge_torch::tch::{nn::VarStore, Device, Kind, Tensor};
use reinforge_torch::{
    generate_with_images, AdamW, AdamWConfig, GenerateHooks, Memory, Policy, SamplingParams,
    SequenceBatch,
};

use crate::hf_support::root;

fn fixture(name: &str) -> PathBuf {
    root().join("fixtures/hf/vlm").join(name)
}

fn expected(name: &str) -> HashMap<String, Tensor> {
    Tensor::read_safetensors(fixture(name).join("expected.safetensors"))
        .unwrap()
        .into_iter()
        .collect()
}

/// The fixture's `expected.json` (transformers' ids, log-probs and tokens).
fn expected_json(name: &str) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(fixture(name).join("expected.json")).unwrap())
        .unwrap()
}

fn vision_config(name: &str) -> VisionConfig {
    let text = std::fs::read_to_string(fixture(name).join("config.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let variant = match json["model_type"].as_str().unwrap() {
        "qwen2_vl" => VisionVariant::Qwen2Vl,
        _ => VisionVariant::Qwen25Vl,
    };
    VisionConfig::from_hf(variant, &json["vision_config"]).unwrap()
}

fn ints(t: &Tensor) -> Vec<i64> {
    Vec::<i64>::try_from(t.to_kind(Kind::Int64).flatten(0, -1)).unwrap()
}

/// The fixture's layout tensors, as transformers computed them from the grids.
fn layout(e: &HashMap<String, Tensor>) -> VisionLayout {
    VisionLayout {
        positions: e["vision_position_ids"].shallow_clone(),
        cu_seqlens: ints(&e["cu_seqlens"]),
        windows: e
            .get("window_index")
            .map(|w| (w.shallow_clone(), ints(&e["cu_window_seqlens"]))),
    }
}

fn max_abs(a: &Tensor, b: &Tensor) -> f64 {
    (a - b).abs().max().double_value(&[])
}

#[test]
fn vision_towers_match_transformers() {
    for name in ["qwen2_vl", "qwen2_vl_flat", "qwen2_5_vl"] {
        let cfg = vision_config(name);
        let vs = VarStore::new(Device::Cpu);
        let tower = VisionTower::new(&(vs.root() / "visual"), &cfg);
        let dir = fixture(name);
        reinforge_torch::model::checkpoint::weights::load_into_subset(&dir, &vs.variables())
            .unwrap();
        let e = expected(name);
        let out = reinforge_torch::tch::no_grad(|| tower.forward(&e["pixel_values"], &layout(&e)));
        for (what, ours, theirs) in [
            ("patch_embeds", &out.patch_embeds, &e["patch_embeds"]),
            ("vision_hidden", &out.hidden, &e["vision_hidden"]),
            ("image_embeds", &out.image_embeds, &e["image_embeds"]),
        ] {
            assert_eq!(ours.size(), theirs.size(), "{name}: {what} shape");
            let d = max_abs(ours, theirs);
            eprintln!("{name}: {what} max |diff| {d:.2e}");
            assert!(d < 1e-4, "{name}: {what} differs by {d}");
        }
    }
}

#[test]
fn both_config_layouts_give_one_tower() {
    assert_eq!(vision_config("qwen2_vl"), vision_config("qwen2_vl_flat"));
    let c = vision_config("qwen2_5_vl");
    assert_eq!((c.width, c.mlp_width, c.out_size), (32, 64, 64));
    assert_eq!(
        (c.window_size, c.fullatt_block_indexes.clone()),
        (Some(56), vec![1])
    );
    let bad = serde_json::json!({"depth": 2, "embed_dim": 32, "num_heads": 2, "video_fps": 2});
    let err = VisionConfig::from_hf(VisionVariant::Qwen2Vl, &bad).unwrap_err();
    assert!(err.to_string().contains("vision_config.video_fps"), "{err}");
}

/// Image `i`'s batch row: rows take the images in order, as many as their placeholders hold
/// (what the processor's expansion of each `<|image_pad|>` implies).
fn image_rows(ids: &Tensor, image_token: i64, cu: &[i64], unit: i64) -> Vec<usize> {
    let counts = ints(&ids.eq(image_token).sum_dim_intlist(1, false, Kind::Int64));
    let mut rows = Vec::new();
    let mut image = 0;
    for (row, &count) in counts.iter().enumerate() {
        let mut left = count;
        while left > 0 {
            left -= (cu[image + 1] - cu[image]) / unit;
            rows.push(row);
            image += 1;
        }
    }
    rows
}

/// The fixture batch's images as the model's input.
fn image_input(policy: &Policy, e: &HashMap<String, Tensor>) -> anyhow::Result<ImageInput> {
    let cfg = policy.model.config();
    let l = layout(e);
    let unit = 4;
    let rows = image_rows(
        &e["input_ids"],
        cfg.image_token_id.unwrap(),
        &l.cu_seqlens,
        unit,
    );
    ImageInput::new(
        cfg,
        &e["input_ids"],
        e["pixel_values"].shallow_clone(),
        l,
        &rows,
    )
}

/// Max |diff| of the logits at the real (unpadded) tokens.
fn logits_diff(ours: &Tensor, theirs: &Tensor, mask: &Tensor) -> f64 {
    let real = mask.to_kind(Kind::Bool).unsqueeze(-1);
    (ours - theirs)
        .abs()
        .masked_fill(&real.logical_not(), 0.0)
        .max()
        .double_value(&[])
}

#[test]
fn vision_language_logits_match_transformers() {
    for name in ["qwen2_vl", "qwen2_vl_flat", "qwen2_5_vl"] {
        let policy = Policy::load(&fixture(name), Device::Cpu).unwrap();
        let e = expected(name);
        let images = image_input(&policy, &e).unwrap();
        let input = ForwardInput {
            ids: &e["input_ids"],
            positions: &e["position_ids"],
            key_mask: &e["attention_mask"],
            segments: &[],
            images: Some(&images),
        };
        let logits = reinforge_torch::tch::no_grad(|| policy.model.forward(&input, None, false));
        assert_eq!(logits.size(), e["logits"].size(), "{name}: logits shape");
        let d = logits_diff(&logits, &e["logits"], &e["attention_mask"]);
        eprintln!("{name}: logits max |diff| {d:.2e}");
        assert!(d < 1e-4, "{name}: logits differ by {d}");
    }
}

#[test]
fn vision_language_configs_read_both_layouts_and_save_nested() {
    let nested = ModelConfig::load(&fixture("qwen2_vl").join("config.json")).unwrap();
    let flat = ModelConfig::load(&fixture("qwen2_vl_flat").join("config.json")).unwrap();
    assert_eq!(nested.family().unwrap(), Family::Qwen2Vl);
    assert_eq!(nested.mrope_section, Some(vec![2, 3, 3]));
    assert_eq!(
        (nested.image_token_id, nested.rope_theta),
        (Some(506), 100.0)
    );
    let math = |c: &ModelConfig| ModelConfig {
        extra: Default::default(),
        max_window_layers: None,
        sliding_window: None,
        pad_token_id: None,
        layer_types: None,
        ..c.clone()
    };
    assert_eq!(math(&nested), math(&flat));
    let dir = tempfile::tempdir().unwrap();
    for cfg in [
        nested,
        ModelConfig::load(&fixture("qwen2_5_vl").join("config.json")).unwrap(),
    ] {
        let path = dir.path().join("config.json");
        cfg.save(&path, "float32").unwrap();
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let text = &json["text_config"];
        assert_eq!(
            text["rope_parameters"]["mrope_section"],
            serde_json::json!([2, 3, 3])
        );
        assert!(
            json.get("hidden_size").is_none(),
            "text keys belong in text_config"
        );
        // Saving states head_dim explicitly (for every family).
        let stated = ModelConfig {
            head_dim: Some(cfg.head_dim()),
            ..cfg.clone()
        };
        assert_eq!(ModelConfig::load(&path).unwrap(), stated, "round trip");
    }
}

#[test]
fn vision_language_refusals_name_the_field_or_row() {
    let text = std::fs::read_to_string(fixture("qwen2_vl").join("config.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let refused = |edit: &dyn Fn(&mut serde_json::Value), needle: &str| {
        let mut j = json.clone();
        edit(&mut j);
        let err = parse(&j, false).unwrap_err();
        assert!(format!("{err:#}").contains(needle), "{needle}: {err:#}");
    };
    refused(
        &|j| j["text_config"]["use_sliding_window"] = true.into(),
        "use_sliding_window",
    );
    refused(
        &|j| j["text_config"]["rope_parameters"]["mrope_section"] = serde_json::json!([2, 3, 4]),
        "mrope_section",
    );
    refused(&|j| j["image_token_id"] = 9999.into(), "image_token_id");
    refused(
        &|j| {
            j.as_object_mut().unwrap().remove("vision_config");
        },
        "vision_config",
    );

    let policy = Policy::load(&fixture("qwen2_vl"), Device::Cpu).unwrap();
    let e = expected("qwen2_vl");
    // One placeholder of row 1 turned into text: its image gives one feature more.
    let ids = e["input_ids"].copy();
    let first = ints(&ids.get(1).eq(506).nonzero().get(0))[0];
    let _ = ids.get(1).get(first).fill_(42);
    let l = layout(&e);
    let rows = [0, 0, 1];
    let err = ImageInput::new(
        policy.model.config(),
        &ids,
        e["pixel_values"].shallow_clone(),
        l,
        &rows,
    )
    .expect_err("a count mismatch is refused");
    assert!(err.to_string().contains("row 1"), "{err}");
    let text_only = Policy::new(&ModelConfig::default(), Device::Cpu, 0).unwrap();
    let err = ImageInput::new(
        text_only.model.config(),
        &e["input_ids"],
        e["pixel_values"].shallow_clone(),
        layout(&e),
        &rows,
    )
    .expect_err("images for a text model are refused");
    assert!(err.to_string().contains("no vision tower"), "{err}");
}

/// The fixture batch's images, processed from the PNGs by reinforge-hf's processor.
fn processed_images(name: &str) -> Vec<Image> {
    let dir = fixture(name);
    let processor = ImageProcessor::from_dir(&dir).unwrap();
    ["a_56x84", "b_56x56", "c_84x56"]
        .iter()
        .map(|f| {
            let p = processor
                .process_file(dir.join("images").join(format!("{f}.png")))
                .unwrap();
            let dim = processor.patch_dim() as i64;
            Image {
                pixels: Tensor::from_slice(&p.pixel_values).view([-1, dim]),
                grid: p.grid_thw,
            }
        })
        .collect()
}

/// From image files to logits and completion log-probs, with nothing from the fixture but
/// the token ids: the processor, the layout and M-RoPE positions, the tower and the language
/// model composed as `reinforge score` composes them.
#[test]
fn vision_language_pipeline_from_image_files() {
    for name in ["qwen2_vl", "qwen2_5_vl"] {
        let policy = Policy::load(&fixture(name), Device::Cpu).unwrap();
        let cfg = policy.model.config();
        let e = expected(name);
        let images = processed_images(name);
        let rows = vec![
            vec![images[0].clone(), images[1].clone()],
            vec![images[2].clone()],
            vec![],
        ];
        let pixels: Vec<&Tensor> = images.iter().map(|i| &i.pixels).collect();
        let grids: Vec<[i64; 3]> = images.iter().map(|i| i.grid).collect();
        let batch = VisionBatch::new(
            cfg,
            &e["input_ids"],
            &e["attention_mask"],
            Tensor::cat(&pixels, 0),
            &grids,
        )
        .unwrap();
        assert_eq!(ints(&batch.positions), ints(&e["position_ids"]), "{name}");
        assert_eq!(batch.rope_deltas, ints(&e["rope_deltas"]), "{name}");
        let of_rows =
            VisionBatch::of_rows(cfg, &e["input_ids"], &e["attention_mask"], &rows).unwrap();
        assert_eq!(ints(&of_rows.positions), ints(&e["position_ids"]), "{name}");
        let input = ForwardInput {
            ids: &e["input_ids"],
            positions: &batch.positions,
            key_mask: &e["attention_mask"],
            segments: &[],
            images: Some(&batch.images),
        };
        let logits = reinforge_torch::tch::no_grad(|| policy.model.forward(&input, None, false));
        let d = logits_diff(&logits, &e["logits"], &e["attention_mask"]);
        eprintln!("{name}: logits from image files max |diff| {d:.2e}");
        assert!(d < 1e-4, "{name}: logits differ by {d}");

        // Completion log-probs: right-padded prompt ++ completion rows 0 and 1, through the
        // trainer's batch and log-prob functions.
        let json: serde_json::Value = expected_json(name);
        let as_rows =
            |key: &str| -> Vec<Vec<i64>> { serde_json::from_value(json[key].clone()).unwrap() };
        let (prompts, completions) = (as_rows("completion_prompt_ids"), as_rows("completions"));
        let want: Vec<Vec<f32>> =
            serde_json::from_value(json["completion_logprobs"].clone()).unwrap();
        let p: Vec<&[i64]> = prompts.iter().map(Vec::as_slice).collect();
        let c: Vec<&[i64]> = completions.iter().map(Vec::as_slice).collect();
        let seq = SequenceBatch::new(&p, &c, 500, Device::Cpu)
            .with_images(cfg, rows[..2].to_vec())
            .unwrap();
        assert_eq!(ints(&seq.ids), ints(&e["lp_input_ids"]), "{name}: lp rows");
        let (logp, _) = reinforge_torch::tch::no_grad(|| token_logprobs(&policy.model, &seq, 1.0));
        let mut worst = 0f64;
        for (i, (prompt, want)) in prompts.iter().zip(&want).enumerate() {
            let got = logp
                .get(i as i64)
                .narrow(0, prompt.len() as i64 - 1, want.len() as i64);
            let got = Vec::<f32>::try_from(&got).unwrap();
            for (g, w) in got.iter().zip(want) {
                worst = worst.max((g - w).abs() as f64);
            }
        }
        eprintln!("{name}: completion log-probs max |diff| {worst:.2e}");
        assert!(
            worst < 1e-4,
            "{name}: completion log-probs differ by {worst}"
        );
        // Packed rows (padding-free, and each group's prompt once) give the padded rows'
        // log-probs: rows 0, 1 and row 1 again over the same image tensors (a group).
        let grouped = |_: ()| {
            let p3 = [p[0], p[1], p[1]];
            let c3 = [c[0], c[1], &c[1][..3]];
            let im = vec![rows[0].clone(), rows[1].clone(), rows[1].clone()];
            SequenceBatch::new(&p3, &c3, 500, Device::Cpu)
                .with_images(cfg, im)
                .unwrap()
        };
        let g = grouped(());
        let at = |memory: &Memory| {
            reinforge_torch::tch::no_grad(|| {
                token_logprobs_in_microbatches(&policy.model, &g, (1.0, Entropy::Skip), memory).0
            })
        };
        let padded = at(&Memory::default());
        for memory in [
            Memory {
                padding_free: true,
                ..Memory::default()
            },
            Memory {
                shared_prompts: true,
                ..Memory::default()
            },
        ] {
            assert!(
                g.packed_for(&memory).is_some(),
                "{name}: rows with images pack"
            );
            let d = max_abs(&at(&memory), &padded);
            eprintln!("{name}: packed {memory:?} vs padded log-probs max |diff| {d:.2e}");
            assert!(d < 1e-5, "{name}: packed log-probs differ by {d}");
        }
        // A selection of rows keeps its own images (mini-batches): row 1 alone.
        let one = seq.select(&[1]);
        let (lp1, _) = reinforge_torch::tch::no_grad(|| token_logprobs(&policy.model, &one, 1.0));
        let n = want[1].len() as i64;
        let start = prompts[1].len() as i64 - 1;
        let d = max_abs(
            &lp1.get(0).narrow(0, start, n),
            &logp.get(1).narrow(0, start, n),
        );
        assert!(d < 1e-5, "{name}: row 1 alone differs by {d}");
    }
}

/// Greedy decoding with images (KV cache, positions continued by `rope_deltas`) against
/// transformers' `generate`: one row alone, and the left-padded batch of three.
#[test]
fn vision_language_greedy_generation_matches_transformers() {
    for name in ["qwen2_vl", "qwen2_5_vl"] {
        let policy = Policy::load(&fixture(name), Device::Cpu).unwrap();
        let json: serde_json::Value = expected_json(name);
        let g = &json["generate"];
        let params = SamplingParams {
            temperature: 0.0,
            max_new_tokens: 8,
            ..SamplingParams::default()
        };
        let images = processed_images(name);
        let e = expected(name);
        let unpadded = |row: i64| -> Vec<i64> {
            let ids = ints(&e["input_ids"].get(row));
            let mask = ints(&e["attention_mask"].get(row));
            ids.into_iter()
                .zip(mask)
                .filter(|(_, m)| *m == 1)
                .map(|(i, _)| i)
                .collect()
        };
        let prompts: Vec<Vec<i64>> = (0..3).map(unpadded).collect();
        let row_images = vec![
            vec![images[0].clone(), images[1].clone()],
            vec![images[2].clone()],
            vec![],
        ];
        let single: Vec<i64> = serde_json::from_value(g["single"]["input_ids"].clone()).unwrap();
        assert_eq!(single, prompts[1], "{name}: the single case is row 1");
        let run = |p: &[Vec<i64>], im: &[Vec<Image>]| -> Vec<Vec<i64>> {
            generate_with_images(
                &policy.model,
                p,
                im,
                &params,
                (500, Device::Cpu),
                &mut GenerateHooks::default(),
            )
            .unwrap()
            .into_iter()
            .map(|c| c.tokens)
            .collect()
        };
        let want: Vec<i64> = serde_json::from_value(g["single"]["new_tokens"].clone()).unwrap();
        assert_eq!(
            run(&prompts[1..2], &row_images[1..2]),
            vec![want],
            "{name}: single"
        );
        let want: Vec<Vec<i64>> = serde_json::from_value(g["batch_left_padded"].clone()).unwrap();
        assert_eq!(run(&prompts, &row_images), want, "{name}: batch");
        // A group: the same prompt and image twice prefills once and decodes alike.
        let twice = run(
            &[prompts[1].clone(), prompts[1].clone()],
            &[row_images[1].clone(), row_images[1].clone()],
        );
        assert_eq!(twice[0], twice[1], "{name}: group");
        assert_eq!(twice[0], want[1], "{name}: group");
        // Too few images for the placeholders is an error naming the row, not a shift.
        let err = generate_with_images(
            &policy.model,
            &prompts[..1],
            &[vec![images[0].clone()]],
            &params,
            (500, Device::Cpu),
            &mut GenerateHooks::default(),
        )
        .expect_err("a missing image is refused");
        assert!(format!("{err:#}").contains("row 0"), "{err:#}");
    }
}

/// One AdamW step on the completion log-probs of the fixture rows with images; returns the
/// parameters before and after, by name.
fn one_update(policy: &Policy) -> Vec<(String, Tensor, Tensor)> {
    let json: serde_json::Value = expected_json("qwen2_vl");
    let rows = |key: &str| -> Vec<Vec<i64>> { serde_json::from_value(json[key].clone()).unwrap() };
    let (prompts, completions) = (rows("completion_prompt_ids"), rows("completions"));
    let images = processed_images("qwen2_vl");
    let p: Vec<&[i64]> = prompts.iter().map(Vec::as_slice).collect();
    let c: Vec<&[i64]> = completions.iter().map(Vec::as_slice).collect();
    let seq = SequenceBatch::new(&p, &c, 500, Device::Cpu)
        .with_images(
            policy.model.config(),
            vec![
                vec![images[0].clone(), images[1].clone()],
                vec![images[2].clone()],
            ],
        )
        .unwrap();
    let before: Vec<(String, Tensor)> = policy
        .vs
        .variables()
        .into_iter()
        .map(|(n, t)| (n, t.detach().copy()))
        .collect();
    let mut opt = AdamW::new(&policy.vs, AdamWConfig::default());
    let (logp, _) = token_logprobs(&policy.model, &seq, 1.0);
    (logp * &seq.loss_mask).sum(Kind::Float).neg().backward();
    opt.step(1e-2);
    let now = policy.vs.variables();
    before
        .into_iter()
        .map(|(n, b)| {
            let a = now[&n].detach().copy();
            (n, b, a)
        })
        .collect()
}

#[test]
fn a_loaded_vision_tower_is_frozen_unless_asked_to_train() {
    let changed = |params: &[(String, Tensor, Tensor)], prefix: &str| {
        params
            .iter()
            .filter(|(n, _, _)| n.starts_with(prefix))
            .filter(|(_, b, a)| !b.equal(a))
            .count()
    };
    let policy = Policy::load(&fixture("qwen2_vl"), Device::Cpu).unwrap();
    let frozen = one_update(&policy);
    assert_eq!(changed(&frozen, "visual."), 0, "the frozen tower moved");
    assert!(
        changed(&frozen, "model.layers.") > 0,
        "the language model trained"
    );
    let policy = Policy::load(&fixture("qwen2_vl"), Device::Cpu).unwrap();
    policy.set_vision_trainable(true);
    let trained = one_update(&policy);
    assert!(
        changed(&trained, "visual.") > 0,
        "the tower asked to train did not"
    );
}

/// SFT on rows with images: the step's loss (the token-mean NLL of the completion tokens, the
/// function `train-sft` calls) is transformers' completion log-probs' negative mean, on the
/// padded batch and in micro-batches of packed rows alike; the frozen tower gets no gradient.
#[test]
fn sft_loss_on_rows_with_images_matches_transformers() {
    for name in ["qwen2_vl", "qwen2_5_vl"] {
        let json: serde_json::Value = expected_json(name);
        let rows =
            |key: &str| -> Vec<Vec<i64>> { serde_json::from_value(json[key].clone()).unwrap() };
        let (prompts, completions) = (rows("completion_prompt_ids"), rows("completions"));
        let want: Vec<Vec<f64>> =
            serde_json::from_value(json["completion_logprobs"].clone()).unwrap();
        let all: Vec<f64> = want.concat();
        let oracle = -all.iter().sum::<f64>() / all.len() as f64;
        let ids: Vec<Vec<i64>> = prompts
            .iter()
            .zip(&completions)
            .map(|(p, c)| [&p[..], &c[..]].concat())
            .collect();
        let labels: Vec<Vec<bool>> = prompts
            .iter()
            .zip(&completions)
            .map(|(p, c)| [vec![false; p.len()], vec![true; c.len()]].concat())
            .collect();
        let sft_rows: Vec<(&[i64], &[bool])> = ids
            .iter()
            .zip(&labels)
            .map(|(i, l)| (&i[..], &l[..]))
            .collect();
        let images = processed_images(name);
        let row_images = vec![
            vec![images[0].clone(), images[1].clone()],
            vec![images[2].clone()],
        ];
        let packed = Memory {
            max_tokens_per_microbatch: 1,
            padding_free: true,
            gradient_checkpointing: true,
            ..Memory::default()
        };
        for memory in [Memory::default(), packed] {
            let policy = Policy::load(&fixture(name), Device::Cpu).unwrap();
            let batch = reinforge_torch::train::sft::sft_batch(&sft_rows, 500, Device::Cpu)
                .with_images(policy.model.config(), row_images.clone())
                .unwrap();
            let mut opt = AdamW::new(&policy.vs, AdamWConfig::default());
            let stats = reinforge_torch::train::sft::sft_step(
                &policy,
                &mut opt,
                &batch,
                (0.0, 1.0),
                &memory,
                None,
            )
            .unwrap();
            assert_eq!(stats.tokens as usize, all.len(), "{name}");
            let diff = (stats.loss - oracle).abs();
            eprintln!(
                "{name}: SFT loss with images |diff| {diff:.2e} (padding_free {})",
                memory.padding_free
            );
            assert!(
                diff < 1e-5,
                "{name} ({memory:?}): SFT loss {} vs transformers {oracle} ({diff:e})",
                stats.loss
            );
            assert!(stats.grad_norm > 0.0, "{name}: no gradient");
            let tower_grads = policy
                .vs
                .variables()
                .into_iter()
                .filter(|(n, t)| n.starts_with("visual.") && t.grad().defined())
                .count();
            assert_eq!(tower_grads, 0, "{name}: the frozen tower got gradients");
        }
    }
}

/// The RL step's log-prob pass on rollouts with images (`pack`, the function the trainer
/// calls, with `recompute_old_logprobs`): the trainer's log-prob of every completion token is
/// transformers', for groups of two rollouts sharing a prompt and its images, in the padded
/// batch and in packed micro-batches. The same rollouts without their images do not match.
#[test]
fn rl_pack_of_rollouts_with_images_matches_transformers() {
    use reinforge_torch::train::loss::tis::Tis;
    use reinforge_torch::train::rl::{pack, PackModels, PackOptions, RolloutRef};
    for name in ["qwen2_vl", "qwen2_5_vl"] {
        let json: serde_json::Value = expected_json(name);
        let rows =
            |key: &str| -> Vec<Vec<i64>> { serde_json::from_value(json[key].clone()).unwrap() };
        let (prompts, completions) = (rows("completion_prompt_ids"), rows("completions"));
        let want: Vec<Vec<f32>> =
            serde_json::from_value(json["completion_logprobs"].clone()).unwrap();
        let images = processed_images(name);
        let row_images = [
            vec![images[0].clone(), images[1].clone()],
            vec![images[2].clone()],
        ];
        let policy = Policy::load(&fixture(name), Device::Cpu).unwrap();
        let models = PackModels {
            policy: &policy,
            reference: None,
            critic: None,
        };
        let rollouts = |with_images: bool| -> Vec<RolloutRef> {
            [0, 0, 1, 1]
                .iter()
                .map(|&i| RolloutRef {
                    prompt: &prompts[i],
                    completion: &completions[i],
                    logprobs: &want[i],
                    truncated: false,
                    trained: None,
                    images: if with_images { &row_images[i] } else { &[] },
                })
                .collect()
        };
        let packed = Memory {
            max_tokens_per_microbatch: 1,
            padding_free: true,
            ..Memory::default()
        };
        for memory in [Memory::default(), packed] {
            let opts = PackOptions {
                pad_id: 500,
                temperature: 1.0,
                recompute_old_logprobs: true,
                tis: Tis::None,
                tis_cap: 2.0,
                mask_truncated: false,
                measure_gap: true,
                reference_kl: None,
                memory,
            };
            let gap = pack(models, &rollouts(true), &opts).unwrap().gap.unwrap();
            eprintln!(
                "{name}: RL pack with images vs transformers: max |diff| {:.2e} (padding_free {})",
                gap.max_abs, memory.padding_free
            );
            assert!(gap.max_abs < 1e-5, "{name} ({memory:?}): {gap:?}");
            let bare = pack(models, &rollouts(false), &opts).unwrap().gap.unwrap();
            assert!(
                bare.max_abs > 1e-2,
                "{name}: images left out still match: {bare:?}"
            );
        }
    }
}

/// Sampling with images never draws the image placeholder (a completion cannot hold an image,
/// and a sequence with more placeholders than images cannot be trained on or rescored), while
/// the log-prob of each drawn token stays the full distribution's. At temperature 5 on the
/// 512-token fixture the placeholder would be drawn about twice in 1024 draws.
#[test]
fn sampling_with_images_never_draws_the_placeholder() {
    let name = "qwen2_vl";
    let policy = Policy::load(&fixture(name), Device::Cpu).unwrap();
    let json: serde_json::Value = expected_json(name);
    let prompts: Vec<Vec<i64>> =
        serde_json::from_value(json["completion_prompt_ids"].clone()).unwrap();
    let images = processed_images(name);
    let params = SamplingParams {
        temperature: 5.0,
        max_new_tokens: 16,
        ..SamplingParams::default()
    };
    let placeholder = policy.model.config().image_token_id.unwrap();
    reinforge_torch::tch::manual_seed(7);
    let completions = generate_with_images(
        &policy.model,
        &vec![prompts[1].clone(); 64],
        &vec![vec![images[2].clone()]; 64],
        &params,
        (500, Device::Cpu),
        &mut GenerateHooks::default(),
    )
    .unwrap();
    let drawn: Vec<i64> = completions.iter().flat_map(|c| c.tokens.clone()).collect();
    let distinct: std::collections::BTreeSet<i64> = drawn.iter().copied().collect();
    assert!(
        distinct.len() > 200,
        "the draw is not spread: {}",
        distinct.len()
    );
    assert!(!drawn.contains(&placeholder), "the placeholder was sampled");
}
