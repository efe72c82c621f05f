//! Vision-language models' image side: the tower's settings (`config`) and the Qwen2-VL /
//! Qwen2.5-VL vision tower with its patch merger (`tower`). The language model that reads the
//! merged embeddings is [`crate::model::transformer`]'s.

pub mod config;
pub mod tower;
