/* The device conformance suite's ABI 1.8 acts16 table (device_v1.h loom_device_acts16_v1): every
 * kernel on 16-bit activations of one dtype (bf16 or fp16) at one shape. The inputs are the
 * suite's, rounded to that dtype (the typed-float ones too: the host's set_compute_dtype hint),
 * and go to the device twice: as 16-bit buffers for the table, as fp32 buffers (the widened
 * values) for the fp32 slots. Each output is checked two ways:
 *
 *  - against the float64 reference on the same values. An fp32 output (LayerNorm's rstd, att,
 *    the parameter gradients, the losses) keeps its fp32 slot's bound tol = dc_tol(u, n). A
 *    16-bit output is that fp32 result y stored once more, to nearest: |store(y) - y| <= u16 |y|
 *    with u16 = 2^-8 (bf16: 8 significant bits) or 2^-11 (fp16: 11), and |y| <= (1 + tol)
 *    max|ref|, so max|got - ref| / max|ref| <= tol + u16 (1 + tol) (dc_compare16). An fp16
 *    subnormal store errs by at most 2^-25 = u16 2^-14 absolute, inside that bound while
 *    max|ref| >= 2^-14, as for every output here (the smallest, dlogits, is ~1/N).
 *  - the contract, bit for bit: the device's own fp32 slot of the same name on the fp32 buffers,
 *    each 16-bit output then rounded by its round_to; `+=` outputs (dinp, dqkv) from the same
 *    non-zero initial values. The GEMMs too: device_v1.h promises the same bits where the
 *    summation order is the same, and a backend that feeds both paths the same operands (exact
 *    16-bit values, fp32 accumulation) has no reason to order them differently; the fp32
 *    matmul is matmul_forward_w / matmul_backward_w (the table's weight is `wdt` as theirs),
 *    or matmul_forward / _backward on a widened weight where those are NULL.
 *
 * Covered besides: the GEMMs with dinp NULL (proj), without bias (head) and with an fp32 weight
 * (qkv); residual out-of-place and in place (out == a); crossentropy_fused for the loss only
 * (dlogits NULL: logits untouched), into a separate buffer and in place (dlogits == logits),
 * with a -inf padded vocabulary and every third row ignored (target -1). Names:
 * acts16.KERNEL.SHAPE[.TAG].DTYPE[.contract]. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loom/half_v1.h>

#include "device_reference.h"
#include "device_suite.h"

typedef struct a16 {
  dc_suite *s;
  const loom_device_acts16_v1 *t;
  loom_dtype dt;
  double u16;
  const char *shape, *dtn;
  char nm[160];
} a16;

static const char *name(a16 *a, const char *kernel, const char *extra, const char *kind) {
  snprintf(a->nm, sizeof a->nm, "acts16.%s.%s%s.%s%s", kernel, a->shape, extra, a->dtn, kind);
  return a->nm;
}

/* n host floats (exact in a->dt) as a 16-bit device buffer; a 16-bit device buffer widened */
static void *up16(a16 *a, const float *x, size_t n) {
  uint16_t *h = malloc((n ? n : 1) * sizeof *h);
  for (size_t i = 0; i < n; i++) h[i] = a->dt == LOOM_BF16 ? loom_f32_to_bf16(x[i])
                                                            : loom_f32_to_f16(x[i]);
  void *d = dc_up(a->s, h, n * sizeof *h);
  free(h);
  return d;
}
static float *down16(a16 *a, const void *d, size_t n) {
  uint16_t *h = malloc((n ? n : 1) * sizeof *h);
  float *x = malloc((n ? n : 1) * sizeof *x);
  if (a->s->ops->synchronize) a->s->ops->synchronize(a->s->ctx);
  a->s->ops->to_host(a->s->ctx, h, d, n * sizeof *h);
  for (size_t i = 0; i < n; i++) x[i] = a->dt == LOOM_BF16 ? loom_bf16_to_f32(h[i])
                                                            : loom_f16_to_f32(h[i]);
  free(h);
  return x;
}

/* A 16-bit output: d16 the table's, d32 the fp32 slot's (rounded here by round_to). ref NULL:
 * the contract only. */
