//! Fused element-wise kernels of sampling on the CPU in float32 (`csrc/sampling_ops_shim.cpp`):
//! RMSNorm, rotary embedding of queries and keys in place, `silu(gate) * up`, and the
//! statistics of a decoding step's logits (greedy token, log-sum-exp, entropy).
//!
//! In a decoding step the activations are a few rows, so libtorch's composite ops cost their
//! per-op overhead on one thread while the other waits (docs/memory.md, "Fused element-wise
//! ops"); each kernel here is one op, parallel over rows. The model's ops use them only inside
//! [`crate::kernels::linear::sampling`] (gradient-free forwards whose results are not compared bit for
//! bit with a training pass); the sampler's draw ([`logit_stats`]) always may. Each applies only
//! to contiguous float32 CPU tensors with no gradient to record, and returns `None` (or
//! `false`) elsewhere, where the caller runs libtorch's ops. They agree with those to float32
//! rounding. The choice is named: `REINFORGE_SAMPLING_OPS` = `fused` (default) or `aten`, or
//! [`set_sampling_ops`].

use std::str::FromStr;

use tch::Tensor;

use crate::kernels::choice::{Choice, Named};

/// What runs the element-wise ops of sampling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SamplingOps {
    /// The fused kernels of `csrc/sampling_ops_shim.cpp`.
    Fused,
    /// libtorch's ops, as every other pass.
    Aten,
}

impl Named for SamplingOps {
    const ALL: &'static [Self] = &[Self::Fused, Self::Aten];

    fn name(self) -> &'static str {
        match self {
            Self::Fused => "fused",
            Self::Aten => "aten",
        }
    }
}

impl FromStr for SamplingOps {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        CHOICE.parse(s)
    }
}

static CHOICE: Choice<SamplingOps> = Choice::new("REINFORGE_SAMPLING_OPS");

/// Sets the choice for the rest of the process (overrides `REINFORGE_SAMPLING_OPS`).
pub fn set_sampling_ops(choice: SamplingOps) {
    CHOICE.set(choice);
}

/// The choice in force: [`set_sampling_ops`]'s, else `REINFORGE_SAMPLING_OPS`'s, else the
/// fused kernels where this build has them. An unknown value is reported once and ignored.
pub fn sampling_ops() -> SamplingOps {
    CHOICE.get(if cfg!(reinforge_sampling_ops) {
        SamplingOps::Fused
    } else {
        SamplingOps::Aten
    })
}

/// Whether a model op here should try its kernel: inside a sampling forward, kernels chosen.
fn in_fused_forward() -> bool {
    crate::kernels::linear::in_sampling() && sampling_ops() == SamplingOps::Fused
}

/// `x / sqrt(mean(x²) + eps) * w` over the last dimension (`w` `[H]`), by the kernel.
pub fn rms_norm(x: &Tensor, w: &Tensor, eps: f64) -> Option<Tensor> {
    in_fused_forward()
        .then(|| shim::rms_norm(x, w, eps))
        .flatten()
}

/// Rotate-half RoPE in place of `q` `[B, T, H, D]` and `k` `[B, T, H_kv, D]` with tables
/// `cos`, `sin` `[B, 1, T, D]`, by the kernel: `true` when both were rotated, `false` (neither
/// touched) where the kernel does not apply.
pub fn rope_(q: &Tensor, k: &Tensor, cos: &Tensor, sin: &Tensor) -> bool {
    in_fused_forward() && shim::rope_(q, k, cos, sin)
}

/// `silu(gate) * up`, by the kernel.
pub fn silu_mul(gate: &Tensor, up: &Tensor) -> Option<Tensor> {
    in_fused_forward()
        .then(|| shim::silu_mul(gate, up))
        .flatten()
}

/// For logits `[B, V]`: each row's first largest logit (`[B]`, int64, as `argmax`) and its
/// log-sum-exp and softmax entropy (`[B, 2]`), by the kernel; `None` where it does not apply
/// or a row is not finite.
pub fn logit_stats(logits: &Tensor) -> Option<(Tensor, Tensor)> {
    if sampling_ops() != SamplingOps::Fused {
        return None;
    }
    shim::logit_stats(logits)
}

#[cfg(reinforge_sampling_ops)]
mod shim {
    use std::ffi::{c_char, c_void};

    use tch::Tensor;

