//! Mixed precision as TRL users get it with `bf16=True` (transformers' Trainer runs the model
//! under `torch.autocast(device_type, dtype=torch.bfloat16)` with float32 weights): parameters,
//! gradients and AdamW state stay float32; inside a model forward, libtorch's autocast runs
//! matmuls and attention in bfloat16 (its cast policy, per op), while the residual stream, the
//! norms' statistics, RoPE tables, log-softmax, log-probs, losses and advantages stay float32
//! (the model and `logprobs` cast where they read low-precision outputs).
//!
//! The switch is process-wide, like torch's autocast state, and set once per run
//! ([`set_bf16`]); [`autocast`] wraps every forward of [`crate::Transformer`], so policy,
//! reference, critic, reward model and sampler follow the same policy. `docs/gpu.md` states the
//! policy and its measured drift against float32 and against transformers.

use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{bail, Result};
use tch::Device;

static BF16: AtomicBool = AtomicBool::new(false);

/// Turns bfloat16 autocast of model forwards on or off for this process. An error where this
/// build has no autocast binding (libtorch's headers were missing at build time).
pub fn set_bf16(on: bool) -> Result<()> {
    if on && !available() {
        bail!("bf16 = true needs libtorch's autocast, which this build lacks (libtorch headers were not found when reinforge-torch was built)");
    }
    BF16.store(on, Ordering::Relaxed);
    Ok(())
}

/// Whether model forwards run under bfloat16 autocast.
pub fn bf16() -> bool {
    BF16.load(Ordering::Relaxed)
}

/// Whether this build can autocast (`csrc/autocast_shim.cpp` compiled).
pub fn available() -> bool {
    cfg!(reinforge_autocast)
}

/// Runs `f` under bfloat16 autocast on `device`'s type when [`bf16`] is on; otherwise runs it
/// as it is. Regions nest; the outermost exit drops autocast's cached weight casts.
pub fn autocast<T>(device: Device, f: impl FnOnce() -> T) -> T {
    if !bf16() {
        return f();
    }
    let Some(device_type) = device_type(device) else {
        return f();
    };
    let _region = Region::enter_bf16(device_type);
    f()
}

/// libtorch's device type index of the devices autocast supports here.
fn device_type(device: Device) -> Option<i32> {
    match device {
        // host: libtorch's CPU device type.
        Device::Cpu => Some(0),
        Device::Cuda(_) => Some(1),
        _ => None,
    }
}

/// An entered autocast region; leaving it (drop, also on unwind) restores the previous state.
struct Region {
    device_type: i32,
    prev_enabled: i32,
    prev_dtype: i32,
}

impl Region {
    fn enter_bf16(device_type: i32) -> Self {
        let (mut prev_enabled, mut prev_dtype) = (0, 0);
        ffi::enter_bf16(device_type, &mut prev_enabled, &mut prev_dtype);
        Self {
            device_type,
            prev_enabled,
            prev_dtype,
        }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        ffi::exit(self.device_type, self.prev_enabled, self.prev_dtype);
    }
}

/// The binding of csrc/autocast_shim.cpp.
#[cfg(reinforge_autocast)]
mod ffi {
    use std::ffi::c_int;

    extern "C" {
        fn rf_autocast_enter_bf16(
            device_type: c_int,
            prev_enabled: *mut c_int,
            prev_dtype: *mut c_int,
        );
        fn rf_autocast_exit(device_type: c_int, prev_enabled: c_int, prev_dtype: c_int);
    }

    pub fn enter_bf16(device_type: i32, prev_enabled: &mut i32, prev_dtype: &mut i32) {
        // SAFETY: an integer in, two valid out-pointers; the shim only sets libtorch's
        // thread-local autocast state.
        unsafe { rf_autocast_enter_bf16(device_type, prev_enabled, prev_dtype) }
    }

    pub fn exit(device_type: i32, prev_enabled: i32, prev_dtype: i32) {
        // SAFETY: as above.
        unsafe { rf_autocast_exit(device_type, prev_enabled, prev_dtype) }
    }
}

/// Without the shim [`set_bf16`] refuses to turn autocast on, so these never run.
#[cfg(not(reinforge_autocast))]
mod ffi {
    pub fn enter_bf16(_: i32, _: &mut i32, _: &mut i32) {}

    pub fn exit(_: i32, _: i32, _: i32) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Kind, Tensor};

    // The process-wide switch is exercised by tests/precision.rs (its own process); these
    // tests enter regions directly so that other unit tests never see the switch on.
    #[test]
    fn matmuls_run_in_bf16_inside_a_region_and_regions_nest() {
        let randn = |s: [i64; 2]| {
            crate::runtime::with_generator(|| Tensor::randn(s, (Kind::Float, Device::Cpu)))
        };
        let (a, w) = (randn([4, 8]), randn([3, 8]));
        let linear = || a.linear::<Tensor>(&w, None).kind();
        assert_eq!(
            autocast(Device::Cpu, linear),
            Kind::Float,
            "switch off: no autocast"
        );
        {
            let _outer = Region::enter_bf16(0);
            {
                let _inner = Region::enter_bf16(0);
                assert_eq!(linear(), Kind::BFloat16);
            }
            assert_eq!(
                linear(),
                Kind::BFloat16,
                "leaving the inner region keeps the outer"
            );
        }
        assert_eq!(linear(), Kind::Float, "outside every region: float32 again");
    }
}
