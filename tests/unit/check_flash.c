/* Check suite for the CPU device's FlashAttention-2 kernels (core/device/cpu_flash.c, device ABI
 * 1.9's attention_forward_lse / attention_backward_lse, fp32 and 16-bit).
 *
 * - forward out and lse against a float64 naive reference, and the backward against the
 *   materialised kernels (cpu_attention.c) on the same qkv and dout, within rounding bounds
 *   (fp_tolerance.h), for every micro-kernel variant the CPU has (baseline, AVX2, AVX-512);
 * - the backward against central finite differences of a float64 loss sum(out * w) built from
 *   the forward;
 * - bitwise independence of the thread count (1, 2, 3) at T spanning several tiles;
 * - the 16-bit kernels (bf16, fp16) bitwise equal to the fp32 ones on the widened inputs, each
 *   16-bit output rounded once (dqkv: the widened initial values + the gradient, rounded once).
 * Shapes: T = 1, T not a multiple of the 64-row tile, HS = 8, 24 (not a multiple of 16) and 64,
 * NH = 1 and 3, B = 2.
 *
 * Legend: B = batch, T = time, NH = heads, HS = head size, C = NH*HS. */
#include <check.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/cpu_kernels.h"
#include "device/device.h"
#include "fp_tolerance.h"
#include "support/check_suite.h"
#include "support/host_scratch.h"

static loom_dev dev;
static void *ctx;
static uint64_t rng_state;

static void setup(void) {
  char err[256];
  ck_assert_int_eq(loom__dev_open(&dev, loom__cpu_device(), "{}", 0, err, sizeof err), LOOM_OK);
  ctx = dev.ctx;
  rng_state = 0x9e3779b97f4a7c15ull;
  loom__cpu_flash_set_isa(-1);
}
static void teardown(void) {
  host_scratch_free_all();
  loom__dev_close(&dev);
}

static double urand(void) { return host_urand(&rng_state); }
static float *randf(size_t n, double scale) { return host_scratch_uniform(&rng_state, n, scale); }
static float *copyf(const float *x, size_t n) {
  float *y = host_scratch(n * sizeof *y);
  memcpy(y, x, n * sizeof *y);
  return y;
}

typedef struct shape {
  int B, T, NH, HS;
} shape;
static size_t nqkv(shape s) { return (size_t)s.B * s.T * 3 * s.NH * s.HS; }
static size_t nout(shape s) { return (size_t)s.B * s.T * s.NH * s.HS; }
static size_t nlse(shape s) { return (size_t)s.B * s.NH * s.T; }

/* max|got - ref| / max|ref| <= tol, reported with the worst element */
static void close_to(const char *what, shape s, const float *got, const double *ref, size_t n,
                     double tol) {
  double maxd = 0, maxr = 0;
  size_t w = 0;
  for (size_t i = 0; i < n; i++) {
    const double d = fabs((double)got[i] - ref[i]);
    if (!isfinite(got[i])) ck_abort_msg("%s: element %zu is %g", what, i, (double)got[i]);
    if (d > maxd) maxd = d, w = i;
    if (fabs(ref[i]) > maxr) maxr = fabs(ref[i]);
  }
  const double e = maxr > 0 ? maxd / maxr : maxd;
  printf("close %-28s B=%d T=%-3d NH=%d HS=%-2d rel err %.2e (tol %.1e)\n", what, s.B, s.T, s.NH,
         s.HS, e, tol);
  ck_assert_msg(e <= tol, "%s (B=%d T=%d NH=%d HS=%d): rel err %.3e > %.1e at [%zu]: %.9g vs %.9g",
                what, s.B, s.T, s.NH, s.HS, e, tol, w, (double)got[w], ref[w]);
}
static double *widen_d(const float *x, size_t n) {
  double *y = host_scratch(n * sizeof *y);
  for (size_t i = 0; i < n; i++) y[i] = x[i];
  return y;
}

