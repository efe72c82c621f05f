//! `preprocessor_config.json` and the Qwen2-VL image pipeline of transformers 5.23's
//! `Qwen2VLImageProcessorPil`: convert_to_rgb → `smart_resize` + PIL bicubic on uint8 →
//! `f32(f64(u8) * rescale_factor)` → `(x - mean) / std` in f32 → patches in merge-block order with the
//! frame repeated `temporal_patch_size` times.

use std::path::Path;

use serde::Deserialize;

use super::resize::resize_bicubic;
use super::rgb::decode_rgb;
use super::rgb::RgbImage;
use crate::error::{read_json, HfError, Result};

/// PIL's `Image.BICUBIC`, the only resample filter implemented (the one every Qwen2-VL checkpoint uses).
const PIL_BICUBIC: i64 = 3;

/// Default cap on decoded pixels (width * height, read from the header before decoding): 64 Mpx, far above
/// the ~1 Mpx `max_pixels` of the Hub checkpoints, well below what would exhaust memory.
pub const DEFAULT_MAX_DECODE_PIXELS: u64 = 64 << 20;

/// The settings of a Qwen2-VL / Qwen2.5-VL image processor, with transformers' defaults for absent fields.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageProcessorConfig {
    pub patch_size: usize,
    pub temporal_patch_size: usize,
    pub merge_size: usize,
    /// Lower bound on the resized pixel count (`size.shortest_edge`, or v4's top-level `min_pixels`).
    pub min_pixels: u64,
    /// Upper bound on the resized pixel count (`size.longest_edge`, or v4's top-level `max_pixels`).
    pub max_pixels: u64,
    pub image_mean: [f64; 3],
    pub image_std: [f64; 3],
    pub rescale_factor: f64,
    pub do_resize: bool,
    pub do_rescale: bool,
    pub do_normalize: bool,
    pub do_convert_rgb: bool,
}

/// OpenAI CLIP's mean and std, transformers' defaults for this processor.
const CLIP_MEAN: [f64; 3] = [0.48145466, 0.4578275, 0.40821073];
const CLIP_STD: [f64; 3] = [0.26862954, 0.26130258, 0.27577711];

impl Default for ImageProcessorConfig {
    /// `Qwen2VLImageProcessorPil`'s class defaults.
    fn default() -> Self {
        ImageProcessorConfig {
            patch_size: 14,
            temporal_patch_size: 2,
            merge_size: 2,
            min_pixels: 56 * 56,
            max_pixels: 28 * 28 * 1280,
            image_mean: CLIP_MEAN,
            image_std: CLIP_STD,
            rescale_factor: 1.0 / 255.0,
            do_resize: true,
            do_rescale: true,
            do_normalize: true,
            do_convert_rgb: true,
        }
    }
}

/// A mean or std: one number for all channels, or one per channel.
#[derive(Deserialize)]
#[serde(untagged)]
enum PerChannel {
    One(f64),
    Many(Vec<f64>),
}

/// `size`: v5 writes `shortest_edge` / `longest_edge` (pixel counts, despite the names); some v4 files wrote
/// `min_pixels` / `max_pixels` inside it.
#[derive(Deserialize, Default)]
struct SizeJson {
    shortest_edge: Option<u64>,
    longest_edge: Option<u64>,
    min_pixels: Option<u64>,
    max_pixels: Option<u64>,
}

/// The fields read from `preprocessor_config.json`; unknown fields are ignored, as transformers ignores them.
#[derive(Deserialize)]
struct ConfigJson {
    image_processor_type: Option<String>,
    patch_size: Option<usize>,
    temporal_patch_size: Option<usize>,
    merge_size: Option<usize>,
    min_pixels: Option<u64>,
    max_pixels: Option<u64>,
    size: Option<SizeJson>,
    resample: Option<i64>,
    image_mean: Option<PerChannel>,
    image_std: Option<PerChannel>,
    rescale_factor: Option<f64>,
    do_resize: Option<bool>,
    do_rescale: Option<bool>,
    do_normalize: Option<bool>,
    do_convert_rgb: Option<bool>,
    do_pad: Option<bool>,
    do_center_crop: Option<bool>,
}

