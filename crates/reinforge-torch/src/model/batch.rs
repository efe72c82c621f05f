//! Packing prompts and completions into the tensors of one training forward pass.

use tch::{Device, Kind, Tensor};

use std::collections::HashMap;

use crate::model::config::ModelConfig;
use crate::model::images::{Image, ImageInput, VisionBatch};
use crate::model::memory::Memory;
use crate::model::transformer::{ForwardInput, Segment, Transformer};

/// Rows of `prompt ++ completion`, right-padded to a common length `L`.
///
/// Target-aligned tensors (`[N, L-1]`) hold at index `j` the quantity for token `j + 1`
/// predicted from position `j`, as in `logits[:, :-1]` against `ids[:, 1:]`.
#[derive(Debug)]
pub struct SequenceBatch {
    /// Token ids `[N, L]`.
    pub ids: Tensor,
    /// Real (non-padding) tokens `[N, L]`, bool.
    pub attn: Tensor,
    /// Position ids `[N, L]`.
    pub positions: Tensor,
    /// 1.0 at target positions that are completion tokens, else 0.0: `[N, L-1]`, float.
    pub loss_mask: Tensor,
    prompt_lens: Vec<usize>,
    /// Rows with the same id have the same prompt tokens (a GRPO group's completions), which
    /// [`Self::packed_sharing_prompts`] packs once.
    prompt_groups: Vec<usize>,
    /// Real tokens (prompt + completion) per row.
    lens: Vec<usize>,
    width: usize,
    /// A vision-language batch's images ([`Self::with_images`]).
    vision: Option<RowImages>,
}

/// The images of a [`SequenceBatch`]'s rows, kept per row so a selection of rows keeps its own.
#[derive(Debug)]
struct RowImages {
    cfg: ModelConfig,
    rows: Vec<Vec<Image>>,
    input: ImageInput,
}

impl SequenceBatch {
    /// Packs `prompts[i] ++ completions[i]`; padding uses `pad_id`.
    pub fn new(prompts: &[&[i64]], completions: &[&[i64]], pad_id: i64, device: Device) -> Self {
        assert_eq!(
            prompts.len(),
            completions.len(),
            "one completion per prompt"
        );
        let n = prompts.len();
        let width = prompts
            .iter()
            .zip(completions)
            .map(|(p, c)| p.len() + c.len())
            .max()
            .unwrap_or(1)
            .max(2);
        let mut ids = vec![pad_id; n * width];
        let mut attn = vec![false; n * width];
        let mut loss = vec![0f32; n * (width - 1)];
        for (i, (p, c)) in prompts.iter().zip(completions).enumerate() {
            let row = &mut ids[i * width..(i + 1) * width];
            row[..p.len()].copy_from_slice(p);
            row[p.len()..p.len() + c.len()].copy_from_slice(c);
            attn[i * width..i * width + p.len() + c.len()].fill(true);
            if !c.is_empty() {
                let start = i * (width - 1) + p.len().max(1) - 1;
                let len = if p.is_empty() { c.len() - 1 } else { c.len() };
                loss[start..start + len].fill(1.0);
            }
        }
        let shape = [n as i64, width as i64];
        let attn = Tensor::from_slice(&attn).view(shape).to_device(device);
        Self {
            ids: Tensor::from_slice(&ids).view(shape).to_device(device),
            positions: crate::model::transformer::positions_from_mask(&attn),
            attn,
            loss_mask: Tensor::from_slice(&loss)
                .view([n as i64, width as i64 - 1])
                .to_device(device),
            prompt_lens: prompts.iter().map(|p| p.len()).collect(),
            prompt_groups: prompt_groups(prompts),
            lens: prompts
                .iter()
                .zip(completions)
                .map(|(p, c)| p.len() + c.len())
                .collect(),
            width,
            vision: None,
        }
    }

    /// These rows with images: row `i`'s image placeholders hold `images[i]`, in order, and
    /// positions become M-RoPE's three streams. Errors name a row whose placeholders do not
    /// match its images.
    pub fn with_images(
        mut self,
        cfg: &ModelConfig,
        images: Vec<Vec<Image>>,
    ) -> anyhow::Result<Self> {
        anyhow::ensure!(
            images.len() == self.len(),
            "{} rows but images for {}",
            self.len(),
            images.len()
        );
        let batch = VisionBatch::of_rows(cfg, &self.ids, &self.attn, &images)?;
        self.positions = batch.positions;
        // Equal prompt tokens over other images are another prompt: rows share a prompt only
        // when they share its image tensors too (a group's samples).
        let storage = |r: usize| -> Vec<usize> {
            images[r]
                .iter()
                .map(|i| i.pixels.data_ptr() as usize)
                .collect()
        };
        let mut groups: HashMap<(usize, Vec<usize>), usize> = HashMap::new();
        self.prompt_groups = (0..self.len())
            .map(|r| {
                let next = groups.len();
                *groups
                    .entry((self.prompt_groups[r], storage(r)))
                    .or_insert(next)
            })
            .collect();
        self.vision = Some(RowImages {
            cfg: cfg.clone(),
            rows: images,
            input: batch.images,
        });
        Ok(self)
    }

