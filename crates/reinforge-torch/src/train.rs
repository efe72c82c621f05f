//! Training steps: supervised fine-tuning and the clipped policy-gradient update.

use serde::{Deserialize, Serialize};
use tch::{Kind, Tensor};

use crate::batch::SequenceBatch;
use crate::logprobs::token_logprobs;
use crate::loss::{kl_k3, masked_mean, ppo_clip_terms, token_sum_over, PpoClip};
use crate::optim::AdamW;
use crate::policy::Policy;

/// What one SFT step measured.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SftStats {
    /// Mean negative log-likelihood per completion token.
    pub loss: f64,
    /// Gradient norm before clipping.
    pub grad_norm: f64,
    /// Completion tokens in the batch.
    pub tokens: f64,
}

/// One SFT step: cross-entropy on completion tokens only (prompt tokens are masked out).
pub fn sft_step(
    policy: &Policy,
    opt: &mut AdamW,
    batch: &SequenceBatch,
    lr: f64,
    max_grad_norm: f64,
) -> SftStats {
    opt.zero_grad();
    let (logp, _) = token_logprobs(&policy.model, batch, 1.0);
    let tokens = batch.loss_mask.sum(Kind::Float).double_value(&[]);
    let loss = token_sum_over(&(-logp), &batch.loss_mask, tokens);
    loss.backward();
    let grad_norm = opt.clip_grad_norm(max_grad_norm);
    opt.step(lr);
    SftStats {
        loss: loss.double_value(&[]),
        grad_norm,
        tokens,
    }
}

/// Settings of the policy update.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpdateConfig {
    pub clip: PpoClip,
    /// Weight of the k3 KL to the reference model in the loss (0 = no reference).
    pub beta: f64,
    /// Weight of the entropy bonus (subtracted from the loss).
    pub entropy_coef: f64,
    /// Passes over the batch against the stored old log-probs (TRL `num_iterations`,
    /// verl `ppo_epochs`).
    pub epochs: usize,
    /// Optimizer steps per pass: the batch is split into this many mini-batches.
    pub mini_batches: usize,
    pub lr: f64,
    pub max_grad_norm: f64,
    /// Sampling temperature, applied to logits when recomputing log-probs.
    pub temperature: f64,
}

/// The rollouts of one iteration, packed for the update.
pub struct RolloutBatch {
    pub seqs: SequenceBatch,
    /// Sampler log-probs at target positions `[N, L-1]`.
    pub old_logp: Tensor,
    /// Reference-model log-probs `[N, L-1]` when `beta > 0`.
    pub ref_logp: Option<Tensor>,
    /// One advantage per sequence, broadcast to its tokens `[N, L-1]`.
    pub advantages: Tensor,
}

/// Means over the optimizer steps of one update.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct UpdateStats {
    pub loss: f64,
    pub pg_loss: f64,
    pub kl: f64,
    pub entropy: f64,
    pub clipfrac_high: f64,
    pub clipfrac_low: f64,
    /// Mean of `old_logp - logp` (verl `actor/ppo_kl`).
    pub ppo_kl: f64,
    pub grad_norm: f64,
    pub optimizer_steps: usize,
}

/// `epochs` passes of mini-batch updates of the PPO-clip objective with token-mean
/// aggregation, optional k3 KL and entropy bonus, global-norm clipping and AdamW.
/// `order` gives the row order of each pass (shuffled by the caller for reproducibility).
pub fn policy_update(
    policy: &Policy,
    opt: &mut AdamW,
    batch: &RolloutBatch,
    cfg: &UpdateConfig,
    orders: &[Vec<i64>],
) -> UpdateStats {
    let mut acc = UpdateStats::default();
    let n = batch.seqs.len();
    let per = n.div_ceil(cfg.mini_batches.max(1));
    for order in orders.iter().take(cfg.epochs) {
        for chunk in order.chunks(per) {
            let idx = Tensor::from_slice(chunk).to_device(policy.device());
            let seqs = batch.seqs.select(chunk);
            let mask = &seqs.loss_mask;
            let tokens = mask.sum(Kind::Float).double_value(&[]);
            opt.zero_grad();
            let (logp, entropy) = token_logprobs(&policy.model, &seqs, cfg.temperature);
            let old = batch.old_logp.index_select(0, &idx);
            let adv = batch.advantages.index_select(0, &idx);
            let terms = ppo_clip_terms(&logp, &old, &adv, &cfg.clip);
            let pg_loss = token_sum_over(&terms.pg, mask, tokens);
            let mut loss = pg_loss.shallow_clone();
            if let Some(ref_all) = &batch.ref_logp {
                let kl = kl_k3(&logp, &ref_all.index_select(0, &idx));
                acc.kl += masked_mean(&kl.detach(), mask);
                if cfg.beta != 0.0 {
                    loss = loss + token_sum_over(&kl, mask, tokens) * cfg.beta;
                }
            }
            if cfg.entropy_coef != 0.0 {
                loss = loss - token_sum_over(&entropy, mask, tokens) * cfg.entropy_coef;
            }
            loss.backward();
            acc.grad_norm += opt.clip_grad_norm(cfg.max_grad_norm);
            opt.step(cfg.lr);
            acc.loss += loss.double_value(&[]);
            acc.pg_loss += pg_loss.double_value(&[]);
            acc.entropy += masked_mean(&entropy.detach(), mask);
            acc.clipfrac_high += masked_mean(&terms.clipped_high, mask);
            acc.clipfrac_low += masked_mean(&terms.clipped_low, mask);
            acc.ppo_kl += masked_mean(&terms.neg_log_ratio, mask);
            acc.optimizer_steps += 1;
        }
    }
    let k = acc.optimizer_steps.max(1) as f64;
    for v in [
        &mut acc.loss,
        &mut acc.pg_loss,
        &mut acc.kl,
        &mut acc.entropy,
        &mut acc.clipfrac_high,
        &mut acc.clipfrac_low,
        &mut acc.ppo_kl,
        &mut acc.grad_norm,
    ] {
        *v /= k;
    }
    acc
}
