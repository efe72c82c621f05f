//! A data-parallel rank's view of a step (see `crate::dp`): its own rows of the sampled batch,
//! the whole batch's rewards and lengths (gathered, so advantages and group statistics are the
//! single-process ones), and environment metrics combined over the ranks.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use anyhow::Result;

use crate::dp::Dp;
use crate::env::{EnvMetrics, Rollout};

/// One rank's rows of a step, with the whole batch's rewards and lengths.
pub struct Shard {
    /// This rank's rollouts (all of them in a single process).
    pub rollouts: Vec<Rollout>,
    /// Every row's reward, in global order.
    pub rewards: Vec<f64>,
    /// Every row's completion length, in global order.
    pub lens: Vec<usize>,
    /// The global rows `rollouts` are.
    pub local: Range<usize>,
}

/// Keeps this rank's rows of the step's `rollouts` (the sampler left the others empty) and
/// gathers every rank's rewards and lengths; a single process keeps everything.
pub fn keep_rows(dp: Option<&Dp>, rollouts: Vec<Rollout>, rewards: Vec<f64>) -> Result<Shard> {
    let Some(dp) = dp else {
        let lens = rollouts.iter().map(|r| r.tokens.len()).collect();
        let local = 0..rollouts.len();
        return Ok(Shard {
            rollouts,
            rewards,
            lens,
            local,
        });
    };
    let local = dp.rows(rollouts.len(), "the step's rollouts")?;
    let mine: Vec<Rollout> = rollouts[local.clone()].to_vec();
    let rewards = dp.gather(&rewards[local.clone()])?;
    let lens_local: Vec<f64> = mine.iter().map(|r| r.tokens.len() as f64).collect();
    let lens = dp
        .gather(&lens_local)?
        .iter()
        .map(|&l| l as usize)
        .collect();
    Ok(Shard {
        rollouts: mine,
        rewards,
        lens,
        local,
    })
}

/// Environment metrics are means over rollouts: with equal shards, the whole batch's value is
/// the mean over ranks (a key a rank lacks counts as 0 there, so conditional means are
/// approximate). Maps travel as JSON, since ranks may hold different keys.
pub fn env_metrics(dp: Option<&Dp>, local: EnvMetrics) -> Result<EnvMetrics> {
    let Some(dp) = dp else {
        return Ok(local);
    };
    let all: Vec<BTreeMap<String, f64>> = dp.gather_maps(&local)?;
    let keys: BTreeSet<String> = all.iter().flat_map(|m| m.keys().cloned()).collect();
    Ok(keys
        .into_iter()
        .map(|k| {
            let sum: f64 = all.iter().map(|m| m.get(&k).copied().unwrap_or(0.0)).sum();
            (k, sum / all.len() as f64)
        })
        .collect())
}
