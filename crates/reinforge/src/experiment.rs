//! The default experiment's pipeline: SFT warm-start, held-out evaluation, GRPO (or PPO with a
//! critic, which is created from the SFT model and checkpointed with the policy), evaluation
//! again, report. Every stage checkpoints into the run directory, so an interrupted run
//! continues with `--resume` exactly where it stopped.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use reinforge_tasks::{ArithTask, Split};
use reinforge_torch::tch::Device;
use reinforge_torch::{AdamW, AdamWConfig, Policy};

use crate::config::{TrainConfig, GAE};
use crate::critic::CriticState;
use crate::evaluate::{evaluate, EvalReport};
use crate::progress;
use crate::report::{write_report, Summary};
use crate::run_dir::{read_json, write_json, Phase, RunDir, TrainerState};
use crate::seeds::{seed_torch, step_seed, PHASE_EVAL};
use crate::{grpo, sft};

/// Set by the Ctrl-C handler; loops check it between steps.
pub static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// How a call to [`run`] ended.
pub enum Outcome {
    Finished(Box<Summary>),
    /// Stopped by Ctrl-C after saving `checkpoints/latest`.
    Interrupted,
}

/// Parses `cpu`, `cuda`, `cuda:N`.
pub fn parse_device(s: &str) -> Result<Device> {
    match s {
        "cpu" => Ok(Device::Cpu),
        "cuda" => Ok(Device::Cuda(0)),
        _ => match s.strip_prefix("cuda:").map(str::parse) {
            Some(Ok(i)) => Ok(Device::Cuda(i)),
            _ => bail!("device must be cpu, cuda or cuda:N, got {s:?}"),
        },
    }
}

fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

fn optimizer(policy: &Policy, lr: f64, weight_decay: f64) -> AdamW {
    AdamW::new(
        &policy.vs,
        AdamWConfig {
            lr,
            weight_decay,
            ..Default::default()
        },
    )
}

