//! LLM judges on a local checkpoint: `reinforge judge` (pairwise with position swap, or
//! pointwise ratings) and the scorer behind a reward spec's `type = "judge"` component.
//!
//! Verdicts are read from the judge's next-token probabilities after a filled-in template
//! (rendered as a user message with the judge's chat template), never sampled: a pairwise
//! verdict is P("A") / (P("A") + P("B")); a pointwise rating is the expected value over the
//! tokens "1".."5" (G-Eval's probability-weighted score, Liu et al. 2023). Templates use
//! `{prompt}`, `{response_a}`, `{response_b}` and `{response}` placeholders, as MT-Bench's judge
//! prompts do (plain substitution: the template is data, not code).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use reinforge_eval::judge::{position_bias, winner, SwappedVerdict};
use reinforge_reward::{JudgeSpec, ModelScorer};
use reinforge_tasks::data::Prompt;
use reinforge_torch::logprobs::next_token_logprobs;
use reinforge_torch::tch;

use super::args::{count, ModelArgs};
use super::pairs::{completion_text, prompt_columns};
use super::{encode_prompt, LoadedModel, PromptStyle};

/// The built-in pairwise template.
pub const PAIRWISE_TEMPLATE: &str = "Compare two answers to the same question.\n\n\
Question:\n{prompt}\n\nAnswer A:\n{response_a}\n\nAnswer B:\n{response_b}\n\n\
Which answer is better? Reply with the single letter A or B.";

/// The built-in pointwise template.
pub const POINTWISE_TEMPLATE: &str = "Rate the answer to the question from 1 (worst) to 5 \
(best).\n\nQuestion:\n{prompt}\n\nAnswer:\n{response}\n\nReply with a single digit.";

/// A judge: a causal model, its tokenizer, and the token ids its verdicts are read from.
pub struct Judge {
    model: LoadedModel,
    template: String,
    /// Ids of "A" and "B" (pairwise) or "1".."5" (pointwise).
    labels: Vec<i64>,
}

/// The first token id of `text` (its whole encoding must be one token).
fn single_token(model: &LoadedModel, text: &str) -> Result<i64> {
    match model.tokenizer.encode(text, false)?.as_slice() {
        [id] => Ok(i64::from(*id)),
        ids => bail!("the judge's tokenizer encodes {text:?} as {} tokens; verdict labels must be one token each", ids.len()),
    }
}

impl Judge {
    /// Loads a pairwise (`pairwise = true`) or pointwise judge from `model` with `template`
    /// (default: the built-in one).
    pub fn new(model: LoadedModel, template: Option<&Path>, pairwise: bool) -> Result<Self> {
        let template = match template {
            Some(p) => std::fs::read_to_string(p)
                .with_context(|| format!("reading judge template {}", p.display()))?,
            None if pairwise => PAIRWISE_TEMPLATE.to_string(),
            None => POINTWISE_TEMPLATE.to_string(),
        };
        let needed: &[&str] = if pairwise {
            &["{prompt}", "{response_a}", "{response_b}"]
        } else {
            &["{prompt}", "{response}"]
        };
        if let Some(missing) = needed.iter().find(|k| !template.contains(**k)) {
            bail!("the judge template has no {missing} placeholder");
        }
        let names: &[&str] = if pairwise {
            &["A", "B"]
        } else {
            &["1", "2", "3", "4", "5"]
        };
        let labels = names
            .iter()
            .map(|n| single_token(&model, n))
            .collect::<Result<_>>()?;
        Ok(Self {
            model,
            template,
            labels,
        })
    }

    /// Ids of the filled-in template, as a user turn of the judge's chat template.
    fn encode(&self, fill: &[(&str, &str)]) -> Result<Vec<i64>> {
        let mut text = self.template.clone();
        for (k, v) in fill {
            text = text.replace(k, v);
        }
        Ok(encode_prompt(
            &self.model.tokenizer,
            &Prompt::Text(text),
            &PromptStyle::default(),
        )?
        .1)
    }

    /// Probabilities over the labels `[rows][labels]`, renormalised over the labels.
    fn label_probs(&self, inputs: &[Vec<i64>]) -> Result<Vec<Vec<f64>>> {
        let _guard = tch::no_grad_guard();
        let max = self.model.max_positions();
        if let Some(long) = inputs.iter().find(|s| s.len() > max) {
            bail!(
                "a judge prompt has {} tokens, more than the judge's {max} positions",
                long.len()
            );
        }
        let logp = next_token_logprobs(
            &self.model.policy.model,
            self.model.policy.device(),
            inputs,
            self.model.pad_id(),
            &self.labels,
        )
        .softmax(-1, tch::Kind::Double);
        let flat = Vec::<f64>::try_from(&logp.flatten(0, -1))?;
        Ok(flat
            .chunks(self.labels.len())
            .map(<[f64]>::to_vec)
            .collect())
    }

