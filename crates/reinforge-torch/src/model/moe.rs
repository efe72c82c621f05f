//! The decoder layer's feed-forward part, dense or sparse: a SwiGLU MLP, or a mixture of
//! SwiGLU experts behind a router (Qwen3-MoE, OLMoE, Mixtral).
//!
//! The sparse MLP follows transformers 5.23 (`Qwen3MoeSparseMoeBlock`, `OlmoeSparseMoeBlock`,
//! `MixtralSparseMoeBlock`): router logits `x W_r^T` (no bias), a float32 softmax over the
//! experts, the top-k of it (`torch.topk` order), renormalised to sum 1 when the config says
//! so (Mixtral always), cast back to the hidden states' dtype; each expert runs on the tokens
//! routed to it and its output, scaled by the token's weight, is summed into the token's row.
//! Every token is routed, padding included, as transformers does.

use tch::nn::Path;
use tch::{Kind, Tensor};

use crate::model::config::{Family, ModelConfig};
use crate::model::layers::{Fill, Linear, Mlp, MLP_NAMES};

/// One sparse layer's routing of a forward pass: for every token (rows in `[B * T]` order).
#[derive(Debug)]
pub struct Routing {
    /// Router logits `[N, E]` (in the hidden states' dtype, as transformers returns them).
    pub logits: Tensor,
    /// The chosen experts `[N, k]` (int64, by decreasing probability).
    pub experts: Tensor,
    /// Their weights `[N, k]` (after the optional renormalisation).
    pub weights: Tensor,
}

/// A mixture of SwiGLU experts behind a linear router.
#[derive(Debug)]
pub(crate) struct SparseMlp {
    router: Linear,
    experts: Vec<Mlp>,
    top_k: i64,
    renormalise: bool,
}

impl SparseMlp {
    /// The sparse MLP of layer path `layer` (`model.layers.i`), with the family's names:
    /// `mlp.gate` and `mlp.experts.e.{gate,up,down}_proj`, or Mixtral's `block_sparse_moe.gate`
    /// and `block_sparse_moe.experts.e.{w1,w3,w2}`.
    fn new(layer: &Path, cfg: &ModelConfig, fill: Fill) -> Self {
        let mixtral = cfg.family().ok() == Some(Family::Mixtral);
        let (module, names) = if mixtral {
            ("block_sparse_moe", ["w1", "w3", "w2"])
        } else {
            ("mlp", ["gate_proj", "up_proj", "down_proj"])
        };
        let p = layer / module;
        let n = cfg.num_experts.unwrap_or(0);
        let (h, width) = (cfg.hidden_size, cfg.expert_size());
        Self {
            router: Linear::new(&p, "gate", h, n, false, fill),
            experts: (0..n)
                .map(|e| Mlp::with(&(&p / "experts" / e), names, h, width, false, fill))
                .collect(),
            top_k: cfg.num_experts_per_tok.unwrap_or(1) as i64,
            renormalise: cfg.renormalise_topk(),
        }
    }

    /// The routing of the tokens `x` (`[N, H]`).
    fn route(&self, x: &Tensor) -> Routing {
        let logits = self.router.forward(x);
        let probs = logits.softmax(-1, Kind::Float);
        let (mut weights, experts) = probs.topk(self.top_k, -1, true, true);
        if self.renormalise {
            weights = &weights / weights.sum_dim_intlist(-1, true, Kind::Float);
        }
        Routing {
            logits,
            experts,
            weights: weights.to_kind(x.kind()),
        }
    }

    /// `[B, T, H]` -> the layer's output and its routing.
    fn forward(&self, x: &Tensor) -> (Tensor, Routing) {
        let size = x.size();
        let flat = x.reshape([-1, size[size.len() - 1]]);
        let routing = self.route(&flat);
        let mut out = flat.zeros_like();
        for (e, expert) in self.experts.iter().enumerate() {
            let hit = routing.experts.eq(e as i64).nonzero();
            if hit.size()[0] == 0 {
                continue;
            }
            let (tokens, slots) = (hit.select(1, 0), hit.select(1, 1));
            let w = routing.weights.index(&[Some(&tokens), Some(&slots)]);
            let y = expert.forward(&flat.index_select(0, &tokens)) * w.unsqueeze(-1);
            out = out.index_add(0, &tokens, &y.to_kind(out.kind()));
        }
        (out.view(size.as_slice()), routing)
    }
}

/// A decoder layer's feed-forward part.
#[derive(Debug)]
pub(crate) enum Ffn {
    Dense(Mlp),
    Sparse(SparseMlp),
}

impl Ffn {
    /// Layer `i`'s feed-forward part under `layer` (`model.layers.i`): sparse where the config
    /// says so.
    pub(crate) fn new(layer: &Path, cfg: &ModelConfig, i: usize, fill: Fill) -> Self {
        if cfg.layer_is_sparse(i) {
            Ffn::Sparse(SparseMlp::new(layer, cfg, fill))
        } else {
            Ffn::Dense(Mlp::with(
                &(layer / "mlp"),
                MLP_NAMES,
                cfg.hidden_size,
                cfg.intermediate_size,
                cfg.mlp_bias,
                fill,
            ))
        }
    }

    /// The output, and the routing of a sparse layer.
    pub(crate) fn forward(&self, x: &Tensor) -> (Tensor, Option<Routing>) {
        match self {
            Ffn::Dense(mlp) => (mlp.forward(x), None),
            Ffn::Sparse(moe) => {
                let (y, r) = moe.forward(x);
                (y, Some(r))
            }
        }
    }

    /// The dense MLP, if this layer has one (LoRA adapts dense MLPs only).
    pub(crate) fn dense(&self) -> Option<&Mlp> {
        match self {
            Ffn::Dense(mlp) => Some(mlp),
            Ffn::Sparse(_) => None,
        }
    }

    /// [`Self::dense`], mutably.
    pub(crate) fn dense_mut(&mut self) -> Option<&mut Mlp> {
        match self {
            Ffn::Dense(mlp) => Some(mlp),
            Ffn::Sparse(_) => None,
        }
    }
}