static void out16(a16 *a, const char *kernel, const char *extra, const void *d16, void *d32,
                  const double *ref, size_t n, double red_len, double u) {
  dc_suite *s = a->s;
  float *got = down16(a, d16, n);
  if (ref) dc_compare16(s, name(a, kernel, extra, ""), got, ref, n, red_len, u, a->u16);
  s->ops->round_to(s->ctx, d32, a->dt, n);
  float *want = dc_down(s, d32, n);
  dc_same_bits(s, name(a, kernel, extra, ".contract"), got, want, n,
               "the fp32 slot then round_to gave");
  free(got), free(want);
}
/* An fp32 output of both paths (ref NULL: the contract only). */
static void out32(a16 *a, const char *kernel, const char *extra, const void *dA, const void *d32,
                  const double *ref, size_t n, double red_len, double u) {
  float *got = dc_down(a->s, dA, n), *want = dc_down(a->s, d32, n);
  if (ref) dc_compare(a->s, name(a, kernel, extra, ""), got, ref, n, red_len, u);
  dc_same_bits(a->s, name(a, kernel, extra, ".contract"), got, want, n, "the fp32 slot gave");
  free(got), free(want);
}

static void check_encoder(a16 *a, int B, int T, int C, int V) {
  dc_suite *s = a->s;
  const loom_device_v1 *o = s->ops;
  const int N = B * T;
  const size_t NC = (size_t)N * C, VC = (size_t)V * C, TC = (size_t)T * C;
  int32_t *inp = dc_rand_tok(s, (size_t)N, V, 0);
  float *wte = dc_rand_f(s, VC, 1), *wpe = dc_rand_f(s, TC, 1), *dout = dc_rand_f(s, NC, 1);
  float *dwte0 = dc_rand_f(s, VC, 1), *dwpe0 = dc_rand_f(s, TC, 1);
  void *d_inp = dc_up(s, inp, (size_t)N * 4), *d_wte = dc_up(s, wte, VC * 4);
  void *d_wpe = dc_up(s, wpe, TC * 4), *o16 = dc_up(s, NULL, NC * 2), *o32 = dc_up(s, NULL, NC * 4);
  a->t->encoder_forward(s->ctx, o16, d_inp, d_wte, d_wpe, B, T, C);
  o->encoder_forward(s->ctx, o32, d_inp, d_wte, d_wpe, B, T, C);
  double *ref = malloc(NC * sizeof *ref);
  ref_encoder_forward(ref, inp, wte, wpe, B, T, C);
  out16(a, "encoder_forward", "", o16, o32, ref, NC, 2, U32);
  void *g16 = up16(a, dout, NC), *g32 = dc_up(s, dout, NC * 4);
  void *wA = dc_up(s, dwte0, VC * 4), *w32 = dc_up(s, dwte0, VC * 4);
  void *pA = dc_up(s, dwpe0, TC * 4), *p32 = dc_up(s, dwpe0, TC * 4);
  a->t->encoder_backward(s->ctx, wA, pA, g16, d_inp, B, T, C);
  o->encoder_backward(s->ctx, w32, p32, g32, d_inp, B, T, C);
  double *rw = dc_to_d(dwte0, VC), *rp = dc_to_d(dwpe0, TC);
  ref_encoder_backward(rw, rp, dout, inp, B, T, C);
  out32(a, "encoder_backward", ".dwte", wA, w32, rw, VC, N + 1, U32);
  out32(a, "encoder_backward", ".dwpe", pA, p32, rp, TC, B + 1, U32);
  free(ref), free(rw), free(rp), free(inp), free(wte), free(wpe), free(dout), free(dwte0);
  free(dwpe0);
  void *dv[] = {d_inp, d_wte, d_wpe, o16, o32, g16, g32, wA, w32, pA, p32};
  for (size_t i = 0; i < sizeof dv / sizeof dv[0]; i++) dc_dfree(s, dv[i]);
}

