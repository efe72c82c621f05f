//! TRL's GRPO advantages (`trl/trainer/grpo_trainer.py` @ f2cd577, TRL 1.10.0.dev0,
//! `GRPOTrainer._generate_and_score_completions`, lines 2679-2730): several reward functions,
//! NaN for unscorable completions, `scale_rewards` group / batch / none and the two
//! multi-objective aggregations. The trainer runs it as the `trl_grpo` estimator
//! ([`trl_grpo_outcome`], one reward function: the outcome score); the oracle harness replays
//! TRL's cases through the same functions.
//!
//! Where it differs from verl's GRPO ([`crate::grpo_advantages`]): the std is `nanstd`
//! (unbiased, over the non-NaN rewards) plus `epsilon` (TRL hard-codes 1e-4); a singleton group
//! gets advantage 0 (verl: mean 0, std 1, so `s/(1+ε)`); `scale_rewards = "batch"` divides by the
//! batch's std; an unscorable completion (every reward function NaN) is left out of the
//! statistics and gets advantage 0.

use crate::advantage::{AdvantageConfig, AdvantageOutput};
use crate::groups::Groups;
use crate::masked::{broadcast, row_sums, Matrix};

/// How the advantage is scaled (TRL `scale_rewards`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScaleRewards {
    /// Divide by the group's std (GRPO).
    Group,
    /// Divide by the std of the whole batch (group means are still subtracted).
    Batch,
    /// No scaling (Dr.GRPO).
    None,
}

impl ScaleRewards {
    /// TRL's `scale_rewards` of an [`AdvantageConfig`]: `none` without `norm_by_std`, else
    /// `batch` with `batch_std`, else `group`.
    pub fn of(cfg: &AdvantageConfig) -> Self {
        match (cfg.norm_by_std, cfg.batch_std) {
            (false, _) => Self::None,
            (true, true) => Self::Batch,
            (true, false) => Self::Group,
        }
    }
}

/// How several reward functions combine (TRL `multi_objective_aggregation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MultiObjective {
    /// Weighted `nansum` of the functions, then group normalisation.
    SumThenNormalize,
    /// Normalise each function within its group, weighted `nansum`, then batch normalisation
    /// (GDPO).
    NormalizeThenSum,
}

/// Settings of [`trl_grpo_advantages`].
#[derive(Debug, Clone, PartialEq)]
pub struct TrlAdvantageConfig {
    pub scale_rewards: ScaleRewards,
    pub aggregation: MultiObjective,
    /// One weight per reward function.
    pub reward_weights: Vec<f64>,
    /// Added to the std before dividing (TRL hard-codes 1e-4).
    pub std_epsilon: f64,
}

impl TrlAdvantageConfig {
    /// The trainer's settings: one reward function of weight 1, summed then normalised, scaled
    /// per [`ScaleRewards::of`] with `cfg.epsilon`.
    pub fn single(cfg: &AdvantageConfig) -> Self {
        Self {
            scale_rewards: ScaleRewards::of(cfg),
            aggregation: MultiObjective::SumThenNormalize,
            reward_weights: vec![1.0],
            std_epsilon: cfg.epsilon,
        }
    }
}

/// Everything the TRL block computes, one entry per completion.
#[derive(Debug, Clone, PartialEq)]
pub struct TrlAdvantages {
    /// Advantages; exactly 0 for unscorable completions.
    pub advantages: Vec<f64>,
    /// The aggregated reward (NaN for an unscorable completion).
    pub rewards: Vec<f64>,
    /// Group mean of the rewards (`sum_then_normalize` only).
    pub mean_grouped_rewards: Option<Vec<f64>>,
    /// The std used for scaling (and for the zero-std statistic).
    pub std_rewards: Vec<f64>,
    /// `std ≈ 0` (torch.isclose, atol 1e-8); false where the std is NaN.
    pub is_std_zero: Vec<bool>,
}

