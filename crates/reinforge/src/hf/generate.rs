//! `reinforge generate`: sample completions of prompts from a checkpoint, as JSONL.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;
use reinforge_tasks::{read_records, Prompt};
use reinforge_torch::{generate, SamplingParams};
use serde::Serialize;

use super::args::{ModelArgs, PromptArgs};
use super::output::Output;
use crate::progress;

/// Arguments of `reinforge generate`.
#[derive(Args, Debug)]
#[command(after_help = "\
EXAMPLES:
  reinforge generate --model ckpt --prompt 'What is 2+3?'
  reinforge generate --model ckpt --input prompts.jsonl --output out.jsonl -n 4 --temperature 0.7
  reinforge generate --model ckpt --input data.parquet --prompt-column messages --device cuda

Sampling defaults come from the checkpoint's generation_config.json (greedy when it has
do_sample false or none). Each output line is
  {\"index\", \"sample\", \"prompt\", \"completion\", \"completion_ids\", \"completion_tokens\",
   \"finish_reason\"}
with finish_reason \"stop\" (a stop token) or \"length\" (max-new-tokens reached).")]
pub struct GenerateArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// One prompt (rendered with the chat template unless --raw).
    #[arg(
        long,
        value_name = "TEXT",
        conflicts_with = "input",
        required_unless_present = "input"
    )]
    pub prompt: Option<String>,
    /// Prompts from a .jsonl or .parquet file (see --prompt-column).
    #[arg(long, value_name = "FILE")]
    pub input: Option<PathBuf>,
    #[command(flatten)]
    pub prompts: PromptArgs,
    /// Write JSONL here instead of standard output.
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Completions per prompt.
    #[arg(long, short = 'n', default_value_t = 1)]
    pub num_samples: usize,
    /// Most new tokens per completion (default: generation_config's max_new_tokens, else 256).
    #[arg(long)]
    pub max_new_tokens: Option<usize>,
    /// Sampling temperature; 0 is greedy (default: from generation_config).
    #[arg(long)]
    pub temperature: Option<f64>,
    /// Nucleus sampling threshold (default: from generation_config).
    #[arg(long)]
    pub top_p: Option<f64>,
    /// Top-k filter, 0 = off (default: from generation_config).
    #[arg(long)]
    pub top_k: Option<i64>,
    /// Seed of the sampler (a CPU run is reproducible with the same seed).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Sequences decoded together.
    #[arg(long, default_value_t = 32)]
    pub batch_size: usize,
}

#[derive(Serialize)]
struct Line<'a> {
    index: usize,
    sample: usize,
    prompt: &'a str,
    completion: String,
    completion_ids: &'a [i64],
    completion_tokens: usize,
    finish_reason: &'static str,
}

/// Runs `reinforge generate`.
pub fn run(args: &GenerateArgs) -> Result<()> {
    if args.num_samples == 0 || args.batch_size == 0 {
        bail!("--num-samples and --batch-size must be at least 1");
    }
    let prompts = match (&args.prompt, &args.input) {
        (Some(p), _) => vec![Prompt::Text(p.clone())],
        (None, Some(path)) => read_records(path, &args.prompts.columns())?
            .into_iter()
            .map(|r| r.prompt)
            .collect(),
        (None, None) => bail!("give --prompt or --input"),
    };
    let m = args.model.load()?;
    let params = sampling_params(args, &m)?;
    let style = args.prompts.style();
    let encoded = prompts
        .iter()
        .map(|p| m.encode_prompt(p, &style))
        .collect::<Result<Vec<_>>>()?;
    let jobs: Vec<(usize, usize)> = (0..encoded.len())
        .flat_map(|i| (0..args.num_samples).map(move |s| (i, s)))
        .collect();
    crate::seeds::seed_torch(args.seed);
    let mut out = Output::open(args.output.as_deref())?;
    let bar = progress::bar(jobs.len() as u64, "generate");
    for chunk in jobs.chunks(args.batch_size) {
        let ids: Vec<Vec<i64>> = chunk.iter().map(|&(i, _)| encoded[i].1.clone()).collect();
        let completions = generate(&m.policy.model, &ids, &params, m.pad_id(), m.device);
        for (&(index, sample), c) in chunk.iter().zip(completions) {
            out.write(&Line {
                index,
                sample,
                prompt: &encoded[index].0,
                completion: m.decode(&c.tokens)?,
                completion_ids: &c.tokens,
                completion_tokens: c.tokens.len(),
                finish_reason: if c.truncated { "length" } else { "stop" },
            })?;
        }
        bar.inc(chunk.len() as u64);
    }
    bar.finish_and_clear();
    out.finish()
}

/// Command-line values, else the checkpoint's generation_config.json (greedy unless it
/// samples), as transformers' `generate` would use them.
fn sampling_params(args: &GenerateArgs, m: &super::LoadedModel) -> Result<SamplingParams> {
    let g = m.tokenizer.generation_config();
    let temperature = args
        .temperature
        .unwrap_or(if g.do_sample { g.temperature } else { 0.0 });
    if temperature < 0.0 {
        bail!("--temperature must be >= 0, got {temperature}");
    }
    let params = SamplingParams {
        temperature,
        top_p: args.top_p.unwrap_or(g.top_p),
        top_k: args
            .top_k
            .unwrap_or(if g.do_sample { g.top_k as i64 } else { 0 }),
        max_new_tokens: args.max_new_tokens.or(g.max_new_tokens).unwrap_or(256),
        stop_tokens: m.stop_ids(),
    };
    Ok(params)
}
