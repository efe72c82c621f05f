//! The Qwen2-VL and Qwen2.5-VL vision towers against transformers 5.23's own intermediate
//! tensors on the fixtures of `scripts/make_vlm_fixtures.py` (fixtures/hf/vlm/): the patch
//! embeddings, the blocks' output and the merged image embeddings, from the fixture's pixel
//! values and grid layout; and the two `config.json` layouts read to one tower config.

use std::collections::HashMap;
use std::path::PathBuf;

use reinforge_torch::model::vision::config::{VisionConfig, VisionVariant};
use reinforge_torch::model::vision::tower::{VisionLayout, VisionTower};
use reinforge_torch::tch::{nn::VarStore, Device, Kind, Tensor};

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
    Vec::<i64>::try_from(t.to_kind(Kind::Int64)).unwrap()
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
