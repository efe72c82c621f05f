//! Batched autoregressive sampling with a KV cache.

use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Tensor};

use crate::model::cache::KvCache;
use crate::model::images::{Image, VisionBatch};
use crate::model::transformer::{ForwardInput, Transformer};

/// How to turn logits into tokens. Field names follow vLLM/TRL.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SamplingParams {
    /// Softmax temperature; 0 means greedy decoding.
    pub temperature: f64,
    /// Nucleus sampling: keep the smallest set of tokens whose probability reaches `top_p` (1 = off).
    pub top_p: f64,
    /// Keep only the `top_k` most likely tokens (0 = off).
    pub top_k: i64,
    /// Generation stops after this many new tokens (the completion is then "truncated").
    pub max_new_tokens: usize,
    /// Token ids that end a completion (kept as its last token).
    pub stop_tokens: Vec<i64>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            max_new_tokens: 64,
            stop_tokens: vec![],
        }
    }
}

/// One sampled completion.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    /// New token ids, the stop token included when one was produced.
    pub tokens: Vec<i64>,
    /// Log-probability of each token under the temperature-scaled policy (before top-k/top-p
    /// filtering, as verl and TRL compute the trainer-side log-probs).
    pub logprobs: Vec<f32>,
    /// Entropy of the temperature-scaled distribution each token was drawn from (nats).
    pub entropies: Vec<f32>,
    /// True when generation hit `max_new_tokens` before a stop token (or was aborted).
    pub truncated: bool,
    /// Per token, the `top_logprobs` most likely `(id, log-prob)` pairs under the same
    /// distribution as `logprobs`, most likely first (empty unless asked for).
    pub top: Vec<Vec<(i64, f32)>>,
    /// True when the caller's step hook stopped generation before this row finished.
    pub aborted: bool,
}

/// How a row ended, reported by the step hook in the step that ended it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowEnd {
    /// A stop token (kept as the row's last token).
    Stop,
    /// `max_new_tokens`.
    Length,
}

/// One row's token of a decoding step, for the step hook.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepToken {
    /// Row index: prompts first, then admitted rows in the order they were admitted.
    pub row: usize,
    pub token: i64,
    pub logprob: f32,
    /// `Some` when this token ends the row.
    pub end: Option<RowEnd>,
}

/// What the step hook decides after a step.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepControl {
    /// `false` stops generation: unfinished rows are marked `aborted`.
    pub stop: bool,
    /// Prompts admitted into the running batch (continuous batching), each with its own limit
    /// of new tokens: they are prefilled and decode from the next step on, as rows
    /// `len(prompts) + admitted so far + i`, with the batch's other sampling parameters.
    pub admit: Vec<(Vec<i64>, usize)>,
    /// Rows (completion indices) that end with this step's token as if it were a stop token
    /// (kept, not truncated): the caller's own stop conditions, such as stop strings matched
    /// on the decoded text, so a row stops decoding when its text completes one rather than
    /// at `max_new_tokens`.
    pub end: Vec<usize>,
}

/// A step hook: the step's tokens in, the decision out.
pub type OnStep<'a> = &'a mut dyn FnMut(&[StepToken]) -> StepControl;

/// Optional extras of [`generate_with`]: alternatives per position and a hook after each
/// decoding step (streaming, aborting, admitting rows).
#[derive(Default)]
pub struct GenerateHooks<'a> {
    /// Alternatives reported per position (OpenAI's `logprobs: k`); 0 = none.
    pub top_logprobs: usize,
    /// Called after each step with the token of every row that produced one.
    pub on_step: Option<OnStep<'a>>,
    /// Per-row sampling noise instead of torch's batch generator (see [`RowRng`]).
    pub row_rng: Option<RowRng>,
}

/// Counter-based sampling: row `i`'s token at step `t` is drawn by the Gumbel-max trick with
/// uniforms keyed by `(seed, row_offset + i, t)` alone, so a row samples the same tokens
/// whatever other rows share its batch. That is what lets data-parallel ranks, each sampling
/// its own rows of a step's batch, draw exactly the tokens one process drawing the whole
/// batch draws. The distribution equals torch's multinomial draw; the tokens differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowRng {
    pub seed: u64,
    /// Global index of this call's first row.
    pub row_offset: usize,
}

