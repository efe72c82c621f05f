//! Sampling on a loaded checkpoint as `reinforge generate` does it: defaults from the
//! checkpoint's generation_config.json, a room check per prompt, and `max_new_tokens` fitted to
//! the model's positions.

use anyhow::{bail, Result};
use reinforge_torch::model::images::Image;
use reinforge_torch::{generate, generate_with_images, Completion, GenerateHooks, SamplingParams};

use crate::loaded::LoadedModel;

/// Sampling settings given on the command line (`None`: the checkpoint's default).
#[derive(Debug, Clone, Default)]
pub struct SamplingOverrides {
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub max_new_tokens: Option<usize>,
    /// No stop tokens: every completion runs to `max_new_tokens`.
    pub ignore_eos: bool,
}

/// The command line's values (`args`), else the checkpoint's generation_config.json (greedy unless it
/// samples), as transformers' `generate` would use them.
pub fn sampling_params(m: &LoadedModel, args: &SamplingOverrides) -> Result<SamplingParams> {
    let g = m.tokenizer.generation_config();
    let temperature = args
        .temperature
        .unwrap_or(if g.do_sample { g.temperature } else { 0.0 });
    if !(temperature.is_finite() && temperature >= 0.0) {
        bail!("temperature {temperature} from generation_config.json must be finite and >= 0");
    }
    let params = SamplingParams {
        temperature,
        top_p: args.top_p.unwrap_or(g.top_p),
        top_k: args
            .top_k
            .unwrap_or(if g.do_sample { g.top_k as i64 } else { 0 }),
        max_new_tokens: args.max_new_tokens.or(g.max_new_tokens).unwrap_or(256),
        stop_tokens: if args.ignore_eos {
            vec![]
        } else {
            m.stop_ids()
        },
    };
    Ok(params)
}

/// Checks that prompt `i` of `source` leaves room for a completion within the model's
/// positions: the prompt alone must be shorter than `max_positions`, and an explicit
/// `--max-new-tokens` must fit after it. The error names the row and the lengths.
pub fn check_room(
    source: &str,
    i: usize,
    prompt_len: usize,
    params: &SamplingParams,
    explicit_max_new: Option<usize>,
    max_positions: usize,
) -> Result<()> {
    let row = i + 1;
    if prompt_len >= max_positions {
        bail!(
            "{source}: prompt {row} has {prompt_len} tokens, which leaves no room for a completion in the model's max_position_embeddings = {max_positions}"
        );
    }
    if explicit_max_new.is_some() && prompt_len + params.max_new_tokens > max_positions {
        bail!(
            "{source}: prompt {row} has {prompt_len} tokens; with --max-new-tokens {} that exceeds the model's max_position_embeddings = {max_positions} (at most {} new tokens fit)",
            params.max_new_tokens,
            max_positions - prompt_len
        );
    }
    Ok(())
}

/// `params` with `max_new_tokens` capped so the longest prompt of `batch` stays within the
/// model's positions (a default from generation_config may be larger than what fits).
pub fn fit_positions(
    params: &SamplingParams,
    batch: &[Vec<i64>],
    max_positions: usize,
) -> SamplingParams {
    let longest = batch.iter().map(Vec::len).max().unwrap_or(0);
    SamplingParams {
        max_new_tokens: params
            .max_new_tokens
            .min(max_positions.saturating_sub(longest)),
        ..params.clone()
    }
}

/// Completions of `prompts` (token ids, image placeholders already expanded): through
/// `generate_with_images` with each prompt's `images` on a model that takes images (text prompts
/// included, for M-RoPE's positions), else the text-only sampler.
pub fn generate_prompts(
    m: &LoadedModel,
    prompts: &[Vec<i64>],
    images: &[Vec<Image>],
    params: &SamplingParams,
) -> Result<Vec<Completion>> {
    if m.takes_images() {
        generate_with_images(
            &m.policy.model,
            prompts,
            images,
            params,
            (m.pad_id(), m.device),
            &mut GenerateHooks::default(),
        )
    } else {
        Ok(generate(
            &m.policy.model,
            prompts,
            params,
            m.pad_id(),
            m.device,
        ))
    }
}
