//! How the training passes bound their memory (TRL's and verl's names): micro-batches under a
//! token budget (verl's `ppo_max_token_len_per_gpu` with `use_dynamic_bsz`), whose gradients
//! accumulate into the mini-batch's step, and activation checkpointing
//! ([`crate::activations`], TRL's `gradient_checkpointing`). Both leave the result unchanged:
//! every loss is normalised by the whole mini-batch's denominators, so the micro-batches'
//! gradients sum to the mini-batch's.

use serde::{Deserialize, Serialize};

/// The memory settings of a run's forward and backward passes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Memory {
    /// Largest padded token count (rows x longest row) of one forward pass; 0: no limit
    /// (one pass per mini-batch). A row longer than the budget runs alone.
    pub max_tokens_per_microbatch: usize,
    /// Recompute each decoder layer's forward in the backward pass instead of keeping its
    /// activations (keeps one hidden state per layer).
    pub gradient_checkpointing: bool,
}

impl Memory {
    /// `rows` (indices into `lens`, the rows' token counts) split in order into micro-batches
    /// whose padded size, rows x the longest row, stays within the budget.
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
        let mut longest = 0;
        for &r in rows {
            let len = lens[r as usize];
            let fits = out
                .last()
                .is_some_and(|mb| (mb.len() + 1) * longest.max(len) <= budget);
            if fits {
                longest = longest.max(len);
                out.last_mut().expect("a micro-batch").push(r);
            } else {
                longest = len;
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
    fn microbatches_keep_order_and_stay_within_the_padded_budget() {
        let lens = [3, 5, 2, 8, 1, 1];
        let rows: Vec<i64> = (0..6).collect();
        let m = Memory {
            max_tokens_per_microbatch: 10,
            gradient_checkpointing: false,
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
        assert!(Memory::default().microbatches(&[], &lens).is_empty());
    }
}
