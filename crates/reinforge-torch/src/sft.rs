//! Supervised fine-tuning's step: completion-only NLL, token-mean over the whole
//! (data-parallel) batch, one optimizer step.

use anyhow::Result;
use serde::Serialize;
use tch::Kind;

use crate::batch::SequenceBatch;
use crate::dist::{all_reduce_gradients, ProcessGroup, DEFAULT_BUCKET_BYTES};
use crate::logprobs::{token_logprobs_with, Entropy};
use crate::loss::agg::{agg_loss, AggMode, GlobalBatchInfo};
use crate::optim::AdamW;
use crate::policy::Policy;
use crate::ranks::sum_over_ranks;

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
pub fn sft_step(
    policy: &Policy,
    opt: &mut AdamW,
    batch: &SequenceBatch,
    lr: f64,
    max_grad_norm: f64,
    dp: Option<&ProcessGroup>,
) -> Result<SftStats> {
    opt.zero_grad();
    let (logp, _) = token_logprobs_with(&policy.model, batch, 1.0, Entropy::Skip);
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
    let loss = agg_loss(&(-logp), &batch.loss_mask, AggMode::TokenMean, &info);
    loss.backward();
    let mut value = loss.double_value(&[]);
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
