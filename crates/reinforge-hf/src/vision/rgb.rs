//! Decoding an image file and `convert_to_rgb` as transformers 5.23 does it on a PIL image
//! (`image_transforms.convert_to_rgb`): images with an alpha band (or a tRNS transparency, which the PNG
//! decoder expands into one) are alpha-composited over opaque white with PIL's integer `alpha_composite`;
//! the rest are converted to RGB (greyscale replicated into the three channels).

use std::io::Cursor;
use std::path::Path;

use image::DynamicImage;

use crate::error::{HfError, Result};

/// An 8-bit RGB image, interleaved and row-major (`data.len() == height * width * 3`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RgbImage {
    pub height: usize,
    pub width: usize,
    pub data: Vec<u8>,
}

/// Decodes `path` (PNG or JPEG, by content) into RGB, refusing before decoding any image whose header
/// declares more than `max_pixels` pixels. EXIF orientation is not applied (transformers' processor does not
/// apply it either; only its `load_image` helper does).
pub fn decode_rgb(path: &Path, max_pixels: u64) -> Result<RgbImage> {
    let bytes = std::fs::read(path).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            HfError::MissingFile {
                path: path.to_path_buf(),
                what: "image",
            }
        } else {
            HfError::Io {
                path: path.to_path_buf(),
                source,
            }
        }
    })?;
    let bad = |message: String| HfError::Image {
        path: path.to_path_buf(),
        message,
    };
    let reader = || {
        image::io::Reader::new(Cursor::new(&bytes))
            .with_guessed_format()
            .map_err(|e| bad(e.to_string()))
    };
    let (width, height) = reader()?
        .into_dimensions()
        .map_err(|e| bad(format!("cannot read the header: {e}")))?;
    if u64::from(width) * u64::from(height) > max_pixels {
        return Err(HfError::ImageTooLarge {
            path: path.to_path_buf(),
            width,
            height,
            max_pixels,
        });
    }
    let img = reader()?
        .decode()
        .map_err(|e| bad(format!("cannot decode: {e}")))?;
    convert_to_rgb(&img).map_err(bad)
}

/// Converts a decoded image to 8-bit RGB as transformers' `convert_to_rgb` does with PIL. 16-bit RGB(A) and
/// grey+alpha keep the high byte of each sample (PIL's `;16B` unpackers); 16-bit greyscale without alpha
/// (PIL's `I;16`) and float images are refused by name.
pub fn convert_to_rgb(img: &DynamicImage) -> std::result::Result<RgbImage, String> {
    let (width, height) = (img.width() as usize, img.height() as usize);
    let n = width * height;
    let mut rgb = Vec::with_capacity(n * 3);
    match img {
        DynamicImage::ImageRgb8(b) => rgb.extend_from_slice(b.as_raw()),
        DynamicImage::ImageLuma8(b) => b.as_raw().iter().for_each(|&l| rgb.extend([l, l, l])),
        DynamicImage::ImageRgba8(b) => b.as_raw().chunks_exact(4).for_each(|p| {
            rgb.extend(over_white([p[0], p[1], p[2]], p[3]));
        }),
        DynamicImage::ImageLumaA8(b) => b.as_raw().chunks_exact(2).for_each(|p| {
            rgb.extend(over_white([p[0], p[0], p[0]], p[1]));
        }),
        DynamicImage::ImageRgb16(b) => rgb.extend(b.as_raw().iter().map(|&v| (v >> 8) as u8)),
        DynamicImage::ImageRgba16(b) => b.as_raw().chunks_exact(4).for_each(|p| {
            let h = |v: u16| (v >> 8) as u8;
            rgb.extend(over_white([h(p[0]), h(p[1]), h(p[2])], h(p[3])));
        }),
        DynamicImage::ImageLumaA16(b) => b.as_raw().chunks_exact(2).for_each(|p| {
            let l = (p[0] >> 8) as u8;
            rgb.extend(over_white([l, l, l], (p[1] >> 8) as u8));
        }),
        other => {
            return Err(format!(
            "unsupported pixel format {:?} (16-bit greyscale and float images are not converted)",
            other.color()
        ))
        }
    }
    Ok(RgbImage {
        height,
        width,
        data: rgb,
    })
}

/// PIL's `alpha_composite(white, src)` for one pixel, in its integer arithmetic (7 extra bits of
/// precision, divisions by 255 done as `((x >> 8) + x) >> 8` with rounding), then `convert("RGB")`.
fn over_white(src: [u8; 3], alpha: u8) -> [u8; 3] {
    const PRECISION_BITS: u32 = 7;
    if alpha == 0 {
        return [255; 3];
    }
    let (sa, da) = (u32::from(alpha), 255u32);
    let blend = da * (255 - sa);
    let out_a255 = sa * 255 + blend;
    let coef1 = sa * 255 * 255 * (1 << PRECISION_BITS) / out_a255;
    let coef2 = 255 * (1 << PRECISION_BITS) - coef1;
    src.map(|s| {
        let t = u32::from(s) * coef1 + 255 * coef2 + (0x80 << PRECISION_BITS);
        ((((t >> 8) + t) >> 8) >> PRECISION_BITS) as u8
    })
}

#[cfg(test)]
mod tests {
    use super::over_white;

    #[test]
    fn opaque_is_unchanged_and_transparent_is_white() {
        for v in [0u8, 1, 127, 128, 254, 255] {
            assert_eq!(over_white([v, v, v], 255), [v, v, v]);
            assert_eq!(over_white([v, v, v], 0), [255, 255, 255]);
        }
    }
}
