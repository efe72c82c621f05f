//! `reinforge score`: per-token and total log-probs of given completions under a checkpoint.
//! [`prepare`] reads and tokenises every row (and checks their lengths) before any output is
//! opened; [`Scoring::run`] scores them in batches, one line per row.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use reinforge_tasks::{read_records, DataColumns};
use reinforge_torch::model::images::Image;
use reinforge_torch::model::logprobs::{
    completion_token_logprobs, completion_token_logprobs_with_images,
};
use serde::Serialize;
use serde_json::Value;

use crate::loaded::{LoadedModel, ModelSource, PromptStyle};
use reinforge_train::progress;

/// What `reinforge score` is asked.
#[derive(Debug, Clone)]
pub struct ScoreOptions {
    pub model: ModelSource,
    /// Rows (jsonl or parquet) and their columns (`answer`: the completion column).
    pub input: PathBuf,
    pub columns: DataColumns,
    pub style: PromptStyle,
    /// Append the tokenizer's EOS token to each completion.
    pub append_eos: bool,
    /// Sequences per forward pass.
    pub batch_size: usize,
}

/// One output line.
#[derive(Serialize)]
pub struct ScoreLine {
    index: usize,
    prompt_tokens: usize,
    tokens: Vec<String>,
    token_ids: Vec<i64>,
    token_logprobs: Vec<f32>,
    total_logprob: f64,
    mean_logprob: f64,
}

/// One tokenized pair.
struct Pair {
    prompt: Vec<i64>,
    completion: Vec<i64>,
    /// The prompt's images (vision-language models).
    images: Vec<Image>,
}

/// The loaded model and the tokenized rows, ready to score.
pub struct Scoring {
    model: LoadedModel,
    pairs: Vec<Pair>,
    batch_size: usize,
}

/// Reads the rows, loads the model and tokenises every row; errors name the file and row.
pub fn prepare(opts: &ScoreOptions) -> Result<Scoring> {
    // The completion is read here: text, or a list of token ids scored as they are.
    let column = opts.columns.answer.clone().unwrap_or("completion".into());
    let columns = DataColumns {
        answer: None,
        ..opts.columns.clone()
    };
    let records = read_records(&opts.input, &columns)?;
    if records.is_empty() {
        bail!("{}: no records to score", opts.input.display());
    }
    let m = opts.model.load()?;
    let eos = m.tokenizer.eos_token_id().map(i64::from);
    if opts.append_eos && eos.is_none() {
        bail!(
            "--append-eos: the tokenizer in {} has no eos_token",
            opts.model.dir.display()
        );
    }
    let source = opts.input.display().to_string();
    let vocab = m.policy.model.config().vocab_size;
    let mut pairs = Vec::with_capacity(records.len());
    for (i, r) in records.iter().enumerate() {
        let row = i + 1;
        let encoded = m.encode_with_images(&r.prompt, &r.images, &opts.style, (&source, row))?;
        let prompt = encoded.ids;
        let mut completion = match r.extra.get(&column) {
            Some(Value::String(text)) => m
                .tokenizer
                .encode(text, false)?
                .into_iter()
                .map(i64::from)
                .collect(),
            Some(Value::Array(ids)) => ids
                .iter()
                .map(|v| {
                    v.as_u64()
                        .filter(|&t| (t as usize) < vocab)
                        .map(|t| t as i64)
                        .with_context(|| {
                            format!(
                                "{source}: row {row}: column `{column}`: token ids must be integers in 0..{vocab}, found {v}"
                            )
                        })
                })
                .collect::<Result<Vec<i64>>>()?,
            Some(v) => bail!(
                "{source}: row {row}: column `{column}`: expected the completion's text or a list of token ids, found {v}"
            ),
            None => bail!("{source}: row {row}: column `{column}`: missing"),
        };
        completion.extend(eos.filter(|_| opts.append_eos));
        let (p, c, max) = (prompt.len(), completion.len(), m.max_positions());
        if p + c > max {
            bail!(
                "{}: row {}: prompt ({p} tokens) plus completion ({c} tokens) is longer than the model's max_position_embeddings = {max}",
                opts.input.display(),
                i + 1
            );
        }
        pairs.push(Pair {
            prompt,
            completion,
            images: encoded.images,
        });
    }
    Ok(Scoring {
        model: m,
        pairs,
        batch_size: opts.batch_size,
    })
}

impl Scoring {
    /// Scores every row in batches, handing each line to `write` in row order.
    pub fn run(&self, mut write: impl FnMut(&ScoreLine) -> Result<()>) -> Result<()> {
        let m = &self.model;
        let bar = progress::bar(self.pairs.len() as u64, "score");
        for (c, chunk) in self.pairs.chunks(self.batch_size).enumerate() {
            let prompts: Vec<&[i64]> = chunk.iter().map(|p| p.prompt.as_slice()).collect();
            let completions: Vec<&[i64]> = chunk.iter().map(|p| p.completion.as_slice()).collect();
            let logps = if m.takes_images() {
                let images = chunk.iter().map(|p| p.images.clone()).collect();
                completion_token_logprobs_with_images(
                    &m.policy.model,
                    m.device,
                    (&prompts, &completions),
                    images,
                    m.pad_id(),
                )?
            } else {
                completion_token_logprobs(
                    &m.policy.model,
                    m.device,
                    &prompts,
                    &completions,
                    m.pad_id(),
                )?
            };
            for (j, logps) in logps.into_iter().enumerate() {
                write(&self.line(c * self.batch_size + j, &chunk[j], logps))?;
            }
            bar.inc(chunk.len() as u64);
        }
        bar.finish_and_clear();
        Ok(())
    }

    fn line(&self, index: usize, pair: &Pair, logps: Vec<f32>) -> ScoreLine {
        let total: f64 = logps.iter().map(|&x| x as f64).sum();
        let n = logps.len().max(1) as f64;
        ScoreLine {
            index,
            prompt_tokens: pair.prompt.len(),
            tokens: pair
                .completion
                .iter()
                .map(|&t| {
                    self.model
                        .tokenizer
                        .id_to_token(t as u32)
                        .unwrap_or_default()
                })
                .collect(),
            token_ids: pair.completion.clone(),
            token_logprobs: logps,
            total_logprob: total,
            mean_logprob: total / n,
        }
    }
}
