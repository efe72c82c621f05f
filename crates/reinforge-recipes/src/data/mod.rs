//! `reinforge train --model DIR --data FILE`: GRPO-family training of a Hugging Face
//! checkpoint on a prompt dataset, rewarded by a reward specification (the math verifier by
//! default). The same trainer and policy iteration as the default experiment
//! ([`reinforge_train::trainer`], [`reinforge_train::rl`]); only the environment differs: prompts come from the
//! file and rewards from `reinforge-reward`.

pub mod calculator;
mod canary;
pub mod env;
pub mod evaluate;
pub mod report;

use anyhow::{bail, Context, Result};
use reinforge_reward::{ModelLoader, Reward, RewardSpec};
use reinforge_sandbox::{Limits, Sandbox};
use reinforge_torch::runtime::{resolve_device, set_threads};
use reinforge_torch::Policy;
use std::path::{Path, PathBuf};

use crate::loaded::LoadedModel;
use evaluate::{evaluate, DataEvalReport};
use reinforge_train::config::TrainConfig;
use reinforge_train::env::{sampling_params, Environment};
use reinforge_train::rl;
use reinforge_train::run_dir::{read_json, write_json, RunDir};
use reinforge_train::trainer::{optimizer, save_final_adapter, Phase, PhaseEnd, Start, Trainer};
use report::write_report;

use env::{DataEnv, DataRun};

/// How a dataset run ended.
pub enum DataOutcome {
    /// All steps done; the trained checkpoint's directory.
    Finished(PathBuf),
    /// Stopped by Ctrl-C after saving `checkpoints/latest`.
    Interrupted,
}

/// The run's inputs, stored in the run directory so `--resume` needs nothing else.
pub const DATA_RUN_FILE: &str = "data_run.json";

/// Whether `run` is a dataset run (it holds [`DATA_RUN_FILE`]).
pub fn is_data_run(run: &RunDir) -> bool {
    run.path(DATA_RUN_FILE).exists()
}

/// What a run on rows with images cannot do yet, refused before the first step: rollouts on
/// remote engines (they are sent token ids, not images) and PPO's critic (text only).
fn refuse_with_images(cfg: &TrainConfig, data: &Path) -> Result<()> {
    if !cfg.rollout.base_urls.is_empty() {
        bail!(
            "{}: rows with images are sampled in the trainer's process only so far; drop rollout.base_urls",
            data.display()
        );
    }
    if cfg.grpo.advantage_estimator == reinforge_train::config::GAE {
        bail!(
            "{}: rows with images: rl.advantage_estimator = \"gae\" (PPO's critic) reads text only so far; use an outcome estimator (grpo, rloo, reinforce_plus_plus, ...)",
            data.display()
        );
    }
    Ok(())
}

