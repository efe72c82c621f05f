//! PPO's critic update: verl's clipped value loss (`compute_value_loss`) over epochs of
//! mini-batches, as `DataParallelPPOCritic.update_critic`, and the step's entry that builds
//! its targets from the packed rollouts.

use serde::Serialize;
use tch::{Kind, Tensor};

use super::minibatch::minibatch_info;
use super::pack::{f32_rows, Packed};
use crate::model::batch::SequenceBatch;
use crate::model::memory::Memory;
use crate::model::value::Critic;
use crate::train::loss::agg::{AggMode, GlobalBatchInfo};
use crate::train::loss::pg_family::value_loss;
use crate::train::optim::AdamW;

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
    /// Micro-batches and packing of the critic's passes (its checkpointing setting is not
    /// read): the value loss's rows are separable, so a mini-batch's micro-batches' gradients
    /// sum to its own.
    pub memory: Memory,
}

/// The tensors of one critic mini-batch that [`value_objective`] reads, all `[B, T]`.
#[derive(Debug, Clone, Copy)]
pub struct ValueInputs<'a> {
    pub returns: &'a Tensor,
    pub values_old: &'a Tensor,
    pub mask: &'a Tensor,
}

/// The critic's objective on one mini-batch: verl `compute_value_loss`
/// ([`crate::train::loss::pg_family::value_loss`]) of the current values `vpreds` with `cfg`'s clip
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
/// Mini-batches are trimmed to their longest row, as the policy update's.
pub fn value_update(
    critic: &Critic,
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
            // host: per-row token counts read back as numbers.
            .to_device(tch::Device::Cpu),
    )
    .expect("row sums");
    for order in orders.iter().take(cfg.epochs) {
        for chunk in order.chunks(per) {
            let info = minibatch_info(chunk, &row_tokens, cfg.loss_scale_factor);
            value_minibatch(critic, opt, batch, chunk, cfg, &info, &mut acc);
        }
    }
    let k = acc.optimizer_steps.max(1) as f64;
    acc.value_loss /= k;
    acc.vf_clipfrac /= k;
    acc.grad_norm /= (acc.optimizer_steps - acc.nonfinite_grad_steps).max(1) as f64;
    acc
}

/// One optimizer step of the critic on the rows `chunk`, in the micro-batches of
/// `cfg.memory` (each trimmed to its longest row, or packed), whose gradients accumulate.
fn value_minibatch(
    critic: &Critic,
    opt: &mut AdamW,
    batch: &ValueBatch,
    chunk: &[i64],
    cfg: &ValueConfig,
    info: &GlobalBatchInfo,
    acc: &mut ValueStats,
) {
    opt.zero_grad();
    let in_chunk: Vec<i64> = (0..chunk.len() as i64).collect();
    let lens: Vec<usize> = chunk
        .iter()
        .map(|&i| batch.seqs.row_lens()[i as usize])
        .collect();
    let tokens = info.batch_num_tokens.unwrap_or(1.0);
    let micro = cfg.memory.microbatches(&in_chunk, &lens);
    let whole = micro.len() == 1;
    for mb in micro {
        let rows: Vec<i64> = mb.iter().map(|&i| chunk[i as usize]).collect();
        let (loss, clipfrac, mb_tokens) = value_micro(critic, batch, &rows, cfg, info);
        acc.value_loss += loss;
        // verl's vf_clipfrac is the mini-batch's token mean: each micro-batch's by its tokens.
        acc.vf_clipfrac += if whole {
            clipfrac
        } else {
            clipfrac * mb_tokens / tokens
        };
    }
    let step = opt.clip_and_step(cfg.max_grad_norm, cfg.lr);
    if step.stepped {
        acc.grad_norm += step.grad_norm;
    } else {
        acc.nonfinite_grad_steps += 1;
    }
    acc.optimizer_steps += 1;
}

/// The forward and backward pass of the value objective on `rows` (with the mini-batch's
/// denominators `info`): its loss, `vf_clipfrac` and loss tokens.
fn value_micro(
    critic: &Critic,
    batch: &ValueBatch,
    rows: &[i64],
    cfg: &ValueConfig,
    info: &GlobalBatchInfo,
) -> (f64, f64, f64) {
    let seqs = batch.seqs.select(rows);
    let t = Tensor::from_slice(rows).to_device(seqs.ids.device());
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
    let values = critic.values_as(&seqs, cfg.memory.padding_free);
    let (loss, clipfrac) = value_objective(&values, &x, cfg, info);
    loss.backward();
    let tokens = mask.sum(Kind::Double).double_value(&[]);
    (loss.double_value(&[]), clipfrac, tokens)
}

