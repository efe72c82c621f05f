//! AdamW with global gradient-norm clipping and a saveable state.
//!
//! Written here rather than taken from `tch::nn::Optimizer` because that optimiser's moments
//! cannot be read or restored, and a resumed run must continue exactly where it stopped.
//! The update is PyTorch's `torch.optim.AdamW` (decoupled weight decay, bias correction).

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};

use crate::dist::{ProcessGroup, ReduceOp};
use serde::{Deserialize, Serialize};
use tch::{nn::VarStore, Tensor};

/// AdamW hyper-parameters (PyTorch names and defaults, except the learning rate).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdamWConfig {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        Self {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
        }
    }
}

/// What [`AdamW::clip_and_step`] did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GradStep {
    /// Global gradient norm before clipping (NaN or infinite when the step was skipped).
    pub grad_norm: f64,
    /// Whether the optimiser stepped (the norm was finite).
    pub stepped: bool,
}

/// The optimiser over every trainable variable of a var store, in name order.
#[derive(Debug)]
pub struct AdamW {
    pub cfg: AdamWConfig,
    names: Vec<String>,
    params: Vec<Tensor>,
    exp_avg: Vec<Tensor>,
    exp_avg_sq: Vec<Tensor>,
    steps: i64,
    /// ZeRO-1: the moments are this rank's slice of the flat parameter vector.
    shard: Option<Shard>,
}

/// Optimizer-state sharding (ZeRO stage 1): the trainable parameters, flattened in name order
/// and padded to a multiple of the world size, split into one contiguous slice per rank.
/// Gradients are summed by a reduce-scatter (each rank receives its slice), each rank updates
/// its slice with its own moments, and the slices are all-gathered back into the parameters.
#[derive(Debug)]
struct Shard {
    pg: Arc<ProcessGroup>,
    /// Elements of all parameters.
    total: i64,
    /// Elements per rank.
    per: i64,
}

impl AdamW {
    /// A fresh optimiser (zero moments) for the variables of `vs`.
    pub fn new(vs: &VarStore, cfg: AdamWConfig) -> Self {
        let mut named: Vec<(String, Tensor)> = vs
            .variables()
            .into_iter()
            .filter(|(_, t)| t.requires_grad())
            .collect();
        named.sort_by(|a, b| a.0.cmp(&b.0));
        let exp_avg = named.iter().map(|(_, t)| t.zeros_like()).collect();
        let exp_avg_sq = named.iter().map(|(_, t)| t.zeros_like()).collect();
        let (names, params) = named.into_iter().unzip();
        Self {
            cfg,
            names,
            params,
            exp_avg,
            exp_avg_sq,
            steps: 0,
            shard: None,
        }
    }

    /// Shards the moments over the ranks of `pg` (ZeRO-1): afterwards this rank keeps
    /// `1 / world` of them, [`Self::clip_and_step_sharded`] replaces the gradient all-reduce
    /// and the step, and [`Self::save`] needs [`Self::gather_state`] on every rank first.
    /// Current moments (a loaded state) carry over.
    pub fn shard_over(&mut self, pg: Arc<ProcessGroup>) {
        let _guard = tch::no_grad_guard();
        let total: i64 = self.params.iter().map(|p| p.numel() as i64).sum();
        let w = pg.world() as i64;
        let per = (total + w - 1) / w;
        let start = pg.rank() as i64 * per;
        let slice = |parts: &[Tensor]| {
            let flat = pad_to(&flatten(parts), per * w);
            flat.narrow(0, start, per).copy()
        };
        self.exp_avg = vec![slice(&self.exp_avg)];
        self.exp_avg_sq = vec![slice(&self.exp_avg_sq)];
        self.shard = Some(Shard { pg, total, per });
    }

    /// Whether the moments are sharded (ZeRO-1).
    pub fn is_sharded(&self) -> bool {
        self.shard.is_some()
    }

