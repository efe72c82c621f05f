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

/// Both moments of every parameter (exp_avg, exp_avg_sq), one tensor per parameter.
pub type Moments = (Vec<Tensor>, Vec<Tensor>);

/// AdamW hyper-parameters (PyTorch names and defaults). The learning rate is not one: each
/// step is given it (`clip_and_step(max_norm, lr)`), so a run's schedule has one home, its
/// trainer's config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdamWConfig {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        Self {
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
    layout: Layout,
}

/// The flat parameter space cut into buckets of `bucket` elements (the last one padded), each
/// bucket into `world` slices of `slice` elements; rank `r` owns slice `r` of every bucket.
#[derive(Debug, Clone, Copy)]
struct Layout {
    world: i64,
    rank: i64,
    bucket: i64,
    slice: i64,
    buckets: i64,
}

/// Elements per ZeRO-1 bucket: 25 MB of float32, as the gradient all-reduce's buckets.
const BUCKET_ELEMENTS: i64 = (25 << 20) / 4;

impl Layout {
    fn new(total: i64, world: i64, rank: i64) -> Self {
        let slice = (BUCKET_ELEMENTS.min(total.max(1)) + world - 1) / world;
        let bucket = slice * world;
        Self {
            world,
            rank,
            bucket,
            slice,
            buckets: (total + bucket - 1) / bucket,
        }
    }

    /// Elements `[start, start + len)` of the concatenation of `flat` (1-D tensors), zeros past
    /// the end, as a new tensor.
    fn copy_range(&self, flat: &[Tensor], start: i64, len: i64) -> Tensor {
        let out = Tensor::zeros([len], (flat[0].kind(), flat[0].device()));
        let mut offset = 0;
        for t in flat {
            let n = t.size()[0];
            let (lo, hi) = (start.max(offset), (start + len).min(offset + n));
            if lo < hi {
                out.narrow(0, lo - start, hi - lo)
                    .copy_(&t.narrow(0, lo - offset, hi - lo));
            }
            offset += n;
        }
        out
    }

    /// Writes `src` into elements `[start, start + src.len)` of the concatenation of `flat`
    /// (views of the parameters), ignoring the padding.
    fn write_range(&self, flat: &[Tensor], start: i64, src: &Tensor) {
        let len = src.size()[0];
        let mut offset = 0;
        for t in flat {
            let n = t.size()[0];
            let (lo, hi) = (start.max(offset), (start + len).min(offset + n));
            if lo < hi {
                t.narrow(0, lo - offset, hi - lo)
                    .copy_(&src.narrow(0, lo - start, hi - lo));
            }
            offset += n;
        }
    }

