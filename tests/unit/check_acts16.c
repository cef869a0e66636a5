/* Check suite for the CPU kernels on 16-bit activations (core/device/cpu_acts16.c, device ABI
 * 1.8's acts16).
 *
 * The contract is bitwise: each loom__cpu16_* kernel must give exactly the bits of the fp32
 * kernel (loom__cpu_*) run on the widened 16-bit inputs, each 16-bit output then rounded to
 * nearest even (the SDK's scalar loom_f32_to_bf16 / loom_f32_to_f16 here, independent of the
 * vector code under test), with `+=` outputs (dinp, dqkv) widened, accumulated and rounded once.
 * Every kernel, bf16 and fp16, on 1 and 2 OpenMP threads, at small odd sizes (the serial path)
 * and sizes above LOOM_CPU_PAR_MIN (the parallel one) whose rows do not fill a whole number of
 * tiles and whose C is not a multiple of 16; accumulation into non-zero dinp / dqkv and
 * parameter gradients, residual in place (out == a), the classifier in place (dlogits ==
 * logits), without dlogits, and with an ignored row (target -1); fp16 overflow to inf. And the
 * span conversions they are built from, with and without AVX-512 / F16C.
 *
 * Legend: B = batch, T = time, C = channels, N = rows, NH = heads, HS = head size, V = vocab. */
#include <check.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/cpu_kernels.h"
#include "device/device.h"
#include "support/check_suite.h"
#include "support/host_scratch.h"

static loom_dev dev;
static void *ctx;
static uint64_t rng_state = 88172645463325252ull;

static const loom_dtype DTS[] = {LOOM_BF16, LOOM_F16};
static const int THREADS[] = {1, 2};

static void open_cpu(void) {
  char err[256];
  ck_assert_int_eq(loom__dev_open(&dev, loom__cpu_device(), "{}", 0, err, sizeof err), LOOM_OK);
  ctx = dev.ctx;
}
static void close_cpu(void) {
  host_scratch_free_all();
  loom__dev_close(&dev);
}

static float urand(void) { /* xorshift64: [-1, 1) */
  rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
  return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}
static int irand(int n) { return (int)((urand() + 1.0f) * 0.5f * (float)n) % n; }

static const char *dtname(loom_dtype dt) { return dt == LOOM_BF16 ? "bf16" : "fp16"; }
static uint16_t to16(loom_dtype dt, float f) {
  return dt == LOOM_BF16 ? loom__f32_to_bf16(f) : loom__f32_to_f16(f);
}
static float from16(loom_dtype dt, uint16_t h) {
  return dt == LOOM_BF16 ? loom__bf16_to_f32(h) : loom__f16_to_f32(h);
}

static float *randf(size_t n, float mean, float scale) {
  float *x = host_scratch(n * sizeof *x);
  for (size_t i = 0; i < n; i++) x[i] = mean + scale * urand();
  return x;
}
static float *dupf(const float *x, size_t n) {
  float *y = host_scratch(n * sizeof *y);
  memcpy(y, x, n * sizeof *y);
  return y;
}
/* n random dt values mean + scale * U(-1, 1); *wide: their (exact) fp32 values */
static uint16_t *rand16(loom_dtype dt, size_t n, float mean, float scale, float **wide) {
  uint16_t *h = host_scratch(n * sizeof *h);
  float *w = host_scratch(n * sizeof *w);
  for (size_t i = 0; i < n; i++) {
    h[i] = to16(dt, mean + scale * urand());
    w[i] = from16(dt, h[i]);
  }
  *wide = w;
  return h;
}
static int32_t *rand_ids(size_t n, int V) {
  int32_t *ids = host_scratch(n * sizeof *ids);
  for (size_t i = 0; i < n; i++) ids[i] = irand(V);
  return ids;
}

/* got (n dt) must be ref (n fp32) rounded to dt, bit for bit */
static void eq16(loom_dtype dt, const uint16_t *got, const float *ref, size_t n, const char *what,
                 int nt) {
  for (size_t i = 0; i < n; i++) {
    const uint16_t want = to16(dt, ref[i]);
    if (got[i] != want)
      ck_abort_msg("%s %s, %d thread(s): element %zu of %zu is 0x%04x (%g), want 0x%04x (%g)",
                   dtname(dt), what, nt, i, n, got[i], (double)from16(dt, got[i]), want,
                   (double)ref[i]);
  }
}
/* got (n fp32) must be ref bit for bit */
static void eqf(const float *got, const float *ref, size_t n, const char *what, loom_dtype dt,
                int nt) {
  for (size_t i = 0; i < n; i++)
    if (memcmp(got + i, ref + i, sizeof(float)) != 0)
      ck_abort_msg("%s %s, %d thread(s): element %zu of %zu is %.9g, want %.9g", dtname(dt), what,
                   nt, i, n, (double)got[i], (double)ref[i]);
}

