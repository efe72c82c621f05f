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
    /// `torch.nn.utils.clip_grad_norm_`) and returns the norm before clipping.
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
        if max_norm > 0.0 && coef < 1.0 {
            for mut g in grads {
                let _ = g.g_mul_scalar_(coef);
            }
        }
        norm
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
