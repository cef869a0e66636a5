/* Check suite for the device layer and the CPU backend's kernels.
 *
 * Every backward kernel is checked against central finite differences of a random scalar
 * objective L = sum(out * w) (w fixed random weights, so dout = w), computed in double from the
 * fp32 forward; the error is max|analytic - fd| / max|fd| over the tensor, and the worst element
 * is reported. The tests also check the gradient contract (a second backward doubles the
 * accumulated gradients; dlogits is assigned), forwards against naive double references, AdamW
 * against the scalar formula, reductions, determinism across thread counts, options parsing and
 * memory accounting. Tensors are reached only through the device table (from_host / to_host).
 *
 * Legend: B = batch, T = time, C = channels, NH = heads, HS = head size, N = rows, OC = output
 * channels, V = vocab. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "fp_tolerance.h"
#include "util/rng.h"
#include "support/check_suite.h"
#include "support/host_scratch.h"

/* Central differences in double of an objective built from fp32 outputs. Error: truncation
 * FD_EPS^2 / 6 times the third derivative (~1e-7 here) plus the rounding of the outputs a
 * perturbation changes, about lambda sqrt(K) u * sum|out * w| / FD_EPS (~1e-4 here: K <= 10,
 * sum|out w| ~ 10, relative to max|fd| ~ 2). FD_TOL keeps a >= 8x margin over the worst measured
 * on every kernel family (docs/tolerances.md); a wrong gradient is off by O(1). The strict
 * gradient checks are the float64 reference (tests/reference/) and the fp32_tol checks below. */
#define FD_EPS 1e-3f
#define FD_TOL 2e-3

/* ---- fixture: one CPU device per test (checked fixture, so it runs in the forked child) ---- */

static loom_dev dev;
static const loom_device_v1 *ops;
static void *ctx;
static loom_rng rng;

static void open_device(const char *options) {
  char err[256];
  ck_assert_int_eq(loom__dev_open(&dev, loom__cpu_device(), options, 0, err, sizeof err), LOOM_OK);
  ops = dev.ops;
  ctx = dev.ctx;
}

static void setup(void) {
  open_device("{}");
  loom__rng_seed(&rng, 1234);
}

static void teardown(void) {
  host_scratch_free_all();
  if (dev.ops) loom__dev_close(&dev); /* frees every live device buffer */
}

/* Host scratch, freed by teardown. */
static void *hmem(size_t bytes) { return host_scratch(bytes); }
static float *hbuf(size_t n) { return hmem(n * sizeof(float)); }

static float *hrand(size_t n, float mean, float std) {
  float *h = hbuf(n);
  for (size_t i = 0; i < n; i++) h[i] = mean + std * loom__rng_normal(&rng);
  return h;
}

/* Device buffer, zeroed. */
static void *dmem(size_t bytes) {
  void *d = loom__dev_alloc(&dev, bytes, LOOM_MEM_OTHER);
  ck_assert_ptr_nonnull(d);
  return d;
}
static float *dbuf(size_t n) { return dmem(n * sizeof(float)); }

/* Device copy of host data. */
static void *dcopy(const void *h, size_t bytes) {
  void *d = dmem(bytes);
  ops->from_host(ctx, d, h, bytes);
  return d;
}
static float *dup_f(const float *h, size_t n) { return dcopy(h, n * sizeof(float)); }

/* Host copy of device data. */
static float *down(const float *d, size_t n) {
  float *h = hbuf(n);
  ops->to_host(ctx, h, d, n * sizeof(float));
  return h;
}

static int32_t *rand_tokens(size_t n, int V) {
  int32_t *t = hmem(n * sizeof(int32_t));
  for (size_t i = 0; i < n; i++) t[i] = (int32_t)(loom__rng_u64(&rng) % (uint64_t)V);
  return t;
}

/* sum(out * w) in double, out on the device; `tmp` is host scratch of n floats. */
static double weighted_sum(const float *out, const float *w, float *tmp, size_t n) {
  ops->to_host(ctx, tmp, out, n * sizeof(float));
  double s = 0.0;
  for (size_t i = 0; i < n; i++) s += (double)tmp[i] * (double)w[i];
  return s;
}

/* max|a - b| / max|b| (0 when both are all zero); *worst gets the index of max|a - b|. */
static double rel_err(const float *a, const double *b, size_t n, size_t *worst) {
  double maxdiff = 0.0, maxref = 0.0;
  *worst = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]);
    if (d > maxdiff) maxdiff = d, *worst = i;
    if (fabs(b[i]) > maxref) maxref = fabs(b[i]);
  }
  return maxdiff == 0.0 ? 0.0 : maxdiff / (maxref > 0.0 ? maxref : 1e-300);
}

static void check_close(const char *what, const float *got, const double *ref, size_t n,
                        double tol) {
  size_t w;
  double e = rel_err(got, ref, n, &w);
  printf("close %-36s n=%-5zu rel err %.2e (tol %.1e, %.0f u)\n", what, n, e, tol, tol / FP32_U);
  ck_assert_msg(e <= tol, "%s: relative error %.3e > %.1e, worst [%zu]: got %.8g, want %.8g",
                what, e, tol, w, (double)got[w], ref[w]);
}

/* The objective: runs the forward on the current device inputs and returns L. */
typedef double (*objective_fn)(void *state);

/* Compare the analytic gradient (device, n floats) of f w.r.t. the device tensor x with central
 * differences, perturbing every element of x. */
