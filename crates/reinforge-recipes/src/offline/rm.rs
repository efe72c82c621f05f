//! Reward models: `train-rm` (TRL's `RewardTrainer` loss on preference pairs, through the
//! one trainer, data-parallel like the preference trainers) and `score-rm` (rewards of
//! jsonl rows). Models are saved in transformers' `*ForSequenceClassification` layout
//! ([`reinforge_torch::RewardModel`]); the forward passes and loss are reinforge-torch's
//! `preference::rm`.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use reinforge_hf::HfTokenizer;
use reinforge_torch::train::preference::rm::{self as objective, RewardMetrics};
use reinforge_torch::train::preference::{Figures, Pairs};
use reinforge_torch::{copy_aux_files, Device, LoadOptions, LoraConfig, Memory, RewardModel};
use serde::Serialize;

use super::{start_run, update, OfflineOptions};
use crate::loaded::{encode_prompt, PromptStyle};
use crate::pairs::{completion_ids, completion_text, prompt_columns, read_pairs_with, step_rows};
use reinforge_train::run_dir::read_json;
use reinforge_train::seeds;
use reinforge_train::trainer::{optimizer, Phase, PhaseEnd, PhasePlan, Start, StepLog, Trainer};

/// `train-rm`'s settings: the offline trainers' common ones (its learning rate defaults to TRL's
/// RewardConfig 1e-4) and the reward model's own.
#[derive(Debug, Clone)]
pub struct RmOptions {
    pub common: OfflineOptions,
    pub weight_decay: f64,
    /// TRL's center_rewards_coefficient: pulls rewards towards zero mean.
    pub center_rewards_coefficient: Option<f64>,
    /// LoRA adapters (and the score head) instead of every weight.
    pub lora: Option<LoraConfig>,
}

/// `score-rm`'s settings.
#[derive(Debug, Clone)]
pub struct ScoreRmOptions {
    /// A `*ForSequenceClassification` checkpoint with one label and its tokenizer.
    pub model: PathBuf,
    /// Where it runs (float32), already resolved.
    pub device: Device,
    pub data: PathBuf,
    /// Output jsonl (`None`: stdout).
    pub output: Option<PathBuf>,
    /// The field holding the response.
    pub response_field: String,
    pub batch_size: usize,
    pub raw: bool,
    /// Also write each row's token ids (`input_ids`).
    pub emit_ids: bool,
}

/// The LoRA settings of rank `r`: every attention and MLP projection.
pub fn lora_config(r: usize, alpha: f64) -> LoraConfig {
    LoraConfig {
        r,
        alpha,
        target_modules: reinforge_torch::model::lora::TARGET_MODULES
            .iter()
            .map(|m| m.to_string())
            .collect(),
        dropout: 0.0,
    }
}

/// One line of `metrics.jsonl`, TRL's metric names.
#[derive(Debug, Clone, Serialize)]
pub struct RmLine {
    pub step: usize,
    pub loss: f64,
    pub accuracy: f64,
    pub margin: f64,
    pub min_reward: f64,
    pub mean_reward: f64,
    pub max_reward: f64,
    pub grad_norm: f64,
    #[serde(skip)]
    pub nonfinite_grad_steps: usize,
}

impl StepLog for RmLine {
    fn bar_message(&self) -> String {
        format!("loss {:.4} acc {:.2}", self.loss, self.accuracy)
    }

    fn nonfinite_grad_steps(&self) -> usize {
        self.nonfinite_grad_steps
    }
}

/// Held-out figures (`report.json`).
#[derive(Debug, Serialize)]
struct Heldout {
    pairs: usize,
    loss: f64,
    /// Share of pairs whose chosen response scores higher.
    accuracy: f64,
    margin: f64,
}

/// The held-out figures of `rm` on `pairs`.
fn heldout_figures(
    rm: &RewardModel,
    pairs: &Pairs,
    passes: (usize, &Memory),
    center: Option<f64>,
) -> Result<Heldout> {
    let Figures { loss, metrics: m }: Figures<RewardMetrics> =
        objective::evaluate(rm, pairs, passes, center)?;
    Ok(Heldout {
        pairs: pairs.len(),
        loss,
        accuracy: m.accuracy,
        margin: m.margin,
    })
}