    /// The model's input for a forward pass over these rows.
    pub fn input(&self) -> crate::model::transformer::ForwardInput<'_> {
        crate::model::transformer::ForwardInput {
            ids: &self.ids,
            positions: &self.positions,
            key_mask: &self.attn,
            segments: &[],
            images: self.vision.as_ref().map(|v| &v.input),
        }
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.prompt_lens.len()
    }

    /// Whether the batch has no rows.
    pub fn is_empty(&self) -> bool {
        self.prompt_lens.is_empty()
    }

    /// Places per-completion-token values (e.g. sampler log-probs) at their target positions,
    /// zeros elsewhere: `[N, L-1]` float.
    pub fn completion_values(&self, values: &[Vec<f32>]) -> Tensor {
        assert_eq!(values.len(), self.len());
        let w = self.width - 1;
        let mut out = vec![0f32; self.len() * w];
        for (i, (v, &p)) in values.iter().zip(&self.prompt_lens).enumerate() {
            let start = i * w + p.max(1) - 1;
            let skip = usize::from(p == 0);
            out[start..start + v.len() - skip].copy_from_slice(&v[skip..]);
        }
        Tensor::from_slice(&out)
            .view([self.len() as i64, w as i64])
            .to_device(self.ids.device())
    }

    /// Per-row values `[N]` broadcast to every target position: `[N, L-1]`.
    pub fn row_values(&self, values: &[f32]) -> Tensor {
        Tensor::from_slice(values)
            .to_device(self.ids.device())
            .view([-1, 1])
            .expand([self.len() as i64, self.width as i64 - 1], false)
            .to_kind(Kind::Float)
    }

    /// Target positions (completion tokens that are predicted) of each row: the per-row
    /// sums of `loss_mask`.
    pub fn target_counts(&self) -> Vec<usize> {
        self.prompt_lens
            .iter()
            .zip(&self.lens)
            .map(|(&p, &l)| l - p.max(1))
            .collect()
    }

    /// Real tokens (prompt + completion) of each row.
    pub fn row_lens(&self) -> &[usize] {
        &self.lens
    }

    /// Width of the target-aligned tensors, `L - 1`.
    pub fn target_width(&self) -> i64 {
        self.width as i64 - 1
    }

    /// The real tokens of the rows concatenated into one sequence ([`PackedRows`]); `None`
    /// when the rows hold no token.
    pub fn packed(&self) -> Option<PackedRows> {
        self.packed_with(false)
    }

    /// [`Self::packed`] with each distinct prompt packed once: the rows that share it (a GRPO
    /// group's completions) pack only their completion tokens, which attend to the prompt's
    /// keys. The prompt's forward and backward run once per group instead of once per row;
    /// per-token results equal the padded rows' (the same tokens, positions and visible keys).
    pub fn packed_sharing_prompts(&self) -> Option<PackedRows> {
        self.packed_with(true)
    }

    /// The rows as `memory` packs them: sharing prompts with `memory.shared_prompts`, packed
    /// with `memory.padding_free`, else `None` (padded rows).
    pub fn packed_for(&self, memory: &Memory) -> Option<PackedRows> {
        if memory.shared_prompts {
            self.packed_sharing_prompts()
        } else if memory.padding_free {
            self.packed()
        } else {
            None
        }
    }

    fn packed_with(&self, share_prompts: bool) -> Option<PackedRows> {
        let width = self.width as i64;
        // `pick`: the padded flat index of each packed token; `src`/`dst`: for every real
        // padded position, the packed token that fills it.
        let (mut pick, mut src, mut dst) = (vec![], vec![], vec![]);
        let mut segments = Vec::with_capacity(self.len());
        let mut placed: HashMap<usize, (i64, i64)> = HashMap::new();
        // Rows whose prompt tokens are another row's (their prompt images are that row's).
        let mut reuses_prompt = vec![false; self.len()];
        for (row, &len) in self.lens.iter().enumerate() {
            let (start, len) = (row as i64 * width, len as i64);
            let p = self.prompt_lens[row] as i64;
            let prompt = if share_prompts && p > 0 {
                let group = self.prompt_groups[row];
                reuses_prompt[row] = placed.contains_key(&group);
                Some(*placed.entry(group).or_insert_with(|| {
                    let at = pick.len() as i64;
                    segments.push(Segment::alone(at, p));
                    pick.extend(start..start + p);
                    (at, p)
                }))
            } else {
                None
            };
            let own = prompt.map_or(0, |(_, p)| p);
            let at = pick.len() as i64;
            if len > own {
                segments.push(Segment {
                    start: at,
                    len: len - own,
                    prefix: prompt,
                });
                pick.extend(start + own..start + len);
            }
            for j in 0..len {
                dst.push(start + j);
                src.push(match prompt {
                    Some((ps, _)) if j < own => ps + j,
                    _ => at + j - own,
                });
            }
        }
        if pick.is_empty() {
            return None;
        }
        let device = self.ids.device();
        let pick = Tensor::from_slice(&pick).to_device(device);
        let take = |t: &Tensor| t.reshape([-1]).index_select(0, &pick).unsqueeze(0);
        let ids = take(&self.ids);
        let shared = src.len() != pick.size()[0] as usize;
        let positions = match self.positions.dim() {
            // M-RoPE: each stream packed alike, `[3, 1, T]`.
            3 => self
                .positions
                .reshape([3, -1])
                .index_select(1, &pick)
                .unsqueeze(1),
            _ => take(&self.positions),
        };
        let images = self
            .vision
            .as_ref()
            .map(|v| v.packed(&ids, &self.ids, &self.prompt_lens, &reuses_prompt));
        Some(PackedRows {
            key_mask: ids.ones_like().to_kind(Kind::Bool),
            positions,
            images,
            ids,
            segments,
            src: shared.then(|| Tensor::from_slice(&src).to_device(device)),
            dst: Tensor::from_slice(&dst).to_device(device),
            shape: (self.len() as i64, width),
        })
    }

    /// Final hidden states `[N, L, H]` of the rows under `model`: from the padded rows, or
    /// with `padding_free` from the packed rows put back in place (zeros at padding).
    pub fn hidden(&self, model: &Transformer, padding_free: bool) -> Tensor {
        let memory = Memory {
            padding_free,
            ..Memory::default()
        };
        self.hidden_for(model, &memory)
    }

    /// Final hidden states `[N, L, H]` of the rows under `model`, packed as `memory` says
    /// ([`Self::packed_for`]) and put back in place (zeros at padding).
    pub fn hidden_for(&self, model: &Transformer, memory: &Memory) -> Tensor {
        match self.packed_for(memory) {
            Some(packed) => packed.unpack(&model.hidden(&packed.input(), None)),
            None => model.hidden(&self.input(), None),
        }
    }

    /// `f`'s target-aligned results (`[rows, w]` for a micro-batch of target width `w`) over
    /// the micro-batches of `memory`, put back in place in `[N, L-1]` tensors, zeros beyond
    /// each micro-batch's width: the passes before an update, without gradient.
    pub fn in_microbatches(
        &self,
        memory: &Memory,
        mut f: impl FnMut(&SequenceBatch) -> Vec<Tensor>,
    ) -> Vec<Tensor> {
        let rows: Vec<i64> = (0..self.len() as i64).collect();
        let micro = memory.microbatches(&rows, &self.lens);
        if micro.len() <= 1 {
            return f(self);
        }
        let shape = [self.len() as i64, self.target_width()];
        let mut out: Vec<Tensor> = vec![];
        for mb in micro {
            let sub = self.select(&mb);
            let parts = f(&sub);
            if out.is_empty() {
                out = parts
                    .iter()
                    .map(|p| Tensor::zeros(shape, (p.kind(), p.device())))
                    .collect();
            }
            let idx = Tensor::from_slice(&mb).to_device(self.ids.device());
            for (whole, part) in out.iter_mut().zip(&parts) {
                let _ = whole
                    .narrow(1, 0, sub.target_width())
                    .index_copy_(0, &idx, part);
            }
        }
        out
    }

    /// The rows `idx` as a new batch (for mini-batches), trimmed to the longest selected row:
    /// padding columns that no selected row uses are never computed.
    pub fn select(&self, idx: &[i64]) -> Self {
        let t = Tensor::from_slice(idx).to_device(self.ids.device());
        let lens: Vec<usize> = idx.iter().map(|&i| self.lens[i as usize]).collect();
        let width = lens.iter().copied().max().unwrap_or(2).max(2);
        let w = width as i64;
        let ids = self.ids.narrow(1, 0, w).index_select(0, &t);
        let attn = self.attn.narrow(1, 0, w).index_select(0, &t);
        let vision = self.vision.as_ref().map(|v| {
            let rows: Vec<Vec<Image>> = idx.iter().map(|&i| v.rows[i as usize].clone()).collect();
            let batch = VisionBatch::of_rows(&v.cfg, &ids, &attn, &rows)
                .expect("a selection of rows that matched their images still matches them");
            (
                batch.positions,
                RowImages {
                    cfg: v.cfg.clone(),
                    rows,
                    input: batch.images,
                },
            )
        });
        let positions = match &vision {
            Some((p, _)) => p.shallow_clone(),
            None => self.positions.narrow(1, 0, w).index_select(0, &t),
        };
        Self {
            vision: vision.map(|(_, v)| v),
            ids,
            attn,
            positions,
            loss_mask: self.loss_mask.narrow(1, 0, w - 1).index_select(0, &t),
            prompt_lens: idx.iter().map(|&i| self.prompt_lens[i as usize]).collect(),
            prompt_groups: idx
                .iter()
                .map(|&i| self.prompt_groups[i as usize])
                .collect(),
            lens,
            width,
        }
    }
}