    /// Each pair judged in both orders: P(A better) with A shown first and second.
    pub fn pairwise(
        &self,
        prompts: &[&str],
        a: &[&str],
        b: &[&str],
    ) -> Result<Vec<SwappedVerdict>> {
        let mut inputs = Vec::with_capacity(2 * prompts.len());
        for ((p, x), y) in prompts.iter().zip(a).zip(b) {
            inputs.push(self.encode(&[
                ("{prompt}", p),
                ("{response_a}", x),
                ("{response_b}", y),
            ])?);
            inputs.push(self.encode(&[
                ("{prompt}", p),
                ("{response_a}", y),
                ("{response_b}", x),
            ])?);
        }
        let probs = self.label_probs(&inputs)?;
        Ok(probs
            .chunks(2)
            .map(|c| SwappedVerdict {
                a_shown_first: c[0][0],
                a_shown_second: c[1][1],
            })
            .collect())
    }

    /// Expected ratings (1 to 5) of each response.
    pub fn pointwise(&self, prompts: &[&str], responses: &[&str]) -> Result<Vec<f64>> {
        let inputs = prompts
            .iter()
            .zip(responses)
            .map(|(p, r)| self.encode(&[("{prompt}", p), ("{response}", r)]))
            .collect::<Result<Vec<_>>>()?;
        Ok(self
            .label_probs(&inputs)?
            .iter()
            .map(|p| p.iter().enumerate().map(|(k, q)| (k + 1) as f64 * q).sum())
            .collect())
    }
}

/// Pairwise or pointwise.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum JudgeMode {
    /// Two responses per row (`response_a`, `response_b`), judged in both orders.
    Pairwise,
    /// One response per row (`response`), rated 1 to 5.
    Pointwise,
}

