//! Policy-gradient losses with autograd: the PPO-clip surrogate, KL to a reference, entropy.
//!
//! This module keeps the small surface the trainer uses (`PpoClip`, `ppo_clip_terms`, `kl_k3`,
//! `token_sum_over`, `masked_mean`). The submodules hold the full catalogue, each function
//! reproducing one verl (`core_algos.py` @ 1dda039) or TRL (`grpo_trainer.py` @ f2cd577) function
//! numerically, generic over the float dtype of its inputs (f64 for the oracles, f32 in training):
//! - [`agg`]: verl `agg_loss`, its 5 modes and the global-batch normalisation;
//! - [`kl`]: verl `kl_penalty` (every estimator, `+` straight-through), entropy, KL-in-reward;
//! - [`policy`]: the shared verl loss config and output;
//! - [`clip_family`]: vanilla PPO (clip-higher, dual-clip), GSPO, CISPO, SAPO, DPPO-TV/KL, GMPO;
//! - [`pg_family`]: GPG, DRO, KL-Cov, Clip-Cov, REINFORCE, the value loss;
//! - [`trl`]: TRL's `_compute_loss` (grpo, bnpo, dr_grpo, dapo, cispo, sapo) with its metrics;
//! - [`trainer`]: the trainer's per-token extras (dual clip, GSPO terms, truncated IS).
//!
//! Conventions of the trainer's surface follow verl `compute_policy_loss_vanilla`: the log-ratio
//! is clamped to ±20 before `exp`, the k3 ("low_var_kl") estimator is clamped to [-10, 10], and
//! token-mean aggregation divides by the number of valid tokens.

use serde::{Deserialize, Serialize};
use tch::{Kind, Tensor};

pub mod agg;
pub mod clip_family;
pub mod kl;
pub mod pg_family;
pub mod policy;
pub mod trainer;
pub mod trl;

/// Hyper-parameters of the clipped surrogate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PpoClip {
    /// Lower clip: the ratio is kept above `1 - epsilon_low` (verl `clip_ratio_low`).
    pub epsilon_low: f64,
    /// Upper clip ("clip-higher" in DAPO): kept below `1 + epsilon_high` (verl `clip_ratio_high`).
    pub epsilon_high: f64,
}

/// Per-token terms of the loss, all `[N, T]`.
#[derive(Debug)]
pub struct TokenTerms {
    /// `max(-A r, -A clip(r))`.
    pub pg: Tensor,
    /// Tokens where the upper clip bound was active (A > 0 and r > 1 + eps_high).
    pub clipped_high: Tensor,
    /// Tokens where the lower clip bound was active (A < 0 and r < 1 - eps_low).
    pub clipped_low: Tensor,
    /// `old_logp - logp` (verl's `ppo_kl` before averaging).
    pub neg_log_ratio: Tensor,
}

/// The PPO-clip surrogate per token. `advantages` broadcasts against `logp` (`[N, T]` or `[N, 1]`).
pub fn ppo_clip_terms(
    logp: &Tensor,
    old_logp: &Tensor,
    advantages: &Tensor,
    clip: &PpoClip,
) -> TokenTerms {
    let neg_log_ratio = old_logp - logp;
    let ratio = (logp - old_logp).clamp(-20.0, 20.0).exp();
    let unclipped = -advantages * &ratio;
    let clipped = -advantages * ratio.clamp(1.0 - clip.epsilon_low, 1.0 + clip.epsilon_high);
    let pg = unclipped.maximum(&clipped);
    let detached = ratio.detach();
    let pos = advantages.gt(0.0);
    let neg = advantages.lt(0.0);
    TokenTerms {
        pg,
        clipped_high: detached
            .gt(1.0 + clip.epsilon_high)
            .logical_and(&pos)
            .to_kind(Kind::Float),
        clipped_low: detached
            .lt(1.0 - clip.epsilon_low)
            .logical_and(&neg)
            .to_kind(Kind::Float),
        neg_log_ratio: neg_log_ratio.detach(),
    }
}

/// The k3 estimator of KL(π‖π_ref) per token, `exp(ref - logp) - (ref - logp) - 1`, with verl's
/// clamps (log-ratio to ±20, value to [-10, 10]). Unbiased, non-negative and low-variance
/// (Schulman, "Approximating KL divergence").
pub fn kl_k3(logp: &Tensor, ref_logp: &Tensor) -> Tensor {
    let d = (ref_logp - logp).clamp(-20.0, 20.0);
    (d.exp() - &d - 1.0).clamp(-10.0, 10.0)
}

