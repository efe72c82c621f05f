//! The attention of decoding steps (one new token per row over a KV cache) in sampling
//! forwards on the CPU in float32.
//!
//! Decoding reads the whole cache every step, and at a few hundred cached positions the cache
//! is as large as the weights (docs/memory.md). libtorch's CPU `scaled_dot_product_attention`
//! with grouped-query attention reads each key/value head once per query head; the kernel in
//! `csrc/decode_attention_shim.cpp` reads it once per step (all of a group's query heads in
//! one pass), so a token's time grows less with the tokens before it. It runs only inside
//! [`crate::kernels::linear::sampling`] (gradient-free forwards whose results are not compared bit for
//! bit with a training pass), and only where it applies (float32 CPU tensors, one query per
//! row, a boolean mask); everywhere else attention is libtorch's sdpa. The two agree to
//! float32 rounding (sums in another order). The choice is named: `REINFORGE_DECODE_ATTENTION`
//! = `kernel` (default) or `sdpa`, or [`set_decode_attention`].

use std::str::FromStr;

use tch::Tensor;

use crate::kernels::choice::{Choice, Named};

/// What computes the attention of decoding steps in sampling forwards on the CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeAttention {
    /// The one-pass kernel of `csrc/decode_attention_shim.cpp`.
    Kernel,
    /// libtorch's `scaled_dot_product_attention`, as every other pass.
    Sdpa,
}

impl Named for DecodeAttention {
    const ALL: &'static [Self] = &[Self::Kernel, Self::Sdpa];

    fn name(self) -> &'static str {
        match self {
            Self::Kernel => "kernel",
            Self::Sdpa => "sdpa",
        }
    }
}

impl FromStr for DecodeAttention {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        CHOICE.parse(s)
    }
}

static CHOICE: Choice<DecodeAttention> = Choice::new("REINFORGE_DECODE_ATTENTION");

/// Sets the choice for the rest of the process (overrides `REINFORGE_DECODE_ATTENTION`).
pub fn set_decode_attention(choice: DecodeAttention) {
    CHOICE.set(choice);
}

/// The choice in force: [`set_decode_attention`]'s, else `REINFORGE_DECODE_ATTENTION`'s, else
/// the kernel where this build has it. An unknown value is reported once and ignored.
pub fn decode_attention() -> DecodeAttention {
    CHOICE.get(if cfg!(reinforge_decode_attention) {
        DecodeAttention::Kernel
    } else {
        DecodeAttention::Sdpa
    })
}

/// `sdpa(q, k, v, mask, enable_gqa)` for `q` `[B, H, 1, D]` over `k`, `v` `[B, H_kv, S, D]`
/// with a boolean `mask` `[B, 1, 1, S]`, by the kernel: `None` outside sampling forwards, where
/// sdpa is chosen, or where the kernel does not apply (another shape or dtype, a gradient to
/// record, a build without the shim).
pub fn attend(q: &Tensor, k: &Tensor, v: &Tensor, mask: &Tensor) -> Option<Tensor> {
    if !crate::kernels::linear::in_sampling() || decode_attention() != DecodeAttention::Kernel {
        return None;
    }
    let out = shim::attend(q, k, v, mask);
    if out.is_some() {
        KERNEL_CALLS.with(|c| c.set(c.get() + 1));
    }
    out
}

thread_local! {
    static KERNEL_CALLS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many of this thread's [`attend`] calls the kernel computed (rather than standing aside
/// for sdpa), so that a test of a decoding path can check that the kernel really ran. Per
/// thread, so other threads' decoding does not count.
pub fn kernel_calls_on_this_thread() -> u64 {
    KERNEL_CALLS.with(|c| c.get())
}

#[cfg(reinforge_decode_attention)]
mod shim {
    use std::ffi::{c_char, c_void};

    use tch::Tensor;

    use super::{set_decode_attention, DecodeAttention};
    use crate::kernels::choice::call_tensor_shim;

    extern "C" {
        fn rf_decode_attention(
            q: *const c_void,
            k: *const c_void,
            v: *const c_void,
            mask: *const c_void,
            out: *mut *mut c_void,
            err: *mut c_char,
            len: usize,
        ) -> i32;
    }

    /// The kernel's result, or `None` where it does not apply. An error is reported once and
    /// turns the kernel off for the process.
    pub(super) fn attend(q: &Tensor, k: &Tensor, v: &Tensor, mask: &Tensor) -> Option<Tensor> {
        let (q, k, v, mask) = (q.as_ptr(), k.as_ptr(), v.as_ptr(), mask.as_ptr());
        let off = || set_decode_attention(DecodeAttention::Sdpa);
        // SAFETY: the four tensors are live tch tensors (`at::Tensor*`) for the call; the
        // error buffer holds `len` bytes; the shim catches every C++ exception and on success
        // writes to `out` a new `at::Tensor*`, which `call_tensor_shim` takes ownership of.
        call_tensor_shim(
            "the decode attention kernel",
            "sdpa",
            off,
            |out, err, len| unsafe {
                rf_decode_attention(q.cast(), k.cast(), v.cast(), mask.cast(), out, err, len)
            },
        )
    }
}

#[cfg(not(reinforge_decode_attention))]
mod shim {
    use tch::Tensor;

    /// This build has no shim: always sdpa.
    pub(super) fn attend(_: &Tensor, _: &Tensor, _: &Tensor, _: &Tensor) -> Option<Tensor> {
        None
    }
}
