//! The building blocks every decoder family shares: linear maps with HF parameter names and
//! optional LoRA adapters, RMSNorm, and the SwiGLU MLP (the dense MLP, and each expert of a
//! sparse one).

use tch::nn::{Init, Path};
use tch::{Kind, Tensor};

use crate::model::lora::{Adapter, LoraConfig};

const INIT_STD: f64 = 0.02;

/// How new parameters are filled: HF's normal(0, 0.02) for a fresh model, or zeros (cheap)
/// when a checkpoint overwrites them right after.
#[derive(Clone, Copy)]
pub(crate) enum Fill {
    Random,
    Zeros,
}

impl Fill {
    pub(crate) fn matrix(self) -> Init {
        match self {
            Fill::Random => Init::Randn {
                mean: 0.0,
                stdev: INIT_STD,
            },
            Fill::Zeros => Init::Const(0.0),
        }
    }
}

pub(crate) fn weight(p: &Path, name: &str, out: usize, inp: usize, fill: Fill) -> Tensor {
    (p / name).var("weight", &[out as i64, inp as i64], fill.matrix())
}

/// A linear map `x W^T (+ b)` with HF parameter names, plus an optional LoRA adapter
/// (see [`crate::model::lora`]).
#[derive(Debug)]
pub(crate) struct Linear {
    pub(crate) w: Tensor,
    pub(crate) b: Option<Tensor>,
    pub(crate) lora: Option<Adapter>,
}

impl Linear {
    pub(crate) fn new(
        p: &Path,
        name: &str,
        inp: usize,
        out: usize,
        bias: bool,
        fill: Fill,
    ) -> Self {
        let w = weight(p, name, out, inp, fill);
        let b = bias.then(|| (p / name).var("bias", &[out as i64], Init::Const(0.0)));
        Self { w, b, lora: None }
    }

    pub(crate) fn forward(&self, x: &Tensor) -> Tensor {
        let y = crate::kernels::linear::linear(x, &self.w, self.b.as_ref());
        match &self.lora {
            Some(adapter) => y + adapter.forward(x),
            None => y,
        }
    }

    /// Adds an adapter whose parameters live under `p` (this projection's path).
    pub(crate) fn add_lora(&mut self, p: &Path, cfg: &LoraConfig) {
        let size = self.w.size();
        self.lora = Some(Adapter::new(p, size[1] as usize, size[0] as usize, cfg));
    }

    /// `w` with the adapter folded in, leaving the model unchanged.
    pub(crate) fn merged_weight(&self) -> Tensor {
        tch::no_grad(|| match &self.lora {
            Some(adapter) => &self.w + adapter.delta().to_kind(self.w.kind()),
            None => self.w.copy(),
        })
    }
}

/// Root-mean-square layer norm (no centring, no bias).
#[derive(Debug)]
pub(crate) struct RmsNorm {
    w: Tensor,
    eps: f64,
}

impl RmsNorm {
    pub(crate) fn new(p: &Path, size: usize, eps: f64) -> Self {
        Self {
            // Ones even when loading: a checkpoint overwrites them, and they cost nothing.
            w: p.var("weight", &[size as i64], Init::Const(1.0)),
            eps,
        }
    }

    pub(crate) fn forward(&self, x: &Tensor) -> Tensor {
        if let Some(y) = crate::kernels::sampling_ops::rms_norm(x, &self.w, self.eps) {
            return y;
        }
        let size = self.w.size();
        if x.kind() == self.w.kind() {
            return x.rms_norm(size.as_slice(), Some(&self.w), self.eps);
        }
        // A low-precision input with float32 weights (bf16 autocast: Qwen3's q/k norms read
        // bf16 projections): transformers' `LlamaRMSNorm` normalises in float32, rounds back
        // to the input's dtype, then scales by the float32 weight (a float32 result).
        x.to_kind(Kind::Float)
            .rms_norm(size.as_slice(), None::<Tensor>, self.eps)
            .to_kind(x.kind())
            * &self.w
    }
}

#[derive(Debug)]
pub(crate) struct Mlp {
    pub(crate) gate: Linear,
    pub(crate) up: Linear,
    pub(crate) down: Linear,
}

/// The projections' names of a decoder's dense MLP (`model.layers.N.mlp.*`).
pub(crate) const MLP_NAMES: [&str; 3] = ["gate_proj", "up_proj", "down_proj"];

impl Mlp {
    /// A SwiGLU MLP `hidden -> width -> hidden` whose gate, up and down projections are named
    /// `names` under `p` (an expert of Mixtral: `w1`, `w3`, `w2`).
    pub(crate) fn with(
        p: &Path,
        names: [&str; 3],
        h: usize,
        i: usize,
        bias: bool,
        fill: Fill,
    ) -> Self {
        Self {
            gate: Linear::new(p, names[0], h, i, bias, fill),
            up: Linear::new(p, names[1], h, i, bias, fill),
            down: Linear::new(p, names[2], i, h, bias, fill),
        }
    }

    pub(crate) fn forward(&self, x: &Tensor) -> Tensor {
        let (gate, up) = (self.gate.forward(x), self.up.forward(x));
        let act =
            crate::kernels::sampling_ops::silu_mul(&gate, &up).unwrap_or_else(|| gate.silu() * up);
        self.down.forward(&act)
    }
}
