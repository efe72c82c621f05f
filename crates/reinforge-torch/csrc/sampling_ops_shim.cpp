// Fused element-wise kernels of sampling forwards, float32 on the CPU (src/fused.rs decides
// when): RMSNorm, rotary embedding of queries and keys, SiLU(gate) * up, and the statistics of
// a decoding step's logits (greedy token, log-sum-exp, entropy). In a decoding step every
// tensor but the weights is a few rows, so libtorch's composite versions (RMSNorm is six ops,
// rotate-half RoPE five per tensor, the log-softmax, exponential, product, sum and argmax of the
// draw five passes over the vocabulary) cost their per-op overhead and their passes, on one
// thread, while the other waits for the next matrix product (docs/memory.md). Each kernel here
// is one pass (two for the logits), parallel over rows. Same design as vLLM's CPU kernels
// (csrc/cpu/layernorm.cpp, activation.cpp, pos_encoding.cpp), written against ATen's
// tensors. Used by src/fused.rs.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "shim_error.h"
#include "vec8.h"

namespace {

// Whether `t` is a float32 CPU tensor with no gradient to record and contiguous memory.
bool plain_f32(const at::Tensor& t) {
  return t.is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous() &&
         !(at::GradMode::is_enabled() && t.requires_grad());
}

// Rows per task of a parallel loop over rows of `width` floats: about 16K floats a task, so
// a task pays for waking the other thread.
int64_t grain(int64_t width) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, width)); }

// `y = x / sqrt(mean(x^2) + eps) * w` over one row of `h` floats.
RF_CLONES void rms_row(const float* __restrict x, const float* __restrict w, int64_t h,
                       float eps, float* __restrict y) {
  const int64_t h8 = h / 8 * 8;
  v8 acc = {};
  for (int64_t j = 0; j < h8; j += 8) {
    const v8 v = load8(x + j);
    acc += v * v;
  }
  float ss = hsum(acc);
  for (int64_t j = h8; j < h; ++j) ss += x[j] * x[j];
  const float r = 1.0f / std::sqrt(ss / static_cast<float>(h) + eps);
  for (int64_t j = 0; j < h8; j += 8) store8(y + j, load8(x + j) * r * load8(w + j));
  for (int64_t j = h8; j < h; ++j) y[j] = x[j] * r * w[j];
}

// Rotate-half RoPE in place on `n` heads of `d` floats (`x`, contiguous; `d` even) at one
// position with tables `c`, `s` of `d` floats: `x * cos + rotate_half(x) * sin`.
RF_CLONES void rope_heads(float* __restrict x, const float* __restrict c,
                          const float* __restrict s, int64_t n, int64_t d) {
  const int64_t half = d / 2, h8 = half / 8 * 8;
  for (int64_t h = 0; h < n; ++h) {
    float* a = x + h * d;
    float* b = a + half;
    for (int64_t j = 0; j < h8; j += 8) {
      const v8 x1 = load8(a + j), x2 = load8(b + j);
      store8(a + j, x1 * load8(c + j) - x2 * load8(s + j));
      store8(b + j, x2 * load8(c + half + j) + x1 * load8(s + half + j));
    }
    for (int64_t j = h8; j < half; ++j) {
      const float x1 = a[j], x2 = b[j];
      a[j] = x1 * c[j] - x2 * s[j];
      b[j] = x2 * c[half + j] + x1 * s[half + j];
    }
  }
}

// `y = silu(g) * u = g / (1 + e^-g) * u` over `n` floats.
RF_CLONES void silu_mul_run(const float* __restrict g, const float* __restrict u, int64_t n,
                            float* __restrict y) {
  const int64_t n8 = n / 8 * 8;
  for (int64_t j = 0; j < n8; j += 8) {
    const v8 v = load8(g + j);
    store8(y + j, v / (1.0f + exp8(-v)) * load8(u + j));
  }
  for (int64_t j = n8; j < n; ++j) y[j] = g[j] / (1.0f + std::exp(-g[j])) * u[j];
}

