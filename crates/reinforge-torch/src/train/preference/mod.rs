//! The tensor side of the offline preference trainers (DPO, ORPO, KTO, reward models): their
//! token-id rows (`rows`), each objective's forward passes, loss and optimizer step (`dpo`,
//! `orpo`, `kto`, `rm`), and what they share: per-token and summed log-probs of
//! `prompt ++ completion` rows, a data-parallel rank's share of a step's rows with the
//! all-gather of their per-row values, and the optimizer step after the whole batch's loss.
//! Their public functions take and return token ids and numbers, so reinforge-train drives
//! them without naming a tensor.
//!
//! Data-parallel: each rank reads its contiguous share of a step's rows through the model, the
//! per-row values are all-gathered, and every rank computes the loss of the whole batch, with
//! gradient flowing only through its own rows; summing the gradients over the ranks then gives
//! exactly the single-process gradient, whatever couples the rows.

use std::ops::Range;

use anyhow::Result;
use tch::{Device, Kind, Tensor};

use crate::dist::{all_reduce_gradients, ProcessGroup, DEFAULT_BUCKET_BYTES};
use crate::model::batch::SequenceBatch;
use crate::model::logprobs::{logprobs_of_hidden, Entropy};
use crate::model::memory::Memory;
use crate::model::policy::Policy;
use crate::train::optim::{AdamW, GradStep};

pub mod dpo;
pub mod forward;
pub mod kto;
pub mod orpo;
pub mod rm;
pub mod rows;

pub use forward::Forward;
pub use rows::{Pairs, Unpaired};

/// One optimizer step of an offline objective: the model, its optimizer, this process's place
/// in a data-parallel job, and the step's gradient clipping and learning rate.
pub struct Update<'a> {
    pub policy: &'a Policy,
    pub opt: &'a mut AdamW,
    pub dp: Option<Ranks<'a>>,
    pub max_grad_norm: f64,
    pub lr: f64,
    /// The token budget of one forward pass ([`Deferred`]), padding-free packing and
    /// activation checkpointing ([`Forward`]).
    pub memory: Memory,
}

impl<'a> Update<'a> {
    /// This rank's share of a step of `n` rows.
    fn share(&self, n: usize) -> Share<'a> {
        Share {
            memory: self.memory,
            ..Share::new(self.dp, n, self.policy.device())
        }
    }

    /// Backpropagates the whole batch's `loss` through the values `deferred` read (finishing
    /// its checkpointed passes, replaying its micro-batches), sums the gradients over the
    /// ranks and steps.
    fn apply(self, loss: &Tensor, deferred: Deferred) -> Result<GradStep> {
        let pg = self.dp.map(|d| d.pg);
        if loss.requires_grad() {
            loss.backward();
        }
        deferred.finish();
        backward_and_step(
            self.policy,
            self.opt,
            &loss.detach(),
            pg,
            (self.max_grad_norm, self.lr),
        )
    }
}

/// A loss value and the objective's metrics `M`, measured on one batch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Figures<M> {
    pub loss: f64,
    pub metrics: M,
}

/// The optimizer step's gradient norm and whether it stepped (`(NaN, false)` when skipped).
pub type Stepped<M> = (Figures<M>, GradStep);

/// A float tensor of one value per row of `rows`, read from `values`.
fn per_row(values: &[f32], rows: &[usize]) -> Tensor {
    // host: values computed once (reference log-probs, margins); the losses move them.
    Tensor::from_slice(&rows.iter().map(|&r| values[r]).collect::<Vec<_>>())
}

/// The values of a float tensor, on the host.
fn to_vec(t: &Tensor) -> Vec<f32> {
    // host: per-row values (reference log-probs) read back as numbers.
    Vec::<f32>::try_from(&t.to_kind(Kind::Float).to_device(Device::Cpu)).unwrap_or_default()
}

/// This process's place in a data-parallel job.
#[derive(Clone, Copy)]
pub struct Ranks<'a> {
    pub pg: &'a ProcessGroup,
    pub rank: usize,
    pub world: usize,
}

