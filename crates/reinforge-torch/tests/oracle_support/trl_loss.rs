//! TRL's GRPO loss, `GRPOTrainer._compute_loss` (trl/trainer/grpo_trainer.py @ f2cd577): the
//! clipped surrogate of grpo / bnpo / dr_grpo / dapo, CISPO and SAPO, the k3 KL term, TRL's
//! normalisers and the metrics TRL logs (one process, no vLLM correction, no entropy mask).

// `x = x + y` on tensors stays as written, as in the library: `+=` is an in-place op, which
// autograd treats differently.
#![allow(clippy::assign_op_pattern)]

use std::collections::BTreeMap;
use std::str::FromStr;

use tch::{Kind, Tensor};

/// TRL `loss_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrlLossType {
    /// Per-sequence token mean, then mean over sequences; divided by the accumulation steps.
    Grpo,
    /// Sum over local tokens / local token count; divided by the accumulation steps.
    Bnpo,
    /// Sum / (B · max_completion_length); divided by the accumulation steps.
    DrGrpo,
    /// Sum / (num_items_in_batch / num_processes) (global token count).
    Dapo,
    /// `-sg(min(r, epsilon_high))·A·logp`, normalised as dapo.
    Cispo,
    /// Soft gate `σ(τ(r - 1))·4/τ`, normalised as grpo.
    Sapo,
}

impl FromStr for TrlLossType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "grpo" => Self::Grpo,
            "bnpo" => Self::Bnpo,
            "dr_grpo" => Self::DrGrpo,
            "dapo" => Self::Dapo,
            "cispo" => Self::Cispo,
            "sapo" => Self::Sapo,
            other => return Err(format!("unknown TRL loss_type: {other}")),
        })
    }
}

/// TRL `importance_sampling_level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IsLevel {
    /// One ratio per token.
    Token,
    /// GSPO: one ratio per sequence, `exp(masked mean of the log-ratios)`, shape `B x 1`.
    Sequence,
}

/// The `GRPOConfig` fields `_compute_loss` reads.
#[derive(Debug, Clone, PartialEq)]
pub struct TrlLossConfig {
    pub loss_type: TrlLossType,
    /// Weight of the k3 KL to the reference (0 disables it and its metric).
    pub beta: f64,
    pub epsilon_low: f64,
    /// Upper clip; for CISPO the absolute cap on the ratio.
    pub epsilon_high: f64,
    /// Two-sided clipping: cap on the unclipped ratio term (`delta`).
    pub delta: Option<f64>,
    pub importance_sampling_level: IsLevel,
    /// dr_grpo's constant normaliser (the config value, not the padded length).
    pub max_completion_length: usize,
    pub gradient_accumulation_steps: usize,
    pub num_processes: usize,
    pub sapo_temperature_pos: f64,
    pub sapo_temperature_neg: f64,
}

/// The tensors `_compute_loss` reads; log-probs are `B x T`, advantages `B`.
#[derive(Debug, Clone, Copy)]
pub struct TrlLossInputs<'a> {
    /// The current policy (the gradient flows here).
    pub per_token_logps: &'a Tensor,
    /// `None`: TRL uses `per_token_logps.detach()` (ratio 1, single update per generation).
    pub old_per_token_logps: Option<&'a Tensor>,
    /// Needed when `beta != 0`.
    pub ref_per_token_logps: Option<&'a Tensor>,
    pub advantages: &'a Tensor,
    pub completion_mask: &'a Tensor,
    /// Only for the logged `entropy` metric.
    pub entropies: Option<&'a Tensor>,
    /// Global valid-token count of the generation batch (dapo / cispo).
    pub num_items_in_batch: Option<f64>,
}

/// The returned loss, the method's local tensors and the logged metrics.
#[derive(Debug)]
pub struct TrlLossOutput {
    /// What `_compute_loss` returns.
    pub loss: Tensor,
    /// `loss` before the division by the accumulation steps (equal for dapo / cispo).
    pub policy_loss: Tensor,
    pub per_token_loss: Tensor,
    /// The ratio (after the `delta` cap), `B x T` or `B x 1`.
    pub coef_1: Tensor,
    /// The clipped ratio (grpo / bnpo / dr_grpo / dapo only).
    pub coef_2: Option<Tensor>,
    /// k3 KL per token (when `beta != 0`).
    pub per_token_kl: Option<Tensor>,
    /// `_metrics["train"]` entries: `kl`, `entropy`, `clip_ratio/*` or `cispo_clip_ratio`.
    pub metrics: BTreeMap<String, f64>,
}