/// The rows of a [`SequenceBatch`] without padding (TRL's `padding_free`, verl's
/// `use_remove_padding`): their real tokens concatenated into one sequence `[1, T]`, each row
/// a segment with its own positions `0..len` that attends only to itself (or a shared prompt
/// packed once and the completions after it, [`SequenceBatch::packed_sharing_prompts`]).
/// Per-token results equal the padded rows'; no pad token is computed.
#[derive(Debug)]
pub struct PackedRows {
    ids: Tensor,
    positions: Tensor,
    /// The images of the packed tokens, in order (a shared prompt's once).
    images: Option<ImageInput>,
    key_mask: Tensor,
    segments: Vec<Segment>,
    /// For each real position of the padded layout (in `dst` order), the packed token that
    /// fills it; `None` when that is every packed token once, in order (no shared prompt).
    src: Option<Tensor>,
    /// Flat index `row * L + j` in the padded `[N, L]` layout of each real position.
    dst: Tensor,
    /// `(N, L)` of the padded rows.
    shape: (i64, i64),
}

impl PackedRows {
    /// The model's input for a forward pass over the packed sequence.
    pub fn input(&self) -> ForwardInput<'_> {
        ForwardInput {
            ids: &self.ids,
            positions: &self.positions,
            key_mask: &self.key_mask,
            segments: &self.segments,
            images: self.images.as_ref(),
        }
    }

    /// Per-token results `[1, T, H]` of the packed sequence in the padded layout `[N, L, H]`,
    /// zeros at padding (differentiable: a shared prompt's gradient sums over its rows).
    pub fn unpack(&self, packed: &Tensor) -> Tensor {
        let (n, l) = self.shape;
        let h = packed.size()[2];
        let tokens = packed.squeeze_dim(0);
        let tokens = match &self.src {
            Some(src) => tokens.index_select(0, src),
            None => tokens,
        };
        Tensor::zeros([n * l, h], (packed.kind(), packed.device()))
            .index_copy(0, &self.dst, &tokens)
            .view([n, l, h])
    }

    /// Tokens in the packed sequence.
    pub fn token_count(&self) -> i64 {
        self.ids.size()[1]
    }
}

