//! KL estimators, entropy and KL-in-reward, verl semantics (core_algos.py @ 1dda039: `kl_penalty`,
//! `kl_penalty_forward`, `compute_entropy_loss`, `compute_rewards`; torch_functional.py:
//! `entropy_from_logits`), plus TRL's unclamped k3 (grpo_trainer.py @ f2cd577). See Schulman,
//! "Approximating KL divergence" (2020).

use tch::Tensor;

use crate::train::loss::agg::{agg_loss, AggMode, GlobalBatchInfo};
use crate::train::loss::names::named_enum;

/// A per-token estimator of KL(π‖π_ref) from the two log-probs of the sampled token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KlEstimator {
    /// k1 (`kl`): `logp - ref`. Unbiased, high variance, can be negative.
    K1,
    /// `abs`: `|logp - ref|`.
    Abs,
    /// k2 (`mse`): `½ (logp - ref)²`. Its gradient is the unbiased gradient of KL.
    K2,
    /// k3 (`low_var_kl`): `e^{ref-logp} - (ref-logp) - 1`, log-ratio clamped to ±20 and value to ±10.
    K3,
    /// k3 without verl's clamps: TRL `GRPOTrainer._compute_loss`'s `beta` term
    /// (grpo_trainer.py @ f2cd577, TRL 1.10.0.dev0): `exp(ref - logp) - (ref - logp) - 1`.
    K3Unclamped,
}

named_enum! {
    /// verl's KL estimator names (`actor.kl_loss_type`, `algorithm.kl_penalty`), each also with
    /// the `+` suffix: the forward value of the estimator with the gradient of k2
    /// (straight-through). `full` is not accepted, as verl raises NotImplementedError for it.
    /// Names are kept as written, so a config file round-trips unchanged. `k3_unclamped` is
    /// reinforge's name for TRL's KL term (k3 without verl's ±20 / ±10 clamps).
    pub enum KlPenalty ("KL estimator") {
        Kl = "kl",
        K1 = "k1",
        Abs = "abs",
        Mse = "mse",
        K2 = "k2",
        LowVarKl = "low_var_kl",
        K3 = "k3",
        K3Unclamped = "k3_unclamped",
        KlPlus = "kl+",
        K1Plus = "k1+",
        AbsPlus = "abs+",
        MsePlus = "mse+",
        K2Plus = "k2+",
        LowVarKlPlus = "low_var_kl+",
        K3Plus = "k3+",
        K3UnclampedPlus = "k3_unclamped+",
    }
}

impl KlPenalty {
    /// The estimator of the forward value.
    pub fn estimator(self) -> KlEstimator {
        use KlPenalty::*;
        match self {
            Kl | K1 | KlPlus | K1Plus => KlEstimator::K1,
            Abs | AbsPlus => KlEstimator::Abs,
            Mse | K2 | MsePlus | K2Plus => KlEstimator::K2,
            LowVarKl | K3 | LowVarKlPlus | K3Plus => KlEstimator::K3,
            K3Unclamped | K3UnclampedPlus => KlEstimator::K3Unclamped,
        }
    }

    /// Whether the gradient is k2's (the `+` suffix).
    pub fn straight_through(self) -> bool {
        self.name().ends_with('+')
    }
}

/// verl `kl_penalty_forward`: the estimator's value per token.
pub fn kl_forward(logp: &Tensor, ref_logp: &Tensor, estimator: KlEstimator) -> Tensor {
    match estimator {
        KlEstimator::K1 => logp - ref_logp,
        KlEstimator::Abs => (logp - ref_logp).abs(),
        KlEstimator::K2 => (logp - ref_logp).square() * 0.5,
        KlEstimator::K3 => {
            let d = (ref_logp - logp).clamp(-20.0, 20.0);
            (d.exp() - &d - 1.0).clamp(-10.0, 10.0)
        }
        KlEstimator::K3Unclamped => {
            let d = ref_logp - logp;
            d.exp() - &d - 1.0
        }
    }
}

/// verl `kl_penalty`: [`kl_forward`], and with `straight_through` the value of the estimator
/// carrying the gradient of k2, `k2 - sg(k2) + sg(value)` (k2 itself is unchanged by `+`).
pub fn kl_penalty(logp: &Tensor, ref_logp: &Tensor, penalty: KlPenalty) -> Tensor {
    let forward = kl_forward(logp, ref_logp, penalty.estimator());
    if !penalty.straight_through() || penalty.estimator() == KlEstimator::K2 {
        return forward;
    }
    let backward = (logp - ref_logp).square() * 0.5;
    &backward - backward.detach() + forward.detach()
}