/// TRL `nanmean`: mean over the non-NaN values (NaN when there are none).
pub fn nanmean(x: &[f64]) -> f64 {
    let v: Vec<f64> = x.iter().copied().filter(|v| !v.is_nan()).collect();
    v.iter().sum::<f64>() / v.len() as f64
}

/// TRL `nanstd` (`trl/trainer/utils.py`): Bessel-corrected std over the non-NaN values; NaN for
/// a single value (`0 · 1/0`), as in TRL.
pub fn nanstd(x: &[f64]) -> f64 {
    let mean = nanmean(x);
    let sq: Vec<f64> = x.iter().map(|v| (v - mean).powi(2)).collect();
    let count = x.iter().filter(|v| !v.is_nan()).count() as f64;
    (nanmean(&sq) * (count / (count - 1.0))).sqrt()
}

/// `Σ_k w_k·x_k` skipping NaN terms (torch `nansum`), then NaN where every function was NaN.
fn weighted_nansum(rows: &[Vec<f64>], weights: &[f64]) -> Vec<f64> {
    rows.iter()
        .map(|r| {
            if r.iter().all(|v| v.is_nan()) {
                return f64::NAN;
            }
            r.iter()
                .zip(weights)
                .map(|(v, w)| v * w)
                .filter(|v| !v.is_nan())
                .sum()
        })
        .collect()
}

/// The values of `x` at `rows`.
fn pick(x: &[f64], rows: &[usize]) -> Vec<f64> {
    rows.iter().map(|&i| x[i]).collect()
}

/// TRL's advantages from `rewards_per_func` (`B x n_funcs`, NaN = the function could not score),
/// grouped by `groups` (TRL: contiguous blocks of `num_generations` rows,
/// [`Groups::contiguous`]). A completion every function failed on is unscorable: excluded from
/// the statistics, advantage 0. A group of one has std 0 (TRL's `num_generations == 1` branch),
/// so its advantage is 0 too.
///
/// # Panics
/// When a row's length differs from the number of weights, or a group names a row out of range.
pub fn trl_grpo_advantages(
    rewards_per_func: &[Vec<f64>],
    groups: &Groups,
    cfg: &TrlAdvantageConfig,
) -> TrlAdvantages {
    let b = rewards_per_func.len();
    assert!(
        rewards_per_func
            .iter()
            .all(|r| r.len() == cfg.reward_weights.len()),
        "one weight per reward function"
    );
    let eps = cfg.std_epsilon;
    let (rewards, advantages, mean_grouped, std_rewards) = match cfg.aggregation {
        MultiObjective::SumThenNormalize => {
            let rewards = weighted_nansum(rewards_per_func, &cfg.reward_weights);
            let mut means = vec![0.0; b];
            let mut stds = vec![0.0; b];
            for rows in groups.iter() {
                let chunk = pick(&rewards, rows);
                let m = nanmean(&chunk);
                let s = if rows.len() > 1 { nanstd(&chunk) } else { 0.0 };
                for &i in rows {
                    means[i] = m;
                    stds[i] = s;
                }
            }
            if cfg.scale_rewards == ScaleRewards::Batch {
                let s = if b > 1 { nanstd(&rewards) } else { 0.0 };
                stds = vec![s; b];
            }
            let adv = (0..b)
                .map(|i| {
                    let c = rewards[i] - means[i];
                    if cfg.scale_rewards == ScaleRewards::None {
                        c
                    } else {
                        c / (stds[i] + eps)
                    }
                })
                .collect::<Vec<_>>();
            (rewards, adv, Some(means), stds)
        }
        MultiObjective::NormalizeThenSum => {
            let mut normalised = rewards_per_func.to_vec();
            for k in 0..cfg.reward_weights.len() {
                let col: Vec<f64> = rewards_per_func.iter().map(|r| r[k]).collect();
                for rows in groups.iter() {
                    let chunk = pick(&col, rows);
                    let m = nanmean(&chunk);
                    let s = if rows.len() > 1 { nanstd(&chunk) } else { 0.0 };
                    for &i in rows {
                        normalised[i][k] = (col[i] - m) / (s + eps);
                    }
                }
            }
            let mut rewards = weighted_nansum(&normalised, &cfg.reward_weights);
            for (r, row) in rewards.iter_mut().zip(rewards_per_func) {
                if row.iter().all(|v| v.is_nan()) {
                    *r = f64::NAN;
                }
            }
            let s = if b > 1 { nanstd(&rewards) } else { 0.0 };
            let m = nanmean(&rewards);
            let adv = rewards.iter().map(|r| (r - m) / (s + eps)).collect();
            (rewards, adv, None, vec![s; b])
        }
    };
    TrlAdvantages {
        advantages: advantages
            .into_iter()
            .map(|a| if a.is_nan() { 0.0 } else { a })
            .collect(),
        rewards,
        mean_grouped_rewards: mean_grouped,
        is_std_zero: std_rewards.iter().map(|s| s.abs() <= 1e-8).collect(),
        std_rewards,
    }
}