// One row of `v` logits: the index of its first largest value, its log-sum-exp and the entropy
// of its softmax, `log s - sum(e (x - m)) / s` with `e = exp(x - m)`, `s = sum(e)`. A row with a
// NaN reports a NaN log-sum-exp (the caller falls back to libtorch).
RF_CLONES void logit_stats(const float* __restrict x, int64_t v, int64_t* arg, float* lse,
                           float* entropy) {
  const float neg = -std::numeric_limits<float>::infinity();
  const int64_t v8n = v / 8 * 8;
  v8 vm = splat8(neg);
  v8i nanv = {};
  for (int64_t j = 0; j < v8n; j += 8) {
    const v8 a = load8(x + j);
    vm = a > vm ? a : vm;
    nanv |= a != a;
  }
  float m = hmax(vm);
  bool nan = any8(nanv);
  for (int64_t j = v8n; j < v; ++j) {
    m = x[j] > m ? x[j] : m;
    nan |= std::isnan(x[j]);
  }
  int64_t first = -1;
  for (int64_t j = 0; j < v8n && first < 0; j += 8) {
    if (!any8(load8(x + j) == splat8(m))) continue;
    for (int64_t i = j; i < j + 8; ++i) {
      if (x[i] == m) {
        first = i;
        break;
      }
    }
  }
  for (int64_t j = v8n; j < v && first < 0; ++j) {
    if (x[j] == m) first = j;
  }
  if (nan || first < 0 || !std::isfinite(m)) {
    *arg = 0;
    *lse = std::numeric_limits<float>::quiet_NaN();
    *entropy = *lse;
    return;
  }
  // Differences below -88 weigh exactly 0; clamping them keeps 0 * (x - m) finite for -inf.
  const v8 floor = splat8(-88.0f);
  v8 se = {}, sd = {};
  for (int64_t j = 0; j < v8n; j += 8) {
    v8 dlt = load8(x + j) - m;
    dlt = dlt < floor ? floor : dlt;
    const v8 e = exp8(dlt);
    se += e;
    sd += e * dlt;
  }
  float s = hsum(se), t = hsum(sd);
  for (int64_t j = v8n; j < v; ++j) {
    const float dlt = std::max(x[j] - m, -88.0f);
    const float e = dlt <= -87.3f ? 0.0f : std::exp(dlt);
    s += e;
    t += e * dlt;
  }
  const float ls = std::log(s);
  *arg = first;
  *lse = m + ls;
  *entropy = ls - t / s;
}

}  // namespace

extern "C" {

// RMSNorm of `x` (`[.., H]`) with weight `w` (`[H]`) into `*out` (a new tensor the caller
// owns). Returns 0 when done, 1 when the kernel does not apply (the caller runs libtorch),
// 2 on an error (its text in `err`).
int rf_rms_norm(const at::Tensor* x, const at::Tensor* w, double eps, at::Tensor** out,
                char* err, size_t len) {
  try {
    if (!plain_f32(*x) || !plain_f32(*w) || w->dim() != 1 || x->dim() < 1 ||
        x->size(-1) != w->size(0)) {
      return 1;
    }
    at::NoGradGuard no_grad;
    const int64_t h = w->size(0), rows = h == 0 ? 0 : x->numel() / h;
    at::Tensor y = at::empty_like(*x);
    const float* xp = x->data_ptr<float>();
    const float* wp = w->data_ptr<float>();
    float* yp = y.data_ptr<float>();
    const float e = static_cast<float>(eps);
    at::parallel_for(0, rows, grain(h), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) rms_row(xp + r * h, wp, h, e, yp + r * h);
    });
    *out = new at::Tensor(std::move(y));
    return 0;
  } catch (const std::exception& e) {
    reinforge_copy_error(e, err, len);
  }
  return 2;
}