static void fd_check(const char *what, objective_fn f, void *state, float *x, const float *grad,
                     size_t n) {
  float *xh = down(x, n), *gh = down(grad, n);
  double *fd = hmem(n * sizeof(double));
  for (size_t i = 0; i < n; i++) {
    float xp = xh[i] + FD_EPS, xm = xh[i] - FD_EPS;
    ops->from_host(ctx, x + i, &xp, sizeof(float));
    double lp = f(state);
    ops->from_host(ctx, x + i, &xm, sizeof(float));
    double lm = f(state);
    ops->from_host(ctx, x + i, &xh[i], sizeof(float));
    fd[i] = (lp - lm) / ((double)xp - (double)xm); /* the step actually taken in fp32 */
  }
  f(state); /* leave outputs and saved stats as they were for the unperturbed x */
  size_t w;
  double e = rel_err(gh, fd, n, &w);
  printf("fd %-24s n=%-4zu rel err %.2e (worst [%zu]: analytic %.6e, fd %.6e)\n", what, n, e, w,
         (double)gh[w], fd[w]);
  ck_assert_msg(e <= FD_TOL,
                "%s: relative error %.3e > %.1e, worst [%zu]: analytic %.8g, finite difference "
                "%.8g",
                what, e, FD_TOL, w, (double)gh[w], fd[w]);
}

/* After a second identical backward, the accumulated gradient must be twice the first. `terms`
 * is the length of the sums that produce one element: accumulating 2 x terms in one pass rounds
 * differently from doubling the sum of terms (exact), so the bound is fp32_tol(2, 2 * terms). */
static void check_doubled(const char *what, const float *grad_dev, const float *first_host,
                          size_t n, int terms) {
  float *now = down(grad_dev, n);
  double *want = hmem(n * sizeof(double));
  for (size_t i = 0; i < n; i++) want[i] = 2.0 * first_host[i];
  char label[96];
  snprintf(label, sizeof label, "%s accumulates (+=)", what);
  check_close(label, now, want, n, fp32_tol(2, 2.0 * terms));
}

/* ---- encoder ---- */

typedef struct enc_state {
  float *out, *wte, *wpe, *w, *tmp;
  int32_t *inp;
  int B, T, C;
} enc_state;

static double enc_objective(void *sp) {
  enc_state *s = sp;
  ops->encoder_forward(ctx, s->out, s->inp, s->wte, s->wpe, s->B, s->T, s->C);
  return weighted_sum(s->out, s->w, s->tmp, (size_t)s->B * s->T * s->C);
}

START_TEST(test_encoder) {
  const int B = 2, T = 3, C = 5, V = 7, maxT = 4;
  const size_t BTC = (size_t)B * T * C;
  int32_t *tok = rand_tokens((size_t)B * T, V);
  tok[4] = tok[1]; /* a repeated token: the scatter must add, not overwrite */
  enc_state s = {.out = dbuf(BTC), .B = B, .T = T, .C = C, .w = hrand(BTC, 0, 1),
                 .tmp = hbuf(BTC)};
  float *wte_h = hrand((size_t)V * C, 0, 1), *wpe_h = hrand((size_t)maxT * C, 0, 1);
  s.wte = dup_f(wte_h, (size_t)V * C);
  s.wpe = dup_f(wpe_h, (size_t)maxT * C);
  s.inp = dcopy(tok, (size_t)B * T * sizeof(int32_t));

  enc_objective(&s);
  float *out = down(s.out, BTC);
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int c = 0; c < C; c++)
        ck_assert_float_eq(out[((size_t)b * T + t) * C + c],
                           wte_h[(size_t)tok[b * T + t] * C + c] + wpe_h[(size_t)t * C + c]);

  float *dwte = dbuf((size_t)V * C), *dwpe = dbuf((size_t)maxT * C);
  float *dout = dup_f(s.w, BTC);
  ops->encoder_backward(ctx, dwte, dwpe, dout, s.inp, B, T, C);
  fd_check("encoder dwte", enc_objective, &s, s.wte, dwte, (size_t)V * C);
  fd_check("encoder dwpe", enc_objective, &s, s.wpe, dwpe, (size_t)maxT * C);

  float *g1 = down(dwte, (size_t)V * C), *g2 = down(dwpe, (size_t)maxT * C);
  ops->encoder_backward(ctx, dwte, dwpe, dout, s.inp, B, T, C);
  check_doubled("encoder dwte", dwte, g1, (size_t)V * C, B * T); /* a token's rows */
  check_doubled("encoder dwpe", dwpe, g2, (size_t)maxT * C, B);
}
END_TEST

/* ---- layernorm ---- */

typedef struct ln_state {
  float *out, *mean, *rstd, *inp, *weight, *bias, *w, *tmp;
  int N, C;
} ln_state;

static double ln_objective(void *sp) {
  ln_state *s = sp;
  ops->layernorm_forward(ctx, s->out, s->mean, s->rstd, s->inp, s->weight, s->bias, s->N, s->C);
  return weighted_sum(s->out, s->w, s->tmp, (size_t)s->N * s->C);
}

