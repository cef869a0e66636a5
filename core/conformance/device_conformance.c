/* `loom conformance --device NAME [--options JSON] [--dtype fp32|bf16|all]`: every kernel of a
 * device backend's table against the float64 reference (device_reference.c) on the same fp32
 * inputs, at the shapes of the models loom trains and at odd ones. docs/conformance.md.
 *
 * Tolerance, per output tensor: max|device - reference| / max|reference| <= c * lambda * sqrt(n)
 * * u (docs/tolerances.md: Higham & Mary's probabilistic bound, lambda = 6, c = 1 against
 * float64), n the reduction length of the kernel (stated with each check), u the unit roundoff of
 * the arithmetic: fp32 2^-24; a GEMM in TF32 (--options '{"tf32": true}', a CUDA option) 2^-11
 * on its products. The bf16 pass rounds every input to bf16 first and tells the device
 * set_compute_dtype(bf16): a bf16 GEMM with fp32 accumulation is then exact on its inputs, so
 * the fp32 bound stands. round_to and convert are checked bitwise. A device whose create_ex
 * refuses (no GPU, no driver) is reported SKIP with its reason, exit 0. */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conformance/device_conformance.h"
#include "conformance/device_reference.h"
#include "device/device.h"
#include "runtime/device_open.h"
#include "runtime/loader.h"

#define U32 0x1p-24
#define U_TF32 0x1p-11
#define LAMBDA 6.0

typedef struct suite {
  const loom_device_v1 *ops;
  void *ctx;
  double u_gemm;      /* unit roundoff of GEMM products: fp32 or TF32 */
  int passed, failed, skipped;
  double worst_ratio; /* max over checks of measured / bound */
  char worst_name[96];
  uint64_t rng;
  loom_dtype dtype;   /* inputs representable in this dtype (the pass) */
} suite;

static double tol(double u, double n) { return LAMBDA * sqrt(n < 1 ? 1 : n) * u; }

static void line(const char *status, const char *name, const char *detail) {
  printf("%-4s  %-44s %s\n", status, name, detail);
  fflush(stdout);
}

