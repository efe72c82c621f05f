//! Tinker sampling (`asample`) through the policy routes' batching engine
//! ([`crate::policy::engine`]): step-level continuous batching, a request's `num_samples` rows
//! and the rows of every client's concurrent requests decoded together, seeded requests alone
//! (so a seed reproduces its draw).
//!
//! Design: a second [`Engine`] instance, beside the OpenAI routes' one, over a generator that
//! holds the base model and the sampler snapshots by key (the binary's `TinkerSampler`, whose
//! base shares the training models' frozen tensors). Not the OpenAI engine with a weights key:
//! that engine's weights are replaced by `update_weights_from_disk` and paused by trainers,
//! which must change neither what a Tinker sampler samples from nor when it runs. The weights a
//! request samples from are its [`Sampling::weights`] key, part of the engine's
//! batching-compatibility check, so requests for different weights never share a batch (vLLM's
//! multi-LoRA serving keys requests by adapter name the same way). The engine runs on its own
//! thread, so sampling never waits behind another client's `forward_backward` on the training
//! worker ([`super::state`]).

use prost::Message;

use super::proto;
use crate::metrics::PolicyMetrics;
use crate::policy::engine::{Engine, Event};
use crate::policy::{Finish, Generator, Sequence};

/// Sampling requests waiting for the engine at most (more are answered 429); each session is
/// also bounded by `--tinker-max-pending`.
const MAX_QUEUED: usize = 4096;

/// Starts the sampling engine's thread over `generator`: batches of at most `max_batch_rows`
/// rows from different requests (one request is always decoded whole).
pub fn start(
    generator: Box<dyn Generator>,
    max_batch_rows: usize,
    metrics: PolicyMetrics,
) -> Engine {
    Engine::start(
        generator,
        "tinker".into(),
        max_batch_rows,
        MAX_QUEUED,
        metrics,
    )
}

/// The rows of a submitted request once decoded, or the engine's error.
pub async fn rows(
    mut events: tokio::sync::mpsc::UnboundedReceiver<Event>,
) -> Result<Vec<Sequence>, String> {
    while let Some(e) = events.recv().await {
        if let Event::Done(rows) = e {
            return rows;
        }
    }
    Err("the sampling engine stopped".into())
}

/// The SDK's `SampleResponse` (protobuf) for `rows`: tokens, their log-probs and why each
/// sequence ended (a stop token or string, else `max_tokens`).
pub fn response(rows: Vec<Sequence>) -> Vec<u8> {
    proto::SampleResponse {
        sequences: rows
            .into_iter()
            .map(|s| proto::SampledSequence {
                stop_reason: if s.finish == Finish::Stop {
                    proto::STOP_REASON_STOP
                } else {
                    proto::STOP_REASON_LENGTH
                },
                tokens: s
                    .tokens
                    .iter()
                    .flat_map(|&x| (x as i32).to_le_bytes())
                    .collect(),
                logprobs: Some(s.logprobs.iter().flat_map(|x| x.to_le_bytes()).collect()),
            })
            .collect(),
    }
    .encode_to_vec()
}
