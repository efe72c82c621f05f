//! verl's group-normalised outcome estimators: GRPO (loop and vectorised), GDPO and GRPO-pass@k.

use crate::advantage::{grpo_advantages, AdvantageConfig, AdvantageOutput};
use crate::groups::Groups;
use crate::masked::{broadcast, masked_whiten, row_sums, Matrix};

/// verl `compute_grpo_outcome_advantage` (core_algos.py @ 1dda039): outcome score = row sum,
/// `(s - mean_g) / (std_g + eps)` (unbiased std; a singleton group has mean 0 and std 1), or
/// `s - mean_g` without `norm_by_std` (Dr.GRPO); broadcast over the mask. Returns equal advantages.
pub fn grpo_outcome(
    token_level_rewards: &Matrix,
    mask: &Matrix,
    index: &[i64],
    cfg: &AdvantageConfig,
) -> AdvantageOutput {
    let scores = row_sums(token_level_rewards);
    let adv = broadcast(
        &grpo_advantages(&scores, &Groups::from_index(index), cfg),
        mask,
    );
    AdvantageOutput::same(adv)
}

/// verl `compute_grpo_vectorized_outcome_advantage` (core_algos.py @ 1dda039): the same
/// statistics as [`grpo_outcome`] (`group_mean_std` also gives a singleton mean 0 and std 1), so in
/// f64 the two agree; verl computes these statistics in float32, so its numbers differ from this
/// one by about 1e-7 relative.
pub fn grpo_vectorized_outcome(
    token_level_rewards: &Matrix,
    mask: &Matrix,
    index: &[i64],
    cfg: &AdvantageConfig,
) -> AdvantageOutput {
    grpo_outcome(token_level_rewards, mask, index, cfg)
}

/// verl `compute_gdpo_outcome_advantage` (core_algos.py @ 1dda039): each reward dimension gets
/// its own GRPO normalisation, the weighted sum is whitened over the batch (`masked_whiten`) and
/// masked. `dimensions` holds one `B x T` reward matrix per dimension (verl's `config=None` path is
/// one dimension, the token-level rewards, with weight 1).
pub fn gdpo_outcome(
    dimensions: &[Matrix],
    weights: &[f64],
    mask: &Matrix,
    index: &[i64],
    cfg: &AdvantageConfig,
) -> AdvantageOutput {
    assert_eq!(
        dimensions.len(),
        weights.len(),
        "one weight per reward dimension"
    );
    let mut sum: Matrix = mask.iter().map(|r| vec![0.0; r.len()]).collect();
    for (dim, w) in dimensions.iter().zip(weights) {
        let a = grpo_outcome(dim, mask, index, cfg).advantages;
        for (sr, ar) in sum.iter_mut().zip(&a) {
            for (s, x) in sr.iter_mut().zip(ar) {
                *s += w * x;
            }
        }
    }
    let white = masked_whiten(&sum, mask);
    AdvantageOutput::same(crate::masked::hadamard(&white, mask))
}

/// verl `compute_grpo_passk_outcome_advantage` (core_algos.py @ 1dda039; Chen et al. 2025,
/// arXiv:2503.19595): only the best response of each group gets a non-zero advantage,
/// `r_max - r_second`, divided by `std_g + eps` (unbiased) when `norm_by_std`.
///
/// # Panics
/// When a group has fewer than two responses (verl raises).
pub fn grpo_passk_outcome(
    token_level_rewards: &Matrix,
    mask: &Matrix,
    index: &[i64],
    cfg: &AdvantageConfig,
) -> AdvantageOutput {
    let scores = row_sums(token_level_rewards);
    let mut adv = vec![0.0; scores.len()];
    for rows in Groups::from_index(index).iter() {
        assert!(
            rows.len() >= 2,
            "pass@k advantages need >= 2 samples per group"
        );
        // The first row holding the maximum (torch.topk's choice among ties does not matter: a
        // tie gives r_max - r_second = 0).
        let mut best = rows[0];
        for &i in rows {
            if scores[i] > scores[best] {
                best = i;
            }
        }
        let second = rows
            .iter()
            .filter(|&&i| i != best)
            .map(|&i| scores[i])
            .fold(f64::NEG_INFINITY, f64::max);
        let mut a = scores[best] - second;
        if cfg.norm_by_std {
            let n = rows.len() as f64;
            let mean = rows.iter().map(|&i| scores[i]).sum::<f64>() / n;
            let std = (rows
                .iter()
                .map(|&i| (scores[i] - mean).powi(2))
                .sum::<f64>()
                / (n - 1.0))
                .sqrt();
            a /= std + cfg.epsilon;
        }
        adv[best] = a;
    }
    AdvantageOutput::same(broadcast(&adv, mask))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passk_rewards_only_the_best_of_each_group() {
        let r = vec![vec![1.0], vec![0.0], vec![0.5], vec![2.0], vec![2.0]];
        let m = vec![vec![1.0]; 5];
        let cfg = AdvantageConfig {
            norm_by_std: false,
            epsilon: 1e-6,
            batch_std: false,
        };
        let a = grpo_passk_outcome(&r, &m, &[0, 0, 0, 1, 1], &cfg).advantages;
        assert_eq!(
            a,
            vec![vec![0.5], vec![0.0], vec![0.0], vec![0.0], vec![0.0]]
        );
    }

    #[test]
    fn singleton_group_is_scaled_score() {
        let r = vec![vec![0.7, 0.0]];
        let m = vec![vec![1.0, 0.0]];
        let cfg = AdvantageConfig::default();
        let a = grpo_vectorized_outcome(&r, &m, &[3], &cfg).advantages;
        assert_eq!(a, vec![vec![0.7 / (1.0 + 1e-6), 0.0]]);
    }
}