    /// This rank's slices of every bucket of the concatenation of `flat`, one tensor.
    fn my_slices(&self, flat: &[Tensor]) -> Tensor {
        let parts: Vec<Tensor> = (0..self.buckets)
            .map(|k| self.copy_range(flat, k * self.bucket + self.rank * self.slice, self.slice))
            .collect();
        Tensor::cat(&parts, 0)
    }
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
        // The moments are allocated on first use (a sharded optimizer never holds them whole).
        let (exp_avg, exp_avg_sq) = (vec![], vec![]);
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
        let layout = Layout::new(total, pg.world() as i64, pg.rank() as i64);
        if self.exp_avg.is_empty() {
            let zeros = || {
                Tensor::zeros(
                    [layout.buckets * layout.slice],
                    (tch::Kind::Float, self.params[0].device()),
                )
            };
            self.exp_avg = vec![zeros()];
            self.exp_avg_sq = vec![zeros()];
        } else {
            let m: Vec<Tensor> = self.exp_avg.iter().map(|t| t.reshape([-1])).collect();
            let v: Vec<Tensor> = self.exp_avg_sq.iter().map(|t| t.reshape([-1])).collect();
            self.exp_avg = vec![layout.my_slices(&m)];
            self.exp_avg_sq = vec![layout.my_slices(&v)];
        }
        self.shard = Some(Shard { pg, layout });
    }

    /// Whether the moments are sharded (ZeRO-1).
    pub fn is_sharded(&self) -> bool {
        self.shard.is_some()
    }

    /// Bytes of optimizer state this process holds (the two moments).
    pub fn state_bytes(&self) -> usize {
        if self.exp_avg.is_empty() {
            // Not allocated yet: what the first step will allocate.
            let one: usize = self
                .params
                .iter()
                .map(|p| p.numel() * p.kind().elt_size_in_bytes())
                .sum();
            return 2 * one;
        }
        self.exp_avg
            .iter()
            .chain(&self.exp_avg_sq)
            .map(|t| t.numel() * t.kind().elt_size_in_bytes())
            .sum()
    }

    /// The ZeRO-1 step, bucket by bucket so no full-size buffer is made: reduce-scatters each
    /// bucket of the summed gradients (no separate all-reduce), clips by the global norm,
    /// updates this rank's slice of every bucket and all-gathers the bucket back into the
    /// parameters. Every rank calls it at the same point. Unsharded, it is
    /// [`Self::clip_and_step`].
    pub fn clip_and_step_sharded(&mut self, max_norm: f64, lr: f64) -> Result<GradStep> {
        let Some(shard) = &self.shard else {
            return Ok(self.clip_and_step(max_norm, lr));
        };
        let _guard = tch::no_grad_guard();
        let (pg, l) = (shard.pg.clone(), shard.layout);
        let grads: Vec<Tensor> = self
            .params
            .iter()
            .map(|p| {
                let g = p.grad();
                if g.defined() {
                    g.reshape([-1])
                } else {
                    p.zeros_like().reshape([-1])
                }
            })
            .collect();
        // Pass 1: this rank's slice of every bucket of the summed gradients, and the norm.
        let mine = Tensor::zeros(
            [l.buckets * l.slice],
            (tch::Kind::Float, self.params[0].device()),
        );
        for k in 0..l.buckets {
            let bucket = l.copy_range(&grads, k * l.bucket, l.bucket);
            let parts: Vec<Tensor> = (0..l.world)
                .map(|r| bucket.narrow(0, r * l.slice, l.slice))
                .collect();
            let reduced = pg.reduce_scatter(&parts, ReduceOp::Sum)?;
            mine.narrow(0, k * l.slice, l.slice).copy_(&reduced);
        }
        let sq = mine.square().sum(tch::Kind::Float);
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
        let mut g = mine;
        if max_norm > 0.0 && coef < 1.0 {
            let _ = g.g_mul_scalar_(coef);
        }
        // Pass 2: update this rank's slices, all-gather each bucket into the parameters.
        self.steps += 1;
        let c = self.cfg.clone();
        let step = self.steps;
        let flat: Vec<Tensor> = self.params.iter().map(|p| p.reshape([-1])).collect();
        for k in 0..l.buckets {
            let at = k * l.slice;
            let mut p = l.copy_range(&flat, k * l.bucket + l.rank * l.slice, l.slice);
            let gk = g.narrow(0, at, l.slice);
            let mut m = self.exp_avg[0].narrow(0, at, l.slice);
            let mut v = self.exp_avg_sq[0].narrow(0, at, l.slice);
            adamw_update(&mut p, &mut m, &mut v, &gk, (&c, lr, step));
            let bucket = Tensor::zeros([l.bucket], (p.kind(), p.device()));
            let outs: Vec<Tensor> = (0..l.world)
                .map(|r| bucket.narrow(0, r * l.slice, l.slice))
                .collect();
            pg.all_gather_into(&p, &outs)?;
            l.write_range(&flat, k * l.bucket, &bucket);
        }
        Ok(GradStep {
            grad_norm,
            stepped: true,
        })
    }

    /// With sharded moments, gathers them from every rank into per-parameter tensors so the
    /// writing rank can [`Self::save`] them in the unsharded layout (collective: every rank
    /// calls it; only a rank that `keep`s them holds the whole state, bucket by bucket).
    pub fn gather_state(&self, keep: bool) -> Result<Option<Moments>> {
        let Some(shard) = &self.shard else {
            return Ok(None);
        };
        let _guard = tch::no_grad_guard();
        let l = shard.layout;
        let unflat = |t: &Tensor| -> Result<Vec<Tensor>> {
            let out: Vec<Tensor> = if keep {
                self.params.iter().map(|p| p.zeros_like()).collect()
            } else {
                vec![]
            };
            let flat: Vec<Tensor> = out.iter().map(|o| o.reshape([-1])).collect();
            let bucket = Tensor::zeros([l.bucket], (t.kind(), t.device()));
            for k in 0..l.buckets {
                let outs: Vec<Tensor> = (0..l.world)
                    .map(|r| bucket.narrow(0, r * l.slice, l.slice))
                    .collect();
                shard
                    .pg
                    .all_gather_into(&t.narrow(0, k * l.slice, l.slice), &outs)?;
                if keep {
                    l.write_range(&flat, k * l.bucket, &bucket);
                }
            }
            Ok(out)
        };
        Ok(Some((
            unflat(&self.exp_avg[0])?,
            unflat(&self.exp_avg_sq[0])?,
        )))
    }

    /// Allocates zero moments for every parameter if they are not there yet.
    fn ensure_moments(&mut self) {
        if self.exp_avg.is_empty() && self.shard.is_none() {
            self.exp_avg = self.params.iter().map(Tensor::zeros_like).collect();
            self.exp_avg_sq = self.params.iter().map(Tensor::zeros_like).collect();
        }
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

    /// Drops every gradient (PyTorch's `zero_grad(set_to_none=True)`, its default), so the
    /// parameter-sized gradient buffers are not held between updates (while sampling, while
    /// saving); the next backward pass allocates them again. The next step is unchanged for
    /// every parameter that backward pass reaches (all of them in the RL update, whose
    /// micro-batches with no row define zero gradients); one it does not reach is skipped by
    /// [`Self::step`], as PyTorch's AdamW skips a `None` gradient, where a zeroed gradient would
    /// have stepped it on its moments. Without the shim (no libtorch headers at build time) the
    /// gradients are zeroed instead.
    pub fn release_grads(&mut self) {
        for p in &mut self.params {
            release_grad(p);
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
        self.ensure_moments();
        self.steps += 1;
        let (c, step) = (&self.cfg, self.steps);
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
            adamw_update(p, m, v, &g, (c, lr, step));
        }
    }

    /// Saves the moments and step count to a safetensors file. Sharded moments are saved from
    /// `gathered` ([`Self::gather_state`]), in the unsharded layout.
    pub fn save_gathered(&self, path: &Path, gathered: Option<&Moments>) -> Result<()> {
        let (m, v) = match (gathered, &self.shard) {
            (Some((m, v)), _) => (m.as_slice(), v.as_slice()),
            (None, None) if self.exp_avg.is_empty() => {
                let z: Vec<Tensor> = self.params.iter().map(Tensor::zeros_like).collect();
                return self.write(path, &z, &z);
            }
            (None, None) => (self.exp_avg.as_slice(), self.exp_avg_sq.as_slice()),
            (None, Some(_)) => anyhow::bail!(
                "sharded optimizer state must be gathered from every rank before saving"
            ),
        };
        self.write(path, m, v)
    }

    /// Writes the step count and moments `m`, `v` (one per parameter).
    fn write(&self, path: &Path, m: &[Tensor], v: &[Tensor]) -> Result<()> {
        let mut named: Vec<(String, Tensor)> =
            // host: the step count is saved with the state on disk.
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
        self.ensure_moments();
        for (i, n) in self.names.iter().enumerate() {
            self.exp_avg[i].copy_(get(&format!("exp_avg.{n}"))?);
            self.exp_avg_sq[i].copy_(get(&format!("exp_avg_sq.{n}"))?);
        }
        Ok(())
    }
}

