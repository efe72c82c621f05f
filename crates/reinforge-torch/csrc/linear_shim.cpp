// oneDNN's matrix multiply for the float32 linear layers of sampling forwards on the CPU
// (src/linear.rs decides when): `mkldnn::_linear_pointwise`, the op that
// torch.compile's CPU backend (inductor's mkldnn fusion) calls for linears. libtorch's
// `at::linear` on float32 CPU tensors calls the BLAS (MKL's sgemm in PyPI's torch), which on
// the development machine (AMD EPYC, AVX2) took 1.4-1.5x oneDNN's time for a SmolLM2 decoding
// step's 211 matrix products (docs/memory.md). tch binds only aten ops, so this reaches the op
// through the dispatcher (boxed, so no C++ signature of the op is assumed). Used by
// src/linear.rs.
//
// Also a dot-product kernel for products of few rows (a decoding step's: one row per
// sequence), `rf_dot_linear`. oneDNN's jit sgemm packs the weight matrix into its own layout on
// every call and reached about 65 GFLOP/s on a 32-row SmolLM2 step on the development machine
// (2 AVX2 cores); the weights are read once per step anyway, so this kernel reads them where
// they lie: each output is the dot product of an input row and a weight row, both contiguous
// along K, computed 4 rows x 3 outputs at a time in eight-float lanes, over tiles of 6 weight
// rows that stay in cache for every block of 4 input rows. Each output's sum order (lane k mod 8, then
// `hsum`, then the K tail) is fixed by K alone, so a row's result does not depend on the batch
// it is in, the thread count or the blocking. The `gemm` crate (candle's CPU matmul) and MKL's
// packed sgemm were slower than oneDNN here (docs/memory.md).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "shim_error.h"
#include "vec8.h"

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

// Input rows per register block and outputs per register block of the dot kernel: 12
// accumulators of eight lanes plus 3 weight vectors and an input vector fill AVX2's 16
// registers. Outputs per tile: TILE_BLOCKS register blocks (6 weight rows, 14 KB at K = 576,
// which stay in L1 beside 4 input rows) reused by every row block. 2 beat 1, 3, 4 and 8 in
// `examples/linear_bench` on the development machine.
constexpr int64_t ROW_BLOCK = 4;
constexpr int64_t OUT_BLOCK = 3;
constexpr int64_t TILE_BLOCKS = 2;
constexpr int64_t TILE = OUT_BLOCK * TILE_BLOCKS;

// y[r][n] = x[r] . w[n] (+ b[n]) for R rows from `r0` and NB outputs from `n0`.
template <int R, int NB>
RF_INLINE void dot_block(const float* __restrict x, const float* __restrict w,
                         const float* __restrict b, float* __restrict y, int64_t k, int64_t n,
                         int64_t r0, int64_t n0) {
  v8 acc[R][NB];
  for (int i = 0; i < R; ++i) {
    for (int j = 0; j < NB; ++j) acc[i][j] = splat8(0.0f);
  }
  const float* xr[R];
  const float* wn[NB];
  for (int i = 0; i < R; ++i) xr[i] = x + (r0 + i) * k;
  for (int j = 0; j < NB; ++j) wn[j] = w + (n0 + j) * k;
  const int64_t k8 = k - k % 8;
  for (int64_t c = 0; c < k8; c += 8) {
    v8 wv[NB];
    for (int j = 0; j < NB; ++j) wv[j] = load8(wn[j] + c);
    for (int i = 0; i < R; ++i) {
      const v8 xv = load8(xr[i] + c);
      for (int j = 0; j < NB; ++j) acc[i][j] += xv * wv[j];
    }
  }
  for (int i = 0; i < R; ++i) {
    for (int j = 0; j < NB; ++j) {
      float s = hsum(acc[i][j]);
      for (int64_t c = k8; c < k; ++c) s += xr[i][c] * wn[j][c];
      y[(r0 + i) * n + n0 + j] = b == nullptr ? s : s + b[n0 + j];
    }
  }
}

// Asks for the bytes [lo, hi) of `p` to be brought into L2 (prefetch hints: no fault, no wait).
RF_INLINE void prefetch_l2(const char* p, int64_t lo, int64_t hi) {
  for (int64_t o = lo; o < hi; o += 64) __builtin_prefetch(p + o, 0, 2);
}

