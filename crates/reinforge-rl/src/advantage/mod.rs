//! Advantage estimators. The submodules reproduce verl's estimator catalogue (`core_algos.py` @
//! 1dda039) on `B x T` matrices, each returning verl's `(advantages, returns)` pair;
//! [`outcome`] is the registry that selects them by name and the one dispatch the trainer and the
//! oracle tests call; [`ragged`] adapts the trainer's rows of different lengths (GAE); [`trl`]
//! is TRL's GRPO advantage block (the `trl_grpo` estimator).

use serde::{Deserialize, Serialize};

use crate::groups::Groups;
use crate::masked::Matrix;

pub mod estimator;
pub mod gae;
pub mod gpg;
pub mod grpo;
pub mod opo;
pub mod optimal_baseline;
pub mod outcome;
pub mod ragged;
pub mod reinforce_pp;
pub mod remax;
pub mod rloo;
pub mod trl;

/// The two tensors every verl advantage estimator returns, both `B x T`.
#[derive(Debug, Clone, PartialEq)]
pub struct AdvantageOutput {
    /// The advantages the policy loss consumes.
    pub advantages: Matrix,
    /// The returns (value targets for GAE; equal to the advantages for outcome estimators).
    pub returns: Matrix,
}

impl AdvantageOutput {
    /// Outcome estimators return the advantages twice.
    pub fn same(advantages: Matrix) -> Self {
        Self {
            returns: advantages.clone(),
            advantages,
        }
    }
}

/// How GRPO normalises a reward against its group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdvantageConfig {
    /// Divide by the group's standard deviation (GRPO); `false` gives Dr.GRPO's plain
    /// mean-centring (verl `norm_adv_by_std_in_grpo`).
    pub norm_by_std: bool,
    /// Added to the std before dividing: verl uses 1e-6, TRL 1e-4.
    pub epsilon: f64,
    /// Divide by the std of the whole batch instead of the group's (TRL `scale_rewards =
    /// "batch"`: group means are still subtracted). Read by the `trl_grpo` estimator only;
    /// config validation rejects it with the others.
    #[serde(default)]
    pub batch_std: bool,
}

impl Default for AdvantageConfig {
    fn default() -> Self {
        Self {
            norm_by_std: true,
            epsilon: 1e-6,
            batch_std: false,
        }
    }
}

/// GRPO outcome advantages, one per row: `(r - mean_g) / (std_g + eps)` with the unbiased
/// std of the row's group. Matches verl `compute_grpo_outcome_advantage` (core_algos.py at
/// 1dda039): a singleton group has mean 0 and std 1, and an all-equal group gives exactly 0.
pub fn grpo_advantages(scores: &[f64], groups: &Groups, cfg: &AdvantageConfig) -> Vec<f64> {
    let mut adv = vec![0.0; scores.len()];
    for rows in groups.iter() {
        let (mean, std) = if rows.len() == 1 {
            (0.0, 1.0)
        } else {
            let n = rows.len() as f64;
            let mean = rows.iter().map(|&i| scores[i]).sum::<f64>() / n;
            let var = rows
                .iter()
                .map(|&i| (scores[i] - mean).powi(2))
                .sum::<f64>()
                / (n - 1.0);
            (mean, var.sqrt())
        };
        for &i in rows {
            let centred = scores[i] - mean;
            adv[i] = if cfg.norm_by_std {
                centred / (std + cfg.epsilon)
            } else {
                centred
            };
        }
    }
    adv
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_checked_group() {
        // Group rewards 1, 0, 0, 1: mean 0.5, unbiased std sqrt(1/3).
        let adv = grpo_advantages(
            &[1.0, 0.0, 0.0, 1.0],
            &Groups::contiguous(1, 4),
            &AdvantageConfig {
                norm_by_std: true,
                epsilon: 0.0,
                batch_std: false,
            },
        );
        let a = 0.5 / (1.0f64 / 3.0).sqrt();
        assert_eq!(adv, vec![a, -a, -a, a]);
        let dr = grpo_advantages(
            &[1.0, 0.0, 0.0, 1.0],
            &Groups::contiguous(1, 4),
            &AdvantageConfig {
                norm_by_std: false,
                epsilon: 1e-6,
                batch_std: false,
            },
        );
        assert_eq!(dr, vec![0.5, -0.5, -0.5, 0.5]);
    }

    #[test]
    fn all_equal_groups_give_exactly_zero() {
        let adv = grpo_advantages(
            &[1.0, 1.0, 0.0, 0.0],
            &Groups::contiguous(2, 2),
            &AdvantageConfig::default(),
        );
        assert!(adv.iter().all(|&a| a == 0.0));
    }

    #[test]
    fn singleton_group_is_scaled_score() {
        let adv = grpo_advantages(
            &[0.5],
            &Groups::contiguous(1, 1),
            &AdvantageConfig::default(),
        );
        assert_eq!(adv, vec![0.5 / (1.0 + 1e-6)]);
    }
}