/// Runs (or continues) the whole pipeline in `run`.
pub fn run(cfg: &TrainConfig, run: &RunDir) -> Result<Outcome> {
    let device = parse_device(&cfg.device)?;
    if cfg.threads > 0 {
        reinforge_torch::tch::set_num_threads(cfg.threads as i32);
    }
    let task = ArithTask::new(cfg.task.digits);
    let latest = run.checkpoint("latest");
    let mut state = if latest.join("trainer_state.json").exists() {
        read_json::<TrainerState>(&latest.join("trainer_state.json"))?
    } else {
        TrainerState {
            phase: Phase::Sft,
            step: 0,
            task_digits: cfg.task.digits,
            sft_seconds: 0.0,
            grpo_seconds: 0.0,
        }
    };
    let resumed = state.step > 0 || state.phase != Phase::Sft;
    let policy = if resumed {
        Policy::load(&latest, device)?
    } else {
        Policy::new(&cfg.model, device, cfg.seed as i64)?
    };
    if resumed {
        eprintln!(
            "resuming {} from {:?} step {}",
            run.root.display(),
            state.phase,
            state.step
        );
    }

    // Stage 1: SFT warm-start.
    if state.phase == Phase::Sft {
        let mut opt = optimizer(&policy, cfg.sft.lr, cfg.sft.weight_decay);
        if resumed {
            opt.load(&latest.join("optimizer.safetensors"))?;
        }
        run.truncate_jsonl("sft_metrics.jsonl", state.step)?;
        let bar = progress::bar(cfg.sft.steps as u64, "sft");
        bar.set_position(state.step as u64);
        let start = Instant::now();
        let base = state.sft_seconds;
        while state.step < cfg.sft.steps {
            if interrupted() {
                state.sft_seconds = base + start.elapsed().as_secs_f64();
                run.save_checkpoint("latest", &policy, Some(&opt), &state)?;
                bar.abandon();
                return Ok(Outcome::Interrupted);
            }
            let line = sft::run_step(&policy, &mut opt, &cfg.sft, &cfg.task, cfg.seed, state.step);
            bar.set_message(format!("loss {:.3}", line.loss));
            run.append_jsonl("sft_metrics.jsonl", &line)?;
            state.step += 1;
            bar.inc(1);
            if cfg.sft.checkpoint_every > 0
                && state.step % cfg.sft.checkpoint_every == 0
                && state.step < cfg.sft.steps
            {
                state.sft_seconds = base + start.elapsed().as_secs_f64();
                run.save_checkpoint("latest", &policy, Some(&opt), &state)?;
            }
        }
        bar.finish_and_clear();
        state.sft_seconds = base + start.elapsed().as_secs_f64();
        run.save_checkpoint("sft", &policy, None, &state)?;
        state = TrainerState {
            phase: Phase::Grpo,
            step: 0,
            ..state
        };
        let opt = optimizer(&policy, cfg.grpo.lr, cfg.grpo.weight_decay);
        run.save_checkpoint("latest", &policy, Some(&opt), &state)?;
    }

    // Stage 2: evaluate the SFT model on held-out problems.
    let heldout = task.problems(
        step_seed(cfg.seed, PHASE_EVAL, 0),
        cfg.eval.problems,
        Split::Heldout,
    );
    let eval_sft_path = run.path("eval_sft.json");
    let eval_sft: EvalReport = if eval_sft_path.exists() {
        read_json(&eval_sft_path)?
    } else {
        let sft_policy = Policy::load(&run.checkpoint("sft"), device)
            .context("the SFT checkpoint is needed to evaluate before RL")?;
        seed_torch(step_seed(cfg.seed, PHASE_EVAL, 1));
        let report = evaluate(
            &sft_policy,
            &task,
            &heldout,
            &cfg.eval,
            cfg.grpo.max_completion_length,
            device,
            "after SFT",
        );
        write_json(&eval_sft_path, &report)?;
        report
    };
    eprintln!(
        "after SFT: pass@1 {:.3}  {}",
        eval_sft.pass_at_1,
        pattern_line(&eval_sft)
    );
    if interrupted() {
        return Ok(Outcome::Interrupted);
    }

    // Stage 3: GRPO (or PPO with a critic).
    let use_critic = cfg.grpo.advantage_estimator == GAE;
    let reference = if cfg.grpo.beta > 0.0 || (use_critic && cfg.ppo.kl_coef > 0.0) {
        Some(Policy::load(&run.checkpoint("sft"), device)?)
    } else {
        None
    };
    let mut opt = optimizer(&policy, cfg.grpo.lr, cfg.grpo.weight_decay);
    opt.load(&run.checkpoint("latest").join("optimizer.safetensors"))?;
    let mut critic = if use_critic {
        Some(CriticState::open(
            &run.checkpoint("latest"),
            &policy,
            &cfg.ppo,
            cfg.seed,
            state.step,
        )?)
    } else {
        None
    };
    run.truncate_jsonl("metrics.jsonl", state.step)?;
    let bar = progress::bar(cfg.grpo.steps as u64, "grpo");
    bar.set_position(state.step as u64);
    let start = Instant::now();
    let base = state.grpo_seconds;
    while state.step < cfg.grpo.steps {
        if interrupted() {
            state.grpo_seconds = base + start.elapsed().as_secs_f64();
            run.save_checkpoint_with_critic(
                "latest",
                &policy,
                Some(&opt),
                critic.as_ref(),
                &state,
            )?;
            bar.abandon();
            return Ok(Outcome::Interrupted);
        }
        let m = grpo::run_step_with_critic(
            &policy,
            reference.as_ref(),
            &mut opt,
            critic.as_mut().map(|state| grpo::CriticStep {
                state,
                cfg: &cfg.ppo,
            }),
            &task,
            &cfg.grpo,
            cfg.seed,
            state.step,
        )?;
        bar.set_message(format!(
            "reward {:.3} columns {:.2}",
            m.reward_mean, m.columns_share
        ));
        run.append_jsonl("metrics.jsonl", &m)?;
        state.step += 1;
        bar.inc(1);
        if cfg.grpo.checkpoint_every > 0
            && state.step % cfg.grpo.checkpoint_every == 0
            && state.step < cfg.grpo.steps
        {
            state.grpo_seconds = base + start.elapsed().as_secs_f64();
            run.save_checkpoint_with_critic(
                "latest",
                &policy,
                Some(&opt),
                critic.as_ref(),
                &state,
            )?;
        }
    }
    bar.finish_and_clear();
    state.grpo_seconds = base + start.elapsed().as_secs_f64();
    run.save_checkpoint_with_critic("latest", &policy, Some(&opt), critic.as_ref(), &state)?;
    run.save_checkpoint_with_critic("final", &policy, None, critic.as_ref(), &state)?;

    // Stage 4: evaluate after RL, then report.
    seed_torch(step_seed(cfg.seed, PHASE_EVAL, 2));
    let eval_rl = evaluate(
        &policy,
        &task,
        &heldout,
        &cfg.eval,
        cfg.grpo.max_completion_length,
        device,
        "after RL",
    );
    write_json(&run.path("eval_rl.json"), &eval_rl)?;
    eprintln!(
        "after RL:  pass@1 {:.3}  {}",
        eval_rl.pass_at_1,
        pattern_line(&eval_rl)
    );
    let summary = write_report(run, cfg, &state, &eval_sft, &eval_rl)?;
    Ok(Outcome::Finished(Box::new(summary)))
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
