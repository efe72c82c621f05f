//! The processor's text side: each image placeholder of the prompt ids expanded to its image's
//! merged-token count (`Qwen2VLProcessor.__call__`), and the refusal naming the row.

use reinforge_hf::vision::{expand_image_placeholders, merged_tokens};

/// `<|image_pad|>` of the fixtures' tokenizer.
const PAD: i64 = 506;

#[test]
fn each_placeholder_takes_its_own_image_count() {
    // Row 0 of the fixtures: grids [1, 4, 6] and [1, 4, 4] with merge 2 give 6 and 4 tokens.
    let ids = [1, 503, PAD, 504, 7, 503, PAD, 504, 9];
    let out = expand_image_placeholders(&ids, PAD, &[[1, 4, 6], [1, 4, 4]], 2, 0).unwrap();
    let mut want = vec![1, 503];
    want.extend([PAD; 6]);
    want.extend([504, 7, 503]);
    want.extend([PAD; 4]);
    want.extend([504, 9]);
    assert_eq!(out, want);
    assert_eq!(merged_tokens([2, 6, 4], 2), 12);
}

#[test]
fn text_rows_are_unchanged() {
    let ids = [5, 6, 7];
    assert_eq!(
        expand_image_placeholders(&ids, PAD, &[], 2, 3).unwrap(),
        ids
    );
}

#[test]
fn a_count_mismatch_names_the_row() {
    let err = expand_image_placeholders(&[PAD, 1], PAD, &[], 2, 4).unwrap_err();
    assert!(
        err.to_string()
            .contains("row 4: the prompt has 1 image placeholder but the row gives 0 images"),
        "{err}"
    );
    let err = expand_image_placeholders(&[PAD], PAD, &[[1, 2, 2], [1, 2, 2]], 2, 7)
        .unwrap_err()
        .to_string();
    assert!(err.contains("row 7") && err.contains("2 images"), "{err}");
}

/// The fixtures' rendered prompts, tokenised and expanded with their images' grids, are the ids
/// transformers' processor gave (`completion_prompt_ids`).
#[test]
fn fixture_prompts_expand_to_the_processor_ids() {
    use reinforge_hf::{HfTokenizer, ImageProcessor};
    let vlm = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/hf/vlm");
    for name in ["qwen2_vl", "qwen2_5_vl"] {
        let dir = vlm.join(name);
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap())
                .unwrap();
        let tok = HfTokenizer::from_dir(&dir).unwrap();
        let processor = ImageProcessor::from_dir(&dir).unwrap();
        let files = &json["batch"]["images"];
        for (row, want) in json["completion_prompt_ids"]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
        {
            let text = json["prompts"][row].as_str().unwrap();
            let ids: Vec<i64> = tok
                .encode(text, false)
                .unwrap()
                .into_iter()
                .map(i64::from)
                .collect();
            let grids: Vec<[i64; 3]> = json["batch"]["row_images"][row]
                .as_array()
                .unwrap()
                .iter()
                .map(|k| {
                    let file = files[k.as_u64().unwrap() as usize]["file"]
                        .as_str()
                        .unwrap();
                    processor.process_file(dir.join(file)).unwrap().grid_thw
                })
                .collect();
            let merge = processor.config.merge_size;
            let got = expand_image_placeholders(&ids, PAD, &grids, merge, row).unwrap();
            let want: Vec<i64> = serde_json::from_value(want.clone()).unwrap();
            assert_eq!(got, want, "{name}: row {row}");
        }
    }
}
