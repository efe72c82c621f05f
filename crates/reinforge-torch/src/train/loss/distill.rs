//! TRL's distillation losses (trl 1.16), generic over the float dtype of the logits (f64 for the
//! oracles, f32 in training); `tests/oracles_distill.rs` replays TRL's own functions
//! (`fixtures/oracles/distill/`, `scripts/make_distill_oracles.py`) through these.
//!
//! - [`jsd_elements`] + [`reduce`]: `GKDTrainer.generalized_jsd_loss` (trl.experimental.gkd),
//!   the generalised Jensen-Shannon divergence of Agarwal et al. (2306.13649, eq. 1) over the
//!   full vocabulary. Both distributions are `log_softmax(logits / temperature)`. The mixture is
//!   `m = (1 - β)·p_student + β·p_teacher` and the divergence `β·KL(teacher‖m) + (1 - β)·KL(student‖m)`.
//!   The ends are special-cased as in TRL: **β = 0 is the forward KL(teacher‖student)** and
//!   **β = 1 the reverse KL(student‖teacher)** (the limits of the mixture formula are 0, so TRL's
//!   loss is discontinuous at both ends; so is this one). The main `DistillationTrainer`'s
//!   chunked kernel (`_chunked_divergence_loss`) computes the same per-token value in float32
//!   tiles with the same conventions, and is in the oracles too.
//! - [`topk_elements`]: a teacher that gives only its top-k log-probs (a remote engine), as
//!   TRL's `ServerDistillationTrainer` (trl.experimental.server_distillation) treats it: both
//!   distributions restricted to the teacher's top-k ids (a `-inf` log-prob marks a missing
//!   alternative), the missing mass either put in one extra **tail bucket**
//!   `log(1 - Σ exp(top-k log-probs))` on each side (`loss_add_tail = True`, TRL's default) or
//!   dropped by renormalising both over the support (`False`), then the same divergence over
//!   that support (TRL's `_jsd_divergence` with its support mask). TRL runs this for β = 0
//!   with any k; for β > 0 it only takes top-1 support of the sampled token. Here every β is
//!   accepted on top-k support; the oracles check β = 0 against TRL's method and other β
//!   against the same composition of TRL's building blocks.

use anyhow::{bail, Result};
use tch::{Kind, Tensor};

use crate::train::loss::names::named_enum;

named_enum! {
    /// TRL's `reduction` argument of `generalized_jsd_loss`.
    pub enum Reduction ("reduction") {
        /// Sum over masked tokens and vocabulary, divided by the masked token count (without
        /// a mask: by the first dimension, the batch size, as TRL does).
        BatchMean = "batchmean",
        /// Sum over masked tokens and vocabulary.
        Sum = "sum",
        /// Mean over masked tokens *and* vocabulary entries (TRL's `jsd.mean()`).
        Mean = "mean",
        /// The masked elements `[tokens, V]`, unreduced.
        None = "none",
    }
}

/// The divergence: TRL's `beta` and `temperature`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Jsd {
    /// 0: forward KL(teacher‖student); 1: reverse KL(student‖teacher); between: generalised JSD.
    pub beta: f64,
    /// Both models' logits are divided by it before the softmax.
    pub temperature: f64,
}

impl Jsd {
    /// Checks `beta` ∈ [0, 1] and `temperature` > 0 (TRL's config checks).
    pub fn new(beta: f64, temperature: f64) -> Result<Self> {
        if !(0.0..=1.0).contains(&beta) {
            bail!("beta must be in [0, 1], got {beta}");
        }
        if !(temperature.is_finite() && temperature > 0.0) {
            bail!("temperature must be finite and > 0, got {temperature}");
        }
        Ok(Self { beta, temperature })
    }

    /// The reverse KL(student‖teacher) at temperature 1: the held-out figure.
    pub fn reverse_kl() -> Self {
        Self {
            beta: 1.0,
            temperature: 1.0,
        }
    }

    /// `log_softmax(logits / temperature)` over the last dimension.
    fn log_probs(&self, logits: &Tensor) -> Tensor {
        (logits / self.temperature).log_softmax(-1, logits.kind())
    }
}

/// `F.kl_div(input, target, reduction="none", log_target=True)`: `exp(target)·(target - input)`.
fn kl_div(input: &Tensor, target: &Tensor) -> Tensor {
    target.exp() * (target - input)
}

/// The divergence's elements `[..., V]` between two log-distributions (TRL's `jsd` before
/// masking): summed over the last dimension they are the per-token divergence.
fn divergence(s: &Tensor, t: &Tensor, beta: f64) -> Tensor {
    if beta == 0.0 {
        kl_div(s, t)
    } else if beta == 1.0 {
        kl_div(t, s)
    } else {
        let m = Tensor::stack(&[s + (-beta).ln_1p(), t + beta.ln()], 0).logsumexp([0], false);
        kl_div(&m, t) * beta + kl_div(&m, s) * (1.0 - beta)
    }
}

/// The elements `[..., V]` of TRL's generalised JSD between full-vocabulary logits.
pub fn jsd_elements(student_logits: &Tensor, teacher_logits: &Tensor, jsd: &Jsd) -> Tensor {
    divergence(
        &jsd.log_probs(student_logits),
        &jsd.log_probs(teacher_logits),
        jsd.beta,
    )
}