START_TEST(test_layernorm) {
  const int N = 6, C = 10;
  const size_t NC = (size_t)N * C;
  float *inp_h = hrand(NC, 0.5f, 2.0f), *w_h = hrand(C, 1.0f, 0.3f), *b_h = hrand(C, 0, 0.3f);
  ln_state s = {.out = dbuf(NC), .mean = dbuf(N), .rstd = dbuf(N), .inp = dup_f(inp_h, NC),
                .weight = dup_f(w_h, C), .bias = dup_f(b_h, C), .w = hrand(NC, 0, 1),
                .tmp = hbuf(NC), .N = N, .C = C};
  ln_objective(&s);

  /* forward against a double reference */
  double *ref = hmem(NC * sizeof(double)), *ref_mean = hmem(N * sizeof(double));
  double *ref_rstd = hmem(N * sizeof(double));
  for (int n = 0; n < N; n++) {
    double m = 0, v = 0;
    for (int c = 0; c < C; c++) m += inp_h[n * C + c];
    m /= C;
    for (int c = 0; c < C; c++) v += (inp_h[n * C + c] - m) * (inp_h[n * C + c] - m);
    v /= C;
    double r = 1.0 / sqrt(v + 1e-5);
    for (int c = 0; c < C; c++) ref[n * C + c] = (inp_h[n * C + c] - m) * r * w_h[c] + b_h[c];
    ref_mean[n] = m;
    ref_rstd[n] = r;
  }
  /* sums of C for the mean and the variance, then ~4 roundings (rsqrt, scale, shift) */
  const double ln_tol = fp32_tol(1, 2 * C + 4);
  check_close("layernorm out", down(s.out, NC), ref, NC, ln_tol);
  check_close("layernorm mean", down(s.mean, N), ref_mean, N, ln_tol);
  check_close("layernorm rstd", down(s.rstd, N), ref_rstd, N, ln_tol);

  float *dinp = dbuf(NC), *dw = dbuf(C), *db = dbuf(C), *dout = dup_f(s.w, NC);
  ops->layernorm_backward(ctx, dinp, dw, db, dout, s.inp, s.weight, s.mean, s.rstd, N, C);
  fd_check("layernorm dinp", ln_objective, &s, s.inp, dinp, NC);
  fd_check("layernorm dweight", ln_objective, &s, s.weight, dw, C);
  fd_check("layernorm dbias", ln_objective, &s, s.bias, db, C);

  float *g1 = down(dinp, NC), *g2 = down(dw, C), *g3 = down(db, C);
  ops->layernorm_backward(ctx, dinp, dw, db, dout, s.inp, s.weight, s.mean, s.rstd, N, C);
  check_doubled("layernorm dinp", dinp, g1, NC, 2 * C);
  check_doubled("layernorm dweight", dw, g2, C, N);
  check_doubled("layernorm dbias", db, g3, C, N);
}
END_TEST

/* ---- matmul ---- */

typedef struct mm_state {
  float *out, *inp, *weight, *bias, *w, *tmp;
  int N, C, OC;
} mm_state;

static double mm_objective(void *sp) {
  mm_state *s = sp;
  ops->matmul_forward(ctx, s->out, s->inp, s->weight, s->bias, s->N, s->C, s->OC);
  return weighted_sum(s->out, s->w, s->tmp, (size_t)s->N * s->OC);
}

static void run_matmul(int with_bias) {
  const int N = 7, C = 9, OC = 5;
  const size_t NC = (size_t)N * C, NOC = (size_t)N * OC, WC = (size_t)OC * C;
  float *inp_h = hrand(NC, 0, 1), *w_h = hrand(WC, 0, 1), *b_h = hrand(OC, 0, 1);
  mm_state s = {.out = dbuf(NOC), .inp = dup_f(inp_h, NC), .weight = dup_f(w_h, WC),
                .bias = with_bias ? dup_f(b_h, OC) : NULL, .w = hrand(NOC, 0, 1),
                .tmp = hbuf(NOC), .N = N, .C = C, .OC = OC};
  /* garbage in out: the forward must assign */
  float *junk = hrand(NOC, 5, 1);
  ops->from_host(ctx, s.out, junk, NOC * sizeof(float));
  mm_objective(&s);
  double *ref = hmem(NOC * sizeof(double));
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      double acc = with_bias ? b_h[o] : 0.0;
      for (int c = 0; c < C; c++) acc += (double)inp_h[n * C + c] * w_h[o * C + c];
      ref[n * OC + o] = acc;
    }
  check_close(with_bias ? "matmul out (bias)" : "matmul out (no bias)", down(s.out, NOC), ref,
              NOC, fp32_tol(1, C + 1)); /* a dot product of C, plus the bias */

  float *dinp = dbuf(NC), *dw = dbuf(WC), *db = with_bias ? dbuf(OC) : NULL;
  float *dout = dup_f(s.w, NOC);
  ops->matmul_backward(ctx, dinp, dw, db, dout, s.inp, s.weight, N, C, OC);
  fd_check(with_bias ? "matmul dinp (bias)" : "matmul dinp", mm_objective, &s, s.inp, dinp, NC);
  fd_check(with_bias ? "matmul dweight (bias)" : "matmul dweight", mm_objective, &s, s.weight,
           dw, WC);
  if (with_bias) fd_check("matmul dbias", mm_objective, &s, s.bias, db, OC);

  float *g1 = down(dinp, NC), *g2 = down(dw, WC), *g3 = with_bias ? down(db, OC) : NULL;
  ops->matmul_backward(ctx, dinp, dw, db, dout, s.inp, s.weight, N, C, OC);
  check_doubled("matmul dinp", dinp, g1, NC, OC);
  check_doubled("matmul dweight", dw, g2, WC, N);
  if (with_bias) check_doubled("matmul dbias", db, g3, OC, N);

  /* dinp and dbias may be NULL: dweight alone is still right */
  float *dw_only = dbuf(WC);
  ops->matmul_backward(ctx, NULL, dw_only, NULL, dout, s.inp, s.weight, N, C, OC);
  double *g2d = hmem(WC * sizeof(double));
  for (size_t i = 0; i < WC; i++) g2d[i] = g2[i];
  /* the same GEMM as the first backward: only a kernel whose rounding depended on the other
   * outputs would differ, by at most two roundings of the N-term sums */
  check_close("matmul dweight with NULL dinp/dbias", down(dw_only, WC), g2d, WC, fp32_tol(2, N));
}

START_TEST(test_matmul_bias) { run_matmul(1); }
END_TEST

START_TEST(test_matmul_nobias) { run_matmul(0); }
END_TEST

/* ---- attention ---- */

typedef struct att_state {
  float *out, *att, *qkv, *w, *tmp;
  int B, T, NH, HS;
} att_state;

static double att_objective(void *sp) {
  att_state *s = sp;
  ops->attention_forward(ctx, s->out, s->att, s->qkv, s->B, s->T, s->NH, s->HS);
  return weighted_sum(s->out, s->w, s->tmp, (size_t)s->B * s->T * s->NH * s->HS);
}

