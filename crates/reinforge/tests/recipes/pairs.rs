//! Tests of `reinforge_recipes::pairs` through its public API (moved out of the library source).

use reinforge_hf::HfTokenizer;
use reinforge_recipes::pairs::*;

#[test]
fn a_completion_gets_one_eos_whether_or_not_its_text_ends_with_it() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/hf/models/llama");
    let tok = HfTokenizer::from_dir(dir).unwrap();
    let eos = i64::from(tok.eos_token_id().unwrap());
    let plain = completion_ids(&tok, " 14.").unwrap();
    let marked = completion_ids(&tok, " 14.<|eot_id|>").unwrap();
    assert_eq!(
        plain, marked,
        "TRL adds the EOS only when the text lacks it"
    );
    assert_eq!(plain.iter().filter(|&&t| t == eos).count(), 1);
    assert_eq!(plain.last(), Some(&eos));
}