impl ImageProcessorConfig {
    /// Reads `dir/preprocessor_config.json`.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self> {
        Self::from_file(dir.as_ref().join("preprocessor_config.json"))
    }

    /// Reads a `preprocessor_config.json` in transformers 5's form (`size: {shortest_edge, longest_edge}`,
    /// `resample`) or the Hub's transformers-4 form (`min_pixels` / `max_pixels` at the top level, which
    /// override `size` as in `Qwen2VLImageProcessorPil.__init__`). Values this processor does not implement
    /// are refused, naming the field: a resample other than BICUBIC (3), `do_pad`, `do_center_crop`, a
    /// processor type other than Qwen2-VL's, a mean/std not of 1 or 3 values, zero sizes.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let json: ConfigJson = read_json(path, "image processor config")?;
        let field = |field: &str, message: String| HfError::Field {
            path: path.to_path_buf(),
            field: field.to_string(),
            message,
        };
        if let Some(t) = &json.image_processor_type {
            if !(t.starts_with("Qwen2VLImageProcessor")
                || t.starts_with("Qwen2_5_VLImageProcessor"))
            {
                return Err(field(
                    "image_processor_type",
                    format!("`{t}` is not a Qwen2-VL image processor (Qwen2VLImageProcessor*)"),
                ));
            }
        }
        if let Some(r) = json.resample {
            if r != PIL_BICUBIC {
                let name = match r {
                    0 => "NEAREST",
                    1 => "LANCZOS",
                    2 => "BILINEAR",
                    4 => "BOX",
                    5 => "HAMMING",
                    _ => "unknown",
                };
                return Err(field(
                    "resample",
                    format!("{r} ({name}) is not implemented; only 3 (BICUBIC) is"),
                ));
            }
        }
        for (name, on) in [
            ("do_pad", json.do_pad),
            ("do_center_crop", json.do_center_crop),
        ] {
            if on == Some(true) {
                return Err(field(name, "true is not implemented".into()));
            }
        }
        let d = Self::default();
        let size = json.size.unwrap_or_default();
        let channels = |name: &str, v: Option<PerChannel>, default: [f64; 3]| match v {
            None => Ok(default),
            Some(PerChannel::One(x)) => Ok([x; 3]),
            Some(PerChannel::Many(v)) if v.len() == 3 => Ok([v[0], v[1], v[2]]),
            Some(PerChannel::Many(v)) => {
                Err(field(name, format!("{} values; RGB needs 1 or 3", v.len())))
            }
        };
        let cfg = ImageProcessorConfig {
            patch_size: json.patch_size.unwrap_or(d.patch_size),
            temporal_patch_size: json.temporal_patch_size.unwrap_or(d.temporal_patch_size),
            merge_size: json.merge_size.unwrap_or(d.merge_size),
            min_pixels: json
                .min_pixels
                .or(size.shortest_edge)
                .or(size.min_pixels)
                .unwrap_or(d.min_pixels),
            max_pixels: json
                .max_pixels
                .or(size.longest_edge)
                .or(size.max_pixels)
                .unwrap_or(d.max_pixels),
            image_mean: channels("image_mean", json.image_mean, d.image_mean)?,
            image_std: channels("image_std", json.image_std, d.image_std)?,
            rescale_factor: json.rescale_factor.unwrap_or(d.rescale_factor),
            do_resize: json.do_resize.unwrap_or(d.do_resize),
            do_rescale: json.do_rescale.unwrap_or(d.do_rescale),
            do_normalize: json.do_normalize.unwrap_or(d.do_normalize),
            do_convert_rgb: json.do_convert_rgb.unwrap_or(d.do_convert_rgb),
        };
        for (name, v) in [
            ("patch_size", cfg.patch_size),
            ("temporal_patch_size", cfg.temporal_patch_size),
            ("merge_size", cfg.merge_size),
        ] {
            if v == 0 {
                return Err(field(name, "must be positive".into()));
            }
        }
        if cfg.max_pixels == 0 || cfg.min_pixels > cfg.max_pixels {
            return Err(field(
                "size",
                format!(
                    "min_pixels {} / max_pixels {} is not a valid range",
                    cfg.min_pixels, cfg.max_pixels
                ),
            ));
        }
        if let Some(i) = cfg.image_std.iter().position(|&s| s == 0.0) {
            return Err(field("image_std", format!("channel {i} is 0")));
        }
        if !cfg.do_convert_rgb {
            // Without it transformers keeps the decoded bands (1 or 4 channels); only RGB input is built.
            return Err(field(
                "do_convert_rgb",
                "false is not implemented (images are always converted to RGB)".into(),
            ));
        }
        Ok(cfg)
    }
}

