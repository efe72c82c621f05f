//! Rows with images on a vision-language checkpoint, as `reinforge score`, `reinforge generate` and
//! `reinforge train-sft` read them: the row's image files processed (`preprocessor_config.json`), the
//! rendered text's `<|image_pad|>` placeholders expanded to each image's merged-token count (what
//! `Qwen2VLProcessor.__call__` does to the text), and the patches as the model's [`Image`]s.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use reinforge_hf::vision::{expand_image_placeholders, merged_tokens, ImageProcessor};
use reinforge_tasks::Prompt;
use reinforge_torch::model::images::Image;
use reinforge_torch::tch::Tensor;

use crate::loaded::{LoadedModel, PromptStyle};

/// One prompt ready for the model: the rendered text, its ids (placeholders expanded) and its images.
pub struct EncodedPrompt {
    pub text: String,
    pub ids: Vec<i64>,
    pub images: Vec<Image>,
}

/// What turning a row's image files into the model's input needs: the checkpoint's image processor
/// and its placeholder token.
#[derive(Clone, Copy)]
pub struct ImageReader<'a> {
    processor: &'a ImageProcessor,
    image_token: i64,
}

impl ImageReader<'_> {
    /// The placeholder token (`image_token_id`).
    pub fn image_token(&self) -> i64 {
        self.image_token
    }

    /// The row's image files processed, in order. Errors name `source` (the data file), the
    /// 1-based `row` and the image file (missing, corrupt, above the pixel cap).
    pub fn load(&self, images: &[PathBuf], (source, row): (&str, usize)) -> Result<Vec<Image>> {
        let dim = self.processor.patch_dim() as i64;
        images
            .iter()
            .map(|path| {
                let p = self
                    .processor
                    .process_file(path)
                    .with_context(|| format!("{source}: row {row}"))?;
                Ok(Image {
                    pixels: Tensor::from_slice(&p.pixel_values).view([-1, dim]),
                    grid: p.grid_thw,
                })
            })
            .collect()
    }

    /// `ids` with the `k`-th placeholder repeated as many times as `images[k]` has merged tokens;
    /// a count of placeholders other than the images' is an error naming `source` and `row`.
    pub fn expand(
        &self,
        ids: &[i64],
        images: &[Image],
        (source, row): (&str, usize),
    ) -> Result<Vec<i64>> {
        let grids: Vec<[i64; 3]> = images.iter().map(|i| i.grid).collect();
        let merge = self.processor.config.merge_size;
        expand_image_placeholders(ids, self.image_token, &grids, merge, row)
            .with_context(|| source.to_string())
    }

    /// [`Self::expand`] of a row with a per-token mask (`labels[k]`: whether token `k` is
    /// trained on): each copy of a placeholder keeps the placeholder's label, so image tokens are
    /// targets exactly when the text around them is (TRL's vision-language collator masks only
    /// padding and the prompt, never the image tokens by themselves).
    pub fn expand_labeled(
        &self,
        (ids, labels): (&[i64], &[bool]),
        images: &[Image],
        at: (&str, usize),
    ) -> Result<(Vec<i64>, Vec<bool>)> {
        let expanded = self.expand(ids, images, at)?;
        let merge = self.processor.config.merge_size;
        let mut grids = images.iter().map(|i| i.grid);
        let mut out = Vec::with_capacity(expanded.len());
        for (&t, &l) in ids.iter().zip(labels) {
            let copies = if t == self.image_token {
                merged_tokens(grids.next().expect("counted by expand"), merge)
            } else {
                1
            };
            out.extend(std::iter::repeat_n(l, copies));
        }
        Ok((expanded, out))
    }
}

impl LoadedModel {
    /// Whether the model reads images (a vision tower and an image processor).
    pub fn takes_images(&self) -> bool {
        self.images.is_some()
    }

    /// The reader of rows' images, for a model that takes them.
    pub fn image_reader(&self) -> Result<Option<ImageReader<'_>>> {
        let Some(processor) = &self.images else {
            return Ok(None);
        };
        let image_token = self
            .policy
            .model
            .config()
            .image_token_id
            .context("the vision-language config has no image_token_id")?;
        Ok(Some(ImageReader {
            processor,
            image_token,
        }))
    }

    /// Renders and tokenises `prompt`, with `images` (files, in the order of its image parts)
    /// processed and its placeholders expanded. Errors name `source` (the data file), the 1-based
    /// `row` and the image file: images for a text-only model, a missing, corrupt or too large
    /// image, placeholders that do not match the images.
    pub fn encode_with_images(
        &self,
        prompt: &Prompt,
        images: &[PathBuf],
        style: &PromptStyle,
        (source, row): (&str, usize),
    ) -> Result<EncodedPrompt> {
        let reader = self.image_reader()?;
        if reader.is_none() {
            refuse_text_only(images, (source, row))?;
        }
        let (text, ids) = self
            .encode_prompt(prompt, style)
            .with_context(|| format!("{source}: row {row}"))?;
        let Some(reader) = reader else {
            return Ok(EncodedPrompt {
                text,
                ids,
                images: Vec::new(),
            });
        };
        let images = reader.load(images, (source, row))?;
        let ids = reader.expand(&ids, &images, (source, row))?;
        Ok(EncodedPrompt { text, ids, images })
    }
}

/// An error when a row gives images to a text-only model.
pub fn refuse_text_only(images: &[PathBuf], (source, row): (&str, usize)) -> Result<()> {
    if let Some(first) = images.first() {
        bail!(
            "{source}: row {row}: gives {} image{} ({}) but the model is text-only (no vision tower or no preprocessor_config.json)",
            images.len(),
            if images.len() == 1 { "" } else { "s" },
            first.display()
        );
    }
    Ok(())
}
