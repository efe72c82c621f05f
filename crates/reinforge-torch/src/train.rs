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
    /// Skip rows whose advantage is exactly zero when no KL or entropy term needs them (an
    /// exact saving; off only to check that it is exact).
    pub skip_zero_advantage: bool,
}

/// The rollouts of one iteration, packed for the update.
pub struct RolloutBatch {
    pub seqs: SequenceBatch,
    /// Sampler log-probs at target positions `[N, L-1]`.
    pub old_logp: Tensor,
    /// Reference-model log-probs `[N, L-1]` when `beta > 0`.
    pub ref_logp: Option<Tensor>,
    /// One advantage per sequence.
    pub advantages: Vec<f32>,
}

/// The rows of a mini-batch, trimmed to their longest sequence.
struct MiniBatch {
    seqs: SequenceBatch,
    old_logp: Tensor,
    ref_logp: Option<Tensor>,
    advantages: Tensor,
}

impl RolloutBatch {
    fn select(&self, idx: &[i64]) -> MiniBatch {
        let seqs = self.seqs.select(idx);
        let t = Tensor::from_slice(idx).to_device(seqs.ids.device());
        let w = seqs.target_width();
        let pick = |x: &Tensor| x.index_select(0, &t).narrow(1, 0, w);
        let adv: Vec<f32> = idx.iter().map(|&i| self.advantages[i as usize]).collect();
        MiniBatch {
            advantages: seqs.row_values(&adv),
            old_logp: pick(&self.old_logp),
            ref_logp: self.ref_logp.as_ref().map(pick),
            seqs,
        }
    }
}

/// Means over the optimizer steps of one update.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct UpdateStats {
    pub loss: f64,
    pub pg_loss: f64,
    /// Mean k3 KL to the reference over the update's tokens (0 without a reference).
    pub kl: f64,
    pub clipfrac_high: f64,
    pub clipfrac_low: f64,
    /// Mean of `old_logp - logp` (verl `actor/ppo_kl`) over the tokens that were trained on.
    pub ppo_kl: f64,
    pub grad_norm: f64,
    pub optimizer_steps: usize,
    /// Optimizer steps whose mini-batch had at least one row to run.
    pub trained_steps: usize,
    /// Rows skipped because their advantage is exactly zero and nothing else in the loss
    /// depends on them (summed over passes).
    pub rows_skipped: usize,
}

/// `epochs` passes of mini-batch updates of the PPO-clip objective with token-mean
/// aggregation, optional k3 KL and entropy bonus, global-norm clipping and AdamW.
/// `orders` gives the row order of each pass (shuffled by the caller for reproducibility).
///
/// Two exact savings: each mini-batch is trimmed to its longest row, and when the loss has no
/// KL or entropy term, rows with a zero advantage are not run at all. Their policy-gradient
/// terms and gradients are exactly zero, and they still count in the token-mean denominator,
/// so loss, gradients and update are those of the full mini-batch.
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
    let counts = batch.seqs.target_counts();
    let skippable = cfg.skip_zero_advantage && cfg.beta == 0.0 && cfg.entropy_coef == 0.0;
    for order in orders.iter().take(cfg.epochs) {
        for chunk in order.chunks(per) {
            let tokens: f64 = chunk.iter().map(|&i| counts[i as usize] as f64).sum();
            let rows: Vec<i64> = chunk
                .iter()
                .copied()
                .filter(|&i| !skippable || batch.advantages[i as usize] != 0.0)
                .collect();
            acc.rows_skipped += chunk.len() - rows.len();
            opt.zero_grad();
            if rows.is_empty() {
                // Every gradient is zero; AdamW still steps (its moments decay), as it would
                // after a backward pass through the full mini-batch.
                zero_gradients(policy);
            } else {
                let mb = batch.select(&rows);
                let mask = &mb.seqs.loss_mask;
                let (logp, entropy) = token_logprobs(&policy.model, &mb.seqs, cfg.temperature);
                let terms = ppo_clip_terms(&logp, &mb.old_logp, &mb.advantages, &cfg.clip);
                let pg_loss = token_sum_over(&terms.pg, mask, tokens);
                let mut loss = pg_loss.shallow_clone();
                if let Some(ref_logp) = &mb.ref_logp {
                    let kl = kl_k3(&logp, ref_logp);
                    acc.kl += masked_mean(&kl.detach(), mask);
                    if cfg.beta != 0.0 {
                        loss = loss + token_sum_over(&kl, mask, tokens) * cfg.beta;
                    }
                }
                if cfg.entropy_coef != 0.0 {
                    loss = loss - token_sum_over(&entropy, mask, tokens) * cfg.entropy_coef;
                }
                loss.backward();
                acc.loss += loss.double_value(&[]);
                acc.pg_loss += pg_loss.double_value(&[]);
                acc.clipfrac_high +=
                    token_sum_over(&terms.clipped_high, mask, tokens).double_value(&[]);
                acc.clipfrac_low +=
                    token_sum_over(&terms.clipped_low, mask, tokens).double_value(&[]);
                acc.ppo_kl += masked_mean(&terms.neg_log_ratio, mask);
                acc.trained_steps += 1;
            }
            acc.grad_norm += opt.clip_grad_norm(cfg.max_grad_norm);
            opt.step(cfg.lr);
            acc.optimizer_steps += 1;
        }
    }
    // Loss, clip fractions and gradient norm of an all-zero mini-batch are exactly 0; the
    // log-ratio and KL of skipped rows are unknown, so those average over trained steps.
    let k = acc.optimizer_steps.max(1) as f64;
    for v in [
        &mut acc.loss,
        &mut acc.pg_loss,
        &mut acc.clipfrac_high,
        &mut acc.clipfrac_low,
        &mut acc.grad_norm,
    ] {
        *v /= k;
    }
    let trained = acc.trained_steps.max(1) as f64;
    acc.kl /= trained;
    acc.ppo_kl /= trained;
    acc
}

/// Defines every parameter's gradient as zeros (a backward pass through `0 * Σ p`).
fn zero_gradients(policy: &Policy) {
    let params = policy.vs.trainable_variables();
    let total = params
        .iter()
        .map(|p| p.sum(Kind::Float) * 0.0)
        .fold(Tensor::from(0f32), |a, b| a + b);
    total.backward();
}
