// oneDNN's matrix multiply for the float32 linear layers of sampling forwards on the CPU
// (src/linear.rs decides when): `mkldnn::_linear_pointwise`, the op that
// torch.compile's CPU backend (inductor's mkldnn fusion) calls for linears. libtorch's
// `at::linear` on float32 CPU tensors calls the BLAS (MKL's sgemm in PyPI's torch), which on
// the development machine (AMD EPYC, AVX2) took 1.4-1.5x oneDNN's time for a SmolLM2 decoding
// step's 211 matrix products (docs/memory.md). tch binds only aten ops, so this reaches the op
// through the dispatcher (boxed, so no C++ signature of the op is assumed). Used by
// src/linear.rs.
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <string>
#include <vector>

#include "shim_error.h"

namespace {

// Whether oneDNN's op can stand in for `at::linear(x, w, b)`: float32 CPU tensors, no
// autograd graph to record, no autocast region to honour.
bool applies(const at::Tensor& x, const at::Tensor& w, const at::Tensor* b) {
  if (!x.is_cpu() || x.scalar_type() != at::kFloat || w.scalar_type() != at::kFloat ||
      x.dim() < 2 || w.dim() != 2) {
    return false;
  }
  if (b != nullptr && b->scalar_type() != at::kFloat) return false;
  if (at::autocast::is_autocast_enabled(at::kCPU)) return false;
  if (at::GradMode::is_enabled() &&
      (x.requires_grad() || w.requires_grad() || (b != nullptr && b->requires_grad()))) {
    return false;
  }
  return true;
}

}  // namespace

extern "C" {

// `x W^T (+ b)` by oneDNN into `*out` (a new tensor the caller owns). Returns 0 when done, 1
// when the op does not apply (the caller runs `at::linear`), 2 on an error (its text in
// `err`; for example a libtorch built without oneDNN).
int rf_onednn_linear(const at::Tensor* x, const at::Tensor* w, const at::Tensor* b,
                     at::Tensor** out, char* err, size_t len) {
  try {
    if (!applies(*x, *w, b)) return 1;
    static const c10::OperatorHandle op =
        c10::Dispatcher::singleton().findSchemaOrThrow("mkldnn::_linear_pointwise", "");
    std::vector<c10::IValue> stack;
    stack.reserve(6);
    stack.emplace_back(x->contiguous());
    stack.emplace_back(w->contiguous());
    stack.emplace_back(b != nullptr ? c10::IValue(*b) : c10::IValue());
    stack.emplace_back(std::string("none"));
    stack.emplace_back(c10::List<std::optional<at::Scalar>>());
    stack.emplace_back(c10::IValue());
    op.callBoxed(&stack);
    *out = new at::Tensor(stack.back().toTensor());
    return 0;
  } catch (const std::exception& e) {
    reinforge_copy_error(e, err, len);
  }
  return 2;
}

}  // extern "C"
