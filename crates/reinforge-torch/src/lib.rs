//! The one libtorch crate of reinforge: the Llama/Qwen2/Qwen3/Mistral transformer and its
//! Hugging Face checkpoints, KV-cache
//! sampling, per-token log-probs, policy-gradient losses with autograd, the optimiser and the
//! training steps (`rl/`: the RL step's two calls; `sft.rs`; `preference.rs`). Everything that needs no tensors lives in other crates.

// `x = x * w` on tensors stays as written: `x *= w` is an in-place op, which autograd treats
// differently (it may overwrite a value the backward pass needs).
#![allow(clippy::assign_op_pattern)]

pub mod activations;
pub mod batch;
pub mod cache;
pub mod checkpoint;
pub mod choice;
pub mod config;
pub mod decode_attention;
pub mod dist;
pub mod distill;
pub mod heap;
pub mod linear;
pub mod logprobs;
pub mod lora;
pub mod loss;
pub mod memory;
pub mod model;
pub mod optim;
pub mod p2l;
pub mod policy;
pub mod precision;
pub mod preference;
pub mod ranks;
pub mod reward_model;
pub mod rl;
pub mod runtime;
pub mod sampling;
pub mod sampling_ops;
pub mod sft;
pub mod tinker;
pub mod value;

pub use batch::SequenceBatch;
pub use checkpoint::{copy_aux_files, LoadOptions, SaveOptions};
pub use config::{Family, ModelConfig};
pub use lora::LoraConfig;
pub use memory::Memory;
pub use model::Transformer;
pub use optim::{AdamW, AdamWConfig, GradStep};
pub use policy::{Policy, SharedPolicy};
pub use reward_model::RewardModel;
pub use sampling::{
    generate, generate_with, Completion, GenerateHooks, RowEnd, SamplingParams, StepControl,
    StepToken,
};
pub use value::Critic;

/// Re-exported so dependants use the exact tch this crate links.
pub use tch;
/// The device and dtype types, for dependants that pass them along without using tch.
pub use tch::{Device, Kind};
