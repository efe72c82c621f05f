//! The tiny default-experiment configuration the end-to-end tests train on, and helpers to
//! run it and read its metrics.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

/// A small, fast configuration: 1-digit addition, a 2-layer model, short phases.
pub const TINY: &[&str] = &[
    "task.digits=1",
    "model.hidden_size=32",
    "model.intermediate_size=64",
    "model.num_hidden_layers=2",
    "sft.steps=200",
    "sft.lr=1e-2",
    "sft.batch_size=32",
    "sft.warmup_steps=10",
    "rl.steps=20",
    "rl.prompts_per_step=16",
    "rl.num_generations=8",
    "rl.lr=5e-4",
    "rl.max_completion_length=16",
    "rl.checkpoint_every=2",
    "eval.problems=8",
    "eval.samples=8",
];

/// Runs the binary with owned arguments.
pub fn run(args: &[String]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_reinforge"))
        .args(args)
        .output()
        .expect("runs the binary")
}

/// `train` with [`TINY`], then `extra` (later keys win), in `runs/name`.
pub fn train_args(runs: &Path, name: &str, extra: &[&str]) -> Vec<String> {
    let mut args = vec!["train".to_string()];
    for kv in TINY.iter().chain(extra).map(|s| s.to_string()).chain([
        format!("runs_dir={}", runs.display()),
        format!("name={name}"),
    ]) {
        args.push("--set".into());
        args.push(kv);
    }
    args
}

/// Asserts the run succeeded, showing its stderr otherwise.
pub fn check(out: &Output) {
    assert!(
        out.status.success(),
        "status {:?}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A run's `metrics.jsonl`.
pub fn metrics(run: &Path) -> Vec<Value> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// One key of every metrics line (NaN where absent).
pub fn column(m: &[Value], key: &str) -> Vec<f64> {
    m.iter()
        .map(|v| v[key].as_f64().unwrap_or(f64::NAN))
        .collect()
}

/// RL steps of the learning tests (those that assert the reward rises). Over 40 steps a run
/// that does not learn changed its reward by as much as a slow learning run did; over 80 the
/// learning runs' mean gains are 4 to 6 times the null's seed-to-seed sd ([`reward_null`],
/// `tests/data/learning_null.tsv`).
pub const LEARNING_STEPS: usize = 80;

/// `rl.steps=LEARNING_STEPS`, for [`train_args`].
pub fn learning_steps() -> String {
    format!("rl.steps={LEARNING_STEPS}")
}

/// GRPO steps of a run that repeats a longer one with the same seed. The RL learning rate is
/// constant and nothing before step k reads the step count, so a repeat this long must equal
/// the first lines of the longer run's metrics exactly ([`assert_prefix`]): the same check of
/// determinism as a full repeat, at an eighth of its RL steps.
pub const REPEAT_STEPS: usize = 10;

/// `metrics.jsonl` without its wall-clock keys (`timing/*`, a remote engine's
/// `rollout/push_s`).
pub fn deterministic_metrics(run: &Path) -> Vec<Value> {
    metrics(run)
        .into_iter()
        .map(|mut v| {
            v.as_object_mut()
                .unwrap()
                .retain(|k, _| !k.starts_with("timing/") && k != "rollout/push_s");
            v
        })
        .collect()
}

/// Asserts that `repeat`'s deterministic metrics are the first lines of `run`'s: a shorter run
/// with the same seed and configuration ([`REPEAT_STEPS`]).
pub fn assert_prefix(run: &Path, repeat: &Path) {
    let (full, short) = (deterministic_metrics(run), deterministic_metrics(repeat));
    assert!(
        !short.is_empty() && short.len() <= full.len(),
        "{} lines against {}",
        short.len(),
        full.len()
    );
    for (i, (a, b)) in full.iter().zip(&short).enumerate() {
        assert_eq!(a, b, "same seed, same metrics: step {i} differs");
    }
}

/// Mean of the last quarter of `v` minus the mean of its first quarter: how far a metric moved
/// over a run.
pub fn quarter_change(v: &[f64]) -> f64 {
    let q = v.len() / 4;
    let mean = |s: &[f64]| s.iter().sum::<f64>() / s.len() as f64;
    mean(&v[v.len() - q..]) - mean(&v[..q])
}

/// The seed-to-seed mean and standard deviation of a metric's [`quarter_change`] over
/// [`LEARNING_STEPS`] steps of a run in which the thing a test checks does not learn. A test
/// asserts that the mean change over its seeds lies 3 standard deviations of such a mean beyond
/// the null's: a run that does not learn passes with a chance of about 1 in 700 (a normal
/// null; with the sd itself estimated from 10 seeds the chance is larger, which the learning
/// runs' own margins, in [`NULLS`], leave room for).
#[derive(Debug, Clone, Copy)]
pub struct Null {
    pub mean: f64,
    pub sd: f64,
}

impl Null {
    /// The least mean change over `seeds` seeds that is not the null's noise.
    pub fn above(self, seeds: usize) -> f64 {
        self.mean + 3.0 * self.sd / (seeds as f64).sqrt()
    }

    /// The greatest mean change over `seeds` seeds that is not the null's noise.
    pub fn below(self, seeds: usize) -> f64 {
        self.mean - 3.0 * self.sd / (seeds as f64).sqrt()
    }
}

/// The raw per-seed figures `scripts/learning_spread.sh` measured (one line per metric,
/// configuration and seed; its header names the commit): the nulls below are derived from
/// them, so the margins follow the measurement, never a copy of it. Rerun the script when the
/// tiny configuration, the step count, the seeding or the sampler's numerics change.
pub const NULLS: &str = include_str!("../data/learning_null.tsv");

/// Mean and sample standard deviation of `metric` over the seeds of `configuration` in
/// [`NULLS`].
pub fn measured(metric: &str, configuration: &str) -> Null {
    let v: Vec<f64> = NULLS
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (f.len() == 4 && f[0] == metric && f[1] == configuration)
                .then(|| f[3].parse().expect("a number in learning_null.tsv"))
        })
        .collect();
    assert!(
        v.len() >= 5,
        "learning_null.tsv: {} seeds of {metric} {configuration}",
        v.len()
    );
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let sd = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
    Null { mean, sd }
}

