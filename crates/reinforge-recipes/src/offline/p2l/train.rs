//! `train-p2l` through the one trainer (phase `p2l`): a seeded shuffle of the battles per
//! epoch, one optimizer step per batch, checkpoints of the backbone and heads (with the P2L
//! config and tokenizer, so `reinforge p2l` reads any of them), resume from
//! `checkpoints/latest`, then the held-out comparison with the single global leaderboard
//! (`report.json`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use reinforge_tasks::data::Prompt;
use reinforge_torch::copy_aux_files;
use reinforge_torch::train::loss::p2l::P2lLoss;
use reinforge_torch::train::p2l::{GlobalFit, P2lModel};
use serde::{Deserialize, Serialize};

use super::battles::{encode, models_of, read_battles, Encoded};
use super::{P2lConfig, P2L_CONFIG};
use crate::loaded::{LoadedModel, ModelSource, PromptStyle};
use reinforge_train::run_dir::{write_json, RunDir};
use reinforge_train::trainer::{
    optimizer, Phase, PhaseEnd, PhasePlan, Start, StepLog, Tracking, Trainer,
};

/// What `train-p2l` is asked.
#[derive(Debug, Clone)]
pub struct TrainOptions {
    pub model: ModelSource,
    /// Battles to train on, and held-out ones for the comparison with the global leaderboard.
    pub battles: PathBuf,
    pub heldout: Option<PathBuf>,
    /// The run directory (an existing one is resumed).
    pub output: PathBuf,
    pub loss: P2lLoss,
    pub epochs: usize,
    /// Battles per optimizer step.
    pub batch_size: usize,
    pub lr: f64,
    pub max_grad_norm: f64,
    /// Save `checkpoints/latest` every this many steps (0: at the end and on Ctrl-C).
    pub checkpoint_every: usize,
    /// Seeds the heads and the battle order.
    pub seed: u64,
    /// Prompt text as is, without the chat template.
    pub raw: bool,
    /// TensorBoard and MLflow, with the command's options as parameters.
    pub tracking: Tracking,
}

/// One line of `metrics.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct P2lLine {
    step: usize,
    epoch: usize,
    loss: f64,
    /// Battles in the step's batch.
    battles: usize,
    grad_norm: f64,
    #[serde(skip)]
    nonfinite_grad_steps: usize,
}

impl StepLog for P2lLine {
    fn bar_message(&self) -> String {
        format!("loss {:.4}", self.loss)
    }

    fn nonfinite_grad_steps(&self) -> usize {
        self.nonfinite_grad_steps
    }
}

/// What `train-p2l` measured (`report.json`).
#[derive(Debug, Serialize)]
struct P2lReport {
    loss: P2lLoss,
    models: usize,
    battles: usize,
    dropped_ties: usize,
    epoch_train_loss: Vec<f64>,
    heldout_battles: Option<usize>,
    /// Mean negative log-likelihood per held-out battle: P2L, and the single global leaderboard
    /// fitted to the training battles under the same loss.
    heldout_nll_p2l: Option<f64>,
    heldout_nll_global: Option<f64>,
}

/// The model, its competitors and the encoded battles.
struct Data {
    loaded: LoadedModel,
    models: Vec<String>,
    train: Encoded,
    heldout: Option<Encoded>,
}

/// Loads the model and reads and encodes the battles (the model list is the training
/// battles').
fn prepare(opts: &TrainOptions) -> Result<Data> {
    let loaded = opts.model.load()?;
    let battles = read_battles(&opts.battles)?;
    let models = models_of(&battles);
    let style = PromptStyle {
        raw: opts.raw,
        system: None,
    };
    let tok = |p: &Prompt| -> Result<Vec<i64>> { Ok(loaded.encode_prompt(p, &style)?.1) };
    let train = encode(&battles, &models, opts.loss, &tok, &opts.battles)?;
    let heldout = match &opts.heldout {
        Some(p) => Some(encode(&read_battles(p)?, &models, opts.loss, &tok, p)?),
        None => None,
    };
    Ok(Data {
        loaded,
        models,
        train,
        heldout,
    })
}

/// Runs `train-p2l`: trains (or resumes) in `opts.output`, then writes and prints the report.
pub fn train(opts: &TrainOptions) -> Result<()> {
    let data = prepare(opts)?;
    let run = RunDir {
        root: opts.output.clone(),
    };
    std::fs::create_dir_all(run.root.join("checkpoints"))
        .with_context(|| format!("creating {}", run.root.display()))?;
    let start = Start::open(&run, Phase::P2l)?;
    let p2l = build_model(opts, &data, &start)?;
    reinforge_train::interrupt::install()?;
    let lines = fit(opts, &run, &data, &p2l, start)?;
    let report = report(opts, &data, &p2l, &lines)?;
    write_json(&run.path("report.json"), &report)?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}

/// The P2L model a run starts from (the loaded backbone, fresh seeded heads) or resumes from
/// (`checkpoints/latest`).
fn build_model(opts: &TrainOptions, data: &Data, start: &Start) -> Result<P2lModel> {
    let (policy, n, seed) = (&data.loaded.policy, data.models.len(), opts.seed as i64);
    if !start.resumed {
        return P2lModel::from_policy(policy, n, opts.loss, seed);
    }
    let mut p2l = P2lModel::new(policy.model.config(), n, opts.loss, policy.device(), seed)?;
    p2l.load(&start.latest)?;
    Ok(p2l)
}