impl RowImages {
    /// The images of a packed sequence `packed_ids` `[1, T]` of the padded rows `ids`: every
    /// row's, in order, but for the rows in `reuses_prompt` the images inside their
    /// `prompt_lens` tokens, which the row whose prompt was packed already brings.
    fn packed(
        &self,
        packed_ids: &Tensor,
        ids: &Tensor,
        prompt_lens: &[usize],
        reuses_prompt: &[bool],
    ) -> ImageInput {
        let image_token = self.cfg.image_token_id.expect("a vision-language config");
        let mut kept: Vec<Image> = Vec::new();
        for (row, images) in self.rows.iter().enumerate() {
            let starts = run_starts(&ids.get(row as i64), image_token);
            for (image, &start) in images.iter().zip(&starts) {
                if !(reuses_prompt[row] && start < prompt_lens[row] as i64) {
                    kept.push(image.clone());
                }
            }
        }
        let batch = VisionBatch::of_rows(&self.cfg, packed_ids, &packed_ids.ones_like(), &[kept])
            .expect("packing keeps each image with its placeholders");
        batch.images
    }
}

/// Where each maximal run of `token` starts in the row `ids` `[L]`.
fn run_starts(ids: &Tensor, token: i64) -> Vec<i64> {
    let row = Vec::<i64>::try_from(ids.to_kind(Kind::Int64)).unwrap_or_default();
    (0..row.len())
        .filter(|&j| row[j] == token && (j == 0 || row[j - 1] != token))
        .map(|j| j as i64)
        .collect()
}

/// A group id per row: rows whose prompts are the same tokens get the same id.
fn prompt_groups(prompts: &[&[i64]]) -> Vec<usize> {
    let mut ids: HashMap<&[i64], usize> = HashMap::new();
    prompts
        .iter()
        .map(|p| {
            let next = ids.len();
            *ids.entry(p).or_insert(next)
        })
        .collect()
}
