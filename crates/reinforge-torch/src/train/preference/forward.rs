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

use crate::model::activations::Checkpointed;
use crate::model::batch::{PackedRows, SequenceBatch};
use crate::model::memory::Memory;
use crate::model::policy::Policy;
use crate::model::transformer::ForwardInput;

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
                images: None,
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
    // host: a one-element probe of the grad mode, on no device's data.
    let probe = Tensor::zeros([1], (Kind::Float, Device::Cpu)).set_requires_grad(true);
    (&probe * 1.0).requires_grad()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::value::tests::{rows, tiny};

    /// The parameters' gradients of a loss coupling the rows (a log-sum-exp of their summed
    /// log-probs) read through `Forward` under `memory`, and how many checkpointed passes it
    /// kept.
    fn gradients(policy: &Policy, memory: Memory) -> (Vec<Tensor>, usize) {
        for v in policy.vs.trainable_variables() {
            let mut v = v;
            v.zero_grad();
        }
        let (prompts, completions) = rows();
        let p: Vec<&[i64]> = prompts.iter().map(Vec::as_slice).collect();
        let c: Vec<&[i64]> = completions.iter().map(Vec::as_slice).collect();
        let fwd = Forward::new(policy, &memory);
        let lp = super::super::completion_logps(&fwd, &p, &c, 0);
        let kept = fwd.pending.borrow().len();
        lp.logsumexp([0], false).backward();
        fwd.finish();
        let grads = policy
            .vs
            .trainable_variables()
            .iter()
            .map(|v| v.grad().copy())
            .collect();
        (grads, kept)
    }

    #[test]
    fn checkpointed_and_packed_passes_give_the_plain_gradient() {
        let policy = Policy::new(&tiny(false), Device::Cpu, 0).unwrap();
        let (plain, kept) = gradients(&policy, Memory::default());
        assert_eq!(kept, 0);
        for (ckpt, packed) in [(true, false), (false, true), (true, true)] {
            let memory = Memory {
                gradient_checkpointing: ckpt,
                padding_free: packed,
                ..Memory::default()
            };
            let (g, kept) = gradients(&policy, memory);
            assert_eq!(
                kept,
                usize::from(ckpt),
                "a checkpointed pass waits for finish"
            );
            for (a, b) in plain.iter().zip(&g) {
                let gap = (a - b).abs().max().double_value(&[]);
                let scale = a.abs().max().double_value(&[]).max(1e-6);
                assert!(gap <= 1e-5 * scale, "{ckpt} {packed}: {gap} of {scale}");
            }
        }
        // Without gradients nothing is kept (KTO's KL point, evaluation).
        let memory = Memory {
            gradient_checkpointing: true,
            ..Memory::default()
        };
        let fwd = Forward::new(&policy, &memory);
        let batch = SequenceBatch::new(&[&[1, 2, 3][..]], &[&[4][..]], 0, Device::Cpu);
        let hidden = tch::no_grad(|| fwd.hidden(&batch));
        assert_eq!(hidden.size(), [1, 4, 16]);
        assert!(fwd.pending.borrow().is_empty());
        assert!(grad_enabled() && !tch::no_grad(grad_enabled));
    }
}
