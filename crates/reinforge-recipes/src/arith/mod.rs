//! The default experiment on the built-in arithmetic task: SFT warm-start on a mixture of two
//! solution patterns, held-out evaluation, RL (any preset; PPO's critic is created from the
//! SFT model), evaluation again, report. Every stage checkpoints through the trainer, so an
//! interrupted run continues with `--resume` exactly where it stopped. The task's particulars
//! (patterns, the character tokenizer, pass@k by pattern) live in this module only.

pub mod bench;
pub mod env;
pub mod evaluate;
pub mod report;
pub mod retry;
pub mod sft_data;

use std::path::Path;

use anyhow::{Context, Result};
use reinforge_tasks::Split;
use reinforge_torch::runtime::{resolve_device, set_threads};
use reinforge_torch::Policy;

use self::env::ArithEnv;
use self::evaluate::{evaluate, EvalReport};
use self::report::{write_report, Summary};
use reinforge_train::config::TrainConfig;
use reinforge_train::env::Environment;
use reinforge_train::run_dir::{read_json, write_json, RunDir};
use reinforge_train::seeds::{seed_torch, step_seed, PHASE_EVAL};
use reinforge_train::trainer::checkpoint::OPTIMIZER_FILE;
use reinforge_train::trainer::{
    check_positions, optimizer, Phase, PhaseEnd, PhasePlan, Start, Trainer,
};
use reinforge_train::{rl, sft};

/// How a call to [`run`] ended.
pub enum Outcome {
    Finished(Box<Summary>),
    /// Stopped by Ctrl-C after saving `checkpoints/latest`.
    Interrupted,
    /// A data-parallel rank other than 0 finished its share (rank 0 reports).
    Rank,
}

/// Checks that the task's prompts, SFT examples and completions fit the model's positions.
fn check_model_fits(cfg: &TrainConfig, env: &ArithEnv) -> Result<()> {
    let positions = cfg.model.max_position_embeddings;
    check_positions(
        env.max_prompt_len(),
        cfg.grpo.max_completion_length,
        positions,
        &env.describe_longest_prompt(),
    )?;
    let sft = sft_data::longest_example(cfg.task.digits);
    if sft > positions {
        anyhow::bail!(
            "task.digits = {}: an SFT example has {sft} tokens, over model.max_position_embeddings = {positions}",
            cfg.task.digits
        );
    }
    Ok(())
}

/// Runs (or continues) the whole pipeline in `run`.
pub fn run(cfg: &TrainConfig, run: &RunDir) -> Result<Outcome> {
    let env = ArithEnv::new(cfg.task.digits)
        .with_attempts(cfg.task.attempts, cfg.grpo.max_completion_length);
    run_with_env(cfg, run, env)
}

