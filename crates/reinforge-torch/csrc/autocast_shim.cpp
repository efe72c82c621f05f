// libtorch's autocast state (`at::autocast`), which tch binds only through the deprecated
// CUDA-only `set_enabled`: reinforge needs it per device type (CUDA for training, CPU to measure
// the same bf16 policy on machines without a GPU), as `torch.autocast(device_type, dtype)` sets
// it. Used by src/precision.rs.
#include <ATen/autocast_mode.h>

extern "C" {

// Enters a bfloat16 autocast region on `device_type` (0: CPU, 1: CUDA). Writes the previous
// enabled flag and dtype (an at::ScalarType) for the exit.
void rf_autocast_enter_bf16(int device_type, int* prev_enabled, int* prev_dtype) {
  const at::DeviceType dt = device_type == 1 ? at::kCUDA : at::kCPU;
  *prev_enabled = at::autocast::is_autocast_enabled(dt) ? 1 : 0;
  *prev_dtype = static_cast<int>(at::autocast::get_autocast_dtype(dt));
  at::autocast::set_autocast_enabled(dt, true);
  at::autocast::set_autocast_dtype(dt, at::kBFloat16);
  at::autocast::increment_nesting();
}

// Leaves the region: restores the previous state and, at the outermost exit, drops the cached
// low-precision copies of the weights (as torch.autocast's __exit__ does).
void rf_autocast_exit(int device_type, int prev_enabled, int prev_dtype) {
  const at::DeviceType dt = device_type == 1 ? at::kCUDA : at::kCPU;
  if (at::autocast::decrement_nesting() == 0) {
    at::autocast::clear_cache();
  }
  at::autocast::set_autocast_enabled(dt, prev_enabled != 0);
  at::autocast::set_autocast_dtype(dt, static_cast<at::ScalarType>(prev_dtype));
}

}  // extern "C"