impl RowRng {
    /// Uniforms in (0, 1) `[rows.len(), vocab]`: row `j` keyed by `rows[j]` and `steps[j]`.
    fn uniforms(&self, rows: &[usize], steps: &[usize], vocab: usize, device: Device) -> Tensor {
        use rand::{Rng, SeedableRng};
        let mut buf = vec![0f32; rows.len() * vocab];
        for (j, chunk) in buf.chunks_mut(vocab).enumerate() {
            let row = (self.row_offset + rows[j]) as u64;
            let key = self.seed
                ^ row.wrapping_mul(0x9E37_79B9_7F4A_7C15)
                ^ (steps[j] as u64)
                    .wrapping_mul(0xC2B2_AE3D_27D4_EB4F)
                    .rotate_left(31);
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(key);
            for x in chunk {
                *x = rng.gen_range(f32::EPSILON..1.0);
            }
        }
        Tensor::from_slice(&buf)
            .view([rows.len() as i64, vocab as i64])
            .to_device(device)
    }
}

/// Samples one completion per prompt. Prompts are left-padded so the batch decodes in lock
/// step; position ids make the padding invisible to the model. Randomness comes from torch's
/// generator (seed it with `tch::manual_seed`).
pub fn generate(
    model: &Transformer,
    prompts: &[Vec<i64>],
    params: &SamplingParams,
    pad_id: i64,
    device: Device,
) -> Vec<Completion> {
    generate_with(
        model,
        prompts,
        params,
        pad_id,
        device,
        &mut GenerateHooks::default(),
    )
}

/// The decoding state of the rows in the batch: their KV cache, key mask, next positions and
/// the logits of their next token.
struct Running {
    cache: KvCache,
    key_mask: Tensor,
    next_pos: Tensor,
    logits: Tensor,
}

/// Most new tokens the cache reserves room for up front; longer generations grow it by
/// doubling (a large `max_new_tokens` that most rows never reach should not reserve memory).
const RESERVE_NEW_TOKENS: usize = 1024;

impl Running {
    /// Prefills `prompts`: identical prompts (a GRPO group's samples) once, their cache rows
    /// then repeated, so prefill costs one pass per distinct prompt, not per sample. The cache
    /// reserves room for `new_tokens` more positions (capped by [`RESERVE_NEW_TOKENS`]).
    fn prefill(
        model: &Transformer,
        prompts: &[Vec<i64>],
        images: Option<&[Vec<Image>]>,
        pad_id: i64,
        device: Device,
        new_tokens: usize,
    ) -> anyhow::Result<Self> {
        let (distinct, row_of) = distinct_prompts(prompts, images);
        let (ids, mask) = left_pad(&distinct, pad_id, device);
        let vision = match images {
            Some(images) => {
                let first: Vec<Vec<Image>> = first_rows(&row_of, distinct.len())
                    .into_iter()
                    .map(|i| images[i].clone())
                    .collect();
                Some(VisionBatch::of_rows(model.config(), &ids, &mask, &first)?)
            }
            None => None,
        };
        let positions = match &vision {
            Some(v) => v.positions.shallow_clone(),
            None => crate::model::transformer::positions_from_mask(&mask),
        };
        let mut key_mask = mask;
        let slots = ids.size()[1] + new_tokens.min(RESERVE_NEW_TOKENS) as i64;
        let mut cache = KvCache::with_capacity(model.config().num_hidden_layers, slots);
        let mut logits = model
            .forward(
                &ForwardInput {
                    ids: &ids,
                    positions: &positions,
                    key_mask: &key_mask,
                    segments: &[],
                    images: vision.as_ref().map(|v| &v.images),
                },
                Some(&mut cache),
                true,
            )
            .squeeze_dim(1);
        // The next token's position: after the largest one (one stream, or M-RoPE's three,
        // where it is the text position plus `rope_deltas`).
        let mut next_pos = match positions.dim() {
            3 => positions.amax([0, 2], false).unsqueeze(1),
            _ => positions.narrow(1, positions.size()[1] - 1, 1),
        } + 1;
        if distinct.len() < prompts.len() {
            let idx = Tensor::from_slice(&row_of).to_device(device);
            cache.retain_rows(&idx);
            logits = logits.index_select(0, &idx);
            next_pos = next_pos.index_select(0, &idx);
            key_mask = key_mask.index_select(0, &idx);
        }
        Ok(Self {
            cache,
            key_mask,
            next_pos,
            logits,
        })
    }