/// Judge responses with a local checkpoint.
#[derive(Args, Debug)]
#[command(after_help = "\
ROWS (jsonl or parquet):
  pairwise:  {\"prompt\": TEXT, \"response_a\": TEXT, \"response_b\": TEXT,
              \"model_a\": NAME, \"model_b\": NAME (optional: for --battles),
              \"winner\": \"model_a\" | \"model_b\" (optional: the known answer, for accuracy)}
  pointwise: {\"prompt\": TEXT, \"response\": TEXT}
Pairwise rows are judged twice, with either response first; the summary reports the position
bias of single-order verdicts and of the swap-averaged ones. --battles writes the swap-averaged
winners in the battle format `reinforge rank` reads.

EXAMPLES:
  reinforge judge --model judge-ckpt --data pairs.jsonl --battles battles.jsonl
  reinforge judge --model judge-ckpt --mode pointwise --data rows.jsonl --output rated.jsonl")]
pub struct JudgeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[arg(long, value_name = "FILE")]
    pub data: PathBuf,
    #[arg(long, value_enum, default_value = "pairwise")]
    pub mode: JudgeMode,
    /// Template file (placeholders {prompt}, {response_a}, {response_b} or {response}).
    #[arg(long, value_name = "FILE")]
    pub template: Option<PathBuf>,
    /// Per-row verdicts (jsonl; default: stdout).
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Battles for `reinforge rank` (pairwise; rows need model_a and model_b).
    #[arg(long, value_name = "FILE")]
    pub battles: Option<PathBuf>,
    /// A swap-averaged P(A better) within this of 0.5 is a tie in --battles.
    #[arg(long, default_value_t = 0.05)]
    pub tie_margin: f64,
    #[arg(long, default_value_t = 8, value_parser = count)]
    pub batch_size: usize,
}

/// A string field of a row, or an error naming the file, row and field.
fn field(
    row: &serde_json::Map<String, serde_json::Value>,
    k: &str,
    file: &Path,
    i: usize,
) -> Result<String> {
    completion_text(row.get(k))
        .with_context(|| format!("{} row {}: `{k}` must be a string", file.display(), i + 1))
}

/// `v[start..end]` as string slices.
fn slice(v: &[String], start: usize, end: usize) -> Vec<&str> {
    v[start..end].iter().map(String::as_str).collect()
}

/// Runs `reinforge judge`; the summary (pairwise: position bias) goes to stderr.
pub fn run(args: &JudgeArgs) -> Result<()> {
    let pairwise = matches!(args.mode, JudgeMode::Pairwise);
    let judge = Judge::new(args.model.load()?, args.template.as_deref(), pairwise)?;
    let records = reinforge_tasks::read_records(&args.data, &prompt_columns())?;
    let mut prompts = vec![];
    for r in &records {
        match &r.prompt {
            Prompt::Text(t) => prompts.push(t.clone()),
            Prompt::Messages(_) => bail!("{}: judge prompts must be text", args.data.display()),
        }
    }
    let mut out = String::new();
    let bar = crate::progress::bar(records.len() as u64, "judge");
    if pairwise {
        let (mut a, mut b) = (vec![], vec![]);
        for (i, r) in records.iter().enumerate() {
            a.push(field(&r.extra, "response_a", &args.data, i)?);
            b.push(field(&r.extra, "response_b", &args.data, i)?);
        }
        let mut verdicts = vec![];
        for start in (0..records.len()).step_by(args.batch_size) {
            let end = (start + args.batch_size).min(records.len());
            verdicts.extend(judge.pairwise(
                &slice(&prompts, start, end),
                &slice(&a, start, end),
                &slice(&b, start, end),
            )?);
            bar.set_position(end as u64);
        }
        bar.finish_and_clear();
        let truth: Option<Vec<bool>> = records
            .iter()
            .map(|r| {
                r.extra
                    .get("winner")
                    .and_then(|w| w.as_str())
                    .map(|w| w == "model_a")
            })
            .collect();
        let mut battles = String::new();
        for (i, (r, v)) in records.iter().zip(&verdicts).enumerate() {
            let w = winner(v.debiased(), args.tie_margin);
            out.push_str(&serde_json::to_string(&serde_json::json!({
                "row": i, "p_a_shown_first": v.a_shown_first, "p_a_shown_second": v.a_shown_second,
                "p_a": v.debiased(), "consistent": v.consistent(), "winner": w}))?);
            out.push('\n');
            if args.battles.is_some() {
                let (ma, mb) = (
                    field(&r.extra, "model_a", &args.data, i)?,
                    field(&r.extra, "model_b", &args.data, i)?,
                );
                battles.push_str(&serde_json::to_string(&serde_json::json!({
                    "model_a": ma, "model_b": mb, "winner": w, "prompt": prompts[i]}))?);
                battles.push('\n');
            }
        }
        if let Some(p) = &args.battles {
            std::fs::write(p, battles).with_context(|| format!("writing {}", p.display()))?;
        }
        let bias = position_bias(&verdicts, truth.as_deref());
        eprintln!("{}", serde_json::to_string_pretty(&bias)?);
    } else {
        let mut responses = vec![];
        for (i, r) in records.iter().enumerate() {
            responses.push(field(&r.extra, "response", &args.data, i)?);
        }
        for start in (0..records.len()).step_by(args.batch_size) {
            let end = (start + args.batch_size).min(records.len());
            let ratings =
                judge.pointwise(&slice(&prompts, start, end), &slice(&responses, start, end))?;
            for (k, rating) in ratings.into_iter().enumerate() {
                out.push_str(&serde_json::to_string(
                    &serde_json::json!({"row": start + k, "rating": rating}),
                )?);
                out.push('\n');
            }
            bar.set_position(end as u64);
        }
        bar.finish_and_clear();
    }
    match &args.output {
        Some(p) => std::fs::write(p, out).with_context(|| format!("writing {}", p.display()))?,
        None => print!("{out}"),
    }
    Ok(())
}

/// A pointwise judge behind a reward spec's `type = "judge"` component: (rating − 1) / 4.
pub struct JudgeScorer(Mutex<Judge>);

// SAFETY: the judge sits behind a mutex, so its tensors are used by one thread at a time;
// tch tensors are `Send`.
unsafe impl Sync for JudgeScorer {}
// SAFETY: as above.
unsafe impl Send for JudgeScorer {}

impl JudgeScorer {
    /// Loads the judge of `spec` (float32, CPU).
    pub fn load(spec: &JudgeSpec) -> Result<Self> {
        let model = LoadedModel::load(
            &spec.path,
            // host: judge components score on the CPU, beside the trainer.
            &reinforge_torch::LoadOptions::f32(reinforge_torch::Device::Cpu),
        )?;
        Ok(Self(Mutex::new(Judge::new(
            model,
            spec.template.as_deref(),
            false,
        )?)))
    }
}

impl ModelScorer for JudgeScorer {
    fn score(&self, prompts: &[&str], responses: &[&str]) -> Result<Vec<f64>> {
        let judge = self
            .0
            .lock()
            .map_err(|_| anyhow::anyhow!("judge lock poisoned"))?;
        Ok(judge
            .pointwise(prompts, responses)?
            .into_iter()
            .map(|r| (r - 1.0) / 4.0)
            .collect())
    }
}

/// A loaded judge scorer for the reward spec loader.
pub fn load_scorer(spec: &JudgeSpec) -> Result<Arc<dyn ModelScorer>> {
    Ok(Arc::new(JudgeScorer::load(spec)?))
}
