//! The one libtorch crate of reinforge, in rooms: `model/` (the transformer, its config and
//! Hugging Face checkpoints, the KV cache, LoRA, the policy, the critic and reward heads, and
//! a forward pass's batches, log-probs and memory bounds), `kernels/` (the CPU kernels, their
//! C++ shims and switches), `sample/` (KV-cache sampling), `train/` (the loss registries, the
//! optimiser, and the tensor side of each trainer: the RL step's two calls, SFT, preference,
//! P2L, distillation, Tinker), `dist/` (torch.distributed through c10d); and the process settings beside them
//! (`runtime`: devices and threads; `precision`: bf16 autocast; `heap`: malloc between
//! phases). Everything that needs no tensors lives in other crates.

// `x = x * w` on tensors stays as written: `x *= w` is an in-place op, which autograd treats
// differently (it may overwrite a value the backward pass needs).
#![allow(clippy::assign_op_pattern)]

pub mod dist;
pub mod heap;
pub mod kernels;
pub mod model;
pub mod precision;
pub mod runtime;
pub mod sample;
pub mod train;

pub use model::batch::SequenceBatch;
pub use model::checkpoint::{copy_aux_files, LoadOptions, SaveOptions};
pub use model::config::{Family, ModelConfig};
pub use model::lora::LoraConfig;
pub use model::memory::Memory;
pub use model::policy::{Policy, SharedPolicy};
pub use model::reward_model::RewardModel;
pub use model::transformer::Transformer;
pub use model::value::Critic;
pub use sample::{
    generate, generate_with, generate_with_images, Completion, GenerateHooks, RowEnd,
    SamplingParams, StepControl, StepToken,
};
pub use train::optim::{AdamW, AdamWConfig, GradStep};

/// Re-exported so dependants use the exact tch this crate links.
pub use tch;
/// The device and dtype types, for dependants that pass them along without using tch.
pub use tch::{Device, Kind};
