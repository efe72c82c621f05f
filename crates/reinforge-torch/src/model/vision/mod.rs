//! Vision-language models' image side: the tower's settings (`config`), the Qwen2-VL /
//! Qwen2.5-VL vision tower with its patch merger (`tower`), and the images of one forward
//! pass, checked against the prompt's placeholders (`input`). The language model that reads
//! the merged embeddings (with M-RoPE) is [`crate::model::transformer`]'s.

pub mod config;
pub mod input;
pub mod tower;

pub use input::{Image, ImageInput, VisionBatch};
