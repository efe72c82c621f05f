//! Training steps: supervised fine-tuning, the policy update (any registered policy loss) and
//! the PPO critic's clipped value update.
//!
//! The losses are the catalogue's ([`crate::loss`]): [`policy_objective`] calls the registered
//! policy loss ([`PolicyLossKind::compute`]), `kl_penalty` and `agg_loss`; [`value_objective`]
//! calls `value_loss`. The oracle harness replays verl's and TRL's golden vectors through these
//! two functions, so the code checked against the references is the code that trains.

use std::collections::BTreeMap;

use serde::Serialize;
use tch::{Kind, Tensor};

use anyhow::Result;

use crate::batch::SequenceBatch;
use crate::dist::{all_reduce_gradients, ProcessGroup, ReduceOp, DEFAULT_BUCKET_BYTES};
use crate::logprobs::{token_logprobs_with, Entropy};
use crate::loss::agg::{agg_loss, verl_masked_mean, AggMode, GlobalBatchInfo};
use crate::loss::kl::{kl_penalty, KlPenalty};
use crate::loss::pg_family::value_loss;
use crate::loss::policy::{PolicyInputs, VerlPolicyConfig, NO_DUAL_CLIP};
use crate::loss::registry::PolicyLossKind;
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

/// `x` summed over every rank of `pg` (float64).
pub fn sum_over_ranks(pg: &ProcessGroup, x: f64) -> Result<f64> {
    let t = Tensor::from_slice(&[x]);
    pg.all_reduce(&[&t], ReduceOp::Sum)?;
    Ok(t.double_value(&[0]))
}

/// verl's metrics an update reports.
const REPORTED_METRICS: &[&str] = &[
    "actor/pg_clipfrac",
    "actor/pg_clipfrac_lower",
    "actor/ppo_kl",
];

/// A data-parallel rank's share of a policy update: its rows are the global rows
/// `row_offset..row_offset + batch rows`, and every aggregation denominator comes from the
/// whole batch (`global_row_tokens`, every rank's rows), as verl normalises with `dp_size`, so
/// the summed gradients are those of one process holding the whole batch.
pub struct DataParallel<'a> {
    pub pg: &'a ProcessGroup,
    pub row_offset: usize,
    pub global_row_tokens: Vec<f64>,
}

/// Settings of the policy update.
#[derive(Debug, Clone, PartialEq)]
pub struct UpdateConfig {
    /// The registered policy loss (verl `actor.policy_loss.loss_mode`).
    pub policy_loss: PolicyLossKind,
    /// verl `loss_agg_mode` of the policy, KL and entropy terms (GSPO, SAPO and GMPO fix the
    /// policy term's aggregation themselves, as in verl).
    pub agg: AggMode,
    /// The loss's verl `ActorConfig` fields: clip range, `clip_ratio_c` (dual clip, DPPO's
    /// truncation; [`NO_DUAL_CLIP`] for none), the per-loss knobs. Its `global_batch_info` is
    /// replaced by each mini-batch's.
    pub loss: VerlPolicyConfig,
    /// Weight of the KL to the reference model in the loss (0 = no KL term).
    pub beta: f64,
    /// KL estimator of the `beta` term (verl `kl_loss_type`).
    pub kl: KlPenalty,
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
    /// Skip rows whose advantage is exactly zero where that is exact (no KL or entropy term,
    /// and [`PolicyLossKind::zero_advantage_rows_are_inert`]); off only to check exactness.
    pub skip_zero_advantage: bool,
    /// The constant `S` of seq-mean-token-sum-norm (Dr.GRPO: the longest completion).
    pub loss_scale_factor: f64,
}

impl UpdateConfig {
    /// PPO-clip (`vanilla`, no dual clip), token-mean, no KL or entropy term: GRPO as verl runs
    /// it with clip range `[1 - epsilon_low, 1 + epsilon_high]`.
    pub fn grpo(
        epsilon_low: f64,
        epsilon_high: f64,
        epochs: usize,
        mini_batches: usize,
        lr: f64,
    ) -> Self {
        Self {
            policy_loss: PolicyLossKind::Vanilla,
            agg: AggMode::TokenMean,
            loss: VerlPolicyConfig {
                clip_ratio: epsilon_low,
                clip_ratio_low: Some(epsilon_low),
                clip_ratio_high: Some(epsilon_high),
                clip_ratio_c: NO_DUAL_CLIP,
                ..VerlPolicyConfig::default()
            },
            beta: 0.0,
            kl: KlPenalty::K3,
            entropy_coef: 0.0,
            epochs,
            mini_batches,
            lr,
            max_grad_norm: 1.0,
            temperature: 1.0,
            skip_zero_advantage: true,
            loss_scale_factor: 1.0,
        }
    }

