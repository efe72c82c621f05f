//! `train-kto`: preference optimisation on unpaired completions labelled desirable
//! or undesirable, with TRL's KTO (`reinforge_torch::train::loss::kto`), through the one trainer.
//!
//! Follows TRL's `KTOTrainer` (trl 1.16.0) where its data handling shapes the numbers:
//! - paired rows are unpaired as `unpair_preference_dataset` does (per chunk of 1000 rows, the
//!   chosen completions, labelled desirable, then the rejected ones);
//! - batches are consecutive blocks of `--batch-size` rows in file order (TRL requires
//!   `train_sampling_strategy="sequential"` for KTO), one pass after another;
//! - each row's KL completion is the previous row's completion within its block (the block's
//!   completions rotated by one), fixed before training;
//! - reference log-probs, of the rows and of their KL completions, are computed once from the
//!   starting model (TRL's `precompute_ref_log_probs`) and kept in the run directory.

use std::path::Path;

use anyhow::{bail, Result};
use reinforge_tasks::read_records;
use reinforge_torch::train::loss::kto::KtoConfig;
use reinforge_torch::train::preference::kto::{self, KtoData, KtoMetrics, KtoRefs};
use reinforge_torch::train::preference::{Figures, Unpaired};
use reinforge_torch::{Memory, Policy};
use serde::Serialize;
use serde_json::Value;

use super::{start_run, update, OfflineOptions};
use crate::loaded::{encode_prompt, LoadedModel, PromptStyle};
use crate::pairs::{completion_field, prompt_columns};
use reinforge_train::run_dir::read_json;
use reinforge_train::trainer::{StepLog, Trainer};

/// TRL's `unpair_preference_dataset` maps in batches of this many pairs (datasets' default).
const UNPAIR_CHUNK: usize = 1000;

/// `train-kto`'s settings.
#[derive(Debug, Clone)]
pub struct KtoOptions {
    pub common: OfflineOptions,
    pub loss: KtoConfig,
}

/// One raw row before unpairing.
enum Row {
    Single(Vec<i64>, Vec<i64>, bool),
    Pair(Vec<i64>, Vec<i64>, Vec<i64>),
}

/// Reads unpaired rows (`prompt`, `completion`, `label`) or pairs, unpaired as TRL does.
/// Errors name the file, row and field; mixing the two shapes is refused.
pub fn read_unpaired(path: &Path, model: &LoadedModel, raw: bool) -> Result<Unpaired> {
    let style = PromptStyle { raw, system: None };
    let max = model.max_positions();
    let mut rows = vec![];
    for (i, r) in read_records(path, &prompt_columns())?
        .into_iter()
        .enumerate()
    {
        let row = i + 1;
        let ids = |k: &str| completion_field(&r.extra, k, &model.tokenizer, (path, row));
        let p = encode_prompt(&model.tokenizer, &r.prompt, &style)?.1;
        let parsed = if r.extra.contains_key("completion") {
            let label = match r.extra.get("label") {
                Some(Value::Bool(b)) => *b,
                _ => bail!(
                    "{} row {row}: `label` must be true or false",
                    path.display()
                ),
            };
            Row::Single(p, ids("completion")?, label)
        } else if r.extra.contains_key("chosen") {
            Row::Pair(p, ids("chosen")?, ids("rejected")?)
        } else {
            bail!(
                "{} row {row}: needs `completion` and `label`, or `chosen` and `rejected`",
                path.display()
            );
        };
        let longest = match &parsed {
            Row::Single(p, c, _) => p.len() + c.len(),
            Row::Pair(p, c, r) => p.len() + c.len().max(r.len()),
        };
        if longest > max {
            bail!(
                "{} row {row}: {longest} tokens, more than the model's {max} positions",
                path.display()
            );
        }
        rows.push(parsed);
    }
    unpair(rows, path)
}

