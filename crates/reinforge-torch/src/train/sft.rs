//! Supervised fine-tuning's step: completion-only NLL, token-mean over the whole
//! (data-parallel) batch, one optimizer step.

use anyhow::Result;
use serde::Serialize;
use tch::Kind;

use crate::dist::ranks::sum_over_ranks;
use crate::dist::{all_reduce_gradients, ProcessGroup, DEFAULT_BUCKET_BYTES};
use crate::model::batch::SequenceBatch;
use crate::model::logprobs::{backward_logprob_loss, Entropy};
use crate::model::memory::Memory;
use crate::model::policy::Policy;
use crate::train::loss::agg::{agg_loss, AggMode, GlobalBatchInfo};
use crate::train::optim::AdamW;

/// What one SFT step measured.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SftStats {
    /// Mean negative log-likelihood per completion token.
    pub loss: f64,
    /// Gradient norm before clipping.
    pub grad_norm: f64,
    /// Completion tokens in the batch.
    pub tokens: f64,
    /// 1 when the gradient norm was NaN or infinite and the optimizer step was skipped.
    pub nonfinite_grad_steps: usize,
}

/// One SFT step: cross-entropy on completion tokens only (prompt tokens are masked out),
/// token-mean. A step whose gradient norm is not finite is skipped ([`AdamW::clip_and_step`]).
/// With `memory`, the rows run in micro-batches under its token budget (the token-mean's
/// denominator is the whole batch's, so their gradients sum to the batch's) and with
/// activation checkpointing.
pub fn sft_step(
    policy: &Policy,
    opt: &mut AdamW,
    batch: &SequenceBatch,
    (lr, max_grad_norm): (f64, f64),
    memory: &Memory,
    dp: Option<&ProcessGroup>,
) -> Result<SftStats> {
    opt.zero_grad();
    let local_tokens = batch.loss_mask.sum(Kind::Float).double_value(&[]);
    // Data-parallel: the token-mean's denominator is the whole batch's, over every rank.
    let tokens = match dp {
        Some(pg) => sum_over_ranks(pg, local_tokens)?,
        None => local_tokens,
    };
    let info = GlobalBatchInfo {
        batch_num_tokens: Some(tokens.max(1.0)),
        ..GlobalBatchInfo::default()
    };
    let rows: Vec<i64> = (0..batch.len() as i64).collect();
    let mut micro = memory.microbatches(&rows, batch.row_lens());
    if micro.is_empty() {
        micro.push(rows);
    }
    let whole = micro.len() == 1;
    let mut value = 0.0;
    for mb in micro {
        let sub = if whole { None } else { Some(batch.select(&mb)) };
        let part = sub.as_ref().unwrap_or(batch);
        let pass = (1.0, Entropy::Skip, memory);
        let (loss, ()) = backward_logprob_loss(&policy.model, part, pass, |logp, _| {
            let loss = agg_loss(&(-logp), &part.loss_mask, AggMode::TokenMean, &info);
            (loss, ())
        });
        value += loss.double_value(&[]);
    }
    if let Some(pg) = dp {
        // A sharded optimizer reduce-scatters the gradients itself.
        if !opt.is_sharded() {
            all_reduce_gradients(pg, &policy.vs, DEFAULT_BUCKET_BYTES)?;
        }
        value = sum_over_ranks(pg, value)?;
    }
    let step = opt.clip_and_step_sharded(max_grad_norm, lr)?;
    Ok(SftStats {
        loss: value,
        grad_norm: step.grad_norm,
        tokens,
        nonfinite_grad_steps: usize::from(!step.stepped),
    })
}

/// SFT rows as a [`SequenceBatch`]: `rows[i] = (ids, labels)`, `labels[k]` whether token `k`
/// is a target (any pattern: the assistant turns of a conversation, a completion). The rows
/// are split before their first target (the first token never is one) and the loss mask is
/// then multiplied by the labels, so the batch's loss mask holds exactly the targets.
pub fn sft_batch(rows: &[(&[i64], &[bool])], pad_id: i64, device: tch::Device) -> SequenceBatch {
    let splits: Vec<usize> = rows
        .iter()
        .map(|(ids, labels)| {
            let first = labels
                .iter()
                .skip(1)
                .position(|&b| b)
                .map_or(ids.len(), |k| k + 1);
            first.min(ids.len()).max(1.min(ids.len()))
        })
        .collect();
    let prompts: Vec<&[i64]> = rows
        .iter()
        .zip(&splits)
        .map(|((ids, _), &s)| &ids[..s])
        .collect();
    let completions: Vec<&[i64]> = rows
        .iter()
        .zip(&splits)
        .map(|((ids, _), &s)| &ids[s..])
        .collect();
    let mut batch = SequenceBatch::new(&prompts, &completions, pad_id, device);
    let labels: Vec<Vec<f32>> = rows
        .iter()
        .zip(&splits)
        .map(|((_, labels), &s)| {
            labels[s..]
                .iter()
                .map(|&b| f32::from(u8::from(b)))
                .collect()
        })
        .collect();
    batch.loss_mask = &batch.loss_mask * batch.completion_values(&labels);
    batch
}

/// The summed negative log-likelihood of `batch`'s target tokens and their count, without
/// gradient, in the micro-batches of `memory` (held-out loss: the sum over the count is the
/// token-mean loss [`sft_step`] reports).
pub fn nll_sum(policy: &Policy, batch: &SequenceBatch, memory: &Memory) -> (f64, f64) {
    let _guard = tch::no_grad_guard();
    let (logp, _) = crate::model::logprobs::token_logprobs_in_microbatches(
        &policy.model,
        batch,
        (1.0, Entropy::Skip),
        memory,
    );
    let nll = -(logp * &batch.loss_mask)
        .sum(Kind::Double)
        .double_value(&[]);
    (nll, batch.loss_mask.sum(Kind::Double).double_value(&[]))
}