/// `reward/mean` with the policy frozen (`rl.lr=1e-12`).
pub fn reward_null() -> Null {
    measured("reward/mean", "null")
}

/// `critic/value_loss` of PPO with the critic frozen (`ppo.critic_lr=1e-12`): the returns
/// drift away from its values as the policy learns.
pub fn value_loss_null() -> Null {
    measured("critic/value_loss", "ppo-frozen-critic")
}

/// `multi_turn/turns_mean` of the retry game (`task.attempts=3`) with the policy frozen.
pub fn turns_null() -> Null {
    measured("multi_turn/turns_mean", "retry-null")
}

/// Trains `{name}-s{seed}` under `runs` for each of `seeds` with `extra` and returns each run's
/// metrics.
pub fn train_seeds(
    runs: &Path,
    name: &str,
    extra: &[&str],
    seeds: std::ops::Range<u64>,
) -> Vec<Vec<Value>> {
    seeds
        .map(|seed| {
            let run = format!("{name}-s{seed}");
            let seed = format!("seed={seed}");
            let keys: Vec<&str> = extra.iter().copied().chain([seed.as_str()]).collect();
            check(&self::run(&train_args(runs, &run, &keys)));
            metrics(&runs.join(run))
        })
        .collect()
}

/// The mean over `runs` of the [`quarter_change`] of `key`, and each run's.
pub fn mean_change(runs: &[Vec<Value>], key: &str) -> (f64, Vec<f64>) {
    let each: Vec<f64> = runs
        .iter()
        .map(|m| quarter_change(&column(m, key)))
        .collect();
    (each.iter().sum::<f64>() / each.len() as f64, each)
}
