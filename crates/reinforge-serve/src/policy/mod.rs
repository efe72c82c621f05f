//! OpenAI-compatible policy serving (`reinforge serve --model DIR`), with the weight-update
//! endpoints RL trainers call between steps.
//!
//! The `reinforge` binary implements [`Generator`] over reinforge-torch's KV-cache sampler and
//! calls [`crate::run_with_policy`]; this crate has no libtorch. One worker thread owns the
//! generator ([`engine`]); the HTTP handlers queue requests to it.
//!
//! | route | follows | what |
//! |---|---|---|
//! | `GET /v1/models`, `GET /v1/models/{id}` | OpenAI / vLLM | the served model, `max_model_len`, `weight_version`, `checksum` |
//! | `POST /v1/completions` | OpenAI + vLLM extensions | prompts as text or token ids, `n`, `logprobs`, `stream` |
//! | `POST /v1/chat/completions` | OpenAI + vLLM extensions | the checkpoint's chat template, `logprobs`/`top_logprobs`, `stream` |
//! | `POST /pause_generation` | SGLang | body `{"mode": "abort" \| "wait"}`, default `abort` |
//! | `POST /continue_generation` | SGLang | resume |
//! | `POST /pause?mode=abort\|wait`, `POST /resume`, `GET /is_paused` | vLLM (`VLLM_SERVER_DEV_MODE` routes) | the same, vLLM's names and answers |
//! | `POST /update_weights_from_disk` | SGLang | `{"model_path", "weight_version"?, "abort_all_requests"?}` |
//! | `GET /get_weight_version` | SGLang (+ `checksum`, `paused`) | the loaded version |
//! | `GET /get_model_info` | SGLang | model path, tokenizer path, version |
//!
//! **Requests** ([`request`]): vLLM's fields and defaults (vllm/entrypoints/openai/protocol.py):
//! `prompt` as a string, list of strings, list of token ids or list of lists of token ids; `n`,
//! `max_tokens` (chat also `max_completion_tokens`), `temperature`, `top_p`, `top_k` (-1 = off),
//! `seed`, `stop`, `stop_token_ids`, `ignore_eos`, `logprobs` (completions: an int k; chat: a bool
//! with `top_logprobs`), `stream` + `stream_options.include_usage`,
//! `return_tokens_as_token_ids` (log-prob tokens as `"token_id:N"`), `return_token_ids`
//! (`prompt_token_ids` and per-choice `token_ids`, vLLM >= 0.10.2; chat puts `prompt_token_ids`
//! at the top level, as vLLM does), `include_stop_str_in_output`, `skip_special_tokens`,
//! `add_generation_prompt` and `chat_template_kwargs` (chat). Choice `i * n + j` is sample `j` of
//! prompt `i` (vLLM's order). `usage` counts tokens (each prompt once). `finish_reason` is
//! `"stop"`, `"length"` or `"abort"`; `stop_reason` is the stop string or the request's stop token
//! id (vLLM).
//!
//! **What differs from vLLM**: stop strings are matched on the decoded text (vLLM too) but the
//! sampler does not see them, so the row decodes on to its other limits and the tokens after the
//! match are dropped ([`text`]); `echo`, penalties, `logit_bias`, `min_tokens`, `best_of != n`,
//! beam search and structured output are a 400 naming the field; streaming with alternatives
//! per position (`logprobs: k > 0`, `top_logprobs > 0`) is a 400 (the sampler returns them when
//! the batch ends); `prompt_logprobs: k` (vLLM's prompt scores, what a distillation teacher
//! serves) is answered on `/v1/completions` only, not streamed; tool definitions are passed to the chat template but tool calls are not
//! parsed out of the reply; log-prob token strings are each token decoded on its own.
//! Without a tokenizer (`--model` without tokenizer.json) only token-id prompts are accepted,
//! text fields are empty and log-prob tokens are `"token_id:N"`.
//!
//! **Batching**: step-level continuous batching over the KV-cache sampler: the worker decodes the
//! head of the queue together with every queued request of the same sampling options (no seed),
//! up to `--max-batch-rows` rows; after every decoding step it admits queued requests of the
//! same sampling into the running batch while fewer than `--max-batch-rows` rows are live (the
//! sampler prefills them and joins their KV cache to the batch's, left-padded), and answers each
//! request as soon as its rows have finished. Requests with other sampling options wait for the
//! next batch. A request with a `seed` runs alone (nothing joins it), so the same request, seed
//! and weights give the same tokens; a request asking for alternatives per position is not
//! admitted mid-batch. A request is always decoded whole, whatever its size (a trainer's step;
//! `--max-batch-rows` bounds only the merging of requests); more than `--max-queued-requests`
//! waiting requests get 503 + `Retry-After`.
//!
//! **Weights**: every generation response names the weights that produced it: top-level
//! `weight_version` (also in every streamed chunk) and the `x-reinforge-weight-version` header.
//! Loads run on the worker between batches, so a batch, and so a response, never mixes weights:
//! without a pause a load waits for the running batch, loads, and generation goes on. Pausing
//! (SGLang's `/pause_generation`, vLLM's `/pause`; both default to `abort`, as both engines do):
//! `abort` stops the running batch (its unfinished choices end with `finish_reason: "abort"` and
//! the tokens so far) and answers the queued requests with `"abort"` and no tokens; `wait` lets
//! the running batch finish and keeps the queue. Either way the call returns once no batch runs,
//! and requests sent while paused wait in the queue until `/continue_generation` (`/resume`).
//! SGLang's `retract` and `in_place` and vLLM's `keep` modes would resume a half-decoded batch,
//! on new weights after a load, so they are refused (400). A load without `weight_version`
//! increments an integer version (`"0"` -> `"1"`); a failed load keeps the old weights and
//! version and answers 400 with `success: false` and the reason (SGLang's shape).

