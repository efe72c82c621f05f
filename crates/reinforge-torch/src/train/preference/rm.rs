//! The reward model's step (`train-rm`): rewards of both sides of each pair read at the last
//! token, and TRL's `RewardTrainer` loss ([`crate::train::loss::reward_model`]).

use anyhow::Result;
use tch::Tensor;

use super::{per_row, read_without_grad, Figures, Forward, Pairs, Stepped, Update};
use crate::model::memory::Memory;
use crate::model::reward_model::RewardModel;
use crate::train::loss::reward_model::{reward_loss, RewardLoss};

/// What the reward-model loss logs besides its value, under TRL's names.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RewardMetrics {
    /// Share of pairs whose chosen response scores higher.
    pub accuracy: f64,
    /// Mean `r_chosen - r_rejected`.
    pub margin: f64,
    pub min_reward: f64,
    pub mean_reward: f64,
    pub max_reward: f64,
}

/// Rewards of `rows`, chosen and rejected, read through `fwd` (padded or packed rows: the
/// hidden state at each row's last non-pad token is the same).
fn scores(fwd: &Forward, rm: &RewardModel, pairs: &Pairs, rows: &[usize]) -> (Tensor, Tensor) {
    let s = rm.scores_with(&pairs.sequences(rows), |batch| fwd.hidden(batch));
    let b = rows.len() as i64;
    (s.narrow(0, 0, b), s.narrow(0, b, b))
}

/// TRL's loss of the rewards of `rows`, with the data's margins when it has them.
fn loss_of(
    pairs: &Pairs,
    rows: &[usize],
    (c, r): (&Tensor, &Tensor),
    center: Option<f64>,
) -> Result<RewardLoss> {
    let margin = pairs.margins.as_ref().map(|m| per_row(m, rows));
    reward_loss(c, r, margin.as_ref(), center)
}

/// The loss value and metrics of `out`.
fn figures(out: &RewardLoss) -> Figures<RewardMetrics> {
    Figures {
        loss: out.loss.double_value(&[]),
        metrics: RewardMetrics {
            accuracy: out.accuracy,
            margin: out.margin,
            min_reward: out.min_reward,
            mean_reward: out.mean_reward,
            max_reward: out.max_reward,
        },
    }
}

/// The loss and metrics over every pair of `pairs`, without gradients, read in `memory`'s
/// micro-batches (its packing and token budget) or batches of `batch` pairs (`center`: TRL's
/// `center_rewards_coefficient`).
pub fn evaluate(
    rm: &RewardModel,
    pairs: &Pairs,
    (batch, memory): (usize, &Memory),
    center: Option<f64>,
) -> Result<Figures<RewardMetrics>> {
    let rows: Vec<usize> = (0..pairs.len()).collect();
    let tokens = |r| pairs.tokens(r);
    let read = read_without_grad(&rm.policy, (memory, batch), &rows, tokens, 2, |mb, fwd| {
        let (sc, sr) = scores(fwd, rm, pairs, mb);
        vec![sc, sr]
    });
    let _guard = tch::no_grad_guard();
    Ok(figures(&loss_of(
        pairs,
        &rows,
        (&read[0], &read[1]),
        center,
    )?))
}

/// One optimizer step of `rm` (whose backbone is `up.policy`) on `rows` of `pairs`.
pub fn step(
    up: Update,
    rm: &RewardModel,
    (pairs, rows): (&Pairs, &[usize]),
    center: Option<f64>,
) -> Result<Stepped<RewardMetrics>> {
    let tokens = |r| pairs.tokens(r);
    let (mut sides, deferred) =
        up.share(rows.len())
            .read_deferred(&rm.policy, rows, 2, tokens, move |local, fwd| {
                let (c, r) = scores(fwd, rm, pairs, local);
                vec![c, r]
            })?;
    let (r, c) = (
        sides.pop().unwrap_or_default(),
        sides.pop().unwrap_or_default(),
    );
    let out = loss_of(pairs, rows, (&c, &r), center)?;
    let grad = up.apply(&out.loss, deferred)?;
    Ok((figures(&out), grad))
}
