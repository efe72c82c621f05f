//! Training steps: supervised fine-tuning, the clipped policy-gradient update and the PPO
//! critic's clipped value update.

use serde::Serialize;
use tch::{Kind, Tensor};

use crate::batch::SequenceBatch;
use crate::logprobs::token_logprobs;
use crate::loss::agg::{agg_loss, AggMode, GlobalBatchInfo};
use crate::loss::kl::{kl_penalty, KlPenalty};
use crate::loss::trainer::{dual_clip, gspo_terms, PolicyLossKind};
use crate::loss::{kl_k3, masked_mean, ppo_clip_terms, token_sum_over, PpoClip, TokenTerms};
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
#[derive(Debug, Clone, PartialEq)]
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
    /// The surrogate: token-ratio PPO clip or GSPO's sequence ratio.
    pub policy_loss: PolicyLossKind,
    /// verl `loss_agg_mode` of the policy, KL and entropy terms.
    pub agg: AggMode,
    /// The constant `S` of seq-mean-token-sum-norm (Dr.GRPO: the longest completion).
    pub loss_scale_factor: f64,
    /// Dual-clip bound `c` for negative advantages (0 = off).
    pub clip_ratio_c: f64,
    /// KL estimator of the `beta` term (verl `kl_loss_type`).
    pub kl: KlPenalty,
}

impl UpdateConfig {
    /// GRPO as the trainer ran it before presets: PPO clip, token-mean, k3, no dual clip.
    pub fn grpo(clip: PpoClip, epochs: usize, mini_batches: usize, lr: f64) -> Self {
        Self {
            clip,
            beta: 0.0,
            entropy_coef: 0.0,
            epochs,
            mini_batches,
            lr,
            max_grad_norm: 1.0,
            temperature: 1.0,
            skip_zero_advantage: true,
            policy_loss: PolicyLossKind::Vanilla,
            agg: AggMode::TokenMean,
            loss_scale_factor: 1.0,
            clip_ratio_c: 0.0,
            kl: "k3".parse().expect("k3 is a verl estimator"),
        }
    }

    /// Whether the loss is exactly the k3-token-mean path of [`kl_k3`] and [`token_sum_over`].
    fn plain_k3(&self) -> bool {
        self.kl == "k3".parse::<KlPenalty>().expect("k3 is a verl estimator")
    }
}

/// The rollouts of one iteration, packed for the update.
pub struct RolloutBatch {
    pub seqs: SequenceBatch,
    /// Sampler log-probs at target positions `[N, L-1]`.
    pub old_logp: Tensor,
    /// Reference-model log-probs `[N, L-1]` when `beta > 0`.
    pub ref_logp: Option<Tensor>,
    /// One advantage per sequence. With `token_advantages`, the row's largest |advantage|
    /// (only its being zero is read: such a row may be skipped).
    pub advantages: Vec<f32>,
    /// Per-token advantages `[N, L-1]` (REINFORCE++ whitening); `None`: `advantages` per row.
    pub token_advantages: Option<Tensor>,
    /// Rollout-correction weights `[N, L-1]` multiplied into the policy loss (TIS).
    pub is_weights: Option<Tensor>,
    /// Multiplies the loss mask `[N, L-1]`: 0 removes a token from the loss and from the
    /// aggregation denominators (truncated completions, rejection sampling).
    pub keep: Option<Tensor>,
}

/// The rows of a mini-batch, trimmed to their longest sequence.
struct MiniBatch {
    seqs: SequenceBatch,
    mask: Tensor,
    old_logp: Tensor,
    ref_logp: Option<Tensor>,
    advantages: Tensor,
    is_weights: Option<Tensor>,
}

impl RolloutBatch {
    /// A batch with per-row advantages and no correction or extra mask.
    pub fn new(
        seqs: SequenceBatch,
        old_logp: Tensor,
        ref_logp: Option<Tensor>,
        advantages: Vec<f32>,
    ) -> Self {
        Self {
            seqs,
            old_logp,
            ref_logp,
            advantages,
            token_advantages: None,
            is_weights: None,
            keep: None,
        }
    }

    /// Tokens each row contributes to the loss (the row sums of the effective mask).
    fn row_tokens(&self) -> Vec<f64> {
        match &self.keep {
            None => self
                .seqs
                .target_counts()
                .iter()
                .map(|&c| c as f64)
                .collect(),
            Some(keep) => Vec::<f64>::try_from(
                (&self.seqs.loss_mask * keep)
                    .sum_dim_intlist(-1i64, false, Kind::Double)
                    .to_device(tch::Device::Cpu),
            )
            .expect("row sums"),
        }
    }