START_TEST(test_attention) {
  const int B = 2, T = 5, NH = 2, HS = 3, C = NH * HS;
  const size_t NQKV = (size_t)B * T * 3 * C, NOUT = (size_t)B * T * C;
  const size_t NATT = (size_t)B * NH * T * T;
  float *qkv_h = hrand(NQKV, 0, 1);
  att_state s = {.out = dbuf(NOUT), .att = dbuf(NATT), .qkv = dup_f(qkv_h, NQKV),
                 .w = hrand(NOUT, 0, 1), .tmp = hbuf(NOUT), .B = B, .T = T, .NH = NH, .HS = HS};
  att_objective(&s);

  /* naive double reference: causal softmax(q.k / sqrt(HS)) v */
  double *ref_out = hmem(NOUT * sizeof(double)), *ref_att = hmem(NATT * sizeof(double));
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        const float *q = qkv_h + ((size_t)b * T + t) * 3 * C + h * HS;
        double sc[16], mx = -INFINITY, sum = 0;
        for (int u = 0; u <= t; u++) {
          const float *k = qkv_h + ((size_t)b * T + u) * 3 * C + C + h * HS;
          double d = 0;
          for (int i = 0; i < HS; i++) d += (double)q[i] * k[i];
          sc[u] = d / sqrt((double)HS);
          if (sc[u] > mx) mx = sc[u];
        }
        for (int u = 0; u <= t; u++) sum += (sc[u] = exp(sc[u] - mx));
        double *arow = ref_att + (((size_t)b * NH + h) * T + t) * T;
        for (int u = 0; u < T; u++) arow[u] = u <= t ? sc[u] / sum : 0.0;
        for (int i = 0; i < HS; i++) {
          double acc = 0;
          for (int u = 0; u <= t; u++)
            acc += arow[u] * qkv_h[((size_t)b * T + u) * 3 * C + 2 * C + h * HS + i];
          ref_out[((size_t)b * T + t) * C + h * HS + i] = acc;
        }
      }
  float *att = down(s.att, NATT);
  /* q.k (HS terms), softmax's max and sum (T), att.v (T), ~4 roundings for exp and scaling */
  const double att_tol = fp32_tol(1, HS + 2 * T + 4);
  check_close("attention out", down(s.out, NOUT), ref_out, NOUT, att_tol);
  check_close("attention att", att, ref_att, NATT, att_tol);
  for (size_t r = 0; r < (size_t)B * NH * T; r++)
    for (int u = (int)(r % T) + 1; u < T; u++) ck_assert_float_eq(att[r * T + u], 0.0f);

  float *dqkv = dbuf(NQKV), *datt = dbuf(NATT), *dout = dup_f(s.w, NOUT);
  float *junk = hrand(NATT, 3, 1); /* datt is scratch: its old contents must not matter */
  ops->from_host(ctx, datt, junk, NATT * sizeof(float));
  ops->attention_backward(ctx, dqkv, datt, dout, s.qkv, s.att, B, T, NH, HS);
  fd_check("attention dqkv", att_objective, &s, s.qkv, dqkv, NQKV);

  float *g1 = down(dqkv, NQKV);
  ops->attention_backward(ctx, dqkv, datt, dout, s.qkv, s.att, B, T, NH, HS);
  check_doubled("attention dqkv", dqkv, g1, NQKV, T + HS);
}
END_TEST

/* ---- GELU ---- */

typedef struct gelu_state {
  float *out, *inp, *w, *tmp;
  size_t n;
} gelu_state;

static double gelu_objective(void *sp) {
  gelu_state *s = sp;
  ops->gelu_forward(ctx, s->out, s->inp, s->n);
  return weighted_sum(s->out, s->w, s->tmp, s->n);
}

START_TEST(test_gelu) {
  const size_t n = 61;
  float *inp_h = hrand(n, 0, 2.5f);
  inp_h[0] = 0.0f;
  inp_h[1] = -12.0f; /* saturated tails */
  inp_h[2] = 12.0f;
  gelu_state s = {.out = dbuf(n), .inp = dup_f(inp_h, n), .w = hrand(n, 0, 1), .tmp = hbuf(n),
                  .n = n};
  gelu_objective(&s);
  double *ref = hmem(n * sizeof(double));
  for (size_t i = 0; i < n; i++) {
    double x = inp_h[i];
    ref[i] = 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
  }
  check_close("gelu out", down(s.out, n), ref, n, fp32_tol(1, 8)); /* ~6 ops and tanh */

  float *dinp = dbuf(n), *dout = dup_f(s.w, n);
  ops->gelu_backward(ctx, dinp, s.inp, dout, n);
  fd_check("gelu dinp", gelu_objective, &s, s.inp, dinp, n);
  float *g1 = down(dinp, n);
  ops->gelu_backward(ctx, dinp, s.inp, dout, n);
  check_doubled("gelu dinp", dinp, g1, n, 1);
}
END_TEST

/* ---- residual ---- */

typedef struct res_state {
  float *out, *a, *b, *w, *tmp;
  size_t n;
} res_state;

static double res_objective(void *sp) {
  res_state *s = sp;
  ops->residual_forward(ctx, s->out, s->a, s->b, s->n);
  return weighted_sum(s->out, s->w, s->tmp, s->n);
}

