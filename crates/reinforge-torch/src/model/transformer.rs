//! The decoder-only transformer of the Llama/Qwen2/Qwen3/Mistral families and their MoE
//! kin (Qwen3-MoE, OLMoE, Mixtral): RMSNorm, rotary position embeddings (optionally llama3- or
//! linearly scaled), grouped-query attention with an optional sliding window, q/k RMSNorm
//! (per head: Qwen3; whole width with `clip_qkv`: OLMoE) and a dense or sparse SwiGLU MLP
//! ([`crate::model::moe`]), with a tied or untied output head. The vision-language families
//! (Qwen2-VL, Qwen2.5-VL) add a vision tower whose image features replace the embeddings of
//! the image-placeholder tokens, and M-RoPE: three position streams (temporal, height,
//! width), each rotating its `mrope_section` of the frequencies.
//!
//! Parameter names follow Hugging Face (`model.layers.0.self_attn.q_proj.weight`, ...) so one
//! implementation serves the tiny models of tests and real checkpoints. The layout follows
//! candle-transformers' `llama.rs` and HF `modeling_llama.py` / `modeling_qwen3.py` /
//! `modeling_mistral.py` (transformers 5.23; rotate-half RoPE convention).

use tch::nn::{self, Path};
use tch::{Kind, Tensor};

use crate::model::cache::KvCache;
use crate::model::config::{ModelConfig, QkNorm, RopeScaling};
use crate::model::images::ImageInput;
use crate::model::layers::{weight, Fill, Linear, RmsNorm};
use crate::model::lora::LoraConfig;
use crate::model::moe::{Ffn, Routing};
use crate::model::vision::tower::VisionTower;

/// Rotary embedding tables, indexed by absolute position.
#[derive(Debug)]
struct Rope {
    cos: Tensor,
    sin: Tensor,
    /// M-RoPE: the position stream (0 temporal, 1 height, 2 width) each table column reads,
    /// `[D]` (int64); `None` for one stream.
    streams: Option<Tensor>,
}

impl Rope {
    /// Tables for positions `0..max_position_embeddings`, computed in float32 like HF's
    /// `*RotaryEmbedding` (`_compute_default_rope_parameters`, transformers 5.23) so long
    /// positions round the same way.
    fn new(cfg: &ModelConfig, device: tch::Device) -> Self {
        let inv_freq = inv_freq(cfg, device);
        let t = Tensor::arange(cfg.max_position_embeddings as i64, (Kind::Float, device));
        let freqs = t.outer(&inv_freq);
        let emb = Tensor::cat(&[&freqs, &freqs], -1);
        // Frequency pair j rotates by stream s where j falls in section s; the second half of
        // the columns repeats the first (`recomposition_frequencies`, transformers 5.23).
        let streams = cfg.mrope_section.as_ref().map(|sections| {
            let half: Vec<i64> = (0i64..)
                .zip(sections)
                .flat_map(|(s, &n)| std::iter::repeat_n(s, n))
                .collect();
            Tensor::from_slice(&[half.as_slice(), half.as_slice()].concat()).to_device(device)
        });
        Self {
            cos: emb.cos(),
            sin: emb.sin(),
            streams,
        }
    }

