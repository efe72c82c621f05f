//! The kernel behind the model's linear layers (`x W^T + b`) in passes that record no
//! gradient on the CPU in float32: sampling, serving and the log-prob passes.
//!
//! `at::linear` runs the BLAS (MKL's sgemm in PyPI's torch). oneDNN's matrix multiply, the
//! one torch.compile's CPU backend calls for linears (`mkldnn::_linear_pointwise`), was
//! 1.4-1.5x faster for a SmolLM2 decoding step's matrix products on the development machine
//! (docs/memory.md), so sampling uses it: every forward with a KV cache (the sampler, the
//! servers' engines) runs inside [`sampling`]. The training passes keep `at::linear`, so that
//! a pass without gradient (old log-probs, a checkpointed layer's first run) computes exactly
//! what its gradient twin computes. The choice is named: `REINFORGE_CPU_LINEAR` = `onednn`
//! (default) or `blas` (what PyTorch's eager `F.linear` runs), or [`set_cpu_linear`]. Autocast
//! regions, other dtypes and devices always run `at::linear`. The two kernels agree to float32
//! rounding (sums in another order).

use std::str::FromStr;
use std::sync::atomic::{AtomicU8, Ordering};

use tch::Tensor;

/// Which kernel runs gradient-free float32 linears on the CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuLinear {
    /// oneDNN's matrix multiply (`mkldnn::_linear_pointwise`).
    Onednn,
    /// libtorch's `at::linear`: the BLAS, as PyTorch's eager `F.linear`.
    Blas,
}

impl FromStr for CpuLinear {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "onednn" => Ok(Self::Onednn),
            "blas" => Ok(Self::Blas),
            _ => Err(format!(
                "REINFORGE_CPU_LINEAR must be onednn or blas, got {s:?}"
            )),
        }
    }
}

/// 0: not yet read from the environment; 1: oneDNN; 2: BLAS.
static CHOICE: AtomicU8 = AtomicU8::new(0);

/// Sets the kernel for the rest of the process (overrides `REINFORGE_CPU_LINEAR`).
pub fn set_cpu_linear(choice: CpuLinear) {
    CHOICE.store(code(choice), Ordering::Relaxed);
}

/// The kernel in use: [`set_cpu_linear`]'s, else `REINFORGE_CPU_LINEAR`'s, else oneDNN where
/// this build has the shim. An unknown value of the variable is reported once and ignored.
pub fn cpu_linear() -> CpuLinear {
    match CHOICE.load(Ordering::Relaxed) {
        1 => CpuLinear::Onednn,
        2 => CpuLinear::Blas,
        _ => {
            let choice = match std::env::var("REINFORGE_CPU_LINEAR") {
                Ok(v) => v.parse().unwrap_or_else(|e| {
                    eprintln!("warning: {e}; using the default");
                    default_choice()
                }),
                Err(_) => default_choice(),
            };
            set_cpu_linear(choice);
            choice
        }
    }
}

fn default_choice() -> CpuLinear {
    if cfg!(reinforge_onednn_linear) {
        CpuLinear::Onednn
    } else {
        CpuLinear::Blas
    }
}

fn code(choice: CpuLinear) -> u8 {
    match choice {
        CpuLinear::Onednn => 1,
        CpuLinear::Blas => 2,
    }
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
    if in_sampling() && cpu_linear() == CpuLinear::Onednn {
        if let Some(y) = onednn_linear(x, w, b) {
            return y;
        }
    }
    x.linear(w, b)
}

/// oneDNN's `x W^T (+ b)`, or `None` where it does not apply: a gradient to record, an
/// autocast region, tensors not float32 on the CPU, or a build without the shim.
pub fn onednn_linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Option<Tensor> {
    shim::onednn(x, w, b)
}

#[cfg(reinforge_onednn_linear)]
mod shim {
    use std::ffi::{c_char, c_void, CStr};

    use tch::Tensor;

    use super::{set_cpu_linear, CpuLinear};

    extern "C" {
        fn rf_onednn_linear(
            x: *const c_void,
            w: *const c_void,
            b: *const c_void,
            out: *mut *mut c_void,
            err: *mut c_char,
            len: usize,
        ) -> i32;
    }

    /// oneDNN's `x W^T (+ b)`, or `None` where it does not apply (gradients, autocast, not
    /// float32 on the CPU). An error (a libtorch without oneDNN) is reported once and turns
    /// the kernel off for the process.
    pub(super) fn onednn(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Option<Tensor> {
        let mut out: *mut c_void = std::ptr::null_mut();
        let mut err = [0u8; 512];
        let b = b.map_or(std::ptr::null(), |b| b.as_ptr().cast());
        // SAFETY: `x`, `w` and `b` (or null) are live tch tensors (`at::Tensor*`) for the
        // call; `err` holds `err.len()` bytes; the shim catches every C++ exception and on
        // success writes a new `at::Tensor*` that `Tensor::from_ptr` takes ownership of.
        let rc = unsafe {
            rf_onednn_linear(
                x.as_ptr().cast(),
                w.as_ptr().cast(),
                b,
                &mut out,
                err.as_mut_ptr().cast(),
                err.len(),
            )
        };
        match rc {
            // SAFETY: rc 0 means `out` is a heap `at::Tensor` nobody else owns.
            0 => Some(unsafe { Tensor::from_ptr(out.cast()) }),
            1 => None,
            _ => {
                let msg = CStr::from_bytes_until_nul(&err)
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default();
                eprintln!("warning: oneDNN linear failed ({msg}); using the BLAS from now on");
                set_cpu_linear(CpuLinear::Blas);
                None
            }
        }
    }
}

#[cfg(not(reinforge_onednn_linear))]
mod shim {
    use tch::Tensor;

    /// This build has no shim: always `at::linear`.
    pub(super) fn onednn(_: &Tensor, _: &Tensor, _: Option<&Tensor>) -> Option<Tensor> {
        None
    }
}