/// TRL `GRPOTrainer._compute_loss` (grpo_trainer.py @ f2cd577). No log-ratio clamp and no
/// dual-clip (unlike verl): `-min(r·A, clip(r, 1-ε_low, 1+ε_high)·A) + β·k3`.
///
/// # Panics
/// When dapo / cispo lack `num_items_in_batch` or `beta != 0` lacks the reference log-probs.
pub fn trl_compute_loss(x: &TrlLossInputs, cfg: &TrlLossConfig) -> TrlLossOutput {
    let lp = x.per_token_logps;
    let kind = lp.kind();
    let mask = x.completion_mask;
    let a = x.advantages.unsqueeze(1);
    let old = match x.old_per_token_logps {
        Some(o) => o.shallow_clone(),
        None => lp.detach(),
    };
    let log_ratio = lp - &old;
    let log_w = match cfg.importance_sampling_level {
        IsLevel::Token => log_ratio,
        IsLevel::Sequence => ((log_ratio * mask).sum_dim_intlist(-1i64, false, kind)
            / mask.sum_dim_intlist(-1i64, false, kind).clamp_min(1.0))
        .unsqueeze(-1),
    };
    let mut coef_1 = log_w.exp();
    let per_token_kl = (cfg.beta != 0.0).then(|| {
        let r = x
            .ref_per_token_logps
            .expect("beta != 0 needs ref_per_token_logps");
        let d = r - lp;
        d.exp() - &d - 1.0
    });
    let mut coef_2 = None;
    let mut per_token_loss = match cfg.loss_type {
        TrlLossType::Cispo => -coef_1.clamp_max(cfg.epsilon_high).detach() * &a * lp,
        TrlLossType::Sapo => {
            let pos = Tensor::from(cfg.sapo_temperature_pos)
                .to_kind(kind)
                .to_device(a.device());
            let neg = Tensor::from(cfg.sapo_temperature_neg)
                .to_kind(kind)
                .to_device(a.device());
            let tau = pos.where_self(&a.gt(0.0), &neg);
            -((&tau * (&coef_1 - 1.0)).sigmoid() * 4.0 / &tau) * &a
        }
        _ => {
            let c2 = coef_1.clamp(1.0 - cfg.epsilon_low, 1.0 + cfg.epsilon_high);
            if let Some(d) = cfg.delta {
                coef_1 = coef_1.clamp_max(d);
            }
            let l = -(&coef_1 * &a).minimum(&(&c2 * &a));
            coef_2 = Some(c2);
            l
        }
    };
    if let Some(kl) = &per_token_kl {
        per_token_loss = per_token_loss + kl * cfg.beta;
    }
    let ga = cfg.gradient_accumulation_steps as f64;
    let masked_sum = (&per_token_loss * mask).sum(kind);
    let (policy_loss, divide_by_ga) = match cfg.loss_type {
        TrlLossType::Grpo | TrlLossType::Sapo => (
            ((&per_token_loss * mask).sum_dim_intlist(-1i64, false, kind)
                / mask.sum_dim_intlist(-1i64, false, kind).clamp_min(1.0))
            .mean(kind),
            true,
        ),
        TrlLossType::Bnpo => (masked_sum / mask.sum(kind).clamp_min(1.0), true),
        TrlLossType::DrGrpo => {
            let b = per_token_loss.size()[0] as f64;
            (masked_sum / (b * cfg.max_completion_length as f64), true)
        }
        TrlLossType::Dapo | TrlLossType::Cispo => {
            let n = x
                .num_items_in_batch
                .expect("dapo/cispo need num_items_in_batch");
            (masked_sum / (n / cfg.num_processes as f64), false)
        }
    };
    let loss = if divide_by_ga {
        &policy_loss / ga
    } else {
        policy_loss.shallow_clone()
    };
    let metrics = trl_metrics(x, cfg, &a, &coef_1, per_token_kl.as_ref());
    TrlLossOutput {
        loss,
        policy_loss,
        per_token_loss,
        coef_1,
        coef_2,
        per_token_kl,
        metrics,
    }
}

