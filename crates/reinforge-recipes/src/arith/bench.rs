//! `reinforge bench`'s measurement: times full GRPO iterations (sampling, scoring, update) of the default
//! model on fixed shapes, for comparison with `scripts/bench_grpo.py`, which does the same math
//! in PyTorch. `scripts/bench_grpo.sh` runs both in one go and prints the ratio.

use std::time::Instant;

use anyhow::{bail, Result};
use reinforge_torch::runtime::{resolve_device, set_threads, threads};
use reinforge_torch::Policy;
use serde::Serialize;

use super::env::ArithEnv;
use reinforge_train::config::TrainConfig;
use reinforge_train::env::Environment;
use reinforge_train::rl::{self, StepSettings};
use reinforge_train::trainer::{check_positions, optimizer, Phase, Trainer, TrainerState};

/// What `reinforge bench` prints (one JSON object).
#[derive(Debug, Serialize)]
pub struct BenchReport {
    pub implementation: &'static str,
    pub iterations: usize,
    pub threads: i32,
    pub prompts: usize,
    pub generations: usize,
    /// Longest completion (every completion has this length on fixed shapes).
    pub completion_tokens: usize,
    /// Mean completion length over the timed iterations.
    pub mean_completion_tokens: f64,
    /// Mean fraction of rows the update skipped (zero advantage).
    pub rows_skipped_frac: f64,
    /// Seconds per iteration, each timed iteration in order.
    pub iteration_s: Vec<f64>,
    pub median_s: f64,
    pub mean_s: f64,
    pub median_sample_s: f64,
    pub median_update_s: f64,
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Runs `warmup + iterations` GRPO iterations with every completion `max_completion_length`
/// tokens long, timing the last `iterations`. Each iteration is the trainer's RL step
/// ([`rl::local_step`]) with the run's optimizer settings. Critic-free presets only (the CLI
/// refuses `gae`): `scripts/bench_grpo.py`, the PyTorch side of the comparison, has no critic.
/// With `checkpoint`, the policy is loaded from it and completions stop at `<eos>` as in
/// training (a real iteration); without, a randomly initialised model generates exactly
/// `max_completion_length` tokens per completion (fixed shapes).
pub fn run(
    cfg: &TrainConfig,
    iterations: usize,
    warmup: usize,
    checkpoint: Option<&std::path::Path>,
) -> Result<BenchReport> {
    if iterations == 0 {
        bail!("--iterations must be at least 1");
    }
    cfg.validate_arith()?;
    if cfg.grpo.advantage_estimator == reinforge_train::config::GAE {
        bail!("bench times critic-free iterations: rl.algorithm = ppo (a critic) is not supported; pick another --set rl.algorithm");
    }
    let device = resolve_device(&cfg.device, "config key `device`")?;
    reinforge_torch::precision::set_bf16(cfg.bf16)?;
    set_threads(cfg.threads);
    let mut grpo_cfg = cfg.grpo.clone();
    // Fixed shapes compare the same arithmetic on both sides: every row is run, even though a
    // random model's rewards (all zero) would let reinforge skip the whole update.
    grpo_cfg.ignore_eos = checkpoint.is_none();
    grpo_cfg.skip_zero_advantage = checkpoint.is_some();
    let policy = match checkpoint {
        Some(dir) => Policy::load(dir, device)?,
        None => Policy::new(&cfg.model, device, cfg.seed as i64)?,
    };
    let env = ArithEnv::new(cfg.task.digits);
    check_positions(
        env.max_prompt_len(),
        grpo_cfg.max_completion_length,
        policy.model.config().max_position_embeddings,
        &env.describe_longest_prompt(),
    )?;
    let opt = optimizer(&policy, grpo_cfg.weight_decay);
    let mut trainer = Trainer::new(
        &policy,
        opt,
        TrainerState::start(Phase::Rl),
        Box::new(|_: &std::path::Path| Ok(())),
    );
    if rl::needs_reference(&grpo_cfg, &cfg.ppo) {
        trainer.reference = Some(policy.frozen_copy()?);
    }
    let settings = StepSettings::new(&grpo_cfg, &cfg.ppo, cfg.seed, env.pad_id());
    let mut times = vec![];
    let mut sample = vec![];
    let mut update = vec![];
    let mut lengths = vec![];
    let mut skipped = vec![];
    for step in 0..warmup + iterations {
        trainer.state.step = step;
        let start = Instant::now();
        let m = rl::local_step(&mut trainer, &env, &settings, false)?;
        let elapsed = start.elapsed().as_secs_f64();
        if step >= warmup {
            times.push(elapsed);
            sample.push(m.sample_seconds);
            update.push(m.update_seconds);
            lengths.push(m.response_length);
            skipped.push(m.rows_skipped_frac);
        }
    }
    Ok(BenchReport {
        implementation: "reinforge",
        iterations,
        threads: threads(),
        prompts: grpo_cfg.prompts_per_step,
        generations: grpo_cfg.num_generations,
        completion_tokens: grpo_cfg.max_completion_length,
        mean_completion_tokens: lengths.iter().sum::<f64>() / lengths.len().max(1) as f64,
        rows_skipped_frac: skipped.iter().sum::<f64>() / skipped.len().max(1) as f64,
        median_s: median(&times),
        mean_s: times.iter().sum::<f64>() / times.len().max(1) as f64,
        iteration_s: times,
        median_sample_s: median(&sample),
        median_update_s: median(&update),
    })
}
