//! The text side of `Qwen2VLProcessor.__call__`: each image placeholder of a prompt (`<|image_pad|>`,
//! one token as the chat template writes it) becomes as many copies as its image has merged tokens,
//! `t * h * w / merge_size²` of its `image_grid_thw`, so the vision tower's features fill them one to one.
//!
//! transformers replaces the placeholder in the text before tokenising; `<|image_pad|>` is an added special
//! token, so doing it on the token ids gives the same ids.

use crate::error::{HfError, Result};

/// How many tokens an image of grid `[t, h, w]` fills after the `merge_size` x `merge_size` merger.
pub fn merged_tokens(grid: [i64; 3], merge_size: usize) -> usize {
    let unit = (merge_size * merge_size) as i64;
    (grid.iter().product::<i64>() / unit) as usize
}

/// `ids` with its `k`-th `image_token_id` repeated [`merged_tokens`]`(grids[k])` times. `row` (as the
/// caller numbers rows) is named when the number of placeholders differs from the number of images.
pub fn expand_image_placeholders(
    ids: &[i64],
    image_token_id: i64,
    grids: &[[i64; 3]],
    merge_size: usize,
    row: usize,
) -> Result<Vec<i64>> {
    let found = ids.iter().filter(|&&t| t == image_token_id).count();
    if found != grids.len() {
        return Err(HfError::ImageTokens {
            row,
            message: format!(
                "the prompt has {found} image placeholder{} but the row gives {} image{}",
                if found == 1 { "" } else { "s" },
                grids.len(),
                if grids.len() == 1 { "" } else { "s" },
            ),
        });
    }
    let extra: usize = grids
        .iter()
        .map(|&g| merged_tokens(g, merge_size).saturating_sub(1))
        .sum();
    let mut out = Vec::with_capacity(ids.len() + extra);
    let mut next = grids.iter();
    for &t in ids {
        if t == image_token_id {
            let g = *next.next().expect("counted above");
            out.extend(std::iter::repeat_n(t, merged_tokens(g, merge_size)));
        } else {
            out.push(t);
        }
    }
    Ok(out)
}
