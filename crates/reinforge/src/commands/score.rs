//! `reinforge score`: the arguments. Tokenising and scoring are reinforge-train's `score`.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use reinforge_recipes::score::{prepare, ScoreOptions};

use super::args::{ModelArgs, PromptArgs};
use super::output::Output;

/// Arguments of `reinforge score`.
#[derive(Args, Debug)]
#[command(after_help = "\
EXAMPLES:
  reinforge score --model ckpt --input pairs.jsonl --output scores.jsonl
  reinforge score --model ckpt --input pairs.jsonl --raw --append-eos

Each input line holds a prompt (text, or a list of {role, content} messages; see
--prompt-column) and a completion (--completion-column: text, or a list of token ids scored as
they are). Rows with images: message content parts {\"type\": \"image\"} and an `images` column of
file paths, relative to the data file's directory (docs/multimodal.md). The prompt is rendered as for
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
    /// Column holding the completion: text, or a list of token ids.
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

/// Runs `reinforge score`.
pub fn run(args: &ScoreArgs) -> Result<()> {
    let mut columns = args.prompts.columns();
    columns.answer = Some(args.completion_column.clone());
    let scoring = prepare(&ScoreOptions {
        model: args.model.source()?,
        input: args.input.clone(),
        columns,
        style: args.prompts.style(),
        append_eos: args.append_eos,
        batch_size: args.batch_size,
    })?;
    let mut out = Output::open(args.output.as_deref())?;
    scoring.run(|line| out.write(line))?;
    out.finish()
}
