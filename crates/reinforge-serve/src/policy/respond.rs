//! Response bodies: OpenAI's completion and chat shapes with vLLM's extra fields
//! (vllm/entrypoints/openai/protocol.py: `CompletionResponse`, `CompletionLogProbs`,
//! `ChatCompletionResponse`, `ChatCompletionLogProbs`, the `*StreamResponse` chunks), plus
//! reinforge's top-level `weight_version`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::HeaderValue;
use axum::response::Response;
use serde_json::{json, Map, Value};

use super::request::{Endpoint, GenRequest};
use super::text::{Choice, Detok};
use super::WEIGHT_VERSION_HEADER;

/// Identity of one response: id, creation time, model, weight version.
#[derive(Debug, Clone)]
pub struct Header {
    pub id: String,
    pub created: u64,
    pub model: String,
    pub weight_version: String,
}

impl Header {
    /// A fresh id (`cmpl-...` or `chatcmpl-...`, as OpenAI and vLLM prefix them).
    pub fn new(endpoint: Endpoint, model: &str, weight_version: &str) -> Header {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let prefix = match endpoint {
            Endpoint::Completions => "cmpl",
            Endpoint::Chat => "chatcmpl",
        };
        Header {
            id: format!(
                "{prefix}-{:x}{:08x}",
                now.as_nanos() as u64,
                NEXT.fetch_add(1, Ordering::Relaxed)
            ),
            created: now.as_secs(),
            model: model.to_string(),
            weight_version: weight_version.to_string(),
        }
    }

    fn object(&self, object: &str) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("id".into(), self.id.clone().into());
        m.insert("object".into(), object.into());
        m.insert("created".into(), self.created.into());
        m.insert("model".into(), self.model.clone().into());
        m.insert("weight_version".into(), self.weight_version.clone().into());
        m
    }
}

/// `usage`: each prompt counted once, completion tokens over all choices.
pub fn usage(req: &GenRequest, choices: &[Choice]) -> Value {
    let prompt: usize = req.prompts.iter().map(Vec::len).sum();
    let completion: usize = choices.iter().map(|c| c.ids.len()).sum();
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    })
}

/// Completions' `logprobs` for tokens `range` of `c` (`text_offset` counted from `offset`):
/// `tokens`, `token_logprobs`, `top_logprobs` (the chosen token and the alternatives, as vLLM
/// returns them) and `text_offset`.
pub fn completion_logprobs(
    req: &GenRequest,
    c: &Choice,
    range: std::ops::Range<usize>,
    detok: Detok,
    offset: usize,
) -> Value {
    let as_ids = req.output.tokens_as_ids;
    let mut tokens = vec![];
    let mut lps = vec![];
    let mut tops = vec![];
    let mut offsets = vec![];
    let mut at = offset;
    for i in range {
        let tok = detok.token(c.ids[i], as_ids);
        offsets.push(at);
        at += tok.len();
        let mut top = Map::new();
        top.insert(tok.clone(), json_f32(c.logprobs[i]));
        for &(id, lp) in c.top.get(i).map(Vec::as_slice).unwrap_or(&[]) {
            top.entry(detok.token(id, as_ids))
                .or_insert_with(|| json_f32(lp));
        }
        tokens.push(Value::String(tok));
        lps.push(json_f32(c.logprobs[i]));
        tops.push(Value::Object(top));
    }
    json!({
        "text_offset": offsets,
        "token_logprobs": lps,
        "tokens": tokens,
        "top_logprobs": tops,
    })
}

/// Chat's `logprobs`: `{"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}`.
pub fn chat_logprobs(
    req: &GenRequest,
    c: &Choice,
    range: std::ops::Range<usize>,
    detok: Detok,
) -> Value {
    let as_ids = req.output.tokens_as_ids;
    let entry = |id: i64, lp: f32| {
        let tok = detok.token(id, as_ids);
        json!({"token": tok, "logprob": json_f32(lp), "bytes": tok.as_bytes()})
    };
    let content: Vec<Value> = range
        .map(|i| {
            let mut e = entry(c.ids[i], c.logprobs[i]);
            let top: Vec<Value> = c
                .top
                .get(i)
                .map(Vec::as_slice)
                .unwrap_or(&[])
                .iter()
                .map(|&(id, lp)| entry(id, lp))
                .collect();
            e["top_logprobs"] = Value::Array(top);
            e
        })
        .collect();
    json!({ "content": content })
}

/// A log-prob as JSON (`-inf` and NaN, which JSON lacks, become -9999.0 as in vLLM).
fn json_f32(x: f32) -> Value {
    if x.is_finite() {
        json!(x)
    } else {
        json!(-9999.0)
    }
}

/// vLLM's `prompt_logprobs` of a choice: `null` for the first prompt token, then per token an
/// object keyed by token id (as a string) of `{"logprob", "rank", "decoded_token"}`, holding
/// the top alternatives and the actual token.
fn prompt_logprobs(c: &Choice, detok: Detok) -> Value {
    let mut out = vec![Value::Null];
    for p in &c.prompt {
        let mut m = Map::new();
        for &(id, lp, rank) in p.top.iter().chain(std::iter::once(&p.actual)) {
            m.entry(id.to_string()).or_insert_with(|| {
                json!({"logprob": json_f32(lp), "rank": rank, "decoded_token": detok.token(id, false)})
            });
        }
        out.push(Value::Object(m));
    }
    Value::Array(out)
}

