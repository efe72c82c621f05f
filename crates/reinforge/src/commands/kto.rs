//! `reinforge train-kto`: preference optimisation on unpaired completions labelled desirable
//! or undesirable, with TRL's KTO (`reinforge_torch::loss::kto`), through the one trainer.
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
use clap::Args;
use reinforge_torch::loss::kto::{kto_loss, KtoBatch, KtoConfig, KtoLoss, KtoOutput};
use reinforge_torch::tch::{Kind, Tensor};
use reinforge_torch::Policy;
use serde::Serialize;
use serde_json::Value;

use super::offline::{completion_logps, ranks, update, OfflineArgs, Share};
use super::pairs::{completion_ids, completion_text, prompt_columns};
use super::{LoadedModel, PromptStyle};
use crate::run_dir::read_json;
use crate::tools::ByName;
use crate::trainer::{StepLog, Trainer};
use reinforge_tasks::read_records;

/// TRL's `unpair_preference_dataset` maps in batches of this many pairs (datasets' default).
const UNPAIR_CHUNK: usize = 1000;

/// Train a checkpoint on completions labelled desirable or undesirable with KTO.
#[derive(Args, Debug)]
#[command(after_help = "\
DATA (jsonl or parquet), either unpaired rows
  {\"prompt\": TEXT or [messages], \"completion\": TEXT, \"label\": true|false}
or preference pairs {\"prompt\", \"chosen\", \"rejected\"}, unpaired as TRL does.
Rows are read in file order, in consecutive batches (as TRL's KTOTrainer requires): shuffle the
file first if its order means something. Each row's KL completion is the previous row's within
its batch.
metrics.jsonl logs TRL's names: loss, kl, rewards/chosen, rewards/rejected, rewards/margins,
logps/chosen, logps/rejected (a side absent from a batch has no value that step).

EXAMPLES:
  reinforge train-kto --model ckpt --data rows.jsonl --heldout test.jsonl --output runs/kto
  reinforge train-kto --model ckpt --data pairs.jsonl --desirable-weight 1.33 --output runs/kto
  (run it again with the same --output to continue after Ctrl-C)")]
pub struct TrainKtoArgs {
    #[command(flatten)]
    pub common: OfflineArgs,
    #[arg(long, value_parser = ByName(KtoLoss::ALL), default_value = "kto")]
    pub loss_type: KtoLoss,
    #[arg(long, default_value_t = 0.1, value_parser = crate::tools::positive)]
    pub beta: f64,
    /// Weight of the desirable rows' losses.
    #[arg(long, default_value_t = 1.0, value_parser = crate::tools::positive)]
    pub desirable_weight: f64,
    /// Weight of the undesirable rows' losses.
    #[arg(long, default_value_t = 1.0, value_parser = crate::tools::positive)]
    pub undesirable_weight: f64,
}

/// Unpaired rows: prompt ids, completion ids (EOS-terminated), desirability.
pub struct Unpaired {
    pub prompts: Vec<Vec<i64>>,
    pub completions: Vec<Vec<i64>>,
    pub labels: Vec<bool>,
}

impl Unpaired {
    /// Number of rows.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Rows of block `index` of `batch` consecutive rows (the last block may be shorter).
    pub fn block(&self, batch: usize, index: usize) -> Vec<usize> {
        let start = index * batch;
        (start..(start + batch).min(self.len())).collect()
    }

    /// Number of blocks of `batch` rows.
    pub fn blocks(&self, batch: usize) -> usize {
        self.len().div_ceil(batch).max(1)
    }

    /// The KL completion of each row: the previous row's within its block of `batch`.
    pub fn kl_completions(&self, batch: usize) -> Vec<usize> {
        (0..self.blocks(batch))
            .flat_map(|b| {
                let rows = self.block(batch, b);
                let n = rows.len();
                (0..n).map(move |i| rows[0] + (i + n - 1) % n)
            })
            .collect()
    }
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
        let ids = |k: &str| -> Result<Vec<i64>> {
            let Some(text) = completion_text(r.extra.get(k)) else {
                bail!(
                    "{} row {row}: `{k}` must be a string or a list of assistant messages",
                    path.display()
                );
            };
            let ids = completion_ids(&model.tokenizer, &text)?;
            if ids.is_empty() {
                bail!("{} row {row}: `{k}` is empty", path.display());
            }
            Ok(ids)
        };
        let p = super::encode_prompt(&model.tokenizer, &r.prompt, &style)?.1;
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
    let mut out = Unpaired {
        prompts: vec![],
        completions: vec![],
        labels: vec![],
    };
    let paired = rows.iter().filter(|r| matches!(r, Row::Pair(..))).count();
    if paired != 0 && paired != rows.len() {
        bail!(
            "{}: {paired} of {} rows are pairs; use one shape for the whole file",
            path.display(),
            rows.len()
        );
    }
    if paired == 0 {
        for r in rows {
            if let Row::Single(p, c, l) = r {
                out.prompts.push(p);
                out.completions.push(c);
                out.labels.push(l);
            }
        }
    } else {
        let pairs: Vec<(Vec<i64>, Vec<i64>, Vec<i64>)> = rows
            .into_iter()
            .filter_map(|r| match r {
                Row::Pair(p, c, rj) => Some((p, c, rj)),
                Row::Single(..) => None,
            })
            .collect();
        for chunk in pairs.chunks(UNPAIR_CHUNK) {
            for (label, pick) in [(true, 1), (false, 2)] {
                for (p, c, r) in chunk {
                    out.prompts.push(p.clone());
                    out.completions
                        .push(if pick == 1 { c.clone() } else { r.clone() });
                    out.labels.push(label);
                }
            }
        }
    }
    if out.is_empty() {
        bail!("{}: no rows", path.display());
    }
    Ok(out)
}

/// Summed completion log-probs of `rows`, each with completion `completion(row)`.
fn logps_of(
    policy: &Policy,
    data: &Unpaired,
    rows: &[usize],
    completion: impl Fn(usize) -> usize,
    pad: i64,
) -> Tensor {
    let prompts: Vec<&[i64]> = rows.iter().map(|&r| data.prompts[r].as_slice()).collect();
    let completions: Vec<&[i64]> = rows
        .iter()
        .map(|&r| data.completions[completion(r)].as_slice())
        .collect();
    completion_logps(policy, &prompts, &completions, pad)
}

/// The starting model's log-probs of every row and of every row's KL completion.
#[derive(Serialize, serde::Deserialize)]
struct References {
    logps: Vec<f32>,
    /// Empty for a loss without the KL term.
    kl_logps: Vec<f32>,
}

impl References {
    /// Block by block; the KL completions only when `kl` is given (the loss reads them).
    fn compute(
        policy: &Policy,
        data: &Unpaired,
        kl: Option<&[usize]>,
        batch: usize,
        pad: i64,
    ) -> Self {
        let _guard = reinforge_torch::tch::no_grad_guard();
        let mut out = Self {
            logps: vec![],
            kl_logps: vec![],
        };
        for b in 0..data.blocks(batch) {
            let rows = data.block(batch, b);
            let own = logps_of(policy, data, &rows, |r| r, pad);
            out.logps
                .extend(Vec::<f32>::try_from(&own).unwrap_or_default());
            if let Some(kl) = kl {
                let mismatched = logps_of(policy, data, &rows, |r| kl[r], pad);
                out.kl_logps
                    .extend(Vec::<f32>::try_from(&mismatched).unwrap_or_default());
            }
        }
        out
    }

    fn of(values: &[f32], rows: &[usize]) -> Tensor {
        // host: reference log-probs computed once; kto_loss moves them to the device.
        Tensor::from_slice(&rows.iter().map(|&r| values[r]).collect::<Vec<_>>())
    }
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
    fn new(step: usize, out: &KtoOutput, grad_norm: f64, stepped: bool) -> Self {
        Self {
            step,
            loss: out.loss.double_value(&[]),
            kl: out.kl,
            rewards_chosen: out.rewards_chosen,
            rewards_rejected: out.rewards_rejected,
            rewards_margins: out.rewards_margins,
            logps_chosen: out.logps_chosen,
            logps_rejected: out.logps_rejected,
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

/// The loss of `rows` (a block) under `policy` against `refs`, each rank of a data-parallel
/// job reading its `share` of the rows.
#[allow(clippy::too_many_arguments)]
fn block_loss(
    cfg: &KtoConfig,
    policy: &Policy,
    data: &Unpaired,
    kl: &[usize],
    refs: &References,
    rows: &[usize],
    pad: i64,
    share: &Share,
) -> Result<KtoOutput> {
    let uses_kl = cfg.loss_type.uses_kl();
    let mut parts = share.read(rows, 2, |local| {
        // The KL point is not differentiated (TRL computes it under no_grad).
        let kl_logps = if uses_kl {
            let _guard = reinforge_torch::tch::no_grad_guard();
            logps_of(policy, data, local, |r| kl[r], pad)
        } else {
            Tensor::zeros([local.len() as i64], (Kind::Float, policy.device()))
        };
        vec![logps_of(policy, data, local, |r| r, pad), kl_logps]
    })?;
    let kl_logps = uses_kl.then(|| parts.pop()).flatten();
    let logps = parts.swap_remove(0);
    let ref_logps = References::of(&refs.logps, rows);
    let ref_kl = uses_kl.then(|| References::of(&refs.kl_logps, rows));
    let labels: Vec<bool> = rows.iter().map(|&r| data.labels[r]).collect();
    kto_loss(
        cfg,
        &KtoBatch {
            logps: &logps,
            ref_logps: &ref_logps,
            labels: &labels,
            kl: kl_logps.as_ref().zip(ref_kl.as_ref()),
        },
    )
}

/// KTO's metrics on the held-out rows, block by block (the KL point is per block), averaged
/// over blocks.
fn evaluate(
    cfg: &KtoConfig,
    policy: &Policy,
    data: &Unpaired,
    refs: &References,
    batch: usize,
    pad: i64,
) -> Result<Value> {
    let _guard = reinforge_torch::tch::no_grad_guard();
    let kl = data.kl_completions(batch);
    let mut lines = vec![];
    for b in 0..data.blocks(batch) {
        let rows = data.block(batch, b);
        let whole = Share::new(None, rows.len(), policy.device());
        let out = block_loss(cfg, policy, data, &kl, refs, &rows, pad, &whole)?;
        lines.push(KtoLine::new(0, &out, 0.0, true));
    }
    let mean = |f: &dyn Fn(&KtoLine) -> Option<f64>| {
        let v: Vec<f64> = lines.iter().filter_map(f).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    Ok(serde_json::json!({
        "rows": data.len(),
        "loss": mean(&|l| Some(l.loss)),
        "kl": mean(&|l| Some(l.kl)),
        "rewards/chosen": mean(&|l| l.rewards_chosen),
        "rewards/rejected": mean(&|l| l.rewards_rejected),
        "rewards/margins": mean(&|l| l.rewards_margins),
        "logps/chosen": mean(&|l| l.logps_chosen),
        "logps/rejected": mean(&|l| l.logps_rejected),
    }))
}

/// Runs `train-kto`.
pub fn train(args: &TrainKtoArgs) -> Result<()> {
    let common = &args.common;
    let cfg = KtoConfig {
        loss_type: args.loss_type,
        beta: args.beta,
        desirable_weight: args.desirable_weight,
        undesirable_weight: args.undesirable_weight,
    };
    if cfg.loss_type.uses_kl() && common.batch_size < 2 {
        bail!("--batch-size must be at least 2 for kto: with one row the KL completion is the row's own");
    }
    let model = common.model.load()?;
    let pad = model.pad_id();
    let (train, heldout) = common.read_data(|p| read_unpaired(p, &model, common.raw))?;
    let offline = common.start(model.policy.device())?;
    let run = &offline.dir;
    let kl = train.kl_completions(common.batch_size);
    let refs_path = run.path("reference_logps.json");
    let refs: References = if refs_path.exists() {
        read_json(&refs_path)?
    } else {
        let kl = cfg.loss_type.uses_kl().then_some(kl.as_slice());
        let r = References::compute(&model.policy, &train, kl, common.batch_size, pad);
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
            refs_path.display(),
            refs.logps.len(),
            refs.kl_logps.len(),
            train.len()
        );
    }
    let heldout_refs = heldout.as_ref().map(|h| {
        let kl = h.kl_completions(common.batch_size);
        let kl = cfg.loss_type.uses_kl().then_some(kl.as_slice());
        References::compute(&model.policy, h, kl, common.batch_size, pad)
    });
    let eval = |policy: &Policy| -> Result<Option<Value>> {
        match (&heldout, &heldout_refs) {
            (Some(h), Some(r)) => evaluate(&cfg, policy, h, r, common.batch_size, pad).map(Some),
            _ => Ok(None),
        }
    };
    let before = eval(&model.policy)?;
    let step = |t: &mut Trainer, rows: &[usize]| {
        let dp = t.dp.clone();
        let share = Share::new(ranks(dp.as_deref()), rows.len(), t.policy.device());
        let out = block_loss(&cfg, t.policy, &train, &kl, &refs, rows, pad, &share)?;
        let g = update(t, &out.loss, common.max_grad_norm, common.lr)?;
        Ok(KtoLine::new(t.state.step, &out, g.grad_norm, g.stepped))
    };
    let blocks = train.blocks(common.batch_size);
    let rows = |step: usize| train.block(common.batch_size, step % blocks);
    let policy = common.train(model.policy, &offline, step, rows)?;
    let after = eval(&policy)?;
    let report = serde_json::json!({"loss_type": args.loss_type, "beta": args.beta, "steps": common.steps,
                                    "heldout_before": before, "heldout_after": after});
    offline.finish(&report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(n: usize) -> Unpaired {
        Unpaired {
            prompts: vec![vec![1]; n],
            completions: (0..n as i64).map(|i| vec![i]).collect(),
            labels: vec![true; n],
        }
    }

    #[test]
    fn kl_completions_rotate_by_one_within_each_block() {
        // TRL: (x1, y1), ..., (xn, yn) -> (x1, yn), (x2, y1), ..., (xn, yn-1) per block.
        assert_eq!(rows(7).kl_completions(3), vec![2, 0, 1, 5, 3, 4, 6]);
        assert_eq!(rows(7).block(3, 2), vec![6]);
        assert_eq!(rows(7).blocks(3), 3);
    }

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
