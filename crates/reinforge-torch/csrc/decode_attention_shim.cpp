// Attention of one new token per row over a KV cache (decoding), float32 on the CPU, for
// sampling forwards (src/decode_attention.rs decides when). libtorch's CPU
// `scaled_dot_product_attention` with `enable_gqa` reads each key/value head once per query
// head of its group, in small blocks, and at a few hundred cached positions it took about as
// long as the step's matrix products (docs/memory.md). Decoding is bound by reading the cache,
// so this reads it once: each (row, key/value head) item computes the scores of all its group's
// query heads in one pass over the keys, a softmax in slot order normalises them, and one pass
// over the values accumulates the outputs. No libtorch op computes attention that way on the CPU
// (flash attention has no grouped-query decode path there), hence this file. Used by
// src/decode_attention.rs.
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

// Asks for row `t` (`d` floats) of `base` (row stride `stride`) to be brought into L2: the
// rows a later pass reads, requested while this pass computes, so that reading the cache
// overlaps the arithmetic (a prefetch hint: no fault, no wait). Nothing when `base` is null.
RF_INLINE void prefetch_row(const float* base, int64_t stride, int64_t t, int64_t d) {
  if (base == nullptr) return;
  const char* row = reinterpret_cast<const char*>(base + t * stride);
  for (int64_t o = 0; o < d * 4; o += 64) __builtin_prefetch(row + o, 0, 2);
}

// `q . k` of one query row and one key (`d` floats, a multiple of 8) as eight lanes still to be
// summed: two partial sums halve the chain of dependent multiply-adds.
RF_INLINE v8 dot_lanes(const float* __restrict q, const float* __restrict k, int64_t d) {
  v8 even = {}, odd = {};
  int64_t j = 0;
  for (; j + 16 <= d; j += 16) {
    even += load8(q + j) * load8(k + j);
    odd += load8(q + j + 8) * load8(k + j + 8);
  }
  if (j < d) even += load8(q + j) * load8(k + j);
  return even + odd;
}

// `r[i] = hsum(s[i])` for eight keys' lanes, in hsum's order (halves, then pairs), as one
// vector: the same additions for eight keys at once, by shuffles (one pair across 128-bit
// halves per two keys, the rest within them), in place of eight horizontal sums.
RF_INLINE v8 hsum8(const v8* s) {
  // Halves: u[i] = [x(key i) | x(key i + 4)], x = lo + hi of a key's lanes.
  const v8i lo = {0, 1, 2, 3, 8, 9, 10, 11}, hi = {4, 5, 6, 7, 12, 13, 14, 15};
  v8 u[4];
  for (int i = 0; i < 4; ++i)
    u[i] = __builtin_shuffle(s[i], s[i + 4], lo) + __builtin_shuffle(s[i], s[i + 4], hi);
  // Pairs: [x0 + x2, x1 + x3] of keys 0, 1 | 4, 5 (y0) and 2, 3 | 6, 7 (y1).
  const v8i a = {0, 1, 8, 9, 4, 5, 12, 13}, b = {2, 3, 10, 11, 6, 7, 14, 15};
  const v8 y0 = __builtin_shuffle(u[0], u[1], a) + __builtin_shuffle(u[0], u[1], b);
  const v8 y1 = __builtin_shuffle(u[2], u[3], a) + __builtin_shuffle(u[2], u[3], b);
  // Last pair, keys in order.
  const v8i c = {0, 2, 8, 10, 4, 6, 12, 14}, e = {1, 3, 9, 11, 5, 7, 13, 15};
  return __builtin_shuffle(y0, y1, c) + __builtin_shuffle(y0, y1, e);
}