    /// Keeps the batch rows `keep` (in that order).
    fn retain(&mut self, keep: &[i64], device: Device) {
        let idx = Tensor::from_slice(keep).to_device(device);
        self.cache.retain_rows(&idx);
        self.key_mask = self.key_mask.index_select(0, &idx);
        self.next_pos = self.next_pos.index_select(0, &idx);
    }

    /// Feeds each row its sampled token; the logits of the next one follow.
    fn advance(&mut self, model: &Transformer, tokens: &Tensor) {
        let live = tokens.size()[0];
        let positions = self.next_pos.shallow_clone();
        self.next_pos = &self.next_pos + 1;
        self.key_mask = Tensor::cat(
            &[
                &self.key_mask,
                &Tensor::ones([live, 1], (Kind::Bool, self.key_mask.device())),
            ],
            1,
        );
        let input = ForwardInput {
            ids: &tokens.view([live, 1]),
            positions: &positions,
            key_mask: &self.key_mask,
            segments: &[],
            images: None,
        };
        self.logits = model
            .forward(&input, Some(&mut self.cache), true)
            .squeeze_dim(1);
    }

    /// Appends the rows of `other` (already prefilled); the shorter key mask is left-padded.
    fn join(&mut self, other: Running) {
        let (a, b) = (self.key_mask.size()[1], other.key_mask.size()[1]);
        let pad = |m: &Tensor, by: i64| {
            if by > 0 {
                m.constant_pad_nd([by, 0])
            } else {
                m.shallow_clone()
            }
        };
        self.key_mask = Tensor::cat(
            &[pad(&self.key_mask, b - a), pad(&other.key_mask, a - b)],
            0,
        );
        self.cache.join(other.cache);
        self.next_pos = Tensor::cat(&[&self.next_pos, &other.next_pos], 0);
        self.logits = Tensor::cat(&[&self.logits, &other.logits], 0);
    }
}

/// A completion with no tokens (truncated at length 0).
pub fn empty_completion() -> Completion {
    Completion {
        tokens: vec![],
        logprobs: vec![],
        entropies: vec![],
        truncated: true,
        top: vec![],
        aborted: false,
    }
}

/// [`generate`] with per-position alternatives and a per-step hook (the policy server's
/// streaming, aborts and continuous batching). Without admissions the sampled tokens are
/// [`generate`]'s. Returns one completion per prompt, then one per admitted prompt.
///
/// Under `bf16 = true` the whole generation is one autocast region: libtorch's autocast keeps
/// its bfloat16 copy of each weight for the region, so the weights are cast once per call
/// instead of once per decoding step (each step's forward would otherwise open and close its
/// own region, casting all of them again). The casts, and so the tokens, are the same.
pub fn generate_with(
    model: &Transformer,
    prompts: &[Vec<i64>],
    params: &SamplingParams,
    pad_id: i64,
    device: Device,
    hooks: &mut GenerateHooks,
) -> Vec<Completion> {
    crate::precision::autocast(device, || {
        decode(model, prompts, None, params, pad_id, device, hooks)
    })
    .expect("text prompts have no images to mismatch")
}

/// [`generate_with`] for a vision-language model: `images[i]` are the images prompt `i`'s
/// placeholders hold, in order. Prompts are positioned by M-RoPE, and decoding continues
/// each row after its largest position (transformers' `rope_deltas`). Identical prompts
/// over the same image tensors (a group's samples) prefill once. Prompts admitted by the
/// step hook are text only. Errors name a prompt whose placeholders do not match its images.
pub fn generate_with_images(
    model: &Transformer,
    prompts: &[Vec<i64>],
    images: &[Vec<Image>],
    params: &SamplingParams,
    (pad_id, device): (i64, Device),
    hooks: &mut GenerateHooks,
) -> anyhow::Result<Vec<Completion>> {
    anyhow::ensure!(
        images.len() == prompts.len(),
        "{} prompts but images for {}",
        prompts.len(),
        images.len()
    );
    crate::precision::autocast(device, || {
        decode(model, prompts, Some(images), params, pad_id, device, hooks)
    })
}