/// Token-mean aggregation: `Σ x·m / denominator`. Passing the number of valid tokens of the
/// whole mini-batch as `denominator` makes micro-batch losses add up to the mini-batch mean.
pub fn token_sum_over(x: &Tensor, mask: &Tensor, denominator: f64) -> Tensor {
    (x * mask).sum(Kind::Float) / denominator.max(1.0)
}

/// Masked mean of a statistic (no gradient needed).
pub fn masked_mean(x: &Tensor, mask: &Tensor) -> f64 {
    let n = mask.sum(Kind::Float).double_value(&[]);
    if n == 0.0 {
        return 0.0;
    }
    (x * mask).sum(Kind::Float).double_value(&[]) / n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(v: &[f64]) -> Tensor {
        Tensor::from_slice(v).view([1, -1])
    }

    #[test]
    fn clip_by_hand() {
        // Ratios e^0.5≈1.649, e^-0.5≈0.607, 1, e^0.1≈1.105; advantages +1, -1, +2, -1.
        let logp = t(&[0.5, -0.5, 0.0, 0.1]);
        let old = t(&[0.0, 0.0, 0.0, 0.0]);
        let adv = t(&[1.0, -1.0, 2.0, -1.0]);
        let clip = PpoClip {
            epsilon_low: 0.2,
            epsilon_high: 0.28,
        };
        let terms = ppo_clip_terms(&logp, &old, &adv, &clip);
        let pg = Vec::<f64>::try_from(terms.pg.flatten(0, -1)).unwrap();
        // A>0, r>1.28: clipped to -1.28. A<0, r<0.8: max(0.607, 0.8) = 0.8. r=1: -2. A<0, r=1.105: 1.105.
        let expected = [-1.28, 0.8, -2.0, 0.1f64.exp()];
        for (g, e) in pg.iter().zip(expected) {
            assert!((g - e).abs() < 1e-12, "{pg:?}");
        }
        assert_eq!(
            Vec::<f64>::try_from(terms.clipped_high.flatten(0, -1)).unwrap(),
            vec![1.0, 0.0, 0.0, 0.0]
        );
        assert_eq!(
            Vec::<f64>::try_from(terms.clipped_low.flatten(0, -1)).unwrap(),
            vec![0.0, 1.0, 0.0, 0.0]
        );
    }

    #[test]
    fn clipped_tokens_have_no_gradient() {
        let logp = t(&[0.5, 0.0]).set_requires_grad(true);
        let terms = ppo_clip_terms(
            &logp,
            &t(&[0.0, 0.0]),
            &t(&[1.0, 1.0]),
            &PpoClip {
                epsilon_low: 0.2,
                epsilon_high: 0.2,
            },
        );
        terms.pg.sum(Kind::Double).backward();
        let g = Vec::<f64>::try_from(logp.grad().flatten(0, -1)).unwrap();
        assert_eq!(g[0], 0.0);
        assert!(
            (g[1] + 1.0).abs() < 1e-12,
            "d(-A r)/dlogp = -A r = -1 at r = 1"
        );
    }

    #[test]
    fn k3_values_and_clamp() {
        let kl = kl_k3(&t(&[0.0, -1.0, 0.0, 30.0]), &t(&[0.0, 0.0, -1.0, 0.0]));
        let v = Vec::<f64>::try_from(kl.flatten(0, -1)).unwrap();
        assert_eq!(v[0], 0.0);
        assert!((v[1] - (1f64.exp() - 2.0)).abs() < 1e-12);
        assert!((v[2] - ((-1f64).exp())).abs() < 1e-12);
        assert!(
            (v[3] - 19.0f64.min(10.0)).abs() < 1e-12,
            "log-ratio -30 clamps to -20, value e^-20+19 clamps to 10"
        );
    }

    #[test]
    fn token_mean_ignores_masked_junk() {
        let x = t(&[1.0, 3.0, 100.0]);
        let m = t(&[1.0, 1.0, 0.0]);
        assert_eq!(token_sum_over(&x, &m, 2.0).double_value(&[]), 2.0);
        assert_eq!(masked_mean(&x, &m), 2.0);
        assert_eq!(masked_mean(&x, &t(&[0.0, 0.0, 0.0])), 0.0);
    }
}