/// The `config.json` of `dir`, parsed.
fn config_value(dir: &Path) -> Result<serde_json::Value> {
    let path = dir.join("config.json");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// Whether `dir` holds a `*ForSequenceClassification` checkpoint (an existing reward model).
fn is_reward_model(dir: &Path) -> bool {
    config_value(dir)
        .ok()
        .and_then(|v| v["architectures"][0].as_str().map(String::from))
        .is_some_and(|a| a.ends_with("ForSequenceClassification"))
}

/// The reward model a run starts or resumes from: a causal checkpoint gets a fresh score
/// head (seeded), an existing reward model is trained further.
fn build_model(o: &RmOptions, pad: i64, latest: &Path, resumed: bool) -> Result<RewardModel> {
    let init = seeds::torch_seed(seeds::step_seed(o.common.seed, seeds::PHASE_INIT, 0));
    // Seeded as one unit of torch's generator: the score head and adapters draw from it.
    reinforge_torch::runtime::with_seed(init, || {
        let lora = o.lora.clone();
        // Training keeps float32 weights.
        let opts = LoadOptions::f32(o.common.model.options.device);
        if is_reward_model(&o.common.model.dir) {
            if lora.is_some() {
                bail!(
                    "{}: LoRA on an existing reward model is not supported; train it fully or start \
                     from its causal checkpoint",
                    o.common.model.dir.display()
                );
            }
            let dir = if resumed { latest } else { &o.common.model.dir };
            return RewardModel::load(dir, &opts);
        }
        let policy = || reinforge_torch::Policy::load_with(&o.common.model.dir, &opts);
        Ok(match (&lora, resumed) {
            (None, false) => RewardModel::from_policy(policy()?, pad, None)?,
            (None, true) => RewardModel::load(latest, &opts)?,
            (Some(l), false) => RewardModel::from_policy(policy()?, pad, Some(l))?,
            (Some(_), true) => {
                let mut policy = policy()?;
                policy.load_adapter(&latest.join("adapter"))?;
                let mut rm = RewardModel::from_policy(policy, pad, None)?;
                rm.load_score(latest)?;
                rm
            }
        })
    })
}

/// Runs `train-rm`.
pub fn train(o: &RmOptions) -> Result<()> {
    let offline = start_run(&o.common.output, o.common.model.options.device)?;
    let run = &offline.dir;
    let Start {
        latest,
        state,
        resumed,
    } = Start::open(run, Phase::Rm)?;
    // The pairs are tokenised by the starting checkpoint's tokenizer (the one saved with the
    // reward model).
    if let Some(n) = o.common.model.threads {
        reinforge_torch::runtime::set_threads(n);
    }
    let dir = &o.common.model.dir;
    let tokenizer = HfTokenizer::from_dir(dir)
        .with_context(|| format!("loading the tokenizer in {}", dir.display()))?;
    let max = config_value(dir)?["max_position_embeddings"]
        .as_u64()
        .with_context(|| {
            format!(
                "{}/config.json: no `max_position_embeddings`",
                dir.display()
            )
        })? as usize;
    let pad = tokenizer
        .pad_token_id()
        .or(tokenizer.eos_token_id())
        .unwrap_or(0) as i64;
    let (train, heldout) = o
        .common
        .read_data(|p| read_pairs_with(p, &tokenizer, max, o.common.raw))?;
    let rm = build_model(o, pad, &latest, resumed)?;
    // Data-parallel under torchrun: every rank starts from rank 0's weights (the new score
    // head's random init included) and reads its share of each step's pairs.
    if let Some(d) = &offline.dp {
        reinforge_torch::dist::broadcast_parameters(&d.pg, &rm.policy.vs)?;
    }
    let center = o.center_rewards_coefficient;
    let before = heldout
        .as_ref()
        .filter(|_| !resumed)
        .map(|h| heldout_figures(&rm, h, (o.common.batch_size, &o.common.memory), center))
        .transpose()?;
    if let Some(b) = &before {
        offline.write_json("heldout_before.json", b)?;
    }
    let source = o.common.model.dir.clone();
    let lora = o.lora.is_some();
    let files = |dir: &Path| -> Result<()> {
        copy_aux_files(&source, dir)?;
        if lora {
            rm.policy
                .save_adapter(&dir.join("adapter"), &source.to_string_lossy())?;
        }
        Ok(())
    };
    let mut trainer = Trainer::new(
        &rm.policy,
        optimizer(&rm.policy, o.weight_decay),
        state,
        Box::new(files),
    )
    .with_model_writer(Box::new(|dir: &Path| rm.save(dir)))
    .with_tracking(o.common.tracking.clone());
    if resumed {
        trainer.resume_optimizer(run, &latest)?;
    }
    trainer.dp = offline.dp.clone();
    let plan = PhasePlan {
        steps: o.common.steps,
        checkpoint_every: o.common.checkpoint_every,
        metrics_file: "metrics.jsonl",
    };
    let end = trainer.run_phase(run, &plan, |t| {
        let rows = step_rows(
            train.len(),
            o.common.batch_size,
            o.common.seed,
            t.state.step,
        );
        t.opt.zero_grad();
        let (f, g) = objective::step(update(t, &o.common), &rm, (&train, &rows), center)?;
        Ok(RmLine {
            step: t.state.step,
            loss: f.loss,
            accuracy: f.metrics.accuracy,
            margin: f.metrics.margin,
            min_reward: f.metrics.min_reward,
            mean_reward: f.metrics.mean_reward,
            max_reward: f.metrics.max_reward,
            grad_norm: g.grad_norm,
            nonfinite_grad_steps: usize::from(!g.stepped),
        })
    })?;
    if end == PhaseEnd::Interrupted {
        return Err(reinforge_train::interrupt::Stopped.into());
    }
    trainer.save(run, "latest", true)?;
    let final_dir = trainer.save(run, "final", false)?;
    if !offline.writes() {
        return Ok(());
    }
    let after = heldout
        .as_ref()
        .map(|h| heldout_figures(&rm, h, (o.common.batch_size, &o.common.memory), center))
        .transpose()?;
    let before: Option<serde_json::Value> = match &heldout {
        Some(_) if run.path("heldout_before.json").exists() => {
            Some(read_json(&run.path("heldout_before.json"))?)
        }
        _ => None,
    };
    let report = serde_json::json!({"steps": o.common.steps, "model": final_dir,
                                    "heldout_before": before, "heldout_after": after});
    offline.finish(&report)
}

/// Runs `score-rm`.
pub fn score(o: &ScoreRmOptions) -> Result<()> {
    let device = o.device;
    let rm = RewardModel::load(&o.model, &LoadOptions::f32(device))
        .with_context(|| format!("loading the reward model in {}", o.model.display()))?;
    let tokenizer = HfTokenizer::from_dir(&o.model)
        .with_context(|| format!("loading the tokenizer in {}", o.model.display()))?;
    let style = PromptStyle {
        raw: o.raw,
        system: None,
    };
    let records = reinforge_tasks::read_records(&o.data, &prompt_columns())?;
    let mut seqs = Vec::with_capacity(records.len());
    for (i, r) in records.iter().enumerate() {
        let Some(text) = completion_text(r.extra.get(&o.response_field)) else {
            bail!(
                "{} row {}: `{}` must be a string or a list of assistant messages",
                o.data.display(),
                i + 1,
                o.response_field
            );
        };
        let mut ids = encode_prompt(&tokenizer, &r.prompt, &style)?.1;
        ids.extend(completion_ids(&tokenizer, &text)?);
        seqs.push(ids);
    }
    let mut out = String::new();
    for (chunk_rows, chunk) in records.chunks(o.batch_size).zip(seqs.chunks(o.batch_size)) {
        let scores = rm.score_rows(chunk)?;
        for ((r, s), ids) in chunk_rows.iter().zip(scores).zip(chunk) {
            let mut row = r.extra.clone();
            row.insert("prompt".into(), prompt_json(&r.prompt));
            row.insert("reward".into(), serde_json::json!(s));
            if o.emit_ids {
                row.insert("input_ids".into(), serde_json::json!(ids));
            }
            out.push_str(&serde_json::to_string(&row)?);
            out.push('\n');
        }
    }
    match &o.output {
        Some(p) => std::fs::write(p, out).with_context(|| format!("writing {}", p.display()))?,
        None => print!("{out}"),
    }
    Ok(())
}

/// A prompt as its column held it: text, or the messages.
fn prompt_json(p: &reinforge_tasks::data::Prompt) -> serde_json::Value {
    match p {
        reinforge_tasks::data::Prompt::Text(t) => serde_json::json!(t),
        reinforge_tasks::data::Prompt::Messages(m) => serde_json::json!(m
            .iter()
            .map(|m| serde_json::json!({"role": m.role, "content": m.content}))
            .collect::<Vec<_>>()),
    }
}