/// The per-token divergence `[...]` (the elements summed over the vocabulary).
pub fn jsd_per_token(student_logits: &Tensor, teacher_logits: &Tensor, jsd: &Jsd) -> Tensor {
    jsd_elements(student_logits, teacher_logits, jsd).sum_dim_intlist(-1, false, None)
}

/// TRL's masking and reduction of divergence elements `[..., V]`: `mask` (bool, `[...]`)
/// keeps completion tokens (TRL's `labels != -100`); `num_items` is TRL's
/// `num_items_in_batch` (the sum divided by it, whatever `reduction` says). `None` returns
/// the kept elements `[tokens, V]`.
pub fn reduce(
    elements: &Tensor,
    mask: Option<&Tensor>,
    reduction: Reduction,
    num_items: Option<f64>,
) -> Tensor {
    let v = *elements.size().last().unwrap_or(&1);
    let (kept, denom) = match mask {
        Some(m) => {
            let wide = m.unsqueeze(-1).expand_as(elements);
            let n = m.sum(Kind::Int64).int64_value(&[]).max(1);
            (elements.masked_select(&wide).view([-1, v]), n)
        }
        None => (elements.shallow_clone(), elements.size()[0].max(1)),
    };
    if let Some(n) = num_items {
        return kept.sum(kept.kind()) / n;
    }
    match reduction {
        Reduction::BatchMean => kept.sum(kept.kind()) / denom as f64,
        Reduction::Sum => kept.sum(kept.kind()),
        Reduction::Mean => kept.mean(kept.kind()),
        Reduction::None => kept,
    }
}

/// A teacher known only by its top-k next-token log-probs per position.
pub struct TopK<'a> {
    /// `[..., K]` log-probs, most likely first; `-inf` where the teacher gave fewer than K.
    pub logprobs: &'a Tensor,
    /// `[..., K]` their token ids (int64).
    pub ids: &'a Tensor,
}

/// `log(1 - Σ exp(x))` appended as one more entry (TRL's `_add_tail_bucket`; the sum is
/// clamped below 1 so the tail stays finite).
fn with_tail(log_probs: &Tensor, support: &Tensor) -> (Tensor, Tensor) {
    let sum = log_probs.logsumexp([-1], true).clamp_max(-1e-7);
    let tail = sum.expm1().neg().log();
    let tail_mask = support.narrow(-1, 0, 1).ones_like();
    (
        Tensor::cat(&[log_probs, &tail], -1),
        Tensor::cat(&[support, &tail_mask], -1),
    )
}

/// The divergence over a sparse support (TRL's `_jsd_divergence` with a support mask): entries
/// outside `support` count 0; NaNs become 0 and infinities the dtype's extremes (`nan_to_num`).
fn sparse_divergence(s: &Tensor, t: &Tensor, support: &Tensor, beta: f64) -> Tensor {
    let zero = s.zeros_like();
    let safe = |x: &Tensor| x.where_self(support, &zero);
    let (safe_s, safe_t) = (safe(s), safe(t));
    let (ps, pt) = (safe(&s.exp()), safe(&t.exp()));
    let clean = |x: Tensor| x.nan_to_num(0.0, None, None);
    if beta == 0.0 {
        clean(&pt * (&safe_t - &safe_s))
    } else if beta == 1.0 {
        clean(&ps * (&safe_s - &safe_t))
    } else {
        let tiny = match s.kind() {
            Kind::Double => f64::MIN_POSITIVE,
            _ => f32::MIN_POSITIVE as f64,
        };
        let mix = &ps * (1.0 - beta) + &pt * beta;
        let safe_m = safe(&mix.clamp_min(tiny).log());
        clean(&pt * (&safe_t - &safe_m)) * beta + clean(&ps * (&safe_s - &safe_m)) * (1.0 - beta)
    }
}

/// The elements `[..., K(+1)]` of the divergence between the student's full logits and a
/// top-k teacher, over the teacher's support plus (`add_tail`) the bucket of the missing
/// mass, or renormalised over the support. The student's distribution is taken at
/// `jsd.temperature`; the teacher's log-probs are used as given (TRL's server path).
pub fn topk_elements(student_logits: &Tensor, teacher: &TopK, jsd: &Jsd, add_tail: bool) -> Tensor {
    let student = jsd.log_probs(student_logits);
    let valid = teacher.logprobs.gt(f64::NEG_INFINITY);
    let gathered = student.gather(-1, teacher.ids, false);
    let neg_inf = gathered.full_like(f64::NEG_INFINITY).detach();
    let s = gathered.where_self(&valid, &neg_inf);
    let t = teacher
        .logprobs
        .to_kind(student.kind())
        .where_self(&valid, &neg_inf);
    let (s, t, support) = if add_tail {
        let (s, support) = with_tail(&s, &valid);
        let (t, _) = with_tail(&t, &valid);
        (s, t, support)
    } else {
        let norm = |x: &Tensor| x - x.logsumexp([-1], true);
        (norm(&s), norm(&t), valid)
    };
    sparse_divergence(&s, &t, &support, jsd.beta)
}
