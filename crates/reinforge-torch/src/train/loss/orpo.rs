//! ORPO, reproducing TRL's `ORPOTrainer` (trl 1.16.0, `trl.experimental.orpo`):
//! `get_batch_loss_metrics` = the chosen NLL minus β times the mean log-sigmoid of the log odds
//! ratio, with the metrics it logs. Reference-free: no reference model is read.
//!
//! Inputs are per-sequence sums of token log-probs, as the trainer computes them in one forward
//! pass: over the completion (the odds use their per-token mean, TRL's `average_log_prob=True`)
//! and, for the chosen side, over every attended token after the first (TRL's NLL counts the
//! prompt too). Checked against golden vectors from running TRL's own methods
//! (`fixtures/oracles/orpo/`, `tests/oracles_orpo.rs`).

use anyhow::{bail, Result};
use tch::{Kind, Tensor};

use crate::train::loss::dpo::PairMetrics;

/// One batch of pairs, `[B]` each.
pub struct OrpoBatch<'a> {
    /// Summed completion log-probs of the chosen and rejected sides.
    pub chosen_logps: &'a Tensor,
    pub rejected_logps: &'a Tensor,
    /// Completion lengths in tokens.
    pub chosen_lengths: &'a Tensor,
    pub rejected_lengths: &'a Tensor,
    /// Summed log-probs of the whole chosen sequence (prompt and completion, all tokens after
    /// the first) and how many tokens that is.
    pub chosen_full_logps: &'a Tensor,
    pub chosen_full_lengths: &'a Tensor,
}

/// The loss and TRL's logged metrics (means over the batch).
pub struct OrpoOutput {
    pub loss: Tensor,
    /// TRL's pair metrics; the log-probs are per-token means (TRL logs the averaged ones) and
    /// the rewards β times them.
    pub metrics: PairMetrics,
    pub nll_loss: f64,
    pub log_odds_ratio: f64,
    pub log_odds_chosen: f64,
}

/// `log(1 - exp(x))` for `x < 0`, split at `-ln 2` as TRL's `log1mexp` (and Mächler's note) do
/// to avoid cancellation on either side.
pub fn log1mexp(x: &Tensor) -> Tensor {
    let t = -std::f64::consts::LN_2;
    let below = (-x.exp()).log1p();
    let above = (-x.expm1()).log();
    below.where_self(&x.lt(t), &above)
}

/// TRL's ORPO loss of `batch` with weight `beta` on the odds-ratio term.
pub fn orpo_loss(beta: f64, b: &OrpoBatch) -> Result<OrpoOutput> {
    if !(beta.is_finite() && beta > 0.0) {
        bail!("beta must be a finite number > 0, got {beta}");
    }
    // Lengths may come from the host: moved to the log-probs' device.
    let mean_logp = |sum: &Tensor, len: &Tensor| sum / len.to_device(sum.device()).clamp_min(1.0);
    // TRL's `odds_ratio_loss` casts the averaged log-probs to float32 (`.float()`); doing the
    // same keeps the float64 oracle within float32 rounding of TRL, and is a no-op in training.
    let chosen = mean_logp(b.chosen_logps, b.chosen_lengths).to_kind(Kind::Float);
    let rejected = mean_logp(b.rejected_logps, b.rejected_lengths).to_kind(Kind::Float);
    let log_odds = (&chosen - &rejected) - (log1mexp(&chosen) - log1mexp(&rejected));
    let ratio = log_odds.log_sigmoid();
    // CrossEntropyLoss over every counted chosen token of the batch: a token mean.
    let nll = -b.chosen_full_logps.sum(Kind::Double)
        / b.chosen_full_lengths.sum(Kind::Double).clamp_min(1.0);
    let nll = nll.to_kind(b.chosen_full_logps.kind());
    let loss = &nll - (&ratio * beta).mean(Kind::Float).to_kind(nll.kind());
    let mean = |t: &Tensor| {
        t.detach()
            .to_kind(Kind::Double)
            .mean(Kind::Double)
            .double_value(&[])
    };
    let (rc, rr) = ((&chosen * beta).detach(), (&rejected * beta).detach());
    Ok(OrpoOutput {
        metrics: PairMetrics::of(&rc, &rr, &chosen, &rejected),
        nll_loss: nll.double_value(&[]),
        log_odds_ratio: mean(&ratio),
        log_odds_chosen: mean(&log_odds),
        loss,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log1mexp_matches_the_direct_formula_on_both_branches() {
        let x = Tensor::from_slice(&[-5.0f64, -1.0, -0.7, -0.5, -1e-3]);
        let direct = (-x.exp() + 1.0).log();
        let got = log1mexp(&x);
        let diff = (got - direct).abs().max().double_value(&[]);
        assert!(diff < 1e-12, "{diff}");
    }

    #[test]
    fn a_chosen_side_more_likely_than_the_rejected_lowers_the_loss() {
        let t = |v: &[f64]| Tensor::from_slice(v);
        let len = t(&[2.0]);
        let full = t(&[-3.0]);
        let full_len = t(&[4.0]);
        let loss = |c: f64, r: f64| {
            let (c, r) = (t(&[c]), t(&[r]));
            let b = OrpoBatch {
                chosen_logps: &c,
                rejected_logps: &r,
                chosen_lengths: &len,
                rejected_lengths: &len,
                chosen_full_logps: &full,
                chosen_full_lengths: &full_len,
            };
            orpo_loss(0.1, &b).unwrap().loss.double_value(&[])
        };
        assert!(loss(-1.0, -4.0) < loss(-4.0, -1.0));
        assert!(orpo_loss(
            0.0,
            &OrpoBatch {
                chosen_logps: &full,
                rejected_logps: &full,
                chosen_lengths: &len,
                rejected_lengths: &len,
                chosen_full_logps: &full,
                chosen_full_lengths: &full_len,
            }
        )
        .is_err());
    }
}
