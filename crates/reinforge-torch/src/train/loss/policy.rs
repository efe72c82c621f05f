//! The config and output shared by the verl policy losses (core_algos.py @ 1dda039, the
//! `compute_policy_loss_*` functions and their `ActorConfig` fields).

use std::collections::BTreeMap;

use tch::{Kind, Tensor};

use crate::train::loss::agg::GlobalBatchInfo;

/// The `ActorConfig` fields the verl policy losses read, with verl's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct VerlPolicyConfig {
    /// Symmetric clip ε (`clip_ratio`), used where `clip_ratio_low/high` are unset.
    pub clip_ratio: f64,
    /// Lower clip (`clip_ratio_low`); DPPO reads it as a divergence threshold.
    pub clip_ratio_low: Option<f64>,
    /// Upper clip, "clip-higher" (`clip_ratio_high`).
    pub clip_ratio_high: Option<f64>,
    /// Dual-clip bound for A < 0 (`clip_ratio_c`, > 1); DPPO's importance-ratio truncation.
    pub clip_ratio_c: f64,
    /// SAPO gate temperature for A > 0.
    pub tau_pos: f64,
    /// SAPO gate temperature for A <= 0.
    pub tau_neg: f64,
    /// DRO quadratic penalty weight (`policy_loss.dro_beta`).
    pub dro_beta: f64,
    /// KL-Cov: fraction of valid tokens that get the |log-ratio| penalty.
    pub kl_cov_ratio: f64,
    /// KL-Cov: weight of that penalty (`policy_loss.ppo_kl_coef`).
    pub ppo_kl_coef: f64,
    /// Clip-Cov: fraction of valid tokens whose gradient may be cut.
    pub clip_cov_ratio: f64,
    /// Clip-Cov: covariance window `(lb, ub)` of the candidates.
    pub clip_cov_lb: f64,
    pub clip_cov_ub: f64,
    /// Clamp the log-ratio before `exp`, as verl does: to ±20 in vanilla, CISPO, SAPO and DPPO,
    /// GSPO's sequence log-ratio at max 10. `false` is TRL's ratio, `exp(logp - old)` unclamped
    /// (`GRPOTrainer._compute_loss`, grpo_trainer.py @ f2cd577): exact where verl's clamp would
    /// bind, but a ratio can overflow (in float32 past a log-ratio of 88).
    pub clamp_log_ratio: bool,
    /// Global-batch constants forwarded to `agg_loss`.
    pub global_batch_info: GlobalBatchInfo,
}

impl Default for VerlPolicyConfig {
    fn default() -> Self {
        Self {
            clip_ratio: 0.2,
            clip_ratio_low: Some(0.2),
            clip_ratio_high: Some(0.2),
            clip_ratio_c: 3.0,
            tau_pos: 1.0,
            tau_neg: 1.05,
            dro_beta: 1.0,
            kl_cov_ratio: 0.0002,
            ppo_kl_coef: 1.0,
            clip_cov_ratio: 0.0002,
            clip_cov_lb: 1.0,
            clip_cov_ub: 5.0,
            clamp_log_ratio: true,
            global_batch_info: GlobalBatchInfo::default(),
        }
    }
}

impl VerlPolicyConfig {
    /// The effective lower clip.
    pub fn low(&self) -> f64 {
        self.clip_ratio_low.unwrap_or(self.clip_ratio)
    }
    /// The effective upper clip.
    pub fn high(&self) -> f64 {
        self.clip_ratio_high.unwrap_or(self.clip_ratio)
    }

    /// `log r = logp - old`, clamped to `[-bound, bound]` when
    /// [`clamp_log_ratio`](Self::clamp_log_ratio).
    pub fn log_ratio(&self, logp: &Tensor, old: &Tensor, bound: f64) -> Tensor {
        let d = logp - old;
        if self.clamp_log_ratio {
            d.clamp(-bound, bound)
        } else {
            d
        }
    }
}

/// The `clip_ratio_c` that switches dual clip off: verl's vanilla loss always applies it, and
/// with `c = ∞` its bound `-A·c` never binds (DPPO's ratio truncation `min(r, c)` is then off
/// too). Zero advantages stay exact: their dual-clip branch is never selected.
pub const NO_DUAL_CLIP: f64 = f64::INFINITY;

/// The tensors a verl policy loss reads, all `B x T`.
#[derive(Debug, Clone, Copy)]
pub struct PolicyInputs<'a> {
    /// Log-probs of the policy that sampled / the previous epoch (no gradient).
    pub old_log_prob: &'a Tensor,
    /// Log-probs of the current policy (the gradient flows here).
    pub log_prob: &'a Tensor,
    pub advantages: &'a Tensor,
    pub response_mask: &'a Tensor,
    /// Rollout-correction importance weights, multiplied into the per-token loss.
    pub rollout_is_weights: Option<&'a Tensor>,
}

/// A scalar loss plus verl's metrics dict (keys unchanged, e.g. `actor/pg_clipfrac`).
#[derive(Debug)]
pub struct PolicyLoss {
    pub loss: Tensor,
    pub metrics: BTreeMap<String, f64>,
}

impl PolicyLoss {
    pub(crate) fn new(loss: Tensor, metrics: &[(&str, &Tensor)]) -> Self {
        Self {
            loss,
            metrics: metrics
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_kind(Kind::Double).double_value(&[])))
                .collect(),
        }
    }
}

/// `x·w` when rollout importance weights are given.
pub(crate) fn weighted(x: Tensor, w: Option<&Tensor>) -> Tensor {
    match w {
        Some(w) => x * w,
        None => x,
    }
}

/// A boolean tensor as the float dtype of `like`.
pub(crate) fn as_float(b: &Tensor, like: &Tensor) -> Tensor {
    b.to_kind(like.kind())
}