/// One rank's part of a step of `n` rows: contiguous shares whose sizes differ by at most one
/// (every row is read by exactly one rank).
pub struct Share<'d> {
    dp: Option<Ranks<'d>>,
    n: usize,
    /// Where the model's values live (a rank without rows contributes empty ones there).
    device: Device,
    /// The token budget of one forward pass ([`Self::read_deferred`]).
    memory: Memory,
}

impl<'d> Share<'d> {
    /// The share of `n` rows of `dp`'s rank (all of them without `dp`), values on `device`.
    pub fn new(dp: Option<Ranks<'d>>, n: usize, device: Device) -> Self {
        Self {
            dp,
            n,
            device,
            memory: Memory::default(),
        }
    }

    /// The rows of rank `r` of `w`.
    fn range_of(&self, r: usize, w: usize) -> Range<usize> {
        let (base, extra) = (self.n / w, self.n % w);
        let start = r * base + r.min(extra);
        start..start + base + usize::from(r < extra)
    }

    /// This rank's rows (positions in the step's row list).
    pub fn local(&self) -> Range<usize> {
        match self.dp {
            Some(d) => self.range_of(d.rank, d.world),
            None => 0..self.n,
        }
    }

    /// The whole batch's `[n]` values from every rank's `[local.len()]` part `local`, in row
    /// order; only this rank's rows carry gradient. Without `dp`, `local` itself.
    pub fn gather(&self, local: &Tensor) -> Result<Tensor> {
        let Some(d) = self.dp else {
            return Ok(local.shallow_clone());
        };
        let w = d.world;
        let widest = self.n.div_ceil(w) as i64;
        let padded = Tensor::zeros([widest], (Kind::Float, local.device()));
        if local.numel() > 0 {
            let mut head = padded.narrow(0, 0, local.size()[0]);
            head.copy_(&local.detach().to_kind(Kind::Float));
        }
        let parts = d.pg.all_gather(&padded)?;
        let pieces: Vec<Tensor> = (0..w)
            .map(|r| {
                if r == d.rank {
                    local.to_kind(Kind::Float)
                } else {
                    parts[r].narrow(0, 0, self.range_of(r, w).len() as i64)
                }
            })
            .collect();
        Ok(Tensor::cat(&pieces, 0))
    }
}

impl Share<'_> {
    /// The whole batch's `parts` per-row tensors: `read` computes them (`[k]` each) for this
    /// rank's `k` rows of `rows`, and they are gathered over the ranks. A rank with no rows
    /// reads nothing and contributes none.
    pub fn read(
        &self,
        rows: &[usize],
        parts: usize,
        read: impl FnOnce(&[usize]) -> Vec<Tensor>,
    ) -> Result<Vec<Tensor>> {
        let local = &rows[self.local()];
        let values = if local.is_empty() {
            (0..parts)
                .map(|_| Tensor::zeros([0], (Kind::Float, self.device)))
                .collect()
        } else {
            read(local)
        };
        values.iter().map(|v| self.gather(v)).collect()
    }

    /// [`Self::read`] through forward passes of `policy` under the step's memory settings
    /// ([`Forward`]), in the micro-batches of its token budget (`tokens(r)`: the tokens of row
    /// `r`'s sequences). With one micro-batch the values carry gradient and the [`Deferred`]
    /// pass finishes their checkpointed passes once the loss is backpropagated; with several,
    /// the values are read without gradient and returned as leaves, and the [`Deferred`] pass
    /// backpropagates the loss through them micro-batch by micro-batch.
    pub fn read_deferred<'r>(
        &self,
        policy: &'r Policy,
        rows: &[usize],
        parts: usize,
        tokens: impl Fn(usize) -> usize,
        read: impl Fn(&[usize], &Forward<'r>) -> Vec<Tensor> + 'r,
    ) -> Result<(Vec<Tensor>, Deferred<'r>)> {
        let local = &rows[self.local()];
        let micro = microbatch_rows(&self.memory, local, tokens);
        let memory = self.memory;
        if micro.len() <= 1 {
            let fwd = Forward::new(policy, &memory);
            let values = self.read(rows, parts, |local| read(local, &fwd))?;
            let deferred = Deferred {
                passes: Some(fwd),
                replay: None,
            };
            return Ok((values, deferred));
        }
        let mut leaves = vec![];
        let values = self.read(rows, parts, |_| {
            let pieces: Vec<Vec<Tensor>> = tch::no_grad(|| {
                micro
                    .iter()
                    .map(|mb| read(mb, &Forward::new(policy, &memory)))
                    .collect()
            });
            leaves = (0..parts)
                .map(|p| {
                    let part: Vec<&Tensor> = pieces.iter().map(|v| &v[p]).collect();
                    Tensor::cat(&part, 0).set_requires_grad(true)
                })
                .collect();
            leaves.iter().map(Tensor::shallow_clone).collect()
        })?;
        let replay = Replay {
            read: Box::new(read),
            policy,
            memory,
            micro,
            leaves,
        };
        let deferred = Deferred {
            passes: None,
            replay: Some(replay),
        };
        Ok((values, deferred))
    }
}