static void check_layernorm(a16 *a, int N, int C) {
  dc_suite *s = a->s;
  const loom_device_v1 *o = s->ops;
  const size_t NC = (size_t)N * C, C4 = (size_t)C * 4, N4 = (size_t)N * 4;
  float *x = dc_rand_f(s, NC, 2), *w = dc_rand_f(s, (size_t)C, 1), *b = dc_rand_f(s, (size_t)C, 1);
  float *dout = dc_rand_f(s, NC, 1), *di0 = dc_rand_f(s, NC, 1);
  float *dw0 = dc_rand_f(s, (size_t)C, 1), *db0 = dc_rand_f(s, (size_t)C, 1);
  void *x16 = up16(a, x, NC), *x32 = dc_up(s, x, NC * 4), *d_w = dc_up(s, w, C4);
  void *d_b = dc_up(s, b, C4), *o16 = dc_up(s, NULL, NC * 2), *o32 = dc_up(s, NULL, NC * 4);
  void *mA = dc_up(s, NULL, N4), *rA = dc_up(s, NULL, N4), *m32 = dc_up(s, NULL, N4);
  void *r32 = dc_up(s, NULL, N4);
  a->t->layernorm_forward(s->ctx, o16, mA, rA, x16, d_w, d_b, N, C);
  o->layernorm_forward(s->ctx, o32, m32, r32, x32, d_w, d_b, N, C);
  double *ref = malloc(NC * sizeof *ref), *rm = malloc((size_t)N * 8), *rr = malloc((size_t)N * 8);
  ref_layernorm_forward(ref, x, w, b, N, C);
  ref_layernorm_stats(rm, rr, x, N, C);
  out16(a, "layernorm_forward", ".out", o16, o32, ref, NC, 2.0 * C + 4, U32);
  out32(a, "layernorm_forward", ".mean", mA, m32, NULL, (size_t)N, 0, U32);
  out32(a, "layernorm_forward", ".rstd", rA, r32, rr, (size_t)N, 2.0 * C + 4, U32);
  /* backward from the reference's statistics (rounded to fp32), the same on both paths */
  float *fm = malloc(N4), *fr = malloc(N4);
  for (int i = 0; i < N; i++) fm[i] = (float)rm[i], fr[i] = (float)rr[i];
  o->from_host(s->ctx, mA, fm, N4), o->from_host(s->ctx, rA, fr, N4);
  void *g16 = up16(a, dout, NC), *g32 = dc_up(s, dout, NC * 4);
  void *i16 = up16(a, di0, NC), *i32 = dc_up(s, di0, NC * 4);
  void *wA = dc_up(s, dw0, C4), *w32 = dc_up(s, dw0, C4), *bA = dc_up(s, db0, C4);
  void *b32 = dc_up(s, db0, C4);
  a->t->layernorm_backward(s->ctx, i16, wA, bA, g16, x16, d_w, mA, rA, N, C);
  o->layernorm_backward(s->ctx, i32, w32, b32, g32, x32, d_w, mA, rA, N, C);
  double *rdi = dc_to_d(di0, NC), *rdw = dc_to_d(dw0, (size_t)C), *rdb = dc_to_d(db0, (size_t)C);
  ref_layernorm_backward(rdi, rdw, rdb, dout, x, w, fm, fr, N, C);
  out16(a, "layernorm_backward", ".dinp", i16, i32, rdi, NC, 2.0 * C + 4, U32);
  out32(a, "layernorm_backward", ".dweight", wA, w32, rdw, (size_t)C, N + 1, U32);
  out32(a, "layernorm_backward", ".dbias", bA, b32, rdb, (size_t)C, N + 1, U32);
  free(ref), free(rm), free(rr), free(fm), free(fr), free(rdi), free(rdw), free(rdb), free(x);
  free(w), free(b), free(dout), free(di0), free(dw0), free(db0);
  void *dv[] = {x16, x32, d_w, d_b, o16, o32, mA, rA, m32, r32, g16, g32, i16, i32, wA, w32, bA,
                b32};
  for (size_t i = 0; i < sizeof dv / sizeof dv[0]; i++) dc_dfree(s, dv[i]);
}