START_TEST(test_residual) {
  const size_t n = 37;
  float *a_h = hrand(n, 0, 1), *b_h = hrand(n, 0, 1);
  res_state s = {.out = dbuf(n), .a = dup_f(a_h, n), .b = dup_f(b_h, n), .w = hrand(n, 0, 1),
                 .tmp = hbuf(n), .n = n};
  res_objective(&s);
  float *out = down(s.out, n);
  for (size_t i = 0; i < n; i++) ck_assert_float_eq(out[i], a_h[i] + b_h[i]);
  /* the residual's backward is the identity (the model passes dout through to both inputs):
   * check that the forward agrees with it */
  float *ident = dup_f(s.w, n);
  fd_check("residual da", res_objective, &s, s.a, ident, n);
  fd_check("residual db", res_objective, &s, s.b, ident, n);
  /* out may alias a */
  ops->residual_forward(ctx, s.a, s.a, s.b, n);
  float *aliased = down(s.a, n);
  for (size_t i = 0; i < n; i++) ck_assert_float_eq(aliased[i], a_h[i] + b_h[i]);
}
END_TEST

/* ---- cross-entropy ---- */

typedef struct ce_state {
  float *losses, *probs, *logits, *tmp;
  int32_t *targets;
  float dloss;
  int N, V;
} ce_state;

static double ce_objective(void *sp) {
  ce_state *s = sp;
  ops->crossentropy_forward(ctx, s->losses, s->probs, s->logits, s->targets, s->N, s->V);
  ops->to_host(ctx, s->tmp, s->losses, (size_t)s->N * sizeof(float));
  double l = 0;
  for (int i = 0; i < s->N; i++) l += s->tmp[i];
  return s->dloss * l;
}

START_TEST(test_crossentropy) {
  const int N = 6, V = 7;
  const size_t NV = (size_t)N * V;
  float *logits_h = hrand(NV, 0, 2);
  int32_t *tg = rand_tokens(N, V);
  tg[3] = -1; /* ignored row */
  ce_state s = {.losses = dbuf(N), .probs = dbuf(NV), .logits = dup_f(logits_h, NV),
                .tmp = hbuf(N), .targets = dcopy(tg, N * sizeof(int32_t)), .dloss = 0.37f,
                .N = N, .V = V};
  ce_objective(&s);
  double *ref_p = hmem(NV * sizeof(double)), *ref_l = hmem(N * sizeof(double));
  for (int n = 0; n < N; n++) {
    double mx = -INFINITY, sum = 0;
    for (int v = 0; v < V; v++) mx = fmax(mx, logits_h[n * V + v]);
    for (int v = 0; v < V; v++) sum += exp(logits_h[n * V + v] - mx);
    for (int v = 0; v < V; v++) ref_p[n * V + v] = exp(logits_h[n * V + v] - mx) / sum;
    ref_l[n] = tg[n] < 0 ? 0.0 : -log(ref_p[n * V + tg[n]]);
  }
  /* max and sum over V, exp, divide / log */
  check_close("crossentropy probs", down(s.probs, NV), ref_p, NV, fp32_tol(1, V + 4));
  check_close("crossentropy losses", down(s.losses, N), ref_l, N, fp32_tol(1, V + 4));

  float *dlogits = dbuf(NV);
  float *junk = hrand(NV, 7, 1); /* dlogits is assigned: old contents must not matter */
  ops->from_host(ctx, dlogits, junk, NV * sizeof(float));
  ops->crossentropy_backward(ctx, dlogits, s.probs, s.targets, s.dloss, N, V);
  fd_check("crossentropy dlogits", ce_objective, &s, s.logits, dlogits, NV);
  float *g1 = down(dlogits, NV);
  for (int v = 0; v < V; v++) ck_assert_float_eq(g1[3 * V + v], 0.0f);
  ops->crossentropy_backward(ctx, dlogits, s.probs, s.targets, s.dloss, N, V);
  float *g2 = down(dlogits, NV);
  ck_assert_msg(memcmp(g1, g2, NV * sizeof(float)) == 0, "crossentropy_backward must assign (=)");
}
END_TEST

/* The fused classifier (crossentropy_fused) against the separate kernels: the same operations
 * in the same order, so the losses and dlogits must be the same bits (not merely close), in
 * place and into another buffer, and the loss-only call must leave the logits untouched. Shapes:
 * tails of the 8-lane exp (V = 7, 1001) and a GPT-2-sized row (V = 50257), an ignored row. */
START_TEST(test_crossentropy_fused) {
  ck_assert_ptr_nonnull(ops->crossentropy_fused);
  const int shapes[][2] = {{6, 7}, {5, 1001}, {3, 50257}};
  for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
    const int N = shapes[k][0], V = shapes[k][1];
    const size_t NV = (size_t)N * V;
    const float dloss = 0.37f / (float)N;
    float *logits_h = hrand(NV, 0, 3);
    int32_t *tg = rand_tokens(N, V);
    tg[1] = -1; /* ignored row */
    int32_t *dtg = dcopy(tg, N * sizeof(int32_t));
    float *logits = dup_f(logits_h, NV), *probs = dbuf(NV), *ref_d = dbuf(NV);
    float *ref_l = dbuf(N), *l_sep = dbuf(N), *l_in = dbuf(N), *l_only = dbuf(N);
    ops->crossentropy_forward(ctx, ref_l, probs, logits, dtg, N, V);
    ops->crossentropy_backward(ctx, ref_d, probs, dtg, dloss, N, V);
    float *want_l = down(ref_l, N), *want_d = down(ref_d, NV);
    /* loss only: logits untouched */
    ops->crossentropy_fused(ctx, l_only, NULL, logits, dtg, dloss, N, V);
    ck_assert_msg(memcmp(down(logits, NV), logits_h, NV * sizeof(float)) == 0,
                  "V=%d: loss-only fused call wrote the logits", V);
    ck_assert_msg(memcmp(down(l_only, N), want_l, N * sizeof(float)) == 0,
                  "V=%d: loss-only fused losses differ from crossentropy_forward", V);
    /* into a separate buffer (assigned: old contents must not matter) */
    float *d = dup_f(hrand(NV, 5, 1), NV);
    ops->crossentropy_fused(ctx, l_sep, d, logits, dtg, dloss, N, V);
    ck_assert_msg(memcmp(down(l_sep, N), want_l, N * sizeof(float)) == 0, "V=%d: losses", V);
    ck_assert_msg(memcmp(down(d, NV), want_d, NV * sizeof(float)) == 0,
                  "V=%d: fused dlogits differ from crossentropy_backward's", V);
    /* in place over the logits (the training forward) */
    ops->crossentropy_fused(ctx, l_in, logits, logits, dtg, dloss, N, V);
    ck_assert_msg(memcmp(down(l_in, N), want_l, N * sizeof(float)) == 0, "V=%d: losses", V);
    ck_assert_msg(memcmp(down(logits, NV), want_d, NV * sizeof(float)) == 0,
                  "V=%d: in-place fused dlogits differ from crossentropy_backward's", V);
    printf("crossentropy_fused N=%d V=%d: losses and dlogits bitwise equal to the separate "
           "kernels (separate buffer, in place, loss only)\n", N, V);
  }
}
END_TEST

