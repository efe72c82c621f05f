//! The DPO family with autograd, reproducing TRL's `DPOTrainer._compute_loss` (trl 1.16.0):
//! every `loss_type` it accepts, its f-divergence choices, the weighted sum of several loss
//! types, and the metrics it logs (`rewards/chosen`, `rewards/rejected`,
//! `rewards/accuracies`, `rewards/margins`, `logps/chosen`, `logps/rejected`). Inputs are
//! per-sequence log-probs (summed over completion tokens) of the policy and of the reference,
//! and the completion lengths (IPO and `sigmoid_norm` normalise by them). Checked against
//! golden vectors from running TRL's own method (`fixtures/oracles/dpo/`,
//! `tests/oracles_dpo.rs`).

use anyhow::{bail, Result};
use tch::{Kind, Tensor};

use crate::train::loss::names::named_enum;

named_enum! {
    /// TRL's `DPOConfig.loss_type` values.
    pub enum DpoLoss ("DPO loss type") {
        /// DPO: `-log σ(β Δ)`.
        Sigmoid = "sigmoid",
        /// SLiC: `max(0, 1 - β Δ)`.
        Hinge = "hinge",
        /// IPO on length-normalised scores: `(Δ/len - 1/(2β))²`.
        Ipo = "ipo",
        /// EXO-pref (needs `0 < label_smoothing < 1`).
        ExoPair = "exo_pair",
        /// NCA, pairwise.
        NcaPair = "nca_pair",
        /// Robust DPO under label noise `label_smoothing`.
        Robust = "robust",
        /// BCO, pairwise.
        BcoPair = "bco_pair",
        /// SPPO with hard probabilities.
        SppoHard = "sppo_hard",
        /// AOT (batch-sorted log-ratio differences).
        Aot = "aot",
        /// AOT, unpaired.
        AotUnpaired = "aot_unpaired",
        /// APO-zero: raise chosen, lower rejected.
        ApoZero = "apo_zero",
        /// APO-down: lower both, rejected more.
        ApoDown = "apo_down",
        /// DiscoPOP (`discopop_tau`).
        Discopop = "discopop",
        /// SFT on the chosen completions (mean NLL per token).
        Sft = "sft",
        /// DPO on per-token average log-ratios.
        SigmoidNorm = "sigmoid_norm",
    }
}

named_enum! {
    /// TRL's `DPOConfig.f_divergence_type`: the score each log-ratio becomes.
    pub enum FDivergence ("f-divergence") {
        ReverseKl = "reverse_kl",
        ForwardKl = "forward_kl",
        JsDivergence = "js_divergence",
        AlphaDivergence = "alpha_divergence",
    }
}

/// The loss settings (TRL's `DPOConfig` field names).
#[derive(Debug, Clone, PartialEq)]
pub struct DpoConfig {
    /// `loss_type` with `loss_weights`: the loss is their weighted sum.
    pub losses: Vec<(DpoLoss, f64)>,
    pub beta: f64,
    pub label_smoothing: f64,
    pub f_divergence: FDivergence,
    pub f_alpha_divergence_coef: f64,
    pub discopop_tau: f64,
}

impl Default for DpoConfig {
    /// TRL's defaults: sigmoid, β = 0.1, reverse KL, α = 1, τ = 0.05.
    fn default() -> Self {
        Self {
            losses: vec![(DpoLoss::Sigmoid, 1.0)],
            beta: 0.1,
            label_smoothing: 0.0,
            f_divergence: FDivergence::ReverseKl,
            f_alpha_divergence_coef: 1.0,
            discopop_tau: 0.05,
        }
    }
}

/// One batch of pairs, `[B]` each: summed log-probs of the policy and the reference, and the
/// completion lengths in tokens.
pub struct DpoBatch<'a> {
    pub chosen_logps: &'a Tensor,
    pub rejected_logps: &'a Tensor,
    pub ref_chosen_logps: &'a Tensor,
    pub ref_rejected_logps: &'a Tensor,
    pub chosen_lengths: &'a Tensor,
    pub rejected_lengths: &'a Tensor,
}

/// The loss and TRL's logged metrics (means over the batch).
pub struct DpoOutput {
    pub loss: Tensor,
    pub metrics: PairMetrics,
}

