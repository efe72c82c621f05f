//! Commands on Hugging Face checkpoints: `generate`, `score`, `judge`, `serve --model`, the
//! offline preference trainers (DPO, ORPO, KTO, reward models) and P2L. Loading a model with
//! its tokenizer, preference pairs and the dataset run are reinforge-train's (`loaded`,
//! `pairs`, `data`).

pub mod args;
pub mod dpo;
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

pub use reinforge_train::loaded::{encode_prompt, LoadedModel, PromptStyle};
pub use reinforge_train::pairs;
