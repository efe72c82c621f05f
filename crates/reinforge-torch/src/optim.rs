//! AdamW with global gradient-norm clipping and a saveable state.
//!
//! Written here rather than taken from `tch::nn::Optimizer` because that optimiser's moments
//! cannot be read or restored, and a resumed run must continue exactly where it stopped.
//! The update is PyTorch's `torch.optim.AdamW` (decoupled weight decay, bias correction).

use std::path::Path;

use anyhow::{Context, Result};
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

    /// Saves the moments and step count to a safetensors file.
    pub fn save(&self, path: &Path) -> Result<()> {
        let mut named: Vec<(String, Tensor)> =
            vec![("steps".into(), Tensor::from_slice(&[self.steps]))];
        for (i, n) in self.names.iter().enumerate() {
            named.push((format!("exp_avg.{n}"), self.exp_avg[i].shallow_clone()));
            named.push((
                format!("exp_avg_sq.{n}"),
                self.exp_avg_sq[i].shallow_clone(),
            ));
        }
        Tensor::write_safetensors(&named, path)
            .with_context(|| format!("writing optimizer state {}", path.display()))
    }

    /// Restores the moments and step count written by [`AdamW::save`].
    pub fn load(&mut self, path: &Path) -> Result<()> {
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
