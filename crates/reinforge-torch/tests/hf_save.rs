//! Checkpoints written by reinforge load in transformers (scripts/check_hf_checkpoint.py,
//! run with the project's .venv) and give the same logits; and they reload here bit-exactly.

use crate::hf_support;

use std::path::{Path, PathBuf};

use hf_support::{batch, fixture, logits, run_python, write_reference};
use reinforge_torch::tch::{Device, Kind, Tensor};
use reinforge_torch::{copy_aux_files, ModelConfig, Policy, SaveOptions};

/// Saves `p` into `<dir>/<label>`, checks the reload here, and writes the batch and our
/// logits to `<dir>/<label>.safetensors`; returns the (checkpoint, reference) pair.
fn save_with_reference(p: &Policy, opts: &SaveOptions, dir: &Path, label: &str) -> [PathBuf; 2] {
    let ckpt = dir.join(label);
    p.save_with(&ckpt, opts).unwrap();
    let (ids, mask, pos) = batch(p.model.config().vocab_size as i64);
    let ours = logits(p, &ids, &mask, &pos);
    let reloaded = Policy::load(&ckpt, Device::Cpu).unwrap();
    let same = (logits(&reloaded, &ids, &mask, &pos) - &ours)
        .abs()
        .max()
        .double_value(&[]);
    assert_eq!(same, 0.0, "{label}: reload changed the logits");
    let reference = dir.join(format!("{label}.safetensors"));
    write_reference(&reference, ids, mask, pos, &ours);
    [ckpt, reference]
}

/// Loads the vision-language fixture `name`, saves it into `<dir>/<label>` (the nested
/// transformers-5 config, the Hub's weight names), checks the reload here, and writes the
/// fixture batch (token ids, mask, pixel values, grids) with our logits beside it.
fn save_vision_language_with_reference(name: &str, dir: &Path) -> [PathBuf; 2] {
    use reinforge_torch::model::images::VisionBatch;
    let src = hf_support::root().join("fixtures/hf/vlm").join(name);
    let p = Policy::load(&src, Device::Cpu).unwrap();
    let e: std::collections::HashMap<String, Tensor> =
        Tensor::read_safetensors(src.join("expected.safetensors"))
            .unwrap()
            .into_iter()
            .collect();
    let (ids, mask) = (&e["input_ids"], &e["attention_mask"]);
    let grid_rows = Vec::<i64>::try_from(e["image_grid_thw"].flatten(0, 1)).unwrap();
    let grids: Vec<[i64; 3]> = grid_rows.chunks(3).map(|g| [g[0], g[1], g[2]]).collect();
    let ours = |p: &Policy| {
        let batch = VisionBatch::new(
            p.model.config(),
            ids,
            mask,
            e["pixel_values"].shallow_clone(),
            &grids,
        )
        .unwrap();
        let input = reinforge_torch::model::transformer::ForwardInput {
            ids,
            positions: &batch.positions,
            key_mask: &mask.to_kind(Kind::Bool),
            segments: &[],
            images: Some(&batch.images),
        };
        reinforge_torch::tch::no_grad(|| p.model.forward(&input, None, false))
    };
    let ckpt = dir.join(name);
    p.save(&ckpt).unwrap();
    let reloaded = Policy::load(&ckpt, Device::Cpu).unwrap();
    let logits = ours(&p);
    let same = (ours(&reloaded) - &logits).abs().max().double_value(&[]);
    assert_eq!(same, 0.0, "{name}: reload changed the logits");
    let reference = dir.join(format!("{name}.safetensors"));
    let named = [
        ("input_ids", ids.shallow_clone()),
        ("attention_mask", mask.shallow_clone()),
        ("pixel_values", e["pixel_values"].shallow_clone()),
        ("image_grid_thw", e["image_grid_thw"].shallow_clone()),
        ("logits", logits.contiguous()),
    ];
    Tensor::write_safetensors(&named, &reference).unwrap();
    [ckpt, reference]
}

