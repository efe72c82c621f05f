//! ReMax (Li et al. 2023, arXiv:2310.10505): a greedy-rollout baseline, verl semantics.

use crate::advantage::AdvantageOutput;
use crate::masked::Matrix;

/// Reward-to-go of masked rewards: `Σ_{t' >= t} r_t'·m_t'` (verl's flip-cumsum-flip).
pub fn reward_to_go(token_level_rewards: &Matrix, mask: &Matrix) -> Matrix {
    token_level_rewards
        .iter()
        .zip(mask)
        .map(|(r, m)| {
            let mut out = vec![0.0; r.len()];
            let mut acc = 0.0;
            for t in (0..r.len()).rev() {
                acc += r[t] * m[t];
                out[t] = acc;
            }
            out
        })
        .collect()
}

/// verl `compute_remax_outcome_advantage` (core_algos.py @ 1dda039): returns are the masked
/// reward-to-go; advantages `G_t - b·m_t` with `b` the reward of the greedy response of the row.
pub fn remax_outcome(
    token_level_rewards: &Matrix,
    reward_baselines: &[f64],
    mask: &Matrix,
) -> AdvantageOutput {
    let returns = reward_to_go(token_level_rewards, mask);
    let advantages = returns
        .iter()
        .zip(reward_baselines)
        .zip(mask)
        .map(|((g, b), m)| g.iter().zip(m).map(|(x, mm)| x - b * mm).collect())
        .collect();
    AdvantageOutput {
        advantages,
        returns,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn baseline_subtracted_on_valid_tokens_only() {
        let out = remax_outcome(
            &vec![vec![0.0, 1.0, 9.0]],
            &[0.25],
            &vec![vec![1.0, 1.0, 0.0]],
        );
        assert_eq!(out.returns, vec![vec![1.0, 1.0, 0.0]]);
        assert_eq!(out.advantages, vec![vec![0.75, 0.75, 0.0]]);
    }
}
