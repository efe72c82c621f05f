//! The kernel behind the model's linear layers (`x W^T + b`) in passes that record no
//! gradient on the CPU in float32: sampling, serving and the log-prob passes.
//!
//! `at::linear` runs the BLAS (MKL's sgemm in PyPI's torch). oneDNN's matrix multiply, the
//! one torch.compile's CPU backend calls for linears (`mkldnn::_linear_pointwise`), was
//! 1.4-1.5x faster for a SmolLM2 decoding step's matrix products on the development machine
//! (docs/memory.md), and for a decoding step's few rows reinforge's own dot-product kernel
//! (`csrc/linear_shim.cpp`), which reads the weights where they lie instead of packing them
//! on every call, was faster still. So sampling uses them: every forward with a KV cache (the
//! sampler, the servers' engines) runs inside [`sampling`]. The training passes keep
//! `at::linear`, so that a pass without gradient (old log-probs, a checkpointed layer's first
//! run) computes exactly what its gradient twin computes. The choice is named:
//! `REINFORGE_CPU_LINEAR` = `dot` (default: the dot kernel up to [`DOT_MAX_ROWS`] rows,
//! oneDNN above), `onednn` or `blas` (what PyTorch's eager `F.linear` runs), or
//! [`set_cpu_linear`]. Autocast regions, other dtypes and devices always run `at::linear`.
//! The kernels agree to float32 rounding (sums in another order).

use std::str::FromStr;

use tch::Tensor;

use crate::kernels::choice::{Choice, Named};

/// Which kernel runs gradient-free float32 linears on the CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuLinear {
    /// reinforge's dot-product kernel for products of at most [`DOT_MAX_ROWS`] rows (decoding
    /// steps), oneDNN's for larger ones (prefill). Needs AVX2 and FMA; elsewhere oneDNN's.
    Dot,
    /// oneDNN's matrix multiply (`mkldnn::_linear_pointwise`).
    Onednn,
    /// libtorch's `at::linear`: the BLAS, as PyTorch's eager `F.linear`.
    Blas,
}

impl Named for CpuLinear {
    const ALL: &'static [Self] = &[Self::Dot, Self::Onednn, Self::Blas];

    fn name(self) -> &'static str {
        match self {
            Self::Dot => "dot",
            Self::Onednn => "onednn",
            Self::Blas => "blas",
        }
    }
}

impl FromStr for CpuLinear {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        CHOICE.parse(s)
    }
}

static CHOICE: Choice<CpuLinear> = Choice::new("REINFORGE_CPU_LINEAR");

/// Sets the kernel for the rest of the process (overrides `REINFORGE_CPU_LINEAR`).
pub fn set_cpu_linear(choice: CpuLinear) {
    CHOICE.set(choice);
}

/// The most rows (input vectors) the dot kernel takes under [`CpuLinear::Dot`]: a decoding
/// step's batch; above it (a prompt's prefill) oneDNN's blocked product is faster.
pub const DOT_MAX_ROWS: i64 = 64;

/// The kernel in use: [`set_cpu_linear`]'s, else `REINFORGE_CPU_LINEAR`'s, else the dot
/// kernel where this build has the shim. An unknown value of the variable is reported once
/// and ignored.
pub fn cpu_linear() -> CpuLinear {
    CHOICE.get(if cfg!(reinforge_onednn_linear) {
        CpuLinear::Dot
    } else {
        CpuLinear::Blas
    })
}

