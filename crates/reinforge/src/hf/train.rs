//! `reinforge train --model DIR --data FILE`: GRPO-family training of a Hugging Face
//! checkpoint on a prompt dataset, rewarded by a reward specification (the math verifier by
//! default). The same policy iteration as the default experiment ([`crate::grpo`]); only the
//! environment differs: prompts come from the file and rewards from `reinforge-reward`.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use rand::seq::index::sample;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use reinforge_reward::{Reward, RewardSpec, Sample};
use reinforge_sandbox::{Limits, Sandbox};
use reinforge_tasks::{read_records, DataColumns, Pattern, PromptFormat, PromptRecord};
use reinforge_torch::{copy_aux_files, generate, AdamW, AdamWConfig, LoraConfig, Policy};
use serde::{Deserialize, Serialize};

use super::{LoadedModel, PromptStyle};
use crate::config::{GrpoConfig, TrainConfig, GAE};
use crate::env::Environment;
use crate::experiment::INTERRUPTED;
use crate::rollout::Rollout;
use crate::run_dir::{read_json, write_json, RunDir};
use crate::{grpo, progress};

/// Where a data run's inputs come from (the `reinforge train --model/--data` flags).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DataRun {
    pub model: PathBuf,
    pub data: PathBuf,
    pub reward: Option<PathBuf>,
    pub prompt_column: String,
    pub answer_column: String,
    pub raw: bool,
    pub system: Option<String>,
    /// Train LoRA adapters only (saved in the PEFT layout too).
    pub lora: Option<LoraConfig>,
}

/// Prompts of a dataset, sampled with the policy and scored by a reward spec.
pub struct DataEnv<'a> {
    model: &'a LoadedModel,
    records: Vec<PromptRecord>,
    prompts: Vec<(String, Vec<i64>)>,
    reward: Reward,
}

impl<'a> DataEnv<'a> {
    /// Reads and encodes every prompt up front, so a bad row fails before training starts.
    pub fn new(
        model: &'a LoadedModel,
        run: &DataRun,
        reward: Reward,
        max_prompt: usize,
    ) -> Result<Self> {
        let columns = DataColumns {
            prompt: run.prompt_column.clone(),
            prompt_format: PromptFormat::Auto,
            answer: Some(run.answer_column.clone()),
        };
        let records = read_records(&run.data, &columns)?;
        if records.is_empty() {
            bail!("{}: no rows", run.data.display());
        }
        let style = PromptStyle {
            raw: run.raw,
            system: run.system.clone(),
        };
        let prompts = records
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let p = model.encode_prompt(&r.prompt, &style)?;
                if p.1.len() > max_prompt {
                    bail!(
                        "{} row {}: the prompt has {} tokens, over the model's {max_prompt} positions",
                        run.data.display(),
                        i + 1,
                        p.1.len()
                    );
                }
                Ok(p)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            model,
            records,
            prompts,
            reward,
        })
    }

    /// Number of prompts.
    pub fn len(&self) -> usize {
        self.records.len()
    }
}

