//! GPG, group policy gradient (Chu et al. 2025, arXiv:2504.02546), verl semantics.

use crate::advantage::AdvantageOutput;
use crate::groups::Groups;
use crate::masked::{broadcast, row_sums, Matrix};

/// verl `compute_gpg_outcome_advantage` (core_algos.py @ 1dda039): `α·(s - mean_g)/f_norm` with
/// `α = B / max(#non-zero scores, 1)` computed from the batch (the `alpha` argument of verl is
/// overwritten); a singleton's mean is 0.
pub fn gpg_outcome(
    token_level_rewards: &Matrix,
    mask: &Matrix,
    index: &[i64],
    f_norm: f64,
) -> AdvantageOutput {
    let scores = row_sums(token_level_rewards);
    let nonzero = scores.iter().filter(|&&s| s != 0.0).count().max(1);
    let alpha = scores.len() as f64 / nonzero as f64;
    let mut adv = vec![0.0; scores.len()];
    for rows in Groups::from_index(index).iter() {
        let mean = if rows.len() > 1 {
            rows.iter().map(|&i| scores[i]).sum::<f64>() / rows.len() as f64
        } else {
            0.0
        };
        for &i in rows {
            adv[i] = alpha * (scores[i] - mean) / f_norm;
        }
    }
    AdvantageOutput::same(broadcast(&adv, mask))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alpha_rescales_by_the_fraction_of_nonzero_scores() {
        let r = vec![vec![1.0], vec![0.0], vec![0.0], vec![0.0]];
        let m = vec![vec![1.0]; 4];
        let a = gpg_outcome(&r, &m, &[0, 0, 1, 1], 1.0).advantages;
        // α = 4/1; group 0 mean 0.5.
        assert_eq!(a, vec![vec![2.0], vec![-2.0], vec![0.0], vec![0.0]]);
    }
}
