//! The decoder-only transformer of the Llama/Qwen2 family: RMSNorm, rotary position
//! embeddings, grouped-query attention and a SwiGLU MLP, with a tied or untied output head.
//!
//! Parameter names follow Hugging Face (`model.layers.0.self_attn.q_proj.weight`, ...) so one
//! implementation serves the tiny models of tests and real checkpoints. The layout follows
//! candle-transformers' `llama.rs` and HF `modeling_llama.py` (rotate-half RoPE convention).

use tch::nn::{self, Init, Path};
use tch::{Kind, Tensor};

use crate::cache::KvCache;
use crate::config::ModelConfig;

const INIT_STD: f64 = 0.02;

fn weight(p: &Path, name: &str, out: usize, inp: usize) -> Tensor {
    (p / name).var(
        "weight",
        &[out as i64, inp as i64],
        Init::Randn {
            mean: 0.0,
            stdev: INIT_STD,
        },
    )
}

/// A linear map `x W^T (+ b)` with HF parameter names.
#[derive(Debug)]
struct Linear {
    w: Tensor,
    b: Option<Tensor>,
}

impl Linear {
    fn new(p: &Path, name: &str, inp: usize, out: usize, bias: bool) -> Self {
        let w = weight(p, name, out, inp);
        let b = bias.then(|| (p / name).var("bias", &[out as i64], Init::Const(0.0)));
        Self { w, b }
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        x.linear(&self.w, self.b.as_ref())
    }
}

/// Root-mean-square layer norm (no centring, no bias).
#[derive(Debug)]
struct RmsNorm {
    w: Tensor,
    eps: f64,
}

impl RmsNorm {
    fn new(p: &Path, size: usize, eps: f64) -> Self {
        Self {
            w: p.var("weight", &[size as i64], Init::Const(1.0)),
            eps,
        }
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        let size = self.w.size();
        x.rms_norm(size.as_slice(), Some(&self.w), self.eps)
    }
}

/// Rotary embedding tables, indexed by absolute position.
#[derive(Debug)]
struct Rope {
    cos: Tensor,
    sin: Tensor,
}

impl Rope {
    fn new(cfg: &ModelConfig, device: tch::Device) -> Self {
        let d = cfg.head_dim() as i64;
        let inv_freq = Tensor::arange_start_step(0, d, 2, (Kind::Double, device))
            .divide_scalar(d as f64)
            .multiply_scalar(-(cfg.rope_theta.ln()))
            .exp();
        let t = Tensor::arange(cfg.max_position_embeddings as i64, (Kind::Double, device));
        let freqs = t.outer(&inv_freq);
        let emb = Tensor::cat(&[&freqs, &freqs], -1);
        Self {
            cos: emb.cos().to_kind(Kind::Float),
            sin: emb.sin().to_kind(Kind::Float),
        }
    }

    /// `(cos, sin)` of shape `[B, 1, T, D]` for `positions` of shape `[B, T]`.
    fn tables(&self, positions: &Tensor, kind: Kind) -> (Tensor, Tensor) {
        let (b, t) = positions.size2().expect("positions are [B, T]");
        let flat = positions.flatten(0, 1);
        let pick = |table: &Tensor| {
            table
                .index_select(0, &flat)
                .view([b, 1, t, -1])
                .to_kind(kind)
        };
        (pick(&self.cos), pick(&self.sin))
    }
}

fn rotate_half(x: &Tensor) -> Tensor {
    let half = x.size()[3] / 2;
    Tensor::cat(&[x.narrow(3, half, half).neg(), x.narrow(3, 0, half)], 3)
}

fn apply_rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Tensor {
    x * cos + rotate_half(x) * sin
}

#[derive(Debug)]
struct Attention {
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    heads: i64,
    kv_heads: i64,
    head_dim: i64,
}