pub mod backend;
pub mod engine;
pub mod error;
pub mod generate;
pub mod request;
pub mod respond;
pub mod text;
pub mod weights;

use std::path::PathBuf;

use anyhow::{Context, Result};
use axum::routing::{get, post};
use axum::Router;
use reinforge_hf::HfTokenizer;

pub use backend::{
    Batch, Finish, Generator, Sampling, Sequence, StepControl, StepToken, StepTokens,
};
pub use engine::{Engine, PauseMode, WeightInfo};

use crate::metrics::PolicyMetrics;
use crate::{AppState, ServeArgs};

/// The header every policy response carries: the weight version that produced it.
pub const WEIGHT_VERSION_HEADER: &str = "x-reinforge-weight-version";

/// What the routes know about the served model.
pub struct Served {
    /// The `model` clients name.
    pub name: String,
    /// `--model`, when given.
    pub model_dir: Option<PathBuf>,
    pub tokenizer: Option<HfTokenizer>,
    pub max_model_len: usize,
    pub vocab_size: usize,
    pub eos_token_ids: Vec<i64>,
    pub max_batch_rows: usize,
    /// `--max-request-rows`: prompts x n of one request.
    pub max_request_rows: usize,
    /// `--max-request-tokens`: the sum over a request's rows of prompt plus `max_tokens`.
    pub max_request_tokens: usize,
    /// `--max-request-logprobs`: the log-prob alternatives a request may ask for.
    pub max_request_logprobs: usize,
    /// `--weights-root`, canonical, and whether loads outside one are allowed (a loopback
    /// `--host`); see [`weights`].
    pub weights_root: Option<PathBuf>,
    pub loads_without_root: bool,
}

/// The policy: the served model's facts and the worker that decodes.
pub struct Policy {
    pub served: Served,
    pub engine: Engine,
}

impl Policy {
    /// Loads the tokenizer of `--model` (when it has a tokenizer.json) and starts the worker
    /// thread that owns `generator`.
    pub fn new(
        args: &ServeArgs,
        generator: Box<dyn Generator>,
        metrics: PolicyMetrics,
    ) -> Result<Policy> {
        if args.max_batch_rows == 0 {
            anyhow::bail!("--max-batch-rows must be at least 1, got 0");
        }
        if args.max_request_rows == 0 || args.max_request_tokens == 0 {
            anyhow::bail!("--max-request-rows and --max-request-tokens must be at least 1");
        }
        weights::check_version(&args.weight_version)
            .map_err(|e| anyhow::anyhow!("--weight-version: {}", e.message))?;
        let weights_root = match &args.weights_root {
            Some(r) => Some(std::fs::canonicalize(r).with_context(|| {
                format!("--weights-root {}: not an existing directory", r.display())
            })?),
            None => None,
        };
        if weights_root.as_ref().is_some_and(|r| !r.is_dir()) {
            anyhow::bail!("--weights-root must be a directory");
        }
        let tokenizer = match &args.model {
            Some(dir) if dir.join("tokenizer.json").is_file() => Some(
                HfTokenizer::from_dir(dir)
                    .with_context(|| format!("loading the tokenizer of {}", dir.display()))?,
            ),
            _ => None,
        };
        let name = args
            .served_model_name
            .clone()
            .or_else(|| {
                args.model
                    .as_ref()
                    .and_then(|d| d.file_name())
                    .map(|n| n.to_string_lossy().into_owned())
            })
            .unwrap_or_else(|| "reinforge-policy".into());
        let served = Served {
            name,
            model_dir: args.model.clone(),
            tokenizer,
            max_model_len: generator.max_model_len(),
            vocab_size: generator.vocab_size(),
            eos_token_ids: generator.eos_token_ids(),
            max_batch_rows: args.max_batch_rows,
            max_request_rows: args.max_request_rows,
            max_request_tokens: args.max_request_tokens,
            max_request_logprobs: args.max_request_logprobs,
            weights_root,
            loads_without_root: host_is_loopback(&args.host),
        };
        let engine = Engine::start(
            generator,
            args.weight_version.clone(),
            args.max_batch_rows,
            args.max_queued_requests,
            metrics,
        );
        Ok(Policy { served, engine })
    }
}

/// Whether `--host` names a loopback address (`localhost` or a loopback IP; any other name
/// counts as reachable from elsewhere).
pub fn host_is_loopback(host: &str) -> bool {
    host == "localhost"
        || host
            .trim_matches(|c| c == '[' || c == ']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The policy routes (merged into the server's router when a generator is given).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/models", get(generate::models))
        .route("/v1/models/{*id}", get(generate::model))
        .route("/v1/completions", post(generate::completions))
        .route("/v1/chat/completions", post(generate::chat_completions))
        .route("/pause_generation", post(weights::pause_generation))
        .route("/continue_generation", post(weights::continue_generation))
        .route("/pause", post(weights::pause))
        .route("/resume", post(weights::resume))
        .route("/is_paused", get(weights::is_paused))
        .route(
            "/update_weights_from_disk",
            post(weights::update_weights_from_disk),
        )
        .route("/get_weight_version", get(weights::get_weight_version))
        .route("/get_model_info", get(weights::get_model_info))
}
