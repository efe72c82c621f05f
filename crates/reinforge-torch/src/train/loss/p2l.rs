//! Prompt-to-Leaderboard losses (lmarena/p2l `p2l/model.py` @ a905fa5, its `registered_losses`),
//! with autograd: a head maps a prompt to one Bradley-Terry coefficient per model (`coefs`,
//! `[B, M]`), plus a tie parameter `eta` (`[B, 1]`) and, for `ba`, a "both bad" parameter
//! `gamma` (`[B, 1]`); `labels` `[B, 2 | 3]` hold the winner's index, the loser's, and for the
//! tie-aware losses the tie indicator (0 no tie, 1 tie, 2 tie "both bad"). Each function
//! reproduces its reference numerically, clamps included; `grk`/`bag` compute in float32 as
//! the reference does (`coefs.float()`). Checked against golden vectors produced by running the
//! reference (`fixtures/oracles/p2l/p2l_losses.json`, test `tests/oracles_p2l.rs`).

use anyhow::{bail, Result};
use tch::{Kind, Tensor};

use crate::train::loss::names::named_enum;

named_enum! {
    /// A P2L loss by its registered name in `p2l/model.py`.
    pub enum P2lLoss ("P2L loss") {
        /// Bradley-Terry: `-log σ(β_w - β_l)`, optional per-battle weights.
        Bt = "bt",
        /// Bradley-Terry with a tie counted as half a win and half a loss.
        BtTie = "bt-tie",
        /// Rao-Kupper with `η = max(softplus_{β=0.1}(eta - 22.5), 0.02)`.
        Rk = "rk",
        /// Rao-Kupper reparametrised: `θ = exp(eta) + 1.000001`.
        RkReparam = "rk-reparam",
        /// Rao-Kupper with a "both bad" tie and its own `gamma` (`θ = exp(eta) + 1.02`).
        Ba = "ba",
        /// Generalised Rao-Kupper with a "both bad" tie at `π_γ = 1` (float32).
        Grk = "grk",
        /// `grk` under its other registered name.
        Bag = "bag",
    }
}

/// What a P2L head outputs for a batch of prompts.
pub struct HeadOutputs<'a> {
    pub coefs: &'a Tensor,
    pub eta: Option<&'a Tensor>,
    pub gamma: Option<&'a Tensor>,
}

impl P2lLoss {
    /// Whether the head has a tie parameter `eta`.
    pub fn needs_eta(self) -> bool {
        !matches!(self, P2lLoss::Bt | P2lLoss::BtTie)
    }

    /// Whether the head has a "both bad" parameter `gamma`.
    pub fn needs_gamma(self) -> bool {
        self == P2lLoss::Ba
    }

    /// Columns of `labels`: 2 for `bt`, 3 (with the tie indicator) for the others.
    pub fn label_columns(self) -> i64 {
        if self == P2lLoss::Bt {
            2
        } else {
            3
        }
    }

    /// Largest tie indicator the loss models (`bt-tie`, `rk`, `rk-reparam`: 1; `ba`, `grk`: 2).
    pub fn max_tie(self) -> i64 {
        match self {
            P2lLoss::Bt => 0,
            P2lLoss::BtTie | P2lLoss::Rk | P2lLoss::RkReparam => 1,
            P2lLoss::Ba | P2lLoss::Grk | P2lLoss::Bag => 2,
        }
    }

    /// The mean loss of a batch. `weights` (`[B]`) scale each battle's term for `bt` and
    /// `bt-tie`; the reference's other losses test a weight tensor for truth, which fails for
    /// any batch of more than one, so they take none here.
    pub fn loss(
        self,
        head: &HeadOutputs,
        labels: &Tensor,
        weights: Option<&Tensor>,
    ) -> Result<Tensor> {
        let want = self.label_columns();
        if labels.dim() != 2 || labels.size()[1] != want {
            bail!(
                "{self}: labels must be [batch, {want}], got {:?}",
                labels.size()
            );
        }
        if weights.is_some() && !matches!(self, P2lLoss::Bt | P2lLoss::BtTie) {
            bail!("{self}: battle weights apply to bt and bt-tie only");
        }
        let eta = || {
            head.eta
                .ok_or_else(|| anyhow::anyhow!("{self}: the head must output eta"))
        };
        let labels = labels.to_kind(Kind::Int64);
        check_labels(
            self,
            &labels,
            head.coefs.size().last().copied().unwrap_or(0),
        )?;
        let per_battle = match self {
            P2lLoss::Bt => -delta(head.coefs, &labels).log_sigmoid(),
            P2lLoss::BtTie => bt_tie(head.coefs, &labels),
            P2lLoss::Rk => rao_kupper(head.coefs, eta()?, &labels),
            P2lLoss::RkReparam => rk_reparam(head.coefs, eta()?, &labels),
            P2lLoss::Ba => {
                let gamma = head
                    .gamma
                    .ok_or_else(|| anyhow::anyhow!("ba: the head must output gamma"))?;
                both_bad(head.coefs, eta()?, gamma.exp(), 1.02, 1e-2, &labels)
            }
            P2lLoss::Grk | P2lLoss::Bag => {
                let coefs = head.coefs.to_kind(Kind::Float);
                let eta = eta()?.to_kind(Kind::Float);
                let one = Tensor::ones_like(&eta);
                both_bad(&coefs, &eta, one, 1.000001, 1e-6, &labels)
            }
        };
        let per_battle = match weights {
            Some(w) => per_battle * w,
            None => per_battle,
        };
        Ok(per_battle.mean(per_battle.kind()))
    }
}

