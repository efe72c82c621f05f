//! KTO's forward passes and step (`train-kto`): summed completion log-probs of unpaired rows
//! and of their KL completions, reference log-probs computed once from the starting model
//! (TRL's `precompute_ref_log_probs`), and TRL's KTO loss ([`crate::train::loss::kto`]).

use anyhow::Result;
use serde::{Deserialize, Serialize};
use tch::{Kind, Tensor};

use super::{
    completion_logps, per_row, read_without_grad, to_vec, Deferred, Figures, Forward, Share,
    Stepped, Unpaired, Update,
};
use crate::model::memory::Memory;
use crate::model::policy::Policy;
use crate::train::loss::kto::{kto_loss, KtoBatch, KtoConfig, KtoOutput};

/// The starting model's log-probs of every row and of every row's KL completion.
#[derive(Serialize, Deserialize)]
pub struct KtoRefs {
    pub logps: Vec<f32>,
    /// Empty for a loss without the KL term.
    pub kl_logps: Vec<f32>,
}

/// What KTO reads besides the model: the rows, each row's KL completion, the references and
/// the pad id.
#[derive(Clone, Copy)]
pub struct KtoData<'a> {
    pub rows: &'a Unpaired,
    pub kl: &'a [usize],
    pub refs: &'a KtoRefs,
    pub pad: i64,
}

/// What KTO logs besides its loss, under TRL's names (a side absent from a batch has none).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KtoMetrics {
    pub kl: f64,
    pub rewards_chosen: Option<f64>,
    pub rewards_rejected: Option<f64>,
    pub rewards_margins: Option<f64>,
    pub logps_chosen: Option<f64>,
    pub logps_rejected: Option<f64>,
}

/// Summed completion log-probs of `rows`, each with completion `completion(row)`.
fn logps_of(
    fwd: &Forward,
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
    completion_logps(fwd, &prompts, &completions, pad)
}

/// The references of `data` without gradients, in `memory`'s micro-batches (its packing and
/// token budget) or blocks of `batch` rows; the KL completions only when `kl` is given (the
/// loss reads them).
pub fn reference_logps(
    policy: &Policy,
    data: &Unpaired,
    kl: Option<&[usize]>,
    (batch, pad, memory): (usize, i64, &Memory),
) -> KtoRefs {
    let all: Vec<usize> = (0..data.len()).collect();
    let parts = if kl.is_some() { 2 } else { 1 };
    // Row `r`'s KL point is its prompt with completion `kl[r]`.
    let kl_tokens = |r: usize| {
        kl.map_or(0, |kl| {
            data.prompts[r].len() + data.completions[kl[r]].len()
        })
    };
    let tokens = |r| data.tokens(r) + kl_tokens(r);
    let read = read_without_grad(policy, (memory, batch), &all, tokens, parts, |rows, fwd| {
        let mut out = vec![logps_of(fwd, data, rows, |r| r, pad)];
        if let Some(kl) = kl {
            out.push(logps_of(fwd, data, rows, |r| kl[r], pad));
        }
        out
    });
    KtoRefs {
        logps: to_vec(&read[0]),
        kl_logps: read.get(1).map(to_vec).unwrap_or_default(),
    }
}

/// The loss of `rows` (a block) under `policy`, each rank of a data-parallel job reading its
/// `share` of the rows.
fn block_loss<'a>(
    cfg: &KtoConfig,
    policy: &'a Policy,
    data: KtoData<'a>,
    rows: &[usize],
    share: &Share,
) -> Result<(KtoOutput, Deferred<'a>)> {
    let uses_kl = cfg.loss_type.uses_kl();
    let (set, pad) = (data.rows, data.pad);
    let tokens = |r| set.tokens(r) * if uses_kl { 2 } else { 1 };
    let (mut parts, deferred) =
        share.read_deferred(policy, rows, 2, tokens, move |local, fwd| {
            // The KL point is not differentiated (TRL computes it under no_grad).
            let kl_logps = if uses_kl {
                let _guard = tch::no_grad_guard();
                logps_of(fwd, set, local, |r| data.kl[r], pad)
            } else {
                Tensor::zeros([local.len() as i64], (Kind::Float, policy.device()))
            };
            vec![logps_of(fwd, set, local, |r| r, pad), kl_logps]
        })?;
    let kl_logps = uses_kl.then(|| parts.pop()).flatten();
    let logps = parts.swap_remove(0);
    let ref_logps = per_row(&data.refs.logps, rows);
    let ref_kl = uses_kl.then(|| per_row(&data.refs.kl_logps, rows));
    let labels: Vec<bool> = rows.iter().map(|&r| set.labels[r]).collect();
    let out = kto_loss(
        cfg,
        &KtoBatch {
            logps: &logps,
            ref_logps: &ref_logps,
            labels: &labels,
            kl: kl_logps.as_ref().zip(ref_kl.as_ref()),
        },
    )?;
    Ok((out, deferred))
}

/// The loss value and metrics of `out`.
fn figures(out: &KtoOutput) -> Figures<KtoMetrics> {
    Figures {
        loss: out.loss.double_value(&[]),
        metrics: KtoMetrics {
            kl: out.kl,
            rewards_chosen: out.rewards_chosen,
            rewards_rejected: out.rewards_rejected,
            rewards_margins: out.rewards_margins,
            logps_chosen: out.logps_chosen,
            logps_rejected: out.logps_rejected,
        },
    }
}

/// KTO's loss and metrics of each block of `batch` rows of `data` (the KL point is per
/// block), without gradients, each block read in `memory`'s micro-batches and packing.
pub fn evaluate(
    policy: &Policy,
    data: KtoData,
    cfg: &KtoConfig,
    (batch, memory): (usize, &Memory),
) -> Result<Vec<Figures<KtoMetrics>>> {
    let _guard = tch::no_grad_guard();
    (0..data.rows.blocks(batch))
        .map(|b| {
            let rows = data.rows.block(batch, b);
            let whole = Share {
                memory: *memory,
                ..Share::new(None, rows.len(), policy.device())
            };
            Ok(figures(&block_loss(cfg, policy, data, &rows, &whole)?.0))
        })
        .collect()
}

/// One optimizer step of KTO on the block `rows`.
pub fn step(
    up: Update,
    data: KtoData,
    rows: &[usize],
    cfg: &KtoConfig,
) -> Result<Stepped<KtoMetrics>> {
    let share = up.share(rows.len());
    let (out, deferred) = block_loss(cfg, up.policy, data, rows, &share)?;
    let grad = up.apply(&out.loss, deferred)?;
    Ok((figures(&out), grad))
}