    /// Bytes of optimizer state this process holds (the two moments).
    pub fn state_bytes(&self) -> usize {
        self.exp_avg
            .iter()
            .chain(&self.exp_avg_sq)
            .map(|t| t.numel() * t.kind().elt_size_in_bytes())
            .sum()
    }

    /// The ZeRO-1 step: reduce-scatters the summed gradients (no separate all-reduce), clips by
    /// the global norm, updates this rank's slice and all-gathers the parameters. Every rank
    /// calls it at the same point. Unsharded, it is [`Self::clip_and_step`].
    pub fn clip_and_step_sharded(&mut self, max_norm: f64, lr: f64) -> Result<GradStep> {
        let Some(shard) = &self.shard else {
            return Ok(self.clip_and_step(max_norm, lr));
        };
        let _guard = tch::no_grad_guard();
        let (pg, total, per) = (shard.pg.clone(), shard.total, shard.per);
        let w = pg.world() as i64;
        let grads: Vec<Tensor> = self
            .params
            .iter()
            .map(|p| {
                let g = p.grad();
                if g.defined() {
                    g
                } else {
                    p.zeros_like()
                }
            })
            .collect();
        let flat = pad_to(&flatten(&grads), per * w);
        let chunks: Vec<Tensor> = (0..w)
            .map(|k| flat.narrow(0, k * per, per).copy())
            .collect();
        let g = pg.reduce_scatter(&chunks, ReduceOp::Sum)?;
        let sq = g.square().sum(tch::Kind::Float);
        pg.all_reduce(&[&sq], ReduceOp::Sum)?;
        let grad_norm = sq.sqrt().double_value(&[]);
        self.zero_grad();
        if !grad_norm.is_finite() {
            return Ok(GradStep {
                grad_norm,
                stepped: false,
            });
        }
        let coef = max_norm / (grad_norm + 1e-6);
        let g = if max_norm > 0.0 && coef < 1.0 {
            g * coef
        } else {
            g
        };
        self.steps += 1;
        let c = &self.cfg;
        let bc1 = 1.0 - c.beta1.powi(self.steps as i32);
        let bc2 = 1.0 - c.beta2.powi(self.steps as i32);
        let start = pg.rank() as i64 * per;
        let mut p = pad_to(&flatten(&self.params), per * w)
            .narrow(0, start, per)
            .copy();
        if c.weight_decay != 0.0 {
            let _ = p.g_mul_scalar_(1.0 - lr * c.weight_decay);
        }
        let (m, v) = (&mut self.exp_avg[0], &mut self.exp_avg_sq[0]);
        let _ = m.g_mul_scalar_(c.beta1).g_add_(&(&g * (1.0 - c.beta1)));
        let _ = v
            .g_mul_scalar_(c.beta2)
            .g_add_(&(g.square() * (1.0 - c.beta2)));
        let denom = (v.sqrt() / bc2.sqrt()) + c.eps;
        let _ = p.g_sub_(&((&*m / &denom) * (lr / bc1)));
        let full = Tensor::cat(&pg.all_gather(&p)?, 0).narrow(0, 0, total);
        let mut offset = 0;
        for param in &self.params {
            let n = param.numel() as i64;
            param
                .shallow_clone()
                .copy_(&full.narrow(0, offset, n).view(param.size().as_slice()));
            offset += n;
        }
        Ok(GradStep {
            grad_norm,
            stepped: true,
        })
    }

    /// With sharded moments, gathers them from every rank into per-parameter tensors so rank 0
    /// can [`Self::save`] them in the unsharded layout (collective: every rank calls it).
    pub fn gather_state(&self) -> Result<Option<(Vec<Tensor>, Vec<Tensor>)>> {
        let Some(shard) = &self.shard else {
            return Ok(None);
        };
        let _guard = tch::no_grad_guard();
        let unflat = |t: &Tensor| -> Result<Vec<Tensor>> {
            let full = Tensor::cat(&shard.pg.all_gather(t)?, 0);
            let mut offset = 0;
            Ok(self
                .params
                .iter()
                .map(|p| {
                    let n = p.numel() as i64;
                    let part = full.narrow(0, offset, n).view(p.size().as_slice()).copy();
                    offset += n;
                    part
                })
                .collect())
        };
        Ok(Some((
            unflat(&self.exp_avg[0])?,
            unflat(&self.exp_avg_sq[0])?,
        )))
    }

