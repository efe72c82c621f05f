//! Per-token log-probabilities and entropies of a packed batch under the model, computed at
//! completion positions only and in row chunks, so the `[rows, tokens, vocab]` float32 logits
//! tensor of a real vocabulary (49k for SmolLM2: 0.7 GB for 32 rows of 110 tokens, several
//! times over in log-softmax, exp and their gradients) is never materialised.
//!
//! The LM head runs on the hidden states of the target positions of [`SequenceBatch::loss_mask`]
//! (`M` rows), in chunks of [`CHUNK_ROWS`]; what autograd keeps is one `[M, V]` logits tensor.
//! Log-probs are `logit[target] - logsumexp(logits)`; the entropy `logsumexp - Σ p·logit` is
//! differentiable only when the loss uses it ([`Entropy::Differentiable`]).

use tch::{Kind, Tensor};

use crate::model::batch::SequenceBatch;
use crate::model::memory::Memory;
use crate::model::transformer::Transformer;

/// Target positions whose logits are computed together: bounds the transient `[chunk, V]`
/// tensors (softmax for the entropy) at 512 x V floats (100 MB for a 49k vocabulary).
pub const CHUNK_ROWS: i64 = 512;

/// What to compute of the predictive distributions' entropy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entropy {
    /// Not at all (zeros): log-probs only.
    Skip,
    /// As a metric, without gradient (no `[M, V]` softmax kept for backward).
    Detached,
    /// With gradient, for an entropy bonus in the loss.
    Differentiable,
}

/// Log-probs of each completion token and the entropy of its predictive distribution, both
/// `[N, L-1]` and zero outside `batch.loss_mask`, from logits divided by `temperature` (so
/// they match the sampler's log-probs). Entropy as a detached metric.
pub fn token_logprobs(
    model: &Transformer,
    batch: &SequenceBatch,
    temperature: f64,
) -> (Tensor, Tensor) {
    token_logprobs_with(model, batch, temperature, Entropy::Detached)
}

/// [`token_logprobs`] with the entropy computed as `entropy` says.
pub fn token_logprobs_with(
    model: &Transformer,
    batch: &SequenceBatch,
    temperature: f64,
    entropy: Entropy,
) -> (Tensor, Tensor) {
    token_logprobs_as(model, batch, (temperature, entropy), &Memory::default())
}

/// [`token_logprobs_with`] from padded rows, or packed ones as `memory` says.
fn token_logprobs_as(
    model: &Transformer,
    batch: &SequenceBatch,
    (temperature, entropy): (f64, Entropy),
    memory: &Memory,
) -> (Tensor, Tensor) {
    let hidden = batch.hidden_for(model, memory);
    logprobs_of_hidden(model, &hidden, batch, (temperature, entropy))
}

/// Backpropagates `loss_of(log-probs, entropies)` of `batch` under `model` ([`token_logprobs_with`]'s
/// tensors) and returns the loss (detached) with what `loss_of` measured: through the plain
/// autograd graph, or with `memory.gradient_checkpointing` recomputing every decoder layer in
/// the backward pass ([`crate::model::activations`]), over padded or packed (`memory.padding_free`, `memory.shared_prompts`)
/// rows; the gradients are the same.
pub fn backward_logprob_loss<S>(
    model: &Transformer,
    batch: &SequenceBatch,
    (temperature, entropy, memory): (f64, Entropy, &Memory),
    loss_of: impl FnOnce(&Tensor, &Tensor) -> (Tensor, S),
) -> (Tensor, S) {
    let of_hidden = |hidden: &Tensor| {
        let (logp, ent) = logprobs_of_hidden(model, hidden, batch, (temperature, entropy));
        loss_of(&logp, &ent)
    };
    if memory.gradient_checkpointing {
        use crate::model::activations::backward_checkpointed;
        return match batch.packed_for(memory) {
            Some(packed) => backward_checkpointed(model, &packed.input(), |hidden| {
                of_hidden(&packed.unpack(hidden))
            }),
            None => backward_checkpointed(model, &batch.input(), of_hidden),
        };
    }
    let (loss, extra) = of_hidden(&batch.hidden_for(model, memory));
    if loss.requires_grad() {
        loss.backward();
    }
    (loss.detach(), extra)
}