/// `rows` split in order into `memory`'s micro-batches, `tokens(r)` being row `r`'s size.
fn microbatch_rows(
    memory: &Memory,
    rows: &[usize],
    tokens: impl Fn(usize) -> usize,
) -> Vec<Vec<usize>> {
    let lens: Vec<usize> = rows.iter().map(|&r| tokens(r)).collect();
    let idx: Vec<i64> = (0..rows.len() as i64).collect();
    memory
        .microbatches(&idx, &lens)
        .iter()
        .map(|mb| mb.iter().map(|&i| rows[i as usize]).collect())
        .collect()
}

/// Per-row values of `rows` without gradient (reference log-probs, held-out figures): `read`
/// computes `parts` values `[k]` for some `k` rows through a [`Forward`] of `policy` under
/// `memory` (its packing; checkpointing needs no recompute without gradient), in the
/// micro-batches of its token budget (`tokens(r)`: the tokens of row `r`'s sequences) or,
/// without one, in blocks of `batch` rows; each part is concatenated in row order.
pub fn read_without_grad(
    policy: &Policy,
    (memory, batch): (&Memory, usize),
    rows: &[usize],
    tokens: impl Fn(usize) -> usize,
    parts: usize,
    read: impl Fn(&[usize], &Forward) -> Vec<Tensor>,
) -> Vec<Tensor> {
    let _guard = tch::no_grad_guard();
    let chunks: Vec<Vec<usize>> = if memory.max_tokens_per_microbatch > 0 {
        microbatch_rows(memory, rows, tokens)
    } else {
        rows.chunks(batch.max(1)).map(<[usize]>::to_vec).collect()
    };
    let fwd = Forward::new(policy, memory);
    let pieces: Vec<Vec<Tensor>> = chunks.iter().map(|c| read(c, &fwd)).collect();
    (0..parts)
        .map(|p| {
            let part: Vec<&Tensor> = pieces.iter().map(|v| &v[p]).collect();
            if part.is_empty() {
                Tensor::zeros([0], (Kind::Float, policy.device()))
            } else {
                Tensor::cat(&part, 0)
            }
        })
        .collect()
}

/// What is left of a step's backward pass once its loss is backpropagated to the per-row
/// values [`Share::read_deferred`] read: the checkpointed passes of one read with gradient,
/// or the [`Replay`] of values read in micro-batches.
pub struct Deferred<'r> {
    passes: Option<Forward<'r>>,
    replay: Option<Replay<'r>>,
}

impl Deferred<'_> {
    /// Finishes the backward pass (after `loss.backward()`).
    fn finish(self) {
        if let Some(fwd) = self.passes {
            fwd.finish();
        }
        if let Some(replay) = self.replay {
            replay.run();
        }
    }
}