/// One AdamW update of `p` with gradient `g` and moments `m`, `v`, in place, at optimizer step
/// `step` (1-based): libtorch's fused kernel where it is built in and accepts the tensors,
/// else [`adamw_update_unfused`].
fn adamw_update(
    p: &mut Tensor,
    m: &mut Tensor,
    v: &mut Tensor,
    g: &Tensor,
    (c, lr, step): (&AdamWConfig, f64, i64),
) {
    #[cfg(reinforge_fused_adamw)]
    {
        match fused::adamw(p, m, v, g, (c, lr, step)) {
            Ok(()) => return,
            Err(e) => fused::warn_once(&e),
        }
    }
    adamw_update_unfused(p, m, v, g, (c, lr, step));
}

/// [`adamw_update`] as tch tensor expressions (PyTorch's single-tensor `torch.optim.AdamW`
/// math: decoupled weight decay, `lerp` for the first moment), with three parameter-sized
/// temporaries.
fn adamw_update_unfused(
    p: &mut Tensor,
    m: &mut Tensor,
    v: &mut Tensor,
    g: &Tensor,
    (c, lr, step): (&AdamWConfig, f64, i64),
) {
    let bc1 = 1.0 - c.beta1.powi(step as i32);
    let bc2 = 1.0 - c.beta2.powi(step as i32);
    if c.weight_decay != 0.0 {
        let _ = p.g_mul_scalar_(1.0 - lr * c.weight_decay);
    }
    let _ = m.lerp_(g, 1.0 - c.beta1);
    let _ = v.g_mul_scalar_(c.beta2);
    let _ = v.g_add_(&g.square().g_mul_scalar_(1.0 - c.beta2));
    let mut denom = v.sqrt();
    let _ = denom.g_div_scalar_(bc2.sqrt()).g_add_scalar_(c.eps);
    let _ = p.g_sub_(&(&*m / &denom).g_mul_scalar_(lr / bc1));
}

/// Drops `p`'s gradient: [`fused::clear_grad`] where the shim is built, else zeroes it.
fn release_grad(p: &mut Tensor) {
    if !p.grad().defined() {
        return;
    }
    #[cfg(reinforge_fused_adamw)]
    fused::clear_grad(p);
    #[cfg(not(reinforge_fused_adamw))]
    {
        let _ = p.grad().zero_();
    }
}

