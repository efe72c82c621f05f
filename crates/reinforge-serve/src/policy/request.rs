//! `/v1/completions` and `/v1/chat/completions` bodies: parsed, checked against the served model,
//! turned into token-id prompts and one [`Sampling`].
//!
//! Field names, defaults and checks follow vLLM's `CompletionRequest` / `ChatCompletionRequest`
//! (vllm/entrypoints/openai/protocol.py): `max_tokens` defaults to 16 for completions (OpenAI's
//! default) and to the model's remaining positions for chat; `top_k` -1 (or 0) is off;
//! `top_logprobs` needs `logprobs: true`; at most 20 log-probs per position (vLLM's default
//! `max_logprobs`); `skip_special_tokens` defaults to true; completion prompts are encoded with
//! special tokens (vLLM's `add_special_tokens=True`), chat prompts are rendered by the chat
//! template with `add_generation_prompt` (default true) and encoded without adding any.
//! Unknown fields are ignored, as vLLM does; known sampling options this server does not
//! implement are a 400 when set to anything but their neutral value.

use serde::Deserialize;
use serde_json::Value;

use super::backend::Sampling;
use super::error::OpenAiError;
use super::Served;

/// vLLM's default `max_logprobs`.
pub const MAX_LOGPROBS: usize = 20;
/// OpenAI's (and vLLM's) default `max_tokens` for `/v1/completions`.
pub const COMPLETIONS_MAX_TOKENS: usize = 16;

/// Which route a request came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Completions,
    Chat,
}

impl Endpoint {
    pub fn label(self) -> &'static str {
        match self {
            Endpoint::Completions => "completions",
            Endpoint::Chat => "chat",
        }
    }
}

/// How to present the generated rows.
#[derive(Debug, Clone)]
pub struct OutputOptions {
    /// Log-probs per position: `None` = no `logprobs` in the response; `Some(k)` = the chosen
    /// token's and `k` alternatives.
    pub logprobs: Option<usize>,
    /// vLLM's `return_tokens_as_token_ids`: tokens in log-probs are `"token_id:{id}"`.
    pub tokens_as_ids: bool,
    /// vLLM's `return_token_ids`: `prompt_token_ids` and per-choice `token_ids`.
    pub return_token_ids: bool,
    pub stop: Vec<String>,
    pub include_stop_str_in_output: bool,
    pub skip_special_tokens: bool,
    /// The request's own `stop_token_ids` (reported as `stop_reason`).
    pub stop_token_ids: Vec<i64>,
}

/// A checked generation request.
#[derive(Debug, Clone)]
pub struct GenRequest {
    pub endpoint: Endpoint,
    /// Distinct prompts; choice `i * n + j` is sample `j` of prompt `i`.
    pub prompts: Vec<Vec<i64>>,
    pub n: usize,
    pub sampling: Sampling,
    pub seed: Option<u64>,
    pub stream: bool,
    pub include_usage: bool,
    pub output: OutputOptions,
}

impl GenRequest {
    /// The batch rows: each prompt `n` times in a row.
    pub fn rows(&self) -> Vec<Vec<i64>> {
        self.prompts
            .iter()
            .flat_map(|p| std::iter::repeat_n(p.clone(), self.n))
            .collect()
    }
}

