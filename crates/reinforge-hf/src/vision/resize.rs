//! PIL's `Image.resize(..., BICUBIC)` on 8-bit RGB, reimplemented from the algorithm of Pillow's Resample.c.
//!
//! Written by hand because no Rust crate reproduces PIL's fixed-point bicubic (`image`'s `CatmullRom` and
//! `fast_image_resize` use other kernels, supports or rounding), and `pixel_values` can only match
//! transformers' processor if the uint8 resize matches to the bit. The algorithm:
//!
//! - separable, two passes: horizontal (width) first, then vertical; a pass is skipped when that side keeps
//!   its size; the intermediate image is uint8;
//! - the kernel is Keys' cubic with a = -0.5, support 2; on a downscale the support is widened by the scale
//!   factor (and the kernel's argument shrunk by it), so every source pixel contributes (antialiasing);
//! - output pixel `i` is centred on source coordinate `(i + 0.5) * scale`; taps run over
//!   `[trunc(c - support + 0.5), trunc(c + support + 0.5))` clipped to the image; the weights are normalised
//!   to sum 1 in f64 and then turned into fixed point with 22 fractional bits (`32 - 8 - 2`), rounded half
//!   away from zero;
//! - each output is `clip8((1 << 21 + Σ pixel·weight) >> 22)`: round half up, clipped to 0..=255.

/// Fractional bits of the fixed-point weights: 32 bits less 8 for the pixel and 2 for headroom.
const PRECISION_BITS: u32 = 32 - 8 - 2;

/// Keys' cubic convolution kernel with a = -0.5 (PIL's BICUBIC), support 2.
fn bicubic(x: f64) -> f64 {
    const A: f64 = -0.5;
    let x = x.abs();
    if x < 1.0 {
        ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        (((x - 5.0) * x + 8.0) * x - 4.0) * A
    } else {
        0.0
    }
}

/// The taps of one output sample: the first source index and the fixed-point weights.
struct Taps {
    start: usize,
    weights: Vec<i32>,
}

/// The taps of every output sample for resampling a side of `in_size` to `out_size`.
fn taps(in_size: usize, out_size: usize) -> Vec<Taps> {
    let scale = in_size as f64 / out_size as f64;
    let filter_scale = scale.max(1.0);
    let support = 2.0 * filter_scale;
    (0..out_size)
        .map(|i| {
            let center = (i as f64 + 0.5) * scale;
            // `as usize` truncates toward zero (and saturates negatives to 0), as C's `(int)` then `max(0)`.
            let lo = ((center - support + 0.5) as i64).max(0) as usize;
            let hi = ((center + support + 0.5) as i64).min(in_size as i64) as usize;
            let raw: Vec<f64> = (lo..hi)
                .map(|x| bicubic((x as f64 - center + 0.5) / filter_scale))
                .collect();
            let sum: f64 = raw.iter().fold(0.0, |acc, w| acc + w);
            let weights = raw
                .iter()
                .map(|&w| {
                    let w = if sum != 0.0 { w / sum } else { w };
                    let fixed = w * f64::from(1u32 << PRECISION_BITS);
                    // Round half away from zero, then truncate, as PIL's normalize_coeffs_8bpc.
                    if w < 0.0 {
                        (fixed - 0.5) as i32
                    } else {
                        (fixed + 0.5) as i32
                    }
                })
                .collect();
            Taps { start: lo, weights }
        })
        .collect()
}

/// Rounds a fixed-point accumulator (which already holds the half) back to a clipped uint8.
fn clip8(acc: i64) -> u8 {
    if acc <= 0 {
        0
    } else if acc >= (255i64 + 1) << PRECISION_BITS {
        255
    } else {
        (acc >> PRECISION_BITS) as u8
    }
}

/// One pass along an axis. `src` is interleaved RGB; a sample at (line, pos) is at
/// `line * line_stride + pos * pos_stride`, and likewise for the output with its own strides.
#[allow(clippy::too_many_arguments)]
fn pass(
    src: &[u8],
    lines: usize,
    (src_line, src_pos): (usize, usize),
    in_size: usize,
    out: &mut [u8],
    (dst_line, dst_pos): (usize, usize),
    out_size: usize,
) {
    let taps = taps(in_size, out_size);
    for line in 0..lines {
        for (o, t) in taps.iter().enumerate() {
            for c in 0..3 {
                let mut acc: i64 = 1 << (PRECISION_BITS - 1);
                for (k, &w) in t.weights.iter().enumerate() {
                    let v = src[line * src_line + (t.start + k) * src_pos + c];
                    acc += i64::from(v) * i64::from(w);
                }
                out[line * dst_line + o * dst_pos + c] = clip8(acc);
            }
        }
    }
}

/// Resizes an interleaved 8-bit RGB image (`height * width * 3` bytes, row-major) to `out_h` x `out_w`
/// exactly as PIL's `Image.resize((out_w, out_h), Image.BICUBIC)` does; a copy when the size is unchanged.
pub fn resize_bicubic(
    rgb: &[u8],
    height: usize,
    width: usize,
    out_h: usize,
    out_w: usize,
) -> Vec<u8> {
    assert_eq!(
        rgb.len(),
        height * width * 3,
        "rgb buffer of {height}x{width}x3"
    );
    assert!(
        out_h > 0 && out_w > 0 && height > 0 && width > 0,
        "empty image"
    );
    let mut cur = rgb.to_vec();
    let mut cur_w = width;
    if out_w != width {
        let mut out = vec![0u8; height * out_w * 3];
        pass(
            &cur,
            height,
            (width * 3, 3),
            width,
            &mut out,
            (out_w * 3, 3),
            out_w,
        );
        cur = out;
        cur_w = out_w;
    }
    if out_h != height {
        let mut out = vec![0u8; out_h * cur_w * 3];
        // Lines are columns: along a column, consecutive positions are one row apart.
        pass(
            &cur,
            cur_w,
            (3, cur_w * 3),
            height,
            &mut out,
            (3, cur_w * 3),
            out_h,
        );
        cur = out;
    }
    cur
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_size_is_a_copy_and_weights_sum_to_one() {
        let img: Vec<u8> = (0..4 * 5 * 3).map(|i| (i * 7 % 256) as u8).collect();
        assert_eq!(resize_bicubic(&img, 4, 5, 4, 5), img);
        for t in taps(61, 56).iter().chain(taps(20, 56).iter()) {
            let s: i64 = t.weights.iter().map(|&w| i64::from(w)).sum();
            assert!((s - (1 << PRECISION_BITS)).abs() <= t.weights.len() as i64);
        }
    }
}
