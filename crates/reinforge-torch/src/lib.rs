//! The one libtorch crate of reinforge: the Llama/Qwen2-family transformer, KV-cache
//! sampling, per-token log-probs, policy-gradient losses with autograd, the optimiser and the
//! training steps. Everything that needs no tensors lives in other crates.

pub mod batch;
pub mod cache;
pub mod config;
pub mod logprobs;
pub mod loss;
pub mod model;
pub mod optim;
pub mod policy;
pub mod sampling;
pub mod train;

pub use batch::SequenceBatch;
pub use config::ModelConfig;
pub use model::Transformer;
pub use optim::{AdamW, AdamWConfig};
pub use policy::Policy;
pub use sampling::{generate, Completion, SamplingParams};

/// Re-exported so dependants use the exact tch this crate links.
pub use tch;
