//! Reward models: `reinforge train-rm` (TRL's `RewardTrainer` loss on preference pairs, through
//! the one trainer), `reinforge score-rm` (rewards of jsonl rows), and the scorer behind a
//! reward spec's `type = "model"` component. Models are saved in transformers'
//! `*ForSequenceClassification` layout ([`reinforge_torch::RewardModel`]).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{bail, Context, Result};
use clap::Args;
use reinforge_hf::HfTokenizer;
use reinforge_reward::{Learned, ModelScorer, ModelSpec};
use reinforge_torch::loss::reward_model::reward_loss;
use reinforge_torch::tch::{self, Tensor};
use reinforge_torch::{copy_aux_files, LoadOptions, LoraConfig, RewardModel};
use serde::Serialize;

use super::args::{count, ModelArgs};
use super::offline::{ranks, update, Share};
use super::pairs::{
    completion_ids, completion_text, prompt_columns, read_pairs_with, step_rows, Pairs,
};
use super::PromptStyle;
use crate::run_dir::{read_json, write_json, RunDir};
use crate::trainer::{optimizer, Phase, PhaseEnd, PhasePlan, Start, StepLog, Trainer};

/// Train a reward model on preference pairs (TRL RewardTrainer's loss).
#[derive(Args, Debug)]
#[command(after_help = "\
DATA (jsonl or parquet): {\"prompt\": TEXT or [messages], \"chosen\": TEXT or [assistant messages],
                          \"rejected\": ..., \"margin\": NUMBER (optional, every row or none)}
The loss is -log σ(r_chosen - r_rejected - margin) + center_rewards_coefficient·mean((r_c + r_r)²).
metrics.jsonl logs TRL's names: loss, accuracy, margin, min_reward, mean_reward, max_reward.
The model is saved as a *ForSequenceClassification checkpoint (score.weight, one label) that
transformers' AutoModelForSequenceClassification loads; use it with `reinforge score-rm` or as
a `type = \"model\"` component of a reward spec.

EXAMPLES:
  reinforge train-rm --model ckpt --data pairs.jsonl --heldout test.jsonl --output runs/rm
  reinforge train-rm --model ckpt --data pairs.jsonl --lora-r 16 --output runs/rm-lora
  reinforge score-rm --model runs/rm/checkpoints/final --data rows.jsonl --output scored.jsonl")]
pub struct TrainRmArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Preference pairs.
    #[arg(long, value_name = "FILE")]
    pub data: PathBuf,
    /// Held-out pairs: accuracy and margin before and after training (report.json).
    #[arg(long, value_name = "FILE")]
    pub heldout: Option<PathBuf>,
    /// Run directory (checkpoints, metrics.jsonl, report.json); an existing one is resumed.
    #[arg(long, short, value_name = "DIR")]
    pub output: PathBuf,
    /// Optimizer steps.
    #[arg(long, default_value_t = 50, value_parser = count)]
    pub steps: usize,
    /// Pairs per step.
    #[arg(long, default_value_t = 8, value_parser = count)]
    pub batch_size: usize,
    /// AdamW learning rate (TRL's RewardConfig default 1e-4).
    #[arg(long, default_value_t = 1e-4, value_parser = crate::tools::positive)]
    pub lr: f64,
    #[arg(long, default_value_t = 0.0, value_parser = crate::tools::non_negative)]
    pub weight_decay: f64,
    #[arg(long, default_value_t = 1.0, value_parser = crate::tools::positive)]
    pub max_grad_norm: f64,
    /// TRL's center_rewards_coefficient: pulls rewards towards zero mean.
    #[arg(long, value_parser = crate::tools::non_negative)]
    pub center_rewards_coefficient: Option<f64>,
    /// Train LoRA adapters of this rank (and the score head) instead of every weight; the
    /// saved model has the adapters folded in.
    #[arg(long, value_name = "R")]
    pub lora_r: Option<usize>,
    #[arg(long, default_value_t = 32.0)]
    pub lora_alpha: f64,
    /// Save checkpoints/latest every this many steps (0: at the end and on Ctrl-C).
    #[arg(long, default_value_t = 0)]
    pub checkpoint_every: usize,
    /// Seeds the score head, the adapters and the pair order.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Use prompt text as is, without the chat template.
    #[arg(long)]
    pub raw: bool,
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

/// The LoRA settings of `args`: every attention and MLP projection.
fn lora_config(args: &TrainRmArgs) -> Option<LoraConfig> {
    args.lora_r.map(|r| LoraConfig {
        r,
        alpha: args.lora_alpha,
        target_modules: reinforge_torch::lora::TARGET_MODULES
            .iter()
            .map(|m| m.to_string())
            .collect(),
        dropout: 0.0,
    })
}

/// Rewards of `rows` split into chosen and rejected, and their margins.
fn batch_scores(
    rm: &RewardModel,
    pairs: &Pairs,
    rows: &[usize],
) -> (Tensor, Tensor, Option<Tensor>) {
    let s = rm.scores(&pairs.sequences(rows));
    let b = rows.len() as i64;
    (
        s.narrow(0, 0, b),
        s.narrow(0, b, b),
        batch_margins(pairs, rows),
    )
}

/// TRL's `margin` column of `rows`, when the data has one.
fn batch_margins(pairs: &Pairs, rows: &[usize]) -> Option<Tensor> {
    pairs
        .margins
        .as_ref()
        // host: margins from the data; reward_loss moves them to the device.
        .map(|m| Tensor::from_slice(&rows.iter().map(|&r| m[r]).collect::<Vec<_>>()))
}

/// Loss, accuracy and margin over every pair of `pairs`, without gradients.
fn evaluate(rm: &RewardModel, pairs: &Pairs, batch: usize, center: Option<f64>) -> Result<Heldout> {
    let _guard = tch::no_grad_guard();
    let rows: Vec<usize> = (0..pairs.len()).collect();
    let (mut c, mut r, mut m) = (vec![], vec![], vec![]);
    for chunk in rows.chunks(batch) {
        let (sc, sr, sm) = batch_scores(rm, pairs, chunk);
        c.push(sc);
        r.push(sr);
        m.extend(sm);
    }
    let margin = (!m.is_empty()).then(|| Tensor::cat(&m, 0));
    let out = reward_loss(
        &Tensor::cat(&c, 0),
        &Tensor::cat(&r, 0),
        margin.as_ref(),
        center,
    )?;
    Ok(Heldout {
        pairs: pairs.len(),
        loss: out.loss.double_value(&[]),
        accuracy: out.accuracy,
        margin: out.margin,
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
fn build_model(args: &TrainRmArgs, pad: i64, latest: &Path, resumed: bool) -> Result<RewardModel> {
    let lora = lora_config(args);
    crate::seeds::seed_torch(crate::seeds::step_seed(
        args.seed,
        crate::seeds::PHASE_INIT,
        0,
    ));
    // Training keeps float32 weights.
    let opts = LoadOptions {
        kind: reinforge_torch::Kind::Float,
        ..args.model.load_options()?
    };
    if is_reward_model(&args.model.model) {
        if lora.is_some() {
            bail!(
                "{}: LoRA on an existing reward model is not supported; train it fully or start \
                 from its causal checkpoint",
                args.model.model.display()
            );
        }
        let dir = if resumed { latest } else { &args.model.model };
        return RewardModel::load(dir, &opts);
    }
    let policy = || reinforge_torch::Policy::load_with(&args.model.model, &opts);
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
}

/// Runs `train-rm`.
pub fn train(args: &TrainRmArgs) -> Result<()> {
    // The device is checked before the output directory exists.
    args.model.load_options()?;
    let run = RunDir {
        root: args.output.clone(),
    };
    std::fs::create_dir_all(run.root.join("checkpoints"))
        .with_context(|| format!("creating {}", run.root.display()))?;
    let Start {
        latest,
        state,
        resumed,
    } = Start::open(&run, Phase::Rm)?;
    // The pairs are tokenised by the starting checkpoint's tokenizer (the one saved with the
    // reward model).
    if let Some(n) = args.model.threads {
        reinforge_torch::runtime::set_threads(n);
    }
    let dir = &args.model.model;
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
    let train = read_pairs_with(&args.data, &tokenizer, max, args.raw)?;
    let heldout = args
        .heldout
        .as_ref()
        .map(|p| read_pairs_with(p, &tokenizer, max, args.raw))
        .transpose()?;
    let rm = build_model(args, pad, &latest, resumed)?;
    // Data-parallel under torchrun: every rank starts from rank 0's weights (the new score
    // head's random init included) and reads its share of each step's pairs.
    let dp = crate::dp::Dp::from_env(rm.policy.device())?.map(std::sync::Arc::new);
    if let Some(d) = &dp {
        reinforge_torch::dist::broadcast_parameters(&d.pg, &rm.policy.vs)?;
    }
    let writes = dp.as_ref().is_none_or(|d| d.rank() == 0);
    crate::interrupt::install()?;
    let center = args.center_rewards_coefficient;
    let before = heldout
        .as_ref()
        .filter(|_| !resumed)
        .map(|h| evaluate(&rm, h, args.batch_size, center))
        .transpose()?;
    if let (Some(b), true) = (&before, writes) {
        write_json(&run.path("heldout_before.json"), b)?;
    }
    let source = args.model.model.clone();
    let lora = args.lora_r.is_some();
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
        optimizer(&rm.policy, args.lr, args.weight_decay),
        state,
        Box::new(files),
    )
    .with_model_writer(Box::new(|dir: &Path| rm.save(dir)));
    if resumed {
        trainer.resume_optimizer(&run, &latest)?;
    }
    trainer.dp = dp.clone();
    let plan = PhasePlan {
        steps: args.steps,
        checkpoint_every: args.checkpoint_every,
        metrics_file: "metrics.jsonl",
    };
    let end = trainer.run_phase(&run, &plan, |t| {
        let rows = step_rows(train.len(), args.batch_size, args.seed, t.state.step);
        t.opt.zero_grad();
        let dp = t.dp.clone();
        let mut sides = Share::new(ranks(dp.as_deref()), rows.len(), rm.policy.device()).read(
            &rows,
            2,
            |local| {
                let (c, r, _) = batch_scores(&rm, &train, local);
                vec![c, r]
            },
        )?;
        let (r, c) = (
            sides.pop().unwrap_or_default(),
            sides.pop().unwrap_or_default(),
        );
        let m = batch_margins(&train, &rows);
        let out = reward_loss(&c, &r, m.as_ref(), center)?;
        let g = update(t, &out.loss, args.max_grad_norm, args.lr)?;
        Ok(RmLine {
            step: t.state.step,
            loss: out.loss.double_value(&[]),
            accuracy: out.accuracy,
            margin: out.margin,
            min_reward: out.min_reward,
            mean_reward: out.mean_reward,
            max_reward: out.max_reward,
            grad_norm: g.grad_norm,
            nonfinite_grad_steps: usize::from(!g.stepped),
        })
    })?;
    if end == PhaseEnd::Interrupted {
        return Err(crate::interrupt::Stopped.into());
    }
    trainer.save(&run, "latest", true)?;
    let final_dir = trainer.save(&run, "final", false)?;
    if !writes {
        return Ok(());
    }
    let after = heldout
        .as_ref()
        .map(|h| evaluate(&rm, h, args.batch_size, center))
        .transpose()?;
    let before: Option<serde_json::Value> = match &heldout {
        Some(_) if run.path("heldout_before.json").exists() => {
            Some(read_json(&run.path("heldout_before.json"))?)
        }
        _ => None,
    };
    let report = serde_json::json!({"steps": args.steps, "model": final_dir,
                                    "heldout_before": before, "heldout_after": after});
    write_json(&run.path("report.json"), &report)?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}

/// Score jsonl/parquet rows with a reward model.
#[derive(Args, Debug)]
#[command(after_help = "\
ROWS (jsonl or parquet): {\"prompt\": TEXT or [messages], \"response\": TEXT or [assistant messages]}
Each row is written back with \"reward\" added (jsonl, to --output or stdout).

EXAMPLE:
  reinforge score-rm --model runs/rm/checkpoints/final --data rows.jsonl --output scored.jsonl")]
pub struct ScoreRmArgs {
    /// A *ForSequenceClassification checkpoint with one label and its tokenizer.
    #[arg(long, value_name = "DIR")]
    pub model: PathBuf,
    /// cpu, cuda or cuda:N (the model runs in float32).
    #[arg(long, default_value = "cpu")]
    pub device: String,
    #[arg(long, value_name = "FILE")]
    pub data: PathBuf,
    /// Output jsonl (default: stdout).
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// The field holding the response.
    #[arg(long, default_value = "response")]
    pub response_field: String,
    #[arg(long, default_value_t = 16, value_parser = count)]
    pub batch_size: usize,
    /// Use prompt text as is, without the chat template.
    #[arg(long)]
    pub raw: bool,
    /// Also write each row's token ids (`input_ids`): what the model read, for comparing with
    /// another implementation on identical inputs.
    #[arg(long)]
    pub emit_ids: bool,
}

/// Runs `score-rm`.
pub fn score(args: &ScoreRmArgs) -> Result<()> {
    let device = reinforge_torch::runtime::resolve_device(&args.device, "--device")?;
    let rm = RewardModel::load(&args.model, &LoadOptions::f32(device))
        .with_context(|| format!("loading the reward model in {}", args.model.display()))?;
    let tokenizer = HfTokenizer::from_dir(&args.model)
        .with_context(|| format!("loading the tokenizer in {}", args.model.display()))?;
    let style = PromptStyle {
        raw: args.raw,
        system: None,
    };
    let records = reinforge_tasks::read_records(&args.data, &prompt_columns())?;
    let mut seqs = Vec::with_capacity(records.len());
    for (i, r) in records.iter().enumerate() {
        let Some(text) = completion_text(r.extra.get(&args.response_field)) else {
            bail!(
                "{} row {}: `{}` must be a string or a list of assistant messages",
                args.data.display(),
                i + 1,
                args.response_field
            );
        };
        let mut ids = super::encode_prompt(&tokenizer, &r.prompt, &style)?.1;
        ids.extend(completion_ids(&tokenizer, &text)?);
        seqs.push(ids);
    }
    let _guard = tch::no_grad_guard();
    let mut out = String::new();
    for (chunk_rows, chunk) in records
        .chunks(args.batch_size)
        .zip(seqs.chunks(args.batch_size))
    {
        let scores = Vec::<f32>::try_from(&rm.scores(chunk))?;
        for ((r, s), ids) in chunk_rows.iter().zip(scores).zip(chunk) {
            let mut row = r.extra.clone();
            row.insert("prompt".into(), prompt_json(&r.prompt));
            row.insert("reward".into(), serde_json::json!(s));
            if args.emit_ids {
                row.insert("input_ids".into(), serde_json::json!(ids));
            }
            out.push_str(&serde_json::to_string(&row)?);
            out.push('\n');
        }
    }
    match &args.output {
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

/// A reward model behind a reward spec's `type = "model"` component: the prompt text (already
/// rendered by the policy's chat template) and the response are tokenised by the reward
/// model's own tokenizer, joined and ended with its EOS, then scored in one batch.
pub struct RmScorer {
    /// libtorch modules are not `Sync`; one forward pass at a time.
    rm: Mutex<RewardModel>,
    tokenizer: HfTokenizer,
    eos: Option<i64>,
    raw: bool,
}

impl RmScorer {
    /// Loads the reward model of `spec` (float32, CPU).
    pub fn load(spec: &ModelSpec) -> Result<Self> {
        // host: reward-model components score on the CPU, beside the trainer.
        let rm = RewardModel::load(&spec.path, &LoadOptions::f32(reinforge_torch::Device::Cpu))
            .with_context(|| format!("loading the reward model in {}", spec.path.display()))?;
        let tokenizer = HfTokenizer::from_dir(&spec.path)
            .with_context(|| format!("loading the tokenizer in {}", spec.path.display()))?;
        Ok(Self {
            rm: Mutex::new(rm),
            eos: tokenizer.eos_token_id().map(i64::from),
            tokenizer,
            raw: spec.raw,
        })
    }

    fn ids(&self, prompt: &str, response: &str) -> Result<Vec<i64>> {
        let mut ids: Vec<i64> = self
            .tokenizer
            .encode(prompt, self.raw)?
            .into_iter()
            .map(i64::from)
            .collect();
        ids.extend(
            self.tokenizer
                .encode(response, false)?
                .into_iter()
                .map(i64::from),
        );
        // OpenRLHF's queries keep the response's EOS text: add it only when missing.
        if ids.last().copied() != self.eos {
            ids.extend(self.eos);
        }
        Ok(ids)
    }
}

// SAFETY: the model sits behind a mutex, so its tensors are used by one thread at a time;
// tch tensors are `Send`.
unsafe impl Sync for RmScorer {}

impl ModelScorer for RmScorer {
    fn score(&self, prompts: &[&str], responses: &[&str]) -> Result<Vec<f64>> {
        let seqs = prompts
            .iter()
            .zip(responses)
            .map(|(p, r)| self.ids(p, r))
            .collect::<Result<Vec<_>>>()?;
        let rm = self
            .rm
            .lock()
            .map_err(|_| anyhow::anyhow!("reward model lock poisoned"))?;
        let max = rm.policy.model.config().max_position_embeddings;
        if let Some(long) = seqs.iter().find(|s| s.len() > max) {
            bail!(
                "a sample has {} tokens, more than the reward model's {max} positions",
                long.len()
            );
        }
        let _guard = tch::no_grad_guard();
        let scores = Vec::<f32>::try_from(&rm.scores(&seqs))?;
        Ok(scores.into_iter().map(f64::from).collect())
    }
}

/// The loader of learned components (`type = "model"` and `type = "judge"`), for
/// [`reinforge_reward::Reward::with_models`].
pub fn load_scorer(_name: &str, spec: Learned) -> Result<Arc<dyn ModelScorer>> {
    match spec {
        Learned::Model(m) => Ok(Arc::new(RmScorer::load(m)?)),
        Learned::Judge(j) => reinforge_train::judge::load_scorer(j),
    }
}
