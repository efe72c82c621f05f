//! The forward passes of the preference trainers under the run's [`Memory`] settings, through
//! the machinery the RL update and SFT use: padded or packed rows
//! ([`SequenceBatch::hidden`], TRL's `padding_free`) and activation checkpointing
//! ([`Checkpointed`], TRL's `gradient_checkpointing`).
//!
//! A preference loss couples the rows of several passes (a pair's two sides, KTO's KL point),
//! so a checkpointed pass cannot finish its backward pass on its own: [`Forward::hidden`]
//! returns final hidden states hanging off a leaf, the loss is backpropagated to every leaf,
//! then [`Forward::finish`] runs each pass's layers backward, recomputed.

use std::cell::RefCell;

use tch::{Device, Kind, Tensor};

use crate::activations::Checkpointed;
use crate::batch::{PackedRows, SequenceBatch};
use crate::memory::Memory;
use crate::model::ForwardInput;
use crate::policy::Policy;

/// Runs forward passes of `policy` with packing and checkpointing as the memory settings say,
/// keeping the checkpointed passes whose backward pass is still to finish.
pub struct Forward<'m> {
    policy: &'m Policy,
    padding_free: bool,
    checkpointing: bool,
    pending: RefCell<Vec<Pending>>,
}

/// A checkpointed pass and the rows it read.
struct Pending {
    saved: Checkpointed,
    rows: PassRows,
}

/// The model input of a checkpointed pass, owned until its backward pass.
enum PassRows {
    Padded {
        ids: Tensor,
        positions: Tensor,
        key_mask: Tensor,
    },
    Packed(PackedRows),
}

impl PassRows {
    fn input(&self) -> ForwardInput<'_> {
        match self {
            Self::Padded {
                ids,
                positions,
                key_mask,
            } => ForwardInput {
                ids,
                positions,
                key_mask,
                segments: &[],
            },
            Self::Packed(p) => p.input(),
        }
    }
}

impl<'m> Forward<'m> {
    /// Forward passes of `policy` under `memory`'s `padding_free` and
    /// `gradient_checkpointing` (its token budget is [`super::Share`]'s).
    pub fn new(policy: &'m Policy, memory: &Memory) -> Self {
        Self {
            policy,
            padding_free: memory.padding_free,
            checkpointing: memory.gradient_checkpointing,
            pending: RefCell::new(vec![]),
        }
    }

    /// The model these passes run.
    pub fn policy(&self) -> &'m Policy {
        self.policy
    }

    /// Where the model lives.
    pub fn device(&self) -> Device {
        self.policy.device()
    }

    /// Final hidden states `[N, L, H]` of `batch`'s rows (zeros at padding when packed).
    /// Checkpointed when gradients are being recorded: the pass is then kept until
    /// [`Self::finish`].
    pub fn hidden(&self, batch: &SequenceBatch) -> Tensor {
        let model = &self.policy.model;
        if !(self.checkpointing && grad_enabled()) {
            return batch.hidden(model, self.padding_free);
        }
        let rows = match self.padding_free.then(|| batch.packed()).flatten() {
            Some(packed) => PassRows::Packed(packed),
            None => PassRows::Padded {
                ids: batch.ids.shallow_clone(),
                positions: batch.positions.shallow_clone(),
                key_mask: batch.attn.shallow_clone(),
            },
        };
        let (saved, hidden) = Checkpointed::forward(model, &rows.input());
        let hidden = match &rows {
            PassRows::Packed(packed) => packed.unpack(&hidden),
            PassRows::Padded { .. } => hidden,
        };
        self.pending.borrow_mut().push(Pending { saved, rows });
        hidden
    }

    /// Finishes the backward pass of every checkpointed pass, last first, once what read
    /// their hidden states has been backpropagated (a pass whose leaf got no gradient is
    /// skipped).
    pub fn finish(self) {
        let model = &self.policy.model;
        for pass in self.pending.into_inner().into_iter().rev() {
            pass.saved.backward(model, &pass.rows.input());
        }
    }
}

/// Whether autograd records operations here (not under `no_grad`): tch does not expose
/// libtorch's grad mode, so a one-element product tells.
fn grad_enabled() -> bool {
    let probe = Tensor::zeros([1], (Kind::Float, Device::Cpu)).set_requires_grad(true);
    (&probe * 1.0).requires_grad()
}