/* ---- AdamW ---- */

START_TEST(test_adamw) {
  const size_t n = 1003;
  const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.5f;
  float *p_h = hrand(n, 0, 1);
  double *p = hmem(n * sizeof(double)), *m = hmem(n * sizeof(double));
  double *v = hmem(n * sizeof(double));
  for (size_t i = 0; i < n; i++) p[i] = p_h[i];
  float *dp = dup_f(p_h, n), *dm = dbuf(n), *dv = dbuf(n), *dg = dbuf(n);
  for (int t = 1; t <= 3; t++) {
    float *g_h = hrand(n, 0, 1);
    ops->from_host(ctx, dg, g_h, n * sizeof(float));
    float *before = down(dp, n);
    ops->adamw(ctx, dp, dg, dm, dv, n, lr, b1, b2, eps, wd, gs, t);
    double *delta_ref = hmem(n * sizeof(double));
    for (size_t i = 0; i < n; i++) {
      double g = (double)g_h[i] * gs;
      m[i] = b1 * m[i] + (1.0 - b1) * g;
      v[i] = b2 * v[i] + (1.0 - b2) * g * g;
      double mhat = m[i] / (1.0 - pow(b1, t)), vhat = v[i] / (1.0 - pow(b2, t));
      delta_ref[i] = -lr * (mhat / (sqrt(vhat) + eps) + wd * (double)before[i]);
      p[i] = (double)before[i] + delta_ref[i];
    }
    float *after = down(dp, n), *delta = hbuf(n);
    for (size_t i = 0; i < n; i++) delta[i] = after[i] - before[i];
    /* the update seen through fp32 parameters: storing p + delta rounds by u |p|, which relative
     * to max|delta| is u max|p| / max|delta| (~1e-5: |p| ~ 3, |delta| ~ 1e-2), twice (before
     * and after), plus ~12 roundings of the update itself */
    double max_p = 0, max_d = 0;
    for (size_t i = 0; i < n; i++)
      max_p = fmax(max_p, fabs(p[i])), max_d = fmax(max_d, fabs(delta_ref[i]));
    check_close("adamw update", delta, delta_ref, n,
                2 * FP32_U * max_p / max_d + fp32_tol(1, 12));
    /* t steps of ~4 roundings each (moments, bias corrections, sqrt, divide, decay) */
    check_close("adamw param", after, p, n, fp32_tol(1, 4 * t));
    check_close("adamw m", down(dm, n), m, n, fp32_tol(1, 3 * t));
    check_close("adamw v", down(dv, n), v, n, fp32_tol(1, 4 * t));
  }
}
END_TEST

/* ---- vector ops and reductions ---- */

START_TEST(test_vector_ops) {
  const size_t n = 40001; /* above the parallel threshold, odd tail */
  float *x_h = hrand(n, 0, 1), *y_h = hrand(n, 0, 1);
  float *x = dup_f(x_h, n), *y = dup_f(y_h, n);
  ops->scale(ctx, x, -0.5f, n);
  ops->axpy(ctx, y, 3.0f, x, n);
  float *xs = down(x, n), *ys = down(y, n);
  for (size_t i = 0; i < n; i++) {
    ck_assert_float_eq(xs[i], x_h[i] * -0.5f);
    ck_assert_float_eq(ys[i], y_h[i] + 3.0f * (x_h[i] * -0.5f));
  }
  /* copy / memset_zero / to_host round trip */
  float *z = dbuf(n);
  ops->copy(ctx, z, y, n * sizeof(float));
  ck_assert_int_eq(memcmp(down(z, n), ys, n * sizeof(float)), 0);
  ops->memset_zero(ctx, z, n * sizeof(float));
  float *zz = down(z, n);
  for (size_t i = 0; i < n; i++) ck_assert_float_eq(zz[i], 0.0f);
  ops->synchronize(ctx);
}
END_TEST

START_TEST(test_sum_squares) {
  const size_t sizes[] = {0, 1, 255, 257, 100003, 1u << 20};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    size_t n = sizes[k];
    float *x_h = hrand(n, 0, 1);
    double ref = 0;
    for (size_t i = 0; i < n; i++) ref += (double)x_h[i] * x_h[i];
    double got = ops->sum_squares(ctx, dup_f(x_h, n), n);
    /* squares of floats are exact in double; the kernel's chunked n-term double sum and this
     * sequential one both round (c = 2) */
    double tol = 2 * FP_LAMBDA * sqrt((double)n) * FP64_U;
    printf("sum_squares n=%-8zu rel err %.2e (tol %.1e)\n", n, fabs(got - ref) / fmax(ref, 1.0),
           tol);
    ck_assert_msg(fabs(got - ref) <= tol * fmax(ref, 1.0), "n=%zu: sum_squares %.17g, want %.17g",
                  n, got, ref);
  }
}
END_TEST