#[derive(Deserialize)]
struct Common {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    n: Option<usize>,
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    top_p: Option<f64>,
    #[serde(default)]
    top_k: Option<i64>,
    #[serde(default)]
    seed: Option<i64>,
    #[serde(default)]
    stop: Option<Stop>,
    #[serde(default)]
    stop_token_ids: Option<Vec<i64>>,
    #[serde(default)]
    ignore_eos: Option<bool>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    return_tokens_as_token_ids: Option<bool>,
    #[serde(default)]
    return_token_ids: Option<bool>,
    #[serde(default)]
    include_stop_str_in_output: Option<bool>,
    #[serde(default)]
    skip_special_tokens: Option<bool>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Stop {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
}

#[derive(Deserialize)]
struct CompletionOnly {
    prompt: Value,
    #[serde(default)]
    max_tokens: Option<usize>,
    #[serde(default)]
    logprobs: Option<usize>,
    #[serde(default)]
    echo: Option<bool>,
    #[serde(default)]
    prompt_logprobs: Option<usize>,
}

#[derive(Deserialize)]
struct ChatOnly {
    messages: Vec<Value>,
    #[serde(default)]
    max_tokens: Option<usize>,
    #[serde(default)]
    max_completion_tokens: Option<usize>,
    #[serde(default)]
    logprobs: Option<bool>,
    #[serde(default)]
    top_logprobs: Option<usize>,
    #[serde(default)]
    add_generation_prompt: Option<bool>,
    #[serde(default)]
    chat_template_kwargs: Option<serde_json::Map<String, Value>>,
    #[serde(default)]
    tools: Option<Value>,
}

/// Whether a field's value is its neutral one.
type IsNeutral = fn(&Value) -> bool;

/// Sampling options this server does not implement, with the check that a value is neutral.
const UNSUPPORTED: &[(&str, IsNeutral)] = &[
    ("presence_penalty", |v| v.as_f64() == Some(0.0)),
    ("frequency_penalty", |v| v.as_f64() == Some(0.0)),
    ("repetition_penalty", |v| v.as_f64() == Some(1.0)),
    ("min_p", |v| v.as_f64() == Some(0.0)),
    ("min_tokens", |v| v.as_u64() == Some(0)),
    ("logit_bias", |v| {
        v.as_object().is_some_and(|m| m.is_empty())
    }),
    ("suffix", |v| v.as_str() == Some("")),
    ("use_beam_search", |v| v.as_bool() == Some(false)),
    ("response_format", |v| {
        v.get("type").and_then(Value::as_str) == Some("text")
    }),
];

fn reject_unsupported(body: &Value) -> Result<(), OpenAiError> {
    let Some(obj) = body.as_object() else {
        return Err(OpenAiError::bad(
            "",
            "the request body must be a JSON object",
        ));
    };
    for (name, neutral) in UNSUPPORTED {
        if let Some(v) = obj.get(*name) {
            if !v.is_null() && !neutral(v) {
                return Err(OpenAiError::bad(
                    *name,
                    format!("`{name}` is not supported by this server (got {v})"),
                ));
            }
        }
    }
    if let Some(b) = obj.get("best_of").filter(|v| !v.is_null()) {
        let n = obj.get("n").and_then(Value::as_u64).unwrap_or(1);
        if b.as_u64() != Some(n) {
            return Err(OpenAiError::bad(
                "best_of",
                format!("`best_of` other than `n` is not supported (got {b})"),
            ));
        }
    }
    Ok(())
}

/// Parses and checks a `/v1/completions` body.
pub fn completion(bytes: &[u8], served: &Served) -> Result<GenRequest, OpenAiError> {
    let body: Value = crate::error::parse(bytes)?;
    reject_unsupported(&body)?;
    let common: Common = crate::error::parse(bytes)?;
    let only: CompletionOnly = crate::error::parse(bytes)?;
    check_model(&common, served)?;
    if only.echo == Some(true) {
        return Err(OpenAiError::bad(
            "echo",
            "`echo` is not supported: send the prompt's token ids with `return_token_ids` instead",
        ));
    }
    let prompts = completion_prompts(&only.prompt, served)?;
    let logprobs = only.logprobs;
    if let Some(k) = logprobs {
        check_logprobs("logprobs", k)?;
    }
    let max_tokens = only.max_tokens.unwrap_or(COMPLETIONS_MAX_TOKENS);
    let mut req = build(
        Endpoint::Completions,
        common,
        prompts,
        max_tokens,
        "max_tokens",
        logprobs,
        served,
    )?;
    let k = only.prompt_logprobs.unwrap_or(0);
    check_logprobs("prompt_logprobs", k)?;
    if k > 0 && req.stream {
        return Err(OpenAiError::bad(
            "prompt_logprobs",
            "prompt scores are not streamed: do not stream, or ask for 0",
        ));
    }
    req.sampling.prompt_logprobs = k;
    check_alternatives(&req, served)?;
    Ok(req)
}

/// Refuses a request whose log-prob alternatives (each an object of the response) exceed
/// `--max-request-logprobs`: per row, `max_tokens` x `logprobs` for the completion and prompt
/// length x `prompt_logprobs` for the prompt. `n` multiplies both, so without this a
/// 530-byte request could make the server build a response of hundreds of megabytes.
fn check_alternatives(req: &GenRequest, served: &Served) -> Result<(), OpenAiError> {
    let s = &req.sampling;
    let per_completion = s.max_tokens as u128 * s.top_logprobs as u128;
    let total: u128 = req
        .prompts
        .iter()
        .map(|p| (per_completion + p.len() as u128 * s.prompt_logprobs as u128) * req.n as u128)
        .sum();
    if total > served.max_request_logprobs as u128 {
        let field = if s.prompt_logprobs > 0 {
            "prompt_logprobs"
        } else {
            "logprobs"
        };
        return Err(OpenAiError::bad(
            field,
            format!(
                "the request asks for {total} log-prob alternatives (rows x (max_tokens x logprobs + prompt tokens x prompt_logprobs)); this server returns at most {} per request (--max-request-logprobs): ask for fewer rows, tokens or alternatives",
                served.max_request_logprobs
            ),
        ));
    }
    Ok(())
}

/// Parses and checks a `/v1/chat/completions` body.
pub fn chat(bytes: &[u8], served: &Served) -> Result<GenRequest, OpenAiError> {
    let body: Value = crate::error::parse(bytes)?;
    reject_unsupported(&body)?;
    let common: Common = crate::error::parse(bytes)?;
    let only: ChatOnly = crate::error::parse(bytes)?;
    check_model(&common, served)?;
    let Some(tok) = served.tokenizer.as_ref() else {
        return Err(OpenAiError::bad(
            "messages",
            "chat needs a tokenizer with a chat template, and this server has none (--model DIR \
             without tokenizer.json): use /v1/completions with token-id prompts",
        ));
    };
    if body
        .get("prompt_logprobs")
        .is_some_and(|v| !v.is_null() && v.as_u64() != Some(0))
    {
        return Err(OpenAiError::bad(
            "prompt_logprobs",
            "`prompt_logprobs` is served on /v1/completions (send the conversation's token ids)",
        ));
    }
    let messages = chat_messages(&only.messages)?;
    let opts = reinforge_hf::ChatOptions {
        add_generation_prompt: only.add_generation_prompt.unwrap_or(true),
        tools: only
            .tools
            .filter(|t| !t.is_null())
            .map(|t| reinforge_hf::to_value(&t)),
        documents: None,
        extra: only
            .chat_template_kwargs
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, reinforge_hf::to_value(&v)))
            .collect(),
    };
    let ids = tok
        .encode_chat(&messages, &opts)
        .map_err(|e| OpenAiError::bad("messages", format!("applying the chat template: {e}")))?;
    let prompt: Vec<i64> = ids.into_iter().map(i64::from).collect();
    if prompt.is_empty() {
        return Err(OpenAiError::bad(
            "messages",
            "the chat template rendered no tokens",
        ));
    }
    let logprobs = match (only.logprobs.unwrap_or(false), only.top_logprobs) {
        (false, Some(k)) if k > 0 => {
            return Err(OpenAiError::bad(
                "top_logprobs",
                "`top_logprobs` needs `logprobs: true`",
            ))
        }
        (false, _) => None,
        (true, k) => {
            let k = k.unwrap_or(0);
            check_logprobs("top_logprobs", k)?;
            Some(k)
        }
    };
    if prompt.len() >= served.max_model_len {
        return Err(OpenAiError::bad(
            "messages",
            format!(
                "the rendered conversation has {} tokens; the model's maximum context length is {} \
                 tokens, so no new token fits",
                prompt.len(),
                served.max_model_len
            ),
        ));
    }
    let (max_tokens, field) = match (only.max_completion_tokens, only.max_tokens) {
        (Some(m), _) => (m, "max_completion_tokens"),
        (None, Some(m)) => (m, "max_tokens"),
        (None, None) => (
            served.max_model_len.saturating_sub(prompt.len()),
            "max_tokens",
        ),
    };
    let req = build(
        Endpoint::Chat,
        common,
        vec![prompt],
        max_tokens,
        field,
        logprobs,
        served,
    )?;
    check_alternatives(&req, served)?;
    Ok(req)
}

