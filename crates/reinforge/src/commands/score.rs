//! `reinforge score`: per-token and total log-probs of given completions under a checkpoint.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;
use reinforge_tasks::read_records;
use reinforge_torch::logprobs::{token_logprobs_with, Entropy};
use reinforge_torch::tch::{self, Kind};
use reinforge_torch::SequenceBatch;
use serde::Serialize;

use super::args::{ModelArgs, PromptArgs};
use super::output::Output;
use super::LoadedModel;
use crate::progress;

/// Arguments of `reinforge score`.
#[derive(Args, Debug)]
#[command(after_help = "\
EXAMPLES:
  reinforge score --model ckpt --input pairs.jsonl --output scores.jsonl
  reinforge score --model ckpt --input pairs.jsonl --raw --append-eos

Each input line holds a prompt (text, or a list of {role, content} messages; see
--prompt-column) and a completion (--completion-column). The prompt is rendered as for
generation (chat template with the assistant header, unless --raw); prompt and completion are
tokenized separately, as TRL and verl do for RL batches. Each output line is
  {\"index\", \"prompt_tokens\", \"tokens\", \"token_ids\", \"token_logprobs\", \"total_logprob\",
   \"mean_logprob\"}
with natural-log probabilities of each completion token at temperature 1.")]
pub struct ScoreArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Pairs from a .jsonl or .parquet file.
    #[arg(long, value_name = "FILE")]
    pub input: PathBuf,
    #[command(flatten)]
    pub prompts: PromptArgs,
    /// Column holding the completion text.
    #[arg(long, default_value = "completion", value_name = "NAME")]
    pub completion_column: String,
    /// Append the tokenizer's EOS token to each completion (scores "the model stops here").
    #[arg(long)]
    pub append_eos: bool,
    /// Write JSONL here instead of standard output.
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Sequences per forward pass.
    #[arg(long, default_value_t = 16, value_parser = super::args::count)]
    pub batch_size: usize,
}

#[derive(Serialize)]
struct Line {
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
}

/// Runs `reinforge score`.
pub fn run(args: &ScoreArgs) -> Result<()> {
    let mut columns = args.prompts.columns();
    columns.answer = Some(args.completion_column.clone());
    let records = read_records(&args.input, &columns)?;
    if records.is_empty() {
        bail!("{}: no records to score", args.input.display());
    }
    let m = args.model.load()?;
    let style = args.prompts.style();
    let eos = m.tokenizer.eos_token_id().map(i64::from);
    if args.append_eos && eos.is_none() {
        bail!(
            "--append-eos: the tokenizer in {} has no eos_token",
            args.model.model.display()
        );
    }
    let pairs = records
        .iter()
        .map(|r| -> Result<Pair> {
            let (_, prompt) = m.encode_prompt(&r.prompt, &style)?;
            let text = r.answer.as_deref().unwrap_or_default();
            let mut completion: Vec<i64> = m
                .tokenizer
                .encode(text, false)?
                .into_iter()
                .map(i64::from)
                .collect();
            completion.extend(eos.filter(|_| args.append_eos));
            Ok(Pair { prompt, completion })
        })
        .enumerate()
        .map(|(i, pair): (usize, Result<Pair>)| {
            let pair = pair?;
            let (p, c, max) = (pair.prompt.len(), pair.completion.len(), m.max_positions());
            if p + c > max {
                bail!(
                    "{}: row {}: prompt ({p} tokens) plus completion ({c} tokens) is longer than the model's max_position_embeddings = {max}",
                    args.input.display(),
                    i + 1
                );
            }
            Ok(pair)
        })
        .collect::<Result<Vec<_>>>()?;
    let mut out = Output::open(args.output.as_deref())?;
    let bar = progress::bar(pairs.len() as u64, "score");
    for (c, chunk) in pairs.chunks(args.batch_size).enumerate() {
        for (j, logps) in score_batch(&m, chunk)?.into_iter().enumerate() {
            let pair = &chunk[j];
            out.write(&line(&m, c * args.batch_size + j, pair, logps))?;
        }
        bar.inc(chunk.len() as u64);
    }
    bar.finish_and_clear();
    out.finish()
}

/// Log-probs of each completion token of each pair, from one forward pass.
fn score_batch(m: &LoadedModel, pairs: &[Pair]) -> Result<Vec<Vec<f32>>> {
    let _guard = tch::no_grad_guard();
    let prompts: Vec<&[i64]> = pairs.iter().map(|p| p.prompt.as_slice()).collect();
    let completions: Vec<&[i64]> = pairs.iter().map(|p| p.completion.as_slice()).collect();
    let batch = SequenceBatch::new(&prompts, &completions, m.pad_id(), m.device);
    let (logp, _) = token_logprobs_with(&m.policy.model, &batch, 1.0, Entropy::Skip);
    // host: log-probs are printed.
    let logp = logp.to_kind(Kind::Float).to_device(tch::Device::Cpu);
    pairs
        .iter()
        .enumerate()
        .map(|(i, p)| {
            // Target j of the row is token j + 1, so the completion's tokens are the targets
            // prompt_len - 1 .. prompt_len - 1 + completion_len.
            let start = p.prompt.len().saturating_sub(1) as i64;
            let row = logp
                .get(i as i64)
                .narrow(0, start, p.completion.len() as i64);
            Ok(Vec::<f32>::try_from(&row)?)
        })
        .collect()
}

fn line(m: &LoadedModel, index: usize, pair: &Pair, logps: Vec<f32>) -> Line {
    let total: f64 = logps.iter().map(|&x| x as f64).sum();
    let n = logps.len().max(1) as f64;
    Line {
        index,
        prompt_tokens: pair.prompt.len(),
        tokens: pair
            .completion
            .iter()
            .map(|&t| m.tokenizer.id_to_token(t as u32).unwrap_or_default())
            .collect(),
        token_ids: pair.completion.clone(),
        token_logprobs: logps,
        total_logprob: total,
        mean_logprob: total / n,
    }
}