/// Runs (or, when `checkpoints/latest` exists, continues) `rl.steps` policy iterations of
/// `cfg.grpo` on the data through the trainer, writing metrics and HF-layout checkpoints with
/// the source's tokenizer files (`checkpoints/latest` every `rl.checkpoint_every` steps, on
/// Ctrl-C and at the end, with the optimiser state; then `checkpoints/final`; with LoRA these
/// hold the merged weights, `adapter/` inside them the PEFT adapter, and
/// `checkpoints/final-adapter` the adapter alone). Every step seeds its own randomness, so a
/// resumed run repeats an uninterrupted one. `rl.algorithm = ppo` trains a critic created
/// from the loaded model, saved and resumed with it. Learned reward components (`type =
/// "model"`, `"judge"`) are loaded by `scorers` (the binary's, which hold tensors).
pub fn run(
    cfg: &TrainConfig,
    data: &DataRun,
    run: &RunDir,
    scorers: ModelLoader,
) -> Result<DataOutcome> {
    let device = resolve_device(&cfg.device, "config key `device`")?;
    reinforge_torch::precision::set_bf16(cfg.bf16)?;
    set_threads(cfg.threads);
    // One rank of a data-parallel job (torchrun's variables): rank 0 writes the run's files.
    let dp = reinforge_train::dp::Dp::from_env(device)?.map(std::sync::Arc::new);
    let writes = dp.as_ref().is_none_or(|d| d.rank() == 0);
    if dp.is_some() && data.tools.is_some() {
        bail!("--tools (multi-turn episodes) is not supported with data-parallel ranks yet");
    }
    if writes {
        write_json(&run.path(DATA_RUN_FILE), data)?;
    }
    let start = Start::open(run, Phase::Rl)?;
    // Training keeps f32 master weights (AdamW on bf16 weights loses small updates).
    let mut model = LoadedModel::load(&data.model, &reinforge_torch::LoadOptions::f32(device))?;
    // The KL reference is the model the run started from, also after a resume.
    let reference = rl::needs_reference(&cfg.grpo, &cfg.ppo)
        .then(|| model.policy.frozen_copy())
        .transpose()?;
    start.prepare_policy(&mut model.policy, data.lora.as_ref(), cfg.seed)?;
    crate::offline::set_vision_training(&model.policy, cfg.vision_freeze, data.lora.is_some())?;
    let Start {
        latest,
        state,
        resumed,
    } = start;
    let reward = build_reward(data, scorers)?;
    let env = DataEnv::new(&model, data, reward, cfg.grpo.max_completion_length)?;
    if env.has_images() {
        refuse_with_images(cfg, &data.data)?;
    }
    eprintln!("{} prompts from {}", env.len(), data.data.display());
    if let Some(d) = &dp {
        reinforge_torch::dist::broadcast_parameters(&d.pg, &model.policy.vs)?;
    }
    // Held-out evaluations run on rank 0; the others wait at a barrier.
    let heldout = heldout_env(&model, data, cfg, scorers)?.filter(|_| writes);
    if let Some(h) = &heldout {
        evaluate_base(h, &model.policy, cfg, run, resumed)?;
    }
    if let Some(d) = &dp {
        d.barrier()?;
    }
    let files = |dir: &Path| -> Result<()> {
        env.save_files(dir)?;
        if data.lora.is_some() {
            model
                .policy
                .save_adapter(&dir.join("adapter"), &data.model.to_string_lossy())?;
        }
        Ok(())
    };
    let opt = optimizer(&model.policy, cfg.grpo.weight_decay);
    let mut trainer = Trainer::new(&model.policy, opt, state, Box::new(files))
        .stop_after_nonfinite_steps(cfg.max_nonfinite_steps);
    trainer.reference = reference;
    trainer.dp = dp.clone();
    trainer.zero1 = cfg.zero_stage == 1;
    if resumed {
        trainer.resume_optimizer(run, &latest)?;
    }
    trainer.shard_optimizer();
    if writes && dp.is_some() {
        eprintln!(
            "rank 0 optimizer state: {:.2} MB (zero_stage = {})",
            trainer.opt.state_bytes() as f64 / 1e6,
            cfg.zero_stage
        );
    }
    if rl::run_phase(&mut trainer, run, &env, cfg, &latest)? == PhaseEnd::Interrupted {
        return Ok(DataOutcome::Interrupted);
    }
    let out = trainer.save(run, "final", false)?;
    if let Some(d) = &dp {
        d.barrier()?;
        if !writes {
            return Ok(DataOutcome::Finished(out));
        }
    }
    if data.lora.is_some() {
        save_final_adapter(run, &model.policy, &data.model)?;
    }
    eprintln!(
        "trained {} steps in {:.1} s",
        cfg.grpo.steps, trainer.state.grpo_seconds
    );
    if let Some(h) = &heldout {
        evaluate_trained(h, &model.policy, cfg, run)?;
        trainer.track_report(run);
    }
    Ok(DataOutcome::Finished(out))
}