/// [`token_logprobs_with`] run over the micro-batches of `memory` (the passes before an
/// update, without gradient): each micro-batch is read at its own width and its rows are put
/// back in place, zeros beyond their length.
pub fn token_logprobs_in_microbatches(
    model: &Transformer,
    batch: &SequenceBatch,
    (temperature, entropy): (f64, Entropy),
    memory: &Memory,
) -> (Tensor, Tensor) {
    let mut parts = batch.in_microbatches(memory, |sub| {
        let (logp, ent) = token_logprobs_as(model, sub, (temperature, entropy), memory);
        vec![logp, ent]
    });
    let ent = parts.pop().expect("entropies");
    (parts.pop().expect("log-probs"), ent)
}

/// [`token_logprobs_with`] from the final hidden states `hidden` `[N, L, H]` of `batch`.
pub(crate) fn logprobs_of_hidden(
    model: &Transformer,
    hidden: &Tensor,
    batch: &SequenceBatch,
    (temperature, entropy): (f64, Entropy),
) -> (Tensor, Tensor) {
    let (n, l, h) = hidden.size3().expect("hidden states are [N, L, H]");
    let rows = (l - 1) * n;
    let picked = batch
        .loss_mask
        .reshape([rows])
        .gt(0.0)
        .nonzero()
        .squeeze_dim(-1);
    let hidden = hidden
        .narrow(1, 0, l - 1)
        .reshape([rows, h])
        .index_select(0, &picked);
    let targets = batch
        .ids
        .narrow(1, 1, l - 1)
        .reshape([rows])
        .index_select(0, &picked);
    let m = picked.size()[0];
    let mut logps = Vec::new();
    let mut entropies = Vec::new();
    let mut start = 0;
    while start < m {
        let len = CHUNK_ROWS.min(m - start);
        let (lp, ent) = chunk_logprobs(
            model,
            &hidden.narrow(0, start, len),
            &targets.narrow(0, start, len),
            temperature,
            entropy,
        );
        logps.push(lp);
        entropies.extend(ent);
        start += len;
    }
    let scatter = |parts: &[Tensor], like: &Tensor| -> Tensor {
        let zeros = Tensor::zeros([rows], (Kind::Float, like.device()));
        if parts.is_empty() {
            return zeros.view([n, l - 1]);
        }
        zeros
            .index_copy(0, &picked, &Tensor::cat(parts, 0))
            .view([n, l - 1])
    };
    let logp = scatter(&logps, &batch.ids);
    let ent = scatter(&entropies, &batch.ids);
    (logp, ent)
}

/// Log-probs of `targets` `[C]` and (per `entropy`) entropies under the LM head applied to
/// `hidden` `[C, H]`, in float32.
fn chunk_logprobs(
    model: &Transformer,
    hidden: &Tensor,
    targets: &Tensor,
    temperature: f64,
    entropy: Entropy,
) -> (Tensor, Option<Tensor>) {
    let mut logits = model.logits(hidden).to_kind(Kind::Float);
    if temperature > 0.0 && temperature != 1.0 {
        logits = logits / temperature;
    }
    let lse = logits.logsumexp([-1], false);
    let logp = logits
        .gather(-1, &targets.unsqueeze(-1), false)
        .squeeze_dim(-1)
        - &lse;
    let entropy_of = |logits: &Tensor, lse: &Tensor| -> Tensor {
        let p = (logits - lse.unsqueeze(-1)).exp();
        lse - (p * logits).sum_dim_intlist(-1, false, Kind::Float)
    };
    let ent = match entropy {
        Entropy::Skip => None,
        Entropy::Detached => Some(tch::no_grad(|| entropy_of(&logits.detach(), &lse.detach()))),
        Entropy::Differentiable => Some(entropy_of(&logits, &lse)),
    };
    (logp, ent)
}