impl Environment for DataEnv<'_> {
    /// `prompts_per_step` distinct rows drawn with `seed` (all rows when the file is smaller),
    /// `num_generations` completions each, scored by the reward spec.
    fn draw(&self, policy: &Policy, seed: u64, cfg: &GrpoConfig) -> Result<Vec<Rollout>> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let n = cfg.prompts_per_step.min(self.len());
        let rows = sample(&mut rng, self.len(), n).into_vec();
        let g = cfg.num_generations;
        let ids: Vec<Vec<i64>> = rows
            .iter()
            .flat_map(|&r| std::iter::repeat_n(self.prompts[r].1.clone(), g))
            .collect();
        let mut params = crate::rollout::sampling(
            cfg.temperature,
            cfg.top_p,
            cfg.top_k,
            cfg.max_completion_length,
        );
        params.stop_tokens = if cfg.ignore_eos {
            vec![]
        } else {
            self.model.stop_ids()
        };
        let completions = generate(
            &policy.model,
            &ids,
            &params,
            self.model.pad_id(),
            policy.device(),
        );
        let samples: Vec<Sample> = completions
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let row = rows[i / g];
                Sample {
                    prompt: self.prompts[row].0.clone(),
                    response: self.model.decode(&c.tokens).unwrap_or_default(),
                    label: self.records[row].answer.clone(),
                }
            })
            .collect();
        let scores = self
            .reward
            .score(&samples)
            .with_context(|| format!("scoring the completions of data rows {rows:?} (0-based)"))?;
        Ok(completions
            .into_iter()
            .zip(scores)
            .enumerate()
            .map(|(i, (c, s))| Rollout {
                problem: rows[i / g],
                prompt: ids[i].clone(),
                tokens: c.tokens,
                logprobs: c.logprobs,
                entropies: c.entropies,
                truncated: c.truncated,
                score: s.total,
                pattern: Pattern::Other,
            })
            .collect())
    }
}

/// `checkpoints/<tag>/trainer_state.json` of a dataset run: where to continue from.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DataState {
    /// GRPO steps completed.
    pub step: usize,
    /// Wall-clock seconds of training so far (carried across resumes).
    pub seconds: f64,
}

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

