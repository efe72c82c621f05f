//! The RL step's tensor side, in two calls per step whatever the preset (verl's driver makes
//! one call per stage to the workers that own the tensors): [`pack`] runs every forward pass
//! before the update (old and reference log-probs, TIS, the critic's values, the reference KL
//! of PPO's reward) and [`update`] runs the critic's update and the policy's. Between them the
//! trainer computes advantages from plain numbers (reinforge-rl).
//!
//! - `pack.rs`: the rollout batch and the forward passes (call 1);
//! - `learner.rs`: the update call (call 2), which runs
//! - `critic.rs`: the value objective and its mini-batch update, and
//! - `update.rs`: the policy objective and its mini-batch update.

pub mod critic;
pub mod learner;
mod minibatch;
pub mod pack;
pub mod update;

use std::cell::Cell;

pub use critic::{value_objective, value_update, ValueBatch, ValueConfig, ValueInputs, ValueStats};
pub use learner::{update, Learner, RankRows, UpdatePlan, Updated};
pub use pack::{
    pack, Advantages, LogprobGap, PackModels, PackOptions, Packed, RolloutBatch, RolloutRef, Rows,
};
pub use update::{
    policy_objective, policy_update, DataParallel, MiniBatchInputs, ObjectiveStats, UpdateConfig,
    UpdateStats,
};

thread_local! {
    static CALLS: Cell<usize> = const { Cell::new(0) };
}

/// Counts one call of the step API.
fn count_call() {
    CALLS.with(|c| c.set(c.get() + 1));
}

/// Calls of the step API ([`pack`], [`update`]) made on this thread so far: a test reads it
/// around one step to check that every preset crosses into this crate exactly twice.
pub fn calls_on_this_thread() -> usize {
    CALLS.with(Cell::get)
}
