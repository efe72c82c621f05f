//! Vision-language models' image side: the tower's settings (`config`) and the Qwen2-VL /
//! Qwen2.5-VL vision tower with its patch merger (`tower`). The images of one forward pass,
//! checked against the prompt's placeholders, are [`crate::model::images`]; the language model
//! that reads the merged embeddings (with M-RoPE) is [`crate::model::transformer`]'s.

pub mod config;
pub mod tower;