impl Attention {
    fn new(p: &Path, cfg: &ModelConfig) -> Self {
        let (h, kv, d) = (cfg.num_attention_heads, cfg.kv_heads(), cfg.head_dim());
        let bias = cfg.attention_bias;
        Self {
            q: Linear::new(p, "q_proj", cfg.hidden_size, h * d, bias),
            k: Linear::new(p, "k_proj", cfg.hidden_size, kv * d, bias),
            v: Linear::new(p, "v_proj", cfg.hidden_size, kv * d, bias),
            o: Linear::new(p, "o_proj", h * d, cfg.hidden_size, false),
            heads: h as i64,
            kv_heads: kv as i64,
            head_dim: d as i64,
        }
    }

    fn forward(
        &self,
        x: &Tensor,
        rope: &(Tensor, Tensor),
        mask: &Tensor,
        cache: Option<&mut (Tensor, Tensor)>,
    ) -> Tensor {
        let (b, t, _) = x.size3().expect("hidden states are [B, T, H]");
        let split = |y: Tensor, n: i64| y.view([b, t, n, self.head_dim]).transpose(1, 2);
        let q = apply_rope(&split(self.q.forward(x), self.heads), &rope.0, &rope.1);
        let mut k = apply_rope(&split(self.k.forward(x), self.kv_heads), &rope.0, &rope.1);
        let mut v = split(self.v.forward(x), self.kv_heads);
        if let Some(c) = cache {
            if c.0.numel() > 0 {
                k = Tensor::cat(&[&c.0, &k], 2);
                v = Tensor::cat(&[&c.1, &v], 2);
            }
            *c = (k.shallow_clone(), v.shallow_clone());
        }
        let gqa = self.heads != self.kv_heads;
        let y = Tensor::scaled_dot_product_attention(&q, &k, &v, Some(mask), 0.0, false, None, gqa);
        self.o.forward(
            &y.transpose(1, 2)
                .reshape([b, t, self.heads * self.head_dim]),
        )
    }
}

#[derive(Debug)]
struct Mlp {
    gate: Linear,
    up: Linear,
    down: Linear,
}

impl Mlp {
    fn new(p: &Path, cfg: &ModelConfig) -> Self {
        let (h, i) = (cfg.hidden_size, cfg.intermediate_size);
        Self {
            gate: Linear::new(p, "gate_proj", h, i, false),
            up: Linear::new(p, "up_proj", h, i, false),
            down: Linear::new(p, "down_proj", i, h, false),
        }
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        self.down
            .forward(&(self.gate.forward(x).silu() * self.up.forward(x)))
    }
}

#[derive(Debug)]
struct Block {
    norm1: RmsNorm,
    attn: Attention,
    norm2: RmsNorm,
    mlp: Mlp,
}

/// The causal language model. Create it inside a [`nn::VarStore`] to own its parameters.
#[derive(Debug)]
pub struct Transformer {
    cfg: ModelConfig,
    embed: Tensor,
    blocks: Vec<Block>,
    norm: RmsNorm,
    head: Option<Tensor>,
    rope: Rope,
}

/// Input of one forward pass.
pub struct ForwardInput<'a> {
    /// Token ids `[B, T]` (int64).
    pub ids: &'a Tensor,
    /// Absolute position of each token `[B, T]` (int64).
    pub positions: &'a Tensor,
    /// Which keys are real tokens `[B, S]` (bool), `S` = cached length + `T`.
    pub key_mask: &'a Tensor,
}

impl Transformer {
    /// Builds the model's parameters under `p` (the root of a var store), randomly initialised
    /// with the normal(0, 0.02) of HF's `initializer_range`.
    pub fn new(p: &Path, cfg: &ModelConfig) -> Self {
        let m = p / "model";
        let embed = (&m / "embed_tokens").var(
            "weight",
            &[cfg.vocab_size as i64, cfg.hidden_size as i64],
            Init::Randn {
                mean: 0.0,
                stdev: INIT_STD,
            },
        );
        let blocks = (0..cfg.num_hidden_layers)
            .map(|i| {
                let l = &m / "layers" / i;
                Block {
                    norm1: RmsNorm::new(
                        &(&l / "input_layernorm"),
                        cfg.hidden_size,
                        cfg.rms_norm_eps,
                    ),
                    attn: Attention::new(&(&l / "self_attn"), cfg),
                    norm2: RmsNorm::new(
                        &(&l / "post_attention_layernorm"),
                        cfg.hidden_size,
                        cfg.rms_norm_eps,
                    ),
                    mlp: Mlp::new(&(&l / "mlp"), cfg),
                }
            })
            .collect();
        let norm = RmsNorm::new(&(&m / "norm"), cfg.hidden_size, cfg.rms_norm_eps);
        let head = (!cfg.tie_word_embeddings)
            .then(|| weight(p, "lm_head", cfg.vocab_size, cfg.hidden_size));
        Self {
            cfg: cfg.clone(),
            embed,
            blocks,
            norm,
            head,
            rope: Rope::new(cfg, p.device()),
        }
    }

