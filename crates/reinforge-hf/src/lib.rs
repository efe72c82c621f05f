//! The text side of Hugging Face checkpoints, in pure Rust: load a checkpoint directory's `tokenizer.json`
//! (through the `tokenizers` crate), the special tokens of `tokenizer_config.json`, its chat templates
//! (rendered with minijinja the way transformers' `apply_chat_template` renders them with jinja2, byte for
//! byte), and the sampling defaults of `generation_config.json`.
//!
//! ```no_run
//! use reinforge_hf::{ChatOptions, HfTokenizer};
//! # fn main() -> reinforge_hf::Result<()> {
//! let tok = HfTokenizer::from_dir("checkpoints/qwen")?;
//! #[derive(serde::Serialize)]
//! struct Msg { role: &'static str, content: &'static str }
//! let prompt = tok.apply_chat_template(
//!     &[Msg { role: "user", content: "What is 2 + 2?" }],
//!     &ChatOptions { add_generation_prompt: true, ..Default::default() },
//! )?;
//! let ids = tok.encode(&prompt, false)?;
//! let stop = tok.stop_token_ids();
//! # let _ = (ids, stop); Ok(()) }
//! ```
//!
//! Every error names the file (and line/column, field, or template line) at fault; see [`HfError`].
//! The weights side (safetensors, config.json architectures) lives in `reinforge-torch`.

pub mod config;
pub mod error;
pub mod generation;
pub mod pyfmt;
pub mod template;
pub mod tokenizer;

pub use config::{SpecialTokens, TemplateSource, TokenizerConfig};
pub use error::{HfError, Result};
pub use generation::GenerationConfig;
pub use minijinja::Value;
pub use template::{json_value, to_value, ChatOptions, ChatTemplate, ChatTemplates};
pub use tokenizer::HfTokenizer;
