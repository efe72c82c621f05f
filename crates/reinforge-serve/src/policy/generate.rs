//! `/v1/models`, `/v1/completions` and `/v1/chat/completions`: parse, queue to the worker, answer
//! whole or as server-sent events (`data: {chunk}\n\n` ... `data: [DONE]\n\n`, as OpenAI and vLLM
//! stream).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::engine::{Event, QueueFull, Submission, WeightInfo};
use super::error::OpenAiError;
use super::request::{self, Endpoint, GenRequest};
use super::respond::{self, with_version, Delta, Header};
use super::text::{Choice, Detok};
use super::Policy;
use crate::AppState;

fn policy(state: &AppState) -> Result<Arc<Policy>, OpenAiError> {
    state.policy.clone().ok_or_else(|| {
        OpenAiError::status(
            StatusCode::NOT_FOUND,
            "this server serves no model (--model)",
        )
    })
}

fn model_card(p: &Policy) -> Value {
    let (w, paused) = p.engine.info();
    json!({
        "id": p.served.name,
        "object": "model",
        "created": 0,
        "owned_by": "reinforge",
        "root": p.served.model_dir.as_deref().map(super::weights::dir_name),
        "parent": null,
        "max_model_len": p.served.max_model_len,
        "weight_version": w.weight_version,
        "checksum": w.checksum,
        "paused": paused,
    })
}