/// Flattens rows into unpaired ones; pairs go per chunk of [`UNPAIR_CHUNK`], chosen first.
fn unpair(rows: Vec<Row>, path: &Path) -> Result<Unpaired> {
    let paired = rows.iter().filter(|r| matches!(r, Row::Pair(..))).count();
    if paired != 0 && paired != rows.len() {
        bail!(
            "{}: {paired} of {} rows are pairs; use one shape for the whole file",
            path.display(),
            rows.len()
        );
    }
    let mut out = Unpaired {
        prompts: vec![],
        completions: vec![],
        labels: vec![],
    };
    // Unpaired rows go in one pass, in file order; pairs in a chosen and a rejected pass.
    for chunk in rows.chunks(UNPAIR_CHUNK) {
        for chosen in [true, false] {
            for row in chunk {
                let (p, c, label) = match row {
                    Row::Single(p, c, l) if chosen => (p, c, *l),
                    Row::Pair(p, c, r) => (p, if chosen { c } else { r }, chosen),
                    Row::Single(..) => continue,
                };
                out.prompts.push(p.clone());
                out.completions.push(c.clone());
                out.labels.push(label);
            }
        }
    }
    if out.is_empty() {
        bail!("{}: no rows", path.display());
    }
    Ok(out)
}

/// One line of `metrics.jsonl`, TRL's metric names.
#[derive(Debug, Clone, Serialize)]
pub struct KtoLine {
    pub step: usize,
    pub loss: f64,
    pub kl: f64,
    #[serde(rename = "rewards/chosen", skip_serializing_if = "Option::is_none")]
    pub rewards_chosen: Option<f64>,
    #[serde(rename = "rewards/rejected", skip_serializing_if = "Option::is_none")]
    pub rewards_rejected: Option<f64>,
    #[serde(rename = "rewards/margins", skip_serializing_if = "Option::is_none")]
    pub rewards_margins: Option<f64>,
    #[serde(rename = "logps/chosen", skip_serializing_if = "Option::is_none")]
    pub logps_chosen: Option<f64>,
    #[serde(rename = "logps/rejected", skip_serializing_if = "Option::is_none")]
    pub logps_rejected: Option<f64>,
    pub grad_norm: f64,
    #[serde(skip)]
    pub nonfinite_grad_steps: usize,
}

impl KtoLine {
    fn new(step: usize, f: &Figures<KtoMetrics>, grad_norm: f64, stepped: bool) -> Self {
        let m = &f.metrics;
        Self {
            step,
            loss: f.loss,
            kl: m.kl,
            rewards_chosen: m.rewards_chosen,
            rewards_rejected: m.rewards_rejected,
            rewards_margins: m.rewards_margins,
            logps_chosen: m.logps_chosen,
            logps_rejected: m.logps_rejected,
            grad_norm,
            nonfinite_grad_steps: usize::from(!stepped),
        }
    }
}

impl StepLog for KtoLine {
    fn bar_message(&self) -> String {
        format!("loss {:.4} kl {:.3}", self.loss, self.kl)
    }

    fn nonfinite_grad_steps(&self) -> usize {
        self.nonfinite_grad_steps
    }
}