/// Each epoch's battle order: one seeded generator shuffles every epoch in turn, so step `k`
/// draws the same rows in a resumed run.
fn epoch_orders(n: usize, epochs: usize, seed: u64) -> Vec<Vec<usize>> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..epochs)
        .map(|_| {
            let mut order: Vec<usize> = (0..n).collect();
            order.shuffle(&mut rng);
            order
        })
        .collect()
}

/// Trains through the one trainer; returns every step's line (those before a resume read
/// back from `metrics.jsonl`). Ctrl-C saves `latest` and returns [`reinforge_train::interrupt::Stopped`].
fn fit(
    opts: &TrainOptions,
    run: &RunDir,
    data: &Data,
    p2l: &P2lModel,
    start: Start,
) -> Result<Vec<P2lLine>> {
    let (n, batch) = (data.train.len(), opts.batch_size);
    let per_epoch = n.div_ceil(batch);
    let orders = epoch_orders(n, opts.epochs, opts.seed);
    let mut lines: Vec<P2lLine> = run.read_jsonl("metrics.jsonl")?;
    lines.truncate(if start.resumed { start.state.step } else { 0 });
    let mut trainer = trainer(opts, data, p2l, run, &start)?;
    let plan = PhasePlan {
        steps: opts.epochs * per_epoch,
        checkpoint_every: opts.checkpoint_every,
        metrics_file: "metrics.jsonl",
    };
    let pad = data.loaded.pad_id();
    let end = trainer.run_phase(run, &plan, |t| {
        let (step, epoch) = (t.state.step, t.state.step / per_epoch);
        let first = (step % per_epoch) * batch;
        let rows = &orders[epoch][first..(first + batch).min(n)];
        let (prompts, labels) = (data.train.prompts(rows), data.train.labels(rows));
        let hyper = (opts.max_grad_norm, opts.lr);
        let (loss, g) = p2l.train_step(&mut t.opt, &prompts, &labels, pad, hyper)?;
        let line = P2lLine {
            step,
            epoch,
            loss,
            battles: rows.len(),
            grad_norm: g.grad_norm,
            nonfinite_grad_steps: usize::from(!g.stepped),
        };
        lines.push(line.clone());
        Ok(line)
    })?;
    if end == PhaseEnd::Interrupted {
        return Err(reinforge_train::interrupt::Stopped.into());
    }
    trainer.save(run, "latest", true)?;
    trainer.save(run, "final", false)?;
    drop(trainer);
    Ok(lines)
}

/// The trainer of `p2l`: checkpoints hold its weights (backbone and heads), `config.json`,
/// the P2L config and the source's tokenizer files.
fn trainer<'a>(
    opts: &'a TrainOptions,
    data: &'a Data,
    p2l: &'a P2lModel,
    run: &RunDir,
    start: &Start,
) -> Result<Trainer<'a>> {
    let config = P2lConfig {
        models: data.models.clone(),
        loss: opts.loss,
        raw: opts.raw,
        source: opts.model.dir.clone(),
    };
    let writer = move |dir: &Path| -> Result<()> {
        p2l.save(dir)?;
        let model_config = data.loaded.policy.model.config();
        model_config.save(&dir.join("config.json"), "float32")?;
        write_json(&dir.join(P2L_CONFIG), &config)
    };
    let files = |dir: &Path| -> Result<()> { copy_aux_files(&opts.model.dir, dir).map(drop) };
    let mut trainer = Trainer::new(
        &p2l.policy,
        optimizer(&p2l.policy, 0.0),
        start.state.clone(),
        Box::new(files),
    )
    .with_model_writer(Box::new(writer))
    .with_tracking(opts.tracking.clone());
    if start.resumed {
        trainer.resume_optimizer(run, &start.latest)?;
    }
    Ok(trainer)
}

/// The report: mean training loss per epoch, and the held-out loss of P2L against the global
/// leaderboard fitted to the training battles.
fn report(
    opts: &TrainOptions,
    data: &Data,
    p2l: &P2lModel,
    lines: &[P2lLine],
) -> Result<P2lReport> {
    let mut epoch_loss = vec![];
    for e in 0..opts.epochs {
        let (mut sum, mut n) = (0.0, 0usize);
        for l in lines.iter().filter(|l| l.epoch == e) {
            sum += l.loss * l.battles as f64;
            n += l.battles;
        }
        epoch_loss.push(sum / n.max(1) as f64);
    }
    let (nll_p2l, nll_global) = match &data.heldout {
        Some(h) => {
            let pad = data.loaded.pad_id();
            let p = batched_eval(p2l, h, pad, opts.batch_size)?;
            let train = &data.train;
            let global = GlobalFit::fit(
                opts.loss,
                data.models.len(),
                &train.labels(&train.all()),
                2000,
                0.05,
            )?;
            (Some(p), Some(global.loss(opts.loss, &h.labels(&h.all()))?))
        }
        None => (None, None),
    };
    Ok(P2lReport {
        loss: opts.loss,
        models: data.models.len(),
        battles: data.train.len(),
        dropped_ties: data.train.dropped_ties,
        epoch_train_loss: epoch_loss,
        heldout_battles: data.heldout.as_ref().map(Encoded::len),
        heldout_nll_p2l: nll_p2l,
        heldout_nll_global: nll_global,
    })
}

/// The mean loss over every battle of `e`, in batches (no gradients).
fn batched_eval(p2l: &P2lModel, e: &Encoded, pad: i64, batch: usize) -> Result<f64> {
    let rows = e.all();
    let mut sum = 0.0;
    for chunk in rows.chunks(batch) {
        sum += p2l.eval_loss(&e.prompts(chunk), &e.labels(chunk), pad)? * chunk.len() as f64;
    }
    Ok(sum / rows.len().max(1) as f64)
}