    /// `(cos, sin)` of shape `[B, 1, T, D]` for `positions` of shape `[B, T]` (every stream
    /// the same, as transformers expands them) or, with M-RoPE, `[3, B, T]`.
    fn tables(&self, positions: &Tensor, kind: Kind) -> (Tensor, Tensor) {
        if positions.dim() == 3 {
            return self.mrope_tables(positions, kind);
        }
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

    /// M-RoPE tables for positions `[3, B, T]`: each column from its stream's row.
    fn mrope_tables(&self, positions: &Tensor, kind: Kind) -> (Tensor, Tensor) {
        let (s, b, t) = positions.size3().expect("M-RoPE positions are [3, B, T]");
        let streams = self
            .streams
            .as_ref()
            .expect("three position streams need a vision-language config");
        assert_eq!(s, 3, "M-RoPE positions have three streams");
        let d = streams.size()[0];
        let flat = positions.flatten(0, 2);
        let column = streams.view([1, 1, 1, d]).expand([1, b, t, d], false);
        let pick = |table: &Tensor| {
            table
                .index_select(0, &flat)
                .view([3, b, t, d])
                .gather(0, &column, false)
                .view([b, 1, t, d])
                .to_kind(kind)
        };
        (pick(&self.cos), pick(&self.sin))
    }
}

/// Inverse frequencies `theta^(-2i/d)` (float32), remapped by `rope_scaling`.
fn inv_freq(cfg: &ModelConfig, device: tch::Device) -> Tensor {
    let d = cfg.head_dim() as i64;
    let exponents = Tensor::arange_start_step(0, d, 2, (Kind::Int64, device))
        .to_kind(Kind::Float)
        .divide_scalar(d as f64);
    let inv = Tensor::pow_scalar(cfg.rope_theta, &exponents).reciprocal();
    match &cfg.rope_scaling {
        None => inv,
        Some(rs) if rs.rope_type == "linear" => inv.divide_scalar(rs.factor),
        Some(rs) => llama3_inv_freq(&inv, rs, cfg.max_position_embeddings),
    }
}

/// Llama 3.x frequency remap: long wavelengths are divided by `factor`, short ones kept, and
/// the band between interpolated smoothly (`_compute_llama3_parameters`, transformers 5.23
/// `modeling_rope_utils.py`).
fn llama3_inv_freq(inv: &Tensor, rs: &RopeScaling, max_pos: usize) -> Tensor {
    let factor = rs.factor;
    let low = rs.low_freq_factor.expect("validated");
    let high = rs.high_freq_factor.expect("validated");
    let old_len = rs.original_max_position_embeddings.unwrap_or(max_pos) as f64;
    let (low_wavelen, high_wavelen) = (old_len / low, old_len / high);
    let wavelen = inv.reciprocal().multiply_scalar(2.0 * std::f64::consts::PI);
    let scaled = inv.where_self(&wavelen.le(low_wavelen), &inv.divide_scalar(factor));
    let smooth = (wavelen.reciprocal().multiply_scalar(old_len) - low) / (high - low);
    let smoothed: Tensor =
        (smooth.ones_like() - &smooth) * scaled.divide_scalar(factor) + &smooth * &scaled;
    let medium = wavelen
        .ge(high_wavelen)
        .logical_and(&wavelen.le(low_wavelen));
    smoothed.where_self(&medium, &scaled)
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
    /// The RMSNorm of queries and keys before RoPE (Qwen3: per head; OLMoE: whole width).
    qk_norm: Option<(RmsNorm, RmsNorm)>,
    /// Whether `qk_norm` normalises whole projections (OLMoE) rather than each head.
    qk_norm_whole: bool,
    /// OLMoE's clamp of queries, keys and values (after the norms, before RoPE).
    clip_qkv: Option<f64>,
    heads: i64,
    kv_heads: i64,
    head_dim: i64,
}

impl Attention {
    fn new(p: &Path, cfg: &ModelConfig, fill: Fill) -> Self {
        let (h, kv, d) = (cfg.num_attention_heads, cfg.kv_heads(), cfg.head_dim());
        let (bias, o_bias) = (cfg.qkv_bias(), cfg.o_bias());
        let widths = match cfg.qk_norm() {
            QkNorm::None => None,
            QkNorm::PerHead => Some((d, d)),
            QkNorm::Whole => Some((h * d, kv * d)),
        };
        let qk_norm = widths.map(|(q, k)| {
            (
                RmsNorm::new(&(p / "q_norm"), q, cfg.rms_norm_eps),
                RmsNorm::new(&(p / "k_norm"), k, cfg.rms_norm_eps),
            )
        });
        Self {
            q: Linear::new(p, "q_proj", cfg.hidden_size, h * d, bias, fill),
            k: Linear::new(p, "k_proj", cfg.hidden_size, kv * d, bias, fill),
            v: Linear::new(p, "v_proj", cfg.hidden_size, kv * d, bias, fill),
            o: Linear::new(p, "o_proj", h * d, cfg.hidden_size, o_bias, fill),
            qk_norm,
            qk_norm_whole: cfg.qk_norm() == QkNorm::Whole,
            clip_qkv: cfg.clip_qkv,
            heads: h as i64,
            kv_heads: kv as i64,
            head_dim: d as i64,
        }
    }