    /// Whether rows with all-zero advantages may be left out of the update exactly.
    fn skips_zero_advantage_rows(&self) -> bool {
        self.skip_zero_advantage
            && self.beta == 0.0
            && self.entropy_coef == 0.0
            && self.policy_loss.zero_advantage_rows_are_inert()
    }
}

/// The stored tensors of one mini-batch's rows that the objective reads, all `[B, T]`.
#[derive(Debug, Clone, Copy)]
pub struct MiniBatchInputs<'a> {
    /// Log-probs of the policy that sampled (or of the previous epoch's), no gradient.
    pub old_logp: &'a Tensor,
    /// Per-token advantages.
    pub advantages: &'a Tensor,
    /// Tokens in the loss: the loss mask times any keep mask.
    pub mask: &'a Tensor,
    /// Reference-model log-probs (for the KL term and its statistic).
    pub ref_logp: Option<&'a Tensor>,
    /// Rollout-correction weights multiplied into the policy loss (TIS).
    pub is_weights: Option<&'a Tensor>,
}

/// What [`policy_objective`] measured besides the loss.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ObjectiveStats {
    /// The policy-gradient term (the registered loss's value).
    pub pg_loss: f64,
    /// Mean KL estimate over the mini-batch's tokens (`None` without reference log-probs).
    pub kl: Option<f64>,
    /// The registered loss's verl metrics, keys unchanged (`actor/pg_clipfrac`, `actor/ppo_kl`,
    /// `actor/pg_clipfrac_lower`, where the loss reports them).
    pub metrics: BTreeMap<String, f64>,
}

/// The objective of one mini-batch, as verl's actor computes it: the registered policy loss
/// `cfg.policy_loss` with `cfg.agg` and the loss config `cfg.loss` (its `global_batch_info`
/// set to `info`), plus `beta·agg(kl_penalty(logp, ref))` and `- entropy_coef·agg(entropy)`.
/// `logp` (and `entropy`) come from the current policy and carry the gradient; `info` holds
/// the whole mini-batch's denominators, so a forward over part of its rows gives that part's
/// exact share.
///
/// # Panics
/// When `cfg.entropy_coef != 0` and `entropy` is `None`, or `cfg.beta != 0` and the inputs have
/// no reference log-probs.
pub fn policy_objective(
    logp: &Tensor,
    entropy: Option<&Tensor>,
    mb: &MiniBatchInputs,
    cfg: &UpdateConfig,
    info: &GlobalBatchInfo,
) -> (Tensor, ObjectiveStats) {
    let loss_cfg = VerlPolicyConfig {
        global_batch_info: *info,
        ..cfg.loss.clone()
    };
    let x = PolicyInputs {
        old_log_prob: mb.old_logp,
        log_prob: logp,
        advantages: mb.advantages,
        response_mask: mb.mask,
        rollout_is_weights: mb.is_weights,
    };
    let pg = cfg.policy_loss.compute(&x, cfg.agg, &loss_cfg);
    let mut loss = pg.loss.shallow_clone();
    let mut kl_mean = None;
    assert!(
        cfg.beta == 0.0 || mb.ref_logp.is_some(),
        "a KL term needs reference log-probs"
    );
    if let Some(ref_logp) = mb.ref_logp {
        let kl = kl_penalty(logp, ref_logp, cfg.kl);
        kl_mean = Some(scalar(&verl_masked_mean(&kl.detach(), mb.mask)));
        if cfg.beta != 0.0 {
            loss = loss + agg_loss(&kl, mb.mask, cfg.agg, info) * cfg.beta;
        }
    }
    if cfg.entropy_coef != 0.0 {
        let entropy = entropy.expect("an entropy bonus needs the entropies");
        loss = loss - agg_loss(entropy, mb.mask, cfg.agg, info) * cfg.entropy_coef;
    }
    let stats = ObjectiveStats {
        pg_loss: scalar(&pg.loss),
        kl: kl_mean,
        metrics: pg.metrics,
    };
    (loss, stats)
}

