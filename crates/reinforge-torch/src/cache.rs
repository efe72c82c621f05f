//! Key/value cache for incremental decoding.

use tch::Tensor;

/// Per-layer keys and values `[B, H_kv, S, D]` of the positions decoded so far.
#[derive(Debug)]
pub struct KvCache {
    layers: Vec<(Tensor, Tensor)>,
    len: i64,
}

impl KvCache {
    /// An empty cache for a model of `num_layers` layers.
    pub fn new(num_layers: usize) -> Self {
        Self {
            layers: (0..num_layers)
                .map(|_| (Tensor::new(), Tensor::new()))
                .collect(),
            len: 0,
        }
    }

    /// Number of cached positions.
    pub fn len(&self) -> i64 {
        self.len
    }

    /// Whether nothing is cached yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The batch rows `idx`, in that order: finished sequences leave the batch, and a repeated
    /// index copies a row (samples sharing a prefilled prompt).
    pub fn retain_rows(&mut self, idx: &Tensor) {
        for (k, v) in &mut self.layers {
            if k.numel() > 0 {
                *k = k.index_select(0, idx);
                *v = v.index_select(0, idx);
            }
        }
    }

    pub(crate) fn layer_mut(&mut self, i: usize) -> &mut (Tensor, Tensor) {
        &mut self.layers[i]
    }

    pub(crate) fn advance(&mut self, t: i64) {
        self.len += t;
    }
}