/* Runs case(dt, shape, nt) for bf16 and fp16 and 1 and 2 threads, over nshapes shapes; scratch
 * freed after each. */
#define FOR_CONFIGS(nshapes, body)                                                               \
  for (size_t di_ = 0; di_ < 2; di_++)                                                           \
    for (size_t ti_ = 0; ti_ < 2; ti_++)                                                         \
      for (int si_ = 0; si_ < (nshapes); si_++) {                                                \
        const loom_dtype dt = DTS[di_];                                                          \
        const int nt = THREADS[ti_], sh = si_;                                                   \
        omp_set_num_threads(nt);                                                                 \
        body;                                                                                    \
        host_scratch_free_all();                                                                 \
      }

/* ---- the span conversions the kernels use (cpu_convert.c) ---- */

/* loom__cpu_widen / loom__cpu_narrow against the scalar conversions: every half widened, and a
 * sweep of fp32 patterns (every exponent, NaN, inf, subnormals) narrowed, at every length below
 * a vector's width and at odd lengths (the tails). bf16 bit for bit, NaN included; fp16 NaN as
 * NaN (F16C's payload handling is the hardware's). */
static void spans_case(loom_dtype dt) {
  enum { NH = 65536, NS = 300007 };
  uint16_t *h = host_scratch(NH * sizeof *h), *h2 = host_scratch(NS * sizeof *h2);
  float *w = host_scratch(NS * sizeof *w), *f = host_scratch(NS * sizeof *f);
  for (size_t i = 0; i < NH; i++) h[i] = (uint16_t)i;
  loom__cpu_half_init();
  for (size_t len = 0; len <= 40; len++) { /* tails: every short length, at an odd offset */
    loom__cpu_widen(w, h + 3, dt, len);
    for (size_t i = 0; i < len; i++) {
      float want = from16(dt, h[3 + i]);
      ck_assert_msg(memcmp(w + i, &want, 4) == 0 || (isnan(want) && isnan(w[i])),
                    "%s widen len %zu elem %zu", dtname(dt), len, i);
    }
  }
  loom__cpu_widen(w, h, dt, NH);
  for (size_t i = 0; i < NH; i++) {
    float want = from16(dt, h[i]);
    if (dt == LOOM_F16 && isnan(want)) ck_assert(isnan(w[i]));
    else ck_assert_msg(memcmp(w + i, &want, 4) == 0, "%s widen 0x%04zx", dtname(dt), i);
  }
  uint32_t s = 2463534242u;
  for (size_t i = 0; i < NS; i++) {
    s ^= s << 13, s ^= s >> 17, s ^= s << 5;
    uint32_t u = i % 7 == 0 ? (s & 0x807fffffu) : s; /* some subnormals and zeros */
    memcpy(f + i, &u, 4);
  }
  for (size_t len = 0; len <= 40; len++) {
    loom__cpu_narrow(h2, dt, f + 5, len);
    for (size_t i = 0; i < len; i++) {
      uint16_t want = to16(dt, f[5 + i]);
      ck_assert_msg(h2[i] == want || (dt == LOOM_F16 && isnan(f[5 + i]) &&
                                      isnan(from16(dt, h2[i]))),
                    "%s narrow len %zu elem %zu", dtname(dt), len, i);
    }
  }
  loom__cpu_narrow(h2, dt, f, NS);
  for (size_t i = 0; i < NS; i++) {
    uint16_t want = to16(dt, f[i]);
    if (dt == LOOM_F16 && isnan(f[i])) ck_assert(isnan(from16(dt, h2[i])));
    else
      ck_assert_msg(h2[i] == want, "%s narrow %a: 0x%04x, want 0x%04x", dtname(dt), (double)f[i],
                    h2[i], want);
  }
}

START_TEST(spans) {
  spans_case(LOOM_BF16);
  spans_case(LOOM_F16);
}
END_TEST

