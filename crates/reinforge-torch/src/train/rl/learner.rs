//! The RL step's second call into this crate, [`update`]: the advantages go into the packed
//! batch, then the critic's update (GAE) and the policy's run (verl's `update_critic`,
//! `update_actor`).

use anyhow::{bail, Result};

use super::critic::{update_critic, ValueConfig, ValueStats};
use super::pack::{Advantages, Packed};
use super::update::{policy_update, DataParallel, UpdateConfig, UpdateStats};
use crate::dist::ranks::gather_f64;
use crate::dist::ProcessGroup;
use crate::model::policy::Policy;
use crate::model::value::Critic;
use crate::train::optim::AdamW;

/// The models an update trains, with their optimizers.
pub struct Learner<'a> {
    pub policy: &'a Policy,
    pub opt: &'a mut AdamW,
    /// PPO's critic.
    pub critic: Option<(&'a Critic, &'a mut AdamW)>,
}

/// A data-parallel rank's place in an update: its rows are the global rows from `row_offset`.
#[derive(Clone, Copy)]
pub struct RankRows<'a> {
    pub pg: &'a ProcessGroup,
    pub row_offset: usize,
}

/// What one update runs.
pub struct UpdatePlan<'a> {
    /// The policy update's settings; `None` skips it (PPO's critic warm-up).
    pub policy: Option<&'a UpdateConfig>,
    /// Row order of each policy pass (shuffled by the caller, for reproducibility).
    pub orders: &'a [Vec<i64>],
    /// The critic update's settings and row orders (with [`Advantages::Gae`]).
    pub critic: Option<(&'a ValueConfig, &'a [Vec<i64>])>,
    pub dp: Option<RankRows<'a>>,
}

/// What an update measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Updated {
    pub policy: UpdateStats,
    pub critic: Option<ValueStats>,
}

/// The RL step's second call: sets the advantages in `packed`, updates the critic towards its
/// returns (GAE), then the policy (verl's `update_critic`, `update_actor`).
pub fn update(
    learner: Learner,
    packed: &mut Packed,
    advantages: &Advantages,
    plan: &UpdatePlan,
) -> Result<Updated> {
    super::count_call();
    packed.set_advantages(advantages);
    let critic = match (advantages, learner.critic, plan.critic) {
        (Advantages::Outcome { .. }, _, _) => None,
        (
            Advantages::Gae {
                values, returns, ..
            },
            Some((c, opt)),
            Some((cfg, orders)),
        ) => Some(update_critic(
            packed,
            c,
            opt,
            (values, returns),
            cfg,
            orders,
        )),
        _ => bail!("GAE advantages need the critic and its settings"),
    };
    let dp = match plan.dp {
        Some(r) => Some(DataParallel {
            pg: r.pg,
            row_offset: r.row_offset,
            global_row_tokens: gather_f64(r.pg, &packed.batch.row_tokens())?,
        }),
        None => None,
    };
    let policy = match plan.policy {
        Some(cfg) => policy_update(
            learner.policy,
            learner.opt,
            &packed.batch,
            cfg,
            plan.orders,
            dp.as_ref(),
        )?,
        None => UpdateStats::default(),
    };
    Ok(Updated { policy, critic })
}
