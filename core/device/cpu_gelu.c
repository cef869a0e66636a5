/* CPU GELU (tanh approximation), forward and backward, with a vectorised tanhf.
 *
 * GELU's tanhf was ~60% of the non-GEMM time of a training step: two scalar libm calls
 * (tanhf -> expm1f) per element, forward and backward. tanhf_v below evaluates tanhf on 16
 * lanes at once with GCC/Clang vector extensions (4 SSE2 registers on baseline x86-64, 2 AVX2 or
 * 1 AVX-512 register in the clones below): it is the fdlibm algorithm that glibc's tanhf and
 * expm1f implement (sysdeps/ieee754/flt-32/s_tanhf.c, s_expm1f.c; glibc <= 2.40 on x86-64),
 * every branch computed and the lane's own selected, with the same float operations in the same
 * order. So it is not an approximation of tanhf: it returns glibc's tanhf bit for bit (checked
 * over all 2^32 inputs against glibc 2.36), and GELU's results are unchanged.
 *
 * Floating-point contraction must stay off here: an FMA would round differently from the scalar
 * code it mirrors (the default x86-64 target has no FMA, so this only matters for -march builds
 * or the AVX2 / AVX-512 clones, which are compiled without FMA). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
/* wide vectors passed between non-AVX functions: all of them are inlined below anyway */
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cpu_kernels.h"

#define GELU_SCALING 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_COEF 0.044715f

/* LANES floats per vector: one AVX-512 register, two AVX2 ones, four SSE2 ones */
#define LANES 16
typedef float vf __attribute__((vector_size(4 * LANES)));
typedef int32_t vi __attribute__((vector_size(4 * LANES)));
typedef uint32_t vu __attribute__((vector_size(4 * LANES)));

#define INL static inline __attribute__((always_inline))
#define VF(s) ((vf){s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s})
#define VI(s) ((vi){s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s})

/* Lane masks (all ones / all zeros) without vector comparisons, which GCC lowers element by
 * element whenever the vector is wider than the target's registers (all but the AVX-512 clone):
 * lt(a, b) is a < b for |a - b| < 2^31, which holds for every pair compared below. */
INL vi lt(vi a, vi b) { return (vi)((vu)a - (vu)b) >> 31; }
INL vi eq(vi a, vi b) { return ~(lt(a, b) | lt(b, a)); }
/* lane-wise m ? a : b */
INL vf vsel(vi m, vf a, vf b) { return (vf)(((vi)a & m) | ((vi)b & ~m)); }
INL vi isel(vi m, vi a, vi b) { return (a & m) | (b & ~m); }
/* add k to the exponent field (glibc's SET_FLOAT_WORD(y, i + (k << 23))), two's complement */
INL vf addexp(vf y, vi k) { return (vf)((vu)y + ((vu)k << 23)); }

/* fdlibm expm1f for the arguments tanhf_v passes: a = 0, -2 < a < 0 or 2 <= a < 44 (not NaN).
 * Two of glibc's branches cannot occur there and are left out: the reduction for
 * 0.5 ln2 < |a| < 1.5 ln2 only sees negative a (hi = a + ln2_hi, lo = -ln2_lo, k = -1), and
 * k = +1 never occurs (it needs 0 < a < 1.5 ln2). The exhaustive comparison with glibc's tanhf
 * (LOOM_CPU_GELU_SELFTEST below) covers exactly this domain. */