    fn forward(
        &self,
        x: &Tensor,
        rope: &(Tensor, Tensor),
        how: &Attend,
        cache: Option<(&mut KvCache, usize)>,
    ) -> Tensor {
        let (b, t, _) = x.size3().expect("hidden states are [B, T, H]");
        let heads = |y: Tensor, n: i64| y.view([b, t, n, self.head_dim]);
        let (mut q, mut k, mut v) = (self.q.forward(x), self.k.forward(x), self.v.forward(x));
        if let (Some((qn, kn)), true) = (&self.qk_norm, self.qk_norm_whole) {
            q = qn.forward(&q);
            k = kn.forward(&k);
        }
        if let Some(c) = self.clip_qkv {
            (q, k, v) = (q.clamp(-c, c), k.clamp(-c, c), v.clamp(-c, c));
        }
        let (mut q, mut k) = (heads(q, self.heads), heads(k, self.kv_heads));
        if let (Some((qn, kn)), false) = (&self.qk_norm, self.qk_norm_whole) {
            q = qn.forward(&q);
            k = kn.forward(&k);
        }
        // In a sampling forward the kernel rotates both in place (fresh projections).
        let (q, k) = if crate::kernels::sampling_ops::rope_(&q, &k, &rope.0, &rope.1) {
            (q.transpose(1, 2), k.transpose(1, 2))
        } else {
            (
                apply_rope(&q.transpose(1, 2), &rope.0, &rope.1),
                apply_rope(&k.transpose(1, 2), &rope.0, &rope.1),
            )
        };
        let v = heads(v, self.kv_heads).transpose(1, 2);
        // With a cache: written in place after the cached positions; attention reads the
        // filled prefix (a view of the preallocated buffers).
        let (k, v) = match cache {
            Some((c, layer)) => c.append(layer, &k, &v),
            None => (k, v),
        };
        let y = how.attend(&q, &k, &v, self.heads != self.kv_heads);
        self.o.forward(
            &y.transpose(1, 2)
                .reshape([b, t, self.heads * self.head_dim]),
        )
    }
}

#[derive(Debug)]
struct Block {
    norm1: RmsNorm,
    attn: Attention,
    norm2: RmsNorm,
    mlp: Ffn,
    /// Sliding attention window of this layer (`None`: full causal attention).
    window: Option<i64>,
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
    /// The vision tower of a vision-language family (parameters under `visual`).
    vision: Option<VisionTower>,
    /// The LoRA settings while adapters are attached.
    lora: Option<LoraConfig>,
}

/// Input of one forward pass.
pub struct ForwardInput<'a> {
    /// Token ids `[B, T]` (int64).
    pub ids: &'a Tensor,
    /// Absolute position of each token `[B, T]` (int64), or M-RoPE's three streams
    /// `[3, B, T]` (temporal, height, width: `get_rope_index`) for a vision-language model.
    pub positions: &'a Tensor,
    /// Which keys are real tokens `[B, S]` (bool), `S` = cached length + `T`.
    pub key_mask: &'a Tensor,
    /// Padding-free packing: the rows' tokens in the one packed sequence (`B = 1`, no cache),
    /// each attending causally within its own segment (and to its shared prompt). Empty: the
    /// rows of `ids` as they are, under `key_mask`.
    pub segments: &'a [Segment],
    /// Images whose features replace the image-placeholder tokens of `ids` (vision-language
    /// models; checked against the placeholders when built).
    pub images: Option<&'a ImageInput>,
}

/// One span of a packed sequence: the tokens `start..start + len`, which attend causally
/// within the span and, with `prefix = Some((start, len))`, to every token of that earlier
/// span first: a prompt packed once and shared by the completions that follow it (their
/// positions continue the prompt's). Prefix Grouper's Shared-Prefix Forward (arXiv 2506.05433).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// First token of the span in the packed sequence.
    pub start: i64,
    /// Tokens in the span.
    pub len: i64,
    /// The shared prompt this span continues, if any.
    pub prefix: Option<(i64, i64)>,
}

