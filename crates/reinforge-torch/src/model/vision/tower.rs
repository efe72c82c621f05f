//! The Qwen2-VL / Qwen2.5-VL vision tower: patch embedding, 2-D rotary attention within each
//! image (or each window), and the 2x2 patch merger that turns patches into language-model
//! embeddings. Mirrors transformers 5.23's `Qwen2VisionTransformerPretrainedModel` and
//! `Qwen2_5_VisionTransformerPretrainedModel`; parameter names are the Hub's (`visual.*`).

use tch::nn::{Init, Path};
use tch::{Kind, Tensor};

use crate::model::layers::{Fill, Linear, Mlp, RmsNorm};
use crate::model::vision::config::{VisionConfig, VisionVariant};

/// Where each patch sits and which patches attend to each other: what the processor's grids
/// imply (`vision_utils.get_vision_position_ids`, `get_vision_cu_seqlens`,
/// `get_vision_window_index`).
#[derive(Debug)]
pub struct VisionLayout {
    /// `(h, w)` of each patch `[N, 2]` (int64), in processor order.
    pub positions: Tensor,
    /// Boundaries of the images in patches (`[0, n0, n0 + n1, ...]`).
    pub cu_seqlens: Vec<i64>,
    /// Qwen2.5-VL: the merged tokens in window order `[N / merge^2]` (int64) and the window
    /// boundaries in patches.
    pub windows: Option<(Tensor, Vec<i64>)>,
}

impl VisionLayout {
    /// The layout of images with `grids` (`image_grid_thw`, in order) for the tower `cfg`:
    /// transformers' `get_vision_position_ids`, `get_vision_cu_seqlens` and (Qwen2.5-VL)
    /// `get_window_index`, computed by [`reinforge_hf::vision`].
    pub fn from_grids(
        cfg: &VisionConfig,
        grids: &[[i64; 3]],
        device: tch::Device,
    ) -> anyhow::Result<Self> {
        use reinforge_hf::vision as layout;
        let merge = cfg.spatial_merge_size as i64;
        let hw: Vec<i64> = layout::vision_position_ids(grids, merge)?
            .into_iter()
            .flatten()
            .collect();
        let positions = Tensor::from_slice(&hw).view([-1, 2]).to_device(device);
        let windows = match (cfg.variant, cfg.window_size) {
            (VisionVariant::Qwen25Vl, Some(size)) => {
                let (index, cu) =
                    layout::window_index(grids, size as i64, cfg.patch_size as i64, merge)?;
                Some((Tensor::from_slice(&index).to_device(device), cu))
            }
            _ => None,
        };
        Ok(Self {
            positions,
            cu_seqlens: layout::cu_seqlens(grids),
            windows,
        })
    }
}

/// What the tower computed, for parity checks: the patch embeddings, the blocks' output
/// (Qwen2.5-VL: in window order) and the merged image embeddings in image order.
pub struct VisionOutput {
    pub patch_embeds: Tensor,
    pub hidden: Tensor,
    pub image_embeds: Tensor,
}

/// LayerNorm with bias (Qwen2-VL) or RMSNorm (Qwen2.5-VL), eps 1e-6 in both.
#[derive(Debug)]
enum Norm {
    Layer { w: Tensor, b: Tensor },
    Rms(RmsNorm),
}

const EPS: f64 = 1e-6;

impl Norm {
    fn new(p: &Path, size: usize, variant: VisionVariant) -> Self {
        match variant {
            VisionVariant::Qwen2Vl => Norm::Layer {
                w: p.var("weight", &[size as i64], Init::Const(1.0)),
                b: p.var("bias", &[size as i64], Init::Const(0.0)),
            },
            VisionVariant::Qwen25Vl => Norm::Rms(RmsNorm::new(p, size, EPS)),
        }
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        match self {
            Norm::Layer { w, b } => x.layer_norm([w.size()[0]], Some(w), Some(b), EPS, false),
            Norm::Rms(n) => n.forward(x),
        }
    }
}

/// A block's MLP: `fc2(act(fc1 x))` (Qwen2-VL) or SwiGLU with biases (Qwen2.5-VL).
#[derive(Debug)]
enum VisionMlp {
    Plain {
        fc1: Linear,
        fc2: Linear,
        act: String,
    },
    Gated(Mlp),
}