/// Final hidden states `[B, H]` of `seqs` (right-padded with `pad_id` into one batch) at one
/// position per row, `at(row)`: a P2L prompt's last token, a reward model's last non-pad
/// token, a judge's next-token position.
pub fn hidden_at(
    model: &Transformer,
    device: tch::Device,
    seqs: &[Vec<i64>],
    pad_id: i64,
    at: impl Fn(&[i64]) -> i64,
) -> Tensor {
    hidden_at_with(device, seqs, pad_id, at, |batch| {
        model.hidden(&batch.input(), None)
    })
}

/// [`hidden_at`] from the final hidden states `[B, L, H]` that `hidden` gives the sequences'
/// padded batch (a checkpointed or packed forward pass).
pub(crate) fn hidden_at_with(
    device: tch::Device,
    seqs: &[Vec<i64>],
    pad_id: i64,
    at: impl Fn(&[i64]) -> i64,
    hidden: impl FnOnce(&SequenceBatch) -> Tensor,
) -> Tensor {
    let refs: Vec<&[i64]> = seqs.iter().map(Vec::as_slice).collect();
    let empty: Vec<&[i64]> = seqs.iter().map(|_| &[][..]).collect();
    let batch = SequenceBatch::new(&refs, &empty, pad_id, device);
    let hidden = hidden(&batch);
    let positions: Vec<i64> = seqs.iter().map(|s| at(s)).collect();
    let idx = Tensor::from_slice(&positions)
        .to_device(device)
        .view([-1, 1, 1])
        .expand([seqs.len() as i64, 1, hidden.size()[2]], false);
    hidden.gather(1, &idx, false).squeeze_dim(1)
}

/// The last position of a sequence (0 for an empty one).
pub fn last_position(seq: &[i64]) -> i64 {
    seq.len().max(1) as i64 - 1
}

/// Log-probabilities `[B, K]` (float32) of the `candidates` token ids as the token following
/// each of `prompts` (a full-vocabulary softmax at each prompt's last position): how a judge's
/// verdict ("A" or "B", a rating "1".."5") is read without sampling. `device` holds `model`.
pub fn next_token_logprobs(
    model: &Transformer,
    device: tch::Device,
    prompts: &[Vec<i64>],
    pad_id: i64,
    candidates: &[i64],
) -> Tensor {
    let at_last = hidden_at(model, device, prompts, pad_id, last_position);
    let logp = model
        .logits(&at_last)
        .to_kind(Kind::Float)
        .log_softmax(-1, Kind::Float);
    logp.index_select(1, &Tensor::from_slice(candidates).to_device(device))
}

/// Probabilities `[rows][K]` (float64) of the `candidates` as the token following each of
/// `prompts`, renormalised over the candidates, without gradients: a judge's verdict ("A" or
/// "B", a rating "1".."5") as plain numbers.
pub fn next_token_label_probs(
    model: &Transformer,
    device: tch::Device,
    prompts: &[Vec<i64>],
    pad_id: i64,
    candidates: &[i64],
) -> anyhow::Result<Vec<Vec<f64>>> {
    let _guard = tch::no_grad_guard();
    let probs =
        next_token_logprobs(model, device, prompts, pad_id, candidates).softmax(-1, Kind::Double);
    let flat = Vec::<f64>::try_from(&probs.flatten(0, -1))?;
    Ok(flat.chunks(candidates.len()).map(<[f64]>::to_vec).collect())
}

/// Log-probs (temperature 1) of each completion token of each `prompt ++ completion` row, from
/// one forward pass without gradients: what `reinforge score` prints.
pub fn completion_token_logprobs(
    model: &Transformer,
    device: tch::Device,
    prompts: &[&[i64]],
    completions: &[&[i64]],
    pad_id: i64,
) -> anyhow::Result<Vec<Vec<f32>>> {
    let batch = SequenceBatch::new(prompts, completions, pad_id, device);
    completion_logprobs_of(model, &batch, prompts, completions)
}