/// The values `_compute_loss` appends to `_metrics["train"]` with one process: masked batch means
/// of the KL, the entropy and the clip indicators, plus the smallest per-sequence low-clip ratio
/// and the largest per-sequence high-clip ratio.
fn trl_metrics(
    x: &TrlLossInputs,
    cfg: &TrlLossConfig,
    a: &Tensor,
    coef_1: &Tensor,
    per_token_kl: Option<&Tensor>,
) -> BTreeMap<String, f64> {
    let mask = x.completion_mask;
    let kind = mask.kind();
    let count = mask.sum(kind).clamp_min(1.0);
    let batch_mean = |t: &Tensor| -> f64 {
        let t = t.detach().to_kind(kind);
        let v = if t.size()[1] == 1 {
            t.mean(kind)
        } else {
            (t * mask).sum(kind) / &count
        };
        v.to_kind(Kind::Double).double_value(&[])
    };
    // Per-sequence clip ratios (masked mean over each row's tokens): their min / max are the
    // logged `low_min` / `high_max`.
    let per_seq = |t: &Tensor| -> Tensor {
        let t = t.detach().to_kind(kind);
        if t.size()[1] == 1 {
            t.squeeze_dim(1)
        } else {
            (t * mask).sum_dim_intlist(-1i64, false, kind)
                / mask.sum_dim_intlist(-1i64, false, kind).clamp_min(1.0)
        }
    };
    let scalar = |t: Tensor| t.to_kind(Kind::Double).double_value(&[]);
    let mut out = BTreeMap::new();
    if let Some(kl) = per_token_kl {
        out.insert("kl".to_string(), batch_mean(kl));
    }
    if let Some(e) = x.entropies {
        out.insert("entropy".to_string(), batch_mean(e));
    }
    match cfg.loss_type {
        TrlLossType::Grpo | TrlLossType::Bnpo | TrlLossType::DrGrpo | TrlLossType::Dapo => {
            let low = coef_1.lt(1.0 - cfg.epsilon_low).logical_and(&a.lt(0.0));
            let high = coef_1.gt(1.0 + cfg.epsilon_high).logical_and(&a.gt(0.0));
            let region = low.logical_or(&high);
            let (l, h, r) = (batch_mean(&low), batch_mean(&high), batch_mean(&region));
            out.insert("clip_ratio/low_mean".to_string(), l);
            out.insert(
                "clip_ratio/low_min".to_string(),
                scalar(per_seq(&low).min()),
            );
            out.insert("clip_ratio/high_mean".to_string(), h);
            out.insert(
                "clip_ratio/high_max".to_string(),
                scalar(per_seq(&high).max()),
            );
            out.insert("clip_ratio/region_mean".to_string(), r);
        }
        TrlLossType::Cispo => {
            let clipped = coef_1.gt(cfg.epsilon_high).logical_and(&a.gt(0.0));
            out.insert("cispo_clip_ratio".to_string(), batch_mean(&clipped));
        }
        TrlLossType::Sapo => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(loss_type: TrlLossType) -> TrlLossConfig {
        TrlLossConfig {
            loss_type,
            beta: 0.0,
            epsilon_low: 0.2,
            epsilon_high: 0.2,
            delta: None,
            importance_sampling_level: IsLevel::Token,
            max_completion_length: 4,
            gradient_accumulation_steps: 2,
            num_processes: 1,
            sapo_temperature_pos: 1.0,
            sapo_temperature_neg: 1.05,
        }
    }

    #[test]
    fn on_policy_normalisers() {
        // Ratio 1 (no old log-probs): per-token loss is -A.
        let lp = Tensor::from_slice(&[-1.0f64, -1.0, -1.0, -1.0]).view([2, 2]);
        let m = Tensor::from_slice(&[1.0f64, 1.0, 1.0, 0.0]).view([2, 2]);
        let a = Tensor::from_slice(&[1.0f64, 3.0]);
        let x = TrlLossInputs {
            per_token_logps: &lp,
            old_per_token_logps: None,
            ref_per_token_logps: None,
            advantages: &a,
            completion_mask: &m,
            entropies: None,
            num_items_in_batch: Some(6.0),
        };
        let v = |t| trl_compute_loss(&x, &cfg(t)).loss.double_value(&[]);
        assert!(
            (v(TrlLossType::Grpo) - (-2.0 / 2.0)).abs() < 1e-12,
            "mean(-1, -3) / GA"
        );
        assert!((v(TrlLossType::Bnpo) - (-5.0 / 3.0 / 2.0)).abs() < 1e-12);
        assert!((v(TrlLossType::DrGrpo) - (-5.0 / 8.0 / 2.0)).abs() < 1e-12);
        assert!(
            (v(TrlLossType::Dapo) - (-5.0 / 6.0)).abs() < 1e-12,
            "no GA division"
        );
    }
}