/* One GEMM shape, the weight as wdt (the table's dtype or fp32); forward n = C + 1, backward
 * dinp n = OC + 1, dweight and dbias n = N + 1 (device_checks_gpt.c) */
static void check_matmul(a16 *a, const char *tag, int with_bias, int with_dinp, loom_dtype wdt,
                         int N, int C, int OC) {
  dc_suite *s = a->s;
  const loom_device_v1 *o = s->ops;
  const size_t NC = (size_t)N * C, NO = (size_t)N * OC, OCC = (size_t)OC * C, OC4 = (size_t)OC * 4;
  float *x = dc_rand_f(s, NC, 1), *w = dc_rand_f(s, OCC, 0.2), *b = dc_rand_f(s, (size_t)OC, 1);
  float *dout = dc_rand_f(s, NO, 1), *dx0 = dc_rand_f(s, NC, 1), *dw0 = dc_rand_f(s, OCC, 1);
  float *db0 = dc_rand_f(s, (size_t)OC, 1);
  char ex[48];
  snprintf(ex, sizeof ex, "%s%s%s", tag, with_bias ? "" : ".nobias",
           wdt == LOOM_F32 ? ".f32w" : "");
  const size_t ex_len = strlen(ex);
  void *x16 = up16(a, x, NC), *x32 = dc_up(s, x, NC * 4);
  void *d_w = wdt == LOOM_F32 ? dc_up(s, w, OCC * 4) : up16(a, w, OCC);
  void *w32 = wdt == LOOM_F32 || o->matmul_forward_w ? NULL : dc_up(s, w, OCC * 4);
  void *d_b = with_bias ? dc_up(s, b, OC4) : NULL;
  void *o16 = dc_up(s, NULL, NO * 2), *o32 = dc_up(s, NULL, NO * 4);
  a->t->matmul_forward(s->ctx, o16, x16, d_w, wdt, d_b, N, C, OC);
  if (wdt == LOOM_F32) o->matmul_forward(s->ctx, o32, x32, d_w, d_b, N, C, OC);
  else if (o->matmul_forward_w) o->matmul_forward_w(s->ctx, o32, x32, d_w, wdt, d_b, N, C, OC);
  else o->matmul_forward(s->ctx, o32, x32, w32, d_b, N, C, OC);
  double *ref = malloc(NO * sizeof *ref);
  ref_matmul_forward(ref, x, w, with_bias ? b : NULL, N, C, OC);
  out16(a, "matmul_forward", ex, o16, o32, ref, NO, C + 1, s->u_gemm);
  void *g16 = up16(a, dout, NO), *g32 = dc_up(s, dout, NO * 4);
  void *i16 = with_dinp ? up16(a, dx0, NC) : NULL, *i32 = with_dinp ? dc_up(s, dx0, NC * 4) : NULL;
  void *wA = dc_up(s, dw0, OCC * 4), *wg32 = dc_up(s, dw0, OCC * 4);
  void *bA = with_bias ? dc_up(s, db0, OC4) : NULL, *b32 = with_bias ? dc_up(s, db0, OC4) : NULL;
  a->t->matmul_backward(s->ctx, i16, wA, bA, g16, x16, d_w, wdt, N, C, OC);
  if (wdt == LOOM_F32) o->matmul_backward(s->ctx, i32, wg32, b32, g32, x32, d_w, N, C, OC);
  else if (o->matmul_backward_w)
    o->matmul_backward_w(s->ctx, i32, wg32, b32, g32, x32, d_w, wdt, N, C, OC);
  else o->matmul_backward(s->ctx, i32, wg32, b32, g32, x32, w32, N, C, OC);
  double *rdx = with_dinp ? dc_to_d(dx0, NC) : NULL, *rdw = dc_to_d(dw0, OCC);
  double *rdb = with_bias ? dc_to_d(db0, (size_t)OC) : NULL;
  ref_matmul_backward(rdx, rdw, rdb, dout, x, w, N, C, OC);
  if (with_dinp) {
    snprintf(ex + ex_len, sizeof ex - ex_len, ".dinp");
    out16(a, "matmul_backward", ex, i16, i32, rdx, NC, OC + 1, s->u_gemm);
  }
  snprintf(ex + ex_len, sizeof ex - ex_len, ".dweight");
  out32(a, "matmul_backward", ex, wA, wg32, rdw, OCC, N + 1, s->u_gemm);
  if (with_bias) {
    snprintf(ex + ex_len, sizeof ex - ex_len, ".dbias");
    out32(a, "matmul_backward", ex, bA, b32, rdb, (size_t)OC, N + 1, U32);
  }
  free(ref), free(rdx), free(rdw), free(rdb), free(x), free(w), free(b), free(dout), free(dx0);
  free(dw0), free(db0);
  void *dv[] = {x16, x32, d_w, w32, d_b, o16, o32, g16, g32, i16, i32, wA, wg32, bA, b32};
  for (size_t i = 0; i < sizeof dv / sizeof dv[0]; i++) dc_dfree(s, dv[i]);
}

