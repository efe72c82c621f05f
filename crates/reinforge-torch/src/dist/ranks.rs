//! Plain numbers across the ranks of a data-parallel job: sums, gathers of `f64` rows and of
//! serialised maps. The trainer's crates call these, so they never build a tensor to talk to
//! the other ranks.

use std::collections::BTreeMap;

use anyhow::Result;
use tch::{Kind, Tensor};

use crate::dist::{ProcessGroup, ReduceOp};

/// `x` summed over every rank of `pg` (float64).
pub fn sum_over_ranks(pg: &ProcessGroup, x: f64) -> Result<f64> {
    // host: a number summed over ranks (an NCCL group stages it through the GPU).
    let t = Tensor::from_slice(&[x]);
    pg.all_reduce(&[&t], ReduceOp::Sum)?;
    Ok(t.double_value(&[0]))
}

/// Every rank's `local` values, in rank order (equal lengths on every rank).
pub fn gather_f64(pg: &ProcessGroup, local: &[f64]) -> Result<Vec<f64>> {
    // host: numbers gathered from every rank (staged through the GPU under NCCL).
    let parts = pg.all_gather(&Tensor::from_slice(local).to_kind(Kind::Double))?;
    let mut out = Vec::with_capacity(local.len() * parts.len());
    for p in parts {
        out.extend(Vec::<f64>::try_from(&p)?);
    }
    Ok(out)
}

/// Every rank's `local` map, in rank order (serialised, so ranks may hold different keys).
pub fn gather_maps(
    pg: &ProcessGroup,
    local: &BTreeMap<String, f64>,
) -> Result<Vec<BTreeMap<String, f64>>> {
    let bytes = serde_json::to_vec(local)?;
    let lens = gather_f64(pg, &[bytes.len() as f64])?;
    let width = lens.iter().fold(0.0f64, |a, &b| a.max(b)) as usize;
    let mut padded = bytes.clone();
    padded.resize(width, b' ');
    // host: numbers gathered from every rank (staged through the GPU under NCCL).
    let parts = pg.all_gather(&Tensor::from_slice(&padded))?;
    parts
        .iter()
        .map(|p| Ok(serde_json::from_slice(&Vec::<u8>::try_from(p)?)?))
        .collect()
}