/// [`run`] with a prepared environment (e.g. one holding DERL's composed reward).
pub fn run_with_env(cfg: &TrainConfig, run: &RunDir, env: ArithEnv) -> Result<Outcome> {
    let device = resolve_device(&cfg.device, "config key `device`")?;
    reinforge_torch::precision::set_bf16(cfg.bf16)?;
    set_threads(cfg.threads);
    if !cfg.vision_freeze {
        anyhow::bail!(
            "vision_freeze = false: the arithmetic task's model has no vision tower to train"
        );
    }
    check_model_fits(cfg, &env)?;
    let start = Start::open(run, Phase::Sft)?;
    // A state saved at SFT step 0 holds the initial weights, which Policy::new makes again.
    let resumed = start.has_progress(Phase::Sft);
    let Start { latest, state, .. } = start;
    let policy = if resumed {
        Policy::load(&latest, device)?
    } else {
        Policy::new(&cfg.model, device, cfg.seed as i64)?
    };
    // One rank of a data-parallel job (torchrun's variables): every rank starts from rank 0's
    // weights.
    let dp = reinforge_train::dp::Dp::from_env(device)?.map(std::sync::Arc::new);
    if dp.is_some() && cfg.task.attempts > 1 {
        anyhow::bail!(
            "task.attempts > 1 (multi-turn episodes) is not supported with data-parallel ranks yet"
        );
    }
    if let Some(d) = &dp {
        reinforge_torch::dist::broadcast_parameters(&d.pg, &policy.vs)?;
        if d.rank() == 0 {
            eprintln!("data-parallel: {} ranks (Gloo)", d.world());
        }
    }
    if resumed {
        eprintln!(
            "resuming {} from {:?} step {}",
            run.root.display(),
            state.phase,
            state.step
        );
    }
    let opt = optimizer(&policy, cfg.sft.weight_decay);
    let mut trainer = Trainer::new(
        &policy,
        opt,
        state,
        Box::new(|dir: &Path| env.save_files(dir)),
    )
    .stop_after_nonfinite_steps(cfg.max_nonfinite_steps);
    trainer.dp = dp.clone();
    trainer.zero1 = cfg.zero_stage == 1;
    let sft_rows = match &dp {
        Some(d) => d.rows(cfg.sft.batch_size, "sft.batch_size")?,
        None => 0..cfg.sft.batch_size,
    };

    // Stage 1: SFT warm-start.
    if trainer.state.phase == Phase::Sft {
        if resumed {
            trainer.opt.load(&latest.join(OPTIMIZER_FILE))?;
        }
        trainer.shard_optimizer();
        let plan = PhasePlan {
            steps: cfg.sft.steps,
            checkpoint_every: cfg.sft.checkpoint_every,
            metrics_file: "sft_metrics.jsonl",
        };
        let end = trainer.run_phase(run, &plan, |t| {
            let batch = sft_data::sft_batch_rows(
                &cfg.task,
                cfg.sft.batch_size,
                cfg.seed,
                t.state.step,
                t.policy.device(),
                sft_rows.clone(),
            );
            sft::run_step(t, &cfg.sft, &batch, &cfg.memory)
        })?;
        if end == PhaseEnd::Interrupted {
            return Ok(Outcome::Interrupted);
        }
        trainer.save(run, "sft", false)?;
        let opt = optimizer(&policy, cfg.grpo.weight_decay);
        trainer.start_phase(Phase::Rl, opt);
        trainer.save(run, "latest", true)?;
    }

    // Stage 2: evaluate the SFT model on held-out problems.
    let heldout = env.task.problems(
        step_seed(cfg.seed, PHASE_EVAL, 0),
        cfg.eval.problems,
        Split::Heldout,
    );
    let eval_sft_path = run.path("eval_sft.json");
    if let Some(d) = dp.as_ref().filter(|d| d.rank() != 0) {
        // Rank 0 saved the SFT checkpoint and evaluates; the other ranks wait for it, learn
        // whether any rank was interrupted (this all-reduce is the wait), and go on to RL.
        if reinforge_train::interrupt::interrupted_on_any(Some(d))? {
            return Ok(Outcome::Interrupted);
        }
        return rl_rank(cfg, run, &env, &mut trainer, &latest, device);
    }
    let eval_sft: EvalReport = if eval_sft_path.exists() {
        read_json(&eval_sft_path)?
    } else {
        let sft_policy = Policy::load(&run.checkpoint("sft"), device)
            .context("the SFT checkpoint is needed to evaluate before RL")?;
        seed_torch(step_seed(cfg.seed, PHASE_EVAL, 1));
        let report = evaluate(
            &sft_policy,
            &env.task,
            &heldout,
            &cfg.eval,
            cfg.grpo.max_completion_length,
            "after SFT",
        );
        write_json(&eval_sft_path, &report)?;
        report
    };
    eprintln!(
        "after SFT: pass@1 {:.3}  {}",
        eval_sft.pass_at_1,
        evaluate::pattern_line(&eval_sft)
    );
    // The other ranks wait in the same all-reduce, so a Ctrl-C on any rank stops all here.
    if reinforge_train::interrupt::interrupted_on_any(dp.as_deref())? {
        return Ok(Outcome::Interrupted);
    }

    // Stage 3: RL (PPO with a critic for the `gae` estimator).
    if rl::needs_reference(&cfg.grpo, &cfg.ppo) {
        trainer.reference = Some(Policy::load(&run.checkpoint("sft"), device)?);
    }
    trainer.opt = optimizer(&policy, cfg.grpo.weight_decay);
    trainer.opt.load(&latest.join(OPTIMIZER_FILE))?;
    trainer.shard_optimizer();
    if dp.is_some() {
        eprintln!(
            "rank 0 optimizer state: {:.2} MB (zero_stage = {})",
            trainer.opt.state_bytes() as f64 / 1e6,
            cfg.zero_stage
        );
    }
    if rl::run_phase(&mut trainer, run, &env, cfg, &latest)? == PhaseEnd::Interrupted {
        return Ok(Outcome::Interrupted);
    }
    trainer.save(run, "final", false)?;
    if let Some(d) = &dp {
        d.barrier()?;
    }

    // Stage 4: evaluate after RL, then report.
    seed_torch(step_seed(cfg.seed, PHASE_EVAL, 2));
    let eval_rl = evaluate(
        &policy,
        &env.task,
        &heldout,
        &cfg.eval,
        cfg.grpo.max_completion_length,
        "after RL",
    );
    write_json(&run.path("eval_rl.json"), &eval_rl)?;
    eprintln!(
        "after RL:  pass@1 {:.3}  {}",
        eval_rl.pass_at_1,
        evaluate::pattern_line(&eval_rl)
    );
    let summary = write_report(run, cfg, &trainer.state, &eval_sft, &eval_rl)?;
    trainer.track_report(run);
    Ok(Outcome::Finished(Box::new(summary)))
}

/// The RL phase on a data-parallel rank other than 0: it trains its share of every step and
/// leaves evaluation, reports and checkpoints to rank 0.
fn rl_rank(
    cfg: &TrainConfig,
    run: &RunDir,
    env: &ArithEnv,
    trainer: &mut Trainer,
    latest: &Path,
    device: reinforge_torch::Device,
) -> Result<Outcome> {
    if rl::needs_reference(&cfg.grpo, &cfg.ppo) {
        trainer.reference = Some(Policy::load(&run.checkpoint("sft"), device)?);
    }
    trainer.opt = optimizer(trainer.policy, cfg.grpo.weight_decay);
    trainer.opt.load(&latest.join(OPTIMIZER_FILE))?;
    trainer.shard_optimizer();
    if rl::run_phase(trainer, run, env, cfg, latest)? == PhaseEnd::Interrupted {
        return Ok(Outcome::Interrupted);
    }
    if let Some(d) = &trainer.dp {
        d.barrier()?;
    }
    Ok(Outcome::Rank)
}