// Scores `[g, s]` of `g` query rows `q` (`[g, d]`, contiguous; `d` a multiple of 8) against
// `s` keys `k` (row stride `ks`), scaled, with `-inf` where `allowed` is false: one pass over
// the keys, eight at a time, each read from memory once for all `g` queries. A score is
// `hsum(dot_lanes(q, k)) * scale` whether its key is in a block of eight or the tail, so a
// row's scores do not depend on where its keys fall (left padding). Prefetches the rows of
// `next` (the item's values, which `mix` reads next).
RF_CLONES void scores(const float* __restrict q, const float* __restrict k, int64_t ks,
                      const bool* allowed, int64_t g, int64_t s, int64_t d, float scale,
                      float* __restrict out, const float* next, int64_t next_stride) {
  const float neg = -std::numeric_limits<float>::infinity();
  int64_t t = 0;
  for (; t + 8 <= s; t += 8) {
    v8i ok;
    for (int i = 0; i < 8; ++i) {
      prefetch_row(next, next_stride, t + i, d);
      ok[i] = allowed[t + i] ? -1 : 0;
    }
    for (int64_t h = 0; h < g; ++h) {
      v8 lanes[8];
      for (int i = 0; i < 8; ++i) lanes[i] = dot_lanes(q + h * d, k + (t + i) * ks, d);
      // Masked keys are computed too (a cache slot may hold anything) and then replaced.
      store8(out + h * s + t, ok ? hsum8(lanes) * scale : splat8(neg));
    }
  }
  for (; t < s; ++t) {
    prefetch_row(next, next_stride, t, d);
    for (int64_t h = 0; h < g; ++h)
      out[h * s + t] = allowed[t] ? hsum(dot_lanes(q + h * d, k + t * ks, d)) * scale : neg;
  }
}

// `x <- softmax(x)` in place over `n` scores (`-inf`: weight 0). The exponentials are summed
// in eight lanes counted from the row's first unmasked slot, so left padding (which shifts a
// row's keys by whole slots) leaves a row's rounding, and so its result, unchanged: a row
// decodes the same in any batch. Masked slots weigh exactly 0.
RF_CLONES void softmax_row(float* x, int64_t n) {
  const float neg = -std::numeric_limits<float>::infinity();
  int64_t f = 0;
  while (f < n && x[f] == neg) x[f++] = 0.0f;
  if (f == n) return;
  const int64_t m8 = f + (n - f) / 8 * 8;
  v8 vm = splat8(neg);
  for (int64_t t = f; t < m8; t += 8) {
    const v8 v = load8(x + t);
    vm = v > vm ? v : vm;
  }
  float m = hmax(vm);
  for (int64_t t = m8; t < n; ++t) m = x[t] > m ? x[t] : m;
  v8 acc = {};
  for (int64_t t = f; t < m8; t += 8) {
    const v8 e = exp8(load8(x + t) - m);
    store8(x + t, e);
    acc += e;
  }
  if (m8 < n) {  // the tail through one padded vector, so every weight comes from exp8
    v8 tail = splat8(neg);
    for (int64_t t = m8; t < n; ++t) tail[t - m8] = x[t];
    const v8 e = exp8(tail - m);
    for (int64_t t = m8; t < n; ++t) x[t] = e[t - m8];
    acc += e;
  }
  const float inv = 1.0f / hsum(acc);
  for (int64_t t = f; t < n; ++t) x[t] *= inv;
}

// `out[h] = sum_t p[h, t] v[t]` for `g` rows of weights `p` (`[g, s]`) over `s` values `v`
// (row stride `vs`; `d` a multiple of 8). Each output row is summed in registers, 32 lanes at a
// time in four independent sums; the values are read from memory once and from the cache
// again for the group's other heads. Prefetches the rows of `next` (the next item's keys).
RF_CLONES void mix(const float* __restrict p, const float* __restrict v, int64_t vs, int64_t g,
                   int64_t s, int64_t d, float* __restrict out, const float* next,
                   int64_t next_stride) {
  for (int64_t h = 0; h < g; ++h) {
    const float* ph = p + h * s;
    float* oh = out + h * d;
    int64_t c = 0;
    for (; c + 32 <= d; c += 32) {
      v8 a0 = {}, a1 = {}, a2 = {}, a3 = {};
      const bool first = h == 0 && c == 0;
      for (int64_t t = 0; t < s; ++t) {
        if (first) prefetch_row(next, next_stride, t, d);
        const float* vt = v + t * vs + c;
        const float w = ph[t];
        a0 += w * load8(vt);
        a1 += w * load8(vt + 8);
        a2 += w * load8(vt + 16);
        a3 += w * load8(vt + 24);
      }
      store8(oh + c, a0);
      store8(oh + c + 8, a1);
      store8(oh + c + 16, a2);
      store8(oh + c + 24, a3);
    }
    for (; c < d; c += 8) {
      v8 a = {};
      for (int64_t t = 0; t < s; ++t) a += ph[t] * load8(v + t * vs + c);
      store8(oh + c, a);
    }
  }
}

