//! KTO on unpaired rows, reproducing TRL's `KTOTrainer._compute_loss` (trl 1.16.0): its two
//! loss types, the desirable/undesirable weights, the KL reference point (the batch mean of
//! mismatched-completion log-ratios, clamped at 0 and not differentiated) and the metrics it
//! logs. Inputs are per-row summed completion log-probs. Checked against golden vectors from
//! running TRL's own method (`fixtures/oracles/kto/`, `tests/oracles_kto.rs`).

use anyhow::{bail, Result};
use tch::{Kind, Tensor};

use crate::train::loss::names::named_enum;

named_enum! {
    /// TRL's `KTOConfig.loss_type` values.
    pub enum KtoLoss ("KTO loss type") {
        /// KTO (eq. 7 of Ethayarajh et al. 2024): desirable rows pushed above the KL
        /// reference point, undesirable rows below it.
        Kto = "kto",
        /// APO-zero, unpaired: no KL term.
        ApoZeroUnpaired = "apo_zero_unpaired",
    }
}

impl KtoLoss {
    /// Whether the loss reads the KL reference point (TRL's `calculate_KL`).
    pub fn uses_kl(self) -> bool {
        self == KtoLoss::Kto
    }
}

/// The loss settings (TRL's `KTOConfig` field names).
#[derive(Debug, Clone, PartialEq)]
pub struct KtoConfig {
    pub loss_type: KtoLoss,
    pub beta: f64,
    pub desirable_weight: f64,
    pub undesirable_weight: f64,
}

impl Default for KtoConfig {
    /// TRL's defaults: kto, β = 0.1, both weights 1.
    fn default() -> Self {
        Self {
            loss_type: KtoLoss::Kto,
            beta: 0.1,
            desirable_weight: 1.0,
            undesirable_weight: 1.0,
        }
    }
}

/// One batch of unpaired rows, `[N]` each.
pub struct KtoBatch<'a> {
    /// Summed completion log-probs of the policy and of the reference.
    pub logps: &'a Tensor,
    pub ref_logps: &'a Tensor,
    /// Whether each row is desirable (TRL's `label`).
    pub labels: &'a [bool],
    /// Summed log-probs of the mismatched (KL) completions under the policy and the reference;
    /// read only by losses that use the KL term.
    pub kl: Option<(&'a Tensor, &'a Tensor)>,
}

/// The loss and TRL's logged metrics; a side with no rows in the batch has no metric (TRL
/// logs none for it).
pub struct KtoOutput {
    pub loss: Tensor,
    pub kl: f64,
    pub rewards_chosen: Option<f64>,
    pub rewards_rejected: Option<f64>,
    pub rewards_margins: Option<f64>,
    pub logps_chosen: Option<f64>,
    pub logps_rejected: Option<f64>,
}

