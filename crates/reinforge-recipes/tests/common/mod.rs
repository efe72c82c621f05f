//! What the dataset-run tests share: the fixture checkpoint and a `DataRun` over it.

use std::path::{Path, PathBuf};

use reinforge_recipes::data::env::DataRun;

/// The tiny Llama checkpoint of `fixtures/hf/models/llama`.
pub fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/hf/models/llama")
}

/// A single-turn dataset run of the fixture on `data` (`prompt` and `answer` columns),
/// scored by the spec at `reward` (the default math reward without one).
pub fn data_run(data: PathBuf, reward: Option<PathBuf>) -> DataRun {
    DataRun {
        model: fixture(),
        data,
        reward,
        prompt_column: "prompt".into(),
        answer_column: "answer".into(),
        raw: false,
        system: None,
        lora: None,
        heldout: None,
        tools: None,
        max_turns: 3,
    }
}