fn check_model(common: &Common, served: &Served) -> Result<(), OpenAiError> {
    match &common.model {
        Some(m) if *m != served.name => Err(OpenAiError::unknown_model(m, &served.name)),
        _ => Ok(()),
    }
}

fn check_logprobs(field: &str, k: usize) -> Result<(), OpenAiError> {
    if k > MAX_LOGPROBS {
        return Err(OpenAiError::bad(
            field,
            format!("`{field}` is {k}; at most {MAX_LOGPROBS} log-probs per position are returned"),
        ));
    }
    Ok(())
}

/// `prompt`: a string, a list of strings, a list of token ids or a list of lists of token ids.
fn completion_prompts(prompt: &Value, served: &Served) -> Result<Vec<Vec<i64>>, OpenAiError> {
    let text = |s: &str, field: String| -> Result<Vec<i64>, OpenAiError> {
        let Some(tok) = served.tokenizer.as_ref() else {
            return Err(OpenAiError::bad(
                field,
                "text prompts need a tokenizer, and this server has none (--model DIR without \
                 tokenizer.json): send token ids",
            ));
        };
        let ids = tok
            .encode(s, true)
            .map_err(|e| OpenAiError::bad(field.clone(), format!("tokenizing: {e}")))?;
        Ok(ids.into_iter().map(i64::from).collect())
    };
    let ids = |items: &[Value], field: &str| -> Result<Vec<i64>, OpenAiError> {
        items
            .iter()
            .enumerate()
            .map(|(j, v)| token_id(v, &format!("{field}[{j}]"), served.vocab_size))
            .collect()
    };
    let prompts = match prompt {
        Value::String(s) => vec![text(s, "prompt".into())?],
        Value::Array(items) if items.is_empty() => {
            return Err(OpenAiError::bad("prompt", "`prompt` is an empty list"))
        }
        Value::Array(items) if items.iter().all(Value::is_number) => vec![ids(items, "prompt")?],
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::String(s) => text(s, format!("prompt[{i}]")),
                Value::Array(inner) => ids(inner, &format!("prompt[{i}]")),
                _ => Err(OpenAiError::bad(
                    format!("prompt[{i}]"),
                    "each prompt is a string or a list of token ids",
                )),
            })
            .collect::<Result<_, _>>()?,
        _ => {
            return Err(OpenAiError::bad(
                "prompt",
                "`prompt` is a string, a list of strings, a list of token ids or a list of lists \
                 of token ids",
            ))
        }
    };
    for (i, p) in prompts.iter().enumerate() {
        if p.is_empty() {
            let field = if prompts.len() == 1 && !prompt.is_array() {
                "prompt".to_string()
            } else {
                format!("prompt[{i}]")
            };
            return Err(OpenAiError::bad(field, "the prompt has no tokens"));
        }
    }
    Ok(prompts)
}