/// [`generate_with`]'s loop: prefill, then one step per new token until every row has ended.
fn decode(
    model: &Transformer,
    prompts: &[Vec<i64>],
    images: Option<&[Vec<Image>]>,
    params: &SamplingParams,
    pad_id: i64,
    device: Device,
    hooks: &mut GenerateHooks,
) -> anyhow::Result<Vec<Completion>> {
    let _guard = tch::no_grad_guard();
    if prompts.is_empty() || params.max_new_tokens == 0 {
        return Ok(prompts.iter().map(|_| empty_completion()).collect());
    }
    let new = params.max_new_tokens;
    let mut state = Running::prefill(model, prompts, images, pad_id, device, new)?;
    // With images, the placeholder is never sampled: a completion cannot hold an image, and
    // transformers refuses a sequence whose placeholders outnumber its images.
    let banned = images.and(model.config().image_token_id);
    let mut out: Vec<Completion> = prompts.iter().map(|_| empty_completion()).collect();
    // New tokens allowed per completion (admitted rows bring their own).
    let mut limit: Vec<usize> = vec![params.max_new_tokens; prompts.len()];
    // `rows[j]` is the completion index of batch row `j`. Finished rows leave the batch (their
    // cache entries are dropped), so later steps only compute the completions still running.
    let mut rows: Vec<usize> = (0..prompts.len()).collect();
    while !rows.is_empty() {
        let logits = state.logits.to_kind(Kind::Float);
        let noise = hooks.row_rng.map(|r| {
            let steps: Vec<usize> = rows.iter().map(|&i| out[i].tokens.len()).collect();
            r.uniforms(&rows, &steps, logits.size()[1] as usize, device)
        });
        let pick = Pick {
            uniforms: noise.as_ref(),
            all: hooks.top_logprobs > 0,
            banned,
        };
        let draw = pick_tokens(&logits, params, pick);
        let tokens = Vec::<i64>::try_from(&draw.tokens).expect("int64 tokens");
        let logps = Vec::<f32>::try_from(&draw.logp).expect("float log-probs");
        let entropies = Vec::<f32>::try_from(&draw.entropy).expect("float entropies");
        let top = (draw.logp_all.as_ref()).map(|all| top_alternatives(all, hooks.top_logprobs));
        let mut keep = Vec::with_capacity(rows.len());
        let mut produced = Vec::with_capacity(rows.len());
        for (j, &i) in rows.iter().enumerate() {
            let c = &mut out[i];
            c.tokens.push(tokens[j]);
            c.logprobs.push(logps[j]);
            c.entropies.push(entropies[j]);
            if let Some(top) = &top {
                c.top.push(top[j].clone());
            }
            let end = if params.stop_tokens.contains(&tokens[j]) {
                c.truncated = false;
                Some(RowEnd::Stop)
            } else if c.tokens.len() >= limit[i] {
                Some(RowEnd::Length)
            } else {
                keep.push(j as i64);
                None
            };
            produced.push(StepToken {
                row: i,
                token: tokens[j],
                logprob: logps[j],
                end,
            });
        }
        let control = match hooks.on_step.as_mut() {
            Some(on_step) => on_step(&produced),
            None => StepControl::default(),
        };
        if control.stop {
            for &j in &keep {
                out[rows[j as usize]].aborted = true;
            }
            break;
        }
        if !control.end.is_empty() {
            // Rows of this step only (a row that ended on `max_new_tokens` with the same token
            // ends stopped too).
            for &i in rows.iter().filter(|i| control.end.contains(i)) {
                out[i].truncated = false;
            }
            keep.retain(|&j| !control.end.contains(&rows[j as usize]));
        }
        if !keep.is_empty() {
            let mut next_tokens = draw.tokens;
            if keep.len() < rows.len() {
                state.retain(&keep, device);
                next_tokens =
                    next_tokens.index_select(0, &Tensor::from_slice(&keep).to_device(device));
                rows = keep.iter().map(|&j| rows[j as usize]).collect();
            }
            state.advance(model, &next_tokens);
        } else {
            rows.clear();
        }
        let admit: Vec<(Vec<i64>, usize)> = control
            .admit
            .into_iter()
            .filter(|(p, n)| !p.is_empty() && *n > 0)
            .collect();
        if !admit.is_empty() {
            let prompts: Vec<Vec<i64>> = admit.iter().map(|(p, _)| p.clone()).collect();
            let most = admit.iter().map(|(_, n)| *n).max().unwrap_or(0);
            let admitted = Running::prefill(model, &prompts, None, pad_id, device, most)?;
            let first = out.len();
            out.extend(admit.iter().map(|_| empty_completion()));
            limit.extend(admit.iter().map(|(_, n)| *n));
            if rows.is_empty() {
                state = admitted;
            } else {
                state.join(admitted);
            }
            rows.extend(first..out.len());
        }
    }
    Ok(out)
}