INL vf expm1f_v(vf a) {
  const float ln2_hi = 6.9313812256e-01f, ln2_lo = 9.0580006145e-06f, invln2 = 1.4426950216e+00f;
  const float Q1 = -3.3333335072e-02f, Q2 = 1.5873016091e-03f, Q3 = -7.9365076090e-05f,
              Q4 = 4.0082177293e-06f, Q5 = -2.0109921195e-07f;
  const vi hx = (vi)a & VI(0x7fffffff);
  const vi xneg = (vi)a >> 31;
  /* argument reduction: |a| > 0.5 ln2; within it, |a| < 1.5 ln2 takes k = -1 (a < 0 there) */
  const vi red = lt(VI(0x3eb17218), hx), near1 = lt(hx, VI(0x3F851592));
  const vf hi1 = a + VF(ln2_hi);
  const vf lo1 = VF(-ln2_lo);
  const vf kraw = VF(invln2) * a + vsel(xneg, VF(-0.5f), VF(0.5f));
  const vi kg = __builtin_convertvector(kraw, vi); /* truncation, as C's float -> int */
  const vf tg = __builtin_convertvector(kg, vf);
  const vf hig = a - tg * VF(ln2_hi), log_ = tg * VF(ln2_lo);
  const vf hi = vsel(near1, hi1, hig), lo = vsel(near1, lo1, log_);
  const vf xr = hi - lo;
  const vf cr = (hi - xr) - lo;
  const vf x = vsel(red, xr, a), c = vsel(red, cr, VF(0.0f));
  const vi k = isel(red, isel(near1, VI(-1), kg), VI(0));
  /* x is now in the primary range */
  const vf hfx = VF(0.5f) * x;
  const vf hxs = x * hfx;
  const vf r1 =
      VF(1.0f) +
      hxs * (VF(Q1) + hxs * (VF(Q2) + hxs * (VF(Q3) + hxs * (VF(Q4) + hxs * VF(Q5)))));
  const vf t = VF(3.0f) - r1 * hfx;
  vf e = hxs * ((r1 - t) / (VF(6.0f) - x * t));
  const vf r_k0 = x - (x * e - hxs);
  e = (x * (e - c) - c);
  e -= hxs;
  const vf r_km1 = VF(0.5f) * (x - e) - VF(0.5f);
  const vf r_far = addexp(VF(1.0f) - (e - x), k) - VF(1.0f); /* k <= -2 || k > 56 */
  const vf p2mk = (vf)((VI(0x7f) - k) << 23);                /* 2^-k */
  const vf r_mid = addexp((VF(1.0f) - p2mk) - (e - x), k);   /* 2 <= k < 23 */
  const vf r_hi = addexp((x - (e + p2mk)) + VF(1.0f), k);    /* 23 <= k <= 56 */
  vf r = vsel(lt(k, VI(23)), r_mid, r_hi);
  r = vsel(lt(k, VI(-1)) | lt(VI(56), k), r_far, r);
  r = vsel(eq(k, VI(-1)), r_km1, r);
  r = vsel(eq(k, VI(0)), r_k0, r);
  return vsel(lt(hx, VI(0x33000000)), a, r); /* |a| < 2^-25: a */
}

/* fdlibm tanhf, bitwise glibc's tanhf */
INL vf tanhf_v(vf x) {
  const vi jx = (vi)x;
  const vi ix = jx & VI(0x7fffffff);
  const vf ax = (vf)ix;
  const vi big = ~lt(ix, VI(0x3f800000)); /* |x| >= 1 */
  const vi mid = lt(ix, VI(0x41b00000));   /* |x| < 22 (and not inf/NaN) */
  /* expm1f(2|x|) for |x| >= 1, expm1f(-2|x|) below; other lanes get 0, not garbage */
  const vf a = vsel(mid, vsel(big, VF(2.0f) * ax, VF(-2.0f) * ax), VF(0.0f));
  const vf t = expm1f_v(a);
  const vf d = t + VF(2.0f);
  /* |x| >= 1: 1 - 2/(t+2); below: -t/(t+2). One division for both. */
  const vf q = vsel(big, VF(2.0f), -t) / d;
  vf z = vsel(big, VF(1.0f) - q, q);
  z = vsel(mid, z, VF(1.0f) - VF(1.0e-30f));
  const vi neg = jx >> 31;
  z = vsel(neg, -z, z);
  z = vsel(lt(ix, VI(0x24000000)), x * (VF(1.0f) + x), z); /* |x| < 2^-55, 0 included */
  /* +-inf: +-1; NaN: NaN (glibc's 1/x +- 1 without the division: for a NaN x both it and
   * x + x give x quieted) */
  const vf inf = vsel(lt(VI(0x7f800000), ix), x + x, vsel(neg, VF(-1.0f), VF(1.0f)));
  return vsel(~lt(ix, VI(0x7f800000)), inf, z);
}

INL vf loadv(const float *p) {
  vf v;
  memcpy(&v, p, sizeof v);
  return v;
}
INL void storev(float *p, vf v) { memcpy(p, &v, sizeof v); }

INL vf gelu_fwdv(vf x) {
  const vf cube = VF(GELU_COEF) * x * x * x;
  return VF(0.5f) * x * (VF(1.0f) + tanhf_v(VF(GELU_SCALING) * (x + cube)));
}