/* ---- inputs ---- */
static double uniform(suite *s) { /* [-1, 1), splitmix64 */
  uint64_t z = (s->rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (double)(z >> 11) * 0x1p-52 - 1.0;
}
static float *rand_f(suite *s, size_t n, double scale) {
  float *x = malloc((n ? n : 1) * sizeof *x);
  for (size_t i = 0; i < n; i++) x[i] = ref_round((float)(uniform(s) * scale), s->dtype);
  return x;
}
static int32_t *rand_tok(suite *s, size_t n, int V, int ignore_every) {
  int32_t *x = malloc((n ? n : 1) * sizeof *x);
  for (size_t i = 0; i < n; i++)
    x[i] = ignore_every && i % (size_t)ignore_every == 1
               ? -1 : (int32_t)((uniform(s) + 1.0) * 0.5 * V) % V;
  return x;
}
static double *to_d(const float *x, size_t n) {
  double *d = malloc((n ? n : 1) * sizeof *d);
  for (size_t i = 0; i < n; i++) d[i] = x[i];
  return d;
}

/* ---- device buffers ---- */
static void *up(suite *s, const void *host, size_t bytes) {
  void *p = s->ops->alloc(s->ctx, bytes ? bytes : 4);
  if (p && host && bytes) s->ops->from_host(s->ctx, p, host, bytes);
  return p;
}
static float *down(suite *s, const void *dev, size_t n) {
  float *h = malloc((n ? n : 1) * sizeof *h);
  if (s->ops->synchronize) s->ops->synchronize(s->ctx);
  s->ops->to_host(s->ctx, h, dev, n * sizeof *h);
  return h;
}
static void dfree(suite *s, void *p) {
  if (p) s->ops->free(s->ctx, p);
}

/* ---- comparison ---- */
static void compare(suite *s, const char *name, const float *got, const double *ref, size_t n,
                    double red_len, double u) {
  double maxref = 0, maxdiff = 0;
  int nonfinite = 0;
  for (size_t i = 0; i < n; i++) {
    if (fabs(ref[i]) > maxref) maxref = fabs(ref[i]);
    if (!isfinite(got[i])) nonfinite = 1;
    double d = fabs((double)got[i] - ref[i]);
    if (d > maxdiff) maxdiff = d;
  }
  double rel = maxref > 0 ? maxdiff / maxref : maxdiff, bound = tol(u, red_len);
  char detail[256];
  snprintf(detail, sizeof detail, "max rel %.2e <= %.2e (n=%.0f%s, %zu elements)", rel, bound,
           red_len, u == U32 ? "" : ", tf32", n);
  int ok = !nonfinite && rel <= bound;
  if (nonfinite) snprintf(detail, sizeof detail, "non-finite output (%zu elements)", n);
  line(ok ? "PASS" : "FAIL", name, detail);
  ok ? s->passed++ : s->failed++;
  if (bound > 0 && rel / bound > s->worst_ratio) {
    s->worst_ratio = rel / bound;
    snprintf(s->worst_name, sizeof s->worst_name, "%s", name);
  }
}

static int have(suite *s, const char *name, const void *slot) {
  if (slot) return 1;
  char n[128];
  snprintf(n, sizeof n, "%s", name);
  line("FAIL", n, "slot is NULL: the GPT needs it");
  s->failed++;
  return 0;
}

/* ---- the shapes ---- */
typedef struct shape {
  const char *name;
  int B, T, C, NH, V;
} shape;

static const shape shapes[] = {
    {"tiny", 4, 64, 32, 2, 256},          /* configs/tiny.json */
    {"fortunes", 8, 128, 256, 8, 256},    /* configs/fortunes_*.json (the main job) */
    {"gpt2_slice", 1, 256, 768, 12, 50257}, /* GPT-2 124M's C, heads, V; T cut to 256 */
    {"odd", 3, 7, 15, 3, 61},             /* nothing a multiple of 8 or 32 */
    {"odd_wide", 1, 33, 100, 4, 1001},
    {"t1", 2, 1, 32, 2, 256},             /* T = 1 */
};

static void check_shape(suite *s, const shape *sh) {
  const loom_device_v1 *o = s->ops;
  int B = sh->B, T = sh->T, C = sh->C, NH = sh->NH, V = sh->V, HS = C / NH, N = B * T;
  size_t NC = (size_t)N * C;
  char nm[128];
  const char *dt = s->dtype == LOOM_BF16 ? ".bf16" : "";
#define NAME(kernel, extra) (snprintf(nm, sizeof nm, "%s.%s%s%s", kernel, sh->name, extra, dt), nm)

  /* encoder: forward n = 2 (one add); backward: a wte row sums up to N positions, wpe B */
  if (have(s, "encoder_forward", (void *)o->encoder_forward) &&
      have(s, "encoder_backward", (void *)o->encoder_backward)) {
    int32_t *inp = rand_tok(s, (size_t)N, V, 0);
    float *wte = rand_f(s, (size_t)V * C, 1), *wpe = rand_f(s, (size_t)T * C, 1);
    float *dout = rand_f(s, NC, 1), *dwte0 = rand_f(s, (size_t)V * C, 1);
    float *dwpe0 = rand_f(s, (size_t)T * C, 1);
    void *d_inp = up(s, inp, (size_t)N * 4), *d_wte = up(s, wte, (size_t)V * C * 4);
    void *d_wpe = up(s, wpe, (size_t)T * C * 4), *d_out = up(s, NULL, NC * 4);
    void *d_dout = up(s, dout, NC * 4), *d_dwte = up(s, dwte0, (size_t)V * C * 4);
    void *d_dwpe = up(s, dwpe0, (size_t)T * C * 4);
    o->encoder_forward(s->ctx, d_out, d_inp, d_wte, d_wpe, B, T, C);
    double *ref = malloc(NC * sizeof *ref);
    ref_encoder_forward(ref, inp, wte, wpe, B, T, C);
    float *got = down(s, d_out, NC);
    compare(s, NAME("encoder_forward", ""), got, ref, NC, 2, U32);
    free(got);
    free(ref);
    o->encoder_backward(s->ctx, d_dwte, d_dwpe, d_dout, d_inp, B, T, C);
    double *rw = to_d(dwte0, (size_t)V * C), *rp = to_d(dwpe0, (size_t)T * C);
    ref_encoder_backward(rw, rp, dout, inp, B, T, C);
    got = down(s, d_dwte, (size_t)V * C);
    compare(s, NAME("encoder_backward", ".dwte"), got, rw, (size_t)V * C, N + 1, U32);
    free(got);
    got = down(s, d_dwpe, (size_t)T * C);
    compare(s, NAME("encoder_backward", ".dwpe"), got, rp, (size_t)T * C, B + 1, U32);
    free(got);
    free(rw), free(rp), free(inp), free(wte), free(wpe), free(dout), free(dwte0), free(dwpe0);
    dfree(s, d_inp), dfree(s, d_wte), dfree(s, d_wpe), dfree(s, d_out), dfree(s, d_dout);
    dfree(s, d_dwte), dfree(s, d_dwpe);
  }

  /* layernorm: forward n = 2C (mean, variance) + 4; backward dinp n = 2C + 4, dweight/dbias
   * n = N + 1 (summed over rows, onto the initial value) */
  if (have(s, "layernorm_forward", (void *)o->layernorm_forward) &&
      have(s, "layernorm_backward", (void *)o->layernorm_backward)) {
    float *x = rand_f(s, NC, 2), *w = rand_f(s, (size_t)C, 1), *b = rand_f(s, (size_t)C, 1);
    float *dout = rand_f(s, NC, 1), *dinp0 = rand_f(s, NC, 1), *dw0 = rand_f(s, (size_t)C, 1);
    float *db0 = rand_f(s, (size_t)C, 1);
    void *d_x = up(s, x, NC * 4), *d_w = up(s, w, (size_t)C * 4), *d_b = up(s, b, (size_t)C * 4);
    void *d_out = up(s, NULL, NC * 4), *d_mean = up(s, NULL, (size_t)N * 4);
    void *d_rstd = up(s, NULL, (size_t)N * 4);
    o->layernorm_forward(s->ctx, d_out, d_mean, d_rstd, d_x, d_w, d_b, N, C);
    double *ref = malloc(NC * sizeof *ref), *rm = malloc((size_t)N * 8), *rr = malloc((size_t)N * 8);
    ref_layernorm_forward(ref, x, w, b, N, C);
    ref_layernorm_stats(rm, rr, x, N, C);
    float *got = down(s, d_out, NC);
    compare(s, NAME("layernorm_forward", ".out"), got, ref, NC, 2.0 * C + 4, U32);
    free(got);
    got = down(s, d_rstd, (size_t)N);
    compare(s, NAME("layernorm_forward", ".rstd"), got, rr, (size_t)N, 2.0 * C + 4, U32);
    free(got);
    /* backward from the reference's statistics (rounded to fp32), the same on both sides */
    float *fm = malloc((size_t)N * 4), *fr = malloc((size_t)N * 4);
    for (int i = 0; i < N; i++) fm[i] = (float)rm[i], fr[i] = (float)rr[i];
    s->ops->from_host(s->ctx, d_mean, fm, (size_t)N * 4);
    s->ops->from_host(s->ctx, d_rstd, fr, (size_t)N * 4);
    void *d_dout = up(s, dout, NC * 4), *d_dinp = up(s, dinp0, NC * 4);
    void *d_dw = up(s, dw0, (size_t)C * 4), *d_db = up(s, db0, (size_t)C * 4);
    o->layernorm_backward(s->ctx, d_dinp, d_dw, d_db, d_dout, d_x, d_w, d_mean, d_rstd, N, C);
    double *rdi = to_d(dinp0, NC), *rdw = to_d(dw0, (size_t)C), *rdb = to_d(db0, (size_t)C);
    ref_layernorm_backward(rdi, rdw, rdb, dout, x, w, fm, fr, N, C);
    got = down(s, d_dinp, NC);
    compare(s, NAME("layernorm_backward", ".dinp"), got, rdi, NC, 2.0 * C + 4, U32);
    free(got);
    got = down(s, d_dw, (size_t)C);
    compare(s, NAME("layernorm_backward", ".dweight"), got, rdw, (size_t)C, N + 1, U32);
    free(got);
    got = down(s, d_db, (size_t)C);
    compare(s, NAME("layernorm_backward", ".dbias"), got, rdb, (size_t)C, N + 1, U32);
    free(got);
    free(ref), free(rm), free(rr), free(fm), free(fr), free(rdi), free(rdw), free(rdb);
    free(x), free(w), free(b), free(dout), free(dinp0), free(dw0), free(db0);
    dfree(s, d_x), dfree(s, d_w), dfree(s, d_b), dfree(s, d_out), dfree(s, d_mean);
    dfree(s, d_rstd), dfree(s, d_dout), dfree(s, d_dinp), dfree(s, d_dw), dfree(s, d_db);
  }

  /* matmul: the block's four GEMM shapes (qkv 3C, attention proj C, fc 4C, the head V when the
   * float64 reference stays under ~0.6 G multiply-adds). forward n = C + 1 (bias); backward
   * dinp n = OC + 1, dweight and dbias n = N + 1 */
  if (have(s, "matmul_forward", (void *)o->matmul_forward) &&
      have(s, "matmul_backward", (void *)o->matmul_backward)) {
    int ocs[4] = {3 * C, C, 4 * C, V};
    for (int k = 0; k < 4; k++) {
      int OC = ocs[k];
      if ((double)N * C * OC > 6e8) continue;
      const char *tag = k == 0 ? ".qkv" : k == 1 ? ".proj" : k == 2 ? ".fc" : ".head";
      int with_bias = k != 3, with_dinp = k != 1; /* head: no bias (tied wte); proj: no dinp */
      size_t NO = (size_t)N * OC, OCC = (size_t)OC * C;
      float *x = rand_f(s, NC, 1), *w = rand_f(s, OCC, 0.2), *b = rand_f(s, (size_t)OC, 1);
      float *dout = rand_f(s, NO, 1), *dx0 = rand_f(s, NC, 1), *dw0 = rand_f(s, OCC, 1);
      float *db0 = rand_f(s, (size_t)OC, 1);
      void *d_x = up(s, x, NC * 4), *d_w = up(s, w, OCC * 4);
      void *d_b = with_bias ? up(s, b, (size_t)OC * 4) : NULL, *d_out = up(s, NULL, NO * 4);
      o->matmul_forward(s->ctx, d_out, d_x, d_w, d_b, N, C, OC);
      double *ref = malloc(NO * sizeof *ref);
      ref_matmul_forward(ref, x, w, with_bias ? b : NULL, N, C, OC);
      float *got = down(s, d_out, NO);
      char extra[32];
      snprintf(extra, sizeof extra, "%s%s", tag, with_bias ? "" : ".nobias");
      compare(s, NAME("matmul_forward", extra), got, ref, NO, C + 1, s->u_gemm);
      free(got);
      free(ref);
      void *d_dout = up(s, dout, NO * 4), *d_dx = with_dinp ? up(s, dx0, NC * 4) : NULL;
      void *d_dw = up(s, dw0, OCC * 4), *d_db = with_bias ? up(s, db0, (size_t)OC * 4) : NULL;
      o->matmul_backward(s->ctx, d_dx, d_dw, d_db, d_dout, d_x, d_w, N, C, OC);
      double *rdx = with_dinp ? to_d(dx0, NC) : NULL, *rdw = to_d(dw0, OCC);
      double *rdb = with_bias ? to_d(db0, (size_t)OC) : NULL;
      ref_matmul_backward(rdx, rdw, rdb, dout, x, w, N, C, OC);
      if (with_dinp) {
        got = down(s, d_dx, NC);
        snprintf(extra, sizeof extra, "%s.dinp", tag);
        compare(s, NAME("matmul_backward", extra), got, rdx, NC, OC + 1, s->u_gemm);
        free(got);
      }
      got = down(s, d_dw, OCC);
      snprintf(extra, sizeof extra, "%s.dweight", tag);
      compare(s, NAME("matmul_backward", extra), got, rdw, OCC, N + 1, s->u_gemm);
      free(got);
      if (with_bias) {
        got = down(s, d_db, (size_t)OC);
        snprintf(extra, sizeof extra, "%s.dbias", tag);
        compare(s, NAME("matmul_backward", extra), got, rdb, (size_t)OC, N + 1, U32);
        free(got);
      }
      free(rdx), free(rdw), free(rdb), free(x), free(w), free(b), free(dout), free(dx0);
      free(dw0), free(db0);
      dfree(s, d_x), dfree(s, d_w), dfree(s, d_b), dfree(s, d_out), dfree(s, d_dout);
      dfree(s, d_dx), dfree(s, d_dw), dfree(s, d_db);
    }
  }

  /* attention: forward n = HS + 2T (scores, softmax sum, weighted sum of v); backward
   * n = 2T + HS + T (the same paths back, plus the softmax Jacobian's dot product) */
  if (have(s, "attention_forward", (void *)o->attention_forward) &&
      have(s, "attention_backward", (void *)o->attention_backward)) {
    size_t Q = (size_t)N * 3 * C, A = (size_t)B * NH * T * T;
    float *qkv = rand_f(s, Q, 1), *dout = rand_f(s, NC, 1), *dq0 = rand_f(s, Q, 1);
    void *d_qkv = up(s, qkv, Q * 4), *d_out = up(s, NULL, NC * 4), *d_att = up(s, NULL, A * 4);
    o->attention_forward(s->ctx, d_out, d_att, d_qkv, B, T, NH, HS);
    double *ro = malloc(NC * sizeof *ro), *ra = malloc(A * sizeof *ra);
    ref_attention_forward(ro, ra, qkv, B, T, NH, HS);
    float *got = down(s, d_out, NC);
    compare(s, NAME("attention_forward", ".out"), got, ro, NC, HS + 2.0 * T, s->u_gemm);
    free(got);
    got = down(s, d_att, A);
    compare(s, NAME("attention_forward", ".att"), got, ra, A, HS + 2.0 * T, s->u_gemm);
    free(got);
    float *fa = malloc(A * 4); /* the reference's probabilities, the same input to both */
    for (size_t i = 0; i < A; i++) fa[i] = (float)ra[i];
    s->ops->from_host(s->ctx, d_att, fa, A * 4);
    void *d_dout = up(s, dout, NC * 4), *d_dq = up(s, dq0, Q * 4), *d_datt = up(s, NULL, A * 4);
    o->attention_backward(s->ctx, d_dq, d_datt, d_dout, d_qkv, d_att, B, T, NH, HS);
    double *rdq = to_d(dq0, Q);
    ref_attention_backward(rdq, dout, qkv, fa, B, T, NH, HS);
    got = down(s, d_dq, Q);
    compare(s, NAME("attention_backward", ".dqkv"), got, rdq, Q, 3.0 * T + HS + 1, s->u_gemm);
    free(got);
    free(ro), free(ra), free(fa), free(rdq), free(qkv), free(dout), free(dq0);
    dfree(s, d_qkv), dfree(s, d_out), dfree(s, d_att), dfree(s, d_dout), dfree(s, d_dq);
    dfree(s, d_datt);
  }

  /* GELU over the MLP's (N, 4C): ~10 roundings per element including tanh; residual: 1 */
  if (have(s, "gelu_forward", (void *)o->gelu_forward) &&
      have(s, "gelu_backward", (void *)o->gelu_backward) &&
      have(s, "residual_forward", (void *)o->residual_forward)) {
    size_t M = NC * 4;
    float *x = rand_f(s, M, 4), *dout = rand_f(s, M, 1), *dx0 = rand_f(s, M, 1);
    void *d_x = up(s, x, M * 4), *d_out = up(s, NULL, M * 4), *d_dout = up(s, dout, M * 4);
    void *d_dx = up(s, dx0, M * 4);
    o->gelu_forward(s->ctx, d_out, d_x, M);
    double *ref = malloc(M * sizeof *ref);
    ref_gelu_forward(ref, x, M);
    float *got = down(s, d_out, M);
    compare(s, NAME("gelu_forward", ""), got, ref, M, 10, U32);
    free(got);
    o->gelu_backward(s->ctx, d_dx, d_x, d_dout, M);
    double *rdx = to_d(dx0, M);
    ref_gelu_backward(rdx, x, dout, M);
    got = down(s, d_dx, M);
    compare(s, NAME("gelu_backward", ""), got, rdx, M, 12, U32);
    free(got);
    /* residual, out aliasing a (as the model calls it) */
    o->residual_forward(s->ctx, d_x, d_x, d_dout, M);
    for (size_t i = 0; i < M; i++) ref[i] = (double)x[i] + dout[i];
    got = down(s, d_x, M);
    compare(s, NAME("residual_forward", ".inplace"), got, ref, M, 1, U32);
    free(got);
    free(ref), free(rdx), free(x), free(dout), free(dx0);
    dfree(s, d_x), dfree(s, d_out), dfree(s, d_dout), dfree(s, d_dx);
  }

  /* softmax cross-entropy over (N, V), every third row ignored (target -1): n = V + 2 */
  if (have(s, "crossentropy_forward", (void *)o->crossentropy_forward) &&
      have(s, "crossentropy_backward", (void *)o->crossentropy_backward)) {
    size_t NV = (size_t)N * V;
    float *logits = rand_f(s, NV, 8);
    int32_t *tg = rand_tok(s, (size_t)N, V, 3);
    void *d_l = up(s, logits, NV * 4), *d_t = up(s, tg, (size_t)N * 4);
    void *d_p = up(s, NULL, NV * 4), *d_loss = up(s, NULL, (size_t)N * 4);
    o->crossentropy_forward(s->ctx, d_loss, d_p, d_l, d_t, N, V);
    double *rl = malloc((size_t)N * 8), *rp = malloc(NV * sizeof *rp);
    ref_crossentropy_forward(rl, rp, logits, tg, N, V);
    float *got = down(s, d_loss, (size_t)N);
    compare(s, NAME("crossentropy_forward", ".losses"), got, rl, (size_t)N, V + 2.0, U32);
    free(got);
    got = down(s, d_p, NV); /* probabilities of the rows that count */
    float *gp = malloc(NV * 4);
    double *rpp = malloc(NV * sizeof *rpp);
    size_t k = 0;
    for (int n = 0; n < N; n++)
      if (tg[n] >= 0)
        for (int v = 0; v < V; v++, k++)
          gp[k] = got[(size_t)n * V + v], rpp[k] = rp[(size_t)n * V + v];
    compare(s, NAME("crossentropy_forward", ".probs"), gp, rpp, k, V + 2.0, U32);
    free(got), free(gp), free(rpp);
    float *fp = malloc(NV * 4);
    for (size_t i = 0; i < NV; i++) fp[i] = (float)rp[i];
    s->ops->from_host(s->ctx, d_p, fp, NV * 4);
    float dloss = 1.0f / (float)N;
    o->crossentropy_backward(s->ctx, d_l, d_p, d_t, dloss, N, V); /* assigned: reuse logits */
    double *rd = malloc(NV * sizeof *rd);
    ref_crossentropy_backward(rd, fp, tg, dloss, N, V);
    got = down(s, d_l, NV);
    compare(s, NAME("crossentropy_backward", ""), got, rd, NV, 2, U32);
    free(got);
    free(rl), free(rp), free(fp), free(rd), free(logits), free(tg);
    dfree(s, d_l), dfree(s, d_t), dfree(s, d_p), dfree(s, d_loss);
  }
#undef NAME
}

/* The vector kernels, memory and 16-bit storage, at a power of two and an odd length. */
static void check_vectors(suite *s, size_t n) {
  const loom_device_v1 *o = s->ops;
  char nm[96];
#define VNAME(k) (snprintf(nm, sizeof nm, "%s.n%zu", k, n), nm)
  float *x = rand_f(s, n, 3), *y = rand_f(s, n, 3);
  void *dx = up(s, x, n * 4), *dy = up(s, y, n * 4);
  /* memory: alloc is zero-filled; copy, to_host / from_host are exact */
  void *dz = up(s, NULL, n * 4);
  float *got = down(s, dz, n);
  int zero = 1;
  for (size_t i = 0; i < n; i++) zero &= got[i] == 0.0f;
  free(got);
  o->copy(s->ctx, dz, dx, n * 4);
  got = down(s, dz, n);
  int same = memcmp(got, x, n * 4) == 0;
  free(got);
  int cleared = 1;
  if (o->memset_zero) {
    o->memset_zero(s->ctx, dz, n * 4);
    got = down(s, dz, n);
    for (size_t i = 0; i < n; i++) cleared &= got[i] == 0.0f;
    free(got);
  }
  line(zero && same && cleared ? "PASS" : "FAIL", VNAME("memory"),
       zero ? (same ? (cleared ? "alloc zero-filled, copy/to_host/from_host/memset_zero exact"
                               : "memset_zero left non-zero values")
                    : "copy or to_host/from_host changed bits")
            : "alloc is not zero-filled");
  (zero && same && cleared) ? s->passed++ : s->failed++;
  dfree(s, dz);

  double *ref = malloc(n * sizeof *ref);
  if (have(s, "scale", (void *)o->scale) && have(s, "axpy", (void *)o->axpy)) {
    o->scale(s->ctx, dx, 0.37f, n);
    for (size_t i = 0; i < n; i++) ref[i] = (double)x[i] * (double)0.37f;
    got = down(s, dx, n);
    compare(s, VNAME("scale"), got, ref, n, 1, U32);
    free(got);
    s->ops->from_host(s->ctx, dx, x, n * 4);
    o->axpy(s->ctx, dy, -1.25f, dx, n);
    for (size_t i = 0; i < n; i++) ref[i] = (double)y[i] - 1.25 * x[i];
    got = down(s, dy, n);
    compare(s, VNAME("axpy"), got, ref, n, 2, U32);
    free(got);
    s->ops->from_host(s->ctx, dy, y, n * 4);
  }
  if (have(s, "sum_squares", (void *)o->sum_squares)) {
    double r = 0;
    for (size_t i = 0; i < n; i++) r += (double)x[i] * x[i];
    float g = (float)o->sum_squares(s->ctx, dx, n);
    compare(s, VNAME("sum_squares"), &g, &r, 1, (double)n, U32);
  }
  if (have(s, "all_finite", (void *)o->all_finite)) {
    int a = o->all_finite(s->ctx, dx, n);
    float bad[2] = {INFINITY, NAN};
    int b[2];
    for (int k = 0; k < 2; k++) {
      s->ops->from_host(s->ctx, (char *)dx + (n / 2) * 4, &bad[k], 4);
      b[k] = o->all_finite(s->ctx, dx, n);
    }
    s->ops->from_host(s->ctx, dx, x, n * 4);
    int ok = a == 1 && b[0] == 0 && b[1] == 0;
    line(ok ? "PASS" : "FAIL", VNAME("all_finite"),
         ok ? "1 on finite data, 0 with one +inf, 0 with one NaN" : "wrong answer");
    ok ? s->passed++ : s->failed++;
  }
  if (have(s, "adamw", (void *)o->adamw)) {
    /* two steps from m = v = 0 (bias correction at t = 1, 2), weight decay and a grad scale:
     * ~16 roundings per element per step */
    float *g = rand_f(s, n, 1);
    void *dg = up(s, g, n * 4), *dm = up(s, NULL, n * 4), *dv = up(s, NULL, n * 4);
    double *rp = to_d(x, n), *rm = calloc(n, 8), *rv = calloc(n, 8);
    for (int t = 1; t <= 2; t++) {
      o->adamw(s->ctx, dx, dg, dm, dv, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, t);
      ref_adamw(rp, rm, rv, g, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, t);
    }
    got = down(s, dx, n);
    compare(s, VNAME("adamw.param"), got, rp, n, 32, U32);
    free(got);
    got = down(s, dv, n);
    compare(s, VNAME("adamw.v"), got, rv, n, 32, U32);
    free(got);
    s->ops->from_host(s->ctx, dx, x, n * 4);
    free(g), free(rp), free(rm), free(rv);
    dfree(s, dg), dfree(s, dm), dfree(s, dv);
  }
  /* 16-bit storage (ABI 1.3): bitwise against the reference rounding, with the values where
   * rounding is delicate (ties, overflow, subnormals, NaN) in front */
  if (LOOM_DEVICE_HAS(o, round_to) && LOOM_DEVICE_HAS(o, convert)) {
    static const float special[] = {1.0f + 0x1p-8f, 1.0f + 0x3p-8f, 1.0f + 0x1p-11f,
                                    65504.0f, 65519.0f, 65520.0f, 0x1p-24f, 0x1p-25f,
                                    0x1.8p-25f, 0x1p-130f, 3.3895e38f, INFINITY, -INFINITY,
                                    -0.0f, NAN};
    size_t ns = sizeof special / sizeof special[0];
    float *v = malloc(n * 4);
    memcpy(v, x, n * 4);
    for (size_t i = 0; i < ns && i < n; i++) v[i] = special[i];
    for (int k = 0; k < 2; k++) {
      loom_dtype dt = k ? LOOM_F16 : LOOM_BF16;
      const char *dn = k ? "fp16" : "bf16";
      void *d = up(s, v, n * 4), *h = up(s, NULL, n * 2), *w = up(s, NULL, n * 4);
      o->round_to(s->ctx, d, dt, n);
      float *r1 = down(s, d, n);
      s->ops->from_host(s->ctx, d, v, n * 4);
      int rc = o->convert(s->ctx, h, dt, d, LOOM_F32, n);
      rc |= o->convert(s->ctx, w, LOOM_F32, h, dt, n);
      float *r2 = down(s, w, n);
      size_t bad1 = 0, bad2 = 0, first = n;
      for (size_t i = 0; i < n; i++) {
        float want = ref_round(v[i], dt);
        int ok1 = isnan(want) ? isnan(r1[i]) : memcmp(&want, &r1[i], 4) == 0;
        int ok2 = isnan(want) ? isnan(r2[i]) : memcmp(&want, &r2[i], 4) == 0;
        bad1 += !ok1, bad2 += !ok2;
        if ((!ok1 || !ok2) && first == n) first = i;
      }
      char detail[160];
      snprintf(nm, sizeof nm, "round_to.%s.n%zu", dn, n);
      if (!bad1) snprintf(detail, sizeof detail, "bitwise (ties to even, overflow, subnormals)");
      else snprintf(detail, sizeof detail, "%zu values differ, first %a -> %a, want %a", bad1,
                    (double)v[first], (double)r1[first], (double)ref_round(v[first], dt));
      line(bad1 ? "FAIL" : "PASS", nm, detail);
      bad1 ? s->failed++ : s->passed++;
      snprintf(nm, sizeof nm, "convert.f32-%s-f32.n%zu", dn, n);
      line(bad2 || rc ? "FAIL" : "PASS", nm,
           rc ? "convert returned an error" : bad2 ? "round trip differs from round_to's "
                "reference" : "bitwise: narrowing rounds as round_to, widening is exact");
      (bad2 || rc) ? s->failed++ : s->passed++;
      free(r1), free(r2);
      dfree(s, d), dfree(s, h), dfree(s, w);
    }
    free(v);
  } else {
    line("SKIP", VNAME("round_to/convert"), "slots absent (a backend built before ABI 1.3)");
    s->skipped++;
  }
  free(ref), free(x), free(y);
  dfree(s, dx), dfree(s, dy);
#undef VNAME
}

static int usage(FILE *out) {
  fprintf(out, "usage: loom conformance --device NAME [--options JSON] [--dtype fp32|bf16|all]"
               " [--quick]\n"
               "  NAME: cpu (built in), a device plugin on the search path (cuda) or a .so path\n"
               "  --options JSON  the \"device\" object the backend gets (e.g. {\"tf32\": true})\n"
               "  --dtype         inputs exact in fp32 (default: all = fp32 and bf16 passes)\n"
               "  --quick         the small shapes only (tiny, odd, T=1)\n");
  return out == stdout ? 0 : 2;
}

int loom_device_conformance_main(int argc, char **argv) {
  const char *name = NULL, *options = "{}", *dtypes = "all";
  int quick = 0;
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) return usage(stdout);
    if (!strcmp(a, "--quick")) {
      quick = 1;
      continue;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "loom conformance: %s needs a value\n", a);
      return usage(stderr);
    }
    if (!strcmp(a, "--device")) name = argv[++i];
    else if (!strcmp(a, "--options")) options = argv[++i];
    else if (!strcmp(a, "--dtype")) dtypes = argv[++i];
    else {
      fprintf(stderr, "loom conformance: unknown argument '%s'\n", a);
      return usage(stderr);
    }
  }
  if (!name || (strcmp(dtypes, "fp32") && strcmp(dtypes, "bf16") && strcmp(dtypes, "all")))
    return usage(stderr);
  json_error_t jerr;
  json_t *opts = json_loads(options, 0, &jerr);
  if (!json_is_object(opts)) {
    fprintf(stderr, "loom conformance: --options: expected a JSON object, got '%s'\n", options);
    json_decref(opts);
    return 2;
  }
  suite s = {.u_gemm = json_is_true(json_object_get(opts, "tf32")) ? U_TF32 : U32,
             .rng = 0x10c0ffee};
  json_decref(opts);

  loom_plugin plugin;
  memset(&plugin, 0, sizeof plugin);
  const char *where = "built in";
  if (!strcmp(name, "cpu")) {
    s.ops = loom__cpu_device();
  } else {
    char e[1200];
    if (loom__plugin_open(&plugin, name, LOOM_KIND_DEVICE, e, sizeof e) != 0) {
      line("FAIL", "device.load", e);
      printf("summary: 0 passed, 1 failed, 0 skipped\n");
      return 1;
    }
    s.ops = &plugin.u.device;
    where = plugin.path;
  }
  char detail[1400];
  snprintf(detail, sizeof detail, "'%s' [%s], ABI %u.%u, caps 0x%llx%s", s.ops->hdr.name, where,
           s.ops->hdr.abi_major, s.ops->hdr.abi_minor, (unsigned long long)s.ops->hdr.caps,
           s.ops->hdr.caps & LOOM_DEVICE_CAP_HOST_ADDRESSABLE ? " (host-addressable)" : "");
  line("PASS", "device.load", detail);
  s.passed++;
  int local_rank, local_size;
  const char *source;
  loom__local_rank(NULL, &local_rank, &local_size, &source);
  loom_dev dev;
  char e[1024];
  if (loom__dev_open_ex(&dev, s.ops, options, local_rank, local_size, e, sizeof e) != LOOM_OK) {
    /* no GPU, no driver: every case is skipped, with the backend's reason */
    line("SKIP", "device.create", e);
    printf("summary: %d passed, 0 failed, all kernel cases skipped (%s)\n", s.passed, e);
    loom__plugin_close(&plugin);
    return 0;
  }
  s.ctx = dev.ctx;
  line("PASS", "device.create", "");
  s.passed++;
  for (int pass = 0; pass < 2; pass++) {
    s.dtype = pass ? LOOM_BF16 : LOOM_F32;
    if ((pass == 0 && !strcmp(dtypes, "bf16")) || (pass == 1 && !strcmp(dtypes, "fp32")))
      continue;
    if (pass == 1 && !LOOM_DEVICE_HAS(s.ops, round_to)) {
      line("SKIP", "bf16", "the backend has no 16-bit storage (ABI 1.3 slots)");
      s.skipped++;
      continue;
    }
    if (LOOM_DEVICE_HAS(s.ops, set_compute_dtype)) s.ops->set_compute_dtype(s.ctx, s.dtype);
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
      if (!quick || shapes[i].B * shapes[i].T * shapes[i].C <= 8192) check_shape(&s, &shapes[i]);
    if (pass == 0) {
      check_vectors(&s, 4096);
      if (!quick) check_vectors(&s, 100003);
    }
  }
  loom__dev_close(&dev);
  loom__plugin_close(&plugin);
  printf("summary: %d passed, %d failed, %d skipped; closest to its bound: %s at %.2f of it\n",
         s.passed, s.failed, s.skipped, s.worst_name[0] ? s.worst_name : "-", s.worst_ratio);
  return s.failed ? 1 : 0;
}