impl Segment {
    /// A span that attends only to itself (a whole row, or a shared prompt).
    pub fn alone(start: i64, len: i64) -> Self {
        Segment {
            start,
            len,
            prefix: None,
        }
    }
}

impl Transformer {
    /// Builds the model's parameters under `p` (the root of a var store), randomly initialised
    /// with the normal(0, 0.02) of HF's `initializer_range`. `cfg` must be validated.
    pub fn new(p: &Path, cfg: &ModelConfig) -> Self {
        Self::build(p, cfg, Fill::Random)
    }

    /// Like [`Self::new`] with zero-filled matrices (no random draws), for a checkpoint to
    /// overwrite.
    pub(crate) fn new_for_loading(p: &Path, cfg: &ModelConfig) -> Self {
        Self::build(p, cfg, Fill::Zeros)
    }

    fn build(p: &Path, cfg: &ModelConfig, fill: Fill) -> Self {
        let m = p / "model";
        let embed = (&m / "embed_tokens").var(
            "weight",
            &[cfg.vocab_size as i64, cfg.hidden_size as i64],
            fill.matrix(),
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
                    attn: Attention::new(&(&l / "self_attn"), cfg, fill),
                    norm2: RmsNorm::new(
                        &(&l / "post_attention_layernorm"),
                        cfg.hidden_size,
                        cfg.rms_norm_eps,
                    ),
                    mlp: Ffn::new(&l, cfg, i, fill),
                    window: cfg.layer_window(i).map(|w| w as i64),
                }
            })
            .collect();
        let norm = RmsNorm::new(&(&m / "norm"), cfg.hidden_size, cfg.rms_norm_eps);
        let head = (!cfg.tie_word_embeddings)
            .then(|| weight(p, "lm_head", cfg.vocab_size, cfg.hidden_size, fill));
        Self {
            cfg: cfg.clone(),
            embed,
            blocks,
            norm,
            head,
            rope: Rope::new(cfg, p.device()),
            vision: cfg
                .vision
                .as_ref()
                .map(|v| VisionTower::build(&(p / "visual"), v, fill)),
            lora: None,
        }
    }

    /// Every projection with its HF module path (`model.layers.0.self_attn.q_proj`) and its
    /// module name (`q_proj`).
    fn projections_mut(&mut self) -> Vec<(String, &'static str, &mut Linear)> {
        let mut out = Vec::new();
        for (i, block) in self.blocks.iter_mut().enumerate() {
            let attn = format!("model.layers.{i}.self_attn");
            let mlp = format!("model.layers.{i}.mlp");
            let a = &mut block.attn;
            for (name, lin) in [
                ("q_proj", &mut a.q),
                ("k_proj", &mut a.k),
                ("v_proj", &mut a.v),
                ("o_proj", &mut a.o),
            ] {
                out.push((format!("{attn}.{name}"), name, lin));
            }
            // Experts are not adapted (LoRA on a sparse layer adapts its attention only).
            let Some(m) = block.mlp.dense_mut() else {
                continue;
            };
            for (name, lin) in [
                ("gate_proj", &mut m.gate),
                ("up_proj", &mut m.up),
                ("down_proj", &mut m.down),
            ] {
                out.push((format!("{mlp}.{name}"), name, lin));
            }
        }
        out
    }

    /// Attaches fresh LoRA adapters (parameters under `root`, the var store's root) to the
    /// projections `cfg` targets. `cfg` must be validated; adapters must not be attached yet.
    pub(crate) fn add_lora(&mut self, root: &Path, cfg: &LoraConfig) {
        assert!(self.lora.is_none(), "LoRA adapters are already attached");
        for (path, name, lin) in self.projections_mut() {
            if cfg.targets(name) {
                let p = path.split('.').fold(root.clone(), |p, part| &p / part);
                lin.add_lora(&p, cfg);
            }
        }
        self.lora = Some(cfg.clone());
    }

    /// The weights of adapted projections with their adapters folded in, by var-store name
    /// (`model.layers.0.self_attn.q_proj.weight`); the model is unchanged.
    pub(crate) fn merged_weights(&self) -> Vec<(String, Tensor)> {
        let mut out = Vec::new();
        for (i, block) in self.blocks.iter().enumerate() {
            let a = &block.attn;
            let mut adapted = vec![
                ("self_attn.q_proj", &a.q),
                ("self_attn.k_proj", &a.k),
                ("self_attn.v_proj", &a.v),
                ("self_attn.o_proj", &a.o),
            ];
            if let Some(m) = block.mlp.dense() {
                adapted.extend([
                    ("mlp.gate_proj", &m.gate),
                    ("mlp.up_proj", &m.up),
                    ("mlp.down_proj", &m.down),
                ]);
            }
            for (module, lin) in adapted {
                if lin.lora.is_some() {
                    let name = format!("model.layers.{i}.{module}.weight");
                    out.push((name, lin.merged_weight()));
                }
            }
        }
        out
    }

    /// The LoRA settings while adapters are attached.
    pub fn lora_config(&self) -> Option<&LoraConfig> {
        self.lora.as_ref()
    }

    /// The configuration the model was built from.
    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    /// Logits `[B, T, V]` for the tokens of `input` (or `[B, 1, V]` for the last position only
    /// when `last_only`). With a cache, the keys/values of this call are appended to it, and the
    /// forward is a sampling one ([`crate::kernels::linear::sampling`]: the faster CPU linear kernel).
    pub fn forward(
        &self,
        input: &ForwardInput,
        cache: Option<&mut KvCache>,
        last_only: bool,
    ) -> Tensor {
        let run = |cache| {
            let mut h = self.hidden(input, cache);
            if last_only {
                let t = h.size()[1];
                h = h.narrow(1, t - 1, 1);
            }
            self.logits(&h)
        };
        match cache {
            Some(c) => crate::kernels::linear::sampling(|| run(Some(c))),
            None => run(None),
        }
    }

    /// Final hidden states `[B, T, H]` (after the last RMSNorm) for the tokens of `input`:
    /// what the LM head and value heads (PPO critics, reward models) read.
    /// Under bf16 mixed precision ([`crate::precision`]) the forward runs in an autocast
    /// region; the residual stream and the result stay float32.
    pub fn hidden(&self, input: &ForwardInput, cache: Option<&mut KvCache>) -> Tensor {
        crate::precision::autocast(self.embed.device(), || {
            self.hidden_inner(input, cache, &mut None)
        })
    }

    /// Logits `[B, T, V]` of an uncached forward pass and the routing of every sparse layer,
    /// in layer order (`(layer index, routing)`; none for a dense model).
    pub fn forward_routed(&self, input: &ForwardInput) -> (Tensor, Vec<(usize, Routing)>) {
        let mut routes = Some(Vec::new());
        let h = crate::precision::autocast(self.embed.device(), || {
            self.hidden_inner(input, None, &mut routes)
        });
        (self.logits(&h), routes.unwrap_or_default())
    }

    fn hidden_inner(
        &self,
        input: &ForwardInput,
        mut cache: Option<&mut KvCache>,
        routes: &mut Option<Vec<(usize, Routing)>>,
    ) -> Tensor {
        assert!(
            input.segments.is_empty() || cache.is_none(),
            "packed rows are never cached"
        );
        let past = cache.as_ref().map_or(0, |c| c.len());
        let mut x = self.embed_inputs(input);
        let rope = self.rope.tables(input.positions, x.kind());
        // One mask per distinct window (all layers share one in every supported family).
        let mut masks: Vec<(Option<i64>, Attend)> = Vec::new();
        for (i, block) in self.blocks.iter().enumerate() {
            if !masks.iter().any(|(w, _)| *w == block.window) {
                masks.push((block.window, Attend::of(input, past, block.window)));
            }
            let how = &masks.iter().find(|(w, _)| *w == block.window).unwrap().1;
            let layer_cache = cache.as_deref_mut().map(|c| (c, i));
            x = &x
                + block
                    .attn
                    .forward(&block.norm1.forward(&x), &rope, how, layer_cache);
            let (y, routing) = block.mlp.forward(&block.norm2.forward(&x));
            x = &x + y;
            if let (Some(out), Some(r)) = (routes.as_mut(), routing) {
                out.push((i, r));
            }
        }
        if let Some(c) = cache {
            c.advance(input.ids.size()[0], input.ids.size()[1]);
        }
        self.norm.forward(&x)
    }

    /// The input embeddings `[B, T, H]` of `input`: its tokens', with the image features (the
    /// tower's merged patches, in order) in place of the image-placeholder tokens
    /// (`masked_scatter`, as `Qwen2VLModel.forward`).
    pub(crate) fn embed_inputs(&self, input: &ForwardInput) -> Tensor {
        let x = self.embed_tokens(input.ids);
        // Rows without any image (text-only prompts of a vision-language model) skip the tower.
        let Some(images) = input.images.filter(|i| i.pixels.size()[0] > 0) else {
            return x;
        };
        let (Some(tower), Some(image_token)) = (&self.vision, self.cfg.image_token_id) else {
            unreachable!("ImageInput::new refuses images for a model without a vision tower")
        };
        let features = tower
            .forward(&images.pixels, &images.layout)
            .image_embeds
            .to_kind(x.kind());
        let at = input.ids.eq(image_token).unsqueeze(-1).expand_as(&x);
        x.masked_scatter(&at, &features)
    }

    /// Token embeddings `[B, T, H]` of `ids`; transformers' `nn.Embedding(...,
    /// padding_idx=config.pad_token_id)`: the pad token's row gets no gradient.
    pub(crate) fn embed_tokens(&self, ids: &Tensor) -> Tensor {
        let vocab = self.cfg.vocab_size as i64;
        let padding_idx = self
            .cfg
            .pad_token_id
            .filter(|&p| (0..vocab).contains(&p))
            .unwrap_or(-1);
        Tensor::embedding(&self.embed, ids, padding_idx, false, false)
    }

    /// What every decoder layer of an uncached forward pass over `input` reads besides its
    /// input: the rotary tables (for hidden states of `kind`) and each layer's attention mask.
    pub(crate) fn layer_context(&self, input: &ForwardInput, kind: Kind) -> LayerContext {
        LayerContext {
            rope: self.rope.tables(input.positions, kind),
            masks: self
                .blocks
                .iter()
                .map(|b| Attend::of(input, 0, b.window))
                .collect(),
        }
    }

    /// Number of decoder layers.
    pub(crate) fn num_layers(&self) -> usize {
        self.blocks.len()
    }

    /// Decoder layer `i` of an uncached forward pass: `x + attn(norm1(x))`, then
    /// `+ mlp(norm2(.))`.
    pub(crate) fn layer(&self, i: usize, x: &Tensor, ctx: &LayerContext) -> Tensor {
        let block = &self.blocks[i];
        let x = x + block
            .attn
            .forward(&block.norm1.forward(x), &ctx.rope, &ctx.masks[i], None);
        &x + block.mlp.forward(&block.norm2.forward(&x)).0
    }

    /// The final RMSNorm of the residual stream.
    pub(crate) fn final_norm(&self, x: &Tensor) -> Tensor {
        self.norm.forward(x)
    }

    /// Sets `pad_token_id` (the embedding row that gets no gradient, as transformers'
    /// `padding_idx`): a reward model pads with its tokenizer's pad token.
    pub fn set_pad_token_id(&mut self, pad: Option<i64>) {
        self.cfg.pad_token_id = pad;
    }

    /// Logits `[.., V]` of final hidden states `[.., H]` (the LM head, tied or not); bfloat16
    /// under bf16 mixed precision, as transformers' head under autocast (readers cast).
    pub fn logits(&self, hidden: &Tensor) -> Tensor {
        crate::precision::autocast(self.embed.device(), || {
            crate::kernels::linear::linear(hidden, self.head.as_ref().unwrap_or(&self.embed), None)
        })
    }
}

