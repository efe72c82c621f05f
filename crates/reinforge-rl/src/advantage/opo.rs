//! OPO, the length-weighted optimal baseline (Hao et al. 2025, arXiv:2505.23585), verl semantics.

use crate::advantage::AdvantageOutput;
use crate::groups::Groups;
use crate::masked::{broadcast, row_sums, Matrix};

/// verl `compute_opo_outcome_advantage` (core_algos.py @ 1dda039): baseline
/// `b_g = Σ len_i·s_i / Σ len_i` over the group (len = valid tokens; 0 for a singleton), advantage
/// `s - b_g` broadcast over the mask.
pub fn opo_outcome(token_level_rewards: &Matrix, mask: &Matrix, index: &[i64]) -> AdvantageOutput {
    let mut scores = row_sums(token_level_rewards);
    let lens = row_sums(mask);
    for rows in Groups::from_index(index).iter() {
        if rows.len() > 1 {
            let num: f64 = rows.iter().map(|&i| lens[i] * scores[i]).sum();
            let den: f64 = rows.iter().map(|&i| lens[i]).sum();
            let b = num / den;
            for &i in rows {
                scores[i] -= b;
            }
        }
    }
    AdvantageOutput::same(broadcast(&scores, mask))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longer_responses_weigh_more_in_the_baseline() {
        let r = vec![vec![1.0, 0.0, 0.0], vec![0.0, 0.0, 0.0]];
        let m = vec![vec![1.0, 0.0, 0.0], vec![1.0, 1.0, 1.0]];
        let a = opo_outcome(&r, &m, &[0, 0]).advantages;
        // b = (1·1 + 3·0)/4 = 0.25.
        assert!((a[0][0] - 0.75).abs() < 1e-12 && (a[1][2] + 0.25).abs() < 1e-12);
    }
}
