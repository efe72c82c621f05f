//! The image side of Qwen2-VL / Qwen2.5-VL checkpoints, in pure Rust, at parity with transformers 5.23's
//! `Qwen2VLImageProcessorPil` and the models' position helpers:
//!
//! - [`processor`]: `preprocessor_config.json`, `smart_resize`, and the pipeline decode → RGB → PIL-bicubic
//!   resize → rescale → normalise → patchify into `pixel_values` + `image_grid_thw`;
//! - [`placeholders`]: the processor's text side, each `<|image_pad|>` of the prompt ids expanded to its
//!   image's merged-token count;
//! - [`layout`]: the integer tensors the model derives from the batch: mrope `position_ids` / `rope_deltas`
//!   (`get_rope_index`), the vision tower's per-patch (h, w) positions, `cu_seqlens`, and Qwen2.5-VL's
//!   window permutation.
//!
//! Images only: video inputs (`<|video_pad|>`, `video_grid_thw`, frame sampling) are not built.

pub mod layout;
pub mod placeholders;
pub mod processor;
mod resize;
mod rgb;

pub use layout::{cu_seqlens, rope_index, vision_position_ids, window_index, RopeIndex, TokenRow};
pub use placeholders::{expand_image_placeholders, merged_tokens};
pub use processor::{
    smart_resize, ImageProcessor, ImageProcessorConfig, ProcessedBatch, ProcessedImage,
    DEFAULT_MAX_DECODE_PIXELS,
};
pub use resize::resize_bicubic;
pub use rgb::{convert_to_rgb, decode_rgb, RgbImage};