/* forward n = HS + 2T, backward n = 3T + HS + 1 (device_checks_gpt.c) */
static void check_attention(a16 *a, int B, int T, int NH, int HS) {
  dc_suite *s = a->s;
  const loom_device_v1 *o = s->ops;
  const size_t NC = (size_t)B * T * NH * HS, Q = 3 * NC, A = (size_t)B * NH * T * T;
  float *qkv = dc_rand_f(s, Q, 1), *dout = dc_rand_f(s, NC, 1), *dq0 = dc_rand_f(s, Q, 1);
  void *q16 = up16(a, qkv, Q), *q32 = dc_up(s, qkv, Q * 4);
  void *o16 = dc_up(s, NULL, NC * 2), *o32 = dc_up(s, NULL, NC * 4);
  void *attA = dc_up(s, NULL, A * 4), *att32 = dc_up(s, NULL, A * 4);
  a->t->attention_forward(s->ctx, o16, attA, q16, B, T, NH, HS);
  o->attention_forward(s->ctx, o32, att32, q32, B, T, NH, HS);
  double *ro = malloc(NC * sizeof *ro), *ra = malloc(A * sizeof *ra);
  ref_attention_forward(ro, ra, qkv, B, T, NH, HS);
  out16(a, "attention_forward", ".out", o16, o32, ro, NC, HS + 2.0 * T, s->u_gemm);
  out32(a, "attention_forward", ".att", attA, att32, ra, A, HS + 2.0 * T, s->u_gemm);
  float *fa = malloc(A * 4); /* the reference's probabilities, the same input to both paths */
  for (size_t i = 0; i < A; i++) fa[i] = (float)ra[i];
  o->from_host(s->ctx, attA, fa, A * 4);
  void *g16 = up16(a, dout, NC), *g32 = dc_up(s, dout, NC * 4);
  void *dq16 = up16(a, dq0, Q), *dq32 = dc_up(s, dq0, Q * 4);
  void *datt = dc_up(s, NULL, A * 4);
  a->t->attention_backward(s->ctx, dq16, datt, g16, q16, attA, B, T, NH, HS);
  o->attention_backward(s->ctx, dq32, datt, g32, q32, attA, B, T, NH, HS);
  double *rdq = dc_to_d(dq0, Q);
  ref_attention_backward(rdq, dout, qkv, fa, B, T, NH, HS);
  out16(a, "attention_backward", ".dqkv", dq16, dq32, rdq, Q, 3.0 * T + HS + 1, s->u_gemm);
  free(ro), free(ra), free(fa), free(rdq), free(qkv), free(dout), free(dq0);
  void *dv[] = {q16, q32, o16, o32, attA, att32, g16, g32, dq16, dq32, datt};
  for (size_t i = 0; i < sizeof dv / sizeof dv[0]; i++) dc_dfree(s, dv[i]);
}

/* ABI 1.9's lse attention on 16-bit qkv, out, dout and dqkv (lse fp32), n as device_checks_gpt.c.
 * Present only when struct_size covers both slots (a 1.8 table is a SKIP); the contract side is
 * the fp32 lse slots on the widened buffers, where the device has them. The backward takes the
 * table's own 16-bit out and its lse, as the host saves them. */