// Outputs [n0, n1) of every one of the `m` rows. The tile's weight rows come from memory in
// its first row pass and from cache in the others, so each pass also prefetches its share of
// the next tile's weights (`next`, `next_bytes`): the memory stream then overlaps the
// arithmetic instead of stalling the first pass (about 20% of the LM head's time here).
RF_CLONES void dot_tile(const float* __restrict x, const float* __restrict w,
                        const float* __restrict b, float* __restrict y, int64_t m, int64_t k,
                        int64_t n, int64_t n0, int64_t n1, const float* next,
                        int64_t next_bytes) {
  const int64_t full = n0 + (n1 - n0) / OUT_BLOCK * OUT_BLOCK;
  const int64_t passes = m / ROW_BLOCK + m % ROW_BLOCK;
  const int64_t share = (next_bytes / 64 + passes) / passes * 64;
  const char* pf = reinterpret_cast<const char*>(next);
  int64_t pass = 0;
  auto prefetch_share = [&]() {
    const int64_t lo = pass * share;
    prefetch_l2(pf, lo, std::min(next_bytes, lo + share));
    ++pass;
  };
  int64_t r = 0;
  for (; r + ROW_BLOCK <= m; r += ROW_BLOCK) {
    prefetch_share();
    for (int64_t j = n0; j < full; j += OUT_BLOCK) dot_block<ROW_BLOCK, OUT_BLOCK>(x, w, b, y, k, n, r, j);
    for (int64_t j = full; j < n1; ++j) dot_block<ROW_BLOCK, 1>(x, w, b, y, k, n, r, j);
  }
  for (; r < m; ++r) {
    prefetch_share();
    for (int64_t j = n0; j < full; j += OUT_BLOCK) dot_block<1, OUT_BLOCK>(x, w, b, y, k, n, r, j);
    for (int64_t j = full; j < n1; ++j) dot_block<1, 1>(x, w, b, y, k, n, r, j);
  }
}

// Whether this CPU runs the AVX2 clone of the kernel (the baseline clone is slower than oneDNN).
bool has_avx2_fma() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
#else
  return false;
#endif
}

}  // namespace

extern "C" {

// `x W^T (+ b)` by the dot kernel into `*out` (a new tensor the caller owns), for `x` of at
// most `max_rows` rows. Returns 0 when done, 1 when the kernel does not apply (more rows, not
// float32 contiguous CPU tensors, a gradient to record, autocast, no AVX2), 2 on an error.
int rf_dot_linear(const at::Tensor* x, const at::Tensor* w, const at::Tensor* b,
                  int64_t max_rows, at::Tensor** out, char* err, size_t len) {
  try {
    if (!has_avx2_fma() || !applies(*x, *w, b) || !x->is_contiguous() || !w->is_contiguous() ||
        (b != nullptr && (!b->is_contiguous() || b->dim() != 1 || b->size(0) != w->size(0)))) {
      return 1;
    }
    const int64_t k = w->size(1), n = w->size(0);
    if (x->size(-1) != k) return 1;
    const int64_t m = k == 0 ? 0 : x->numel() / k;
    if (m > max_rows || k == 0) return 1;
    std::vector<int64_t> shape(x->sizes().begin(), x->sizes().end());
    shape.back() = n;
    at::Tensor y = at::empty(shape, x->options());
    const float* xp = x->data_ptr<float>();
    const float* wp = w->data_ptr<float>();
    const float* bp = b == nullptr ? nullptr : b->data_ptr<float>();
    float* yp = y.data_ptr<float>();
    const int64_t tiles = (n + TILE - 1) / TILE;
    at::parallel_for(0, tiles, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t t = lo; t < hi; ++t) {
        const int64_t n0 = t * TILE, n1 = std::min(n, n0 + TILE);
        // The next tile of this thread's range, if any, to prefetch.
        const int64_t next_rows = t + 1 < hi ? std::min(n, n1 + TILE) - n1 : 0;
        dot_tile(xp, wp, bp, yp, m, k, n, n0, n1, wp + n1 * k, next_rows * k * 4);
      }
    });
    *out = new at::Tensor(std::move(y));
    return 0;
  } catch (const std::exception& e) {
    reinforge_copy_error(e, err, len);
  }
  return 2;
}

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
