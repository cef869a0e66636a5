/* Vectorised expf for the softmaxes (attention, cross-entropy): out[i] = expf(in[i] - sub).
 *
 * libm's expf is a scalar call per element (~2M per training step in attention alone). This one
 * runs 8 lanes at a time with GCC/Clang vector extensions: the float argument is widened to
 * double, reduced as x = k ln2 + r (|r| <= ln2/2, fdlibm's two-part ln2), exp(r) is a degree-10
 * Taylor polynomial (relative error < 3e-13) scaled by 2^k, and the double result is rounded to
 * float once. So the result is the correctly rounded expf except when exp(x) lies within 3e-13
 * (relative) of a rounding boundary between two floats: it can then differ from glibc's expf
 * (itself correct to 0.502 ulp, computed the same way in double) by one ulp, a few times per
 * million arguments. Denormal results round as from double; x < -200 gives 0, x > 89 gives inf
 * (as expf), NaN gives NaN. */
/* Contraction off: the AVX-512F clone has FMAs, and a fused multiply-add in the polynomial or the
 * reduction would round differently from the other clones (which have none). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cpu_kernels.h"

#if defined(__GNUC__) && !defined(__clang__)
/* 32-byte vectors passed between non-AVX functions: all of them are inlined below anyway */
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef double v8d __attribute__((vector_size(64)));
typedef int64_t v8l __attribute__((vector_size(64)));
typedef uint64_t v8ul __attribute__((vector_size(64)));

#define INL static inline __attribute__((always_inline))
#define F8(s) ((v8f){s, s, s, s, s, s, s, s})
#define I8(s) ((v8i){s, s, s, s, s, s, s, s})
#define D8(s) ((v8d){s, s, s, s, s, s, s, s})

INL v8f fsel(v8i m, v8f a, v8f b) { return (v8f)(((v8i)a & m) | ((v8i)b & ~m)); }
/* a < b as a lane mask, for |a - b| < 2^31, without a vector comparison (GCC lowers those
 * element by element when the vector is wider than the registers, as 32 bytes are for SSE2) */
INL v8i lt(v8i a, v8i b) {
  typedef uint32_t v8u __attribute__((vector_size(32)));
  return (v8i)((v8u)a - (v8u)b) >> 31;
}

INL v8f exp_v8(v8f xf) {
  const v8i bits = (v8i)xf, absb = bits & I8(0x7fffffff), neg = bits >> 31;
  const v8i nan = lt(I8(0x7f800000), absb);
  v8f xc = fsel(neg & lt(I8(0x43480000), absb), F8(-200.0f), xf); /* x < -200 (-inf too) */
  xc = fsel(~neg & lt(I8(0x42b20000), absb), F8(89.0f), xc);      /* x > 89 (+inf too) */
  xc = fsel(nan, F8(0.0f), xc);
  const v8d x = __builtin_convertvector(xc, v8d);
  const double shift = 0x1.8p52; /* kd + shift rounds kd to an integer, held in the low bits */
  v8d kd = x * D8(1.4426950408889634) + D8(shift);
  const v8ul ki = (v8ul)kd;
  kd -= D8(shift);
  const v8d r = (x - kd * D8(6.93147180369123816490e-01)) - kd * D8(1.90821492927058770002e-10);
  v8d p = D8(1.0 / 3628800.0);
  p = p * r + D8(1.0 / 362880.0);
  p = p * r + D8(1.0 / 40320.0);
  p = p * r + D8(1.0 / 5040.0);
  p = p * r + D8(1.0 / 720.0);
  p = p * r + D8(1.0 / 120.0);
  p = p * r + D8(1.0 / 24.0);
  p = p * r + D8(1.0 / 6.0);
  p = p * r + D8(0.5);
  p = p * r + D8(1.0);
  p = p * r + D8(1.0);
  /* 2^k: k is in the low bits of ki (|k| <= 289), so ki << 52 is k << 52 modulo 2^64 */
  const v8d scale = (v8d)((v8ul)D8(1.0) + (ki << 52));
  const v8f y = __builtin_convertvector(p * scale, v8f);
  return fsel(nan, xf, y);
}

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__AVX2__) && \
    !defined(__SANITIZE_ADDRESS__)
/* AVX-512F: the 8 doubles of the polynomial are one register instead of two */
#define EXP_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define EXP_CLONES
#endif

EXP_CLONES void loom__cpu_exp_sub(float *out, const float *in, size_t n, float sub) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    v8f x;
    memcpy(&x, in + i, sizeof x);
    x = exp_v8(x - F8(sub));
    memcpy(out + i, &x, sizeof x);
  }
  if (i < n) { /* tail: a padded copy, same arithmetic */
    float b[8] = {0};
    memcpy(b, in + i, (n - i) * sizeof(float));
    v8f x;
    memcpy(&x, b, sizeof x);
    x = exp_v8(x - F8(sub));
    memcpy(b, &x, sizeof x);
    memcpy(out + i, b, (n - i) * sizeof(float));
  }
}