static void check_attention_lse(a16 *a, int B, int T, int NH, int HS) {
  dc_suite *s = a->s;
  const loom_device_v1 *o = s->ops;
  const loom_device_acts16_v1 *t = a->t;
  const size_t need = offsetof(loom_device_acts16_v1, attention_backward_lse) + sizeof(void *);
  if (t->struct_size < need || (!t->attention_forward_lse && !t->attention_backward_lse)) {
    /* named so that no line starts "acts16": that SKIP means "no acts16 table" to the
     * planted-bug test (tests/integration/devices/device_conformance.sh) */
    char nm[160];
    snprintf(nm, sizeof nm, "attention_lse.acts16.%s.%s", a->shape, a->dtn);
    dc_line("SKIP", nm, "no 16-bit lse attention (ABI 1.9): the host keeps the probabilities");
    s->skipped++;
    return;
  }
  if (!dc_have(s, name(a, "attention_forward_lse", "", ""), (void *)t->attention_forward_lse) ||
      !dc_have(s, name(a, "attention_backward_lse", "", ""), (void *)t->attention_backward_lse))
    return;
  const int fp32 = o->attention_forward_lse && o->attention_backward_lse; /* the contract */
  const size_t NC = (size_t)B * T * NH * HS, Q = 3 * NC, L = (size_t)B * NH * T;
  float *qkv = dc_rand_f(s, Q, 1), *dout = dc_rand_f(s, NC, 1), *dq0 = dc_rand_f(s, Q, 1);
  void *q16 = up16(a, qkv, Q), *q32 = dc_up(s, qkv, Q * 4);
  void *o16 = dc_up(s, NULL, NC * 2), *o32 = dc_up(s, NULL, NC * 4);
  void *lA = dc_up(s, NULL, L * 4), *l32 = dc_up(s, NULL, L * 4);
  t->attention_forward_lse(s->ctx, o16, lA, q16, B, T, NH, HS);
  if (fp32) o->attention_forward_lse(s->ctx, o32, l32, q32, B, T, NH, HS);
  double *ro = malloc(NC * sizeof *ro), *ra = malloc((size_t)B * NH * T * T * sizeof *ra);
  double *rl = malloc(L * sizeof *rl);
  ref_attention_forward(ro, ra, qkv, B, T, NH, HS);
  ref_attention_lse(rl, qkv, B, T, NH, HS);
  float *ow = down16(a, o16, NC); /* the out both backwards get, widened */
  if (fp32) {
    out16(a, "attention_forward_lse", ".out", o16, o32, ro, NC, HS + 2.0 * T, s->u_gemm);
    out32(a, "attention_forward_lse", ".lse", lA, l32, rl, L, HS + 1.0 * T, s->u_gemm);
  } else {
    float *got = dc_down(s, lA, L);
    dc_compare16(s, name(a, "attention_forward_lse", ".out", ""), ow, ro, NC, HS + 2.0 * T,
                 s->u_gemm, a->u16);
    dc_compare(s, name(a, "attention_forward_lse", ".lse", ""), got, rl, L, HS + 1.0 * T,
               s->u_gemm);
    free(got);
  }
  o->from_host(s->ctx, o32, ow, NC * 4);
  float *lh = dc_down(s, lA, L);
  o->from_host(s->ctx, l32, lh, L * 4); /* the same lse to both backwards */
  void *g16 = up16(a, dout, NC), *g32 = dc_up(s, dout, NC * 4);
  void *dq16 = up16(a, dq0, Q), *dq32 = dc_up(s, dq0, Q * 4);
  t->attention_backward_lse(s->ctx, dq16, g16, q16, o16, lA, B, T, NH, HS);
  double *rdq = dc_to_d(dq0, Q);
  ref_attention_backward_lse(rdq, dout, qkv, ow, B, T, NH, HS);
  if (fp32) {
    o->attention_backward_lse(s->ctx, dq32, g32, q32, o32, l32, B, T, NH, HS);
    out16(a, "attention_backward_lse", ".dqkv", dq16, dq32, rdq, Q, 4.0 * T + 2.0 * HS + 2,
          s->u_gemm);
  } else {
    float *got = down16(a, dq16, Q);
    dc_compare16(s, name(a, "attention_backward_lse", ".dqkv", ""), got, rdq, Q,
                 4.0 * T + 2.0 * HS + 2, s->u_gemm, a->u16);
    free(got);
  }
  free(ro), free(ra), free(rl), free(rdq), free(ow), free(lh), free(qkv), free(dout), free(dq0);
  void *dv[] = {q16, q32, o16, o32, lA, l32, g16, g32, dq16, dq32};
  for (size_t i = 0; i < sizeof dv / sizeof dv[0]; i++) dc_dfree(s, dv[i]);
}

