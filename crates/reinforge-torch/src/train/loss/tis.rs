//! Truncated importance sampling between the sampler's and the trainer's log-probs (verl's
//! rollout correction): weights multiplied into the policy loss, or rejection masks.

use tch::{Kind, Tensor};

use crate::train::loss::names::named_enum;

named_enum! {
    /// Truncated importance sampling between the sampler's and the trainer's log-probs.
    pub enum Tis ("tis mode") {
        /// No correction.
        None = "none",
        /// Per-token weight `min(π_old/π_rollout, cap)` (verl rollout correction, token level).
        Token = "token",
        /// Per-sequence weight `min(Π_t π_old/π_rollout, cap)` (sequence level).
        Sequence = "sequence",
        /// Token rejection: tokens whose ratio exceeds `cap` (or is below `1/cap`) leave the loss.
        TokenMask = "token_mask",
        /// Sequence rejection: rows whose sequence ratio is outside `[1/cap, cap]` leave the loss.
        SequenceMask = "sequence_mask",
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
    fn extreme_log_ratios_hit_the_cap() {
        // Log-ratio +100: the weight is e^20 before the cap, never inf.
        let (w, keep) = tis_weights(
            &t(&[&[100.0]]),
            &t(&[&[0.0]]),
            &t(&[&[1.0]]),
            Tis::Token,
            2.0,
        );
        assert_eq!(v(&w), vec![2.0], "TIS cap");
        assert_eq!(v(&keep), vec![1.0]);
        let (_, keep) = tis_weights(
            &t(&[&[100.0]]),
            &t(&[&[0.0]]),
            &t(&[&[1.0]]),
            Tis::TokenMask,
            2.0,
        );
        assert_eq!(v(&keep), vec![0.0], "rejected");
    }

    #[test]
    fn names_parse_and_errors_list_them() {
        assert_eq!("token_mask".parse::<Tis>(), Ok(Tis::TokenMask));
        let err = "tokens".parse::<Tis>().unwrap_err();
        assert!(
            err.contains("sequence_mask") && err.contains("none"),
            "{err}"
        );
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
}
