//! The Bradley-Terry reward-model loss of TRL's `RewardTrainer.compute_loss` (trl 1.16.0):
//! `-log σ(r_chosen - r_rejected - margin)` averaged over pairs, plus
//! `center_rewards_coefficient · mean((r_chosen + r_rejected)²)` when set, and the metrics TRL
//! logs (`accuracy`, `margin`, `min_reward`, `mean_reward`, `max_reward`). Checked against
//! golden vectors from running TRL's own method (`fixtures/oracles/rm/`,
//! `tests/oracles_rm.rs`).

use anyhow::{bail, Result};
use tch::{Kind, Tensor};

/// The loss and TRL's logged metrics.
pub struct RewardLoss {
    pub loss: Tensor,
    /// Share of pairs whose chosen reward is higher.
    pub accuracy: f64,
    /// Mean `r_chosen - r_rejected`.
    pub margin: f64,
    pub min_reward: f64,
    pub mean_reward: f64,
    pub max_reward: f64,
}

/// TRL's reward-model loss of `chosen` and `rejected` rewards (`[B]` each), with optional
/// per-pair `margin` and `center_rewards_coefficient`.
pub fn reward_loss(
    chosen: &Tensor,
    rejected: &Tensor,
    margin: Option<&Tensor>,
    center_rewards_coefficient: Option<f64>,
) -> Result<RewardLoss> {
    if chosen.size() != rejected.size() || chosen.dim() != 1 || chosen.size()[0] == 0 {
        bail!(
            "chosen and rejected rewards must be two non-empty [B] tensors, got {:?} and {:?}",
            chosen.size(),
            rejected.size()
        );
    }
    let diff = chosen - rejected;
    let logits = match margin {
        // A margin column read from the data: on the rewards' device.
        Some(m) => &diff - m.to_device(diff.device()),
        None => diff.shallow_clone(),
    };
    let mut loss = -logits.log_sigmoid().mean(chosen.kind());
    if let Some(c) = center_rewards_coefficient {
        loss = loss + (chosen + rejected).square().mean(chosen.kind()) * c;
    }
    let d = |t: &Tensor| t.detach().to_kind(Kind::Double);
    let all = Tensor::cat(&[d(chosen), d(rejected)], 0);
    Ok(RewardLoss {
        accuracy: d(chosen)
            .gt_tensor(&d(rejected))
            .to_kind(Kind::Double)
            .mean(Kind::Double)
            .double_value(&[]),
        margin: d(&diff).mean(Kind::Double).double_value(&[]),
        min_reward: all.min().double_value(&[]),
        mean_reward: all.mean(Kind::Double).double_value(&[]),
        max_reward: all.max().double_value(&[]),
        loss,
    })
}
