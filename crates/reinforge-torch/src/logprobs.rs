//! Per-token log-probabilities and entropies of a packed batch under the model.

use tch::{Kind, Tensor};

use crate::batch::SequenceBatch;
use crate::model::{ForwardInput, Transformer};

/// Log-probs of each target token and the entropy of each predictive distribution, both
/// `[N, L-1]`, from logits divided by `temperature` (so they match the sampler's log-probs).
pub fn token_logprobs(
    model: &Transformer,
    batch: &SequenceBatch,
    temperature: f64,
) -> (Tensor, Tensor) {
    let logits = model.forward(
        &ForwardInput {
            ids: &batch.ids,
            positions: &batch.positions,
            key_mask: &batch.attn,
        },
        None,
        false,
    );
    let l = logits.size()[1];
    let mut logits = logits.narrow(1, 0, l - 1).to_kind(Kind::Float);
    if temperature > 0.0 && temperature != 1.0 {
        logits = logits / temperature;
    }
    let logp_all = logits.log_softmax(-1, Kind::Float);
    let targets = batch.ids.narrow(1, 1, l - 1).unsqueeze(-1);
    let logp = logp_all.gather(-1, &targets, false).squeeze_dim(-1);
    let entropy = -(logp_all.exp() * &logp_all).sum_dim_intlist(-1, false, Kind::Float);
    (logp, entropy)
}
