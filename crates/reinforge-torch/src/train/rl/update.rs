//! The policy update: the objective of one mini-batch (any registered policy loss, KL and
//! entropy terms, verl's global denominators) and epochs of mini-batch steps over the packed
//! rollouts.
//!
//! The losses are the catalogue's ([`crate::train::loss`]): [`policy_objective`] calls the registered
//! policy loss ([`PolicyLossKind::compute`]), `kl_penalty` and `agg_loss`. The oracle harness
//! replays verl's and TRL's golden vectors through it (and through
//! [`super::critic::value_objective`]), so the code checked against the references is the code
//! that trains.

use std::collections::BTreeMap;
use std::ops::Range;

use anyhow::Result;
use serde::Serialize;
use tch::{Kind, Tensor};

use super::minibatch::minibatch_info;
use super::pack::RolloutBatch;
use crate::dist::ranks::sum_over_ranks;
use crate::dist::{all_reduce_gradients, ProcessGroup, ReduceOp, DEFAULT_BUCKET_BYTES};
use crate::model::batch::SequenceBatch;
use crate::model::logprobs::{backward_logprob_loss, Entropy};
use crate::model::memory::Memory;
use crate::model::policy::Policy;
use crate::train::loss::agg::{agg_loss, verl_masked_mean, AggMode, GlobalBatchInfo};
use crate::train::loss::kl::{kl_penalty, KlPenalty};
use crate::train::loss::policy::{PolicyInputs, VerlPolicyConfig};
use crate::train::loss::registry::PolicyLossKind;
use crate::train::optim::AdamW;

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
    /// truncation; [`crate::train::loss::policy::NO_DUAL_CLIP`] for none), the per-loss knobs. Its `global_batch_info` is
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
    /// Micro-batches under a token budget and activation checkpointing.
    pub memory: Memory,
}

impl UpdateConfig {
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
    let local_tokens = batch.row_tokens();
    let (row_tokens, offset) = match dp {
        Some(d) => (d.global_row_tokens.clone(), d.row_offset),
        None => (local_tokens.clone(), 0),
    };
    let run = PolicyRun {
        policy,
        batch,
        cfg,
        dp,
        local: offset..offset + batch.seqs.len(),
        local_tokens,
    };
    let mut acc = Accumulated::default();
    let per = row_tokens.len().div_ceil(cfg.mini_batches.max(1));
    for order in orders.iter().take(cfg.epochs) {
        for chunk in order.chunks(per) {
            let info = minibatch_info(chunk, &row_tokens, cfg.loss_scale_factor);
            run.minibatch(opt, chunk, &info, &mut acc)?;
        }
    }
    run.finish(acc)
}

/// One policy update in progress: what every mini-batch step reads.
struct PolicyRun<'a> {
    policy: &'a Policy,
    batch: &'a RolloutBatch,
    cfg: &'a UpdateConfig,
    dp: Option<&'a DataParallel<'a>>,
    /// The global rows this process holds.
    local: Range<usize>,
    /// Tokens of each of this process's rows in the loss.
    local_tokens: Vec<f64>,
}

/// Sums over the mini-batch steps, and verl's metrics (token-weighted shares).
#[derive(Default)]
struct Accumulated {
    stats: UpdateStats,
    metrics: BTreeMap<String, f64>,
}