/// One decoding step's draw: tokens `[B]`, their log-probs and the entropy of each row's
/// distribution, both under the temperature-scaled policy.
struct Draw {
    tokens: Tensor,
    logp: Tensor,
    entropy: Tensor,
    /// Log-probs of the whole vocabulary `[B, V]`, when asked for (alternatives).
    logp_all: Option<Tensor>,
}

/// The `k` most likely `(id, log-prob)` pairs of each row of `logp_all` `[B, V]`.
fn top_alternatives(logp_all: &Tensor, k: usize) -> Vec<Vec<(i64, f32)>> {
    let k = (k as i64).min(logp_all.size()[1]);
    let (values, ids) = logp_all.topk(k, -1, true, true);
    let values = Vec::<f32>::try_from(&values.flatten(0, -1)).expect("float log-probs");
    let ids = Vec::<i64>::try_from(&ids.flatten(0, -1)).expect("int64 ids");
    ids.chunks(k as usize)
        .zip(values.chunks(k as usize))
        .map(|(i, v)| i.iter().copied().zip(v.iter().copied()).collect())
        .collect()
}

/// How [`pick_tokens`] draws besides the sampling parameters.
struct Pick<'a> {
    /// Per-row noise `[B, V]` ([`RowRng`]); `None`: torch's generator.
    uniforms: Option<&'a Tensor>,
    /// Also the log-probs of the whole vocabulary.
    all: bool,
    /// A token never drawn (as top-k's cut tokens, it still counts in the log-probs: the
    /// trainer's are of the full distribution).
    banned: Option<i64>,
}

/// Draws one token per row from `logits` `[B, V]` (greedy when the temperature is 0): a
/// multinomial draw from torch's generator, or with `uniforms` (`[B, V]`, from [`RowRng`]) the
/// Gumbel-max draw `argmax(logits − ln(−ln u))` over the same filtered distribution. With
/// `all`, the log-probs of the whole vocabulary come too.
fn pick_tokens(logits: &Tensor, params: &SamplingParams, pick: Pick) -> Draw {
    let Pick {
        uniforms,
        all,
        banned,
    } = pick;
    let greedy = params.temperature <= 0.0;
    let scaled = if greedy || params.temperature == 1.0 {
        logits.shallow_clone()
    } else {
        logits / params.temperature
    };
    let stats = LogitStats::of(&scaled);
    let pickable = match banned {
        Some(t) => scaled.index_fill(
            1,
            &Tensor::from_slice(&[t]).to_device(scaled.device()),
            f64::NEG_INFINITY,
        ),
        None => scaled.shallow_clone(),
    };
    let token = if greedy && banned.is_some() {
        pickable.argmax(-1, true)
    } else if greedy {
        stats.argmax
    } else {
        let filtered = filter_top_k_top_p(&pickable, params.top_k, params.top_p);
        match uniforms {
            Some(u) => (filtered - u.log().neg().log()).argmax(-1, true),
            None => crate::runtime::with_generator(|| {
                filtered.softmax(-1, Kind::Float).multinomial(1, false)
            }),
        }
    };
    Draw {
        logp: (scaled.gather(1, &token, false) - &stats.lse).squeeze_dim(1),
        tokens: token.squeeze_dim(1),
        entropy: stats.entropy,
        logp_all: all.then(|| scaled.log_softmax(-1, Kind::Float)),
    }
}

/// What a draw reads off a row's softmax: its greedy token `[B, 1]`, log-sum-exp `[B, 1]`
/// and entropy `[B]`.
struct LogitStats {
    argmax: Tensor,
    lse: Tensor,
    entropy: Tensor,
}

