//! The integer layout tensors of a Qwen2-VL / Qwen2.5-VL batch, computed as transformers 5.23 computes them:
//! the language model's mrope positions (`Qwen2VLModel.get_rope_index`) and the vision tower's patch
//! positions, attention boundaries and window permutation (`vision_utils.py`). Pure integer code, no tensors.
//!
//! A grid is an image's `[t, h, w]` in patches (`image_grid_thw`); the language model sees
//! `t * (h / merge) * (w / merge)` merged tokens for it.

use crate::error::{HfError, Result};

/// One row of a batch: its token ids and attention mask (non-zero = attended), of equal length.
#[derive(Debug, Clone, Copy)]
pub struct TokenRow<'a> {
    pub input_ids: &'a [i64],
    pub attention_mask: &'a [i64],
}

/// The mrope positions of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RopeIndex {
    pub batch: usize,
    pub seq_len: usize,
    /// `[3][batch][seq_len]` row-major (t, h, w axes); padded slots are 0.
    pub position_ids: Vec<i64>,
    /// Per row: `max position + 1 - attended length`, the offset of decode steps' positions.
    pub rope_deltas: Vec<i64>,
}

impl RopeIndex {
    /// The position of token `pos` of row `row` on `axis` (0 = t, 1 = h, 2 = w).
    pub fn get(&self, axis: usize, row: usize, pos: usize) -> i64 {
        self.position_ids[(axis * self.batch + row) * self.seq_len + pos]
    }
}

/// Checks a grid and returns its merged-token sides `(t, h / merge, w / merge)`.
fn llm_grid(grid: [i64; 3], merge: i64) -> Result<(i64, i64, i64)> {
    let [t, h, w] = grid;
    if merge <= 0 || t <= 0 || h <= 0 || w <= 0 || h % merge != 0 || w % merge != 0 {
        return Err(HfError::Layout {
            message: format!(
                "grid {grid:?} is not positive with h and w multiples of the merge size {merge}"
            ),
        });
    }
    Ok((t, h / merge, w / merge))
}

/// A maximal run of attended tokens of one kind: `(is_image, start, end)` in attended-token indices.
fn runs(ids: &[i64], image_token_id: i64) -> Vec<(bool, usize, usize)> {
    let mut out: Vec<(bool, usize, usize)> = Vec::new();
    for (i, &id) in ids.iter().enumerate() {
        let img = id == image_token_id;
        match out.last_mut() {
            Some((kind, _, end)) if *kind == img => *end = i + 1,
            _ => out.push((img, i, i + 1)),
        }
    }
    out
}

