//! Packing prompts and completions into the tensors of one training forward pass.

use tch::{Device, Kind, Tensor};

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
    /// Real tokens (prompt + completion) per row.
    lens: Vec<usize>,
    width: usize,
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
            positions: crate::model::positions_from_mask(&attn),
            attn,
            loss_mask: Tensor::from_slice(&loss)
                .view([n as i64, width as i64 - 1])
                .to_device(device),
            prompt_lens: prompts.iter().map(|p| p.len()).collect(),
            lens: prompts
                .iter()
                .zip(completions)
                .map(|(p, c)| p.len() + c.len())
                .collect(),
            width,
        }
    }

    /// The model's input for a forward pass over these rows.
    pub fn input(&self) -> crate::model::ForwardInput<'_> {
        crate::model::ForwardInput {
            ids: &self.ids,
            positions: &self.positions,
            key_mask: &self.attn,
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

    /// The rows `idx` as a new batch (for mini-batches), trimmed to the longest selected row:
    /// padding columns that no selected row uses are never computed.
    pub fn select(&self, idx: &[i64]) -> Self {
        let t = Tensor::from_slice(idx).to_device(self.ids.device());
        let lens: Vec<usize> = idx.iter().map(|&i| self.lens[i as usize]).collect();
        let width = lens.iter().copied().max().unwrap_or(2).max(2);
        let w = width as i64;
        Self {
            ids: self.ids.narrow(1, 0, w).index_select(0, &t),
            attn: self.attn.narrow(1, 0, w).index_select(0, &t),
            positions: self.positions.narrow(1, 0, w).index_select(0, &t),
            loss_mask: self.loss_mask.narrow(1, 0, w - 1).index_select(0, &t),
            prompt_lens: idx.iter().map(|&i| self.prompt_lens[i as usize]).collect(),
            lens,
            width,
        }
    }
}
