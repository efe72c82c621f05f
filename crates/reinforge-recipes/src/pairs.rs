//! Preference pairs (`prompt`, `chosen`, `rejected`, optional `margin`) read from jsonl or
//! parquet and tokenised the one way `train-dpo`, `train-rm` and `score-rm` share: the prompt
//! rendered as an RL prompt (chat template with the assistant header, unless raw), each
//! completion's ids after it, ending with the tokenizer's EOS (TRL adds EOS the same way).

use std::path::Path;

use anyhow::{bail, Result};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use reinforge_hf::HfTokenizer;
use reinforge_tasks::{read_records, DataColumns, PromptFormat};
use serde_json::Value;

use crate::loaded::{encode_prompt, LoadedModel, PromptStyle};

pub use reinforge_torch::train::preference::Pairs;

/// The `prompt` column, text or messages.
pub fn prompt_columns() -> DataColumns {
    DataColumns {
        prompt: "prompt".into(),
        prompt_format: PromptFormat::Auto,
        answer: None,
        images: None,
    }
}

/// The text of a completion field: a string, or a list of assistant messages (TRL's
/// conversational pairs), whose contents are joined.
pub fn completion_text(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Array(msgs) => msgs
            .iter()
            .map(|m| {
                let role = m.get("role")?.as_str()?;
                (role == "assistant").then(|| m.get("content")?.as_str().map(String::from))?
            })
            .collect::<Option<Vec<String>>>()
            .map(|parts| parts.concat()),
        _ => None,
    }
}

/// The ids ([`completion_ids`]) of field `k` of row `row` of `path`, a completion (text or
/// assistant messages) that must not be empty; errors name the file, row and field.
pub fn completion_field(
    fields: &serde_json::Map<String, Value>,
    k: &str,
    tokenizer: &HfTokenizer,
    (path, row): (&Path, usize),
) -> Result<Vec<i64>> {
    let Some(text) = completion_text(fields.get(k)) else {
        bail!(
            "{} row {row}: `{k}` must be a string or a list of assistant messages",
            path.display()
        );
    };
    let ids = completion_ids(tokenizer, &text)?;
    if ids.is_empty() {
        bail!("{} row {row}: `{k}` is empty", path.display());
    }
    Ok(ids)
}

/// Ids of a completion: its text's tokens, then the EOS unless the text already ends with it
/// (TRL's `add_eos` in its DPO, KTO and reward trainers: `if not text.endswith(eos_token)`).
pub fn completion_ids(tokenizer: &HfTokenizer, text: &str) -> Result<Vec<i64>> {
    let mut ids: Vec<i64> = tokenizer
        .encode(text, false)?
        .into_iter()
        .map(i64::from)
        .collect();
    if let Some(eos) = tokenizer.eos_token_id().map(i64::from) {
        if ids.last() != Some(&eos) {
            ids.push(eos);
        }
    }
    Ok(ids)
}

/// Reads `prompt`/`chosen`/`rejected` (and `margin`) rows; errors name the file, row and
/// field, and a pair longer than the model's positions.
pub fn read_pairs(path: &Path, model: &LoadedModel, raw: bool) -> Result<Pairs> {
    read_pairs_with(path, &model.tokenizer, model.max_positions(), raw)
}

/// [`read_pairs`] with a tokenizer and the model's positions (`max`).
pub fn read_pairs_with(
    path: &Path,
    tokenizer: &HfTokenizer,
    max: usize,
    raw: bool,
) -> Result<Pairs> {
    let style = PromptStyle { raw, system: None };
    let mut out = Pairs {
        prompts: vec![],
        chosen: vec![],
        rejected: vec![],
        margins: None,
    };
    let mut margins = vec![];
    for (i, r) in read_records(path, &prompt_columns())?
        .into_iter()
        .enumerate()
    {
        let row = i + 1;
        let side = |k: &str| completion_field(&r.extra, k, tokenizer, (path, row));
        let (c, rj) = (side("chosen")?, side("rejected")?);
        let p = encode_prompt(tokenizer, &r.prompt, &style)?.1;
        let longest = p.len() + c.len().max(rj.len());
        if longest > max {
            bail!(
                "{} row {row}: {longest} tokens, more than the model's {max} positions",
                path.display()
            );
        }
        match r.extra.get("margin") {
            None | Some(Value::Null) => {}
            Some(Value::Number(n)) => margins.push((i, n.as_f64().unwrap_or(0.0) as f32)),
            Some(_) => bail!("{} row {row}: `margin` must be a number", path.display()),
        }
        out.prompts.push(p);
        out.chosen.push(c);
        out.rejected.push(rj);
    }
    if out.is_empty() {
        bail!("{}: no pairs", path.display());
    }
    if !margins.is_empty() {
        if margins.len() != out.len() {
            bail!(
                "{}: `margin` is set on {} of {} rows; set it on every row or none",
                path.display(),
                margins.len(),
                out.len()
            );
        }
        out.margins = Some(margins.into_iter().map(|(_, m)| m).collect());
    }
    Ok(out)
}

/// The pairs of step `step`: a seeded shuffle per pass over the data, so a resumed run draws
/// what an uninterrupted one draws.
pub fn step_rows(n: usize, batch: usize, seed: u64, step: usize) -> Vec<usize> {
    let per_pass = n.div_ceil(batch).max(1);
    let pass = step / per_pass;
    let mut order: Vec<usize> = (0..n).collect();
    order.shuffle(&mut ChaCha8Rng::seed_from_u64(
        reinforge_train::seeds::step_seed(seed, 5, pass as u64),
    ));
    let start = (step % per_pass) * batch;
    order[start..(start + batch).min(n)].to_vec()
}