/// `get_rope_index` for images: 3-D (t, h, w) rope positions of a left- or right-padded batch.
///
/// Within each row's attended tokens, every maximal run of `image_token_id` is one image and takes the next
/// grid of `grids` (all rows' images in order, as `image_grid_thw`). Text advances all three axes by one per
/// token; an image starting at position `s` gets `(s + ti, s + hi, s + wi)` over its merged grid, and the
/// text after it continues at `s + max(h, w) / merge` (transformers' rule, not `max position + 1`).
///
/// Errors, never a silent shift: a row whose placeholder count differs from what its images' grids need
/// ([`HfError::ImageTokens`], naming the row), a run with no grid left, grids left unused, an all-padding
/// row, rows of unequal length.
pub fn rope_index(
    rows: &[TokenRow<'_>],
    image_token_id: i64,
    grids: &[[i64; 3]],
    spatial_merge_size: i64,
) -> Result<RopeIndex> {
    let batch = rows.len();
    let seq_len = rows.first().map_or(0, |r| r.input_ids.len());
    let mut position_ids = vec![0i64; 3 * batch * seq_len];
    let mut rope_deltas = Vec::with_capacity(batch);
    let mut next_grid = 0usize;
    for (r, row) in rows.iter().enumerate() {
        if row.input_ids.len() != seq_len || row.attention_mask.len() != seq_len {
            return Err(HfError::Layout {
                message: format!(
                    "row {r} has {} ids and {} mask values; row 0 has {seq_len} ids",
                    row.input_ids.len(),
                    row.attention_mask.len()
                ),
            });
        }
        let slots: Vec<usize> = (0..seq_len)
            .filter(|&i| row.attention_mask[i] != 0)
            .collect();
        if slots.is_empty() {
            return Err(HfError::ImageTokens {
                row: r,
                message: "no attended tokens".into(),
            });
        }
        let ids: Vec<i64> = slots.iter().map(|&i| row.input_ids[i]).collect();
        let runs = runs(&ids, image_token_id);

        // Assign grids to the row's image runs and check the counts before laying anything out.
        let n_images = runs.iter().filter(|r| r.0).count();
        let found: usize = runs.iter().filter(|r| r.0).map(|r| r.2 - r.1).sum();
        if next_grid + n_images > grids.len() {
            return Err(HfError::ImageTokens {
                row: r,
                message: format!(
                    "{n_images} runs of image tokens (id {image_token_id}) but only {} of the {} grids are left",
                    grids.len() - next_grid,
                    grids.len()
                ),
            });
        }
        let row_grids = &grids[next_grid..next_grid + n_images];
        next_grid += n_images;
        let mut need = Vec::with_capacity(n_images);
        for &g in row_grids {
            let (t, h, w) = llm_grid(g, spatial_merge_size)?;
            need.push((t * h * w) as usize);
        }
        let lens: Vec<usize> = runs.iter().filter(|r| r.0).map(|r| r.2 - r.1).collect();
        if lens != need {
            return Err(HfError::ImageTokens {
                row: r,
                message: format!(
                    "{found} image-placeholder tokens (id {image_token_id}) in runs of {lens:?}, but its images' grids {row_grids:?} need {} (runs of {need:?}: t*h*w/merge^2 each)",
                    need.iter().sum::<usize>()
                ),
            });
        }

        let mut pos3: [Vec<i64>; 3] = std::array::from_fn(|_| Vec::with_capacity(ids.len()));
        let mut current = 0i64;
        let mut g = row_grids.iter();
        for &(is_image, start, end) in &runs {
            if !is_image {
                for k in 0..(end - start) as i64 {
                    pos3.iter_mut().for_each(|p| p.push(current + k));
                }
                current += (end - start) as i64;
                continue;
            }
            let grid = *g.next().expect("grids assigned above");
            let (t, h, w) = llm_grid(grid, spatial_merge_size)?;
            for ti in 0..t {
                for hi in 0..h {
                    for wi in 0..w {
                        pos3[0].push(current + ti);
                        pos3[1].push(current + hi);
                        pos3[2].push(current + wi);
                    }
                }
            }
            current += grid[1].max(grid[2]) / spatial_merge_size;
        }
        let mut max = i64::MIN;
        for (axis, p) in pos3.iter().enumerate() {
            for (&slot, &v) in slots.iter().zip(p) {
                position_ids[(axis * batch + r) * seq_len + slot] = v;
                max = max.max(v);
            }
        }
        rope_deltas.push(max + 1 - ids.len() as i64);
    }
    if next_grid != grids.len() {
        return Err(HfError::Layout {
            message: format!(
                "{} grids given but the rows hold only {next_grid} images",
                grids.len()
            ),
        });
    }
    Ok(RopeIndex {
        batch,
        seq_len,
        position_ids,
        rope_deltas,
    })
}

/// The vision tower's rope positions: `(h, w)` of every patch in processor order (merge blocks row-major,
/// patches within a block row-major), each image's repeated for its `t` frames
/// (`vision_utils.get_vision_position_ids`).
pub fn vision_position_ids(grids: &[[i64; 3]], spatial_merge_size: i64) -> Result<Vec<[i64; 2]>> {
    let m = spatial_merge_size;
    let mut out = Vec::new();
    for &g in grids {
        let (t, bh, bw) = llm_grid(g, m)?;
        for _ in 0..t {
            for bi in 0..bh {
                for bj in 0..bw {
                    for mi in 0..m {
                        for mj in 0..m {
                            out.push([bi * m + mi, bj * m + mj]);
                        }
                    }
                }
            }
        }
    }
    Ok(out)
}

/// Per-frame attention boundaries in patches: `[0, h*w, 2*h*w, ...]`, one segment per frame of each image
/// (`vision_utils.get_vision_cu_seqlens` with `merge_temporal = false`).
pub fn cu_seqlens(grids: &[[i64; 3]]) -> Vec<i64> {
    let mut out = vec![0i64];
    for &[t, h, w] in grids {
        for _ in 0..t {
            out.push(out[out.len() - 1] + h * w);
        }
    }
    out
}

/// Qwen2.5-VL's window attention layout (`vision_utils.get_vision_window_index`): the order of the merged
/// tokens when grouped into windows of `window_size / merge / patch_size` merged tokens per side, and the
/// window boundaries in patches.
///
/// Each image's merged grid is padded on the bottom and right to whole windows, by a whole empty window
/// when a side is already a multiple (transformers' `pad = w - n % w`); the empty windows leave repeated
/// boundaries, which are removed as `torch.unique_consecutive` removes them.
pub fn window_index(
    grids: &[[i64; 3]],
    window_size: i64,
    patch_size: i64,
    spatial_merge_size: i64,
) -> Result<(Vec<i64>, Vec<i64>)> {
    let m = spatial_merge_size;
    let vms = if m > 0 && patch_size > 0 {
        window_size / m / patch_size
    } else {
        0
    };
    if vms <= 0 {
        return Err(HfError::Layout {
            message: format!(
                "window_size {window_size} / merge {m} / patch_size {patch_size} is not a positive number of merged tokens"
            ),
        });
    }
    let unit = m * m;
    let mut index = Vec::new();
    let mut cu = vec![0i64];
    let mut offset = 0i64;
    for &g in grids {
        let (t, lh, lw) = llm_grid(g, m)?;
        let nwh = (lh + vms - lh % vms) / vms;
        let nww = (lw + vms - lw % vms) / vms;
        for ti in 0..t {
            for wh in 0..nwh {
                for ww in 0..nww {
                    let mut count = 0;
                    for i in wh * vms..(wh + 1) * vms {
                        for j in ww * vms..(ww + 1) * vms {
                            if i < lh && j < lw {
                                index.push(offset + (ti * lh + i) * lw + j);
                                count += 1;
                            }
                        }
                    }
                    cu.push(cu[cu.len() - 1] + count * unit);
                }
            }
        }
        offset += t * lh * lw;
    }
    cu.dedup();
    Ok((index, cu))
}
