/* CPU GELU (tanh approximation), forward and backward, with a vectorised tanhf.
 *
 * GELU's tanhf was ~60% of the non-GEMM time of a training step: two scalar libm calls
 * (tanhf -> expm1f) per element, forward and backward. tanhf_v8 below evaluates tanhf on 8 lanes
 * at once with GCC/Clang vector extensions (SSE2 pairs on baseline x86-64, one register with
 * AVX2): it is the fdlibm algorithm that glibc's tanhf and expm1f implement
 * (sysdeps/ieee754/flt-32/s_tanhf.c, s_expm1f.c; glibc <= 2.40 on x86-64 uses exactly these),
 * every branch computed and the lane's own selected, with the same float operations in the same
 * order. So it is not an approximation of tanhf: it returns glibc's tanhf bit for bit (checked
 * over all 2^32 inputs against glibc 2.36), and GELU's results are unchanged.
 *
 * Floating-point contraction must stay off here: an FMA would round differently from the scalar
 * code it mirrors (the default x86-64 target has no FMA, so this only matters for -march builds
 * or the AVX2 clone, which is compiled without FMA). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
/* 32-byte vectors passed between non-AVX functions: all of them are inlined below anyway */
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cpu_kernels.h"

#define GELU_SCALING 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_COEF 0.044715f

typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

#define INL static inline __attribute__((always_inline))
#define V8(s) ((v8f){s, s, s, s, s, s, s, s})
#define I8(s) ((v8i){s, s, s, s, s, s, s, s})

/* lane-wise m ? a : b, m being a comparison result (all ones or all zeros per lane) */
INL v8f vsel(v8i m, v8f a, v8f b) { return (v8f)(((v8i)a & m) | ((v8i)b & ~m)); }
INL v8i isel(v8i m, v8i a, v8i b) { return (a & m) | (b & ~m); }
/* add k to the exponent field (glibc's SET_FLOAT_WORD(y, i + (k << 23))), two's complement */
INL v8f addexp(v8f y, v8i k) {
  typedef uint32_t v8u __attribute__((vector_size(32)));
  return (v8f)((v8u)y + ((v8u)k << 23));
}