impl PolicyRun<'_> {
    /// One optimizer step on the global rows `chunk` (this process runs its own, minus the
    /// rows that contribute exactly nothing).
    fn minibatch(
        &self,
        opt: &mut AdamW,
        chunk: &[i64],
        info: &GlobalBatchInfo,
        acc: &mut Accumulated,
    ) -> Result<()> {
        let rows = self.rows_to_run(chunk, &mut acc.stats);
        let (weight, any_ran) = self.metric_weight(&rows)?;
        if any_ran {
            acc.stats.trained_steps += 1;
        }
        opt.zero_grad();
        if rows.is_empty() {
            // Every gradient is zero; AdamW still steps (its moments decay), as it would
            // after a backward pass through the full mini-batch.
            zero_gradients(self.policy);
        } else {
            self.backward(&rows, info, weight, acc);
        }
        if let Some(d) = self.dp.filter(|_| !opt.is_sharded()) {
            all_reduce_gradients(d.pg, &self.policy.vs, DEFAULT_BUCKET_BYTES)?;
        }
        let step = opt.clip_and_step_sharded(self.cfg.max_grad_norm, self.cfg.lr)?;
        // The gradients are not read again: dropped, they are not held through the next
        // sampling phase and the checkpoint save (a parameter-sized buffer).
        opt.release_grads();
        if step.stepped {
            acc.stats.grad_norm += step.grad_norm;
        } else {
            acc.stats.nonfinite_grad_steps += 1;
        }
        acc.stats.optimizer_steps += 1;
        Ok(())
    }

    /// This process's rows of `chunk` that run (local indices); counts the skipped ones.
    fn rows_to_run(&self, chunk: &[i64], stats: &mut UpdateStats) -> Vec<i64> {
        let skip_zero = self.cfg.skips_zero_advantage_rows();
        let skip_empty = self.cfg.policy_loss.empty_rows_are_inert();
        let skip = |i: usize| {
            (skip_empty && self.local_tokens[i] == 0.0)
                || (skip_zero && self.batch.advantages[i] == 0.0)
        };
        let mine: Vec<usize> = chunk
            .iter()
            .map(|&i| i as usize)
            .filter(|i| self.local.contains(i))
            .map(|i| i - self.local.start)
            .collect();
        let rows: Vec<i64> = mine
            .iter()
            .copied()
            .filter(|&i| !skip(i))
            .map(|i| i as i64)
            .collect();
        stats.rows_skipped += mine.len() - rows.len();
        rows
    }

    /// verl's metrics are token-means over the rows that ran; across ranks each rank's mean is
    /// weighted by its share of those tokens. Also whether any rank ran a row.
    fn metric_weight(&self, rows: &[i64]) -> Result<(f64, bool)> {
        let ran_local: f64 = rows.iter().map(|&i| self.local_tokens[i as usize]).sum();
        Ok(match self.dp {
            Some(d) => {
                // host: two numbers summed over ranks (staged through the GPU under NCCL).
                let t = Tensor::from_slice(&[ran_local, rows.len() as f64]);
                d.pg.all_reduce(&[&t], ReduceOp::Sum)?;
                let total = t.double_value(&[0]);
                let w = if total > 0.0 { ran_local / total } else { 0.0 };
                (w, t.double_value(&[1]) > 0.0)
            }
            None => (1.0, !rows.is_empty()),
        })
    }

    /// The forward and backward passes of the objective on `rows`, one per micro-batch of
    /// `cfg.memory` (the objective's denominators are the mini-batch's, so the micro-batches'
    /// gradients and losses sum to the mini-batch's; verl's metrics are token-weighted). A
    /// loss whose rows are not separable runs its mini-batch in one pass.
    fn backward(&self, rows: &[i64], info: &GlobalBatchInfo, weight: f64, acc: &mut Accumulated) {
        let lens = self.batch.seqs.row_lens();
        let micro = if self.cfg.policy_loss.rows_are_separable() {
            self.cfg.memory.microbatches(rows, lens)
        } else {
            vec![rows.to_vec()]
        };
        let n = micro.len() as f64;
        let ran: f64 = rows.iter().map(|&i| self.local_tokens[i as usize]).sum();
        for mb_rows in micro {
            let tokens: f64 = mb_rows.iter().map(|&i| self.local_tokens[i as usize]).sum();
            let share = if ran > 0.0 { tokens / ran } else { 1.0 / n };
            self.backward_micro(&mb_rows, info, weight * share, acc);
            crate::heap::microbatch_done();
        }
    }

    /// The forward and backward pass of the objective on the micro-batch `rows`; `weight`:
    /// its share of the update's metric tokens.
    fn backward_micro(
        &self,
        rows: &[i64],
        info: &GlobalBatchInfo,
        weight: f64,
        acc: &mut Accumulated,
    ) {
        let cfg = self.cfg;
        let mb = self.batch.select(rows);
        let entropy = if cfg.entropy_coef != 0.0 {
            Entropy::Differentiable
        } else {
            Entropy::Detached
        };
        let pass = (cfg.temperature, entropy, &cfg.memory);
        let (loss, stats) =
            backward_logprob_loss(&self.policy.model, &mb.seqs, pass, |logp, ent| {
                policy_objective(logp, Some(ent), &mb.inputs(), cfg, info)
            });
        acc.stats.loss += loss.double_value(&[]);
        acc.stats.pg_loss += stats.pg_loss;
        acc.stats.kl += stats.kl.unwrap_or(0.0) * weight;
        for (k, v) in stats.metrics {
            *acc.metrics.entry(k).or_default() += v * weight;
        }
    }

    /// The update's means (the whole batch's over every rank).
    fn finish(&self, acc: Accumulated) -> Result<UpdateStats> {
        let Accumulated {
            stats: mut acc,
            mut metrics,
        } = acc;
        if let Some(d) = self.dp {
            // Loss and pg_loss are sums of globally normalised terms, the KL and verl's
            // metrics sums of token-weighted shares: their totals are the single-process
            // values.
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
}

/// Defines every parameter's gradient as zeros (a backward pass through `0 * Σ p`).
fn zero_gradients(policy: &Policy) {
    let params = policy.vs.trainable_variables();
    let total = params
        .iter()
        .map(|p| p.sum(Kind::Float) * 0.0)
        .fold(Tensor::zeros([], (Kind::Float, policy.device())), |a, b| {
            a + b
        });
    total.backward();
}