/// The per-pair metrics TRL's DPO and ORPO trainers log, under TRL's names: the implicit
/// rewards of each side, how often the chosen one wins and by how much, and the log-probs.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PairMetrics {
    #[serde(rename = "rewards/chosen")]
    pub rewards_chosen: f64,
    #[serde(rename = "rewards/rejected")]
    pub rewards_rejected: f64,
    #[serde(rename = "rewards/accuracies")]
    pub rewards_accuracies: f64,
    #[serde(rename = "rewards/margins")]
    pub rewards_margins: f64,
    #[serde(rename = "logps/chosen")]
    pub logps_chosen: f64,
    #[serde(rename = "logps/rejected")]
    pub logps_rejected: f64,
}

impl PairMetrics {
    /// Batch means of rewards `rc`, `rr` and log-probs `lc`, `lr` (`[B]` each).
    pub fn of(rc: &Tensor, rr: &Tensor, lc: &Tensor, lr: &Tensor) -> Self {
        let mean = |t: &Tensor| {
            t.detach()
                .to_kind(Kind::Double)
                .mean(Kind::Double)
                .double_value(&[])
        };
        Self {
            rewards_chosen: mean(rc),
            rewards_rejected: mean(rr),
            rewards_accuracies: mean(&rc.gt_tensor(rr)),
            rewards_margins: mean(&(rc - rr)),
            logps_chosen: mean(lc),
            logps_rejected: mean(lr),
        }
    }
}