START_TEST(test_all_finite) {
  const size_t sizes[] = {0, 1, 1000, 70001};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    size_t n = sizes[k];
    float *x_h = hrand(n, 0, 1e30f); /* large but finite */
    float *x = dup_f(x_h, n);
    ck_assert_int_eq(ops->all_finite(ctx, x, n), 1);
    if (n == 0) continue;
    const float bad[] = {INFINITY, -INFINITY, NAN};
    const size_t where[] = {0, n / 2, n - 1};
    for (int b = 0; b < 3; b++)
      for (int w = 0; w < 3; w++) {
        ops->from_host(ctx, x + where[w], &bad[b], sizeof(float));
        ck_assert_msg(ops->all_finite(ctx, x, n) == 0, "n=%zu: %g at %zu not detected", n,
                      (double)bad[b], where[w]);
        ops->from_host(ctx, x + where[w], &x_h[where[w]], sizeof(float));
      }
    ck_assert_int_eq(ops->all_finite(ctx, x, n), 1);
  }
}
END_TEST

/* The reductions that run across rows give bitwise identical results for any thread count. */
typedef struct det_result {
  double ss;
  float *dbias, *dweight_ln, *dbias_ln, *dwte, *dwpe;
} det_result;

static det_result det_run(const char *options) {
  open_device(options);
  loom__rng_seed(&rng, 99);
  const int N = 512, C = 96, OC = 300, V = 50, T = 64, B = N / T;
  det_result r;
  float *x = dup_f(hrand((size_t)1 << 20, 0, 1), (size_t)1 << 20);
  r.ss = ops->sum_squares(ctx, x, (size_t)1 << 20);
  float *dout = dup_f(hrand((size_t)N * OC, 0, 1), (size_t)N * OC);
  float *inp = dup_f(hrand((size_t)N * C, 0, 1), (size_t)N * C);
  float *w = dup_f(hrand((size_t)OC * C, 0, 1), (size_t)OC * C);
  float *dbias = dbuf(OC), *dw = dbuf((size_t)OC * C);
  ops->matmul_backward(ctx, NULL, dw, dbias, dout, inp, w, N, C, OC);
  r.dbias = down(dbias, OC);
  float *lno = dbuf((size_t)N * C), *mean = dbuf(N), *rstd = dbuf(N);
  float *lw = dup_f(hrand(C, 1, 0.1f), C), *lb = dup_f(hrand(C, 0, 0.1f), C);
  ops->layernorm_forward(ctx, lno, mean, rstd, inp, lw, lb, N, C);
  float *dln = dup_f(hrand((size_t)N * C, 0, 1), (size_t)N * C);
  float *dinp = dbuf((size_t)N * C), *dlw = dbuf(C), *dlb = dbuf(C);
  ops->layernorm_backward(ctx, dinp, dlw, dlb, dln, inp, lw, mean, rstd, N, C);
  r.dweight_ln = down(dlw, C);
  r.dbias_ln = down(dlb, C);
  int32_t *tok = dcopy(rand_tokens((size_t)N, V), (size_t)N * sizeof(int32_t));
  float *dwte = dbuf((size_t)V * C), *dwpe = dbuf((size_t)T * C);
  ops->encoder_backward(ctx, dwte, dwpe, dln, tok, B, T, C);
  r.dwte = down(dwte, (size_t)V * C);
  r.dwpe = down(dwpe, (size_t)T * C);
  loom__dev_close(&dev);
  return r;
}

START_TEST(test_determinism_threads) {
  loom__dev_close(&dev); /* the fixture's device; det_run opens its own */
  det_result a = det_run("{\"threads\": 1}");
  det_result b = det_run("{\"type\": \"cpu\", \"threads\": 3}");
  ck_assert_msg(a.ss == b.ss, "sum_squares differs across thread counts");
  ck_assert_int_eq(memcmp(a.dbias, b.dbias, 300 * sizeof(float)), 0);
  ck_assert_int_eq(memcmp(a.dweight_ln, b.dweight_ln, 96 * sizeof(float)), 0);
  ck_assert_int_eq(memcmp(a.dbias_ln, b.dbias_ln, 96 * sizeof(float)), 0);
  ck_assert_int_eq(memcmp(a.dwte, b.dwte, 50 * 96 * sizeof(float)), 0);
  ck_assert_int_eq(memcmp(a.dwpe, b.dwpe, 64 * 96 * sizeof(float)), 0);
}
END_TEST

/* ---- device layer: table, options, memory accounting ---- */

START_TEST(test_table) {
  const loom_device_v1 *d = loom__cpu_device();
  ck_assert_uint_eq(d->hdr.struct_size, sizeof(loom_device_v1));
  ck_assert_uint_eq(d->hdr.abi_major, LOOM_ABI_MAJOR);
  ck_assert_uint_eq(d->hdr.kind, LOOM_KIND_DEVICE);
  ck_assert_str_eq(d->hdr.name, "cpu");
  ck_assert(d->hdr.caps & LOOM_DEVICE_CAP_HOST_ADDRESSABLE);
#define NONNULL(f) ck_assert_msg(d->f != NULL, "cpu device: " #f " is NULL")
  NONNULL(create); NONNULL(destroy); NONNULL(alloc); NONNULL(free); NONNULL(memset_zero);
  NONNULL(copy); NONNULL(to_host); NONNULL(from_host); NONNULL(synchronize); NONNULL(scale);
  NONNULL(axpy); NONNULL(sum_squares); NONNULL(all_finite); NONNULL(adamw);
  NONNULL(encoder_forward); NONNULL(encoder_backward); NONNULL(layernorm_forward);
  NONNULL(layernorm_backward); NONNULL(matmul_forward); NONNULL(matmul_backward);
  NONNULL(attention_forward); NONNULL(attention_backward); NONNULL(gelu_forward);
  NONNULL(gelu_backward); NONNULL(residual_forward); NONNULL(crossentropy_forward);
  NONNULL(crossentropy_backward);
#undef NONNULL
}
END_TEST