/* fdlibm expm1f for |a| < 27*ln2, a not NaN (the domain tanhf calls it on) */
INL v8f expm1f_v8(v8f a) {
  const float ln2_hi = 6.9313812256e-01f, ln2_lo = 9.0580006145e-06f, invln2 = 1.4426950216e+00f;
  const float Q1 = -3.3333335072e-02f, Q2 = 1.5873016091e-03f, Q3 = -7.9365076090e-05f,
              Q4 = 4.0082177293e-06f, Q5 = -2.0109921195e-07f;
  const v8i hx = (v8i)a & I8(0x7fffffff);
  const v8i xneg = (v8i)a < I8(0);
  /* argument reduction: |a| > 0.5 ln2; within it, |a| < 1.5 ln2 takes k = +-1 */
  const v8i red = hx > I8(0x3eb17218), near1 = hx < I8(0x3F851592);
  const v8f hi1 = vsel(xneg, a + V8(ln2_hi), a - V8(ln2_hi));
  const v8f lo1 = vsel(xneg, V8(-ln2_lo), V8(ln2_lo));
  const v8i k1 = isel(xneg, I8(-1), I8(1));
  const v8f kraw = V8(invln2) * a + vsel(xneg, V8(-0.5f), V8(0.5f));
  const v8i kg = __builtin_convertvector(kraw, v8i); /* truncation, as C's float -> int */
  const v8f tg = __builtin_convertvector(kg, v8f);
  const v8f hig = a - tg * V8(ln2_hi), log_ = tg * V8(ln2_lo);
  const v8f hi = vsel(near1, hi1, hig), lo = vsel(near1, lo1, log_);
  const v8f xr = hi - lo;
  const v8f cr = (hi - xr) - lo;
  const v8f x = vsel(red, xr, a), c = vsel(red, cr, V8(0.0f));
  const v8i k = isel(red, isel(near1, k1, kg), I8(0));
  /* x is now in the primary range */
  const v8f hfx = V8(0.5f) * x;
  const v8f hxs = x * hfx;
  const v8f r1 =
      V8(1.0f) +
      hxs * (V8(Q1) + hxs * (V8(Q2) + hxs * (V8(Q3) + hxs * (V8(Q4) + hxs * V8(Q5)))));
  const v8f t = V8(3.0f) - r1 * hfx;
  v8f e = hxs * ((r1 - t) / (V8(6.0f) - x * t));
  const v8f r_k0 = x - (x * e - hxs);
  e = (x * (e - c) - c);
  e -= hxs;
  const v8f r_km1 = V8(0.5f) * (x - e) - V8(0.5f);
  const v8f r_kp1 = vsel(x < V8(-0.25f), -V8(2.0f) * (e - (x + V8(0.5f))),
                         V8(1.0f) + V8(2.0f) * (x - e));
  const v8f r_far = addexp(V8(1.0f) - (e - x), k) - V8(1.0f);          /* k <= -2 || k > 56 */
  const v8f p2mk = (v8f)((I8(0x7f) - k) << 23);                         /* 2^-k */
  const v8f r_mid = addexp((V8(1.0f) - p2mk) - (e - x), k);             /* 2 <= k < 23 */
  const v8f r_hi = addexp((x - (e + p2mk)) + V8(1.0f), k);              /* 23 <= k <= 56 */
  v8f r = vsel(k < I8(23), r_mid, r_hi);
  r = vsel((k <= I8(-2)) | (k > I8(56)), r_far, r);
  r = vsel(k == I8(1), r_kp1, r);
  r = vsel(k == I8(-1), r_km1, r);
  r = vsel(k == I8(0), r_k0, r);
  return vsel(hx < I8(0x33000000), a, r); /* |a| < 2^-25: a */
}

/* fdlibm tanhf, bitwise glibc's tanhf */
INL v8f tanhf_v8(v8f x) {
  const v8i jx = (v8i)x;
  const v8i ix = jx & I8(0x7fffffff);
  const v8f ax = (v8f)ix;
  const v8i big = ix >= I8(0x3f800000); /* |x| >= 1 */
  const v8i mid = ix < I8(0x41b00000);  /* |x| < 22 (and not inf/NaN) */
  /* expm1f(2|x|) for |x| >= 1, expm1f(-2|x|) below; other lanes get 0, not garbage */
  const v8f a = vsel(mid, vsel(big, V8(2.0f) * ax, V8(-2.0f) * ax), V8(0.0f));
  const v8f t = expm1f_v8(a);
  const v8f d = t + V8(2.0f);
  /* |x| >= 1: 1 - 2/(t+2); below: -t/(t+2). One division for both. */
  const v8f q = vsel(big, V8(2.0f), -t) / d;
  v8f z = vsel(big, V8(1.0f) - q, q);
  z = vsel(mid, z, V8(1.0f) - V8(1.0e-30f));
  const v8i neg = jx < I8(0);
  z = vsel(neg, -z, z);
  z = vsel(ix < I8(0x24000000), x * (V8(1.0f) + x), z); /* |x| < 2^-55, 0 included */
  /* +-inf: +-1; NaN: NaN */
  const v8f inf = V8(1.0f) / x + vsel(neg, V8(-1.0f), V8(1.0f));
  return vsel(ix >= I8(0x7f800000), inf, z);
}

INL v8f load8(const float *p) {
  v8f v;
  memcpy(&v, p, sizeof v);
  return v;
}
INL void store8(float *p, v8f v) { memcpy(p, &v, sizeof v); }

INL v8f gelu_fwd8(v8f x) {
  const v8f cube = V8(GELU_COEF) * x * x * x;
  return V8(0.5f) * x * (V8(1.0f) + tanhf_v8(V8(GELU_SCALING) * (x + cube)));
}

