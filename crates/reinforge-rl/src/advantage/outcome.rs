//! The trainer's entry point to the estimators: outcome scores (one per response) in, per-row
//! or per-token advantages out, by verl's `algorithm.adv_estimator` name.

use std::str::FromStr;

use crate::advantage::{grpo_advantages, reinforce_pp, rloo, AdvantageConfig};
use crate::groups::Groups;
use crate::masked::Matrix;

/// The estimators the trainer can select.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Estimator {
    /// verl `grpo` (`compute_grpo_outcome_advantage`), std normalisation per [`AdvantageConfig`].
    Grpo,
    /// Dr.GRPO: verl `grpo` with `norm_adv_by_std_in_grpo=False` (mean-centring only).
    DrGrpo,
    /// verl `rloo` (`compute_rloo_outcome_advantage`): leave-one-out baseline.
    Rloo,
    /// verl `reinforce_plus_plus`: returns with γ = 1, whitened over the batch's tokens.
    ReinforcePp,
    /// verl `reinforce_plus_plus_baseline`: group mean subtracted, whitened over the batch.
    ReinforcePpBaseline,
}

impl FromStr for Estimator {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "grpo" => Self::Grpo,
            "dr_grpo" | "grpo-no-std" => Self::DrGrpo,
            "rloo" => Self::Rloo,
            "reinforce_pp" => Self::ReinforcePp,
            "reinforce_pp_baseline" => Self::ReinforcePpBaseline,
            other => {
                return Err(format!(
                    "invalid advantage_estimator: {other} (grpo, dr_grpo, rloo, reinforce_pp, reinforce_pp_baseline)"
                ))
            }
        })
    }
}

/// Advantages of a batch: one per row, and for token-level estimators one per completion token.
#[derive(Debug, Clone, PartialEq)]
pub struct Advantages {
    /// The row's advantage; for token-level estimators its largest |advantage| (zero exactly
    /// when every token's advantage is zero).
    pub per_row: Vec<f64>,
    /// `per_token[i][t]` for the `lens[i]` completion tokens of row `i` (REINFORCE++ family).
    pub per_token: Option<Matrix>,
}

/// Advantages of responses with outcome `scores` and completion lengths `lens` (the score is
/// the reward of the last token, as verl's reward managers place it).
pub fn outcome_advantages(
    estimator: Estimator,
    scores: &[f64],
    lens: &[usize],
    groups: &Groups,
    cfg: &AdvantageConfig,
) -> Advantages {
    let row = |per_row| Advantages {
        per_row,
        per_token: None,
    };
    match estimator {
        Estimator::Grpo => row(grpo_advantages(scores, groups, cfg)),
        Estimator::DrGrpo => {
            let no_std = AdvantageConfig {
                norm_by_std: false,
                ..cfg.clone()
            };
            row(grpo_advantages(scores, groups, &no_std))
        }
        Estimator::Rloo => {
            let ones: Matrix = scores.iter().map(|_| vec![1.0]).collect();
            let r: Matrix = scores.iter().map(|&s| vec![s]).collect();
            let out = rloo::rloo_outcome(&r, &ones, &index_of(groups, scores.len()));
            row(out.advantages.iter().map(|a| a[0]).collect())
        }
        Estimator::ReinforcePp | Estimator::ReinforcePpBaseline => {
            let (rewards, mask) = last_token_rewards(scores, lens);
            let out = if estimator == Estimator::ReinforcePp {
                reinforce_pp::reinforce_pp_outcome(&rewards, &mask, 1.0)
            } else {
                reinforce_pp::reinforce_pp_baseline_outcome(
                    &rewards,
                    &mask,
                    &index_of(groups, scores.len()),
                )
            };
            let per_token: Matrix = out
                .advantages
                .iter()
                .zip(lens)
                .map(|(a, &l)| a[..l].to_vec())
                .collect();
            Advantages {
                per_row: per_token
                    .iter()
                    .map(|r| r.iter().fold(0.0, |m: f64, a| m.max(a.abs())))
                    .collect(),
                per_token: Some(per_token),
            }
        }
    }
}

/// verl's `index`: the group id of each row.
fn index_of(groups: &Groups, n: usize) -> Vec<i64> {
    let mut index = vec![0; n];
    for (g, rows) in groups.iter().enumerate() {
        for &i in rows {
            index[i] = g as i64;
        }
    }
    index
}

/// Token-level rewards with each score at its row's last completion token, and the mask.
fn last_token_rewards(scores: &[f64], lens: &[usize]) -> (Matrix, Matrix) {
    let width = lens.iter().copied().max().unwrap_or(0).max(1);
    let mut rewards = vec![vec![0.0; width]; scores.len()];
    let mut mask = vec![vec![0.0; width]; scores.len()];
    for (i, (&s, &l)) in scores.iter().zip(lens).enumerate() {
        mask[i][..l].fill(1.0);
        if l > 0 {
            rewards[i][l - 1] = s;
        }
    }
    (rewards, mask)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_variance_groups_give_zero_advantage_per_row_estimators() {
        let scores = [1.0, 1.0, 0.0, 1.0];
        let groups = Groups::contiguous(2, 2);
        for e in [Estimator::Grpo, Estimator::DrGrpo, Estimator::Rloo] {
            let a = outcome_advantages(e, &scores, &[3, 1, 2, 2], &groups, &Default::default());
            assert_eq!(&a.per_row[..2], &[0.0, 0.0], "{e:?}");
            assert!(a.per_row[2] < 0.0 && a.per_row[3] > 0.0, "{e:?}");
        }
        // The trainer's `reward/zero_std_frac` counts exactly these groups.
        let stats = crate::GroupStats::of(&scores, &groups);
        assert_eq!(stats.zero_variance_frac, 0.5);
    }

    #[test]
    fn rloo_is_score_minus_mean_of_others() {
        let a = outcome_advantages(
            Estimator::Rloo,
            &[1.0, 0.0, 0.0],
            &[1, 1, 1],
            &Groups::contiguous(1, 3),
            &Default::default(),
        );
        assert_eq!(a.per_row, vec![1.0, -0.5, -0.5]);
    }

    #[test]
    fn reinforce_pp_whitens_over_tokens_and_handles_single_tokens() {
        let lens = [1, 3, 1, 2];
        let a = outcome_advantages(
            Estimator::ReinforcePpBaseline,
            &[1.0, 0.0, 1.0, 1.0],
            &lens,
            &Groups::contiguous(2, 2),
            &Default::default(),
        );
        let t = a.per_token.unwrap();
        assert_eq!(t.iter().map(Vec::len).collect::<Vec<_>>(), lens.to_vec());
        let flat: Vec<f64> = t.iter().flatten().copied().collect();
        let mean = flat.iter().sum::<f64>() / flat.len() as f64;
        assert!(mean.abs() < 1e-9, "whitened: mean 0, got {mean}");
        assert!(t[0][0] > 0.0 && t[1].iter().all(|&x| x < 0.0));
        assert!(flat.iter().all(|x| x.is_finite()));
    }
}