/* float64 causal attention: out (B,T,C) and lse (B,NH,T) */
static void ref_forward(double *out, double *lse, const float *qkv, shape s) {
  const int C = s.NH * s.HS, T = s.T;
  double *sc = host_scratch((size_t)T * sizeof *sc);
  for (int b = 0; b < s.B; b++)
    for (int h = 0; h < s.NH; h++)
      for (int t = 0; t < T; t++) {
        const float *q = qkv + ((size_t)b * T + t) * 3 * C + (size_t)h * s.HS;
        double mx = -INFINITY, sum = 0;
        for (int u = 0; u <= t; u++) {
          const float *k = qkv + ((size_t)b * T + u) * 3 * C + C + (size_t)h * s.HS;
          double d = 0;
          for (int i = 0; i < s.HS; i++) d += (double)q[i] * k[i];
          sc[u] = d / sqrt((double)s.HS);
          mx = sc[u] > mx ? sc[u] : mx;
        }
        for (int u = 0; u <= t; u++) sum += (sc[u] = exp(sc[u] - mx));
        lse[((size_t)b * s.NH + h) * T + t] = mx + log(sum);
        for (int i = 0; i < s.HS; i++) {
          double o = 0;
          for (int u = 0; u <= t; u++)
            o += sc[u] * qkv[((size_t)b * T + u) * 3 * C + 2 * C + (size_t)h * s.HS + i];
          out[((size_t)b * T + t) * C + (size_t)h * s.HS + i] = o / sum;
        }
      }
}

static const shape SHAPES[] = {
    {2, 37, 1, 8}, {2, 37, 3, 24}, {1, 1, 2, 8}, {1, 130, 2, 64}, {2, 64, 1, 16}, {1, 200, 3, 24},
};
#define NSHAPES (sizeof SHAPES / sizeof SHAPES[0])

/* ---- forward against float64, backward against the materialised kernels ---- */

static void reference_case(shape s, int isa) {
  const size_t NQ = nqkv(s), NO = nout(s), NL = nlse(s);
  const size_t NA = (size_t)s.B * s.NH * s.T * s.T;
  float *qkv = randf(NQ, 1.5), *out = host_scratch(NO * 4), *lse = host_scratch(NL * 4);
  loom__cpu_attention_forward_lse(ctx, out, lse, qkv, s.B, s.T, s.NH, s.HS);
  double *rout = host_scratch(NO * sizeof(double)), *rlse = host_scratch(NL * sizeof(double));
  ref_forward(rout, rlse, qkv, s);
  char nm[64];
  /* scores HS terms, the softmax's max and sum T, P V T, the per-tile rescales and ~4 more
   * roundings (scale, exp, the division); lse: the scores, the sum and the log */
  snprintf(nm, sizeof nm, "forward out (isa %d)", isa);
  close_to(nm, s, out, rout, NO, fp32_tol(1, s.HS + 2.0 * s.T + s.T / 64 + 4));
  snprintf(nm, sizeof nm, "forward lse (isa %d)", isa);
  close_to(nm, s, lse, rlse, NL, fp32_tol(1, s.HS + s.T + 4));

  /* the materialised kernels on the same inputs: out within two fp32 bounds, dqkv likewise
   * (each accumulates from the same non-zero start) */
  float *mout = host_scratch(NO * 4), *att = host_scratch(NA * 4), *datt = host_scratch(NA * 4);
  loom__cpu_attention_forward(ctx, mout, att, qkv, s.B, s.T, s.NH, s.HS);
  snprintf(nm, sizeof nm, "out vs materialised (isa %d)", isa);
  close_to(nm, s, out, widen_d(mout, NO), NO, fp32_tol(2, s.HS + 2.0 * s.T + s.T / 64 + 4));
  float *dout = randf(NO, 1), *dq0 = randf(NQ, 0.5);
  float *dq = copyf(dq0, NQ), *mdq = copyf(dq0, NQ);
  loom__cpu_attention_backward_lse(ctx, dq, dout, qkv, out, lse, s.B, s.T, s.NH, s.HS);
  loom__cpu_attention_backward(ctx, mdq, datt, dout, qkv, att, s.B, s.T, s.NH, s.HS);
  /* the forward's paths back (HS + 2T), the softmax Jacobian's dot (T; D over HS), P's
   * recomputation (HS + T via lse) and the += */
  snprintf(nm, sizeof nm, "dqkv vs materialised (isa %d)", isa);
  close_to(nm, s, dq, widen_d(mdq, NQ), NQ, fp32_tol(2, 4.0 * s.T + 3.0 * s.HS + 8));
}