thread_local! {
    /// Whether this thread is inside [`sampling`].
    static SAMPLING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` (a sampling forward: no gradient, its results not compared bit for bit with a
/// training pass) with [`cpu_linear`]'s kernel for its linears. Nests.
pub fn sampling<T>(f: impl FnOnce() -> T) -> T {
    let outer = SAMPLING.with(|s| s.replace(true));
    let out = f();
    SAMPLING.with(|s| s.set(outer));
    out
}

/// Whether this thread is inside [`sampling`] (other sampling-only kernels ask too).
pub(crate) fn in_sampling() -> bool {
    SAMPLING.with(|s| s.get())
}

/// `x W^T (+ b)` for `x` `[.., in]` and `w` `[out, in]`: inside [`sampling`], by the
/// [`cpu_linear`] kernel where it applies; otherwise (and where it does not apply) `at::linear`.
pub fn linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Tensor {
    if in_sampling() {
        let choice = cpu_linear();
        if choice == CpuLinear::Dot {
            if let Some(y) = dot_linear(x, w, b, DOT_MAX_ROWS) {
                return y;
            }
        }
        if choice != CpuLinear::Blas {
            if let Some(y) = onednn_linear(x, w, b) {
                return y;
            }
        }
    }
    x.linear(w, b)
}

/// The dot kernel's `x W^T (+ b)` for `x` of at most `max_rows` rows (all dimensions but the
/// last), or `None` where it does not apply: more rows, a gradient to record, an autocast
/// region, tensors not contiguous float32 on the CPU, a CPU without AVX2 and FMA, or a build
/// without the shim.
pub fn dot_linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>, max_rows: i64) -> Option<Tensor> {
    shim::dot(x, w, b, max_rows)
}

/// oneDNN's `x W^T (+ b)`, or `None` where it does not apply: a gradient to record, an
/// autocast region, tensors not float32 on the CPU, or a build without the shim.
pub fn onednn_linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Option<Tensor> {
    shim::onednn(x, w, b)
}

#[cfg(reinforge_onednn_linear)]
mod shim {
    use std::ffi::{c_char, c_void};

    use tch::Tensor;

    use super::{set_cpu_linear, CpuLinear};
    use crate::kernels::choice::call_tensor_shim;

    extern "C" {
        fn rf_onednn_linear(
            x: *const c_void,
            w: *const c_void,
            b: *const c_void,
            out: *mut *mut c_void,
            err: *mut c_char,
            len: usize,
        ) -> i32;
        fn rf_dot_linear(
            x: *const c_void,
            w: *const c_void,
            b: *const c_void,
            max_rows: i64,
            out: *mut *mut c_void,
            err: *mut c_char,
            len: usize,
        ) -> i32;
    }

    /// The dot kernel's `x W^T (+ b)`, or `None` where it does not apply. An error is
    /// reported once and turns the kernel off for the process (oneDNN's takes over).
    pub(super) fn dot(x: &Tensor, w: &Tensor, b: Option<&Tensor>, max_rows: i64) -> Option<Tensor> {
        let b = b.map_or(std::ptr::null(), |b| b.as_ptr().cast());
        let off = || set_cpu_linear(CpuLinear::Onednn);
        // SAFETY: as in `onednn`.
        call_tensor_shim(
            "the dot linear kernel",
            "oneDNN",
            off,
            |out, err, len| unsafe {
                rf_dot_linear(
                    x.as_ptr().cast(),
                    w.as_ptr().cast(),
                    b,
                    max_rows,
                    out,
                    err,
                    len,
                )
            },
        )
    }

    /// oneDNN's `x W^T (+ b)`, or `None` where it does not apply (gradients, autocast, not
    /// float32 on the CPU). An error (a libtorch without oneDNN) is reported once and turns
    /// the kernel off for the process.
    pub(super) fn onednn(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Option<Tensor> {
        let b = b.map_or(std::ptr::null(), |b| b.as_ptr().cast());
        let off = || set_cpu_linear(CpuLinear::Blas);
        // SAFETY: `x`, `w` and `b` (or null) are live tch tensors (`at::Tensor*`) for the
        // call; the error buffer holds `len` bytes; the shim catches every C++ exception and
        // on success writes to `out` a new `at::Tensor*`, which `call_tensor_shim` owns.
        call_tensor_shim("oneDNN linear", "the BLAS", off, |out, err, len| unsafe {
            rf_onednn_linear(x.as_ptr().cast(), w.as_ptr().cast(), b, out, err, len)
        })
    }
}

#[cfg(not(reinforge_onednn_linear))]
mod shim {
    use tch::Tensor;

    /// This build has no shim: always `at::linear`.
    pub(super) fn onednn(_: &Tensor, _: &Tensor, _: Option<&Tensor>) -> Option<Tensor> {
        None
    }

    /// This build has no shim: always `at::linear`.
    pub(super) fn dot(_: &Tensor, _: &Tensor, _: Option<&Tensor>, _: i64) -> Option<Tensor> {
        None
    }
}