/// transformers' `smart_resize`: the (height, width) closest to the image's, both multiples of `factor`,
/// with `min_pixels <= h * w <= max_pixels` (kept within by scaling both sides by the same factor).
/// Python's rounding rules: `round` is half-to-even, then `floor` on a downscale and `ceil` on an upscale.
/// An aspect ratio above 200 is an error, as in transformers.
pub fn smart_resize(
    height: usize,
    width: usize,
    factor: usize,
    min_pixels: u64,
    max_pixels: u64,
) -> Result<(usize, usize)> {
    if height == 0 || width == 0 || factor == 0 {
        return Err(HfError::Layout {
            message: format!("smart_resize of a {height}x{width} image with factor {factor}"),
        });
    }
    let (h, w, f) = (height as f64, width as f64, factor as f64);
    let ratio = h.max(w) / h.min(w);
    if ratio > 200.0 {
        return Err(HfError::Layout {
            message: format!(
                "absolute aspect ratio must be smaller than 200, got {ratio} ({height}x{width})"
            ),
        });
    }
    let mut h_bar = (h / f).round_ties_even() * f;
    let mut w_bar = (w / f).round_ties_even() * f;
    let area = (height as u64 * width as u64) as f64;
    if h_bar * w_bar > max_pixels as f64 {
        let beta = (area / max_pixels as f64).sqrt();
        h_bar = f.max((h / beta / f).floor() * f);
        w_bar = f.max((w / beta / f).floor() * f);
    } else if h_bar * w_bar < min_pixels as f64 {
        let beta = (min_pixels as f64 / area).sqrt();
        h_bar = (h * beta / f).ceil() * f;
        w_bar = (w * beta / f).ceil() * f;
    }
    if h_bar < f || w_bar < f {
        return Err(HfError::Layout {
            message: format!("smart_resize of {height}x{width} gives an empty {h_bar}x{w_bar}"),
        });
    }
    Ok((h_bar as usize, w_bar as usize))
}

/// One processed image: `pixel_values` is `n_patches x (3 * T * P * P)` row-major, with
/// `n_patches = grid_thw[0] * grid_thw[1] * grid_thw[2]`.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessedImage {
    pub pixel_values: Vec<f32>,
    pub grid_thw: [i64; 3],
}

/// Several processed images concatenated in order, as the processor returns a batch's images.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ProcessedBatch {
    /// `sum(n_patches) x patch_dim`, row-major.
    pub pixel_values: Vec<f32>,
    /// One `[t, h, w]` per image, in order.
    pub image_grid_thw: Vec<[i64; 3]>,
}

/// The image processor: a config plus the decode cap.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageProcessor {
    pub config: ImageProcessorConfig,
    /// Images whose header declares more pixels than this are refused before decoding.
    pub max_decode_pixels: u64,
}