START_TEST(test_reference) {
  const int best = loom__cpu_flash_set_isa(-1);
  for (int isa = 0; isa <= best; isa++) {
    ck_assert_int_eq(loom__cpu_flash_set_isa(isa), isa);
    for (size_t i = 0; i < NSHAPES; i++) {
      reference_case(SHAPES[i], isa);
      host_scratch_free_all();
    }
  }
  loom__cpu_flash_set_isa(-1);
}
END_TEST

/* ---- finite differences ---- */

/* sum(out * w) in double of the forward at qkv; out, lse scratch */
static double loss(const float *qkv, const float *w, float *out, float *lse, shape s) {
  loom__cpu_attention_forward_lse(ctx, out, lse, qkv, s.B, s.T, s.NH, s.HS);
  double l = 0;
  for (size_t i = 0; i < nout(s); i++) l += (double)out[i] * w[i];
  return l;
}

/* Central differences with step 1e-3: truncation ~1e-7, the rounding of the perturbed outputs
 * ~lambda sqrt(n) u sum|out w| / eps ~1e-4 of max|fd| (check_kernels.c's FD_TOL reasoning), so
 * a bound of 2e-3 relative to max|fd|; a wrong gradient is off by O(1). */
static void fd_case(shape s) {
  const size_t NQ = nqkv(s), NO = nout(s), NL = nlse(s);
  float *qkv = randf(NQ, 1.5), *w = randf(NO, 1);
  float *out = host_scratch(NO * 4), *lse = host_scratch(NL * 4), *dq = host_scratch(NQ * 4);
  loss(qkv, w, out, lse, s);
  loom__cpu_attention_backward_lse(ctx, dq, w, qkv, out, lse, s.B, s.T, s.NH, s.HS);
  double *fd = host_scratch(NQ * sizeof *fd);
  const float eps = 1e-3f;
  for (size_t i = 0; i < NQ; i++) {
    const float x = qkv[i], xp = x + eps, xm = x - eps;
    qkv[i] = xp;
    const double lp = loss(qkv, w, out, lse, s);
    qkv[i] = xm;
    const double lm = loss(qkv, w, out, lse, s);
    qkv[i] = x;
    fd[i] = (lp - lm) / ((double)xp - (double)xm);
  }
  close_to("fd dqkv", s, dq, fd, NQ, 2e-3);
}

START_TEST(test_finite_differences) {
  const shape fs[] = {{2, 37, 1, 8}, {2, 37, 3, 24}, {2, 37, 1, 24}, {2, 37, 3, 8}, {1, 1, 1, 8}};
  for (size_t i = 0; i < sizeof fs / sizeof fs[0]; i++) {
    fd_case(fs[i]);
    host_scratch_free_all();
  }
}
END_TEST

/* ---- thread-count independence ---- */

/* b (n) == a bit for bit; `what` names the pair */
static void bits_eq(const char *what, const float *a, const float *b, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (memcmp(a + i, b + i, sizeof(float)) != 0)
      ck_abort_msg("%s: element %zu is %.9g, want %.9g", what, i, (double)b[i], (double)a[i]);
}

START_TEST(test_threads) {
  const shape ts[] = {{2, 300, 3, 64}, {2, 200, 2, 24}, {3, 129, 1, 8}};
  for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++) {
    const shape s = ts[k];
    const size_t NQ = nqkv(s), NO = nout(s), NL = nlse(s);
    float *qkv = randf(NQ, 1.5), *dout = randf(NO, 1), *dq0 = randf(NQ, 0.5);
    float *out[3], *lse[3], *dq[3];
    for (int nt = 1; nt <= 3; nt++) {
      omp_set_num_threads(nt);
      out[nt - 1] = host_scratch(NO * 4), lse[nt - 1] = host_scratch(NL * 4);
      dq[nt - 1] = copyf(dq0, NQ);
      loom__cpu_attention_forward_lse(ctx, out[nt - 1], lse[nt - 1], qkv, s.B, s.T, s.NH, s.HS);
      /* each count's backward from the 1-thread forward: only the backward varies */
      loom__cpu_attention_backward_lse(ctx, dq[nt - 1], dout, qkv, out[0], lse[0], s.B, s.T,
                                       s.NH, s.HS);
    }
    omp_set_num_threads(2);
    for (int nt = 2; nt <= 3; nt++) {
      char nm[80];
      snprintf(nm, sizeof nm, "forward out, %d threads vs 1", nt);
      bits_eq(nm, out[0], out[nt - 1], NO);
      snprintf(nm, sizeof nm, "forward lse, %d threads vs 1", nt);
      bits_eq(nm, lse[0], lse[nt - 1], NL);
      snprintf(nm, sizeof nm, "backward dqkv, %d threads vs 1", nt);
      bits_eq(nm, dq[0], dq[nt - 1], NQ);
    }
    printf("threads B=%d T=%d NH=%d HS=%d: 1, 2, 3 threads bitwise equal\n", s.B, s.T, s.NH,
           s.HS);
    host_scratch_free_all();
  }
}
END_TEST

