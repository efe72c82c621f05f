//! Held-out evaluation: pass@k for k = 1, 2, 4, ... n, and each pattern's share of the
//! completions and its success rate.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Result};

use reinforge_eval::decompose::Sample;
use reinforge_eval::passk_change::k_values;
use reinforge_tasks::{ArithTask, Pattern, Problem, Split};
use reinforge_torch::Policy;
use serde::{Deserialize, Serialize};

use super::env::{sample_and_score, sampling};
use reinforge_train::config::{EvalConfig, TrainConfig};
use reinforge_train::progress;
use reinforge_train::run_dir::RunDir;
use reinforge_train::seeds::{seed_torch, step_seed, PHASE_EVAL};

/// Share and success rate of one pattern.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PatternStats {
    /// Fraction of all completions that follow the pattern.
    pub share: f64,
    /// Fraction of the pattern's completions that are correct (null when it never occurs).
    pub success_rate: Option<f64>,
    pub count: usize,
}

/// What one evaluation measured (`eval_sft.json`, `eval_rl.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalReport {
    pub problems: usize,
    pub samples_per_problem: usize,
    pub temperature: f64,
    pub pass_at_1: f64,
    /// `(k, pass@k)` by the unbiased estimator, averaged over problems.
    pub pass_at_k: Vec<(u64, f64)>,
    /// Per pattern name: share and success rate.
    pub patterns: BTreeMap<String, PatternStats>,
    pub mean_completion_tokens: f64,
    pub seconds: f64,
    /// Every sample, per problem in draw order: its pattern and whether it was correct. The
    /// report's selection/improvement split resamples problems from these (absent from
    /// evaluations written before it existed).
    #[serde(default)]
    pub samples: Vec<Vec<Sample>>,
}

/// Evaluates `policy` on `problems` with `cfg.samples` samples each.
pub fn evaluate(
    policy: &Policy,
    task: &ArithTask,
    problems: &[Problem],
    cfg: &EvalConfig,
    max_new_tokens: usize,
    label: &str,
) -> EvalReport {
    let start = std::time::Instant::now();
    let n = cfg.samples;
    let bar = progress::bar((problems.len() * n) as u64, &format!("eval {label}"));
    let params = sampling(cfg.temperature, 1.0, 0, max_new_tokens);
    let rollouts = sample_and_score(policy, task, problems, n, &params, cfg.batch_size, |done| {
        bar.inc(done as u64)
    });
    bar.finish_and_clear();
    let mut correct = vec![0u64; problems.len()];
    let mut samples: Vec<Vec<Sample>> = vec![Vec::with_capacity(n); problems.len()];
    let mut by_pattern: BTreeMap<Pattern, (usize, usize)> =
        Pattern::ALL.iter().map(|&p| (p, (0, 0))).collect();
    for r in &rollouts {
        let entry = by_pattern.entry(r.pattern).or_insert((0, 0));
        entry.0 += 1;
        samples[r.problem].push(Sample::new(r.pattern.name(), r.rollout.score > 0.0));
        if r.rollout.score > 0.0 {
            correct[r.problem] += 1;
            entry.1 += 1;
        }
    }
    let counts: Vec<(u64, u64)> = correct.iter().map(|&c| (n as u64, c)).collect();
    let ks = k_values(n as u64);
    let curve = reinforge_eval::passk::pass_at_k_curve(&counts, &ks);
    let total = rollouts.len().max(1) as f64;
    EvalReport {
        problems: problems.len(),
        samples_per_problem: n,
        temperature: cfg.temperature,
        pass_at_1: curve[0],
        pass_at_k: ks.into_iter().zip(curve).collect(),
        patterns: by_pattern
            .into_iter()
            .map(|(p, (count, ok))| {
                (
                    p.name().to_string(),
                    PatternStats {
                        share: count as f64 / total,
                        success_rate: (count > 0).then(|| ok as f64 / count as f64),
                        count,
                    },
                )
            })
            .collect(),
        mean_completion_tokens: rollouts
            .iter()
            .map(|r| r.rollout.tokens.len())
            .sum::<usize>() as f64
            / total,
        seconds: start.elapsed().as_secs_f64(),
        samples,
    }
}

/// `reinforge eval`: a checkpoint of the run configured by `run` on `cfg.problems` held-out
/// problems of the run's task drawn with `seed` (the run's seed draws its own evaluation's).
pub fn evaluate_checkpoint(
    policy: &Policy,
    run: &TrainConfig,
    cfg: &EvalConfig,
    seed: u64,
) -> EvalReport {
    let task = ArithTask::new(run.task.digits);
    let problems = task.problems(step_seed(seed, PHASE_EVAL, 0), cfg.problems, Split::Heldout);
    seed_torch(step_seed(seed, PHASE_EVAL, 3));
    evaluate(
        policy,
        &task,
        &problems,
        cfg,
        run.grpo.max_completion_length,
        "eval",
    )
}

/// `direct 48% (31% ok), columns 52% (93% ok)`.
pub fn pattern_line(r: &EvalReport) -> String {
    r.patterns
        .iter()
        .filter(|(_, s)| s.count > 0)
        .map(|(name, s)| {
            format!(
                "{name} {:.0}% ({:.0}% ok)",
                100.0 * s.share,
                100.0 * s.success_rate.unwrap_or(0.0)
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The resolved config of the run a checkpoint belongs to (`<run>/checkpoints/<tag>`).
pub fn run_config_of(checkpoint: &Path) -> Result<TrainConfig> {
    let root = checkpoint
        .parent()
        .and_then(Path::parent)
        .filter(|r| r.join("config.toml").exists());
    match root {
        Some(root) => Ok(RunDir::open(root)?.1),
        None => bail!(
            "{}: not a checkpoint of a run directory (no config.toml two levels up); `eval` reads the run's config to know its task",
            checkpoint.display()
        ),
    }
}
