//! The registry of policy losses: verl's `register_policy_loss` names (core_algos.py @ 1dda039)
//! mapped to the catalogue functions of [`clip_family`] and [`pg_family`]. The trainer
//! ([`crate::train::rl::policy_objective`]) and the oracle harness call the same entry,
//! [`PolicyLossKind::compute`].

use crate::train::loss::agg::AggMode;
use crate::train::loss::names::named_enum;
use crate::train::loss::policy::{PolicyInputs, PolicyLoss, VerlPolicyConfig};
use crate::train::loss::{clip_family, pg_family};

named_enum! {
    /// A registered policy loss, by verl's name (`actor.policy_loss.loss_mode`).
    pub enum PolicyLossKind ("policy_loss") {
        /// PPO clip with clip-higher and dual clip (`compute_policy_loss_vanilla`).
        Vanilla = "vanilla",
        /// GSPO's sequence ratio, always seq-mean-token-mean.
        Gspo = "gspo",
        /// CISPO: clipped, detached ratio times `A·logp`.
        Cispo = "cispo",
        /// SAPO: a soft sigmoid gate instead of the clip, always seq-mean-token-mean.
        Sapo = "sapo",
        /// DPPO with a total-variation trust region.
        DppoTv = "dppo_tv",
        /// DPPO with a binary-KL trust region.
        DppoKl = "dppo_kl",
        /// GMPO: geometric mean of the clipped token ratios, mean over sequences.
        GeoMean = "geo_mean",
        /// GPG: plain `-A·logp`.
        Gpg = "gpg",
        /// DRO: `-A·logp` plus a quadratic log-ratio penalty.
        Dro = "dro",
        /// KL-Cov: `-A·r` plus `|log r|` on the highest-covariance tokens.
        KlCov = "kl_cov",
        /// Clip-Cov: PPO clip with the gradient of high-covariance tokens cut.
        ClipCov = "clip_cov",
        /// REINFORCE: `-A·logp` (times rollout IS weights).
        Reinforce = "reinforce",
    }
}

/// The signature every registered loss has (verl's `PolicyLossFn`).
pub type PolicyLossFn = fn(&PolicyInputs, AggMode, &VerlPolicyConfig) -> PolicyLoss;

impl PolicyLossKind {
    /// The catalogue function registered under this name.
    pub fn function(self) -> PolicyLossFn {
        match self {
            Self::Vanilla => clip_family::vanilla,
            Self::Gspo => clip_family::gspo,
            Self::Cispo => clip_family::cispo,
            Self::Sapo => clip_family::sapo,
            Self::DppoTv => clip_family::dppo_tv,
            Self::DppoKl => clip_family::dppo_kl,
            Self::GeoMean => clip_family::geo_mean,
            Self::Gpg => pg_family::gpg,
            Self::Dro => pg_family::dro,
            Self::KlCov => pg_family::kl_cov,
            Self::ClipCov => pg_family::clip_cov,
            Self::Reinforce => pg_family::reinforce,
        }
    }

    /// The loss and verl's metrics of `x` (see [`PolicyLossFn`]).
    pub fn compute(self, x: &PolicyInputs, mode: AggMode, cfg: &VerlPolicyConfig) -> PolicyLoss {
        (self.function())(x, mode, cfg)
    }

    /// Whether a row whose advantages are all zero contributes exactly nothing to the loss and
    /// its gradient, whatever the other rows hold, so the trainer may leave it out (its share
    /// of the denominators is fixed from the whole mini-batch first).
    ///
    /// True where every token's term carries a factor `A` and depends on its own row only.
    /// False for `dro` (its `½β(logp - old)²` penalty does not vanish with `A`), `kl_cov` and
    /// `clip_cov` (which tokens get the penalty or the cut depends on the batch's means of `A`
    /// and `logp`, its valid-token count and, for Clip-Cov, a random draw over the candidates),
    /// and `geo_mean` (its mean runs over the rows of the micro-batch).
    pub fn zero_advantage_rows_are_inert(self) -> bool {
        !matches!(
            self,
            Self::Dro | Self::KlCov | Self::ClipCov | Self::GeoMean
        )
    }