impl ImageProcessor {
    pub fn new(config: ImageProcessorConfig) -> Self {
        ImageProcessor {
            config,
            max_decode_pixels: DEFAULT_MAX_DECODE_PIXELS,
        }
    }

    /// Reads `dir/preprocessor_config.json`.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self> {
        ImageProcessorConfig::from_dir(dir).map(Self::new)
    }

    /// Length of one patch vector: `3 * temporal_patch_size * patch_size²`.
    pub fn patch_dim(&self) -> usize {
        let c = &self.config;
        3 * c.temporal_patch_size * c.patch_size * c.patch_size
    }

    /// Decodes and processes one image file; errors name the file.
    pub fn process_file(&self, path: impl AsRef<Path>) -> Result<ProcessedImage> {
        let path = path.as_ref();
        let rgb = decode_rgb(path, self.max_decode_pixels)?;
        self.process_rgb(&rgb).map_err(|e| match e {
            HfError::Layout { message } => HfError::Image {
                path: path.to_path_buf(),
                message,
            },
            e => e,
        })
    }

    /// Processes several image files and concatenates them in order.
    pub fn process_files<P: AsRef<Path>>(&self, paths: &[P]) -> Result<ProcessedBatch> {
        let mut batch = ProcessedBatch::default();
        for p in paths {
            let img = self.process_file(p)?;
            batch.pixel_values.extend_from_slice(&img.pixel_values);
            batch.image_grid_thw.push(img.grid_thw);
        }
        Ok(batch)
    }

    /// Processes an RGB image: resize (if `do_resize`), rescale, normalise, patchify.
    pub fn process_rgb(&self, img: &RgbImage) -> Result<ProcessedImage> {
        let c = &self.config;
        assert_eq!(
            img.data.len(),
            img.height * img.width * 3,
            "RgbImage buffer size"
        );
        let factor = c.patch_size * c.merge_size;
        let (h, w, data) = if c.do_resize {
            let (h, w) = smart_resize(img.height, img.width, factor, c.min_pixels, c.max_pixels)?;
            (h, w, resize_bicubic(&img.data, img.height, img.width, h, w))
        } else {
            if !img.height.is_multiple_of(factor) || !img.width.is_multiple_of(factor) {
                return Err(HfError::Layout {
                    message: format!(
                        "{}x{} is not a multiple of patch_size * merge_size = {factor} and do_resize is false",
                        img.height, img.width
                    ),
                });
            }
            (img.height, img.width, img.data.clone())
        };
        let mean = c.image_mean.map(|m| m as f32);
        let std = c.image_std.map(|s| s as f32);
        let value = |v: u8, ch: usize| -> f32 {
            let x = if c.do_rescale {
                (f64::from(v) * c.rescale_factor) as f32
            } else {
                f32::from(v)
            };
            if c.do_normalize {
                (x - mean[ch]) / std[ch]
            } else {
                x
            }
        };
        let (p, m, t) = (c.patch_size, c.merge_size, c.temporal_patch_size);
        let (gh, gw) = (h / p, w / p);
        let dim = self.patch_dim();
        let mut out = Vec::with_capacity(gh * gw * dim);
        // Rows: merge blocks row-major, then the m x m patches of a block row-major; columns: channel,
        // temporal copy, row and column within the patch.
        for bh in 0..gh / m {
            for bw in 0..gw / m {
                for mh in 0..m {
                    for mw in 0..m {
                        let (y0, x0) = ((bh * m + mh) * p, (bw * m + mw) * p);
                        for ch in 0..3 {
                            for _ in 0..t {
                                for py in 0..p {
                                    let row = (y0 + py) * w;
                                    for px in 0..p {
                                        out.push(value(data[(row + x0 + px) * 3 + ch], ch));
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        Ok(ProcessedImage {
            pixel_values: out,
            grid_thw: [1, gh as i64, gw as i64],
        })
    }
}
