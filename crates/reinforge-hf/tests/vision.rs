//! Parity of the vision side with transformers 5.23 on fixtures/hf/vlm (scripts/make_vlm_fixtures.py): the
//! image processor against `Qwen2VLImageProcessorPil` (14 images, 4 of them resized with PIL bicubic), the
//! processor and every layout tensor of the three model dirs' batches, and the refusals.

use std::path::{Path, PathBuf};

use reinforge_hf::{
    cu_seqlens, rope_index, vision_position_ids, window_index, HfError, ImageProcessor,
    ImageProcessorConfig, TokenRow,
};
use safetensors::{Dtype, SafeTensors};
use serde_json::Value as Json;

fn vlm() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/hf/vlm")
}

/// A safetensors file's tensors, read as f32 or i64 (int32 widened).
struct Golden(Vec<u8>);

impl Golden {
    fn open(path: &Path) -> Self {
        Golden(std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
    }
    fn view(&self, name: &str) -> (Vec<usize>, Dtype, Vec<u8>) {
        let st = SafeTensors::deserialize(&self.0).unwrap();
        let t = st.tensor(name).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        (t.shape().to_vec(), t.dtype(), t.data().to_vec())
    }
    fn f32(&self, name: &str) -> (Vec<usize>, Vec<f32>) {
        let (shape, dtype, data) = self.view(name);
        assert_eq!(dtype, Dtype::F32, "{name}");
        let v = data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        (shape, v)
    }
    fn i64(&self, name: &str) -> (Vec<usize>, Vec<i64>) {
        let (shape, dtype, data) = self.view(name);
        let v = match dtype {
            Dtype::I64 => data
                .chunks_exact(8)
                .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
                .collect(),
            Dtype::I32 => data
                .chunks_exact(4)
                .map(|b| i64::from(i32::from_le_bytes(b.try_into().unwrap())))
                .collect(),
            d => panic!("{name}: dtype {d:?}"),
        };
        (shape, v)
    }
    fn grids(&self, name: &str) -> Vec<[i64; 3]> {
        let (shape, v) = self.i64(name);
        assert_eq!(shape[1], 3, "{name}");
        v.chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect()
    }
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Largest difference allowed from transformers' pixel values, resized or not: float rounding only.
/// (One uint8 step of the resize would be 1/255/std ≈ 0.0146.)
const PIXEL_TOL: f32 = 1e-6;

#[test]
fn processor_matches_transformers_on_every_fixture_image() {
    let dir = vlm().join("processor");
    let exp: Json =
        serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
    let golden = Golden::open(&dir.join("expected.safetensors"));
    let proc = ImageProcessor::from_dir(&dir).unwrap();
    assert_eq!(proc.config.min_pixels, exp["min_pixels"].as_u64().unwrap());
    assert_eq!(proc.config.max_pixels, exp["max_pixels"].as_u64().unwrap());
    let images = exp["images"].as_array().unwrap();
    assert_eq!(images.len(), 14);
    let (mut resized, mut kept) = (0, 0);
    // Every image is measured before failing, so a failure reports all the images it touches.
    let mut over = Vec::new();
    for im in images {
        let name = im["name"].as_str().unwrap();
        let out = proc
            .process_file(dir.join(im["file"].as_str().unwrap()))
            .unwrap();
        let (shape, want) = golden.f32(&format!("{name}.pixel_values"));
        let grid = golden.grids(&format!("{name}.image_grid_thw"));
        assert_eq!(vec![out.grid_thw], grid, "{name} grid");
        assert_eq!(out.pixel_values.len(), shape[0] * shape[1], "{name} size");
        let (rh, rw) = (
            im["resized_height"].as_u64().unwrap(),
            im["resized_width"].as_u64().unwrap(),
        );
        assert_eq!(
            (out.grid_thw[1] as u64 * 14, out.grid_thw[2] as u64 * 14),
            (rh, rw),
            "{name} resize"
        );
        let d = max_abs_diff(&out.pixel_values, &want);
        let needs_resize = im["needs_resize"].as_bool().unwrap();
        println!(
            "{name} ({}): max |diff| = {d:e}",
            if needs_resize { "resized" } else { "no resize" }
        );
        if d > PIXEL_TOL {
            over.push(format!("{name}: max |diff| {d} > {PIXEL_TOL}"));
        }
        if needs_resize {
            resized += 1;
        } else {
            kept += 1;
        }
    }
    assert!(over.is_empty(), "{over:#?}");
    assert_eq!((kept, resized), (10, 4));
}

/// One model dir's batch: `(processor, layout)` checks against its expected.safetensors.
fn check_model_dir(name: &str) {
    let dir = vlm().join(name);
    let exp: Json =
        serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
    let config: Json =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    let golden = Golden::open(&dir.join("expected.safetensors"));
    let vision = &config["vision_config"];
    // Both layouts keep image_token_id at the top level and spatial_merge_size / patch_size in
    // vision_config (the flat one also has spatial_patch_size).
    let image_token_id = config["image_token_id"].as_i64().unwrap();
    let merge = vision["spatial_merge_size"].as_i64().unwrap();
    let patch = vision["patch_size"]
        .as_i64()
        .or_else(|| vision["spatial_patch_size"].as_i64())
        .unwrap();

    // The processor on the batch's images, in the order expected.json's `batch.images` gives.
    let proc = ImageProcessor::from_dir(&dir).unwrap();
    let files: Vec<PathBuf> = exp["batch"]["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| dir.join(i["file"].as_str().unwrap()))
        .collect();
    let batch = proc.process_files(&files).unwrap();
    let grids = golden.grids("image_grid_thw");
    assert_eq!(batch.image_grid_thw, grids, "{name} image_grid_thw");
    let (_, want_pixels) = golden.f32("pixel_values");
    let d = max_abs_diff(&batch.pixel_values, &want_pixels);
    println!("{name}: pixel_values max |diff| = {d:e}");
    assert!(d <= PIXEL_TOL, "{name} pixel_values: {d}");

    // mrope positions of the left-padded batch.
    let (shape, ids) = golden.i64("input_ids");
    let (_, mask) = golden.i64("attention_mask");
    let (_, types) = golden.i64("mm_token_type_ids");
    let (b, t) = (shape[0], shape[1]);
    for (id, ty) in ids.iter().zip(&types) {
        assert_eq!(
            *ty,
            i64::from(*id == image_token_id),
            "{name}: mm_token_type_ids"
        );
    }
    let rows: Vec<TokenRow> = (0..b)
        .map(|r| TokenRow {
            input_ids: &ids[r * t..(r + 1) * t],
            attention_mask: &mask[r * t..(r + 1) * t],
        })
        .collect();
    let rope = rope_index(&rows, image_token_id, &grids, merge).unwrap();
    assert_eq!(
        rope.position_ids,
        golden.i64("position_ids").1,
        "{name} position_ids"
    );
    assert_eq!(
        rope.rope_deltas,
        golden.i64("rope_deltas").1,
        "{name} rope_deltas"
    );

    // Vision tower layout.
    let vpos: Vec<i64> = vision_position_ids(&grids, merge)
        .unwrap()
        .into_iter()
        .flatten()
        .collect();
    assert_eq!(
        vpos,
        golden.i64("vision_position_ids").1,
        "{name} vision_position_ids"
    );
    assert_eq!(
        cu_seqlens(&grids),
        golden.i64("cu_seqlens").1,
        "{name} cu_seqlens"
    );
    if let Some(window_size) = vision["window_size"].as_i64() {
        let (index, cu) = window_index(&grids, window_size, patch, merge).unwrap();
        assert_eq!(index, golden.i64("window_index").1, "{name} window_index");
        assert_eq!(
            cu,
            golden.i64("cu_window_seqlens").1,
            "{name} cu_window_seqlens"
        );
    } else {
        // Qwen2-VL has no window attention: then the golden has no window tensors either.
        let st = SafeTensors::deserialize(&golden.0).unwrap();
        assert!(
            st.tensor("window_index").is_err(),
            "{name}: window_index without window_size"
        );
    }
}

#[test]
fn qwen2_vl_batch_processor_and_layout_match_transformers() {
    check_model_dir("qwen2_vl");
}

#[test]
fn qwen2_vl_flat_batch_processor_and_layout_match_transformers() {
    check_model_dir("qwen2_vl_flat");
}

#[test]
fn qwen2_5_vl_batch_processor_and_layout_match_transformers() {
    check_model_dir("qwen2_5_vl");
}

#[test]
fn both_config_forms_read_the_same_settings() {
    let v5 = ImageProcessorConfig::from_dir(vlm().join("qwen2_vl")).unwrap();
    let v4 = ImageProcessorConfig::from_dir(vlm().join("qwen2_vl_flat")).unwrap();
    assert_eq!(v4, v5);
    assert_eq!((v5.min_pixels, v5.max_pixels), (1568, 9408));
    assert_eq!(
        (v5.patch_size, v5.temporal_patch_size, v5.merge_size),
        (14, 2, 2)
    );
}

#[test]
fn a_row_whose_placeholders_do_not_match_its_grids_is_an_error_naming_the_row() {
    let dir = vlm().join("qwen2_vl");
    let golden = Golden::open(&dir.join("expected.safetensors"));
    let (shape, mut ids) = golden.i64("input_ids");
    let (_, mask) = golden.i64("attention_mask");
    let grids = golden.grids("image_grid_thw");
    let t = shape[1];
    // Row 1's single image (grid [1, 6, 4]: 6 tokens) loses one placeholder to text.
    let first = (t..2 * t).find(|&i| ids[i] == 506).unwrap();
    ids[first] = 100;
    let rows: Vec<TokenRow> = (0..shape[0])
        .map(|r| TokenRow {
            input_ids: &ids[r * t..(r + 1) * t],
            attention_mask: &mask[r * t..(r + 1) * t],
        })
        .collect();
    let err = rope_index(&rows, 506, &grids, 2).unwrap_err();
    assert!(matches!(err, HfError::ImageTokens { row: 1, .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.starts_with("row 1:") && msg.contains("5 image-placeholder") && msg.contains("need 6"),
        "{msg}"
    );
    // One grid too many is refused too.
    let mut more = grids.clone();
    more.push([1, 2, 2]);
    let (_, ok_ids) = golden.i64("input_ids");
    let rows: Vec<TokenRow> = (0..shape[0])
        .map(|r| TokenRow {
            input_ids: &ok_ids[r * t..(r + 1) * t],
            attention_mask: &mask[r * t..(r + 1) * t],
        })
        .collect();
    let err = rope_index(&rows, 506, &more, 2).unwrap_err();
    assert!(err.to_string().contains("4 grids given"), "{err}");
}

#[test]
fn a_truncated_png_is_an_error_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let src = std::fs::read(vlm().join("processor/images/rgb_56x56.png")).unwrap();
    let path = tmp.path().join("cut.png");
    std::fs::write(&path, &src[..src.len() / 2]).unwrap();
    let proc = ImageProcessor::new(ImageProcessorConfig::default());
    let err = proc.process_file(&path).unwrap_err();
    assert!(matches!(err, HfError::Image { .. }), "{err}");
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
    // Not an image at all.
    std::fs::write(&path, b"not an image").unwrap();
    let err = proc.process_file(&path).unwrap_err();
    assert!(err.to_string().contains("cut.png"), "{err}");
}

#[test]
fn an_image_above_the_decode_cap_is_refused_before_decoding() {
    let mut proc = ImageProcessor::new(ImageProcessorConfig::default());
    proc.max_decode_pixels = 56 * 56 - 1;
    let path = vlm().join("processor/images/rgb_56x56.png");
    let err = proc.process_file(&path).unwrap_err();
    assert!(
        matches!(
            err,
            HfError::ImageTooLarge {
                width: 56,
                height: 56,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("rgb_56x56.png"), "{err}");
}

#[test]
fn unsupported_config_values_are_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("preprocessor_config.json");
    let base: Json = serde_json::from_str(
        &std::fs::read_to_string(vlm().join("processor/preprocessor_config.json")).unwrap(),
    )
    .unwrap();
    let refused = |key: &str, value: Json, field: &str, says: &str| {
        let mut cfg = base.clone();
        cfg[key] = value;
        std::fs::write(&path, cfg.to_string()).unwrap();
        let err = ImageProcessorConfig::from_file(&path).unwrap_err();
        let msg = err.to_string();
        assert!(
            matches!(&err, HfError::Field { field: f, .. } if f == field),
            "{msg}"
        );
        assert!(
            msg.contains(says) && msg.contains("preprocessor_config.json"),
            "{msg}"
        );
    };
    refused(
        "resample",
        Json::from(2),
        "resample",
        "2 (BILINEAR) is not implemented",
    );
    refused(
        "do_convert_rgb",
        Json::from(false),
        "do_convert_rgb",
        "not implemented",
    );
    refused(
        "image_mean",
        serde_json::json!([0.5, 0.5]),
        "image_mean",
        "2 values",
    );
    refused(
        "image_processor_type",
        Json::from("CLIPImageProcessor"),
        "image_processor_type",
        "CLIPImageProcessor",
    );
}

#[test]
fn smart_resize_follows_pythons_rounding() {
    use reinforge_hf::smart_resize;
    let r = |h, w| smart_resize(h, w, 28, 1568, 9408).unwrap();
    assert_eq!(r(45, 61), (56, 56));
    assert_eq!(r(33, 97), (28, 84));
    assert_eq!(r(20, 20), (56, 56));
    assert_eq!(r(130, 150), (84, 84));
    // Downscale floors: 150 / beta / 28 = 3.72 -> 3.
    assert_eq!(r(150, 130), (84, 84));
    // 42 / 28 = 1.5 and 70 / 28 = 2.5 round half to even: 2 and 2 (half away from zero would give 3).
    assert_eq!(smart_resize(42, 70, 28, 0, 1 << 20).unwrap(), (56, 56));
    assert_eq!(smart_resize(70, 42, 28, 0, 1 << 20).unwrap(), (56, 56));
    assert!(smart_resize(10, 2010, 28, 1568, 9408).is_err());
}

/// Multi-frame grids, which no fixture has (images are always t = 1): transformers gives each frame its
/// own attention segment (`repeat_interleave(h * w, t)`) and repeats the (h, w) positions per frame.
#[test]
fn multi_frame_grids_get_a_segment_and_positions_per_frame() {
    assert_eq!(cu_seqlens(&[[2, 2, 2], [1, 4, 2]]), vec![0, 4, 8, 16]);
    let pos = vision_position_ids(&[[2, 2, 4]], 2).unwrap();
    let frame = [
        [0, 0],
        [0, 1],
        [1, 0],
        [1, 1],
        [0, 2],
        [0, 3],
        [1, 2],
        [1, 3],
    ];
    assert_eq!(pos, [frame, frame].concat());
    // Windows of 1 merged token per side: 2 frames x 2 merged tokens, each its own window.
    let (index, cu) = window_index(&[[2, 2, 4]], 28, 14, 2).unwrap();
    assert_eq!((index, cu), (vec![0, 1, 2, 3], vec![0, 4, 8, 12, 16]));
}
