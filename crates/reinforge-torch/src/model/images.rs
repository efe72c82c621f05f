//! The images of one forward pass: pixel values, their layout for the tower, and the check
//! that each row's image-placeholder tokens are exactly as many as its images' merged
//! patches. A mismatch is an error naming the row (transformers raises "Image features and
//! image tokens do not match"; a silent shift would put one image's features on another's
//! tokens), so the forward pass itself never meets one.

use anyhow::{bail, ensure, Result};
use tch::{Kind, Tensor};

use reinforge_hf::vision::{rope_index, TokenRow};

use crate::model::config::ModelConfig;
use crate::model::vision::tower::VisionLayout;

/// One processed image: its patches `[n, patch_dim]` (float32, the processor's order) and
/// grid `[t, h, w]` in patches (`image_grid_thw`).
#[derive(Debug)]
pub struct Image {
    pub pixels: Tensor,
    pub grid: [i64; 3],
}

impl Clone for Image {
    /// A handle on the same patches (tensors are reference-counted; nothing is copied).
    fn clone(&self) -> Self {
        Self {
            pixels: self.pixels.shallow_clone(),
            grid: self.grid,
        }
    }
}

/// Each row's processed images, read by several threads (an environment's prompt images, drawn
/// by the generator thread while the trainer steps). tch marks every tensor `!Sync` because
/// it cannot know one is read-only; these are never written after construction, and only
/// handed out as new handles.
pub struct SharedImages(Vec<Vec<Image>>);

// SAFETY: the tensors are only read (`row` makes new handles; libtorch's reference counts are
// atomic), never written after `new`; tch tensors are themselves `Send`.
unsafe impl Sync for SharedImages {}

impl SharedImages {
    pub fn new(rows: Vec<Vec<Image>>) -> Self {
        Self(rows)
    }

    /// Handles on row `i`'s images (nothing copied).
    pub fn row(&self, i: usize) -> Vec<Image> {
        self.0[i].clone()
    }

    /// Whether no row has an image.
    pub fn is_text_only(&self) -> bool {
        self.0.iter().all(Vec::is_empty)
    }
}

/// Images for [`crate::model::transformer::ForwardInput::images`]. Build with
/// [`VisionBatch::new`] (or [`Self::new`] from a layout of one's own).
#[derive(Debug)]
pub struct ImageInput {
    /// Flattened patches `[N, patch_dim]` of every image, concatenated in row order.
    pub(crate) pixels: Tensor,
    pub(crate) layout: VisionLayout,
}

/// What a forward pass over a vision-language batch reads besides its tokens: the images and
/// the M-RoPE positions their grids imply.
pub struct VisionBatch {
    pub images: ImageInput,
    /// `[3, B, T]` (int64): `get_rope_index`'s temporal, height and width positions.
    pub positions: Tensor,
    /// Per row, what decoding adds to a text position (`rope_deltas`: the prompt's largest
    /// position + 1 - its length).
    pub rope_deltas: Vec<i64>,
}

impl VisionBatch {
    /// The batch of token rows `ids` `[B, T]` under `mask` (left or right padded) whose
    /// placeholders hold the processed images `pixels` `[N, patch_dim]` with `grids`
    /// (`image_grid_thw`, all rows' images in order). Errors name the row whose
    /// placeholders do not match its images.
    pub fn new(
        cfg: &ModelConfig,
        ids: &Tensor,
        mask: &Tensor,
        pixels: Tensor,
        grids: &[[i64; 3]],
    ) -> Result<Self> {
        let (Some(vision), Some(image_token)) = (&cfg.vision, cfg.image_token_id) else {
            bail!(
                "images given to {}, which has no vision tower",
                cfg.model_type
            );
        };
        let (b, t) = ids.size2()?;
        let flat_ids = Vec::<i64>::try_from(ids.flatten(0, 1).to_kind(Kind::Int64))?;
        let flat_mask = Vec::<i64>::try_from(mask.flatten(0, 1).to_kind(Kind::Int64))?;
        let row = |r: usize| {
            let span = r * t as usize..(r + 1) * t as usize;
            TokenRow {
                input_ids: &flat_ids[span.clone()],
                attention_mask: &flat_mask[span],
            }
        };
        let rows: Vec<TokenRow> = (0..b as usize).map(row).collect();
        let merge = vision.spatial_merge_size as i64;
        let index = rope_index(&rows, image_token, grids, merge)?;
        let image_rows = image_rows(&rows, image_token);
        let layout = VisionLayout::from_grids(vision, grids, ids.device())?;
        let images = ImageInput::new(cfg, ids, pixels, layout, &image_rows)?;
        let positions = Tensor::from_slice(&index.position_ids)
            .view([3, b, t])
            .to_device(ids.device());
        Ok(Self {
            images,
            positions,
            rope_deltas: index.rope_deltas,
        })
    }
}