    /// Whether a row with no valid token contributes exactly nothing and changes nothing else.
    /// False only for `geo_mean`, whose `mean` over sequences counts every row of the
    /// micro-batch (as verl's does); the others multiply by the mask or read valid tokens only.
    pub fn empty_rows_are_inert(self) -> bool {
        self != Self::GeoMean
    }

    /// Whether the loss of a mini-batch is the sum of its rows' terms given the mini-batch's
    /// denominators, so micro-batches under a token budget give exactly its gradient. False
    /// for `kl_cov` and `clip_cov` (which tokens get the penalty or the cut depends on the
    /// whole batch) and `geo_mean` (its mean runs over the rows of the pass); their
    /// mini-batches run in one pass.
    pub fn rows_are_separable(self) -> bool {
        !matches!(self, Self::KlCov | Self::ClipCov | Self::GeoMean)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::loss::policy::NO_DUAL_CLIP;
    use tch::{Kind, Tensor};

    fn rows(r: &[&[f64]]) -> Tensor {
        let flat: Vec<f64> = r.iter().flat_map(|x| x.iter().copied()).collect();
        Tensor::from_slice(&flat).view([r.len() as i64, -1])
    }

    #[test]
    fn every_name_parses_to_its_variant_and_serde_agrees() {
        assert_eq!(PolicyLossKind::ALL.len(), 12);
        for (k, name) in PolicyLossKind::ALL.iter().zip(PolicyLossKind::NAMES) {
            assert_eq!(name.parse::<PolicyLossKind>(), Ok(*k));
            assert_eq!(
                serde_json::to_value(k).unwrap(),
                serde_json::Value::from(*name)
            );
        }
        let err = serde_json::from_value::<PolicyLossKind>("gmpo".into()).unwrap_err();
        assert!(err.to_string().contains("geo_mean"), "{err}");
        let err = "ppo".parse::<PolicyLossKind>().unwrap_err();
        assert!(
            err.contains("vanilla") && err.contains("reinforce"),
            "{err}"
        );
    }

    /// The inertness claims, checked on every loss: a zero-advantage row (and an empty row)
    /// added to a batch leaves the loss and the other rows' gradients unchanged exactly where
    /// the registry says it does.
    #[test]
    fn inert_rows_are_inert() {
        let cfg = VerlPolicyConfig {
            clip_ratio_c: NO_DUAL_CLIP,
            kl_cov_ratio: 0.3,
            clip_cov_ratio: 0.3,
            // Only the third token of row 0 falls in this covariance window, and only once the
            // extra row has moved the batch means: a zero-advantage row changes Clip-Cov's cut.
            clip_cov_lb: 0.15,
            clip_cov_ub: 0.3,
            ..Default::default()
        };
        let base_lp = [[-0.3, -1.2, -0.7], [-2.0, -0.1, -0.4]];
        let base_old = [[-0.5, -1.0, -0.6], [-1.5, -0.3, -0.4]];
        let base_a = [[1.0, 1.0, 1.0], [-0.5, -0.5, -0.5]];
        let extra_lp = [-0.9, -0.2, -3.0];
        let extra_old = [-0.4, -0.6, -1.0];
        let run = |kind: PolicyLossKind, extra: Option<(f64, f64)>| {
            let mut lp: Vec<&[f64]> = base_lp.iter().map(|r| r.as_slice()).collect();
            let mut old: Vec<&[f64]> = base_old.iter().map(|r| r.as_slice()).collect();
            let mut a: Vec<Vec<f64>> = base_a.iter().map(|r| r.to_vec()).collect();
            let mut m = vec![vec![1.0; 3], vec![1.0, 1.0, 0.0]];
            if let Some((adv, mask)) = extra {
                lp.push(&extra_lp);
                old.push(&extra_old);
                a.push(vec![adv; 3]);
                m.push(vec![mask; 3]);
            }
            let a: Vec<&[f64]> = a.iter().map(Vec::as_slice).collect();
            let m: Vec<&[f64]> = m.iter().map(Vec::as_slice).collect();
            let lp = rows(&lp).set_requires_grad(true);
            let (old, a, m) = (rows(&old), rows(&a), rows(&m));
            let x = PolicyInputs {
                old_log_prob: &old,
                log_prob: &lp,
                advantages: &a,
                response_mask: &m,
                rollout_is_weights: None,
            };
            // Fixed denominators, as the trainer passes them.
            let cfg = VerlPolicyConfig {
                global_batch_info: crate::train::loss::agg::GlobalBatchInfo {
                    dp_size: 1,
                    batch_num_tokens: Some(5.0),
                    global_batch_size: Some(2.0),
                    loss_scale_factor: Some(3.0),
                },
                ..cfg.clone()
            };
            let out = crate::runtime::with_seed(0, || kind.compute(&x, AggMode::TokenMean, &cfg));
            out.loss.backward();
            let g = lp.grad().narrow(0, 0, 2).to_kind(Kind::Double);
            (out.loss.double_value(&[]), g)
        };
        // Inert means equal up to the last bits of float64: an elementwise kernel rounds its
        // vectorised body and its scalar tail apart (on AVX2, `sigmoid` of 6 values runs all
        // scalar, of 9 values 8 vectorised), so a batch's size alone can move a base value by
        // an ulp. A row that is not inert moves the loss or a gradient by far more.
        const INERT: f64 = 1e-12;
        const MOVED: f64 = 1e-6;
        for &kind in PolicyLossKind::ALL {
            let (l0, g0) = run(kind, None);
            let change = |extra| {
                let (l, g) = run(kind, Some(extra));
                let dg = (g - &g0).abs().max().double_value(&[]);
                (l - l0).abs().max(dg)
            };
            for (what, extra, inert) in [
                (
                    "zero-advantage row",
                    (0.0, 1.0),
                    kind.zero_advantage_rows_are_inert(),
                ),
                ("empty row", (0.7, 0.0), kind.empty_rows_are_inert()),
            ] {
                let d = change(extra);
                if inert {
                    assert!(d <= INERT, "{kind}: a {what} moved the result by {d:e}");
                } else {
                    assert!(d > MOVED, "{kind}: a {what} moved the result by only {d:e}");
                }
            }
        }
    }

    #[test]
    fn no_dual_clip_equals_plain_ppo_clip_with_zero_advantages() {
        // With c = ∞ and a zero advantage the dual-clip branch computes 0·∞ = NaN, which must
        // reach neither the loss nor the gradient.
        let lp = rows(&[&[0.5, -0.5, 0.0]]).set_requires_grad(true);
        let old = rows(&[&[0.0, 0.0, 0.0]]);
        let a = rows(&[&[1.0, -1.0, 0.0]]);
        let m = rows(&[&[1.0, 1.0, 1.0]]);
        let x = PolicyInputs {
            old_log_prob: &old,
            log_prob: &lp,
            advantages: &a,
            response_mask: &m,
            rollout_is_weights: None,
        };
        let cfg = VerlPolicyConfig {
            clip_ratio_c: NO_DUAL_CLIP,
            ..Default::default()
        };
        let out = PolicyLossKind::Vanilla.compute(&x, AggMode::TokenSum, &cfg);
        // max(-1.649, -1.2) + max(0.607, 0.8) + 0.
        assert!((out.loss.double_value(&[]) - (-1.2 + 0.8)).abs() < 1e-12);
        out.loss.backward();
        let g = Vec::<f64>::try_from(lp.grad().flatten(0, -1)).unwrap();
        assert_eq!(g, vec![0.0, 0.0, 0.0], "both clipped, third has A = 0");
        assert_eq!(out.metrics["actor/pg_clipfrac_lower"], 0.0);
    }
}