/// TRL's KTO loss of `batch` under `cfg`.
pub fn kto_loss(cfg: &KtoConfig, b: &KtoBatch) -> Result<KtoOutput> {
    if !(cfg.beta.is_finite() && cfg.beta > 0.0) {
        bail!("beta must be a finite number > 0, got {}", cfg.beta);
    }
    let n = b.logps.size()[0];
    if b.labels.len() as i64 != n {
        bail!("{} labels for {n} rows", b.labels.len());
    }
    let kl = match (cfg.loss_type.uses_kl(), b.kl) {
        (false, _) => 0.0,
        (true, Some((policy, reference))) => (policy - reference.to_device(policy.device()))
            .detach()
            .to_kind(Kind::Double)
            .mean(Kind::Double)
            .double_value(&[])
            .max(0.0),
        (true, None) => bail!("loss type kto needs the KL completions' log-probs"),
    };
    let pick = |want: bool| {
        let idx: Vec<i64> = (0..n).filter(|&i| b.labels[i as usize] == want).collect();
        Tensor::from_slice(&idx).to_device(b.logps.device())
    };
    let (chosen_idx, rejected_idx) = (pick(true), pick(false));
    // Reference log-probs may come from the host (computed once): on the policy's device.
    let ratio = b.logps - b.ref_logps.to_device(b.logps.device());
    let (chosen_lr, rejected_lr) = (
        ratio.index_select(0, &chosen_idx),
        ratio.index_select(0, &rejected_idx),
    );
    let beta = cfg.beta;
    let (chosen_losses, rejected_losses) = match cfg.loss_type {
        KtoLoss::Kto => (
            1.0 - ((&chosen_lr - kl) * beta).sigmoid(),
            1.0 - ((-&rejected_lr + kl) * beta).sigmoid(),
        ),
        KtoLoss::ApoZeroUnpaired => (
            1.0 - (&chosen_lr * beta).sigmoid(),
            (&rejected_lr * beta).sigmoid(),
        ),
    };
    let losses = Tensor::cat(
        &[
            chosen_losses * cfg.desirable_weight,
            rejected_losses * cfg.undesirable_weight,
        ],
        0,
    );
    let loss = losses.nanmean(None::<&[i64]>, false, losses.kind());
    // TRL: the nan-sum of a side over its row count, absent when the side is empty.
    let side_mean = |t: &Tensor| {
        let count = t.size()[0];
        (count > 0).then(|| {
            t.detach()
                .to_kind(Kind::Double)
                .nansum(None::<&[i64]>, false, Kind::Double)
                .double_value(&[])
                / count as f64
        })
    };
    let rewards_chosen = side_mean(&(&chosen_lr * beta));
    let rewards_rejected = side_mean(&(&rejected_lr * beta));
    Ok(KtoOutput {
        loss,
        kl,
        rewards_margins: rewards_chosen.zip(rewards_rejected).map(|(c, r)| c - r),
        rewards_chosen,
        rewards_rejected,
        logps_chosen: side_mean(&b.logps.index_select(0, &chosen_idx)),
        logps_rejected: side_mean(&b.logps.index_select(0, &rejected_idx)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(cfg: &KtoConfig, logps: &[f64], refs: &[f64], labels: &[bool]) -> KtoOutput {
        let (l, r) = (Tensor::from_slice(logps), Tensor::from_slice(refs));
        let kl = (l.shallow_clone(), r.shallow_clone());
        kto_loss(
            cfg,
            &KtoBatch {
                logps: &l,
                ref_logps: &r,
                labels,
                kl: Some((&kl.0, &kl.1)),
            },
        )
        .unwrap()
    }

    #[test]
    fn raising_a_desirable_row_lowers_the_loss_and_an_empty_side_has_no_metric() {
        let cfg = KtoConfig::default();
        let low = run(&cfg, &[-3.0, -2.0], &[-2.0, -2.0], &[true, false]);
        let high = run(&cfg, &[-1.0, -2.0], &[-2.0, -2.0], &[true, false]);
        assert!(high.loss.double_value(&[]) < low.loss.double_value(&[]));
        let only = run(&cfg, &[-1.0], &[-2.0], &[true]);
        assert!(only.rewards_chosen.is_some() && only.rewards_rejected.is_none());
        assert!(only.rewards_margins.is_none());
    }

    #[test]
    fn the_kl_point_is_clamped_at_zero_and_required_by_kto() {
        let cfg = KtoConfig::default();
        // Policy below the reference on the KL rows: the mean log-ratio is negative.
        let out = run(&cfg, &[-3.0, -3.0], &[-1.0, -1.0], &[true, false]);
        assert_eq!(out.kl, 0.0);
        let (l, r) = (
            Tensor::from_slice(&[-1.0f64]),
            Tensor::from_slice(&[-1.0f64]),
        );
        let b = KtoBatch {
            logps: &l,
            ref_logps: &r,
            labels: &[true],
            kl: None,
        };
        assert!(kto_loss(&cfg, &b).is_err());
        let apo = KtoConfig {
            loss_type: KtoLoss::ApoZeroUnpaired,
            ..cfg
        };
        assert!(kto_loss(&apo, &b).is_ok());
    }
}
