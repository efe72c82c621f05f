//! DPO's forward passes and step (`train-dpo`): summed completion log-probs of both sides of
//! each pair, reference log-probs computed once from the starting model (TRL's
//! `precompute_ref_log_probs`), and TRL's DPO-family loss ([`crate::train::loss::dpo`]).

use anyhow::Result;
use tch::Tensor;

use super::{
    completion_logps, per_row, read_without_grad, to_vec, Figures, Forward, Pairs, Stepped, Update,
};
use crate::model::memory::Memory;
use crate::model::policy::Policy;
use crate::train::loss::dpo::{dpo_loss, DpoBatch, DpoConfig, PairMetrics};

/// Reference log-probs of every pair: (chosen, rejected).
pub type PairRefs = (Vec<f32>, Vec<f32>);

/// What DPO reads besides the model: the pairs, their reference log-probs and the pad id.
#[derive(Clone, Copy)]
pub struct DpoData<'a> {
    pub pairs: &'a Pairs,
    pub refs: &'a PairRefs,
    pub pad: i64,
}

/// Summed completion log-probs of `rows` of `pairs` through `fwd`: `[2B]`, chosen first.
fn sequence_logps(fwd: &Forward, pairs: &Pairs, rows: &[usize], pad: i64) -> Tensor {
    let (prompts, completions) = pairs.sides(rows);
    completion_logps(fwd, &prompts, &completions, pad)
}

/// The reference log-probs of every pair without gradients, in `memory`'s micro-batches (its
/// packing and token budget) or blocks of `batch` pairs.
pub fn reference_logps(
    policy: &Policy,
    pairs: &Pairs,
    pad: i64,
    (batch, memory): (usize, &Memory),
) -> PairRefs {
    let all: Vec<usize> = (0..pairs.len()).collect();
    let sides = read_sides(policy, pairs, &all, pad, (batch, memory));
    (to_vec(&sides[0]), to_vec(&sides[1]))
}

/// Summed completion log-probs of `rows` without gradient, in `memory`'s micro-batches or
/// blocks of `batch` pairs: `[chosen [B], rejected [B]]`.
fn read_sides(
    policy: &Policy,
    pairs: &Pairs,
    rows: &[usize],
    pad: i64,
    (batch, memory): (usize, &Memory),
) -> Vec<Tensor> {
    let tokens = |r| pairs.tokens(r);
    read_without_grad(policy, (memory, batch), rows, tokens, 2, |mb, fwd| {
        let lp = sequence_logps(fwd, pairs, mb, pad);
        let k = mb.len() as i64;
        vec![lp.narrow(0, 0, k), lp.narrow(0, k, k)]
    })
}

/// The loss of `rows` from the policy's log-probs `lp` (`[2B]`, chosen first).
fn loss_of(
    cfg: &DpoConfig,
    lp: &Tensor,
    data: DpoData,
    rows: &[usize],
) -> Result<(Tensor, PairMetrics)> {
    let b = rows.len() as i64;
    let lengths = |side: &[Vec<i64>]| {
        let v: Vec<f32> = rows.iter().map(|&r| side[r].len() as f32).collect();
        v
    };
    let (len_c, len_r) = (lengths(&data.pairs.chosen), lengths(&data.pairs.rejected));
    let out = dpo_loss(
        cfg,
        &DpoBatch {
            chosen_logps: &lp.narrow(0, 0, b),
            rejected_logps: &lp.narrow(0, b, b),
            ref_chosen_logps: &per_row(&data.refs.0, rows),
            ref_rejected_logps: &per_row(&data.refs.1, rows),
            // host: lengths; dpo_loss moves them to the log-probs' device.
            chosen_lengths: &Tensor::from_slice(&len_c),
            // host: as chosen_lengths.
            rejected_lengths: &Tensor::from_slice(&len_r),
        },
    )?;
    Ok((out.loss, out.metrics))
}

/// The DPO loss and metrics of every pair of `data`, without gradients, read in `memory`'s
/// micro-batches or blocks of `batch` pairs.
pub fn evaluate(
    policy: &Policy,
    data: DpoData,
    cfg: &DpoConfig,
    (batch, memory): (usize, &Memory),
) -> Result<Figures<PairMetrics>> {
    let rows: Vec<usize> = (0..data.pairs.len()).collect();
    let lp = Tensor::cat(
        &read_sides(policy, data.pairs, &rows, data.pad, (batch, memory)),
        0,
    );
    let _guard = tch::no_grad_guard();
    let (loss, metrics) = loss_of(cfg, &lp, data, &rows)?;
    Ok(Figures {
        loss: loss.double_value(&[]),
        metrics,
    })
}

/// One optimizer step of DPO on `rows`, each data-parallel rank reading its share of them.
pub fn step(
    up: Update,
    data: DpoData,
    rows: &[usize],
    cfg: &DpoConfig,
) -> Result<Stepped<PairMetrics>> {
    let (policy, pad) = (up.policy, data.pad);
    let tokens = |r| data.pairs.tokens(r);
    let (sides, deferred) =
        up.share(rows.len())
            .read_deferred(policy, rows, 2, tokens, move |local, fwd| {
                let lp = sequence_logps(fwd, data.pairs, local, pad);
                let b = local.len() as i64;
                vec![lp.narrow(0, 0, b), lp.narrow(0, b, b)]
            })?;
    let lp = Tensor::cat(&sides, 0);
    let (loss, metrics) = loss_of(cfg, &lp, data, rows)?;
    let grad = up.apply(&loss, deferred)?;
    let loss = loss.double_value(&[]);
    Ok((Figures { loss, metrics }, grad))
}
