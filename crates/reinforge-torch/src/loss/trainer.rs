//! The per-token terms the trainer's update combines beyond verl's vanilla clip: the dual clip,
//! GSPO's sequence ratio, and truncated importance sampling between sampler and trainer.

use std::str::FromStr;

use tch::{Kind, Tensor};

use crate::loss::{PpoClip, TokenTerms};

/// Which policy loss the trainer uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyLossKind {
    /// verl `compute_policy_loss_vanilla`: token ratio, PPO clip (optionally dual clip).
    Vanilla,
    /// verl `compute_policy_loss_gspo`: sequence-level ratio entering every token.
    Gspo,
}

impl FromStr for PolicyLossKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "vanilla" => Ok(Self::Vanilla),
            "gspo" => Ok(Self::Gspo),
            other => Err(format!("invalid policy_loss: {other} (vanilla or gspo)")),
        }
    }
}

/// Dual clip (Ye et al. 2020, verl `compute_policy_loss_vanilla` with `clip_ratio_c`): where
/// A < 0 the per-token loss is capped at `-A·c`, so a huge ratio cannot blow up a negative
/// update. `c = 0` leaves `pg` unchanged.
pub fn dual_clip(pg: Tensor, advantages: &Tensor, c: f64) -> Tensor {
    if c == 0.0 {
        return pg;
    }
    let cap = -advantages * c;
    let neg = advantages.lt(0.0).expand_as(&pg);
    pg.minimum(&cap).where_self(&neg, &pg)
}

/// GSPO per-token terms (verl `compute_policy_loss_gspo`): `log s = mean_t(logp - old)` over the
/// row's valid tokens, entering each token as `sg(log s) + logp - sg(logp)` clamped at 10, then
/// the PPO clip. Aggregated seq-mean-token-mean this is verl's loss exactly.
pub fn gspo_terms(
    logp: &Tensor,
    old_logp: &Tensor,
    advantages: &Tensor,
    mask: &Tensor,
    clip: &PpoClip,
) -> TokenTerms {
    let nak = logp - old_logp;
    let lens = mask
        .sum_dim_intlist(-1i64, true, Kind::Float)
        .clamp_min(1.0);
    let seq = (&nak * mask).sum_dim_intlist(-1i64, true, Kind::Float) / lens;
    let log_s = (logp - logp.detach() + seq.detach()).clamp_max(10.0);
    let s = log_s.exp();
    let l1 = -advantages * &s;
    let l2 = -advantages * s.clamp(1.0 - clip.epsilon_low, 1.0 + clip.epsilon_high);
    let detached = s.detach();
    TokenTerms {
        pg: l1.maximum(&l2),
        clipped_high: detached
            .gt(1.0 + clip.epsilon_high)
            .logical_and(&advantages.gt(0.0))
            .to_kind(Kind::Float),
        clipped_low: detached
            .lt(1.0 - clip.epsilon_low)
            .logical_and(&advantages.lt(0.0))
            .to_kind(Kind::Float),
        neg_log_ratio: (-nak).detach(),
    }
}

/// Truncated importance sampling between the sampler's and the trainer's log-probs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tis {
    /// No correction.
    None,
    /// Per-token weight `min(π_old/π_rollout, cap)` (verl rollout correction, token level).
    Token,
    /// Per-sequence weight `min(Π_t π_old/π_rollout, cap)` (sequence level).
    Sequence,
    /// Token rejection: tokens whose ratio exceeds `cap` (or is below `1/cap`) leave the loss.
    TokenMask,
    /// Sequence rejection: rows whose sequence ratio is outside `[1/cap, cap]` leave the loss.
    SequenceMask,
}

impl FromStr for Tis {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "none" => Self::None,
            "token" => Self::Token,
            "sequence" => Self::Sequence,
            "token_mask" => Self::TokenMask,
            "sequence_mask" => Self::SequenceMask,
            other => {
                return Err(format!(
                    "invalid tis: {other} (none, token, sequence, token_mask, sequence_mask)"
                ))
            }
        })
    }
}

