//! The commands on Hugging Face checkpoints: their clap arguments, turned into reinforge-train's
//! `Options` at the boundary (`generate`, `score`, `judge`, `serve --model`, the offline
//! trainers `train-sft`, `train-dpo`, `train-orpo`, `train-kto`, `train-distill`, `train-rm`,
//! `score-rm`, `train-p2l`, `p2l`).
//! What they run is reinforge-recipes' (`offline`, `judge`, `score`, `generate`, `loaded`,
//! `data`) and reinforge-backend's (the served models).

pub mod args;
pub mod derl;
pub mod distill;
pub mod dpo;
pub mod explain;
pub mod generate;
pub mod judge;
pub mod kto;
pub mod offline;
pub mod orpo;
pub mod output;
pub mod p2l;
pub mod rm;
pub mod score;
pub mod serve;
pub mod sft;
pub mod tinker;
pub mod verify;

pub use reinforge_recipes::loaded::{LoadedModel, PromptStyle};