fn scalar(t: &Tensor) -> f64 {
    t.detach().to_kind(Kind::Double).double_value(&[])
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

impl MiniBatch {
    fn inputs(&self) -> MiniBatchInputs<'_> {
        MiniBatchInputs {
            old_logp: &self.old_logp,
            advantages: &self.advantages,
            mask: &self.mask,
            ref_logp: self.ref_logp.as_ref(),
            is_weights: self.is_weights.as_ref(),
        }
    }
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
    pub fn row_tokens(&self) -> Vec<f64> {
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

/// verl's `global_batch_info` of one mini-batch (one data-parallel rank): its valid tokens, its
/// rows with a valid token and `S`. Computed over the whole mini-batch before any row is
/// skipped, so skipping rows that contribute exactly zero leaves every denominator, hence the
/// update, unchanged.
fn minibatch_info(chunk: &[i64], row_tokens: &[f64], loss_scale_factor: f64) -> GlobalBatchInfo {
    let tokens: f64 = chunk.iter().map(|&i| row_tokens[i as usize]).sum();
    let rows = chunk
        .iter()
        .filter(|&&i| row_tokens[i as usize] > 0.0)
        .count();
    GlobalBatchInfo {
        dp_size: 1,
        batch_num_tokens: Some(tokens.max(1.0)),
        global_batch_size: Some(rows.max(1) as f64),
        loss_scale_factor: Some(loss_scale_factor),
    }
}

/// Means over the optimizer steps of one update.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct UpdateStats {
    pub loss: f64,
    pub pg_loss: f64,
    /// Mean KL estimate (`cfg.kl`) to the reference over the trained tokens (0 without one).
    pub kl: f64,
    /// verl `actor/pg_clipfrac`: tokens where the loss's clip was active (0 for losses that
    /// do not report it).
    pub pg_clipfrac: f64,
    /// verl `actor/pg_clipfrac_lower`: tokens where the dual clip (DPPO: the truncation) was
    /// active.
    pub pg_clipfrac_lower: f64,
    /// verl `actor/ppo_kl`: mean of `old_logp - logp` (KL-Cov: of `|log r|`).
    pub ppo_kl: f64,
    /// Gradient norm before clipping, over the steps whose norm was finite.
    pub grad_norm: f64,
    /// Mini-batches processed (one optimizer step each, unless skipped as non-finite).
    pub optimizer_steps: usize,
    /// Mini-batches that had at least one row to run.
    pub trained_steps: usize,
    /// Rows skipped because they contribute exactly nothing (summed over passes).
    pub rows_skipped: usize,
    /// Mini-batches whose gradient norm was NaN or infinite: no optimizer step was taken.
    pub nonfinite_grad_steps: usize,
}

/// `epochs` passes of mini-batch updates of [`policy_objective`], global-norm clipping and
/// AdamW (a step with a non-finite gradient norm is skipped and counted). `orders` gives the
/// row order of each pass (shuffled by the caller for reproducibility).
///
/// Two exact savings: each mini-batch is trimmed to its longest row, and rows that contribute
/// exactly nothing are not run: rows with no valid token (unless the loss is `geo_mean`, whose
/// mean counts every row), and, when the loss has no KL or entropy term, rows whose advantages
/// are all zero, for the losses where such a row is inert
/// ([`PolicyLossKind::zero_advantage_rows_are_inert`]: not `dro`, `kl_cov`, `clip_cov`,
/// `geo_mean`). Every aggregation denominator (tokens, rows with a token, `S`) is fixed from the
/// whole mini-batch first, so loss, gradients and update are those of the full mini-batch in
/// every `loss_agg_mode`. verl's metrics are over the rows that ran.
pub fn policy_update(
    policy: &Policy,
    opt: &mut AdamW,
    batch: &RolloutBatch,
    cfg: &UpdateConfig,
    orders: &[Vec<i64>],
    dp: Option<&DataParallel>,
) -> Result<UpdateStats> {
    let mut acc = UpdateStats::default();
    let mut metrics = BTreeMap::<String, f64>::new();
    let local_tokens = batch.row_tokens();
    let (row_tokens, offset) = match dp {
        Some(d) => (d.global_row_tokens.clone(), d.row_offset),
        None => (local_tokens.clone(), 0),
    };
    let n = row_tokens.len();
    let local = offset..offset + batch.seqs.len();
    let per = n.div_ceil(cfg.mini_batches.max(1));
    let skip_zero = cfg.skips_zero_advantage_rows();
    let skip_empty = cfg.policy_loss.empty_rows_are_inert();
    // `i` is a row of this process's batch.
    let skip = |i: usize| {
        (skip_empty && local_tokens[i] == 0.0) || (skip_zero && batch.advantages[i] == 0.0)
    };
    for order in orders.iter().take(cfg.epochs) {
        for chunk in order.chunks(per) {
            let info = minibatch_info(chunk, &row_tokens, cfg.loss_scale_factor);
            let mine: Vec<usize> = chunk
                .iter()
                .map(|&i| i as usize)
                .filter(|i| local.contains(i))
                .map(|i| i - offset)
                .collect();
            let rows: Vec<i64> = mine
                .iter()
                .copied()
                .filter(|&i| !skip(i))
                .map(|i| i as i64)
                .collect();
            acc.rows_skipped += mine.len() - rows.len();
            // verl's metrics are token-means over the rows that ran; across ranks each rank's
            // mean is weighted by its share of those tokens.
            let ran_local: f64 = rows.iter().map(|&i| local_tokens[i as usize]).sum();
            let (weight, any_ran) = match dp {
                Some(d) => {
                    let t = Tensor::from_slice(&[ran_local, rows.len() as f64]);
                    d.pg.all_reduce(&[&t], ReduceOp::Sum)?;
                    let total = t.double_value(&[0]);
                    let w = if total > 0.0 { ran_local / total } else { 0.0 };
                    (w, t.double_value(&[1]) > 0.0)
                }
                None => (1.0, !rows.is_empty()),
            };
            if any_ran {
                acc.trained_steps += 1;
            }
            opt.zero_grad();
            if rows.is_empty() {
                // Every gradient is zero; AdamW still steps (its moments decay), as it would
                // after a backward pass through the full mini-batch.
                zero_gradients(policy);
            } else {
                let mb = batch.select(&rows);
                let entropy = if cfg.entropy_coef != 0.0 {
                    Entropy::Differentiable
                } else {
                    Entropy::Detached
                };
                let (logp, entropy) =
                    token_logprobs_with(&policy.model, &mb.seqs, cfg.temperature, entropy);
                let (loss, stats) =
                    policy_objective(&logp, Some(&entropy), &mb.inputs(), cfg, &info);
                loss.backward();
                acc.loss += loss.double_value(&[]);
                acc.pg_loss += stats.pg_loss;
                acc.kl += stats.kl.unwrap_or(0.0) * weight;
                for (k, v) in stats.metrics {
                    *metrics.entry(k).or_default() += v * weight;
                }
            }
            if let Some(d) = dp.filter(|_| !opt.is_sharded()) {
                all_reduce_gradients(d.pg, &policy.vs, DEFAULT_BUCKET_BYTES)?;
            }
            let step = opt.clip_and_step_sharded(cfg.max_grad_norm, cfg.lr)?;
            if step.stepped {
                acc.grad_norm += step.grad_norm;
            } else {
                acc.nonfinite_grad_steps += 1;
            }
            acc.optimizer_steps += 1;
        }
    }
    if let Some(d) = dp {
        // Loss and pg_loss are sums of globally normalised terms, the KL and verl's metrics
        // sums of token-weighted shares: their totals are the single-process values.
        acc.loss = sum_over_ranks(d.pg, acc.loss)?;
        acc.pg_loss = sum_over_ranks(d.pg, acc.pg_loss)?;
        acc.kl = sum_over_ranks(d.pg, acc.kl)?;
        // A fixed key list: every rank must issue the same collectives, whatever it ran.
        for k in REPORTED_METRICS {
            let v = metrics.get(*k).copied().unwrap_or(0.0);
            metrics.insert(k.to_string(), sum_over_ranks(d.pg, v)?);
        }
        acc.rows_skipped = sum_over_ranks(d.pg, acc.rows_skipped as f64)? as usize;
    }
    // Loss and gradient norm of an all-zero mini-batch are exactly 0; the KL and verl's
    // metrics of skipped rows are not computed, so those average over trained steps.
    acc.loss /= acc.optimizer_steps.max(1) as f64;
    acc.pg_loss /= acc.optimizer_steps.max(1) as f64;
    acc.grad_norm /= (acc.optimizer_steps - acc.nonfinite_grad_steps).max(1) as f64;
    let trained = acc.trained_steps.max(1) as f64;
    acc.kl /= trained;
    let metric = |k: &str| metrics.get(k).copied().unwrap_or(0.0) / trained;
    acc.pg_clipfrac = metric(REPORTED_METRICS[0]);
    acc.pg_clipfrac_lower = metric(REPORTED_METRICS[1]);
    acc.ppo_kl = metric(REPORTED_METRICS[2]);
    Ok(acc)
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
    /// verl `critic.loss_agg_mode` (which defaults to the actor's).
    pub agg: AggMode,
    /// The constant `S` of seq-mean-token-sum-norm.
    pub loss_scale_factor: f64,
}

/// The tensors of one critic mini-batch that [`value_objective`] reads, all `[B, T]`.
#[derive(Debug, Clone, Copy)]
pub struct ValueInputs<'a> {
    pub returns: &'a Tensor,
    pub values_old: &'a Tensor,
    pub mask: &'a Tensor,
}

