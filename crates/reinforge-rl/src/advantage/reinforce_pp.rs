//! REINFORCE++ (Hu 2025, arXiv:2501.03262) and its group-baseline variant, verl semantics.

use crate::advantage::AdvantageOutput;
use crate::groups::Groups;
use crate::masked::{broadcast, hadamard, masked_whiten, row_sums, Matrix};

/// verl `compute_reinforce_plus_plus_outcome_advantage` (core_algos.py @ 1dda039): discounted
/// reward-to-go `G_t = r_t + γ·G_{t+1}` over valid tokens: at a masked position (an observation
/// hole of a multi-turn response, or padding) the return is 0 and the running return is carried
/// through unchanged. Advantages are the returns whitened over the batch, then masked; returns are
/// not whitened.
pub fn reinforce_pp_outcome(
    token_level_rewards: &Matrix,
    mask: &Matrix,
    gamma: f64,
) -> AdvantageOutput {
    let returns: Matrix = token_level_rewards
        .iter()
        .zip(mask)
        .map(|(r, m)| {
            let mut out = vec![0.0; r.len()];
            let mut running = 0.0;
            for t in (0..r.len()).rev() {
                let this = r[t] + gamma * running;
                out[t] = this * m[t];
                running = this * m[t] + (1.0 - m[t]) * running;
            }
            out
        })
        .collect();
    let advantages = hadamard(&masked_whiten(&returns, mask), mask);
    AdvantageOutput {
        advantages,
        returns,
    }
}

/// verl `compute_reinforce_plus_plus_baseline_outcome_advantage` (core_algos.py @ 1dda039):
/// `s - mean_g` (a singleton's baseline is 0), broadcast over the mask, whitened over the batch and
/// masked.
pub fn reinforce_pp_baseline_outcome(
    token_level_rewards: &Matrix,
    mask: &Matrix,
    index: &[i64],
) -> AdvantageOutput {
    let mut scores = row_sums(token_level_rewards);
    for rows in Groups::from_index(index).iter() {
        if rows.len() > 1 {
            let mean = rows.iter().map(|&i| scores[i]).sum::<f64>() / rows.len() as f64;
            for &i in rows {
                scores[i] -= mean;
            }
        }
    }
    let tiled = broadcast(&scores, mask);
    AdvantageOutput::same(hadamard(&masked_whiten(&tiled, mask), mask))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn returns_skip_masked_positions() {
        let r = vec![vec![0.0, 9.0, 1.0, 0.0]];
        let m = vec![vec![1.0, 0.0, 1.0, 0.0]];
        let out = reinforce_pp_outcome(&r, &m, 0.5);
        // t=3 padding: 0; t=2: 1; t=1 hole: 0, running return 1 carried; t=0: 0 + 0.5·1.
        assert_eq!(out.returns, vec![vec![0.5, 0.0, 1.0, 0.0]]);
        assert_eq!(out.advantages[0][1], 0.0);
    }
}