/// Model indices in `0..models`, tie indicators in `0..=loss.max_tie()`: out-of-range values
/// are errors here rather than libtorch index panics.
fn check_labels(loss: P2lLoss, labels: &Tensor, models: i64) -> Result<()> {
    if labels.size()[0] == 0 {
        bail!("{loss}: an empty batch");
    }
    let idx = labels.narrow(1, 0, 2);
    let (lo, hi) = (idx.min().int64_value(&[]), idx.max().int64_value(&[]));
    if lo < 0 || hi >= models {
        bail!("{loss}: a model index outside 0..{models} in the labels ({lo}..={hi})");
    }
    if loss.label_columns() == 3 {
        let t = tie(labels);
        let (lo, hi) = (t.min().int64_value(&[]), t.max().int64_value(&[]));
        if lo < 0 || hi > loss.max_tie() {
            bail!(
                "{loss}: tie indicators must be in 0..={} (0 no tie, 1 tie{}), got {lo}..={hi}",
                loss.max_tie(),
                if loss.max_tie() == 2 {
                    ", 2 both bad"
                } else {
                    ""
                }
            );
        }
    }
    Ok(())
}

/// `β_winner - β_loser` per battle, `[B]`.
fn delta(coefs: &Tensor, labels: &Tensor) -> Tensor {
    let paired = coefs.gather(-1, &labels.narrow(1, 0, 2), false);
    paired.select(1, 0) - paired.select(1, 1)
}

/// The tie indicator column, `[B]`.
fn tie(labels: &Tensor) -> Tensor {
    labels.select(1, 2)
}

fn bt_tie(coefs: &Tensor, labels: &Tensor) -> Tensor {
    let d = delta(coefs, labels);
    let win = d.log_sigmoid();
    let half = (d.log_sigmoid() + (-&d).log_sigmoid()) * 0.5;
    -win.where_self(&tie(labels).eq(0), &half)
}

/// p2l's `BETA` of the `rk` loss's softplus.
const BETA: f64 = 0.1;

/// `rk`: `p_w = σ(Δ - η)`, `p_l = σ(-Δ - η)`, `p_t = 1 - p_w - p_l`, the observed one clamped at
/// 1e-3.
fn rao_kupper(coefs: &Tensor, eta: &Tensor, labels: &Tensor) -> Tensor {
    // torch's softplus(x, beta = 0.1) (threshold 20 on beta * x): softplus(0.1 x) / 0.1.
    let eta = (((eta - 22.5) * BETA).softplus() / BETA)
        .squeeze_dim(-1)
        .clamp_min(0.02);
    let d = delta(coefs, labels);
    let p_w = (&d - &eta).sigmoid();
    let p_l = (-&d - &eta).sigmoid();
    let p_t = 1.0 - &p_w - &p_l;
    let p = p_w.where_self(&tie(labels).eq(0), &p_t);
    -p.clamp_min(1e-3).log()
}

/// `rk-reparam`: `θ = e^eta + 1.000001`, `p_w = π_w / (π_w + θ π_l + 1)`, `p_l` likewise,
/// `p_t = 1 - p_w - p_l`, clamped at 1e-6.
fn rk_reparam(coefs: &Tensor, eta: &Tensor, labels: &Tensor) -> Tensor {
    let theta = eta.exp() + 1.000001;
    let (pi_w, pi_l) = strengths(coefs, labels);
    let p_w = &pi_w / (&pi_w + &theta * &pi_l + 1.0);
    let p_l = &pi_l / (&pi_l + &theta * &pi_w + 1.0);
    let p_t = 1.0 - &p_w - &p_l;
    let p = Tensor::cat(&[p_w, p_t], 1).gather(1, &tie(labels).unsqueeze(-1), false);
    -p.clamp_min(1e-6).log().squeeze_dim(-1)
}

/// `ba` and `grk`: win, tie and "both bad" tie with strength `π_γ`; `θ = e^eta + offset`;
/// the observed probability clamped at `floor`.
fn both_bad(
    coefs: &Tensor,
    eta: &Tensor,
    pi_gamma: Tensor,
    offset: f64,
    floor: f64,
    labels: &Tensor,
) -> Tensor {
    let theta = eta.exp() + offset;
    let (pi_w, pi_l) = strengths(coefs, labels);
    let p_w = &pi_w / (&pi_w + &theta * &pi_l + &pi_gamma);
    let p_l = &pi_l / (&pi_l + &theta * &pi_w + &pi_gamma);
    let p_bb = &pi_gamma / (&pi_gamma + &pi_w + &pi_l);
    let p_t = 1.0 - &p_w - &p_l - &p_bb;
    let p = Tensor::cat(&[p_w, p_t, p_bb], 1).gather(1, &tie(labels).unsqueeze(-1), false);
    -p.clamp_min(floor).log().squeeze_dim(-1)
}

/// `(e^β_winner, e^β_loser)`, each `[B, 1]`.
fn strengths(coefs: &Tensor, labels: &Tensor) -> (Tensor, Tensor) {
    let w = coefs.gather(-1, &labels.narrow(1, 0, 1), false).exp();
    let l = coefs.gather(-1, &labels.narrow(1, 1, 1), false).exp();
    (w, l)
}