START_TEST(spans_generic) { /* this forked test only: without AVX-512 and F16C */
  setenv("LOOM_NO_AVX512", "1", 1);
  setenv("LOOM_NO_F16C", "1", 1);
  spans_case(LOOM_BF16);
  spans_case(LOOM_F16);
}
END_TEST

/* ---- encoder ---- */

static void encoder_case(loom_dtype dt, int nt, int B, int T, int C, int V) {
  const size_t N = (size_t)B * T;
  int32_t *ids = rand_ids(N, V);
  float *wte = randf((size_t)V * C, 0.0f, 1.0f), *wpe = randf((size_t)T * C, 0.0f, 0.5f);
  float *ref = host_scratch(N * C * sizeof *ref);
  uint16_t *out = host_scratch(N * C * sizeof *out);
  loom__cpu_encoder_forward(ctx, ref, ids, wte, wpe, B, T, C);
  loom__cpu16_encoder_forward(ctx, dt, out, ids, wte, wpe, B, T, C);
  eq16(dt, out, ref, N * C, "encoder_forward out", nt);

  float *d32;
  uint16_t *dout = rand16(dt, N * C, 0.0f, 1.0f, &d32);
  float *dwte = randf((size_t)V * C, 0.0f, 1.0f), *dwpe = randf((size_t)T * C, 0.0f, 1.0f);
  float *dwte_ref = dupf(dwte, (size_t)V * C), *dwpe_ref = dupf(dwpe, (size_t)T * C);
  loom__cpu_encoder_backward(ctx, dwte_ref, dwpe_ref, d32, ids, B, T, C);
  loom__cpu16_encoder_backward(ctx, dt, dwte, dwpe, dout, ids, B, T, C);
  eqf(dwte, dwte_ref, (size_t)V * C, "encoder_backward dwte", dt, nt);
  eqf(dwpe, dwpe_ref, (size_t)T * C, "encoder_backward dwpe", dt, nt);
}

START_TEST(encoder) {
  /* B T C V: serial; parallel with repeated tokens (V = 5) and C odd */
  static const int shapes[][4] = {{2, 5, 37, 7}, {3, 41, 150, 5}, {2, 9, 768, 11}};
  FOR_CONFIGS(3, encoder_case(dt, nt, shapes[sh][0], shapes[sh][1], shapes[sh][2],
                              shapes[sh][3]));
}
END_TEST

/* ---- layernorm ---- */

static void layernorm_case(loom_dtype dt, int nt, int N, int C) {
  const size_t NC = (size_t)N * C;
  float *x32;
  uint16_t *x = rand16(dt, NC, 0.5f, 2.0f, &x32);
  float *w = randf((size_t)C, 1.0f, 0.5f), *b = randf((size_t)C, 0.0f, 0.5f);
  float *ref = host_scratch(NC * sizeof *ref), *mean_ref = host_scratch(N * sizeof(float));
  float *rstd_ref = host_scratch(N * sizeof(float)), *mean = host_scratch(N * sizeof(float));
  float *rstd = host_scratch(N * sizeof(float));
  uint16_t *out = host_scratch(NC * sizeof *out);
  loom__cpu_layernorm_forward(ctx, ref, mean_ref, rstd_ref, x32, w, b, N, C);
  loom__cpu16_layernorm_forward(ctx, dt, out, mean, rstd, x, w, b, N, C);
  eq16(dt, out, ref, NC, "layernorm_forward out", nt);
  eqf(mean, mean_ref, (size_t)N, "layernorm_forward mean", dt, nt);
  eqf(rstd, rstd_ref, (size_t)N, "layernorm_forward rstd", dt, nt);

  float *d32, *di32;
  uint16_t *dout = rand16(dt, NC, 0.0f, 1.0f, &d32);
  uint16_t *dinp = rand16(dt, NC, 0.0f, 0.5f, &di32); /* += into non-zero gradients */
  float *dw = randf((size_t)C, 0.0f, 1.0f), *db = randf((size_t)C, 0.0f, 1.0f);
  float *dw_ref = dupf(dw, (size_t)C), *db_ref = dupf(db, (size_t)C);
  loom__cpu_layernorm_backward(ctx, di32, dw_ref, db_ref, d32, x32, w, mean_ref, rstd_ref, N, C);
  loom__cpu16_layernorm_backward(ctx, dt, dinp, dw, db, dout, x, w, mean, rstd, N, C);
  eq16(dt, dinp, di32, NC, "layernorm_backward dinp", nt);
  eqf(dw, dw_ref, (size_t)C, "layernorm_backward dweight", dt, nt);
  eqf(db, db_ref, (size_t)C, "layernorm_backward dbias", dt, nt);
}

