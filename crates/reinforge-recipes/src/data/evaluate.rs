//! Held-out evaluation of a dataset run: `eval.samples` completions per held-out prompt, each
//! scored by the run's reward (correct when the score is positive); pass@k for k = 1, 2, 4, …
//! n by the unbiased estimator, accuracy per task (the data's `task` column), response length.

use std::collections::BTreeMap;

use anyhow::Result;
use reinforge_eval::passk::try_pass_at_k_curve;
use reinforge_eval::passk_change::k_values;
use reinforge_torch::{Policy, SamplingParams};
use serde::{Deserialize, Serialize};

use super::env::DataEnv;
use reinforge_train::config::EvalConfig;
use reinforge_train::progress;

/// Accuracy of one task's prompts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskStats {
    pub prompts: usize,
    /// Share of the task's completions that are correct (its pass@1).
    pub accuracy: f64,
    /// Share of the task's prompts with at least one correct completion (pass@n).
    pub solved: f64,
    pub mean_completion_tokens: f64,
}

/// What one held-out evaluation measured (`eval_base.json`, `eval_rl.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DataEvalReport {
    pub prompts: usize,
    pub samples_per_prompt: usize,
    pub temperature: f64,
    pub pass_at_1: f64,
    /// `(k, pass@k)`, averaged over prompts.
    pub pass_at_k: Vec<(u64, f64)>,
    pub tasks: BTreeMap<String, TaskStats>,
    pub mean_completion_tokens: f64,
    /// Share of completions cut at the length limit.
    pub truncated_frac: f64,
    pub seconds: f64,
    /// Held-out rows evaluated (0-based, in the file's order).
    pub rows: Vec<usize>,
    /// Correct completions of each evaluated row, out of `samples_per_prompt`.
    pub correct: Vec<u64>,
}

/// At most `limit` rows of `len`, evenly spaced (a file written task by task stays balanced).
pub fn eval_rows(len: usize, limit: usize) -> Vec<usize> {
    let n = limit.min(len);
    (0..n).map(|i| i * len / n.max(1)).collect()
}

/// Evaluates `policy` on the held-out prompts of `env` (at most `cfg.problems`, evenly spaced)
/// with `cfg.samples` samples each at `cfg.temperature`, `cfg.batch_size` sequences at a time.
pub fn evaluate(
    env: &DataEnv,
    policy: &Policy,
    cfg: &EvalConfig,
    params: &SamplingParams,
    label: &str,
) -> Result<DataEvalReport> {
    let start = std::time::Instant::now();
    let rows = eval_rows(env.len(), cfg.problems);
    let n = cfg.samples.max(1);
    let per_batch = (cfg.batch_size / n).max(1);
    let bar = progress::bar((rows.len() * n) as u64, &format!("eval {label}"));
    let mut correct = Vec::with_capacity(rows.len());
    let mut lengths = Vec::with_capacity(rows.len());
    let mut truncated = 0usize;
    for chunk in rows.chunks(per_batch) {
        let rollouts = env.sample_rows(policy, chunk, n, params)?;
        for group in rollouts.chunks(n) {
            correct.push(group.iter().filter(|r| r.score > 0.0).count() as u64);
            lengths.push(group.iter().map(|r| r.tokens.len()).sum::<usize>());
            truncated += group.iter().filter(|r| r.truncated).count();
        }
        bar.inc(rollouts.len() as u64);
    }
    bar.finish_and_clear();
    let counts: Vec<(u64, u64)> = correct.iter().map(|&c| (n as u64, c)).collect();
    let ks = k_values(n as u64);
    let curve = try_pass_at_k_curve(&counts, &ks)?;
    let total = (rows.len() * n).max(1) as f64;
    Ok(DataEvalReport {
        prompts: rows.len(),
        samples_per_prompt: n,
        temperature: params.temperature,
        pass_at_1: curve[0],
        pass_at_k: ks.into_iter().zip(curve).collect(),
        tasks: task_stats(env, &rows, &correct, &lengths, n),
        mean_completion_tokens: lengths.iter().sum::<usize>() as f64 / total,
        truncated_frac: truncated as f64 / total,
        seconds: start.elapsed().as_secs_f64(),
        rows,
        correct,
    })
}

/// Per task: prompts, accuracy, share solved, mean length.
fn task_stats(
    env: &DataEnv,
    rows: &[usize],
    correct: &[u64],
    lengths: &[usize],
    n: usize,
) -> BTreeMap<String, TaskStats> {
    let mut by_task: BTreeMap<String, (usize, u64, usize, usize)> = BTreeMap::new();
    for (i, &row) in rows.iter().enumerate() {
        let e = by_task.entry(env.task(row)).or_default();
        e.0 += 1;
        e.1 += correct[i];
        e.2 += usize::from(correct[i] > 0);
        e.3 += lengths[i];
    }
    by_task
        .into_iter()
        .map(|(task, (prompts, ok, solved, len))| {
            let samples = (prompts * n) as f64;
            let stats = TaskStats {
                prompts,
                accuracy: ok as f64 / samples,
                solved: solved as f64 / prompts as f64,
                mean_completion_tokens: len as f64 / samples,
            };
            (task, stats)
        })
        .collect()
}