/// The rotary tables and per-layer attention masks of one uncached forward pass.
pub(crate) struct LayerContext {
    rope: (Tensor, Tensor),
    masks: Vec<Attend>,
}

/// How one layer's queries see the keys.
pub(crate) enum Attend {
    /// One boolean mask `[B, 1, T, S]`: padding, causality, window and cache ([`attention_mask`]).
    Mask(Tensor),
    /// Packed rows: causal attention inside each [`Segment`] of the one sequence (after its
    /// shared prompt, if any), with the layer's sliding window. Attention runs per segment
    /// (libtorch has no varlen attention on the CPU), so no query computes a score against
    /// another row's keys.
    Segments(Vec<Segment>, Option<i64>),
}

impl Attend {
    /// The attention of `input`'s queries after `past` cached positions, for a layer with
    /// sliding `window`.
    fn of(input: &ForwardInput, past: i64, window: Option<i64>) -> Self {
        if input.segments.is_empty() {
            let t = input.ids.size()[1];
            Self::Mask(attention_mask(input.key_mask, past, t, window))
        } else {
            Self::Segments(input.segments.to_vec(), window)
        }
    }

    /// Scaled dot-product attention `[B, heads, T, D]` of `q` over `k`, `v` (`gqa`: fewer
    /// key/value heads than query heads).
    fn attend(&self, q: &Tensor, k: &Tensor, v: &Tensor, gqa: bool) -> Tensor {
        let sdpa = |q: &Tensor, k: &Tensor, v: &Tensor, mask: Option<&Tensor>| {
            let causal = mask.is_none();
            Tensor::scaled_dot_product_attention(q, k, v, mask, 0.0, causal, None, gqa)
        };
        match self {
            // A decoding step in a sampling forward: the one-pass kernel where it applies.
            Self::Mask(mask) if q.size()[2] == 1 => {
                crate::kernels::decode_attention::attend(q, k, v, mask)
                    .unwrap_or_else(|| sdpa(q, k, v, Some(mask)))
            }
            Self::Mask(mask) => sdpa(q, k, v, Some(mask)),
            Self::Segments(segments, window) => {
                let parts: Vec<Tensor> = segments
                    .iter()
                    .map(|seg| {
                        let at = |x: &Tensor| x.narrow(2, seg.start, seg.len);
                        let (len, q) = (seg.len, at(q));
                        let Some((ps, pl)) = seg.prefix else {
                            let (k, v) = (at(k), at(v));
                            return match window {
                                // A window shorter than the row: the windowed causal mask.
                                Some(w) if *w < len => {
                                    let real = Tensor::ones([1, len], (Kind::Bool, q.device()));
                                    let mask = attention_mask(&real, 0, len, Some(*w));
                                    sdpa(&q, &k, &v, Some(&mask))
                                }
                                _ => sdpa(&q, &k, &v, None),
                            };
                        };
                        // After a shared prompt: its keys come first, as a cache of `pl`
                        // positions would (the same mask, window included).
                        let with_prompt =
                            |x: &Tensor| Tensor::cat(&[x.narrow(2, ps, pl), at(x)], 2);
                        let real = Tensor::ones([1, pl + len], (Kind::Bool, q.device()));
                        let mask = attention_mask(&real, pl, len, *window);
                        sdpa(&q, &with_prompt(k), &with_prompt(v), Some(&mask))
                    })
                    .collect();
                Tensor::cat(&parts, 2)
            }
        }
    }
}

/// The boolean attention mask `[B, 1, T, S]` for `T` queries after `past` cached positions:
/// causal, restricted to real keys, and always letting a query see itself so that padding
/// rows never produce an all-masked softmax (NaN). With a sliding `window`, a query at slot
/// `q` sees keys at slots `k > q - window` (HF `sliding_window_overlay`, transformers 5.23,
/// which also counts cache slots, padding included).
fn attention_mask(key_mask: &Tensor, past: i64, t: i64, window: Option<i64>) -> Tensor {
    let device = key_mask.device();
    let s = past + t;
    let q_pos = Tensor::arange_start(past, s, (Kind::Int64, device)).view([t, 1]);
    let k_pos = Tensor::arange(s, (Kind::Int64, device)).view([1, s]);
    let mut causal = k_pos.le_tensor(&q_pos);
    if let Some(w) = window {
        causal = causal.logical_and(&k_pos.gt_tensor(&(&q_pos - w)));
    }
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