/// The critic's objective on one mini-batch: verl `compute_value_loss`
/// ([`crate::loss::pg_family::value_loss`]) of the current values `vpreds` with `cfg`'s clip
/// range and aggregation and the mini-batch's denominators `info`; returns the loss and
/// `vf_clipfrac`.
pub fn value_objective(
    vpreds: &Tensor,
    x: &ValueInputs,
    cfg: &ValueConfig,
    info: &GlobalBatchInfo,
) -> (Tensor, f64) {
    value_loss(
        vpreds,
        x.returns,
        x.values_old,
        x.mask,
        cfg.cliprange_value,
        cfg.agg,
        info,
    )
}

/// Means over the optimizer steps of one critic update.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ValueStats {
    /// verl `critic/vf_loss`: `½·agg(max((v-R)², (clip(v)-R)²))`.
    pub value_loss: f64,
    /// verl `critic/vf_clipfrac`: tokens where the clipped error is the larger.
    pub vf_clipfrac: f64,
    /// Gradient norm before clipping, over the steps whose norm was finite.
    pub grad_norm: f64,
    pub optimizer_steps: usize,
    /// Mini-batches whose gradient norm was NaN or infinite: no optimizer step was taken.
    pub nonfinite_grad_steps: usize,
}

/// `epochs` passes of mini-batch updates of [`value_objective`], with global-norm clipping and
/// AdamW (a step with a non-finite gradient norm is skipped and counted), as verl's
/// `DataParallelPPOCritic.update_critic`. `orders` gives the row order of each pass.
/// Mini-batches are trimmed to their longest row, as in [`policy_update`].
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
    let row_tokens = Vec::<f64>::try_from(
        batch
            .mask
            .sum_dim_intlist(-1i64, false, Kind::Double)
            .to_device(tch::Device::Cpu),
    )
    .expect("row sums");
    for order in orders.iter().take(cfg.epochs) {
        for chunk in order.chunks(per) {
            let seqs = batch.seqs.select(chunk);
            let t = Tensor::from_slice(chunk).to_device(seqs.ids.device());
            let w = seqs.target_width();
            let pick = |x: &Tensor| x.narrow(1, 0, w).index_select(0, &t);
            let (returns, values_old, mask) = (
                pick(&batch.returns),
                pick(&batch.values_old),
                pick(&batch.mask),
            );
            let x = ValueInputs {
                returns: &returns,
                values_old: &values_old,
                mask: &mask,
            };
            opt.zero_grad();
            let info = minibatch_info(chunk, &row_tokens, cfg.loss_scale_factor);
            let (loss, clipfrac) = value_objective(&critic.values(&seqs), &x, cfg, &info);
            loss.backward();
            acc.value_loss += loss.double_value(&[]);
            acc.vf_clipfrac += clipfrac;
            let step = opt.clip_and_step(cfg.max_grad_norm, cfg.lr);
            if step.stepped {
                acc.grad_norm += step.grad_norm;
            } else {
                acc.nonfinite_grad_steps += 1;
            }
            acc.optimizer_steps += 1;
        }
    }
    let k = acc.optimizer_steps.max(1) as f64;
    acc.value_loss /= k;
    acc.vf_clipfrac /= k;
    acc.grad_norm /= (acc.optimizer_steps - acc.nonfinite_grad_steps).max(1) as f64;
    acc
}