fn token_id(v: &Value, field: &str, vocab: usize) -> Result<i64, OpenAiError> {
    match v.as_i64() {
        Some(id) if id >= 0 && (id as u64) < vocab as u64 => Ok(id),
        _ => Err(OpenAiError::bad(
            field,
            format!("token id {v} is not in 0..{vocab} (the model's vocabulary)"),
        )),
    }
}

/// Chat messages as the template sees them: `content` given as a list of text parts is joined
/// into one string (vLLM's "string" content format); other keys pass through.
fn chat_messages(messages: &[Value]) -> Result<Vec<Value>, OpenAiError> {
    if messages.is_empty() {
        return Err(OpenAiError::bad("messages", "`messages` is empty"));
    }
    messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let Some(obj) = m.as_object() else {
                return Err(OpenAiError::bad(
                    format!("messages[{i}]"),
                    "a message is an object with `role` and `content`",
                ));
            };
            if !obj.get("role").is_some_and(Value::is_string) {
                return Err(OpenAiError::bad(
                    format!("messages[{i}].role"),
                    "a message needs a string `role`",
                ));
            }
            let mut obj = obj.clone();
            match obj.get("content") {
                None | Some(Value::Null) | Some(Value::String(_)) => {}
                Some(Value::Array(parts)) => {
                    let mut text = String::new();
                    for (j, p) in parts.iter().enumerate() {
                        match (p.get("type").and_then(Value::as_str), p.get("text")) {
                            (Some("text"), Some(Value::String(t))) => text.push_str(t),
                            _ => {
                                return Err(OpenAiError::bad(
                                    format!("messages[{i}].content[{j}]"),
                                    "only text content parts ({\"type\": \"text\", \"text\": ...}) are supported",
                                ))
                            }
                        }
                    }
                    obj.insert("content".into(), Value::String(text));
                }
                Some(_) => {
                    return Err(OpenAiError::bad(
                        format!("messages[{i}].content"),
                        "`content` is a string or a list of text parts",
                    ))
                }
            }
            Ok(Value::Object(obj))
        })
        .collect()
}