/// TRL's DPO loss of `batch` under `cfg`. Reference log-probs and lengths may come from the
/// host (computed once, read back as numbers): they are moved to the policy's device here.
pub fn dpo_loss(cfg: &DpoConfig, b: &DpoBatch) -> Result<DpoOutput> {
    let d = b.chosen_logps.device();
    let placed = [
        b.ref_chosen_logps.to_device(d),
        b.ref_rejected_logps.to_device(d),
        b.chosen_lengths.to_device(d),
        b.rejected_lengths.to_device(d),
    ];
    let b = &DpoBatch {
        chosen_logps: b.chosen_logps,
        rejected_logps: b.rejected_logps,
        ref_chosen_logps: &placed[0],
        ref_rejected_logps: &placed[1],
        chosen_lengths: &placed[2],
        rejected_lengths: &placed[3],
    };
    if !(cfg.beta.is_finite() && cfg.beta > 0.0) {
        bail!("beta must be a finite number > 0, got {}", cfg.beta);
    }
    let needs_smoothing = cfg.losses.iter().any(|(l, _)| *l == DpoLoss::ExoPair);
    if needs_smoothing && !(cfg.label_smoothing > 0.0 && cfg.label_smoothing < 1.0) {
        bail!(
            "exo_pair needs 0 < label_smoothing < 1, got {}",
            cfg.label_smoothing
        );
    }
    if cfg.losses.iter().any(|(l, _)| *l == DpoLoss::Robust)
        && !(0.0..0.5).contains(&cfg.label_smoothing)
    {
        bail!(
            "robust needs 0 <= label_smoothing < 0.5, got {}",
            cfg.label_smoothing
        );
    }
    let beta = cfg.beta;
    let chosen_lr = b.chosen_logps - b.ref_chosen_logps;
    let rejected_lr = b.rejected_logps - b.ref_rejected_logps;
    let chosen_s = score(cfg, &chosen_lr);
    let rejected_s = score(cfg, &rejected_lr);
    let delta = &chosen_s - &rejected_s;
    let eps = cfg.label_smoothing;
    let logsig = |x: &Tensor| x.log_sigmoid();
    let per_token = |s: &Tensor, len: &Tensor| s / len.clamp_min(1.0);
    let mut loss = Tensor::zeros([], (b.chosen_logps.kind(), b.chosen_logps.device()));
    for &(kind, weight) in &cfg.losses {
        let per_seq = match kind {
            DpoLoss::Sigmoid => -logsig(&(&delta * beta)),
            DpoLoss::Hinge => (-(&delta * beta) + 1.0).relu(),
            DpoLoss::Ipo => {
                let d = per_token(&chosen_s, b.chosen_lengths)
                    - per_token(&rejected_s, b.rejected_lengths);
                (d - 1.0 / (2.0 * beta)).square()
            }
            DpoLoss::ExoPair => {
                let x = &delta * beta;
                // TRL makes epsilon a float32 tensor (`torch.tensor(label_smoothing)`), so
                // its two logs are float32 values.
                // host: two float32 logs read back as numbers.
                let e32 = Tensor::from_slice(&[eps as f32]);
                let log_pw = (-&e32).log1p().double_value(&[]);
                let log_pl = e32.log().double_value(&[]);
                x.sigmoid() * (logsig(&x) - log_pw) + (-&x).sigmoid() * (logsig(&-&x) - log_pl)
            }
            DpoLoss::NcaPair => {
                let (c, r) = (&chosen_lr * beta, &rejected_lr * beta);
                -logsig(&c) - logsig(&-&c) * 0.5 - logsig(&-r) * 0.5
            }
            DpoLoss::Robust => {
                let x = &delta * beta;
                let clean = -logsig(&x) * (1.0 - eps);
                let flipped = -logsig(&-&x) * eps;
                (clean - flipped) / (1.0 - 2.0 * eps)
            }
            DpoLoss::BcoPair => -logsig(&(&chosen_lr * beta)) - logsig(&(&rejected_lr * -beta)),
            DpoLoss::SppoHard => {
                (&chosen_lr - 0.5 / beta).square() + (&rejected_lr + 0.5 / beta).square()
            }
            DpoLoss::Aot => {
                let lr = b.chosen_logps - b.rejected_logps;
                let ref_lr = b.ref_chosen_logps - b.ref_rejected_logps;
                smoothed(&(sorted(&lr) - sorted(&ref_lr)), beta, eps)
            }
            DpoLoss::AotUnpaired => {
                smoothed(&(sorted(&chosen_lr) - sorted(&rejected_lr)), beta, eps)
            }
            DpoLoss::ApoZero => {
                (1.0 - (&chosen_lr * beta).sigmoid()) + (&rejected_lr * beta).sigmoid()
            }
            DpoLoss::ApoDown => {
                (&chosen_lr * beta).sigmoid()
                    + (1.0 - ((&chosen_lr - &rejected_lr) * beta).sigmoid())
            }
            DpoLoss::Discopop => {
                let logits = &delta * beta;
                let m = (&logits / cfg.discopop_tau).sigmoid();
                -logsig(&logits) * (1.0 - &m) + (-&logits).exp() * m
            }
            DpoLoss::Sft => {
                // TRL: the mean NLL over every chosen completion token of the batch.
                let nll = -b.chosen_logps.sum(Kind::Double)
                    / b.chosen_lengths.sum(Kind::Double).clamp_min(1.0);
                nll.to_kind(b.chosen_logps.kind()).expand_as(b.chosen_logps)
            }
            DpoLoss::SigmoidNorm => {
                let d = per_token(&chosen_s, b.chosen_lengths)
                    - per_token(&rejected_s, b.rejected_lengths);
                -logsig(&(d * beta))
            }
        };
        loss = loss + per_seq.mean(per_seq.kind()) * weight;
    }
    let (rc, rr) = (&chosen_lr * beta, &rejected_lr * beta);
    Ok(DpoOutput {
        metrics: PairMetrics::of(&rc, &rr, b.chosen_logps, b.rejected_logps),
        loss,
    })
}

/// The score a log-ratio becomes under the f-divergence.
fn score(cfg: &DpoConfig, lr: &Tensor) -> Tensor {
    match cfg.f_divergence {
        FDivergence::ReverseKl => lr.shallow_clone(),
        FDivergence::ForwardKl => 1.0 - (-lr).exp(),
        FDivergence::JsDivergence => lr.log_sigmoid() + std::f64::consts::LN_2,
        FDivergence::AlphaDivergence => {
            let a = cfg.f_alpha_divergence_coef;
            if (a - 1.0).abs() < 1e-6 {
                return lr.shallow_clone();
            }
            // TRL clamps at 80 (its float32 bound) before the exponential.
            ((lr * (a - 1.0)).clamp_max(80.0).exp() - 1.0) * (1.0 / (a - 1.0))
        }
    }
}

/// `t` sorted ascending over the batch.
fn sorted(t: &Tensor) -> Tensor {
    t.sort(0, false).0
}

/// AOT's label-smoothed logistic loss of `delta`.
fn smoothed(delta: &Tensor, beta: f64, eps: f64) -> Tensor {
    let x = delta * beta;
    -x.log_sigmoid() * (1.0 - eps) - (-&x).log_sigmoid() * eps
}