/// One critic update towards `returns` from the values `values_old` the rollouts were scored
/// with, over the tokens the policy update trains on (the keep mask applies).
pub fn update_critic(
    packed: &Packed,
    critic: &Critic,
    opt: &mut AdamW,
    targets: (&[Vec<f64>], &[Vec<f64>]),
    cfg: &ValueConfig,
    orders: &[Vec<i64>],
) -> ValueStats {
    let b = &packed.batch;
    let mask = match &b.keep {
        Some(k) => &b.seqs.loss_mask * k,
        None => b.seqs.loss_mask.shallow_clone(),
    };
    let (values_old, returns) = targets;
    value_update(
        critic,
        opt,
        &ValueBatch {
            seqs: &b.seqs,
            values_old: b.seqs.completion_values(&f32_rows(values_old)),
            returns: b.seqs.completion_values(&f32_rows(returns)),
            mask,
        },
        cfg,
        orders,
    )
}

#[cfg(test)]
mod tests {
    use tch::Device;

    use super::*;
    use crate::model::value::tests::{batch, rows, tiny};
    use crate::train::optim::AdamWConfig;

    #[test]
    fn value_update_reduces_the_value_loss_on_a_fixed_batch() {
        let critic = Critic::new(&tiny(true), Device::Cpu, 7).unwrap();
        let (p, c) = rows();
        let b = batch(&p, &c);
        let mask = b.loss_mask.shallow_clone();
        // Targets: 1 for the first row, 0 for the others, at every completion token.
        let returns = b.row_values(&[1.0, 0.0, 1.0]) * &mask;
        let loss_now = |critic: &Critic| {
            let _g = tch::no_grad_guard();
            let v = critic.values(&b);
            ((v - &returns).square() * &mask)
                .sum(Kind::Float)
                .double_value(&[])
                / mask.sum(Kind::Float).double_value(&[])
        };
        let before = loss_now(&critic);
        let cfg = ValueConfig {
            epochs: 4,
            mini_batches: 2,
            lr: 1e-2,
            max_grad_norm: 1.0,
            cliprange_value: 0.5,
            agg: crate::train::loss::AggMode::TokenMean,
            loss_scale_factor: 1.0,
            memory: Memory::default(),
        };
        let mut opt = AdamW::new(&critic.vs, AdamWConfig::default());
        let mut last = f64::INFINITY;
        for _ in 0..5 {
            let values_old = {
                let _g = tch::no_grad_guard();
                critic.values(&b)
            };
            let vb = ValueBatch {
                seqs: &b,
                values_old,
                returns: returns.shallow_clone(),
                mask: mask.shallow_clone(),
            };
            let orders = vec![vec![0, 1, 2], vec![2, 0, 1], vec![1, 2, 0], vec![0, 2, 1]];
            let s = value_update(&critic, &mut opt, &vb, &cfg, &orders);
            assert_eq!(s.optimizer_steps, 8, "4 epochs x 2 mini-batches");
            assert!(s.value_loss.is_finite() && s.grad_norm > 0.0);
            assert!((0.0..=1.0).contains(&s.vf_clipfrac));
            assert_eq!(s.nonfinite_grad_steps, 0);
            last = loss_now(&critic);
        }
        assert!(
            last < 0.25 * before,
            "mean squared error should fall: before {before:.4}, after {last:.4}"
        );
    }