INL v8f gelu_bwd8(v8f x, v8f dout, v8f dinp) {
  const v8f cube = V8(GELU_COEF) * x * x * x;
  const v8f th = tanhf_v8(V8(GELU_SCALING) * (x + cube));
  const v8f sech2 = V8(1.0f) - th * th;
  const v8f local = V8(0.5f) * (V8(1.0f) + th) + x * V8(0.5f) * sech2 * V8(GELU_SCALING) *
                                                      (V8(1.0f) + V8(3.0f * GELU_COEF) * x * x);
  return dinp + local * dout;
}

/* One contiguous range; the AVX2 clone runs the 8 lanes in one register (no FMA: see above). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__AVX2__) && \
    !defined(__SANITIZE_ADDRESS__)
#define GELU_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define GELU_CLONES
#endif

GELU_CLONES static void gelu_fwd_range(float *restrict out, const float *restrict inp,
                                       size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) store8(out + i, gelu_fwd8(load8(inp + i)));
  if (i < n) { /* tail: padded copy, same arithmetic */
    float xb[8] = {0}, ob[8];
    memcpy(xb, inp + i, (n - i) * sizeof(float));
    store8(ob, gelu_fwd8(load8(xb)));
    memcpy(out + i, ob, (n - i) * sizeof(float));
  }
}

GELU_CLONES static void gelu_bwd_range(float *restrict dinp, const float *restrict inp,
                                       const float *restrict dout, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    store8(dinp + i, gelu_bwd8(load8(inp + i), load8(dout + i), load8(dinp + i)));
  if (i < n) {
    float xb[8] = {0}, db[8] = {0}, gb[8] = {0};
    memcpy(xb, inp + i, (n - i) * sizeof(float));
    memcpy(db, dout + i, (n - i) * sizeof(float));
    memcpy(gb, dinp + i, (n - i) * sizeof(float));
    store8(gb, gelu_bwd8(load8(xb), load8(db), load8(gb)));
    memcpy(dinp + i, gb, (n - i) * sizeof(float));
  }
}

/* Elements per OpenMP task: a multiple of 8, so only the last task has a tail. */
#define GELU_BLOCK 4096

void loom__cpu_gelu_forward(void *ctx, float *out, const float *inp, size_t n) {
  (void)ctx;
  ptrdiff_t nblk = (ptrdiff_t)((n + GELU_BLOCK - 1) / GELU_BLOCK);
#pragma omp parallel for schedule(static) if (n > LOOM_CPU_PAR_MIN)
  for (ptrdiff_t b = 0; b < nblk; b++) {
    size_t lo = (size_t)b * GELU_BLOCK, len = n - lo < GELU_BLOCK ? n - lo : GELU_BLOCK;
    gelu_fwd_range(out + lo, inp + lo, len);
  }
}

void loom__cpu_gelu_backward(void *ctx, float *dinp, const float *inp, const float *dout,
                             size_t n) {
  (void)ctx;
  ptrdiff_t nblk = (ptrdiff_t)((n + GELU_BLOCK - 1) / GELU_BLOCK);
#pragma omp parallel for schedule(static) if (n > LOOM_CPU_PAR_MIN)
  for (ptrdiff_t b = 0; b < nblk; b++) {
    size_t lo = (size_t)b * GELU_BLOCK, len = n - lo < GELU_BLOCK ? n - lo : GELU_BLOCK;
    gelu_bwd_range(dinp + lo, inp + lo, dout + lo, len);
  }
}

#ifdef LOOM_CPU_GELU_SELFTEST
/* for an exhaustive check against libm: cc -DLOOM_CPU_GELU_SELFTEST ... */
void loom__cpu_tanhf_n(float *out, const float *in, size_t n) {
  for (size_t i = 0; i + 8 <= n; i += 8) store8(out + i, tanhf_v8(load8(in + i)));
}
#endif