    fn select(&self, idx: &[i64]) -> MiniBatch {
        let seqs = self.seqs.select(idx);
        let t = Tensor::from_slice(idx).to_device(seqs.ids.device());
        let w = seqs.target_width();
        let pick = |x: &Tensor| x.narrow(1, 0, w).index_select(0, &t);
        let advantages = match &self.token_advantages {
            Some(a) => pick(a),
            None => {
                let adv: Vec<f32> = idx.iter().map(|&i| self.advantages[i as usize]).collect();
                seqs.row_values(&adv)
            }
        };
        let mask = match &self.keep {
            Some(k) => &seqs.loss_mask * pick(k),
            None => seqs.loss_mask.shallow_clone(),
        };
        MiniBatch {
            advantages,
            mask,
            old_logp: pick(&self.old_logp),
            ref_logp: self.ref_logp.as_ref().map(pick),
            is_weights: self.is_weights.as_ref().map(pick),
            seqs,
        }
    }
}

/// The global constants of one mini-batch: its valid tokens, its rows with a valid token,
/// and `S`. Computed over the whole mini-batch before any row is skipped, so skipping rows
/// that contribute exactly zero leaves every denominator, hence the update, unchanged.
struct Denominators {
    tokens: f64,
    info: GlobalBatchInfo,
}

impl Denominators {
    fn of(chunk: &[i64], row_tokens: &[f64], cfg: &UpdateConfig) -> Self {
        let tokens: f64 = chunk.iter().map(|&i| row_tokens[i as usize]).sum();
        let rows = chunk
            .iter()
            .filter(|&&i| row_tokens[i as usize] > 0.0)
            .count();
        Self {
            tokens,
            info: GlobalBatchInfo {
                dp_size: 1,
                batch_num_tokens: Some(tokens.max(1.0)),
                global_batch_size: Some(rows.max(1) as f64),
                loss_scale_factor: Some(cfg.loss_scale_factor),
            },
        }
    }

    /// `x` aggregated by `mode`; token-mean is [`token_sum_over`] (the trainer's original path).
    fn agg(&self, x: &Tensor, mask: &Tensor, mode: AggMode) -> Tensor {
        match mode {
            AggMode::TokenMean => token_sum_over(x, mask, self.tokens),
            other => agg_loss(x, mask, other, &self.info),
        }
    }
}