/* GELU over (N, 4C): forward n = 10, backward 12; the residual n = 1, out of place and in place */
static void check_pointwise(a16 *a, size_t M) {
  dc_suite *s = a->s;
  const loom_device_v1 *o = s->ops;
  float *x = dc_rand_f(s, M, 4), *dout = dc_rand_f(s, M, 1), *dx0 = dc_rand_f(s, M, 1);
  void *x16 = up16(a, x, M), *x32 = dc_up(s, x, M * 4), *g16 = up16(a, dout, M);
  void *g32 = dc_up(s, dout, M * 4), *o16 = dc_up(s, NULL, M * 2), *o32 = dc_up(s, NULL, M * 4);
  void *i16 = up16(a, dx0, M), *i32 = dc_up(s, dx0, M * 4);
  a->t->gelu_forward(s->ctx, o16, x16, M);
  o->gelu_forward(s->ctx, o32, x32, M);
  double *ref = malloc(M * sizeof *ref);
  ref_gelu_forward(ref, x, M);
  out16(a, "gelu_forward", "", o16, o32, ref, M, 10, U32);
  a->t->gelu_backward(s->ctx, i16, x16, g16, M);
  o->gelu_backward(s->ctx, i32, x32, g32, M);
  double *rdx = dc_to_d(dx0, M);
  ref_gelu_backward(rdx, x, dout, M);
  out16(a, "gelu_backward", "", i16, i32, rdx, M, 12, U32);
  for (size_t i = 0; i < M; i++) ref[i] = (double)x[i] + dout[i];
  a->t->residual_forward(s->ctx, o16, x16, g16, M);
  o->residual_forward(s->ctx, o32, x32, g32, M);
  out16(a, "residual_forward", "", o16, o32, ref, M, 1, U32);
  a->t->residual_forward(s->ctx, x16, x16, g16, M); /* as the model calls it */
  o->residual_forward(s->ctx, x32, x32, g32, M);
  out16(a, "residual_forward", ".inplace", x16, x32, ref, M, 1, U32);
  free(ref), free(rdx), free(x), free(dout), free(dx0);
  void *dv[] = {x16, x32, g16, g32, o16, o32, i16, i32};
  for (size_t i = 0; i < sizeof dv / sizeof dv[0]; i++) dc_dfree(s, dv[i]);
}

/* crossentropy_fused over (N, V), the last V/8 columns -inf and every third row ignored
 * (device_checks_classifier.c): losses n = V + 2, dlogits n = V + 4. The fp32 side is the fused
 * slot, or crossentropy_forward then _backward where it is NULL (the same bits, device_v1.h). */
