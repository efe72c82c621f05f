//! The model room: the transformer and everything that is a model or a part of one. The
//! decoder (`transformer`) and its `config.json` (`config`), Hugging Face checkpoints
//! (`checkpoint`), the KV cache (`cache`), LoRA adapters (`lora`), activation checkpointing
//! (`activations`), the policy that owns the weights (`policy`), and the heads on the same
//! backbone: PPO's critic (`value`), reward models (`reward_model`) and Prompt-to-Leaderboard
//! models (`p2l`). A new family (another decoder, a vision tower, a sparse MLP) lands here.

pub mod activations;
pub mod cache;
pub mod checkpoint;
pub mod config;
pub mod lora;
pub mod p2l;
pub mod policy;
pub mod reward_model;
pub mod transformer;
pub mod value;