    /// Number of updates taken.
    pub fn steps(&self) -> i64 {
        self.steps
    }

    /// Sets every gradient to zero.
    pub fn zero_grad(&mut self) {
        for p in &mut self.params {
            let mut g = p.grad();
            if g.defined() {
                let _ = g.zero_();
            }
        }
    }

    /// Scales gradients so their global L2 norm is at most `max_norm` (as
    /// `torch.nn.utils.clip_grad_norm_`) and returns the norm before clipping. A NaN or infinite
    /// norm leaves the gradients as they are.
    pub fn clip_grad_norm(&mut self, max_norm: f64) -> f64 {
        let _guard = tch::no_grad_guard();
        let grads: Vec<Tensor> = self
            .params
            .iter()
            .map(Tensor::grad)
            .filter(Tensor::defined)
            .collect();
        if grads.is_empty() {
            return 0.0;
        }
        let sq: Vec<Tensor> = grads
            .iter()
            .map(|g| g.square().sum(tch::Kind::Float))
            .collect();
        let norm = Tensor::stack(&sq, 0)
            .sum(tch::Kind::Float)
            .sqrt()
            .double_value(&[]);
        let coef = max_norm / (norm + 1e-6);
        if norm.is_finite() && max_norm > 0.0 && coef < 1.0 {
            for mut g in grads {
                let _ = g.g_mul_scalar_(coef);
            }
        }
        norm
    }

    /// Clips the gradients to `max_norm` and takes one step with learning rate `lr`, unless
    /// their norm is NaN or infinite: then the gradients are zeroed and neither the weights nor
    /// the moments change (verl's actor and critic skip such a step), so one bad batch cannot
    /// ruin the model.
    pub fn clip_and_step(&mut self, max_norm: f64, lr: f64) -> GradStep {
        let grad_norm = self.clip_grad_norm(max_norm);
        let stepped = grad_norm.is_finite();
        if stepped {
            self.step(lr);
        } else {
            self.zero_grad();
        }
        GradStep { grad_norm, stepped }
    }

    /// One AdamW update with learning rate `lr` from the current gradients.
    pub fn step(&mut self, lr: f64) {
        let _guard = tch::no_grad_guard();
        self.steps += 1;
        let c = &self.cfg;
        let bc1 = 1.0 - c.beta1.powi(self.steps as i32);
        let bc2 = 1.0 - c.beta2.powi(self.steps as i32);
        for ((p, m), v) in self
            .params
            .iter_mut()
            .zip(&mut self.exp_avg)
            .zip(&mut self.exp_avg_sq)
        {
            let g = p.grad();
            if !g.defined() {
                continue;
            }
            if c.weight_decay != 0.0 {
                let _ = p.g_mul_scalar_(1.0 - lr * c.weight_decay);
            }
            let _ = m.g_mul_scalar_(c.beta1).g_add_(&(&g * (1.0 - c.beta1)));
            let _ = v
                .g_mul_scalar_(c.beta2)
                .g_add_(&(g.square() * (1.0 - c.beta2)));
            let denom = (v.sqrt() / bc2.sqrt()) + c.eps;
            let _ = p.g_sub_(&((&*m / &denom) * (lr / bc1)));
        }
    }