static void check_classifier(a16 *a, int N, int V) {
  dc_suite *s = a->s;
  const loom_device_v1 *o = s->ops;
  const int pad = V / 8 > 0 ? V / 8 : 1, Vreal = V - pad;
  const size_t NV = (size_t)N * V, N4 = (size_t)N * 4;
  float *logits = dc_rand_f(s, NV, 8);
  for (int n = 0; n < N; n++)
    for (int v = Vreal; v < V; v++) logits[(size_t)n * V + v] = -INFINITY;
  int32_t *tg = dc_rand_tok(s, (size_t)N, Vreal, 3);
  const float dloss = 1.0f / (float)N;
  double *rl = malloc(N * sizeof *rl), *rd = malloc(NV * sizeof *rd);
  ref_crossentropy_forward(rl, rd, logits, tg, N, V);
  for (int n = 0; n < N; n++)
    for (int v = 0; v < V; v++) {
      double *d = &rd[(size_t)n * V + v];
      *d = tg[n] < 0 ? 0.0 : (*d - (v == tg[n])) * dloss;
    }
  void *l16 = up16(a, logits, NV), *l32 = dc_up(s, logits, NV * 4), *d_t = dc_up(s, tg, N4);
  void *lossA = dc_up(s, NULL, N4), *loss32 = dc_up(s, NULL, N4);
  void *d16 = dc_up(s, NULL, NV * 2), *d32 = dc_up(s, NULL, NV * 4);
  void *p32 = o->crossentropy_fused ? NULL : dc_up(s, NULL, NV * 4);
  /* the fp32 side once, with dlogits (its losses are those of the loss only, device_v1.h) */
  if (o->crossentropy_fused) o->crossentropy_fused(s->ctx, loss32, d32, l32, d_t, dloss, N, V);
  else {
    o->crossentropy_forward(s->ctx, loss32, p32, l32, d_t, N, V);
    o->crossentropy_backward(s->ctx, d32, p32, d_t, dloss, N, V);
  }
  /* 1. the loss only: logits untouched */
  a->t->crossentropy_fused(s->ctx, lossA, NULL, l16, d_t, dloss, N, V);
  out32(a, "crossentropy_fused", ".loss_only", lossA, loss32, rl, (size_t)N, V + 2.0, U32);
  float *got = down16(a, l16, NV);
  dc_same_bits(s, name(a, "crossentropy_fused", ".loss_only.logits_untouched", ""), got, logits,
               NV, "the logits were");
  free(got);
  /* 2. dlogits into a separate buffer; 3. in place over the logits (the training forward) */
  a->t->crossentropy_fused(s->ctx, lossA, d16, l16, d_t, dloss, N, V);
  out32(a, "crossentropy_fused", ".losses", lossA, loss32, rl, (size_t)N, V + 2.0, U32);
  out16(a, "crossentropy_fused", ".dlogits", d16, d32, rd, NV, V + 4.0, U32);
  a->t->crossentropy_fused(s->ctx, lossA, l16, l16, d_t, dloss, N, V);
  out32(a, "crossentropy_fused", ".inplace.losses", lossA, loss32, NULL, (size_t)N, 0, U32);
  out16(a, "crossentropy_fused", ".inplace.dlogits", l16, d32, rd, NV, V + 4.0, U32);
  free(rl), free(rd), free(logits), free(tg);
  void *dv[] = {l16, l32, d_t, lossA, loss32, d16, d32, p32};
  for (size_t i = 0; i < sizeof dv / sizeof dv[0]; i++) dc_dfree(s, dv[i]);
}

void dc_check_acts16(dc_suite *s, const loom_device_acts16_v1 *t, const dc_shape *sh) {
  const int B = sh->B, T = sh->T, C = sh->C, NH = sh->NH, V = sh->V, N = B * T;
  a16 a = {.s = s, .t = t, .dt = s->dtype, .u16 = s->dtype == LOOM_BF16 ? U_BF16 : U_F16,
           .shape = sh->name, .dtn = s->dtype == LOOM_BF16 ? "bf16" : "fp16"};
  check_encoder(&a, B, T, C, V);
  check_layernorm(&a, N, C);
  /* the block's four GEMMs and the head (device_checks_gpt.c's shapes and limit) */
  const int ocs[4] = {3 * C, C, 4 * C, V};
  for (int k = 0; k < 4; k++) {
    if ((double)N * C * ocs[k] > 6e8) continue;
    const char *tag = k == 0 ? ".qkv" : k == 1 ? ".proj" : k == 2 ? ".fc" : ".head";
    check_matmul(&a, tag, k != 3, k != 1, a.dt, N, C, ocs[k]);
    if (k == 0) check_matmul(&a, tag, 1, 1, LOOM_F32, N, C, ocs[k]);
  }
  check_attention(&a, B, T, NH, C / NH);
  check_attention_lse(&a, B, T, NH, C / NH);
  check_pointwise(&a, (size_t)N * C * 4);
  check_classifier(&a, N, V);
}