START_TEST(layernorm) {
  /* N C: serial; parallel with C odd (40 rows a tile: 203 is not a multiple); C = 768 (5 rows a
   * tile, 37 rows); one row wider than a tile */
  static const int shapes[][2] = {{7, 37}, {203, 101}, {37, 768}, {3, 5000}, {1, 1}};
  FOR_CONFIGS(5, layernorm_case(dt, nt, shapes[sh][0], shapes[sh][1]));
}
END_TEST

/* ---- attention ---- */

static void attention_case(loom_dtype dt, int nt, int B, int T, int NH, int HS) {
  const size_t C = (size_t)NH * HS, nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C;
  const size_t na = (size_t)B * NH * T * T;
  float *q32;
  uint16_t *qkv = rand16(dt, nq, 0.0f, 1.5f, &q32);
  float *ref = host_scratch(no * sizeof *ref), *att_ref = host_scratch(na * sizeof(float));
  float *att = host_scratch(na * sizeof(float));
  uint16_t *out = host_scratch(no * sizeof *out);
  loom__cpu_attention_forward(ctx, ref, att_ref, q32, B, T, NH, HS);
  loom__cpu16_attention_forward(ctx, dt, out, att, qkv, B, T, NH, HS);
  eq16(dt, out, ref, no, "attention_forward out", nt);
  eqf(att, att_ref, na, "attention_forward att", dt, nt);

  float *d32, *dq32;
  uint16_t *dout = rand16(dt, no, 0.0f, 1.0f, &d32);
  uint16_t *dqkv = rand16(dt, nq, 0.0f, 0.5f, &dq32); /* += into non-zero gradients */
  float *datt_ref = host_scratch(na * sizeof(float)), *datt = host_scratch(na * sizeof(float));
  loom__cpu_attention_backward(ctx, dq32, datt_ref, d32, q32, att_ref, B, T, NH, HS);
  loom__cpu16_attention_backward(ctx, dt, dqkv, datt, dout, qkv, att, B, T, NH, HS);
  eq16(dt, dqkv, dq32, nq, "attention_backward dqkv", nt);
  eqf(datt, datt_ref, na, "attention_backward datt", dt, nt);
}

START_TEST(attention) {
  /* B T NH HS: small odd; T*T above LOOM_CPU_PAR_MIN (parallel softmax), 3 batch rows */
  static const int shapes[][4] = {{2, 7, 2, 5}, {3, 131, 3, 12}, {1, 1, 1, 3}};
  FOR_CONFIGS(3, attention_case(dt, nt, shapes[sh][0], shapes[sh][1], shapes[sh][2],
                                shapes[sh][3]));
}
END_TEST

/* ---- GELU ---- */

static void gelu_case(loom_dtype dt, int nt, size_t n) {
  float *x32, *d32, *di32;
  uint16_t *x = rand16(dt, n, 0.0f, 4.0f, &x32);
  float *ref = host_scratch(n * sizeof *ref);
  uint16_t *out = host_scratch(n * sizeof *out);
  loom__cpu_gelu_forward(ctx, ref, x32, n);
  loom__cpu16_gelu_forward(ctx, dt, out, x, n);
  eq16(dt, out, ref, n, "gelu_forward out", nt);

  uint16_t *dout = rand16(dt, n, 0.0f, 1.0f, &d32);
  uint16_t *dinp = rand16(dt, n, 0.0f, 0.5f, &di32);
  loom__cpu_gelu_backward(ctx, di32, x32, d32, n);
  loom__cpu16_gelu_backward(ctx, dt, dinp, x, dout, n);
  eq16(dt, dinp, di32, n, "gelu_backward dinp", nt);
}

START_TEST(gelu) {
  static const size_t sizes[] = {37, 4096 * 5 + 13, 1};
  FOR_CONFIGS(3, gelu_case(dt, nt, sizes[sh]));
}
END_TEST

/* ---- residual ---- */