// Whether the kernel computes `sdpa(q, k, v, mask, enable_gqa)` here: float32 CPU tensors, one
// query per row, keys/values `[B, Hkv, S, D]` with unit stride along D (a multiple of 8), a
// boolean mask `[B, 1, 1, S]`, no gradient to record.
bool applies(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
             const at::Tensor& mask) {
  for (const at::Tensor* t : {&q, &k, &v}) {
    if (!t->is_cpu() || t->scalar_type() != at::kFloat || t->dim() != 4) return false;
    if (at::GradMode::is_enabled() && t->requires_grad()) return false;
  }
  const int64_t b = q.size(0), heads = q.size(1), d = q.size(3);
  const int64_t kv = k.size(1), s = k.size(2);
  if (q.size(2) != 1 || kv == 0 || heads % kv != 0) return false;
  if (d % 8 != 0) return false;
  if (k.sizes() != v.sizes() || k.size(0) != b || k.size(3) != d) return false;
  if (k.stride(3) != 1 || v.stride(3) != 1) return false;
  return mask.scalar_type() == at::kBool && mask.dim() == 4 && mask.size(0) == b &&
         mask.size(1) == 1 && mask.size(2) == 1 && mask.size(3) == s;
}

}  // namespace

extern "C" {

// `softmax(q k^T / sqrt(D) + mask) v` for one query per row, `q` `[B, H, 1, D]` over `k`, `v`
// `[B, Hkv, S, D]` (query head h reads key/value head h / (H / Hkv), as `enable_gqa`), into
// `*out` `[B, H, 1, D]` (a new tensor the caller owns). Returns 0 when done, 1 when the kernel
// does not apply (the caller runs sdpa), 2 on an error (its text in `err`).
int rf_decode_attention(const at::Tensor* q, const at::Tensor* k, const at::Tensor* v,
                        const at::Tensor* mask, at::Tensor** out, char* err, size_t len) {
  try {
    if (!applies(*q, *k, *v, *mask)) return 1;
    at::NoGradGuard no_grad;
    const int64_t b = q->size(0), heads = q->size(1), d = q->size(3);
    const int64_t kv = k->size(1), s = k->size(2), g = heads / kv;
    const at::Tensor qc = q->contiguous();
    const at::Tensor allowed = mask->reshape({b, s}).contiguous();
    at::Tensor sc = at::empty({b, heads, s}, q->options());
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    const float* qp = qc.data_ptr<float>();
    const float* kp = k->data_ptr<float>();
    const float* vp = v->data_ptr<float>();
    const bool* ap = allowed.data_ptr<bool>();
    float* sp = sc.data_ptr<float>();
    const int64_t kb = k->stride(0), kh = k->stride(1), kt = k->stride(2);
    const int64_t vb = v->stride(0), vh = v->stride(1), vt = v->stride(2);
    at::Tensor y = at::empty({b, heads, 1, d}, q->options());
    float* yp = y.data_ptr<float>();
    // Items are (row, key/value head): the key/value head's `g` query heads are adjacent. Each
    // item runs its scores, their softmax and the mix in turn, so its values, prefetched
    // during the scores, are still in cache for the mix, and the next item's keys are
    // prefetched during the mix: the cache is streamed without stalls between passes.
    at::parallel_for(0, b * kv, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const int64_t r = i / kv, h = i % kv, first_head = r * heads + h * g;
        const float* values = vp + r * vb + h * vh;
        const int64_t n = i + 1;
        const float* next_keys = n < hi ? kp + (n / kv) * kb + (n % kv) * kh : nullptr;
        float* item_scores = sp + first_head * s;
        scores(qp + first_head * d, kp + r * kb + h * kh, kt, ap + r * s, g, s, d, scale,
               item_scores, values, vt);
        // Softmax per query row, its lanes counted from the row's first unmasked slot
        // (softmax_row): a row's result does not depend on its left padding.
        for (int64_t j = 0; j < g; ++j) softmax_row(item_scores + j * s, s);
        mix(item_scores, values, vt, g, s, d, yp + first_head * d, next_keys, kt);
      }
    });
    *out = new at::Tensor(std::move(y));
    return 0;
  } catch (const std::exception& e) {
    reinforge_copy_error(e, err, len);
  }
  return 2;
}

}  // extern "C"
