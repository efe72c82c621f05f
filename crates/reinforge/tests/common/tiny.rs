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
    "grpo.steps=20",
    "grpo.prompts_per_step=16",
    "grpo.num_generations=8",
    "grpo.lr=5e-4",
    "grpo.max_completion_length=16",
    "grpo.checkpoint_every=2",
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
/// learning runs' mean gains are 5 to 9 times the null's seed-to-seed sd ([`REWARD_NULL`]).
pub const LEARNING_STEPS: usize = 80;

/// `grpo.steps=LEARNING_STEPS`, for [`train_args`].
pub fn learning_steps() -> String {
    format!("grpo.steps={LEARNING_STEPS}")
}

/// Mean of the last quarter of `v` minus the mean of its first quarter: how far a metric moved
/// over a run.
pub fn quarter_change(v: &[f64]) -> f64 {
    let q = v.len() / 4;
    let mean = |s: &[f64]| s.iter().sum::<f64>() / s.len() as f64;
    mean(&v[v.len() - q..]) - mean(&v[..q])
}

/// The seed-to-seed mean and standard deviation of a metric's [`quarter_change`] over
/// [`LEARNING_STEPS`] steps of a run in which the thing a test checks does not learn, measured
/// over seeds 0..9 by `scripts/learning_spread.sh`. A test asserts that the mean change over its
/// seeds lies 3 standard deviations of such a mean beyond the null's: a run that does not learn
/// passes with a chance of about 1 in 700.
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

/// `reward/mean` with the policy frozen (`grpo.lr=1e-12`; the retry game's null: +0.006 ±
/// 0.012). Learning runs (mean ± sd, lowest of 10 seeds): GRPO +0.108 ± 0.034 (+0.057), PPO
/// +0.117 ± 0.030 (+0.066), the retry game +0.100 ± 0.025 (+0.055), asynchronous with
/// staleness 2 +0.070 ± 0.038 (+0.014). With one seed no margin separates both (the slowest
/// learning seeds fall inside 3 null sds); hence two seeds per test, four for the asynchronous
/// run, whose means clear the margin by 3 and 2.4 of their own sds.
pub const REWARD_NULL: Null = Null {
    mean: 0.007,
    sd: 0.012,
};

/// `critic/value_loss` of PPO with the critic frozen (`ppo.critic_lr=1e-12`): the returns
/// drift away from its values as the policy learns. With the critic learning: -0.019 ± 0.013
/// (at most +0.012).
pub const VALUE_LOSS_NULL: Null = Null {
    mean: 0.061,
    sd: 0.010,
};

/// `multi_turn/turns_mean` of the retry game (`task.attempts=3`) with the policy frozen.
/// Learning: -0.192 ± 0.047 (at most -0.114).
pub const TURNS_NULL: Null = Null {
    mean: -0.014,
    sd: 0.024,
};

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
