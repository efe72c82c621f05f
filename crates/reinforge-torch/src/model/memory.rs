//! How the training passes bound their memory (TRL's and verl's names): micro-batches under a
//! token budget (verl's `ppo_max_token_len_per_gpu` with `use_dynamic_bsz`), whose gradients
//! accumulate into the mini-batch's step, and activation checkpointing
//! ([`crate::model::activations`], TRL's `gradient_checkpointing`), and padding-free packing of a
//! pass's rows into one sequence ([`crate::model::batch::PackedRows`], TRL's `padding_free`, verl's
//! `use_remove_padding`). All three leave the result unchanged:
//! every loss is normalised by the whole mini-batch's denominators, so the micro-batches'
//! gradients sum to the mini-batch's.

use serde::{Deserialize, Serialize};

/// The memory settings of a run's forward and backward passes.
///
/// Two starting points: [`Memory::default`] is the plain path (every tool off: padded rows, one
/// pass per mini-batch), the reference the equality tests compare against; a run config's
/// absent keys take [`Memory::recommended`] (prompts shared), which gives the same results
/// with less work.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default = "Memory::recommended")]
pub struct Memory {
    /// Largest token count of one forward pass: padded (rows x longest row), or the rows'
    /// real tokens with `padding_free`; 0: no limit (one pass per mini-batch). A row longer
    /// than the budget runs alone.
    pub max_tokens_per_microbatch: usize,
    /// Recompute each decoder layer's forward in the backward pass instead of keeping its
    /// activations (keeps one hidden state per layer).
    pub gradient_checkpointing: bool,
    /// Concatenate the real tokens of a pass's rows into one sequence (per-row positions,
    /// attention within each row) instead of padding them to the longest: no pad token is
    /// computed.
    pub padding_free: bool,
    /// Pack the rows (as `padding_free`) with each distinct prompt once: the completions of
    /// one prompt (a GRPO group) attend to its keys, so the prompt's forward and backward run
    /// once per group instead of once per completion. The same tokens, positions and visible
    /// keys as the padded rows: results equal theirs. Implies packing. On in
    /// [`Memory::recommended`] (a run config's default).
    pub shared_prompts: bool,
    /// How malloc keeps freed host memory inside a phase: `reuse` (fast), `compact` (the
    /// lowest peak) or `auto` (compact when micro-batches or checkpointing are on); see
    /// [`crate::heap::HeapPolicy`]. The results are the same.
    pub heap: crate::heap::HeapPolicy,
}

impl Memory {
    /// What a run config's absent `[memory]` keys take: the plain path with each group's prompt
    /// packed once (`shared_prompts`), which computes the same results as padded rows with no
    /// pad token and each prompt once per group (docs/memory.md: 0.375x the padded update's
    /// time at TRL's benchmark size).
    pub fn recommended() -> Self {
        Self {
            shared_prompts: true,
            ..Self::default()
        }
    }

    /// The malloc policy these settings run under: `heap`, with `auto` resolved by whether
    /// the passes bound their memory (a token budget or checkpointing).
    pub fn heap_policy(&self) -> crate::heap::HeapPolicy {
        let bounded = self.max_tokens_per_microbatch > 0 || self.gradient_checkpointing;
        self.heap.resolve(bounded)
    }

    /// `rows` (indices into `lens`, the rows' token counts) split in order into micro-batches
    /// whose size stays within the budget: rows x the longest row, or with `padding_free` (or
    /// `shared_prompts`, counting each prompt per row: a bound) the sum of their lengths (verl's `use_dynamic_bsz` with `use_remove_padding`).
    pub fn microbatches(&self, rows: &[i64], lens: &[usize]) -> Vec<Vec<i64>> {
        let budget = self.max_tokens_per_microbatch;
        if budget == 0 {
            return if rows.is_empty() {
                vec![]
            } else {
                vec![rows.to_vec()]
            };
        }
        let mut out: Vec<Vec<i64>> = vec![];
        let (mut longest, mut total) = (0, 0);
        for &r in rows {
            let len = lens[r as usize];
            let size = if self.padding_free || self.shared_prompts {
                total + len
            } else {
                (out.last().map_or(0, Vec::len) + 1) * longest.max(len)
            };
            if !out.is_empty() && size <= budget {
                longest = longest.max(len);
                total += len;
                out.last_mut().expect("a micro-batch").push(r);
            } else {
                (longest, total) = (len, len);
                out.push(vec![r]);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_is_compact_exactly_when_the_run_bounds_its_memory() {
        use crate::heap::HeapPolicy;
        let plain = Memory::default();
        assert_eq!(plain.heap, HeapPolicy::Auto, "auto is the default");
        assert_eq!(plain.heap_policy(), HeapPolicy::Reuse);
        let budget = Memory {
            max_tokens_per_microbatch: 4096,
            ..plain
        };
        let ckpt = Memory {
            gradient_checkpointing: true,
            ..plain
        };
        assert_eq!(budget.heap_policy(), HeapPolicy::Compact);
        assert_eq!(ckpt.heap_policy(), HeapPolicy::Compact);
        // A named policy is kept whatever the other settings.
        let reuse = Memory {
            heap: HeapPolicy::Reuse,
            ..budget
        };
        assert_eq!(reuse.heap_policy(), HeapPolicy::Reuse);
        let compact = Memory {
            heap: HeapPolicy::Compact,
            ..plain
        };
        assert_eq!(compact.heap_policy(), HeapPolicy::Compact);
    }

    #[test]
    fn microbatches_keep_order_and_stay_within_the_padded_budget() {
        let lens = [3, 5, 2, 8, 1, 1];
        let rows: Vec<i64> = (0..6).collect();
        let m = Memory {
            max_tokens_per_microbatch: 10,
            ..Memory::default()
        };
        let mbs = m.microbatches(&rows, &lens);
        assert_eq!(mbs, vec![vec![0, 1], vec![2], vec![3], vec![4, 5]]);
        for mb in &mbs {
            let longest = mb.iter().map(|&r| lens[r as usize]).max().unwrap();
            assert!(mb.len() == 1 || mb.len() * longest <= 10, "{mb:?}");
        }
        assert_eq!(
            Memory::default().microbatches(&rows, &lens),
            vec![rows.clone()]
        );
        let tight = Memory {
            max_tokens_per_microbatch: 1,
            ..m
        };
        assert_eq!(tight.microbatches(&rows, &lens).len(), 6);
        // Padding-free: the budget counts real tokens, so 3 + 5 + 2 fit together.
        let packed = Memory {
            padding_free: true,
            ..m
        };
        let mbs = packed.microbatches(&rows, &lens);
        assert_eq!(mbs, vec![vec![0, 1, 2], vec![3, 4, 5]]);
        assert!(Memory::default().microbatches(&[], &lens).is_empty());
    }
}
