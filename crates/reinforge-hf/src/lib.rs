//! The text and image side of Hugging Face checkpoints, in pure Rust: load a checkpoint directory's
//! `tokenizer.json` (through the `tokenizers` crate), the special tokens of `tokenizer_config.json`, its chat
//! templates (rendered with minijinja the way transformers' `apply_chat_template` renders them with jinja2,
//! byte for byte), and the sampling defaults of `generation_config.json`; and, in [`vision`], the
//! Qwen2-VL / Qwen2.5-VL image processor (`preprocessor_config.json`, decode, PIL-exact bicubic resize,
//! patchify into `pixel_values` / `image_grid_thw`) and the multimodal layout (mrope `position_ids`,
//! vision patch positions, `cu_seqlens`, window index), at parity with transformers 5.23.
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
//! Every error names the file (and line/column, field, or template line) at fault, or the batch row for the
//! layout; see [`HfError`]. The weights side (safetensors, config.json architectures, the vision tower) lives
//! in `reinforge-torch`.

pub mod config;
pub mod error;
pub mod generation;
pub mod pyfmt;
pub mod template;
pub mod tokenizer;
pub mod vision;

pub use config::{SpecialTokens, TemplateSource, TokenizerConfig};
pub use error::{HfError, Result};
pub use generation::GenerationConfig;
pub use minijinja::Value;
pub use template::{json_value, to_value, ChatOptions, ChatTemplate, ChatTemplates};
pub use tokenizer::HfTokenizer;
pub use vision::{
    convert_to_rgb, cu_seqlens, decode_rgb, resize_bicubic, rope_index, smart_resize,
    vision_position_ids, window_index, ImageProcessor, ImageProcessorConfig, ProcessedBatch,
    ProcessedImage, RgbImage, RopeIndex, TokenRow, DEFAULT_MAX_DECODE_PIXELS,
};