/// The binding of csrc/optim_shim.cpp (libtorch's `_fused_adamw_`, dropping a gradient).
#[cfg(reinforge_fused_adamw)]
mod fused {
    use std::ffi::{c_char, c_void, CStr};

    use super::AdamWConfig;
    use tch::Tensor;

    extern "C" {
        fn rf_clear_grad(t: *mut c_void);
        #[allow(clippy::too_many_arguments)]
        fn rf_fused_adamw(
            p: *mut c_void,
            g: *mut c_void,
            m: *mut c_void,
            v: *mut c_void,
            step: f64,
            lr: f64,
            beta1: f64,
            beta2: f64,
            weight_decay: f64,
            eps: f64,
            err: *mut c_char,
            len: usize,
        ) -> i32;
    }

    /// One fused AdamW step; `Err` carries libtorch's message (an unsupported dtype or device).
    pub fn adamw(
        p: &mut Tensor,
        m: &mut Tensor,
        v: &mut Tensor,
        g: &Tensor,
        (c, lr, step): (&AdamWConfig, f64, i64),
    ) -> Result<(), String> {
        let mut err = vec![0u8; 512];
        let mut g = g.shallow_clone();
        // SAFETY: each pointer is a live tch tensor (an `at::Tensor*`) for the whole call, and
        // `err` holds `err.len()` bytes; the shim catches every C++ exception.
        let rc = unsafe {
            rf_fused_adamw(
                p.as_mut_ptr().cast(),
                g.as_mut_ptr().cast(),
                m.as_mut_ptr().cast(),
                v.as_mut_ptr().cast(),
                step as f64,
                lr,
                c.beta1,
                c.beta2,
                c.weight_decay,
                c.eps,
                err.as_mut_ptr().cast(),
                err.len(),
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let msg = CStr::from_bytes_until_nul(&err)
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        Err(msg)
    }

    /// Resets `p`'s gradient to undefined (`p.grad = None`).
    pub fn clear_grad(p: &mut Tensor) {
        // SAFETY: `p` is a live tch tensor (an `at::Tensor*`) for the whole call; resetting
        // its gradient cannot throw.
        unsafe { rf_clear_grad(p.as_mut_ptr().cast()) }
    }

    /// Says once per process that the fused kernel refused and the slower path runs.
    pub fn warn_once(e: &str) {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            eprintln!("warning: fused AdamW unavailable ({e}); using the unfused update");
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    #[test]
    fn the_fused_kernel_and_the_tch_expression_take_the_same_steps() {
        let c = AdamWConfig {
            weight_decay: 0.1,
            ..AdamWConfig::default()
        };
        let randn =
            || crate::runtime::with_generator(|| Tensor::randn([4096], (Kind::Float, Device::Cpu)));
        let init = randn();
        let fresh = || (init.copy(), init.zeros_like(), init.zeros_like());
        let (mut p1, mut m1, mut v1) = fresh();
        let (mut p2, mut m2, mut v2) = fresh();
        for step in 1..=5 {
            let g = randn();
            #[cfg(reinforge_fused_adamw)]
            fused::adamw(&mut p1, &mut m1, &mut v1, &g, (&c, 1e-2, step)).unwrap();
            #[cfg(not(reinforge_fused_adamw))]
            adamw_update(&mut p1, &mut m1, &mut v1, &g, (&c, 1e-2, step));
            adamw_update_unfused(&mut p2, &mut m2, &mut v2, &g, (&c, 1e-2, step));
        }
        let diff = |a: &Tensor, b: &Tensor| (a - b).abs().max().double_value(&[]);
        assert!(diff(&p1, &init) > 1e-2, "the parameters moved");
        assert!(diff(&p1, &p2) < 1e-6, "parameters {}", diff(&p1, &p2));
        assert!(diff(&m1, &m2) < 1e-6 && diff(&v1, &v2) < 1e-6);
    }

    #[test]
    fn released_gradients_are_dropped_and_leave_the_steps_unchanged() {
        let run = |release: bool| {
            let vs = VarStore::new(Device::Cpu);
            let w = vs.root().var("w", &[3], tch::nn::Init::Const(1.0));
            let mut opt = AdamW::new(&vs, AdamWConfig::default());
            for step in 1..=3 {
                opt.zero_grad();
                (&w * &w * Tensor::from_slice(&[1.0f32, -2.0, step as f32]))
                    .sum(Kind::Float)
                    .backward();
                assert!(opt.clip_and_step(1.0, 0.1).stepped);
                if release {
                    opt.release_grads();
                    #[cfg(reinforge_fused_adamw)]
                    assert!(!w.grad().defined(), "the gradient is dropped");
                }
            }
            Vec::<f32>::try_from(&w).unwrap()
        };
        let kept = run(false);
        assert_ne!(kept, vec![1.0; 3], "the parameters moved");
        assert_eq!(run(true), kept);
    }

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