impl VisionMlp {
    fn new(p: &Path, cfg: &VisionConfig, fill: Fill) -> Self {
        let (w, m) = (cfg.width, cfg.mlp_width);
        match cfg.variant {
            VisionVariant::Qwen2Vl => VisionMlp::Plain {
                fc1: Linear::new(p, "fc1", w, m, true, fill),
                fc2: Linear::new(p, "fc2", m, w, true, fill),
                act: cfg.hidden_act.clone(),
            },
            VisionVariant::Qwen25Vl => VisionMlp::Gated(Mlp::with(
                p,
                ["gate_proj", "up_proj", "down_proj"],
                w,
                m,
                true,
                fill,
            )),
        }
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        match self {
            VisionMlp::Plain { fc1, fc2, act } => {
                let h = fc1.forward(x);
                let h = match act.as_str() {
                    // transformers' QuickGELUActivation.
                    "quick_gelu" => &h * (&h * 1.702).sigmoid(),
                    "gelu" => h.gelu("none"),
                    _ => h.silu(),
                };
                fc2.forward(&h)
            }
            VisionMlp::Gated(m) => m.forward(x),
        }
    }
}

#[derive(Debug)]
struct VisionBlock {
    norm1: Norm,
    norm2: Norm,
    qkv: Linear,
    proj: Linear,
    mlp: VisionMlp,
    /// Attends within windows (Qwen2.5-VL blocks outside `fullatt_block_indexes`).
    windowed: bool,
}

impl VisionBlock {
    fn attention(&self, x: &Tensor, rope: &(Tensor, Tensor), bounds: &[i64], heads: i64) -> Tensor {
        let n = x.size()[0];
        let qkv = self
            .qkv
            .forward(x)
            .reshape([n, 3, heads, -1])
            .permute([1, 0, 2, 3]);
        let rotate = |t: Tensor| &t * &rope.0 + rotate_half(&t) * &rope.1;
        let (q, k, v) = (rotate(qkv.get(0)), rotate(qkv.get(1)), qkv.get(2));
        // Per image (or window): libtorch has no varlen attention on the CPU, so each span
        // runs on its own, as transformers' non-flash path does.
        let parts: Vec<Tensor> = bounds
            .windows(2)
            .filter(|w| w[1] > w[0])
            .map(|w| {
                let span = |t: &Tensor| t.narrow(0, w[0], w[1] - w[0]).transpose(0, 1).unsqueeze(0);
                Tensor::scaled_dot_product_attention(
                    &span(&q),
                    &span(&k),
                    &span(&v),
                    None::<Tensor>,
                    0.0,
                    false,
                    None,
                    false,
                )
                .squeeze_dim(0)
                .transpose(0, 1)
            })
            .collect();
        self.proj.forward(&Tensor::cat(&parts, 0).reshape([n, -1]))
    }
}

fn rotate_half(x: &Tensor) -> Tensor {
    let half = x.size()[x.dim() - 1] / 2;
    let last = x.dim() as i64 - 1;
    Tensor::cat(
        &[x.narrow(last, half, half).neg(), x.narrow(last, 0, half)],
        last,
    )
}

/// The tower. Build it under the var store path `visual`.
#[derive(Debug)]
pub struct VisionTower {
    cfg: VisionConfig,
    /// The Conv3d patch embedding `[width, C, T, p, p]`: with stride equal to its kernel it is
    /// a linear map of each flattened patch, which is how it runs.
    patch: Tensor,
    blocks: Vec<VisionBlock>,
    merger_norm: Norm,
    merger_fc1: Linear,
    merger_fc2: Linear,
    inv_freq: Tensor,
}