/// The held-out set of `--heldout`, read and encoded like the training data.
fn heldout_env<'a>(
    model: &'a LoadedModel,
    data: &DataRun,
    cfg: &TrainConfig,
    scorers: ModelLoader,
) -> Result<Option<DataEnv<'a>>> {
    let Some(path) = &data.heldout else {
        return Ok(None);
    };
    let spec = DataRun {
        data: path.clone(),
        ..data.clone()
    };
    let env = DataEnv::new(
        model,
        &spec,
        build_reward(data, scorers)?,
        cfg.grpo.max_completion_length,
    )?;
    eprintln!("{} held-out prompts from {}", env.len(), path.display());
    Ok(Some(env))
}

/// Seeds torch for a held-out evaluation (the same seed before and after training, so the two
/// differ by the weights only) and returns its sampling: `eval.temperature`, the training
/// length limit.
fn seeded_eval_params(env: &DataEnv, cfg: &TrainConfig) -> reinforge_torch::SamplingParams {
    reinforge_train::seeds::seed_torch(reinforge_train::seeds::step_seed(
        cfg.seed,
        reinforge_train::seeds::PHASE_EVAL,
        0,
    ));
    let mut grpo = cfg.grpo.clone();
    grpo.temperature = cfg.eval.temperature;
    grpo.top_p = 1.0;
    grpo.top_k = 0;
    sampling_params(&grpo, env.stop_ids())
}

/// `eval_base.json`: the model before training (skipped when it exists; on a resume without
/// it the weights are no longer the base model's, so it is reported missing).
fn evaluate_base(
    env: &DataEnv,
    policy: &Policy,
    cfg: &TrainConfig,
    run: &RunDir,
    resumed: bool,
) -> Result<()> {
    let path = run.path("eval_base.json");
    if path.exists() {
        return Ok(());
    }
    if resumed {
        eprintln!("no eval_base.json in the resumed run: the report will be skipped");
        return Ok(());
    }
    let report = evaluate(
        env,
        policy,
        &cfg.eval,
        &seeded_eval_params(env, cfg),
        "base",
    )?;
    eprintln!(
        "base model: pass@1 {:.3}, pass@{} {:.3} on {} held-out prompts ({:.0} s)",
        report.pass_at_1,
        report.samples_per_prompt,
        report.pass_at_k.last().map_or(0.0, |p| p.1),
        report.prompts,
        report.seconds
    );
    write_json(&path, &report)
}

/// `eval_rl.json`, then the report comparing it with `eval_base.json`.
fn evaluate_trained(env: &DataEnv, policy: &Policy, cfg: &TrainConfig, run: &RunDir) -> Result<()> {
    let report = evaluate(
        env,
        policy,
        &cfg.eval,
        &seeded_eval_params(env, cfg),
        "trained",
    )?;
    write_json(&run.path("eval_rl.json"), &report)?;
    let base_path = run.path("eval_base.json");
    if !base_path.exists() {
        return Ok(());
    }
    let base: DataEvalReport = read_json(&base_path)?;
    let summary = write_report(run, &base, &report, cfg.seed)?;
    eprintln!(
        "{}
report: {}",
        summary.claim,
        run.path("report.md").display()
    );
    Ok(())
}

/// The reward of `--reward` (default: the math verifier), with a working sandbox when a
/// component runs code.
fn build_reward(data: &DataRun, scorers: ModelLoader) -> Result<Reward> {
    reward_from_spec(data.reward.as_deref(), scorers)
}

/// The reward of the spec file at `path` (the default math reward without one), with the
/// sandbox its code-test components need and its learned components loaded by `scorers`.
pub fn reward_from_spec(path: Option<&Path>, scorers: ModelLoader) -> Result<Reward> {
    let spec = match path {
        Some(p) => RewardSpec::load(p)?,
        None => RewardSpec::default(),
    };
    // Code-test rewards run the completions in the sandbox, with its default limits capped by
    // each component's own timeout and memory.
    let sandbox = if spec.needs_sandbox() {
        let sb = Sandbox::new(Limits::default()).context("starting the code sandbox")?;
        sb.self_test()
            .context("the code sandbox cannot run programs on this host")?;
        Some(sb)
    } else {
        None
    };
    Reward::with_models(spec, sandbox, scorers).context("building the reward")
}
