//! The special ids a served checkpoint's tokenizer files give.

use std::path::Path;

use anyhow::{Context, Result};
use reinforge_hf::HfTokenizer;

/// The pad id and the stop ids of the checkpoint in `dir`, from its tokenizer files (pad falls
/// back to EOS, then 0); a checkpoint without them (the toy model) has pad 0 and no stop ids,
/// and serves token ids only, with the client's stop ids.
pub fn pad_and_stop_ids(dir: &Path) -> Result<(i64, Vec<i64>)> {
    if !dir.join("tokenizer.json").is_file() {
        return Ok((0, vec![]));
    }
    let tok = HfTokenizer::from_dir(dir)
        .with_context(|| format!("loading the tokenizer in {}", dir.display()))?;
    let eos = tok.stop_token_ids().iter().map(|&t| t as i64).collect();
    let pad = tok.pad_token_id().or(tok.eos_token_id()).unwrap_or(0) as i64;
    Ok((pad, eos))
}