/// The non-streamed response.
pub fn full(req: &GenRequest, h: &Header, choices: &[Choice], detok: Detok) -> Value {
    let mut body = match req.endpoint {
        Endpoint::Completions => h.object("text_completion"),
        Endpoint::Chat => h.object("chat.completion"),
    };
    let out: Vec<Value> = choices
        .iter()
        .enumerate()
        .map(|(index, c)| {
            let ending = c.ending.clone().expect("choices are finished");
            let mut m = Map::new();
            m.insert("index".into(), index.into());
            match req.endpoint {
                Endpoint::Completions => {
                    m.insert("text".into(), c.text.clone().into());
                }
                Endpoint::Chat => {
                    m.insert(
                        "message".into(),
                        json!({"role": "assistant", "content": c.text}),
                    );
                }
            }
            let lp = match (req.output.logprobs, req.endpoint) {
                (None, _) => Value::Null,
                (Some(_), Endpoint::Completions) => {
                    completion_logprobs(req, c, 0..c.ids.len(), detok, 0)
                }
                (Some(_), Endpoint::Chat) => chat_logprobs(req, c, 0..c.ids.len(), detok),
            };
            m.insert("logprobs".into(), lp);
            m.insert("finish_reason".into(), ending.finish_reason().into());
            m.insert(
                "stop_reason".into(),
                ending.stop_reason.clone().unwrap_or(Value::Null),
            );
            if req.sampling.prompt_logprobs > 0 {
                m.insert("prompt_logprobs".into(), prompt_logprobs(c, detok));
            }
            if req.output.return_token_ids {
                if req.endpoint == Endpoint::Completions {
                    m.insert("prompt_token_ids".into(), json!(req.prompts[index / req.n]));
                }
                m.insert("token_ids".into(), json!(c.ids));
            }
            Value::Object(m)
        })
        .collect();
    body.insert("choices".into(), Value::Array(out));
    body.insert("usage".into(), usage(req, choices));
    if req.output.return_token_ids && req.endpoint == Endpoint::Chat {
        body.insert("prompt_token_ids".into(), json!(req.prompts[0]));
    }
    Value::Object(body)
}

/// What one streamed chunk of a choice carries.
#[derive(Debug, Clone)]
pub struct Delta {
    pub text: String,
    /// Indices of the new tokens in the choice.
    pub tokens: std::ops::Range<usize>,
    /// The choice's first chunk: it carries the chat role and, with `return_token_ids`, the
    /// prompt ids.
    pub first: bool,
    /// The choice's last chunk: it carries `finish_reason`.
    pub finished: bool,
}

/// One streamed chunk for choice `index` of `c`.
pub fn chunk(
    req: &GenRequest,
    h: &Header,
    index: usize,
    c: &Choice,
    d: Delta,
    detok: Detok,
) -> Value {
    let Delta {
        text,
        tokens,
        first,
        finished,
    } = d;
    let mut body = match req.endpoint {
        Endpoint::Completions => h.object("text_completion"),
        Endpoint::Chat => h.object("chat.completion.chunk"),
    };
    let mut m = Map::new();
    m.insert("index".into(), index.into());
    match req.endpoint {
        Endpoint::Completions => {
            m.insert("text".into(), text.into());
        }
        Endpoint::Chat => {
            let delta = if first {
                json!({"role": "assistant", "content": text})
            } else {
                json!({"content": text})
            };
            m.insert("delta".into(), delta);
        }
    }
    let lp = match (req.output.logprobs, req.endpoint) {
        (None, _) => Value::Null,
        (Some(_), Endpoint::Completions) => {
            let offset = c.ids[..tokens.start]
                .iter()
                .map(|&id| detok.token(id, req.output.tokens_as_ids).len())
                .sum();
            completion_logprobs(req, c, tokens.clone(), detok, offset)
        }
        (Some(_), Endpoint::Chat) => chat_logprobs(req, c, tokens.clone(), detok),
    };
    m.insert("logprobs".into(), lp);
    let ending = c.ending.as_ref().filter(|_| finished);
    m.insert(
        "finish_reason".into(),
        ending.map_or(Value::Null, |e| e.finish_reason().into()),
    );
    m.insert(
        "stop_reason".into(),
        ending
            .and_then(|e| e.stop_reason.clone())
            .unwrap_or(Value::Null),
    );
    if req.output.return_token_ids {
        if first && req.endpoint == Endpoint::Completions {
            m.insert("prompt_token_ids".into(), json!(req.prompts[index / req.n]));
        }
        m.insert("token_ids".into(), json!(c.ids[tokens].to_vec()));
    }
    body.insert("choices".into(), json!([Value::Object(m)]));
    if first && req.output.return_token_ids && req.endpoint == Endpoint::Chat {
        body.insert("prompt_token_ids".into(), json!(req.prompts[0]));
    }
    Value::Object(body)
}

/// The last chunk with `stream_options.include_usage`: no choices, the usage.
pub fn usage_chunk(req: &GenRequest, h: &Header, choices: &[Choice]) -> Value {
    let mut body = match req.endpoint {
        Endpoint::Completions => h.object("text_completion"),
        Endpoint::Chat => h.object("chat.completion.chunk"),
    };
    body.insert("choices".into(), json!([]));
    body.insert("usage".into(), usage(req, choices));
    Value::Object(body)
}

/// Adds the weight-version header.
pub fn with_version(mut resp: Response, version: &str) -> Response {
    if let Ok(v) = HeaderValue::from_str(version) {
        resp.headers_mut().insert(WEIGHT_VERSION_HEADER, v);
    }
    resp
}