/// verl `entropy_from_logits`: `logsumexp(z) - Σ softmax(z)·z` over the last axis (`B x T x V` →
/// `B x T`).
pub fn entropy_from_logits(logits: &Tensor) -> Tensor {
    let p = logits.softmax(-1, logits.kind());
    logits.logsumexp(-1i64, false) - (p * logits).sum_dim_intlist(-1i64, false, logits.kind())
}

/// verl `compute_entropy_loss`: [`entropy_from_logits`] aggregated by `mode` (local constants).
pub fn compute_entropy_loss(logits: &Tensor, mask: &Tensor, mode: AggMode) -> Tensor {
    agg_loss(
        &entropy_from_logits(logits),
        mask,
        mode,
        &GlobalBatchInfo::default(),
    )
}

/// verl `compute_rewards`: KL in the reward, `scores - (old_logp - ref_logp)·kl_ratio` (k1).
pub fn compute_rewards(
    token_level_scores: &Tensor,
    old_logp: &Tensor,
    ref_logp: &Tensor,
    kl_ratio: f64,
) -> Tensor {
    token_level_scores - (old_logp - ref_logp) * kl_ratio
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Kind;

    #[test]
    fn names_and_straight_through_gradient() {
        let err = "full".parse::<KlPenalty>().unwrap_err();
        assert!(err.contains("low_var_kl+") && err.contains("k1"), "{err}");
        let p: KlPenalty = "low_var_kl+".parse().unwrap();
        assert!(p.straight_through() && p.estimator() == KlEstimator::K3);
        assert!(!KlPenalty::Kl.straight_through() && KlPenalty::Kl.estimator() == KlEstimator::K1);
        for name in KlPenalty::NAMES {
            assert_eq!(
                name.parse::<KlPenalty>().unwrap().name(),
                *name,
                "names round-trip"
            );
        }
        let lp = Tensor::from_slice(&[-1.0f64, -2.0]).set_requires_grad(true);
        let rf = Tensor::from_slice(&[-1.5f64, -1.0]);
        let kl = kl_penalty(&lp, &rf, p);
        let plain = kl_forward(&lp, &rf, KlEstimator::K3);
        assert!(kl.allclose(&plain.detach(), 1e-12, 1e-12, false));
        kl.sum(Kind::Double).backward();
        let g = Vec::<f64>::try_from(lp.grad()).unwrap();
        assert_eq!(g, vec![0.5, -1.0], "d/dlogp of ½(logp-ref)² is logp - ref");
    }

    #[test]
    fn k3_values_and_clamps() {
        let t = |v: &[f64]| Tensor::from_slice(v);
        let kl = kl_forward(
            &t(&[0.0, -1.0, 0.0, 30.0, -100.0]),
            &t(&[0.0, 0.0, -1.0, 0.0, 0.0]),
            KlEstimator::K3,
        );
        let v = Vec::<f64>::try_from(kl).unwrap();
        assert_eq!(v[0], 0.0);
        assert!((v[1] - (1f64.exp() - 2.0)).abs() < 1e-12);
        assert!((v[2] - (-1f64).exp()).abs() < 1e-12);
        assert_eq!(
            v[3], 10.0,
            "log-ratio -30 clamps to -20, e^-20 + 19 clamps to 10"
        );
        assert_eq!(v[4], 10.0, "e^20 - 21 clamps to 10");
        let raw = kl_forward(
            &t(&[30.0, -12.0]),
            &t(&[0.0, 0.0]),
            KlEstimator::K3Unclamped,
        );
        let v = Vec::<f64>::try_from(raw).unwrap();
        assert_eq!(
            v,
            vec![(-30f64).exp() + 29.0, 12f64.exp() - 13.0],
            "TRL's k3: no clamp"
        );
    }

    #[test]
    fn uniform_logits_have_log_v_entropy() {
        let z = Tensor::zeros([1, 1, 4], (Kind::Double, tch::Device::Cpu));
        let h = entropy_from_logits(&z).double_value(&[0, 0]);
        assert!((h - 4f64.ln()).abs() < 1e-12);
    }
}
