//! Commands on Hugging Face checkpoints: loading a model with its tokenizer, turning dataset
//! prompts into token ids (chat template or raw text), `generate` and `score`.

pub mod args;
pub mod data_env;
pub mod dpo;
pub mod evaluate;
pub mod generate;
pub mod judge;
pub mod kto;
pub mod loaded;
pub mod offline;
pub mod orpo;
pub mod output;
pub mod p2l;
pub mod pairs;
pub mod report;
pub mod rm;
pub mod score;
pub mod serve;
pub mod tools;
pub mod train;

pub use loaded::{encode_prompt, LoadedModel, PromptStyle};