    use super::{set_sampling_ops, SamplingOps};
    use crate::kernels::choice::{call_shim, ShimCall};

    extern "C" {
        fn rf_rms_norm(
            x: *const c_void,
            w: *const c_void,
            eps: f64,
            out: *mut *mut c_void,
            err: *mut c_char,
            len: usize,
        ) -> i32;
        fn rf_rope_(
            q: *const c_void,
            k: *const c_void,
            cos: *const c_void,
            sin: *const c_void,
            err: *mut c_char,
            len: usize,
        ) -> i32;
        fn rf_silu_mul(
            gate: *const c_void,
            up: *const c_void,
            out: *mut *mut c_void,
            err: *mut c_char,
            len: usize,
        ) -> i32;
        fn rf_logit_stats(
            logits: *const c_void,
            arg: *mut *mut c_void,
            stats: *mut *mut c_void,
            err: *mut c_char,
            len: usize,
        ) -> i32;
    }

    /// Whether the call ran; a failure is reported once and turns the kernels off.
    fn ran(call: ShimCall) -> bool {
        match call {
            ShimCall::Done => true,
            ShimCall::NotApplicable => false,
            ShimCall::Failed(msg) => {
                eprintln!(
                    "warning: a fused sampling kernel failed ({msg}); using libtorch's ops from now on"
                );
                set_sampling_ops(SamplingOps::Aten);
                false
            }
        }
    }

    /// Takes ownership of a tensor a shim wrote.
    ///
    /// SAFETY: `p` must be a heap `at::Tensor` that nobody else owns.
    unsafe fn owned(p: *mut c_void) -> Tensor {
        unsafe { Tensor::from_ptr(p.cast()) }
    }

    // SAFETY (every call below): the tensors passed are live tch tensors (`at::Tensor*`) for
    // the call; the error buffer holds `len` bytes; the shim catches every C++ exception and
    // writes its outputs (new `at::Tensor*`) only when it returns 0.

    pub(super) fn rms_norm(x: &Tensor, w: &Tensor, eps: f64) -> Option<Tensor> {
        let mut out: *mut c_void = std::ptr::null_mut();
        let (x, w) = (x.as_ptr().cast(), w.as_ptr().cast());
        let call = call_shim(|err, len| unsafe { rf_rms_norm(x, w, eps, &mut out, err, len) });
        ran(call).then(|| unsafe { owned(out) })
    }

    pub(super) fn rope_(q: &Tensor, k: &Tensor, cos: &Tensor, sin: &Tensor) -> bool {
        let (q, k) = (q.as_ptr().cast(), k.as_ptr().cast());
        let (cos, sin) = (cos.as_ptr().cast(), sin.as_ptr().cast());
        ran(call_shim(|err, len| unsafe {
            rf_rope_(q, k, cos, sin, err, len)
        }))
    }

    pub(super) fn silu_mul(gate: &Tensor, up: &Tensor) -> Option<Tensor> {
        let mut out: *mut c_void = std::ptr::null_mut();
        let (g, u) = (gate.as_ptr().cast(), up.as_ptr().cast());
        let call = call_shim(|err, len| unsafe { rf_silu_mul(g, u, &mut out, err, len) });
        ran(call).then(|| unsafe { owned(out) })
    }

    pub(super) fn logit_stats(logits: &Tensor) -> Option<(Tensor, Tensor)> {
        let mut arg: *mut c_void = std::ptr::null_mut();
        let mut stats: *mut c_void = std::ptr::null_mut();
        let x = logits.as_ptr().cast();
        let call =
            call_shim(|err, len| unsafe { rf_logit_stats(x, &mut arg, &mut stats, err, len) });
        ran(call).then(|| unsafe { (owned(arg), owned(stats)) })
    }
}

#[cfg(not(reinforge_sampling_ops))]
mod shim {
    use tch::Tensor;

    // This build has no shim: libtorch's ops always.

    pub(super) fn rms_norm(_: &Tensor, _: &Tensor, _: f64) -> Option<Tensor> {
        None
    }

    pub(super) fn rope_(_: &Tensor, _: &Tensor, _: &Tensor, _: &Tensor) -> bool {
        false
    }

    pub(super) fn silu_mul(_: &Tensor, _: &Tensor) -> Option<Tensor> {
        None
    }

    pub(super) fn logit_stats(_: &Tensor) -> Option<(Tensor, Tensor)> {
        None
    }
}
