//! `reinforge generate`: sample completions of prompts from a checkpoint, as JSONL.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;
use reinforge_recipes::generate::{
    check_room, fit_positions, generate_prompts, sampling_params, SamplingOverrides,
};
use reinforge_tasks::{read_records, Prompt};
use serde::Serialize;

use super::args::{count, temperature, top_k, top_p, ModelArgs, PromptArgs};
use super::output::Output;
use reinforge_train::progress;

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
    #[arg(long, short = 'n', default_value_t = 1, value_parser = count)]
    pub num_samples: usize,
    /// Most new tokens per completion (default: generation_config's max_new_tokens, else 256,
    /// capped by the positions left after the prompt).
    #[arg(long, value_parser = count)]
    pub max_new_tokens: Option<usize>,
    /// Sampling temperature; 0 is greedy (default: from generation_config).
    #[arg(long, value_parser = temperature)]
    pub temperature: Option<f64>,
    /// Nucleus sampling threshold, in (0, 1] (default: from generation_config).
    #[arg(long, value_parser = top_p)]
    pub top_p: Option<f64>,
    /// Top-k filter, 0 = off (default: from generation_config).
    #[arg(long, value_parser = top_k)]
    pub top_k: Option<i64>,
    /// Keep generating past the model's end-of-sequence tokens until --max-new-tokens (vLLM's
    /// `ignore_eos`): fixed-length completions, e.g. to benchmark decoding.
    #[arg(long)]
    pub ignore_eos: bool,
    /// Seed of the sampler (a CPU run is reproducible with the same seed).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Sequences decoded together.
    #[arg(long, default_value_t = 32, value_parser = count)]
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
    let prompts = match (&args.prompt, &args.input) {
        (Some(p), _) => vec![(Prompt::Text(p.clone()), vec![])],
        (None, Some(path)) => read_records(path, &args.prompts.columns())?
            .into_iter()
            .map(|r| (r.prompt, r.images))
            .collect(),
        (None, None) => bail!("give --prompt or --input"),
    };
    if let (true, Some(path)) = (prompts.is_empty(), &args.input) {
        bail!("{}: no prompts (the file has no records)", path.display());
    }
    let m = args.model.load()?;
    let params = sampling_params(
        &m,
        &SamplingOverrides {
            temperature: args.temperature,
            top_p: args.top_p,
            top_k: args.top_k,
            max_new_tokens: args.max_new_tokens,
            ignore_eos: args.ignore_eos,
        },
    )?;
    let style = args.prompts.style();
    let source = args
        .input
        .as_ref()
        .map_or_else(|| "--prompt".to_string(), |p| p.display().to_string());
    let encoded = prompts
        .iter()
        .enumerate()
        .map(|(i, (p, images))| m.encode_with_images(p, images, &style, (&source, i + 1)))
        .collect::<Result<Vec<_>>>()?;
    for (i, e) in encoded.iter().enumerate() {
        check_room(
            &source,
            i,
            e.ids.len(),
            &params,
            args.max_new_tokens,
            m.max_positions(),
        )?;
    }
    let jobs: Vec<(usize, usize)> = (0..encoded.len())
        .flat_map(|i| (0..args.num_samples).map(move |s| (i, s)))
        .collect();
    reinforge_train::seeds::seed_torch(args.seed);
    let mut out = Output::open(args.output.as_deref())?;
    let bar = progress::bar(jobs.len() as u64, "generate");
    for chunk in jobs.chunks(args.batch_size) {
        let ids: Vec<Vec<i64>> = chunk.iter().map(|&(i, _)| encoded[i].ids.clone()).collect();
        let images: Vec<_> = chunk
            .iter()
            .map(|&(i, _)| encoded[i].images.clone())
            .collect();
        let params = fit_positions(&params, &ids, m.max_positions());
        let completions = generate_prompts(&m, &ids, &images, &params)?;
        for (&(index, sample), c) in chunk.iter().zip(completions) {
            out.write(&Line {
                index,
                sample,
                prompt: &encoded[index].text,
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