// Rotary embedding in place of queries `q` `[B, T, H, D]` and keys `k` `[B, T, Hkv, D]` with
// tables `cos`, `sin` `[B, 1, T, D]`. Returns 0 when done (both rotated), 1 when the kernel
// does not apply (neither is touched), 2 on an error.
int rf_rope_(const at::Tensor* q, const at::Tensor* k, const at::Tensor* cos,
             const at::Tensor* sin, char* err, size_t len) {
  try {
    for (const at::Tensor* t : {q, k, cos, sin}) {
      if (!plain_f32(*t) || t->dim() != 4) return 1;
    }
    const int64_t b = q->size(0), t = q->size(1), d = q->size(3);
    if (d % 2 != 0 || k->size(0) != b || k->size(1) != t || k->size(3) != d) return 1;
    for (const at::Tensor* tab : {cos, sin}) {
      if (tab->size(0) != b || tab->size(1) != 1 || tab->size(2) != t || tab->size(3) != d) {
        return 1;
      }
    }
    at::NoGradGuard no_grad;
    const int64_t hq = q->size(2), hk = k->size(2);
    float* qp = q->data_ptr<float>();
    float* kp = k->data_ptr<float>();
    const float* cp = cos->data_ptr<float>();
    const float* sp = sin->data_ptr<float>();
    at::parallel_for(0, b * t, grain((hq + hk) * d), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        rope_heads(qp + i * hq * d, cp + i * d, sp + i * d, hq, d);
        rope_heads(kp + i * hk * d, cp + i * d, sp + i * d, hk, d);
      }
    });
    return 0;
  } catch (const std::exception& e) {
    reinforge_copy_error(e, err, len);
  }
  return 2;
}

// `silu(gate) * up` into `*out` (a new tensor the caller owns). Returns 0, 1 (does not apply)
// or 2 (an error), as rf_rms_norm.
int rf_silu_mul(const at::Tensor* gate, const at::Tensor* up, at::Tensor** out, char* err,
                size_t len) {
  try {
    if (!plain_f32(*gate) || !plain_f32(*up) || gate->sizes() != up->sizes()) return 1;
    at::NoGradGuard no_grad;
    at::Tensor y = at::empty_like(*gate);
    const float* gp = gate->data_ptr<float>();
    const float* up_ = up->data_ptr<float>();
    float* yp = y.data_ptr<float>();
    // Chunks of whole vectors, so a chunk's split does not change which floats take the
    // scalar tail.
    const int64_t n = gate->numel(), blocks = (n + 4095) / 4096;
    at::parallel_for(0, blocks, 4, [&](int64_t lo, int64_t hi) {
      const int64_t a = lo * 4096, z = std::min(n, hi * 4096);
      silu_mul_run(gp + a, up_ + a, z - a, yp + a);
    });
    *out = new at::Tensor(std::move(y));
    return 0;
  } catch (const std::exception& e) {
    reinforge_copy_error(e, err, len);
  }
  return 2;
}

// Per row of `logits` `[B, V]`: the greedy token `*arg` (`[B]`, int64; the first largest
// logit, as argmax), and `*stats` `[B, 2]`: the log-sum-exp and the entropy of the row's
// softmax. Returns 0, 1 (does not apply, or a row is not finite) or 2 (an error).
int rf_logit_stats(const at::Tensor* logits, at::Tensor** arg, at::Tensor** stats, char* err,
                   size_t len) {
  try {
    if (!plain_f32(*logits) || logits->dim() != 2 || logits->size(1) == 0) return 1;
    at::NoGradGuard no_grad;
    const int64_t b = logits->size(0), v = logits->size(1);
    at::Tensor a = at::empty({b}, logits->options().dtype(at::kLong));
    at::Tensor st = at::empty({b, 2}, logits->options());
    const float* xp = logits->data_ptr<float>();
    int64_t* ap = a.data_ptr<int64_t>();
    float* sp = st.data_ptr<float>();
    at::parallel_for(0, b, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) logit_stats(xp + r * v, v, ap + r, sp + 2 * r, sp + 2 * r + 1);
    });
    for (int64_t r = 0; r < b; ++r) {
      if (std::isnan(sp[2 * r])) return 1;
    }
    *arg = new at::Tensor(std::move(a));
    *stats = new at::Tensor(std::move(st));
    return 0;
  } catch (const std::exception& e) {
    reinforge_copy_error(e, err, len);
  }
  return 2;
}

}  // extern "C"