INL vf gelu_bwdv(vf x, vf dout, vf dinp) {
  const vf cube = VF(GELU_COEF) * x * x * x;
  const vf th = tanhf_v(VF(GELU_SCALING) * (x + cube));
  const vf sech2 = VF(1.0f) - th * th;
  const vf local = VF(0.5f) * (VF(1.0f) + th) + x * VF(0.5f) * sech2 * VF(GELU_SCALING) *
                                                    (VF(1.0f) + VF(3.0f * GELU_COEF) * x * x);
  return dinp + local * dout;
}

/* One contiguous range, in clones for AVX-512 and AVX2 (without FMA: see above); extern for
 * cpu_acts16.c, which runs them on widened tiles (cpu_kernels.h). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__AVX2__) && \
    !defined(__SANITIZE_ADDRESS__)
#define GELU_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define GELU_CLONES
#endif

GELU_CLONES void loom__cpu_gelu_fwd_span(float *restrict out, const float *restrict inp,
                                          size_t n) {
  size_t i = 0;
  for (; i + LANES <= n; i += LANES) storev(out + i, gelu_fwdv(loadv(inp + i)));
  if (i < n) { /* tail: padded copy, same arithmetic */
    float xb[LANES] = {0}, ob[LANES];
    memcpy(xb, inp + i, (n - i) * sizeof(float));
    storev(ob, gelu_fwdv(loadv(xb)));
    memcpy(out + i, ob, (n - i) * sizeof(float));
  }
}

GELU_CLONES void loom__cpu_gelu_bwd_span(float *restrict dinp, const float *restrict inp,
                                          const float *restrict dout, size_t n) {
  size_t i = 0;
  for (; i + LANES <= n; i += LANES)
    storev(dinp + i, gelu_bwdv(loadv(inp + i), loadv(dout + i), loadv(dinp + i)));
  if (i < n) {
    float xb[LANES] = {0}, db[LANES] = {0}, gb[LANES] = {0};
    memcpy(xb, inp + i, (n - i) * sizeof(float));
    memcpy(db, dout + i, (n - i) * sizeof(float));
    memcpy(gb, dinp + i, (n - i) * sizeof(float));
    storev(gb, gelu_bwdv(loadv(xb), loadv(db), loadv(gb)));
    memcpy(dinp + i, gb, (n - i) * sizeof(float));
  }
}

/* Elements per OpenMP task: a multiple of LANES, so only the last task has a tail (every lane's
 * result is its own element's, so the blocking does not change any bits). */
#define GELU_BLOCK 4096

void loom__cpu_gelu_forward(void *ctx, float *out, const float *inp, size_t n) {
  (void)ctx;
  ptrdiff_t nblk = (ptrdiff_t)((n + GELU_BLOCK - 1) / GELU_BLOCK);
#pragma omp parallel for schedule(static) if (n > LOOM_CPU_PAR_MIN)
  for (ptrdiff_t b = 0; b < nblk; b++) {
    size_t lo = (size_t)b * GELU_BLOCK, len = n - lo < GELU_BLOCK ? n - lo : GELU_BLOCK;
    loom__cpu_gelu_fwd_span(out + lo, inp + lo, len);
  }
}

void loom__cpu_gelu_backward(void *ctx, float *dinp, const float *inp, const float *dout,
                             size_t n) {
  (void)ctx;
  ptrdiff_t nblk = (ptrdiff_t)((n + GELU_BLOCK - 1) / GELU_BLOCK);
#pragma omp parallel for schedule(static) if (n > LOOM_CPU_PAR_MIN)
  for (ptrdiff_t b = 0; b < nblk; b++) {
    size_t lo = (size_t)b * GELU_BLOCK, len = n - lo < GELU_BLOCK ? n - lo : GELU_BLOCK;
    loom__cpu_gelu_bwd_span(dinp + lo, inp + lo, dout + lo, len);
  }
}

#ifdef LOOM_CPU_GELU_SELFTEST
/* for an exhaustive check against libm: cc -DLOOM_CPU_GELU_SELFTEST ... */
void loom__cpu_tanhf_n(float *out, const float *in, size_t n) {
  for (size_t i = 0; i + LANES <= n; i += LANES) storev(out + i, tanhf_v(loadv(in + i)));
}
#endif