/// Rollout correction after verl `compute_rollout_correction_and_add_to_batch`
/// (`verl/trainer/ppo/rollout_corr_helper.py`, documented in `docs/advance/rollout_is.md`): the
/// log-ratio `old - rollout` is clamped to ±20 (per token, or its masked row sum for sequence
/// modes); IS modes return detached weights `min(exp(·), cap)·mask` and a unit keep mask;
/// rejection modes return unit weights and a keep mask that drops out-of-bound tokens or rows
/// (so they leave the aggregation denominators too). `[N, T]` each.
pub fn tis_weights(
    old_logp: &Tensor,
    rollout_logp: &Tensor,
    mask: &Tensor,
    mode: Tis,
    cap: f64,
) -> (Tensor, Tensor) {
    let ones = mask.ones_like();
    let token = ((old_logp - rollout_logp) * mask).clamp(-20.0, 20.0);
    let seq = || {
        ((old_logp - rollout_logp) * mask)
            .sum_dim_intlist(-1i64, true, Kind::Float)
            .clamp(-20.0, 20.0)
            .expand_as(mask)
    };
    let within = |log_r: &Tensor| {
        log_r
            .le(cap.ln())
            .logical_and(&log_r.ge(-cap.ln()))
            .to_kind(Kind::Float)
    };
    match mode {
        Tis::None => (ones.shallow_clone(), ones),
        Tis::Token => (token.exp().clamp_max(cap).detach() * mask, ones),
        Tis::Sequence => (seq().exp().clamp_max(cap).detach() * mask, ones),
        Tis::TokenMask => (ones, within(&token)),
        Tis::SequenceMask => (ones, within(&seq())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(rows: &[&[f64]]) -> Tensor {
        let flat: Vec<f64> = rows.iter().flat_map(|r| r.iter().copied()).collect();
        Tensor::from_slice(&flat)
            .view([rows.len() as i64, -1])
            .to_kind(Kind::Float)
    }

    fn v(x: &Tensor) -> Vec<f64> {
        Vec::<f64>::try_from(x.flatten(0, -1).to_kind(Kind::Double)).unwrap()
    }

    #[test]
    fn dual_clip_caps_negative_advantages_only() {
        let pg = t(&[&[50.0, 50.0, 1.0]]);
        let adv = t(&[&[-1.0, 1.0, -1.0]]);
        assert_eq!(v(&dual_clip(pg, &adv, 3.0)), vec![3.0, 50.0, 1.0]);
    }

    #[test]
    fn extreme_log_ratios_hit_every_clamp() {
        use crate::loss::{kl_k3, ppo_clip_terms};
        let clip = PpoClip {
            epsilon_low: 0.2,
            epsilon_high: 0.28,
        };
        // Log-ratios +100 and -100: the ratio is e^{±20}, never inf or 0·inf.
        let logp = t(&[&[100.0, -100.0]]);
        let old = t(&[&[0.0, 0.0]]);
        let adv = t(&[&[-1.0, -1.0]]);
        let terms = ppo_clip_terms(&logp, &old, &adv, &clip);
        let pg = v(&terms.pg);
        assert!((pg[0] - 20f64.exp()).abs() / 20f64.exp() < 1e-6, "{pg:?}");
        let capped = v(&dual_clip(terms.pg, &adv, 3.0));
        assert_eq!(capped[0], 3.0, "dual clip c bounds the e^20 ratio");
        assert!((capped[1] - 0.8).abs() < 1e-6);
        let k3 = v(&kl_k3(&t(&[&[-100.0, 100.0]]), &t(&[&[0.0, 0.0]])));
        assert_eq!(k3[0], 10.0, "k3 clamps at +10");
        assert_eq!(k3[1], 10.0, "e^-20 + 19 clamps to +10 too");
        let (w, _) = tis_weights(
            &t(&[&[100.0]]),
            &t(&[&[0.0]]),
            &t(&[&[1.0]]),
            Tis::Token,
            2.0,
        );
        assert_eq!(v(&w), vec![2.0], "TIS cap");
    }

    #[test]
    fn tis_modes() {
        let old = t(&[&[0.5, 0.0], &[-3.0, 0.0]]);
        let roll = t(&[&[0.0, 0.0], &[0.0, 0.0]]);
        let mask = t(&[&[1.0, 1.0], &[1.0, 0.0]]);
        let (w, keep) = tis_weights(&old, &roll, &mask, Tis::Token, 1.5);
        let w = v(&w);
        assert!((w[0] - 0.5f64.exp().min(1.5)).abs() < 1e-6 && w[3] == 0.0);
        assert!((w[2] - (-3f64).exp()).abs() < 1e-6);
        assert_eq!(v(&keep), vec![1.0; 4]);
        let (_, keep) = tis_weights(&old, &roll, &mask, Tis::SequenceMask, 2.0);
        assert_eq!(v(&keep), vec![1.0, 1.0, 0.0, 0.0]);
    }

    #[test]
    fn gspo_terms_match_verl_gspo() {
        use crate::loss::agg::{agg_loss, AggMode, GlobalBatchInfo};
        use crate::loss::clip_family::gspo;
        use crate::loss::policy::{PolicyInputs, VerlPolicyConfig};
        let logp = t(&[&[-0.5, -1.0, -2.0], &[-0.1, -0.3, -9.0]]);
        let old = t(&[&[-0.6, -0.9, -2.2], &[-0.2, -0.1, -1.0]]);
        let adv = t(&[&[1.0, 1.0, 1.0], &[-2.0, -2.0, -2.0]]);
        let mask = t(&[&[1.0, 1.0, 1.0], &[1.0, 1.0, 0.0]]);
        let clip = PpoClip {
            epsilon_low: 3e-4,
            epsilon_high: 4e-4,
        };
        let ours = gspo_terms(&logp, &old, &adv, &mask, &clip);
        let info = GlobalBatchInfo::default();
        let mine = agg_loss(&ours.pg, &mask, AggMode::SeqMeanTokenMean, &info).double_value(&[]);
        let cfg = VerlPolicyConfig {
            clip_ratio_low: Some(3e-4),
            clip_ratio_high: Some(4e-4),
            ..Default::default()
        };
        let x = PolicyInputs {
            old_log_prob: &old,
            log_prob: &logp,
            advantages: &adv,
            response_mask: &mask,
            rollout_is_weights: None,
        };
        let verl = gspo(&x, AggMode::SeqMeanTokenMean, &cfg)
            .loss
            .double_value(&[]);
        assert!((mine - verl).abs() < 1e-6, "{mine} vs {verl}");
    }
}
