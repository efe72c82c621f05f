//! `reinforge train-distill`: its arguments; the trainer is reinforge-train's `offline::distill`.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use reinforge_recipes::loaded::ModelSource;
use reinforge_recipes::offline::distill::{DistillOptions, Teacher};
use reinforge_torch::train::loss::distill::Jsd;
use reinforge_torch::SamplingParams;

use super::args::{count, temperature};
use super::offline::OfflineArgs;

/// On-policy distillation of a student checkpoint (`--model`) towards a teacher (TRL's GKD /
/// DistillationTrainer losses).
#[derive(Args, Debug, serde::Serialize)]
#[command(after_help = "\
DATA (jsonl or parquet): {\"prompt\": TEXT or [messages], \"completion\": TEXT (optional)}
Each step samples completions from the student (with probability --lmbda; otherwise the
teacher's samples with --seq-kd, else the data's `completion`), the teacher scores the same
tokens, and the student steps on TRL's generalised JSD: --beta 0 is the forward
KL(teacher||student), 1 the reverse KL(student||teacher), between the JSD with mixture
(1-beta)*student + beta*teacher. Student and teacher must share the tokenizer.
metrics.jsonl: loss, grad_norm, on_policy, completion_length, divergence, reverse_kl,
forward_kl, entropy, tokens. --heldout: the per-token KLs before and after, in report.json
(on the held-out `completion`s when given, else on the student's samples).

EXAMPLES:
  reinforge train-distill --model student --teacher teacher --data prompts.jsonl \\
      --heldout test.jsonl --output runs/distill
  reinforge train-distill --model student --teacher teacher --data sft.jsonl --lmbda 0.5 \\
      --beta 0.5 --output runs/gkd
  reinforge serve --model teacher --port 8001 &   (or vLLM serving the teacher)
  reinforge train-distill --model student --teacher-url http://127.0.0.1:8001 --teacher-top-k 20 \
      --data prompts.jsonl --output runs/distill-remote
  (run it again with the same --output to continue after Ctrl-C)")]
pub struct TrainDistillArgs {
    #[command(flatten)]
    #[serde(flatten)]
    pub common: OfflineArgs,
    /// The teacher: a Hugging Face checkpoint directory with the student's tokenizer (loaded
    /// on the student's device and dtype, frozen).
    #[arg(
        long,
        value_name = "DIR",
        required_unless_present = "teacher_url",
        conflicts_with = "teacher_url"
    )]
    pub teacher: Option<PathBuf>,
    /// A teacher behind an OpenAI-compatible engine (`reinforge serve --model`, vLLM) with the
    /// student's tokenizer: its top-k log-probs of each completion token (vLLM's
    /// `prompt_logprobs`; the key from REINFORGE_API_KEY) and TRL's top-k loss.
    #[arg(long, value_name = "URL")]
    pub teacher_url: Option<String>,
    /// The engine's model name (default: the first it serves).
    #[arg(
        long,
        value_name = "NAME",
        default_value = "",
        requires = "teacher_url"
    )]
    pub teacher_model: String,
    /// Alternatives per position asked of the engine (vLLM caps it at 20 by default).
    #[arg(long, default_value_t = 20, value_parser = count, requires = "teacher_url")]
    pub teacher_top_k: usize,
    /// Renormalise the student and teacher over the teacher's top-k instead of keeping the
    /// missing mass as one tail entry (TRL's default).
    #[arg(long, requires = "teacher_url")]
    pub no_tail: bool,
    /// TRL's beta: 0 forward KL, 1 reverse KL (DistillationTrainer's default), between: JSD.
    #[arg(long, default_value_t = 1.0, value_parser = unit)]
    pub beta: f64,
    /// Share of steps on the student's own samples (GKD's lmbda; 1: fully on-policy).
    #[arg(long, default_value_t = 1.0, value_parser = unit)]
    pub lmbda: f64,
    /// Off-policy steps train on the teacher's samples instead of the data's completions.
    #[arg(long)]
    pub seq_kd: bool,
    /// Sampling temperature, also applied to both models' logits in the loss (as TRL's
    /// DistillationConfig.temperature).
    #[arg(long, default_value_t = 1.0, value_parser = temperature)]
    pub temperature: f64,
    /// Maximum new tokens per sampled completion.
    #[arg(long, default_value_t = 64, value_parser = count)]
    pub max_new_tokens: usize,
}

/// A number in [0, 1].
fn unit(s: &str) -> Result<f64, String> {
    let v = crate::tools::finite(s)?;
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("must be in [0, 1], got {v}"))
    }
}

/// Runs `train-distill`.
pub fn train(args: &TrainDistillArgs) -> Result<()> {
    let memory = args.common.memory;
    if memory.gradient_checkpointing || memory.padding_free {
        anyhow::bail!("train-distill takes --max-tokens-per-microbatch only; --gradient-checkpointing and --padding-free apply to train-sft, train-dpo, train-orpo, train-kto and train-rm");
    }
    let common = args.common.options_of(args)?;
    let teacher = match (&args.teacher, &args.teacher_url) {
        (Some(dir), _) => Teacher::Local(ModelSource {
            dir: dir.clone(),
            ..common.model.clone()
        }),
        (None, Some(url)) => Teacher::Remote {
            url: url.clone(),
            model: args.teacher_model.clone(),
            top_k: args.teacher_top_k,
            add_tail: !args.no_tail,
        },
        (None, None) => unreachable!("clap requires one"),
    };
    // Temperature 0 (greedy sampling) leaves the loss at temperature 1.
    let loss_temperature = if args.temperature > 0.0 {
        args.temperature
    } else {
        1.0
    };
    reinforge_recipes::offline::distill::train(&DistillOptions {
        common,
        teacher,
        jsd: Jsd::new(args.beta, loss_temperature)?,
        lmbda: args.lmbda,
        seq_kd: args.seq_kd,
        sampling: SamplingParams {
            temperature: args.temperature,
            max_new_tokens: args.max_new_tokens,
            ..SamplingParams::default()
        },
    })
}