START_TEST(test_options) {
  static const struct { const char *json; int rc; } cases[] = {
      {"{}", LOOM_OK},
      {"{\"type\": \"cpu\", \"threads\": 0}", LOOM_OK},
      {"{\"threads\": 2}", LOOM_OK},
      {"{\"_comment\": \"keys starting with _ are comments\", \"threads\": 1}", LOOM_OK},
      {"{\"threads\": -1}", LOOM_INVALID_CONFIG},
      {"{\"threads\": \"4\"}", LOOM_INVALID_CONFIG},
      {"{\"threads\": 1.5}", LOOM_INVALID_CONFIG},
      {"{\"type\": 3}", LOOM_INVALID_CONFIG},
      {"{\"thread\": 2}", LOOM_INVALID_CONFIG},
      {"not json", LOOM_INVALID_CONFIG},
      {"[1]", LOOM_INVALID_CONFIG},
      {"{\"type\": \"cuda\"}", LOOM_UNSUPPORTED},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    loom_dev d2;
    char err[256];
    int rc = loom__dev_open(&d2, loom__cpu_device(), cases[i].json, 0, err, sizeof err);
    ck_assert_msg(rc == cases[i].rc, "%s: got %d, want %d", cases[i].json, rc, cases[i].rc);
    if (rc == LOOM_OK)
      loom__dev_close(&d2);
    else
      ck_assert_msg(strstr(err, "cpu") != NULL, "error message names the device: %s", err);
  }
}
END_TEST

START_TEST(test_accounting) {
  for (int c = 0; c < LOOM_MEM__COUNT; c++) ck_assert_uint_eq(dev.bytes_now[c], 0);
  ck_assert_str_eq(loom__mem_category_name(LOOM_MEM_PARAMS), "params");
  ck_assert_str_eq(loom__mem_category_name(LOOM_MEM_GRADS), "grads");
  ck_assert_str_eq(loom__mem_category_name(LOOM_MEM_OPTIM), "optim");
  ck_assert_str_eq(loom__mem_category_name(LOOM_MEM_ACTIVATIONS), "activations");
  ck_assert_str_eq(loom__mem_category_name(LOOM_MEM_COMM), "comm");
  ck_assert_str_eq(loom__mem_category_name(LOOM_MEM_HOST), "host");
  ck_assert_str_eq(loom__mem_category_name(LOOM_MEM_OTHER), "other");

  float *a = loom__dev_alloc(&dev, 100, LOOM_MEM_PARAMS);
  float *b = loom__dev_alloc(&dev, 1000, LOOM_MEM_ACTIVATIONS);
  float *c = loom__dev_alloc(&dev, 3, LOOM_MEM_ACTIVATIONS);
  void *z = loom__dev_alloc(&dev, 0, LOOM_MEM_OTHER);
  ck_assert_ptr_nonnull(a);
  ck_assert_ptr_nonnull(b);
  ck_assert_ptr_nonnull(c);
  ck_assert_ptr_nonnull(z);
  ck_assert_uint_eq((uintptr_t)a % 64, 0);
  ck_assert_uint_eq((uintptr_t)b % 64, 0);
  ck_assert_uint_eq((uintptr_t)c % 64, 0);
  float *bh = hbuf(250);
  ops->to_host(ctx, bh, b, 1000);
  for (int i = 0; i < 250; i++) ck_assert_float_eq(bh[i], 0.0f); /* zero-filled */
  ck_assert_uint_eq(dev.bytes_now[LOOM_MEM_PARAMS], 100);
  ck_assert_uint_eq(dev.bytes_now[LOOM_MEM_ACTIVATIONS], 1003);
  ck_assert_uint_eq(dev.total_now, 1103);
  loom__dev_free(&dev, b);
  ck_assert_uint_eq(dev.bytes_now[LOOM_MEM_ACTIVATIONS], 3);
  ck_assert_uint_eq(dev.bytes_peak[LOOM_MEM_ACTIVATIONS], 1003);
  ck_assert_uint_eq(dev.total_now, 103);
  ck_assert_uint_eq(dev.total_peak, 1103);
  loom__dev_free(&dev, NULL); /* no-op */
  b = loom__dev_alloc(&dev, 500, LOOM_MEM_ACTIVATIONS);
  ck_assert_uint_eq(dev.bytes_peak[LOOM_MEM_ACTIVATIONS], 1003);
  loom__dev_free(&dev, a);
  ck_assert_uint_eq(dev.bytes_now[LOOM_MEM_PARAMS], 0);
  ck_assert_uint_eq(dev.bytes_peak[LOOM_MEM_PARAMS], 100);
  /* b, c, z stay live: close (teardown) frees them; LeakSanitizer would see otherwise */
}
END_TEST

static Suite *kernels_suite(void) {
  const check_case cases[] = {
      {"encoder", test_encoder},       {"layernorm", test_layernorm},
      {"matmul_bias", test_matmul_bias}, {"matmul_nobias", test_matmul_nobias},
      {"attention", test_attention},   {"gelu", test_gelu},
      {"residual", test_residual},     {"crossentropy", test_crossentropy},
      {"crossentropy_fused", test_crossentropy_fused},
      {"crossentropy_fused", test_crossentropy_fused},
      {"adamw", test_adamw},           {"vector_ops", test_vector_ops},
      {"sum_squares", test_sum_squares}, {"all_finite", test_all_finite},
      {"determinism", test_determinism_threads}, {"table", test_table},
      {"options", test_options},       {"accounting", test_accounting},
  };
  return check_case_suite("kernels", CHECK_CASES(cases), setup, teardown, 60);
}

int main(void) {
  return check_run_suite(kernels_suite(), CK_FORK);
}