/* ---- 16-bit activations ---- */

static uint16_t to16(loom_dtype dt, float f) {
  return dt == LOOM_BF16 ? loom__f32_to_bf16(f) : loom__f32_to_f16(f);
}
static float from16(loom_dtype dt, uint16_t h) {
  return dt == LOOM_BF16 ? loom__bf16_to_f32(h) : loom__f16_to_f32(h);
}
/* n random dt values; *wide: their fp32 values (exact) */
static uint16_t *rand16(loom_dtype dt, size_t n, double scale, float **wide) {
  uint16_t *h = host_scratch(n * sizeof *h);
  float *w = host_scratch(n * sizeof *w);
  for (size_t i = 0; i < n; i++) w[i] = from16(dt, h[i] = to16(dt, (float)(scale * urand())));
  *wide = w;
  return h;
}
/* got (n dt) == ref (n fp32) rounded once, bit for bit (the SDK's scalar rounding) */
static void eq16(loom_dtype dt, const uint16_t *got, const float *ref, size_t n, const char *what,
                 shape s) {
  for (size_t i = 0; i < n; i++)
    if (got[i] != to16(dt, ref[i]))
      ck_abort_msg("%s %s (B=%d T=%d NH=%d HS=%d): element %zu is 0x%04x, want 0x%04x (%.9g)",
                   dt == LOOM_BF16 ? "bf16" : "fp16", what, s.B, s.T, s.NH, s.HS, i, got[i],
                   to16(dt, ref[i]), (double)ref[i]);
}

static void acts16_case(loom_dtype dt, shape s) {
  const size_t NQ = nqkv(s), NO = nout(s), NL = nlse(s);
  float *q32, *g32, *dq32;
  uint16_t *q16 = rand16(dt, NQ, 1.5, &q32), *g16 = rand16(dt, NO, 1, &g32);
  uint16_t *dq16 = rand16(dt, NQ, 0.5, &dq32);
  uint16_t *o16 = host_scratch(NO * 2);
  float *o32 = host_scratch(NO * 4), *lse16 = host_scratch(NL * 4), *lse32 = host_scratch(NL * 4);
  loom__cpu16_attention_forward_lse(ctx, dt, o16, lse16, q16, s.B, s.T, s.NH, s.HS);
  loom__cpu_attention_forward_lse(ctx, o32, lse32, q32, s.B, s.T, s.NH, s.HS);
  eq16(dt, o16, o32, NO, "forward out", s);
  bits_eq(dt == LOOM_BF16 ? "bf16 forward lse vs fp32" : "fp16 forward lse vs fp32", lse32,
          lse16, NL);
  /* the backward on the 16-bit forward's out (what the host saves), widened for the fp32 one */
  float *ow = host_scratch(NO * 4);
  for (size_t i = 0; i < NO; i++) ow[i] = from16(dt, o16[i]);
  loom__cpu16_attention_backward_lse(ctx, dt, dq16, g16, q16, o16, lse16, s.B, s.T, s.NH, s.HS);
  loom__cpu_attention_backward_lse(ctx, dq32, g32, q32, ow, lse32, s.B, s.T, s.NH, s.HS);
  eq16(dt, dq16, dq32, NQ, "backward dqkv (+=)", s);
}

START_TEST(test_acts16) {
  const loom_dtype dts[] = {LOOM_BF16, LOOM_F16};
  const int best = loom__cpu_flash_set_isa(-1);
  for (int isa = 0; isa <= best; isa += best > 0 ? best : 1) {
    loom__cpu_flash_set_isa(isa);
    for (int d = 0; d < 2; d++)
      for (int nt = 1; nt <= 2; nt++) {
        omp_set_num_threads(nt);
        for (size_t i = 0; i < NSHAPES; i++) {
          acts16_case(dts[d], SHAPES[i]);
          host_scratch_free_all();
        }
        printf("acts16 %s, isa %d, %d thread(s): bitwise the fp32 kernels on widened inputs\n",
               dts[d] == LOOM_BF16 ? "bf16" : "fp16", isa, nt);
      }
  }
  loom__cpu_flash_set_isa(-1);
}
END_TEST