impl VisionBatch {
    /// [`Self::new`] for rows whose images are given per row (`images[r]` in placeholder order).
    pub fn of_rows(
        cfg: &ModelConfig,
        ids: &Tensor,
        mask: &Tensor,
        images: &[Vec<Image>],
    ) -> Result<Self> {
        let all: Vec<&Image> = images.iter().flatten().collect();
        let grids: Vec<[i64; 3]> = all.iter().map(|i| i.grid).collect();
        let patch_dim = cfg.vision.as_ref().map_or(1, |v| v.patch_dim()) as i64;
        let pixels = match all.as_slice() {
            [] => Tensor::zeros([0, patch_dim], (Kind::Float, ids.device())),
            _ => Tensor::cat(&all.iter().map(|i| &i.pixels).collect::<Vec<_>>(), 0)
                .to_device(ids.device()),
        };
        Self::new(cfg, ids, mask, pixels, &grids)
    }
}

/// The row of each image: each maximal run of placeholders is one image, rows in order (as
/// `rope_index` assigns the grids).
fn image_rows(rows: &[TokenRow], image_token: i64) -> Vec<usize> {
    let mut out = Vec::new();
    for (r, row) in rows.iter().enumerate() {
        let mut inside = false;
        for (&id, &m) in row.input_ids.iter().zip(row.attention_mask) {
            let image = id == image_token && m != 0;
            if image && !inside {
                out.push(r);
            }
            inside = image;
        }
    }
    out
}

impl ImageInput {
    /// Checks `pixels` and `layout` against the token rows `ids` `[B, T]` of a
    /// vision-language model configured by `cfg`: image `i` (patches
    /// `cu_seqlens[i]..cu_seqlens[i + 1]`) belongs to row `rows[i]`, rows in non-decreasing
    /// order (the placeholders are filled row by row, in order), and every row holds as many
    /// `image_token_id` tokens as its images have merged patches.
    pub fn new(
        cfg: &ModelConfig,
        ids: &Tensor,
        pixels: Tensor,
        layout: VisionLayout,
        rows: &[usize],
    ) -> Result<Self> {
        let (Some(vision), Some(image_token)) = (&cfg.vision, cfg.image_token_id) else {
            bail!(
                "images given to {}, which has no vision tower",
                cfg.model_type
            );
        };
        let cu = &layout.cu_seqlens;
        ensure!(
            cu.len() == rows.len() + 1 && cu.first() == Some(&0),
            "{} images but {} image boundaries",
            rows.len(),
            cu.len().saturating_sub(1)
        );
        ensure!(
            rows.windows(2).all(|w| w[0] <= w[1]),
            "images must be given in row order"
        );
        let patches = *cu.last().unwrap_or(&0);
        let dims = pixels.size();
        ensure!(
            dims.len() == 2 && dims[0] == patches && dims[1] == vision.patch_dim() as i64,
            "pixel values have shape {dims:?}, expected [{patches}, {}]",
            vision.patch_dim()
        );
        let unit = (vision.spatial_merge_size * vision.spatial_merge_size) as i64;
        let b = ids.size()[0] as usize;
        let mut features = vec![0i64; b];
        for (i, &row) in rows.iter().enumerate() {
            let n = cu[i + 1] - cu[i];
            ensure!(
                row < b && n > 0 && n % unit == 0,
                "image {i}: row {row} of {b}, {n} patches (a positive multiple of {unit} needed)"
            );
            features[row] += n / unit;
        }
        let placeholders =
            Vec::<i64>::try_from(ids.eq(image_token).sum_dim_intlist(1, false, Kind::Int64))?;
        for (row, (&want, &have)) in features.iter().zip(&placeholders).enumerate() {
            if want != have {
                bail!(
                    "row {row}: {have} image tokens (id {image_token}) but its images give {want} \
                     features; the prompt and the images do not match"
                );
            }
        }
        Ok(Self { pixels, layout })
    }
}