impl VisionTower {
    pub(crate) fn build(p: &Path, cfg: &VisionConfig, fill: Fill) -> Self {
        let (c, t, s) = (
            cfg.in_channels as i64,
            cfg.temporal_patch_size as i64,
            cfg.patch_size as i64,
        );
        let patch = (p / "patch_embed" / "proj").var(
            "weight",
            &[cfg.width as i64, c, t, s, s],
            fill.matrix(),
        );
        let blocks = (0..cfg.depth)
            .map(|i| {
                let b = p / "blocks" / i;
                let a = &b / "attn";
                VisionBlock {
                    norm1: Norm::new(&(&b / "norm1"), cfg.width, cfg.variant),
                    norm2: Norm::new(&(&b / "norm2"), cfg.width, cfg.variant),
                    qkv: Linear::new(&a, "qkv", cfg.width, 3 * cfg.width, true, fill),
                    proj: Linear::new(&a, "proj", cfg.width, cfg.width, true, fill),
                    mlp: VisionMlp::new(&(&b / "mlp"), cfg, fill),
                    windowed: cfg.variant == VisionVariant::Qwen25Vl
                        && !cfg.fullatt_block_indexes.contains(&i),
                }
            })
            .collect();
        let m = p / "merger";
        let merged = cfg.width * cfg.spatial_merge_size * cfg.spatial_merge_size;
        let mlp = &m / "mlp";
        Self {
            cfg: cfg.clone(),
            patch,
            blocks,
            merger_norm: Norm::new(&(&m / "ln_q"), cfg.width, cfg.variant),
            merger_fc1: Linear::new(&mlp, "0", merged, merged, true, fill),
            merger_fc2: Linear::new(&mlp, "2", merged, cfg.out_size, true, fill),
            inv_freq: axial_inv_freq(cfg, p.device()),
        }
    }

    /// A randomly initialised tower under `p`.
    pub fn new(p: &Path, cfg: &VisionConfig) -> Self {
        Self::build(p, cfg, Fill::Random)
    }

    pub fn config(&self) -> &VisionConfig {
        &self.cfg
    }

    /// The image embeddings `[N / merge^2, out_size]` of `pixels` `[N, patch_dim]` (all images
    /// of a batch, concatenated in order), with the intermediate results.
    pub fn forward(&self, pixels: &Tensor, layout: &VisionLayout) -> VisionOutput {
        let w = self.patch.view([self.cfg.width as i64, -1]);
        let patch_embeds = pixels.to_kind(w.kind()).matmul(&w.tr());
        let unit = (self.cfg.spatial_merge_size * self.cfg.spatial_merge_size) as i64;
        let permute = |x: &Tensor| match &layout.windows {
            Some((index, _)) => {
                let n = x.size()[0];
                x.reshape([n / unit, unit, -1])
                    .index_select(0, index)
                    .reshape([n, -1])
            }
            None => x.shallow_clone(),
        };
        let (cos, sin) = self.rope(&layout.positions);
        let rope = (permute(&cos).unsqueeze(1), permute(&sin).unsqueeze(1));
        let mut x = permute(&patch_embeds);
        let heads = self.cfg.num_heads as i64;
        for block in &self.blocks {
            let bounds = match (&layout.windows, block.windowed) {
                (Some((_, cu)), true) => cu.as_slice(),
                _ => layout.cu_seqlens.as_slice(),
            };
            x = &x + block.attention(&block.norm1.forward(&x), &rope, bounds, heads);
            x = &x + block.mlp.forward(&block.norm2.forward(&x));
        }
        let merged_width = self.cfg.width as i64 * unit;
        let y = self.merger_norm.forward(&x).view([-1, merged_width]);
        let mut image_embeds = self
            .merger_fc2
            .forward(&self.merger_fc1.forward(&y).gelu("none"));
        if let Some((index, _)) = &layout.windows {
            image_embeds = image_embeds.index_select(0, &index.argsort(0, false));
        }
        VisionOutput {
            patch_embeds,
            hidden: x,
            image_embeds,
        }
    }

    /// `(cos, sin)` `[N, head_dim]` of the axial rotary embedding: h frequencies, then w
    /// frequencies, repeated twice (`Qwen2VLVisionRotaryEmbedding`).
    fn rope(&self, positions: &Tensor) -> (Tensor, Tensor) {
        let freqs = positions.to_kind(Kind::Float).unsqueeze(-1) * &self.inv_freq;
        let hw = Tensor::cat(&[freqs.select(1, 0), freqs.select(1, 1)], -1);
        let emb = Tensor::cat(&[&hw, &hw], -1);
        (emb.cos(), emb.sin())
    }
}

/// `theta^(-2i/d)` over `d = head_dim / 2` (float32), as `compute_axial_rope_parameters`.
fn axial_inv_freq(cfg: &VisionConfig, device: tch::Device) -> Tensor {
    let d = (cfg.head_dim() / 2) as i64;
    let exponents = Tensor::arange_start_step(0, d, 2, (Kind::Int64, device))
        .to_kind(Kind::Float)
        .divide_scalar(d as f64);
    Tensor::pow_scalar(cfg.rope_theta, &exponents).reciprocal()
}