#[test]
fn saved_checkpoints_load_in_transformers_with_the_same_logits() {
    let dir = tempfile::tempdir().unwrap();
    let mut pairs = Vec::new();
    let names = ["llama_rope3", "qwen2", "qwen3", "mistral"];
    for name in names {
        let p = Policy::load(&fixture(name), Device::Cpu).unwrap();
        pairs.push(save_with_reference(
            &p,
            &SaveOptions::default(),
            dir.path(),
            name,
        ));
        let cfg: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.path().join(name).join("config.json")).unwrap(),
        )
        .unwrap();
        // Harmless keys of the source survive; dtype is stated in both spellings.
        assert_eq!(cfg["initializer_range"], 0.02, "{name}");
        assert_eq!(cfg["torch_dtype"], "float32");
        assert_eq!(cfg["dtype"], "float32");
    }

    // reinforge's own kind of model: a tied Llama built from the TOML-side config, saved in
    // shards.
    let cfg = ModelConfig {
        tie_word_embeddings: true,
        bos_token_id: Some(1),
        eos_token_id: Some(2),
        pad_token_id: Some(0),
        ..ModelConfig::default()
    };
    let p = Policy::new(&cfg, Device::Cpu, 3).unwrap();
    // Unit-scale weights so the comparison is not between near-zero logits.
    // Holding the generator: an unheld draw could land inside another test's seeded section.
    reinforge_torch::runtime::with_generator(|| {
        reinforge_torch::tch::no_grad(|| {
            for (_, mut v) in p.vs.variables() {
                let _ = v.normal_(0.0, 0.2);
            }
        })
    });
    let sharded = SaveOptions {
        kind: None,
        max_shard_bytes: 60_000,
    };
    pairs.push(save_with_reference(
        &p,
        &sharded,
        dir.path(),
        "fresh_sharded",
    ));
    let ckpt = dir.path().join("fresh_sharded");
    assert!(ckpt.join("model.safetensors.index.json").is_file());
    let shards = std::fs::read_dir(&ckpt)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .contains("-of-")
        })
        .count();
    assert!(shards > 2, "{shards} shards");
    assert!(!ckpt.join("model.safetensors").exists());

    // Vision-language checkpoints, with images (one interpreter for all the checks).
    let vision = ["qwen2_vl", "qwen2_5_vl"];
    for name in vision {
        pairs.push(save_vision_language_with_reference(name, dir.path()));
    }

    let args: Vec<PathBuf> = pairs.iter().flatten().cloned().collect();
    let diffs = run_python("check_hf_checkpoint.py", &args);
    assert_eq!(diffs.len(), pairs.len());
    let labels = names.iter().chain(&["fresh_sharded"]).chain(&vision);
    for (label, d) in labels.zip(&diffs) {
        println!("{label}: max |reinforge - transformers| after save = {d:.3e}");
        assert!(*d <= 1e-5, "{label}: {d}");
    }

    // Saving again unsharded removes the shards and the index.
    p.save(&ckpt).unwrap();
    let files: Vec<String> = std::fs::read_dir(&ckpt)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        files
            .iter()
            .all(|n| !n.contains("-of-") && !n.ends_with("index.json")),
        "{files:?}"
    );
    assert!(ckpt.join("model.safetensors").is_file());
}

#[test]
fn bf16_save_writes_bf16_weights_and_dtype() {
    let p = Policy::load(&fixture("qwen3"), Device::Cpu).unwrap();
    let dir = tempfile::tempdir().unwrap();
    p.save_with(
        dir.path(),
        &SaveOptions {
            kind: Some(Kind::BFloat16),
            ..SaveOptions::default()
        },
    )
    .unwrap();
    let weights = Tensor::read_safetensors(dir.path().join("model.safetensors")).unwrap();
    assert!(weights.iter().all(|(_, t)| t.kind() == Kind::BFloat16));
    let cfg = std::fs::read_to_string(dir.path().join("config.json")).unwrap();
    assert!(cfg.contains("\"torch_dtype\": \"bfloat16\""), "{cfg}");
    let q = Policy::load(dir.path(), Device::Cpu).unwrap();
    assert_eq!(q.kind(), Kind::Float, "Policy::load computes in f32");
}

#[test]
fn aux_files_are_copied() {
    let dir = tempfile::tempdir().unwrap();
    let copied = copy_aux_files(&fixture("qwen2"), dir.path()).unwrap();
    let names: Vec<String> = copied
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for want in [
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
    ] {
        assert!(names.iter().any(|n| n == want), "{names:?}");
        assert_eq!(
            std::fs::read(dir.path().join(want)).unwrap(),
            std::fs::read(fixture("qwen2").join(want)).unwrap()
        );
    }
    assert!(!dir.path().join("model.safetensors").exists());
}