/// [`completion_token_logprobs`] for a vision-language model: row `i`'s image placeholders
/// hold `images[i]` (errors name a row whose placeholders do not match its images).
pub fn completion_token_logprobs_with_images(
    model: &Transformer,
    device: tch::Device,
    (prompts, completions): (&[&[i64]], &[&[i64]]),
    images: Vec<Vec<crate::model::images::Image>>,
    pad_id: i64,
) -> anyhow::Result<Vec<Vec<f32>>> {
    let batch = SequenceBatch::new(prompts, completions, pad_id, device)
        .with_images(model.config(), images)?;
    completion_logprobs_of(model, &batch, prompts, completions)
}

/// Each completion's token log-probs (temperature 1, no gradient) from `batch`, the rows of
/// `prompts[i] ++ completions[i]`.
fn completion_logprobs_of(
    model: &Transformer,
    batch: &SequenceBatch,
    prompts: &[&[i64]],
    completions: &[&[i64]],
) -> anyhow::Result<Vec<Vec<f32>>> {
    let _guard = tch::no_grad_guard();
    let (logp, _) = token_logprobs_with(model, batch, 1.0, Entropy::Skip);
    // host: log-probs are printed.
    let logp = logp.to_kind(Kind::Float).to_device(tch::Device::Cpu);
    prompts
        .iter()
        .zip(completions)
        .enumerate()
        .map(|(i, (p, c))| {
            // Target j of the row is token j + 1, so the completion's tokens are the targets
            // prompt_len - 1 .. prompt_len - 1 + completion_len.
            let start = p.len().saturating_sub(1) as i64;
            let row = logp.get(i as i64).narrow(0, start, c.len() as i64);
            Ok(Vec::<f32>::try_from(&row)?)
        })
        .collect()
}

/// One token of a sequence scored given the tokens before it (vLLM's `prompt_logprobs`
/// entry): the `k` most likely ids with their log-probs and ranks (1 = most likely), and the
/// actual token's.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoredPosition {
    pub top: Vec<(i64, f32, usize)>,
    pub actual: (i64, f32, usize),
}

/// Every token of `seq` after the first scored by `model` at `temperature` (the
/// distribution `softmax(logits / temperature)`), one forward pass without gradients: what a
/// teacher serves for distillation (vLLM's `prompt_logprobs = k`). `seq[j]` is scored from
/// `seq[..j]`; the result has `seq.len() - 1` entries.
pub fn scored_positions(
    model: &Transformer,
    device: tch::Device,
    seq: &[i64],
    k: usize,
    temperature: f64,
) -> anyhow::Result<Vec<ScoredPosition>> {
    let _guard = tch::no_grad_guard();
    if seq.len() < 2 {
        return Ok(vec![]);
    }
    let batch = SequenceBatch::new(&[seq], &[&[][..]], 0, device);
    let hidden = model.hidden(&batch.input(), None).get(0);
    let n = seq.len() as i64 - 1;
    let logits = model.logits(&hidden.narrow(0, 0, n)).to_kind(Kind::Float);
    let logp = (logits / temperature).log_softmax(-1, Kind::Float);
    let targets = Tensor::from_slice(&seq[1..])
        .to_device(device)
        .view([-1, 1]);
    let actual = logp.gather(1, &targets, false);
    let ranks = logp
        .gt_tensor(&actual)
        .sum_dim_intlist(1, false, Kind::Int64)
        + 1;
    // At most the vocabulary (a toy model has fewer tokens than a client may ask for).
    let k = k.min(logp.size()[1] as usize);
    let (values, ids) = logp.topk(k.max(1) as i64, -1, true, true);
    // host: the scores are sent to a client.
    let host = |t: &Tensor| t.to_device(tch::Device::Cpu);
    let values = Vec::<f32>::try_from(&host(&values).flatten(0, -1))?;
    let ids = Vec::<i64>::try_from(&host(&ids).flatten(0, -1))?;
    let actual = Vec::<f32>::try_from(&host(&actual).flatten(0, -1))?;
    let ranks = Vec::<i64>::try_from(&host(&ranks))?;
    let kk = k.max(1);
    Ok((0..n as usize)
        .map(|j| ScoredPosition {
            top: (0..k)
                .map(|r| (ids[j * kk + r], values[j * kk + r], r + 1))
                .collect(),
            actual: (seq[j + 1], actual[j], ranks[j] as usize),
        })
        .collect())
}