/// The `trl_grpo` estimator: outcome score = row sum (a NaN score is an unscorable completion),
/// [`trl_grpo_advantages`] with one reward function and [`TrlAdvantageConfig::single`], grouped
/// by verl's `index`, broadcast over the mask. Returns equal advantages.
pub fn trl_grpo_outcome(
    token_level_rewards: &Matrix,
    mask: &Matrix,
    index: &[i64],
    cfg: &AdvantageConfig,
) -> AdvantageOutput {
    let scores: Vec<Vec<f64>> = row_sums(token_level_rewards)
        .into_iter()
        .map(|s| vec![s])
        .collect();
    let out = trl_grpo_advantages(
        &scores,
        &Groups::from_index(index),
        &TrlAdvantageConfig::single(cfg),
    );
    AdvantageOutput::same(broadcast(&out.advantages, mask))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(scale: ScaleRewards) -> TrlAdvantageConfig {
        TrlAdvantageConfig {
            scale_rewards: scale,
            aggregation: MultiObjective::SumThenNormalize,
            reward_weights: vec![1.0],
            std_epsilon: 1e-4,
        }
    }

    #[test]
    fn unscorable_completion_is_excluded_and_zeroed() {
        let r = vec![vec![1.0], vec![f64::NAN], vec![0.0]];
        let out = trl_grpo_advantages(&r, &Groups::contiguous(1, 3), &cfg(ScaleRewards::Group));
        assert_eq!(out.advantages[1], 0.0);
        let m = out.mean_grouped_rewards.unwrap();
        assert_eq!(m[0], 0.5, "the NaN row is not in the mean");
        let s = 0.5f64.sqrt();
        assert!((out.advantages[0] - 0.5 / (s + 1e-4)).abs() < 1e-12);
    }

    #[test]
    fn single_generation_gives_zero_advantages() {
        let r = vec![vec![1.0], vec![3.0]];
        for scale in [ScaleRewards::Group, ScaleRewards::Batch, ScaleRewards::None] {
            let out = trl_grpo_advantages(&r, &Groups::contiguous(2, 1), &cfg(scale));
            assert_eq!(out.advantages, vec![0.0, 0.0]);
        }
    }

    #[test]
    fn the_config_names_trl_scale_rewards() {
        let c = |norm_by_std, batch_std| AdvantageConfig {
            norm_by_std,
            epsilon: 1e-4,
            batch_std,
        };
        assert_eq!(ScaleRewards::of(&c(true, false)), ScaleRewards::Group);
        assert_eq!(ScaleRewards::of(&c(true, true)), ScaleRewards::Batch);
        assert_eq!(ScaleRewards::of(&c(false, true)), ScaleRewards::None);
    }
}