/// KTO's held-out metrics, block by block, averaged over blocks.
fn evaluate(
    policy: &Policy,
    data: KtoData,
    cfg: &KtoConfig,
    passes: (usize, &Memory),
) -> Result<Value> {
    let lines: Vec<KtoLine> = kto::evaluate(policy, data, cfg, passes)?
        .iter()
        .map(|f| KtoLine::new(0, f, 0.0, true))
        .collect();
    let mean = |f: &dyn Fn(&KtoLine) -> Option<f64>| {
        let v: Vec<f64> = lines.iter().filter_map(f).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    Ok(serde_json::json!({
        "rows": data.rows.len(),
        "loss": mean(&|l| Some(l.loss)),
        "kl": mean(&|l| Some(l.kl)),
        "rewards/chosen": mean(&|l| l.rewards_chosen),
        "rewards/rejected": mean(&|l| l.rewards_rejected),
        "rewards/margins": mean(&|l| l.rewards_margins),
        "logps/chosen": mean(&|l| l.logps_chosen),
        "logps/rejected": mean(&|l| l.logps_rejected),
    }))
}

/// The references of `data` (the KL completions' when the loss reads them).
fn references(
    policy: &Policy,
    data: &Unpaired,
    kl: &[usize],
    cfg: &KtoConfig,
    shape: (usize, i64, &Memory),
) -> KtoRefs {
    let kl = cfg.loss_type.uses_kl().then_some(kl);
    kto::reference_logps(policy, data, kl, shape)
}

/// The training references: read from the run directory when it has them (a resumed run
/// uses the same ones), else computed from the starting model and kept there.
fn training_refs(
    offline: &super::OfflineRun,
    policy: &Policy,
    (train, kl): (&Unpaired, &[usize]),
    cfg: &KtoConfig,
    shape: (usize, i64, &Memory),
) -> Result<KtoRefs> {
    let path = offline.dir.path("reference_logps.json");
    let refs: KtoRefs = if path.exists() {
        read_json(&path)?
    } else {
        let r = references(policy, train, kl, cfg, shape);
        offline.write_json("reference_logps.json", &r)?;
        r
    };
    let kl_rows = if cfg.loss_type.uses_kl() {
        train.len()
    } else {
        refs.kl_logps.len()
    };
    if refs.logps.len() != train.len() || refs.kl_logps.len() != kl_rows {
        bail!(
            "{}: {} reference rows ({} KL rows) for {} training rows; the data or --loss-type \
             changed since the run started",
            path.display(),
            refs.logps.len(),
            refs.kl_logps.len(),
            train.len()
        );
    }
    Ok(refs)
}

/// Runs `train-kto`.
pub fn train(o: &KtoOptions) -> Result<()> {
    let (common, cfg) = (&o.common, &o.loss);
    let batch = common.batch_size;
    if cfg.loss_type.uses_kl() && batch < 2 {
        bail!("--batch-size must be at least 2 for kto: with one row the KL completion is the row's own");
    }
    let model = common.model.load()?;
    let pad = model.pad_id();
    let (train, heldout) = common.read_data(|p| read_unpaired(p, &model, common.raw))?;
    let offline = start_run(&common.output, model.policy.device())?;
    let kl = train.kl_completions(batch);
    let memory = common.memory;
    let shape = (batch, pad, &memory);
    let refs = training_refs(&offline, &model.policy, (&train, &kl), cfg, shape)?;
    let heldout = heldout.map(|h| {
        let kl = h.kl_completions(batch);
        let r = references(&model.policy, &h, &kl, cfg, shape);
        (h, kl, r)
    });
    let eval = |policy: &Policy| -> Result<Option<Value>> {
        heldout
            .as_ref()
            .map(|(rows, kl, refs)| {
                evaluate(
                    policy,
                    KtoData {
                        rows,
                        kl,
                        refs,
                        pad,
                    },
                    cfg,
                    (batch, &memory),
                )
            })
            .transpose()
    };
    let before = eval(&model.policy)?;
    let data = KtoData {
        rows: &train,
        kl: &kl,
        refs: &refs,
        pad,
    };
    let step = |t: &mut Trainer, rows: &[usize]| {
        let (f, g) = kto::step(update(t, common), data, rows, cfg)?;
        Ok(KtoLine::new(t.state.step, &f, g.grad_norm, g.stepped))
    };
    let blocks = train.blocks(batch);
    let rows = |step: usize| train.block(batch, step % blocks);
    let policy = common.train(model.policy, &offline, step, rows)?;
    let after = eval(&policy)?;
    let report = serde_json::json!({"loss_type": cfg.loss_type, "beta": cfg.beta, "steps": common.steps,
                                    "heldout_before": before, "heldout_after": after});
    offline.finish(&report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_unpair_per_chunk_chosen_first() {
        let pair = |i: i64| Row::Pair(vec![i], vec![10 + i], vec![20 + i]);
        let out = unpair(vec![pair(0), pair(1)], Path::new("x.jsonl")).unwrap();
        assert_eq!(
            out.completions,
            vec![vec![10], vec![11], vec![20], vec![21]]
        );
        assert_eq!(out.labels, vec![true, true, false, false]);
        let mixed = vec![pair(0), Row::Single(vec![1], vec![2], true)];
        let err = unpair(mixed, Path::new("x.jsonl"))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("1 of 2 rows are pairs"), "{err}");
    }
}
