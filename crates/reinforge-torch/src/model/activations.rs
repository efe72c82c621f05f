//! Activation checkpointing (TRL's `gradient_checkpointing`): the forward pass keeps only each
//! decoder layer's input; the backward pass recomputes one layer at a time and backpropagates
//! through it, so a layer's activations live only while its gradient is computed.
//!
//! Written here as two passes rather than a libtorch autograd function: tch cannot register
//! a Rust closure as an autograd node. The loss is backpropagated to the last layer's output
//! (a leaf), then each layer, last first, is recomputed on its saved input and
//! `sum(output * grad)` is backpropagated, which gives its parameters and its input exactly
//! the chain rule's gradients (the same kernels as the plain pass, in the same order).

use tch::{Kind, Tensor};

use crate::model::transformer::{ForwardInput, LayerContext, Transformer};
use crate::precision::autocast;

/// Runs `loss_of(final hidden states)` over `input` and backpropagates it with every decoder
/// layer recomputed in the backward pass. Returns the loss (detached) and what `loss_of`
/// measured beside it. Gradients accumulate into the parameters as `loss.backward()` would.
pub fn backward_checkpointed<S>(
    model: &Transformer,
    input: &ForwardInput,
    loss_of: impl FnOnce(&Tensor) -> (Tensor, S),
) -> (Tensor, S) {
    let (saved, hidden) = Checkpointed::forward(model, input);
    let (loss, extra) = loss_of(&hidden);
    if !loss.requires_grad() {
        return (loss, extra);
    }
    loss.backward();
    saved.backward(model, input);
    (loss.detach(), extra)
}

/// A forward pass that kept only each decoder layer's input: its final hidden states hang off
/// a leaf (the last layer's output), and [`Self::backward`], once whatever reads them has been
/// backpropagated to that leaf, finishes the backward pass through the layers. Split in two
/// so a caller can backpropagate several passes' results together (the preference losses,
/// which couple rows) before finishing each pass.
pub(crate) struct Checkpointed {
    inputs: Vec<Tensor>,
    leaf: Tensor,
    ctx: LayerContext,
}

impl Checkpointed {
    /// The final hidden states of `input` (differentiable with respect to the leaf only) and
    /// what [`Self::backward`] needs.
    pub(crate) fn forward(model: &Transformer, input: &ForwardInput) -> (Self, Tensor) {
        let device = input.ids.device();
        let (inputs, last, ctx) = tch::no_grad(|| {
            autocast(device, || {
                let mut x = model.embed_inputs(input);
                let ctx = model.layer_context(input, x.kind());
                let mut inputs = Vec::with_capacity(model.num_layers());
                for i in 0..model.num_layers() {
                    let next = model.layer(i, &x, &ctx);
                    inputs.push(std::mem::replace(&mut x, next));
                }
                (inputs, x, ctx)
            })
        });
        let leaf = last.set_requires_grad(true);
        let hidden = autocast(device, || model.final_norm(&leaf));
        (Self { inputs, leaf, ctx }, hidden)
    }

    /// Backpropagates the gradient the leaf received through every layer, last first, each
    /// recomputed on its saved input, and through the embedding; nothing when the leaf
    /// received none. `input` is the one [`Self::forward`] read.
    pub(crate) fn backward(self, model: &Transformer, input: &ForwardInput) {
        let device = input.ids.device();
        let mut grad = self.leaf.grad();
        for (i, x) in self.inputs.into_iter().enumerate().rev() {
            if !grad.defined() {
                return;
            }
            let x = x.set_requires_grad(true);
            let out = autocast(device, || model.layer(i, &x, &self.ctx));
            backpropagate(&out, &grad);
            grad = x.grad();
        }
        let embedded = autocast(device, || model.embed_inputs(input));
        if grad.defined() && embedded.requires_grad() {
            backpropagate(&embedded, &grad);
        }
    }
}

/// Backpropagates `grad` (the gradient of the loss with respect to `out`) through `out`'s
/// graph: `d/dθ Σ out·grad = (∂out/∂θ)ᵀ grad`.
fn backpropagate(out: &Tensor, grad: &Tensor) {
    if out.requires_grad() {
        (out * grad).sum(Kind::Float).backward();
    }
}
