//! The optimal token baseline (OTB), verl semantics.

use crate::advantage::remax::reward_to_go;
use crate::advantage::AdvantageOutput;
use crate::groups::Groups;
use crate::masked::Matrix;

/// verl `compute_optimal_token_baseline_advantage` (core_algos.py @ 1dda039), without rollout
/// importance weights. Per token `w_t = 1 - 2π_t + Σπ²` (`π_t = exp(old_log_prob)`), its masked
/// cumulative sum `W_t`, and per group and position the baseline
/// `B_t = Σ_i G_it·W_it·m_it / (Σ_i W_it·m_it + eps)`; a singleton has no baseline. With
/// `handle_zero_tail`, the unique longest response of a group gets baseline 0 beyond the
/// second-longest length. Advantages `(G - B)·m`, returns the masked reward-to-go `G`.
pub fn optimal_token_baseline(
    token_level_rewards: &Matrix,
    mask: &Matrix,
    index: &[i64],
    old_log_probs: &Matrix,
    sum_pi_squared: &Matrix,
    handle_zero_tail: bool,
    epsilon: f64,
) -> AdvantageOutput {
    let returns = reward_to_go(token_level_rewards, mask);
    let w_cum: Matrix = old_log_probs
        .iter()
        .zip(sum_pi_squared)
        .zip(mask)
        .map(|((lp, sp), m)| {
            let mut acc = 0.0;
            lp.iter()
                .zip(sp)
                .zip(m)
                .map(|((l, s), mm)| {
                    acc += (1.0 - 2.0 * l.exp() + s) * mm;
                    acc
                })
                .collect()
        })
        .collect();
    let width = mask.first().map_or(0, Vec::len);
    let mut baselines: Matrix = mask.iter().map(|r| vec![0.0; r.len()]).collect();
    for rows in Groups::from_index(index).iter() {
        if rows.len() == 1 {
            continue;
        }
        for t in 0..width {
            let num: f64 = rows
                .iter()
                .map(|&i| returns[i][t] * w_cum[i][t] * mask[i][t])
                .sum();
            let den: f64 = rows.iter().map(|&i| w_cum[i][t] * mask[i][t]).sum::<f64>() + epsilon;
            for &i in rows {
                baselines[i][t] = num / den;
            }
        }
        if handle_zero_tail {
            let lens: Vec<f64> = rows.iter().map(|&i| mask[i].iter().sum()).collect();
            let mut sorted = lens.clone();
            sorted.sort_by(f64::total_cmp);
            let (max, second) = (sorted[sorted.len() - 1], sorted[sorted.len() - 2]);
            let holders: Vec<usize> = (0..rows.len()).filter(|&k| lens[k] == max).collect();
            if holders.len() == 1 && max > second {
                let row = rows[holders[0]];
                for b in baselines[row].iter_mut().skip(second as usize) {
                    *b = 0.0;
                }
            }
        }
    }
    let advantages = returns
        .iter()
        .zip(&baselines)
        .zip(mask)
        .map(|((g, b), m)| {
            g.iter()
                .zip(b)
                .zip(m)
                .map(|((x, y), mm)| (x - y) * mm)
                .collect()
        })
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
    fn equal_weights_give_the_group_mean_return() {
        // π = 0 (log-prob -inf) and Σπ² = 1 give w_t = 2 in both rows: equal W_t, so the
        // baseline is the mean return of the group at each position.
        let r = vec![vec![0.0, 1.0], vec![0.0, 3.0]];
        let m = vec![vec![1.0, 1.0]; 2];
        let lp = vec![vec![f64::NEG_INFINITY; 2]; 2];
        let sp = vec![vec![1.0; 2]; 2];
        let out = optimal_token_baseline(&r, &m, &[0, 0], &lp, &sp, true, 0.0);
        assert_eq!(out.advantages, vec![vec![-1.0, -1.0], vec![1.0, 1.0]]);
    }
}
