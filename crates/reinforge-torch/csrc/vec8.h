// Eight-float vectors for the sampling kernels (decode_attention_shim.cpp,
// sampling_ops_shim.cpp): GCC's vector extension, so the same loops compile to AVX2 in the
// x86-64-v3 clone of a function (RF_CLONES) and to pairs of SSE operations in the baseline one
// (autovectorising the scalar loops gave neither). Loads and stores are unaligned.
#pragma once

#include <cstdint>
#include <limits>

// Functions marked RF_CLONES are compiled twice on x86-64 (AVX2 with FMA, and the baseline)
// and the loader picks one by the CPU (GCC's function multiversioning), so one binary runs
// everywhere.
#if defined(__x86_64__) && defined(__GNUC__)
#define RF_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define RF_CLONES
#endif

#define RF_INLINE inline __attribute__((always_inline))

typedef float v8 __attribute__((vector_size(32), aligned(4)));
typedef int32_t v8i __attribute__((vector_size(32), aligned(4)));

RF_INLINE v8 load8(const float* p) { return *reinterpret_cast<const v8*>(p); }
RF_INLINE void store8(float* p, v8 x) { *reinterpret_cast<v8*>(p) = x; }
RF_INLINE v8 splat8(float x) { return v8{x, x, x, x, x, x, x, x}; }

// The sum of `a`'s eight lanes (as two halves of four, then pairs): a fixed order.
RF_INLINE float hsum(v8 a) {
  typedef float v4 __attribute__((vector_size(16)));
  v4 lo, hi;
  __builtin_memcpy(&lo, &a, sizeof lo);
  __builtin_memcpy(&hi, reinterpret_cast<const char*>(&a) + sizeof lo, sizeof hi);
  const v4 x = lo + hi;
  return (x[0] + x[2]) + (x[1] + x[3]);
}

// Whether any lane of the mask `m` (a vector comparison's result) is set.
RF_INLINE bool any8(v8i m) {
  uint64_t w[4];
  __builtin_memcpy(w, &m, sizeof w);
  return (w[0] | w[1] | w[2] | w[3]) != 0;
}

// The largest of `a`'s eight lanes.
RF_INLINE float hmax(v8 a) {
  float m = a[0];
  for (int i = 1; i < 8; ++i) m = a[i] > m ? a[i] : m;
  return m;
}

// e^x per lane, within about 2 ulp for x in [-87.3, 88.4]: Cody-Waite reduction
// x = n ln2 + r and Cephes' degree-6 polynomial for e^r (the expf of Cephes and of
// avx_mathfun), scaled by 2^n through the exponent bits. Exactly 0 below -87.3 (so a masked
// score of -inf weighs 0), +inf above 88.4, NaN for NaN. Written here because libtorch's
// vectorised exp (Sleef, at::vec) is only reachable from code built with its CPU-capability
// machinery.
RF_INLINE v8 exp8(v8 x) {
  const v8 lo = splat8(-87.3f), hi = splat8(88.3762626647949f);
  const v8i under = x < lo, over = x > hi;
  v8 c = x < lo ? lo : x;
  c = c > hi ? hi : c;
  v8 fx = c * 1.44269504088896341f + 0.5f;
  v8 n = __builtin_convertvector(__builtin_convertvector(fx, v8i), v8);
  n = n > fx ? n - 1.0f : n;  // floor
  v8 r = c - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  v8 y = splat8(1.9875691500e-4f);
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * (r * r) + r + 1.0f;
  const v8i bits = (__builtin_convertvector(n, v8i) + 127) << 23;
  v8 scale;
  __builtin_memcpy(&scale, &bits, sizeof scale);
  y = y * scale;
  y = under ? splat8(0.0f) : y;
  return over ? splat8(std::numeric_limits<float>::infinity()) : y;
}