    /// Saves the moments and step count to a safetensors file. Sharded moments are saved from
    /// `gathered` ([`Self::gather_state`]), in the unsharded layout.
    pub fn save_gathered(
        &self,
        path: &Path,
        gathered: Option<&(Vec<Tensor>, Vec<Tensor>)>,
    ) -> Result<()> {
        let (m, v) = match (gathered, &self.shard) {
            (Some((m, v)), _) => (m.as_slice(), v.as_slice()),
            (None, None) => (self.exp_avg.as_slice(), self.exp_avg_sq.as_slice()),
            (None, Some(_)) => anyhow::bail!(
                "sharded optimizer state must be gathered from every rank before saving"
            ),
        };
        let mut named: Vec<(String, Tensor)> =
            vec![("steps".into(), Tensor::from_slice(&[self.steps]))];
        for (i, n) in self.names.iter().enumerate() {
            named.push((format!("exp_avg.{n}"), m[i].shallow_clone()));
            named.push((format!("exp_avg_sq.{n}"), v[i].shallow_clone()));
        }
        Tensor::write_safetensors(&named, path)
            .with_context(|| format!("writing optimizer state {}", path.display()))
    }

    /// Saves the moments and step count (unsharded moments).
    pub fn save(&self, path: &Path) -> Result<()> {
        self.save_gathered(path, None)
    }

    /// Restores the moments and step count written by [`AdamW::save`] (unsharded: call
    /// [`Self::shard_over`] after loading).
    pub fn load(&mut self, path: &Path) -> Result<()> {
        if self.shard.is_some() {
            anyhow::bail!("load the optimizer state before sharding it");
        }
        let _guard = tch::no_grad_guard();
        let tensors: std::collections::HashMap<String, Tensor> = Tensor::read_safetensors(path)
            .with_context(|| format!("reading optimizer state {}", path.display()))?
            .into_iter()
            .collect();
        let get = |k: &str| {
            tensors
                .get(k)
                .with_context(|| format!("{}: missing tensor `{k}`", path.display()))
        };
        self.steps = get("steps")?.int64_value(&[0]);
        for (i, n) in self.names.iter().enumerate() {
            self.exp_avg[i].copy_(get(&format!("exp_avg.{n}"))?);
            self.exp_avg_sq[i].copy_(get(&format!("exp_avg_sq.{n}"))?);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    #[test]
    fn a_nonfinite_gradient_norm_skips_the_step() {
        let vs = VarStore::new(Device::Cpu);
        let w = vs.root().var("w", &[3], tch::nn::Init::Const(1.0));
        let mut opt = AdamW::new(&vs, AdamWConfig::default());
        for bad in [f64::NAN, f64::INFINITY] {
            opt.zero_grad();
            (&w * Tensor::from_slice(&[1.0f32, bad as f32, 2.0]))
                .sum(Kind::Float)
                .backward();
            let s = opt.clip_and_step(1.0, 0.1);
            assert!(!s.stepped && !s.grad_norm.is_finite());
            assert_eq!(Vec::<f32>::try_from(&w).unwrap(), vec![1.0; 3]);
            assert_eq!(opt.steps(), 0, "moments and step count untouched");
            let g = Vec::<f32>::try_from(w.grad()).unwrap();
            assert_eq!(g, vec![0.0; 3], "gradients zeroed");
        }
        (&w * 2.0).sum(Kind::Float).backward();
        let s = opt.clip_and_step(1.0, 0.1);
        assert!(s.stepped && (s.grad_norm - 12f64.sqrt()).abs() < 1e-5);
        assert_eq!(opt.steps(), 1);
        assert!(Vec::<f32>::try_from(&w).unwrap().iter().all(|&x| x < 1.0));
    }
}

/// The tensors flattened and concatenated (one 1-D tensor).
fn flatten(parts: &[Tensor]) -> Tensor {
    let flat: Vec<Tensor> = parts.iter().map(|t| t.reshape([-1])).collect();
    Tensor::cat(&flat, 0)
}

/// `t` (1-D) zero-padded to `len` elements.
fn pad_to(t: &Tensor, len: i64) -> Tensor {
    let n = t.size()[0];
    if n >= len {
        t.shallow_clone()
    } else {
        t.constant_pad_nd([0, len - n])
    }
}