impl LogitStats {
    /// Two passes over the vocabulary by the fused kernel where it applies, else libtorch's
    /// log-sum-exp, argmax and entropy.
    fn of(logits: &Tensor) -> Self {
        if let Some((argmax, stats)) = crate::kernels::sampling_ops::logit_stats(logits) {
            return Self {
                argmax: argmax.unsqueeze(1),
                lse: stats.select(1, 0).unsqueeze(1),
                entropy: stats.select(1, 1),
            };
        }
        let lse = logits.logsumexp([-1].as_slice(), true);
        let logp = logits - &lse;
        Self {
            argmax: logits.argmax(-1, true),
            entropy: -(logp.exp() * &logp).sum_dim_intlist(-1, false, Kind::Float),
            lse,
        }
    }
}

/// Sets to -inf the logits outside the top-k and outside the top-p nucleus (the HF
/// `TopKLogitsWarper`/`TopPLogitsWarper` semantics: the most likely token always survives).
pub fn filter_top_k_top_p(logits: &Tensor, top_k: i64, top_p: f64) -> Tensor {
    let v = logits.size()[1];
    let mut out = logits.shallow_clone();
    if top_k > 0 && top_k < v {
        let (kth, _) = out.topk(top_k, -1, true, true);
        let threshold = kth.narrow(1, top_k - 1, 1);
        out = out.masked_fill(&out.lt_tensor(&threshold), f64::NEG_INFINITY);
    }
    if top_p < 1.0 {
        let (sorted, idx) = out.sort(-1, false);
        let cum = sorted.softmax(-1, Kind::Float).cumsum(-1, Kind::Float);
        // Ascending order: drop the tail whose cumulative mass is at most 1 - top_p.
        let drop = cum.le(1.0 - top_p);
        let _ = drop.narrow(1, v - 1, 1).fill_(0);
        let drop_orig = drop.scatter(1, &idx, &drop);
        out = out.masked_fill(&drop_orig, f64::NEG_INFINITY);
    }
    out
}

/// The distinct prompts in order of first appearance, and for each prompt the index of its
/// distinct copy.
fn distinct_prompts(
    prompts: &[Vec<i64>],
    images: Option<&[Vec<Image>]>,
) -> (Vec<Vec<i64>>, Vec<i64>) {
    // With images, a prompt is its tokens and its images' storage: a group's samples share
    // one image tensor; equal tokens over other images are another prompt.
    type Key<'a> = (&'a [i64], Vec<usize>);
    let mut seen: std::collections::HashMap<Key, i64> = std::collections::HashMap::new();
    let mut distinct = Vec::new();
    let row_of = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let storage = images.map_or(vec![], |im| {
                im[i].iter().map(|x| x.pixels.data_ptr() as usize).collect()
            });
            *seen.entry((p.as_slice(), storage)).or_insert_with(|| {
                distinct.push(p.clone());
                distinct.len() as i64 - 1
            })
        })
        .collect();
    (distinct, row_of)
}

/// For each of `n` distinct prompts, the first row that holds it.
fn first_rows(row_of: &[i64], n: usize) -> Vec<usize> {
    let mut first = vec![usize::MAX; n];
    for (row, &d) in row_of.iter().enumerate() {
        first[d as usize] = first[d as usize].min(row);
    }
    first
}

/// Left-pads `prompts` to a `[B, L]` id tensor and its bool mask of real tokens.
pub fn left_pad(prompts: &[Vec<i64>], pad_id: i64, device: Device) -> (Tensor, Tensor) {
    let l = prompts.iter().map(Vec::len).max().unwrap_or(0);
    let mut ids = Vec::with_capacity(prompts.len() * l);
    let mut mask = Vec::with_capacity(prompts.len() * l);
    for p in prompts {
        ids.extend(std::iter::repeat_n(pad_id, l - p.len()).chain(p.iter().copied()));
        mask.extend(
            std::iter::repeat_n(false, l - p.len()).chain(std::iter::repeat_n(true, p.len())),
        );
    }
    let shape = [prompts.len() as i64, l as i64];
    (
        Tensor::from_slice(&ids).view(shape).to_device(device),
        Tensor::from_slice(&mask).view(shape).to_device(device),
    )
}