/// The checks and the sampling common to both endpoints.
fn build(
    endpoint: Endpoint,
    c: Common,
    prompts: Vec<Vec<i64>>,
    max_tokens: usize,
    max_tokens_field: &str,
    logprobs: Option<usize>,
    served: &Served,
) -> Result<GenRequest, OpenAiError> {
    let n = c.n.unwrap_or(1);
    if n == 0 {
        return Err(OpenAiError::bad("n", "`n` must be at least 1"));
    }
    if max_tokens == 0 {
        return Err(OpenAiError::bad(
            max_tokens_field,
            format!("`{max_tokens_field}` must be at least 1"),
        ));
    }
    // Caps before anything is copied per row: `n` copies of each prompt are made for the batch.
    let rows = prompts.len().saturating_mul(n);
    if rows > served.max_request_rows {
        return Err(OpenAiError::bad(
            "n",
            format!(
                "{} prompt(s) x `n` = {n} is {rows} rows; this server takes at most {} rows per \
                 request (--max-request-rows)",
                prompts.len(),
                served.max_request_rows
            ),
        ));
    }
    for (i, p) in prompts.iter().enumerate() {
        if p.len().saturating_add(max_tokens) > served.max_model_len {
            let which = if prompts.len() > 1 {
                format!("prompt {i}")
            } else {
                "the prompt".into()
            };
            return Err(OpenAiError::bad(
                max_tokens_field,
                format!(
                    "{which} has {} tokens and `{max_tokens_field}` is {max_tokens}: {} is more \
                     than the model's maximum context length of {} tokens",
                    p.len(),
                    p.len().saturating_add(max_tokens),
                    served.max_model_len
                ),
            ));
        }
    }
    // Each row holds its prompt and up to `max_tokens` new tokens (each below the model's
    // length, checked above, so the sum cannot overflow before the cap).
    let tokens = prompts
        .iter()
        .map(|p| (p.len() + max_tokens).saturating_mul(n))
        .fold(0usize, usize::saturating_add);
    if tokens > served.max_request_tokens {
        return Err(OpenAiError::bad(
            max_tokens_field,
            format!(
                "the request holds up to {tokens} tokens (each of its {rows} rows: prompt + \
                 `{max_tokens_field}`); this server takes at most {} per request \
                 (--max-request-tokens): send fewer rows or a smaller `{max_tokens_field}`",
                served.max_request_tokens
            ),
        ));
    }
    let mut temperature = c.temperature.unwrap_or(1.0);
    if !(temperature.is_finite() && temperature >= 0.0) {
        return Err(OpenAiError::bad(
            "temperature",
            format!("`temperature` must be a number >= 0, got {temperature}"),
        ));
    }
    // vLLM's `_SAMPLING_EPS`: below it sampling is greedy (dividing logits by a subnormal
    // temperature overflows to infinities and NaNs).
    if temperature < 1e-5 {
        temperature = 0.0;
    }
    let top_p = c.top_p.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(OpenAiError::bad(
            "top_p",
            format!("`top_p` must be in (0, 1], got {top_p}"),
        ));
    }
    let top_k = match c.top_k.unwrap_or(-1) {
        -1 | 0 => 0,
        // More than the vocabulary keeps every token.
        k if k > 0 => k.min(i64::try_from(served.vocab_size).unwrap_or(i64::MAX)),
        k => {
            return Err(OpenAiError::bad(
                "top_k",
                format!("`top_k` must be -1 (off) or at least 1, got {k}"),
            ))
        }
    };
    let stop = match c.stop {
        None => vec![],
        Some(Stop::One(s)) => vec![s],
        Some(Stop::Many(v)) => v,
    };
    if let Some(i) = stop.iter().position(String::is_empty) {
        return Err(OpenAiError::bad(
            format!("stop[{i}]"),
            "a stop string must not be empty",
        ));
    }
    if !stop.is_empty() && served.tokenizer.is_none() {
        return Err(OpenAiError::bad(
            "stop",
            "stop strings need a tokenizer, and this server has none: use `stop_token_ids`",
        ));
    }
    let request_stop_ids = c.stop_token_ids.unwrap_or_default();
    for (i, &id) in request_stop_ids.iter().enumerate() {
        token_id(
            &Value::from(id),
            &format!("stop_token_ids[{i}]"),
            served.vocab_size,
        )?;
    }
    let mut stop_ids = request_stop_ids.clone();
    if !c.ignore_eos.unwrap_or(false) {
        stop_ids.extend(&served.eos_token_ids);
    }
    stop_ids.sort_unstable();
    stop_ids.dedup();
    let stream = c.stream.unwrap_or(false);
    if stream && logprobs.is_some_and(|k| k > 0) {
        let field = match endpoint {
            Endpoint::Completions => "logprobs",
            Endpoint::Chat => "top_logprobs",
        };
        return Err(OpenAiError::bad(
            field,
            "alternatives per position are not streamed (the sampler reports them when the batch \
             ends): ask for 0, or do not stream",
        ));
    }
    Ok(GenRequest {
        endpoint,
        prompts,
        n,
        sampling: Sampling {
            temperature,
            top_p,
            top_k,
            max_tokens,
            stop_token_ids: stop_ids,
            top_logprobs: logprobs.unwrap_or(0),
            prompt_logprobs: 0,
            weights: None,
            stop_strings: vec![],
        },
        seed: c.seed.map(|s| s as u64),
        stream,
        include_usage: c
            .stream_options
            .and_then(|o| o.include_usage)
            .unwrap_or(false),
        output: OutputOptions {
            logprobs,
            tokens_as_ids: c.return_tokens_as_token_ids.unwrap_or(false),
            return_token_ids: c.return_token_ids.unwrap_or(false),
            stop,
            include_stop_str_in_output: c.include_stop_str_in_output.unwrap_or(false),
            skip_special_tokens: c.skip_special_tokens.unwrap_or(true),
            stop_token_ids: request_stop_ids,
        },
    })
}
