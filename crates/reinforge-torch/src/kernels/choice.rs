//! Process-wide named choices of which kernel runs an op (`REINFORGE_CPU_LINEAR`,
//! `REINFORGE_DECODE_ATTENTION`, `REINFORGE_SAMPLING_OPS`): each is set by a call, or read once
//! from its environment variable, else its default. One implementation, so every switch
//! parses, reports and caches the same way; and calls into the C++ shims that report
//! "done", "does not apply" or an error the same way ([`call_shim`]).

use std::ffi::{c_char, CStr};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU8, Ordering};

/// The options of a [`Choice`]: a small `Copy` enum with a name per variant.
pub trait Named: Copy + Eq + 'static {
    /// Every option, in a fixed order.
    const ALL: &'static [Self];
    /// The option's name in the environment variable.
    fn name(self) -> &'static str;
}

/// One process-wide choice among `T`'s options, read from the environment variable `var` on
/// first use unless [`Choice::set`] came first.
pub struct Choice<T: Named> {
    var: &'static str,
    /// 0: not yet decided; `i + 1`: `T::ALL[i]`.
    code: AtomicU8,
    _options: PhantomData<fn() -> T>,
}

impl<T: Named> Choice<T> {
    /// A choice read from `var`.
    pub const fn new(var: &'static str) -> Self {
        Self {
            var,
            code: AtomicU8::new(0),
            _options: PhantomData,
        }
    }

    /// Sets the choice for the rest of the process (overrides the environment).
    pub fn set(&self, option: T) {
        let i = T::ALL.iter().position(|&o| o == option).unwrap_or(0);
        self.code.store(i as u8 + 1, Ordering::Relaxed);
    }

    /// The choice in force: [`Choice::set`]'s, else the variable's, else `default`. An unknown
    /// value of the variable is reported once and the default kept.
    pub fn get(&self, default: T) -> T {
        match self.code.load(Ordering::Relaxed) {
            0 => {
                let option = std::env::var(self.var).map_or(default, |v| {
                    self.parse(&v).unwrap_or_else(|e| {
                        eprintln!("warning: {e}; using the default");
                        default
                    })
                });
                self.set(option);
                option
            }
            c => T::ALL[usize::from(c) - 1],
        }
    }

    /// The option named `s`, or an error naming the variable and the accepted names.
    pub fn parse(&self, s: &str) -> Result<T, String> {
        T::ALL
            .iter()
            .copied()
            .find(|o| o.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = T::ALL.iter().map(|o| o.name()).collect();
                format!("{} must be {}, got {s:?}", self.var, names.join(" or "))
            })
    }
}

/// What a shim call reported.
pub(crate) enum ShimCall {
    /// It ran (return code 0).
    Done,
    /// The kernel does not apply to these tensors (return code 1): run libtorch's op.
    NotApplicable,
    /// It failed (any other code), with the C++ exception's text.
    Failed(String),
}

/// Calls a shim function that takes an error buffer and its length and returns 0 (done),
/// 1 (does not apply) or 2 (an error whose text it wrote to the buffer).
pub(crate) fn call_shim(f: impl FnOnce(*mut c_char, usize) -> i32) -> ShimCall {
    let mut err = [0u8; 512];
    match f(err.as_mut_ptr().cast(), err.len()) {
        0 => ShimCall::Done,
        1 => ShimCall::NotApplicable,
        _ => ShimCall::Failed(
            CStr::from_bytes_until_nul(&err)
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
        ),
    }
}

/// Calls a shim function that writes a new tensor (an `at::Tensor*` it allocates) to its
/// `out` argument, through [`call_shim`]: the tensor when it ran, `None` when the kernel does
/// not apply, and on a failure a warning naming `kernel` and `fallback`, then `switch_off`
/// (the choice that turns the kernel off for the process) and `None`.
#[cfg_attr(
    not(any(reinforge_onednn_linear, reinforge_decode_attention)),
    allow(dead_code)
)]
pub(crate) fn call_tensor_shim(
    kernel: &str,
    fallback: &str,
    switch_off: impl FnOnce(),
    f: impl FnOnce(*mut *mut std::ffi::c_void, *mut c_char, usize) -> i32,
) -> Option<tch::Tensor> {
    let mut out: *mut std::ffi::c_void = std::ptr::null_mut();
    match call_shim(|err, len| f(&mut out, err, len)) {
        // SAFETY: done means the shim wrote to `out` a heap `at::Tensor` nobody else owns.
        ShimCall::Done => Some(unsafe { tch::Tensor::from_ptr(out.cast()) }),
        ShimCall::NotApplicable => None,
        ShimCall::Failed(msg) => {
            eprintln!("warning: {kernel} failed ({msg}); using {fallback} from now on");
            switch_off();
            None
        }
    }
}
