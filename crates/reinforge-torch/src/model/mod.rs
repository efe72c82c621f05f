//! The model room: the transformer and everything a forward pass needs. The decoder
//! (`transformer`) over the shared blocks (`layers`) and the dense or sparse MLP (`moe`), its
//! `config.json` (`config`), Hugging Face checkpoints (`checkpoint`),
//! the KV cache (`cache`), LoRA adapters (`lora`), the policy that owns the weights
//! (`policy`), the heads on the same backbone (PPO's critic `value`, `reward_model`); a pass's
//! input rows (`batch`), its per-token log-probs and hidden states (`logprobs`), and how it
//! bounds its memory (`memory`: micro-batches, activation checkpointing in `activations`).
//! Gradients, losses and optimisers are `train/`'s, which builds on this room and never the
//! reverse. A new family (another decoder, a vision tower, a sparse MLP) lands here.

pub mod activations;
pub mod batch;
pub mod cache;
pub mod checkpoint;
pub mod config;
pub mod images;
pub mod layers;
pub mod logprobs;
pub mod lora;
pub mod memory;
pub mod moe;
pub mod policy;
pub mod reward_model;
pub mod transformer;
pub mod value;
pub mod vision;
