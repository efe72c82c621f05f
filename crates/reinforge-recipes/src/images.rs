//! Prompts with images on a vision-language checkpoint, as `reinforge score` and `reinforge generate`
//! read them: the row's image files processed (`preprocessor_config.json`), the rendered prompt's
//! `<|image_pad|>` placeholders expanded to each image's merged-token count (what
//! `Qwen2VLProcessor.__call__` does to the text), and the patches as the model's [`Image`]s.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use reinforge_hf::vision::expand_image_placeholders;
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

impl LoadedModel {
    /// Whether the model reads images (a vision tower and an image processor).
    pub fn takes_images(&self) -> bool {
        self.images.is_some()
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
        let Some(processor) = &self.images else {
            if let Some(first) = images.first() {
                bail!(
                    "{source}: row {row}: gives {} image{} ({}) but the model is text-only (no vision tower or no preprocessor_config.json)",
                    images.len(),
                    if images.len() == 1 { "" } else { "s" },
                    first.display()
                );
            }
            let (text, ids) = self
                .encode_prompt(prompt, style)
                .with_context(|| format!("{source}: row {row}"))?;
            return Ok(EncodedPrompt {
                text,
                ids,
                images: Vec::new(),
            });
        };
        let (text, ids) = self
            .encode_prompt(prompt, style)
            .with_context(|| format!("{source}: row {row}"))?;
        let cfg = self.policy.model.config();
        let image_token = cfg
            .image_token_id
            .context("the vision-language config has no image_token_id")?;
        let dim = processor.patch_dim() as i64;
        let mut processed = Vec::with_capacity(images.len());
        for path in images {
            let p = processor
                .process_file(path)
                .with_context(|| format!("{source}: row {row}"))?;
            processed.push(Image {
                pixels: Tensor::from_slice(&p.pixel_values).view([-1, dim]),
                grid: p.grid_thw,
            });
        }
        let grids: Vec<[i64; 3]> = processed.iter().map(|i| i.grid).collect();
        let ids =
            expand_image_placeholders(&ids, image_token, &grids, processor.config.merge_size, row)
                .with_context(|| source.to_string())?;
        Ok(EncodedPrompt {
            text,
            ids,
            images: processed,
        })
    }
}