static void residual_case(loom_dtype dt, int nt, size_t n) {
  /* fp16: operands near 65504 whose sums overflow to inf */
  const float scale = dt == LOOM_F16 ? 60000.0f : 3.0f;
  float *a32, *b32;
  uint16_t *a = rand16(dt, n, 0.0f, scale, &a32), *b = rand16(dt, n, 0.0f, scale, &b32);
  float *ref = host_scratch(n * sizeof *ref);
  uint16_t *out = host_scratch(n * sizeof *out);
  loom__cpu_residual_forward(ctx, ref, a32, b32, n);
  loom__cpu16_residual_forward(ctx, dt, out, a, b, n);
  eq16(dt, out, ref, n, "residual_forward out", nt);
  loom__cpu16_residual_forward(ctx, dt, a, a, b, n); /* in place */
  eq16(dt, a, ref, n, "residual_forward in place", nt);
  if (dt == LOOM_F16) {
    int infs = 0;
    for (size_t i = 0; i < n; i++) infs += isinf(from16(dt, out[i])) != 0;
    ck_assert_msg(n < 1000 || infs > 0, "no fp16 overflow exercised");
  }
}

START_TEST(residual) {
  static const size_t sizes[] = {37, 4096 * 5 + 13, 1};
  FOR_CONFIGS(3, residual_case(dt, nt, sizes[sh]));
}
END_TEST

/* ---- fused classifier ---- */

static void crossentropy_case(loom_dtype dt, int nt, int N, int V) {
  const size_t NV = (size_t)N * V;
  const float dloss = 1.0f / (float)N;
  float *l32;
  uint16_t *logits = rand16(dt, NV, 0.0f, 6.0f, &l32);
  int32_t *targets = rand_ids((size_t)N, V);
  targets[N / 2] = -1; /* an ignored row */
  float *losses_ref = host_scratch(N * sizeof(float)), *losses = host_scratch(N * sizeof(float));
  float *dref = host_scratch(NV * sizeof *dref);
  uint16_t *dlogits = host_scratch(NV * sizeof *dlogits);
  for (size_t i = 0; i < NV; i++) dlogits[i] = 0x3c00; /* overwritten (=) */
  loom__cpu_crossentropy_fused(ctx, losses_ref, dref, l32, targets, dloss, N, V);
  loom__cpu16_crossentropy_fused(ctx, dt, losses, dlogits, logits, targets, dloss, N, V);
  eqf(losses, losses_ref, (size_t)N, "crossentropy_fused losses", dt, nt);
  eq16(dt, dlogits, dref, NV, "crossentropy_fused dlogits", nt);

  /* the loss only: the same losses, logits untouched */
  uint16_t *keep = host_scratch(NV * sizeof *keep);
  memcpy(keep, logits, NV * sizeof *keep);
  memset(losses, 0xff, N * sizeof(float));
  loom__cpu16_crossentropy_fused(ctx, dt, losses, NULL, logits, targets, dloss, N, V);
  eqf(losses, losses_ref, (size_t)N, "crossentropy_fused losses (no dlogits)", dt, nt);
  ck_assert(memcmp(keep, logits, NV * sizeof *keep) == 0);

  /* in place: dlogits == logits */
  memset(losses, 0xff, N * sizeof(float));
  loom__cpu16_crossentropy_fused(ctx, dt, losses, logits, logits, targets, dloss, N, V);
  eqf(losses, losses_ref, (size_t)N, "crossentropy_fused losses (in place)", dt, nt);
  eq16(dt, logits, dref, NV, "crossentropy_fused dlogits (in place)", nt);
}

START_TEST(crossentropy) {
  /* N V: serial; parallel (N*V > LOOM_CPU_PAR_MIN) */
  static const int shapes[][2] = {{5, 37}, {9, 3001}, {1, 1}};
  FOR_CONFIGS(3, crossentropy_case(dt, nt, shapes[sh][0], shapes[sh][1]));
}
END_TEST

int main(void) {
  const check_case cases[] = {
      {"spans", spans},         {"spans_generic", spans_generic}, {"encoder", encoder},
      {"layernorm", layernorm}, {"attention", attention},         {"gelu", gelu},
      {"residual", residual},   {"crossentropy", crossentropy},
  };
  return check_run_suite(check_case_suite("acts16", CHECK_CASES(cases), open_cpu, close_cpu, 120),
                         CK_FORK);
}