/// The policy-gradient terms per token: the surrogate, dual clip, then the IS weights.
fn surrogate(logp: &Tensor, mb: &MiniBatch, cfg: &UpdateConfig) -> TokenTerms {
    let mut terms = match cfg.policy_loss {
        PolicyLossKind::Vanilla => ppo_clip_terms(logp, &mb.old_logp, &mb.advantages, &cfg.clip),
        PolicyLossKind::Gspo => gspo_terms(logp, &mb.old_logp, &mb.advantages, &mb.mask, &cfg.clip),
    };
    terms.pg = dual_clip(terms.pg, &mb.advantages, cfg.clip_ratio_c);
    if let Some(w) = &mb.is_weights {
        terms.pg = terms.pg * w;
    }
    terms
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

/// `epochs` passes of mini-batch updates of the policy loss (`cfg.policy_loss`, dual clip, IS
/// weights) aggregated by `cfg.agg`, optional KL (`cfg.kl`) and entropy bonus, global-norm
/// clipping and AdamW. `orders` gives the row order of each pass (shuffled by the caller for
/// reproducibility).
///
/// Two exact savings: each mini-batch is trimmed to its longest row, and rows that contribute
/// exactly nothing are not run: rows with no valid token (masked out), and, when the loss has
/// no KL or entropy term, rows whose advantages are all zero (their surrogate, IS-weighted or
/// not, token or sequence ratio, is `-0·r` with zero gradient). Every aggregation denominator
/// (tokens, rows with a token, `S`) is fixed from the whole mini-batch first, so loss,
/// gradients and update are those of the full mini-batch in every `loss_agg_mode`.
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
    let row_tokens = batch.row_tokens();
    let skippable = cfg.skip_zero_advantage && cfg.beta == 0.0 && cfg.entropy_coef == 0.0;
    let skip = |i: i64| {
        row_tokens[i as usize] == 0.0 || (skippable && batch.advantages[i as usize] == 0.0)
    };
    for order in orders.iter().take(cfg.epochs) {
        for chunk in order.chunks(per) {
            let den = Denominators::of(chunk, &row_tokens, cfg);
            let rows: Vec<i64> = chunk.iter().copied().filter(|&i| !skip(i)).collect();
            acc.rows_skipped += chunk.len() - rows.len();
            opt.zero_grad();
            if rows.is_empty() {
                // Every gradient is zero; AdamW still steps (its moments decay), as it would
                // after a backward pass through the full mini-batch.
                zero_gradients(policy);
            } else {
                let mb = batch.select(&rows);
                minibatch_step(policy, &mb, cfg, &den, &mut acc);
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

/// Forward, loss and backward of one mini-batch's rows; adds its statistics to `acc`.
fn minibatch_step(
    policy: &Policy,
    mb: &MiniBatch,
    cfg: &UpdateConfig,
    den: &Denominators,
    acc: &mut UpdateStats,
) {
    let mask = &mb.mask;
    let tokens = den.tokens;
    let (logp, entropy) = token_logprobs(&policy.model, &mb.seqs, cfg.temperature);
    let terms = surrogate(&logp, mb, cfg);
    let pg_loss = den.agg(&terms.pg, mask, cfg.agg);
    let mut loss = pg_loss.shallow_clone();
    if let Some(ref_logp) = &mb.ref_logp {
        let kl = if cfg.plain_k3() {
            kl_k3(&logp, ref_logp)
        } else {
            kl_penalty(&logp, ref_logp, cfg.kl)
        };
        acc.kl += masked_mean(&kl.detach(), mask);
        if cfg.beta != 0.0 {
            loss = loss + den.agg(&kl, mask, cfg.agg) * cfg.beta;
        }
    }
    if cfg.entropy_coef != 0.0 {
        loss = loss - den.agg(&entropy, mask, cfg.agg) * cfg.entropy_coef;
    }
    loss.backward();
    acc.loss += loss.double_value(&[]);
    acc.pg_loss += pg_loss.double_value(&[]);
    acc.clipfrac_high += token_sum_over(&terms.clipped_high, mask, tokens).double_value(&[]);
    acc.clipfrac_low += token_sum_over(&terms.clipped_low, mask, tokens).double_value(&[]);
    acc.ppo_kl += masked_mean(&terms.neg_log_ratio, mask);
    acc.trained_steps += 1;
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

/// The critic's share of a PPO batch: targets and old values at the completion tokens.
pub struct ValueBatch<'a> {
    /// The same packed rows as the policy update's.
    pub seqs: &'a SequenceBatch,
    /// The critic's values when the rollouts were scored (before this update) `[N, L-1]`.
    pub values_old: Tensor,
    /// GAE returns `[N, L-1]` (advantages before whitening plus `values_old`).
    pub returns: Tensor,
    /// Tokens in the loss `[N, L-1]`: the loss mask, times any keep mask of the policy update.
    pub mask: Tensor,
}

/// Settings of the critic update.
#[derive(Debug, Clone, PartialEq)]
pub struct ValueConfig {
    /// Passes over the batch (verl `critic.ppo_epochs`).
    pub epochs: usize,
    /// Optimizer steps per pass.
    pub mini_batches: usize,
    pub lr: f64,
    /// Global gradient-norm clip (verl `critic.grad_clip`).
    pub max_grad_norm: f64,
    /// Values may move at most this far from `values_old` before the clipped term takes over
    /// (verl `critic.cliprange_value`).
    pub cliprange_value: f64,
}

/// Means over the optimizer steps of one critic update.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ValueStats {
    /// verl `critic/vf_loss`: `½·token-mean(max((v-R)², (clip(v)-R)²))`.
    pub value_loss: f64,
    /// verl `critic/vf_clipfrac`: tokens where the clipped error is the larger.
    pub vf_clipfrac: f64,
    /// Gradient norm before clipping.
    pub grad_norm: f64,
    pub optimizer_steps: usize,
}

/// `epochs` passes of mini-batch updates of the clipped value loss
/// ([`crate::loss::pg_family::value_loss`], verl `compute_value_loss`, token-mean over each
/// mini-batch's tokens as verl's default `loss_agg_mode`), with global-norm clipping and
/// AdamW, as verl's `DataParallelPPOCritic.update_critic`. `orders` gives the row order of
/// each pass. Mini-batches are trimmed to their longest row, as in [`policy_update`].
pub fn value_update(
    critic: &crate::value::Critic,
    opt: &mut AdamW,
    batch: &ValueBatch,
    cfg: &ValueConfig,
    orders: &[Vec<i64>],
) -> ValueStats {
    let mut acc = ValueStats::default();
    let n = batch.seqs.len();
    let per = n.div_ceil(cfg.mini_batches.max(1));
    for order in orders.iter().take(cfg.epochs) {
        for chunk in order.chunks(per) {
            let seqs = batch.seqs.select(chunk);
            let t = Tensor::from_slice(chunk).to_device(seqs.ids.device());
            let w = seqs.target_width();
            let pick = |x: &Tensor| x.narrow(1, 0, w).index_select(0, &t);
            let mask = pick(&batch.mask);
            let tokens = mask.sum(Kind::Float).double_value(&[]);
            opt.zero_grad();
            let info = GlobalBatchInfo {
                dp_size: 1,
                batch_num_tokens: Some(tokens.max(1.0)),
                global_batch_size: None,
                loss_scale_factor: None,
            };
            let (loss, clipfrac) = crate::loss::pg_family::value_loss(
                &critic.values(&seqs),
                &pick(&batch.returns),
                &pick(&batch.values_old),
                &mask,
                cfg.cliprange_value,
                AggMode::TokenMean,
                &info,
            );
            loss.backward();
            acc.value_loss += loss.double_value(&[]);
            acc.vf_clipfrac += clipfrac;
            acc.grad_norm += opt.clip_grad_norm(cfg.max_grad_norm);
            opt.step(cfg.lr);
            acc.optimizer_steps += 1;
        }
    }
    let k = acc.optimizer_steps.max(1) as f64;
    acc.value_loss /= k;
    acc.vf_clipfrac /= k;
    acc.grad_norm /= k;
    acc
}