/// `GET /v1/models`.
pub async fn models(State(state): State<AppState>) -> Result<Response, OpenAiError> {
    let p = policy(&state)?;
    let card = model_card(&p);
    let v = card["weight_version"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    Ok(with_version(
        Json(json!({"object": "list", "data": [card]})).into_response(),
        &v,
    ))
}

/// `GET /v1/models/{id}` (404 for another id, as vLLM and SGLang answer).
pub async fn model(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, OpenAiError> {
    let p = policy(&state)?;
    if id != p.served.name {
        return Err(OpenAiError::unknown_model(&id, &p.served.name));
    }
    let card = model_card(&p);
    let v = card["weight_version"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    Ok(with_version(Json(card).into_response(), &v))
}

/// `POST /v1/completions`.
pub async fn completions(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    run(state, Endpoint::Completions, body).await
}

/// `POST /v1/chat/completions`.
pub async fn chat_completions(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    run(state, Endpoint::Chat, body).await
}

async fn run(state: AppState, endpoint: Endpoint, body: Result<Bytes, BytesRejection>) -> Response {
    let counter = state.metrics.policy.requests.clone();
    match generate(state, endpoint, body).await {
        Ok(resp) => resp,
        Err(e) => {
            counter
                .with_label_values(&[endpoint.label(), "error"])
                .inc();
            e.into_response()
        }
    }
}

async fn generate(
    state: AppState,
    endpoint: Endpoint,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, OpenAiError> {
    let p = policy(&state)?;
    let bytes = body.map_err(|r| {
        let (status, message) = crate::error::body_rejection(&r);
        OpenAiError::status(status, message)
    })?;
    // Parsing, tokenizing and templating on the blocking pool, never on an async worker.
    let parsing = p.clone();
    let req = tokio::task::spawn_blocking(move || {
        let req = match endpoint {
            Endpoint::Completions => request::completion(&bytes, &parsing.served),
            Endpoint::Chat => request::chat(&bytes, &parsing.served),
        };
        let len = bytes.len();
        drop(bytes);
        crate::heap::trim_after(len);
        req
    })
    .await
    .map_err(|_| {
        OpenAiError::status(
            StatusCode::INTERNAL_SERVER_ERROR,
            "parsing the request failed",
        )
    })??;
    let mut rx = p
        .engine
        .submit(Submission {
            rows: req.rows(),
            sampling: req.sampling.clone(),
            seed: req.seed,
            stream: req.stream,
        })
        .map_err(|QueueFull(n)| {
            OpenAiError::unavailable(format!(
                "server busy: {n} generation requests are queued (--max-queued-requests); retry later"
            ))
        })?;
    let weights = match rx.recv().await {
        Some(Event::Started(w)) => w,
        Some(Event::Done(Err(e))) => return Err(OpenAiError::unavailable(e)),
        _ => {
            return Err(OpenAiError::status(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the generation worker stopped",
            ))
        }
    };
    let m = &state.metrics.policy;
    m.prompt_tokens
        .inc_by(req.prompts.iter().map(|p| p.len() as u64).sum());
    let header = Header::new(endpoint, &p.served.name, &weights.weight_version);
    if req.stream {
        Ok(stream(state.clone(), p, req, header, rx, weights))
    } else {
        whole(&state, &p, &req, &header, &mut rx).await
    }
}

fn detok<'a>(p: &'a Policy, req: &GenRequest) -> Detok<'a> {
    Detok {
        tokenizer: p.served.tokenizer.as_ref(),
        skip_special_tokens: req.output.skip_special_tokens,
    }
}

fn outcome(choices: &[Choice]) -> &'static str {
    let aborted = choices.iter().any(|c| {
        c.ending
            .as_ref()
            .is_some_and(|e| e.finish == super::backend::Finish::Abort)
    });
    if aborted {
        "aborted"
    } else {
        "ok"
    }
}

/// Waits for the job's rows and answers with one JSON body.
async fn whole(
    state: &AppState,
    p: &Policy,
    req: &GenRequest,
    header: &Header,
    rx: &mut mpsc::UnboundedReceiver<Event>,
) -> Result<Response, OpenAiError> {
    let seqs = loop {
        match rx.recv().await {
            Some(Event::Step(_)) | Some(Event::Started(_)) => continue,
            Some(Event::Done(Ok(seqs))) => break seqs,
            Some(Event::Done(Err(e))) => {
                return Err(OpenAiError::status(StatusCode::INTERNAL_SERVER_ERROR, e))
            }
            None => {
                return Err(OpenAiError::status(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the generation worker stopped",
                ))
            }
        }
    };
    let d = detok(p, req);
    // The whole text is decoded once; stop strings are looked for at the end (Choice::finish).
    let incremental = false;
    let choices: Vec<Choice> = seqs
        .into_iter()
        .map(|s| {
            let mut c = Choice::default();
            let mut top = s.top.into_iter();
            for (&id, &lp) in s.tokens.iter().zip(&s.logprobs) {
                c.push(id, lp, top.next(), d, &req.output, incremental);
            }
            c.finish(s.finish, d, &req.output, incremental);
            c.prompt = s.prompt;
            c
        })
        .collect();
    let m = &state.metrics.policy;
    m.generated_tokens
        .inc_by(choices.iter().map(|c| c.ids.len() as u64).sum());
    m.requests
        .with_label_values(&[req.endpoint.label(), outcome(&choices)])
        .inc();
    let body = respond::full(req, header, &choices, d);
    Ok(with_version(
        Json(body).into_response(),
        &header.weight_version,
    ))
}

/// State of one streamed response.
struct Streamer {
    state: AppState,
    policy: Arc<Policy>,
    req: GenRequest,
    header: Header,
    rx: mpsc::UnboundedReceiver<Event>,
    choices: Vec<Choice>,
    /// Per choice: first chunk sent, last chunk sent.
    started: Vec<bool>,
    ended: Vec<bool>,
    out: VecDeque<String>,
    done: bool,
}

impl Streamer {
    fn detok(&self) -> Detok<'_> {
        detok(&self.policy, &self.req)
    }

    /// Queues the chunk of choice `i` if it has anything new (or just ended).
    fn emit(&mut self, i: usize) {
        if self.ended[i] {
            return;
        }
        let (text, tokens) = self.choices[i].delta(&self.req.output);
        let finished = self.choices[i].ending.is_some();
        if text.is_empty() && tokens.is_empty() && !finished && self.started[i] {
            return;
        }
        let d = Delta {
            text,
            tokens,
            first: !self.started[i],
            finished,
        };
        let chunk = respond::chunk(
            &self.req,
            &self.header,
            i,
            &self.choices[i],
            d,
            self.detok(),
        );
        self.started[i] = true;
        self.ended[i] = finished;
        self.out.push_back(chunk.to_string());
    }

    /// Handles one worker event, queueing chunks.
    fn on_event(&mut self, ev: Option<Event>) {
        let policy = self.policy.clone();
        let detok = Detok {
            tokenizer: policy.served.tokenizer.as_ref(),
            skip_special_tokens: self.req.output.skip_special_tokens,
        };
        match ev {
            Some(Event::Started(_)) => {}
            Some(Event::Step(step)) => {
                let mut touched = vec![];
                for (row, id, lp) in step {
                    if let Some(c) = self.choices.get_mut(row) {
                        c.push(id, lp, None, detok, &self.req.output, true);
                        touched.push(row);
                    }
                }
                touched.dedup();
                for i in touched {
                    self.emit(i);
                }
            }
            Some(Event::Done(Ok(seqs))) => {
                for (i, s) in seqs.into_iter().enumerate().take(self.choices.len()) {
                    let c = &mut self.choices[i];
                    let seen = c.seen;
                    for (&id, &lp) in s.tokens.iter().zip(&s.logprobs).skip(seen) {
                        c.push(id, lp, None, detok, &self.req.output, true);
                    }
                    c.finish(s.finish, detok, &self.req.output, true);
                    self.emit(i);
                }
                let m = &self.state.metrics.policy;
                m.generated_tokens
                    .inc_by(self.choices.iter().map(|c| c.ids.len() as u64).sum());
                m.requests
                    .with_label_values(&[self.req.endpoint.label(), outcome(&self.choices)])
                    .inc();
                if self.req.include_usage {
                    let u = respond::usage_chunk(&self.req, &self.header, &self.choices);
                    self.out.push_back(u.to_string());
                }
                self.out.push_back("[DONE]".into());
                self.done = true;
            }
            Some(Event::Done(Err(e))) => self.fail(e),
            None => self.fail("the generation worker stopped".into()),
        }
    }

    /// Ends the stream with an error event (OpenAI's error shape) and `[DONE]`.
    fn fail(&mut self, message: String) {
        self.state
            .metrics
            .policy
            .requests
            .with_label_values(&[self.req.endpoint.label(), "error"])
            .inc();
        let err = OpenAiError::status(StatusCode::INTERNAL_SERVER_ERROR, message);
        self.out.push_back(err.body().to_string());
        self.out.push_back("[DONE]".into());
        self.done = true;
    }
}

fn stream(
    state: AppState,
    policy: Arc<Policy>,
    req: GenRequest,
    header: Header,
    rx: mpsc::UnboundedReceiver<Event>,
    weights: WeightInfo,
) -> Response {
    let rows = req.prompts.len() * req.n;
    let s = Streamer {
        state,
        policy,
        req,
        header,
        rx,
        choices: (0..rows).map(|_| Choice::default()).collect(),
        started: vec![false; rows],
        ended: vec![false; rows],
        out: VecDeque::new(),
        done: false,
    };
    let events = futures_util::stream::unfold(s, |mut s| async move {
        loop {
            if let Some(data) = s.out.pop_front() {
                return Some((Ok::<_, Infallible>(SseEvent::default().data(data)), s));
            }
            if s.done {
                return None;
            }
            let ev = s.rx.recv().await;
            s.on_event(ev);
        }
    });
    with_version(Sse::new(events).into_response(), &weights.weight_version)
}