/// Runs (or, when `checkpoints/latest` exists, continues) `grpo.steps` policy iterations of
/// `cfg.grpo` on the data, writing metrics and HF-layout checkpoints (`checkpoints/latest`
/// every `grpo.checkpoint_every` steps and on Ctrl-C, with the optimiser state; then
/// `checkpoints/final`; with LoRA these hold the merged weights, and `adapter/` inside them and
/// `checkpoints/final-adapter` the PEFT adapter). Every step seeds its own randomness, so a
/// resumed run repeats an uninterrupted one.
pub fn run(cfg: &TrainConfig, data: &DataRun, run: &RunDir) -> Result<DataOutcome> {
    if cfg.grpo.advantage_estimator == GAE {
        bail!("grpo.algorithm = ppo (a critic) is not supported with --model/--data yet; use a critic-free estimator");
    }
    let device = crate::experiment::parse_device(&cfg.device)?;
    if cfg.threads > 0 {
        reinforge_torch::tch::set_num_threads(cfg.threads as i32);
    }
    write_json(&run.path(DATA_RUN_FILE), data)?;
    let latest = run.checkpoint("latest");
    let resumed = latest.join("trainer_state.json").exists();
    let mut state = if resumed {
        read_json::<DataState>(&latest.join("trainer_state.json"))?
    } else {
        DataState {
            step: 0,
            seconds: 0.0,
        }
    };
    // Training keeps f32 master weights (AdamW on bf16 weights loses small updates).
    let mut model = LoadedModel::load(&data.model, &reinforge_torch::LoadOptions::f32(device))?;
    // The KL reference is the model the run started from, also after a resume.
    let reference = (cfg.grpo.beta > 0.0)
        .then(|| model.policy.frozen_copy())
        .transpose()?;
    match (&data.lora, resumed) {
        // The adapter's own adapter_config.json sets LoRA up again.
        (Some(_), true) => model.policy.load_adapter(&latest.join("adapter"))?,
        (Some(lora), false) => {
            // libtorch's default generator is not fixed across processes: seed the adapters.
            crate::seeds::seed_torch(crate::seeds::step_seed(
                cfg.seed,
                crate::seeds::PHASE_INIT,
                0,
            ));
            model.policy.enable_lora(lora)?
        }
        (None, true) => model.policy = reinforge_torch::Policy::load(&latest, device)?,
        (None, false) => {}
    }
    let spec = match &data.reward {
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
    let reward = Reward::new(spec, sandbox).context("building the reward")?;
    let max_pos = model.policy.model.config().max_position_embeddings;
    let env = DataEnv::new(
        &model,
        data,
        reward,
        max_pos.saturating_sub(cfg.grpo.max_completion_length),
    )?;
    eprintln!("{} prompts from {}", env.len(), data.data.display());
    let mut opt = AdamW::new(
        &model.policy.vs,
        AdamWConfig {
            lr: cfg.grpo.lr,
            ..Default::default()
        },
    );
    if resumed {
        opt.load(&latest.join("optimizer.safetensors"))?;
        eprintln!("resuming {} at step {}", run.root.display(), state.step);
    }
    run.truncate_jsonl("metrics.jsonl", state.step)?;
    let bar = progress::bar(cfg.grpo.steps as u64, "grpo");
    bar.set_position(state.step as u64);
    let start = Instant::now();
    let base = state.seconds;
    let checkpoint =
        |state: &DataState, opt: &AdamW| save_resumable(&model, data, opt, state, &latest);
    while state.step < cfg.grpo.steps {
        if INTERRUPTED.load(Ordering::SeqCst) {
            state.seconds = base + start.elapsed().as_secs_f64();
            checkpoint(&state, &opt)?;
            bar.abandon();
            return Ok(DataOutcome::Interrupted);
        }
        let m = grpo::run_step(
            &model.policy,
            reference.as_ref(),
            &mut opt,
            &env,
            &cfg.grpo,
            cfg.seed,
            state.step,
        )?;
        bar.set_message(format!("reward {:.3}", m.reward_mean));
        run.append_jsonl("metrics.jsonl", &m)?;
        state.step += 1;
        bar.inc(1);
        if cfg.grpo.checkpoint_every > 0 && state.step % cfg.grpo.checkpoint_every == 0 {
            state.seconds = base + start.elapsed().as_secs_f64();
            checkpoint(&state, &opt)?;
        }
    }
    bar.finish_and_clear();
    let out = run.checkpoint("final");
    save(&model, &data.model, &out, |_| Ok(()))?;
    if data.lora.is_some() {
        let adapter = run.checkpoint("final-adapter");
        model
            .policy
            .save_adapter(&adapter, &data.model.to_string_lossy())?;
        copy_aux_files(&data.model, &adapter)?;
    }
    eprintln!(
        "trained {} steps in {:.1} s",
        cfg.grpo.steps,
        base + start.elapsed().as_secs_f64()
    );
    Ok(DataOutcome::Finished(out))
}

/// `checkpoints/latest`: the policy (HF layout), the optimiser, the step, and the LoRA
/// adapter when on (a resume rebuilds the base from the source model and loads it).
fn save_resumable(
    model: &LoadedModel,
    data: &DataRun,
    opt: &AdamW,
    state: &DataState,
    dir: &Path,
) -> Result<()> {
    save(model, &data.model, dir, |tmp| {
        opt.save(&tmp.join("optimizer.safetensors"))?;
        if data.lora.is_some() {
            model
                .policy
                .save_adapter(&tmp.join("adapter"), &data.model.to_string_lossy())?;
        }
        write_json(&tmp.join("trainer_state.json"), state)
    })
}

/// Writes the policy in the HF layout with the source's tokenizer and generation files (and
/// what `extra` adds to the directory),
/// atomically: into `<dir>.tmp`, then renamed over `dir`, so a crash never leaves half a
/// checkpoint under the name.
fn save(
    model: &LoadedModel,
    source: &Path,
    dir: &Path,
    extra: impl FnOnce(&Path) -> Result<()>,
) -> Result<()> {
    let tmp = dir.with_extension("tmp");
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).with_context(|| format!("removing {}", tmp.display()))?;
    }
    model.policy.save(&tmp)?;
    copy_aux_files(source, &tmp)?;
    extra(&tmp)?;
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    std::fs::rename(&tmp, dir)
        .with_context(|| format!("renaming {} to {}", tmp.display(), dir.display()))
}
