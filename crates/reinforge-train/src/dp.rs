//! Data-parallel training across processes (torch.distributed's c10d, see
//! `reinforge_torch::dist`). Every rank runs the same program on its share of each step's
//! batch: it samples its rows (per-row sampling noise keyed by the global row, so the union is
//! what one process would draw), the rewards and lengths are gathered so advantages and group
//! statistics are those of the whole batch (groups never split: the prompts of a step are
//! divided evenly), loss denominators are global, gradients are summed in buckets, and rank 0
//! alone writes metrics and checkpoints. N ranks therefore train like one process holding the
//! whole batch.

use std::ops::Range;
use std::time::Duration;

use anyhow::{bail, Result};
use reinforge_torch::dist::ranks;
use reinforge_torch::dist::{Backend, DistEnv, ProcessGroup};
use reinforge_torch::Device;

/// Seconds a collective may wait for the other ranks before the job fails naming the ranks
/// that stopped (`REINFORGE_DIST_TIMEOUT_S`; default 1800, long enough for rank 0's
/// evaluations and checkpoints).
pub fn timeout() -> Duration {
    let s = std::env::var("REINFORGE_DIST_TIMEOUT_S")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|v| *v > 0.0)
        .unwrap_or(1800.0);
    Duration::from_secs_f64(s)
}

/// This process's place in a data-parallel job and its process group.
pub struct Dp {
    pub pg: std::sync::Arc<ProcessGroup>,
    pub env: DistEnv,
}

impl Dp {
    /// Joins the job torchrun's variables describe (Gloo on CPU, NCCL on CUDA); `None` when
    /// they are unset or name a single process.
    pub fn from_env(device: Device) -> Result<Option<Self>> {
        let Some(env) = DistEnv::from_env()? else {
            return Ok(None);
        };
        if env.world == 1 {
            return Ok(None);
        }
        let backend = match device {
            // host: Gloo is the CPU backend.
            Device::Cpu => Backend::Gloo,
            _ => Backend::Nccl,
        };
        let pg = std::sync::Arc::new(ProcessGroup::init(&env, backend, timeout())?);
        Ok(Some(Self { pg, env }))
    }

    pub fn rank(&self) -> usize {
        self.env.rank
    }

    pub fn world(&self) -> usize {
        self.env.world
    }

    /// This rank's rows of a batch of `n`, `n / world` contiguous rows; `n` must divide
    /// (`what` names the setting in the error).
    pub fn rows(&self, n: usize, what: &str) -> Result<Range<usize>> {
        let w = self.world();
        if !n.is_multiple_of(w) {
            bail!("{what} = {n} must be a multiple of the {w} ranks (groups are never split across ranks)");
        }
        let per = n / w;
        Ok(self.rank() * per..(self.rank() + 1) * per)
    }

    /// Every rank's `local` values, in rank order (equal lengths on every rank).
    pub fn gather(&self, local: &[f64]) -> Result<Vec<f64>> {
        ranks::gather_f64(&self.pg, local)
    }

    /// `x` summed over ranks.
    pub fn sum(&self, x: f64) -> Result<f64> {
        ranks::sum_over_ranks(&self.pg, x)
    }

    /// Waits for every rank (after rank 0 wrote files the others read).
    pub fn barrier(&self) -> Result<()> {
        self.pg.barrier()
    }

    /// Every rank's `local` map, in rank order (serialised, so ranks may hold different keys).
    pub fn gather_maps(
        &self,
        local: &std::collections::BTreeMap<String, f64>,
    ) -> Result<Vec<std::collections::BTreeMap<String, f64>>> {
        ranks::gather_maps(&self.pg, local)
    }
}