/* ---- the softmax's exp ---- */

/* distance in units in the last place between two finite floats of the same sign, or 0 / a
 * large value for equal / differing specials */
static int64_t ulps(float a, float b) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b) ? 0 : INT32_MAX;
  int32_t ia, ib;
  memcpy(&ia, &a, 4), memcpy(&ib, &b, 4);
  return ia > ib ? (int64_t)ia - ib : (int64_t)ib - ia;
}

/* The flash exp (every variant) against the correctly rounded exp(x - sub) (float64 exp, then
 * one rounding) and against cpu_exp.c's: at most one ulp off, and off at all only within
 * ~1e-15 of a rounding boundary (a few per hundred million arguments: none are expected here);
 * clamps, infinities, NaN, zero and subnormal results as expf. */
START_TEST(test_exp) {
  const size_t n = (size_t)1 << 21;
  float *x = host_scratch(n * 4), *got = host_scratch(n * 4), *old = host_scratch(n * 4);
  const float special[] = {-INFINITY, INFINITY, NAN, -200.5f, -150.0f, -103.9f, -87.5f, 0.0f,
                           -0.0f, 1e-30f, 88.7f, 89.5f, 120.0f};
  const size_t ns = sizeof special / sizeof special[0];
  for (size_t i = 0; i < n; i++) x[i] = i < ns ? special[i] : (float)(-60.0 + 65.0 * urand());
  const float subs[] = {0.0f, 3.25f, -7.0f};
  const int best = loom__cpu_flash_set_isa(-1);
  for (int isa = 0; isa <= best; isa++) {
    loom__cpu_flash_set_isa(isa);
    for (int k = 0; k < 3; k++) {
      const float sub = subs[k];
      loom__cpu_flash_exp_sub(got, x, n, sub);
      if (sub == 0.0f) loom__cpu_exp_sub(old, x, n, 0.0f);
      size_t off = 0, off_old = 0;
      for (size_t i = 0; i < n; i++) {
        const float want = (float)exp((double)x[i] - sub);
        const int64_t d = ulps(got[i], want);
        if (d > 1) /* not ck_assert in the loop: each one is a message to Check's parent */
          ck_abort_msg("isa %d: exp(%a - %a) = %a, want %a", isa, (double)x[i], (double)sub,
                       (double)got[i], (double)want);
        off += d != 0;
        if (sub == 0.0f) off_old += ulps(got[i], old[i]) != 0;
      }
      printf("exp isa %d sub %g: %zu of %zu one ulp from correctly rounded", isa, (double)sub,
             off, n);
      if (sub == 0.0f) printf(", %zu differ from loom__cpu_exp_sub", off_old);
      printf("\n");
      ck_assert_uint_le(off, 2);
    }
  }
  loom__cpu_flash_set_isa(-1);
}
END_TEST

/* ---- the tables ---- */

START_TEST(test_tables) {
  const loom_device_v1 *d = loom__cpu_device();
  ck_assert_ptr_eq(d->attention_forward_lse, loom__cpu_attention_forward_lse);
  ck_assert_ptr_eq(d->attention_backward_lse, loom__cpu_attention_backward_lse);
  for (int k = 0; k < 2; k++) {
    const loom_device_acts16_v1 *t = d->acts16(ctx, k ? LOOM_F16 : LOOM_BF16);
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_ge(t->struct_size, offsetof(loom_device_acts16_v1, attention_backward_lse) +
                                          sizeof(void *));
    ck_assert_ptr_nonnull(t->attention_forward_lse);
    ck_assert_ptr_nonnull(t->attention_backward_lse);
  }
}
END_TEST

static Suite *flash_suite(void) {
  const check_case cases[] = {
      {"reference", test_reference}, {"finite_differences", test_finite_differences},
      {"threads", test_threads},     {"acts16", test_acts16},
      {"exp", test_exp},             {"tables", test_tables},
  };
  return check_case_suite("flash", CHECK_CASES(cases), setup, teardown, 300);
}

int main(void) { return check_run_suite(flash_suite(), CK_FORK); }