/// A step's per-row values read in micro-batches without gradient: once the loss is
/// backpropagated to them, each micro-batch is read again with gradient and
/// `Σ value · ∂loss/∂value` backpropagated. That is the chain rule through the values, so
/// the gradient is the one-pass gradient whatever couples the rows (DPO's pairs, KTO's batch
/// KL), for one more forward pass; one micro-batch's activations are alive at a time.
struct Replay<'r> {
    read: Box<RowReader<'r>>,
    policy: &'r Policy,
    memory: Memory,
    /// This rank's rows, per micro-batch, in order.
    micro: Vec<Vec<usize>>,
    /// The values of this rank's rows per part `[k]`, leaves the loss was backpropagated to.
    leaves: Vec<Tensor>,
}

/// What reads per-row values (`[k]` per part) of some rows of a step through forward passes.
type RowReader<'r> = dyn Fn(&[usize], &Forward<'r>) -> Vec<Tensor> + 'r;

impl Replay<'_> {
    /// Backpropagates the leaves' gradients through each micro-batch's recomputed values.
    fn run(self) {
        let grads: Vec<Tensor> = self.leaves.iter().map(Tensor::grad).collect();
        let mut offset = 0;
        for mb in &self.micro {
            let k = mb.len() as i64;
            let fwd = Forward::new(self.policy, &self.memory);
            let terms: Vec<Tensor> = (self.read)(mb, &fwd)
                .iter()
                .zip(&grads)
                .filter(|(v, g)| v.requires_grad() && g.defined())
                .map(|(v, g)| (v.to_kind(Kind::Float) * g.narrow(0, offset, k)).sum(Kind::Float))
                .collect();
            if !terms.is_empty() {
                Tensor::stack(&terms, 0).sum(Kind::Float).backward();
            }
            fwd.finish();
            offset += k;
        }
    }
}

/// Per-token log-probs `[N, L-1]` of `prompts[i] ++ completions[i]` through `fwd`, with the
/// batch they were read from (its `loss_mask` marks the completion tokens).
pub fn token_logps(
    fwd: &Forward,
    prompts: &[&[i64]],
    completions: &[&[i64]],
    pad: i64,
) -> (Tensor, SequenceBatch) {
    let batch = SequenceBatch::new(prompts, completions, pad, fwd.device());
    let hidden = fwd.hidden(&batch);
    let model = &fwd.policy().model;
    let (logp, _) = logprobs_of_hidden(model, &hidden, &batch, (1.0, Entropy::Skip));
    (logp, batch)
}

/// Summed completion log-probs `[N]` of `prompts[i] ++ completions[i]` through `fwd`.
pub fn completion_logps(
    fwd: &Forward,
    prompts: &[&[i64]],
    completions: &[&[i64]],
    pad: i64,
) -> Tensor {
    let (logp, batch) = token_logps(fwd, prompts, completions, pad);
    (logp * &batch.loss_mask).sum_dim_intlist(1, false, Kind::Float)
}

/// A float tensor of `values`' lengths.
pub fn lengths_of(values: &[&[i64]]) -> Tensor {
    let v: Vec<f32> = values.iter().map(|s| s.len() as f32).collect();
    // host: lengths; the preference losses move them to the log-probs' device.
    Tensor::from_slice(&v)
}

/// Backpropagates `loss` (when this rank's rows feed it), sums the gradients over the ranks of
/// `pg`, and takes one clipped AdamW step.
pub fn backward_and_step(
    policy: &Policy,
    opt: &mut AdamW,
    loss: &Tensor,
    pg: Option<&ProcessGroup>,
    (max_grad_norm, lr): (f64, f64),
) -> Result<GradStep> {
    if loss.requires_grad() {
        loss.backward();
    }
    if let Some(pg) = pg {
        all_reduce_gradients(pg, &policy.vs, DEFAULT_BUCKET_BYTES)?;
    }
    Ok(opt.clip_and_step(max_grad_norm, lr))
}