    /// Micro-batches, packing and both change how the critic's step runs, not its result: the
    /// gradient, the loss and `vf_clipfrac` equal one pass over the mini-batch. (The gradient,
    /// not the weights after AdamW steps: AdamW divides each element by its own magnitude, so
    /// float32 rounding moves an element whose gradient is near zero by up to the rate.)
    #[test]
    fn critic_microbatches_and_packing_equal_one_pass() {
        let (p, c) = rows();
        let b = batch(&p, &c);
        let mask = b.loss_mask.shallow_clone();
        let returns = b.row_values(&[1.0, -0.5, 2.0]) * &mask;
        // One start for every run: the seed is global to the process, and tests run in parallel.
        let start = Critic::new(&tiny(true), Device::Cpu, 7).unwrap();
        let run = |memory: Memory| {
            let critic = Critic::new(&tiny(true), Device::Cpu, 7).unwrap();
            tch::no_grad(|| {
                for (k, mut t) in critic.vs.variables() {
                    t.copy_(&start.vs.variables()[&k]);
                }
            });
            // One step at rate 0: the gradient stays in the weights, which do not move.
            let cfg = ValueConfig {
                epochs: 1,
                mini_batches: 1,
                lr: 0.0,
                max_grad_norm: 1e9,
                cliprange_value: 0.05,
                agg: crate::train::loss::AggMode::TokenMean,
                loss_scale_factor: 1.0,
                memory,
            };
            // Row 0's old values on the far side of the current ones from its return: the clip
            // binds there (and passes no gradient), not on the other rows.
            let values_old = tch::no_grad(|| critic.values_in_microbatches(&b, &memory))
                + b.row_values(&[-0.3, 0.0, 0.0]);
            let vb = ValueBatch {
                seqs: &b,
                values_old,
                returns: returns.shallow_clone(),
                mask: mask.shallow_clone(),
            };
            let mut opt = AdamW::new(&critic.vs, AdamWConfig::default());
            let stats = value_update(&critic, &mut opt, &vb, &cfg, &[vec![2, 0, 1]]);
            let grads: Vec<Tensor> = critic
                .vs
                .trainable_variables()
                .iter()
                .map(|t| t.grad().flatten(0, -1))
                .collect();
            (Tensor::cat(&grads, 0), stats)
        };
        let (plain, s0) = run(Memory::default());
        assert!(
            plain.norm().double_value(&[]) > 0.0,
            "a gradient worth comparing"
        );
        assert!(
            s0.vf_clipfrac > 0.0,
            "the clip binds (a metric worth comparing)"
        );
        let budget = Memory {
            max_tokens_per_microbatch: 12,
            ..Memory::default()
        };
        let rows_all = [0, 1, 2];
        assert!(budget.microbatches(&rows_all, b.row_lens()).len() > 1);
        for padding_free in [false, true] {
            for memory in [budget, Memory::default()] {
                let memory = Memory {
                    padding_free,
                    ..memory
                };
                let (other, s) = run(memory);
                let rel =
                    (&other - &plain).norm().double_value(&[]) / plain.norm().double_value(&[]);
                assert!(
                    rel < 1e-5,
                    "{memory:?}: gradients differ by {rel} (relative)"
                );
                assert!((s.value_loss - s0.value_loss).abs() < 1e-6, "{memory:?}");
                assert!((s.vf_clipfrac - s0.vf_clipfrac).abs() < 1e-6, "{memory:?}");
            }
        }
    }

    #[test]
    fn a_nan_return_skips_every_critic_step_and_leaves_the_weights() {
        let critic = Critic::new(&tiny(true), Device::Cpu, 7).unwrap();
        let (p, c) = rows();
        let b = batch(&p, &c);
        let mask = b.loss_mask.shallow_clone();
        let returns = b.row_values(&[1.0, f32::NAN, 0.0]) * &mask;
        let values_old = {
            let _g = tch::no_grad_guard();
            critic.values(&b)
        };
        let before: Vec<(String, Tensor)> = critic
            .vs
            .variables()
            .into_iter()
            .map(|(k, t)| (k, t.detach().copy()))
            .collect();
        let cfg = ValueConfig {
            epochs: 1,
            mini_batches: 1,
            lr: 1e-2,
            max_grad_norm: 1.0,
            cliprange_value: 0.5,
            agg: crate::train::loss::AggMode::TokenMean,
            loss_scale_factor: 1.0,
            memory: Memory::default(),
        };
        let mut opt = AdamW::new(&critic.vs, AdamWConfig::default());
        let vb = ValueBatch {
            seqs: &b,
            values_old,
            returns,
            mask,
        };
        let s = value_update(&critic, &mut opt, &vb, &cfg, &[vec![0, 1, 2]]);
        assert_eq!((s.optimizer_steps, s.nonfinite_grad_steps), (1, 1));
        assert_eq!(opt.steps(), 0);
        let after = critic.vs.variables();
        for (k, t) in &before {
            assert!(t.equal(&after[k]), "{k} changed");
        }
    }
}