    /// The configuration the model was built from.
    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    /// Logits `[B, T, V]` for the tokens of `input` (or `[B, 1, V]` for the last position only
    /// when `last_only`). With a cache, the keys/values of this call are appended to it.
    pub fn forward(
        &self,
        input: &ForwardInput,
        cache: Option<&mut KvCache>,
        last_only: bool,
    ) -> Tensor {
        let mut h = self.hidden(input, cache);
        if last_only {
            let t = h.size()[1];
            h = h.narrow(1, t - 1, 1);
        }
        self.logits(&h)
    }

    /// Final hidden states `[B, T, H]` (after the last RMSNorm) for the tokens of `input`:
    /// what the LM head and value heads (PPO critics, reward models) read.
    pub fn hidden(&self, input: &ForwardInput, mut cache: Option<&mut KvCache>) -> Tensor {
        let t = input.ids.size()[1];
        let past = cache.as_ref().map_or(0, |c| c.len());
        let mut x = Tensor::embedding(&self.embed, input.ids, -1, false, false);
        let rope = self.rope.tables(input.positions, x.kind());
        let mask = attention_mask(input.key_mask, past, t);
        for (i, block) in self.blocks.iter().enumerate() {
            let layer_cache = cache.as_mut().map(|c| c.layer_mut(i));
            x = &x
                + block
                    .attn
                    .forward(&block.norm1.forward(&x), &rope, &mask, layer_cache);
            x = &x + block.mlp.forward(&block.norm2.forward(&x));
        }
        if let Some(c) = cache {
            c.advance(t);
        }
        self.norm.forward(&x)
    }

    /// Logits `[.., V]` of final hidden states `[.., H]` (the LM head, tied or not).
    pub fn logits(&self, hidden: &Tensor) -> Tensor {
        hidden.linear::<Tensor>(self.head.as_ref().unwrap_or(&self.embed), None)
    }
}

/// The boolean attention mask `[B, 1, T, S]` for `T` queries after `past` cached positions:
/// causal, restricted to real keys, and always letting a query see itself so that padding
/// rows never produce an all-masked softmax (NaN).
fn attention_mask(key_mask: &Tensor, past: i64, t: i64) -> Tensor {
    let device = key_mask.device();
    let s = past + t;
    let q_pos = Tensor::arange_start(past, s, (Kind::Int64, device)).view([t, 1]);
    let k_pos = Tensor::arange(s, (Kind::Int64, device)).view([1, s]);
    let causal = k_pos.le_tensor(&q_pos);
    let diagonal = k_pos.eq_tensor(&q_pos);
    let keys = key_mask.to_kind(Kind::Bool).unsqueeze(1).unsqueeze(1);
    (keys.logical_and(&causal)).logical_or(&diagonal)
}

/// Positions `[B, T]` for right- or left-padded rows: the count of real tokens before each one.
pub fn positions_from_mask(mask: &Tensor) -> Tensor {
    (mask.to_kind(Kind::Int64).cumsum(1, Kind::Int64) - 1).clamp_min(0)
}

/// Number of parameters of `vs`.
pub fn num_parameters(vs: &nn::VarStore) -> i64 {
    vs.trainable_variables()
        .iter()
        .map(|t| t.numel() as i64)
        .sum()
}
