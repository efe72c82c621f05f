//! TRL's GRPO advantage block (`trl/trainer/grpo_trainer.py` @ f2cd577,
//! `GRPOTrainer._generate_and_score_completions`): several reward functions, NaN for unscorable
//! completions, `scale_rewards` group / batch / none and the two multi-objective aggregations.
//! Groups are contiguous blocks of `num_generations` rows.

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

/// How several reward functions combine (TRL `multi_objective_aggregation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MultiObjective {
    /// Weighted `nansum` of the functions, then group normalisation.
    SumThenNormalize,
    /// Normalise each function within its group, weighted `nansum`, then batch normalisation (GDPO).
    NormalizeThenSum,
}

/// Settings of [`trl_grpo_advantages`].
#[derive(Debug, Clone, PartialEq)]
pub struct TrlAdvantageConfig {
    pub num_generations: usize,
    pub scale_rewards: ScaleRewards,
    pub aggregation: MultiObjective,
    /// One weight per reward function.
    pub reward_weights: Vec<f64>,
    /// Added to the std before dividing (TRL hard-codes 1e-4).
    pub std_epsilon: f64,
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

/// TRL `nanstd` (`trl/trainer/utils.py`): Bessel-corrected std over the non-NaN values; NaN for a
/// single value (`0 · 1/0`), as in TRL.
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

/// TRL's advantages from `rewards_per_func` (`B x n_funcs`, NaN = the function could not score).
/// A completion every function failed on is unscorable: excluded from the statistics, advantage 0.
///
/// # Panics
/// When `B` is not a multiple of `num_generations`, or the weights do not match the functions.
pub fn trl_grpo_advantages(
    rewards_per_func: &[Vec<f64>],
    cfg: &TrlAdvantageConfig,
) -> TrlAdvantages {
    let g = cfg.num_generations;
    let b = rewards_per_func.len();
    assert!(
        g > 0 && b.is_multiple_of(g),
        "batch {b} is not a multiple of num_generations {g}"
    );
    let eps = cfg.std_epsilon;
    let (rewards, advantages, mean_grouped, std_rewards) = match cfg.aggregation {
        MultiObjective::SumThenNormalize => {
            let rewards = weighted_nansum(rewards_per_func, &cfg.reward_weights);
            let mut means = vec![0.0; b];
            let mut stds = vec![0.0; b];
            for (start, chunk) in rewards.chunks(g).enumerate().map(|(k, c)| (k * g, c)) {
                let m = nanmean(chunk);
                let s = if g > 1 { nanstd(chunk) } else { 0.0 };
                for i in start..start + g {
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
            let n_funcs = cfg.reward_weights.len();
            let mut normalised = rewards_per_func.to_vec();
            for k in 0..n_funcs {
                for start in (0..b).step_by(g) {
                    let col: Vec<f64> =
                        (start..start + g).map(|i| rewards_per_func[i][k]).collect();
                    let m = nanmean(&col);
                    let s = if g > 1 { nanstd(&col) } else { 0.0 };
                    for i in start..start + g {
                        normalised[i][k] = (rewards_per_func[i][k] - m) / (s + eps);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(g: usize, scale: ScaleRewards) -> TrlAdvantageConfig {
        TrlAdvantageConfig {
            num_generations: g,
            scale_rewards: scale,
            aggregation: MultiObjective::SumThenNormalize,
            reward_weights: vec![1.0],
            std_epsilon: 1e-4,
        }
    }

    #[test]
    fn unscorable_completion_is_excluded_and_zeroed() {
        let r = vec![vec![1.0], vec![f64::NAN], vec![0.0]];
        let out = trl_grpo_advantages(&r, &cfg(3, ScaleRewards::Group));
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
            let out = trl_grpo_advantages(&r, &cfg(1, scale));
            assert_eq!(out.advantages, vec![0.0, 0.0]);
        }
    }
}
