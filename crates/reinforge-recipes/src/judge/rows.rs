//! `reinforge judge`'s run: every row of a file judged in batches; per-row verdicts as jsonl,
//! the position-bias summary on stderr, and (pairwise) battles for `reinforge rank`.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use reinforge_eval::judge::{position_bias, winner, SwappedVerdict};
use reinforge_tasks::data::Prompt;
use reinforge_tasks::PromptRecord as Record;

use crate::loaded::ModelSource;
use crate::pairs::{completion_text, prompt_columns};

/// What `reinforge judge` is asked (its arguments, the device resolved).
#[derive(Debug, Clone)]
pub struct JudgeOptions {
    pub model: ModelSource,
    /// Rows (jsonl or parquet).
    pub data: PathBuf,
    /// Pairwise (two responses, both orders) or pointwise (one response, rated 1 to 5).
    pub pairwise: bool,
    /// Template file (default: the built-in template of the mode).
    pub template: Option<PathBuf>,
    /// Per-row verdicts (jsonl; `None`: stdout).
    pub output: Option<PathBuf>,
    /// Battles for `reinforge rank` (pairwise).
    pub battles: Option<PathBuf>,
    /// A swap-averaged P(A better) within this of 0.5 is a tie in `battles`.
    pub tie_margin: f64,
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

/// Judges every row of `opts.data` in batches; the summary (pairwise: position bias) goes to
/// stderr.
pub fn judge_rows(opts: &JudgeOptions) -> Result<()> {
    let judge = super::Judge::new(opts.model.load()?, opts.template.as_deref(), opts.pairwise)?;
    let records = reinforge_tasks::read_records(&opts.data, &prompt_columns())?;
    let mut prompts = vec![];
    for r in &records {
        match &r.prompt {
            Prompt::Text(t) => prompts.push(t.clone()),
            Prompt::Messages(_) => bail!("{}: judge prompts must be text", opts.data.display()),
        }
    }
    let out = if opts.pairwise {
        pairwise(opts, &judge, &records, &prompts)?
    } else {
        pointwise(opts, &judge, &records, &prompts)?
    };
    match &opts.output {
        Some(p) => std::fs::write(p, out).with_context(|| format!("writing {}", p.display()))?,
        None => print!("{out}"),
    }
    Ok(())
}

/// Pairwise verdicts of every row (jsonl), writing `opts.battles` and printing the
/// position-bias summary.
fn pairwise(
    opts: &JudgeOptions,
    judge: &super::Judge,
    records: &[Record],
    prompts: &[String],
) -> Result<String> {
    let (mut a, mut b) = (vec![], vec![]);
    for (i, r) in records.iter().enumerate() {
        a.push(field(&r.extra, "response_a", &opts.data, i)?);
        b.push(field(&r.extra, "response_b", &opts.data, i)?);
    }
    let bar = reinforge_train::progress::bar(records.len() as u64, "judge");
    let mut verdicts = vec![];
    for start in (0..records.len()).step_by(opts.batch_size) {
        let end = (start + opts.batch_size).min(records.len());
        verdicts.extend(judge.pairwise(
            &slice(prompts, start, end),
            &slice(&a, start, end),
            &slice(&b, start, end),
        )?);
        bar.set_position(end as u64);
    }
    bar.finish_and_clear();
    let out = verdict_lines(opts, records, prompts, &verdicts)?;
    let truth: Option<Vec<bool>> = records
        .iter()
        .map(|r| {
            r.extra
                .get("winner")
                .and_then(|w| w.as_str())
                .map(|w| w == "model_a")
        })
        .collect();
    let bias = position_bias(&verdicts, truth.as_deref());
    eprintln!("{}", serde_json::to_string_pretty(&bias)?);
    Ok(out)
}

/// The verdict lines, and the battles file when one is asked for.
fn verdict_lines(
    opts: &JudgeOptions,
    records: &[Record],
    prompts: &[String],
    verdicts: &[SwappedVerdict],
) -> Result<String> {
    let (mut out, mut battles) = (String::new(), String::new());
    for (i, (r, v)) in records.iter().zip(verdicts).enumerate() {
        let w = winner(v.debiased(), opts.tie_margin);
        out.push_str(&serde_json::to_string(&serde_json::json!({
            "row": i, "p_a_shown_first": v.a_shown_first, "p_a_shown_second": v.a_shown_second,
            "p_a": v.debiased(), "consistent": v.consistent(), "winner": w}))?);
        out.push('\n');
        if opts.battles.is_some() {
            let (ma, mb) = (
                field(&r.extra, "model_a", &opts.data, i)?,
                field(&r.extra, "model_b", &opts.data, i)?,
            );
            battles.push_str(&serde_json::to_string(&serde_json::json!({
                "model_a": ma, "model_b": mb, "winner": w, "prompt": prompts[i]}))?);
            battles.push('\n');
        }
    }
    if let Some(p) = &opts.battles {
        std::fs::write(p, battles).with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(out)
}

/// Pointwise ratings of every row (jsonl).
fn pointwise(
    opts: &JudgeOptions,
    judge: &super::Judge,
    records: &[Record],
    prompts: &[String],
) -> Result<String> {
    let mut responses = vec![];
    for (i, r) in records.iter().enumerate() {
        responses.push(field(&r.extra, "response", &opts.data, i)?);
    }
    let bar = reinforge_train::progress::bar(records.len() as u64, "judge");
    let mut out = String::new();
    for start in (0..records.len()).step_by(opts.batch_size) {
        let end = (start + opts.batch_size).min(records.len());
        let ratings =
            judge.pointwise(&slice(prompts, start, end), &slice(&responses, start, end))?;
        for (k, rating) in ratings.into_iter().enumerate() {
            out.push_str(&serde_json::to_string(
                &serde_json::json!({"row": start + k, "rating": rating}),
            )?);
            out.push('\n');
        }
        bar.set_position(end as u64);
    }
    bar.finish_and_clear();
    Ok(out)
}
