/* The device conformance suite's GPT kernels at one shape: every kernel of the table the model
 * calls, against the float64 reference on the same inputs, one line per output tensor with its
 * reduction length n (the bound is dc_tol(u, n); see device_conformance.c). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loom/half_v1.h>

#include "device_reference.h"
#include "device_suite.h"
#include "device/device.h"

/* ABI 1.7's matmul_forward_w / matmul_backward_w: the weight given as bf16 and as fp16 elements
 * (rounded from w on the host; the reference uses the rounded values, exact in both dtypes'
 * widening), every output against float64 with the fp32 slots' bounds. */
static void dc_check_matmul_w(dc_suite *s, const char *shape, const char *tag, int with_bias,
                              const float *x, const float *w, const float *b, const float *dout,
                              const float *dx0, const float *dw0, const float *db0, int N, int C,
                              int OC) {
  const loom_device_v1 *o = s->ops;
  if (!o->matmul_forward_w || !o->matmul_backward_w) return; /* optional (ABI 1.7) */
  const size_t NC = (size_t)N * C, NO = (size_t)N * OC, OCC = (size_t)OC * C;
  const char *dt = s->dtype == LOOM_BF16 ? ".bf16" : "";
  char nm[128];
  for (int pass = 0; pass < 2; pass++) {
    const loom_dtype wdt = pass ? LOOM_F16 : LOOM_BF16;
    const char *wn = pass ? ".f16w" : ".bf16w";
    uint16_t *w16 = malloc(OCC * sizeof *w16);
    float *wr = malloc(OCC * sizeof *wr);
    for (size_t i = 0; i < OCC; i++) {
      w16[i] = pass ? loom_f32_to_f16(w[i]) : loom_f32_to_bf16(w[i]);
      wr[i] = pass ? loom_f16_to_f32(w16[i]) : loom_bf16_to_f32(w16[i]);
    }
    void *d_x = dc_up(s, x, NC * 4), *d_w = dc_up(s, w16, OCC * 2);
    void *d_b = with_bias ? dc_up(s, b, (size_t)OC * 4) : NULL, *d_out = dc_up(s, NULL, NO * 4);
    o->matmul_forward_w(s->ctx, d_out, d_x, d_w, wdt, d_b, N, C, OC);
    double *ref = malloc(NO * sizeof *ref);
    ref_matmul_forward(ref, x, wr, with_bias ? b : NULL, N, C, OC);
    float *got = dc_down(s, d_out, NO);
    snprintf(nm, sizeof nm, "matmul_forward_w.%s%s%s%s", shape, tag, wn, dt);
    dc_compare(s, nm, got, ref, NO, C + 1, s->u_gemm);
    free(got), free(ref);
    void *d_dout = dc_up(s, dout, NO * 4), *d_dx = dc_up(s, dx0, NC * 4);
    void *d_dw = dc_up(s, dw0, OCC * 4), *d_db = with_bias ? dc_up(s, db0, (size_t)OC * 4) : NULL;
    o->matmul_backward_w(s->ctx, d_dx, d_dw, d_db, d_dout, d_x, d_w, wdt, N, C, OC);
    double *rdx = dc_to_d(dx0, NC), *rdw = dc_to_d(dw0, OCC);
    double *rdb = with_bias ? dc_to_d(db0, (size_t)OC) : NULL;
    ref_matmul_backward(rdx, rdw, rdb, dout, x, wr, N, C, OC);
    got = dc_down(s, d_dx, NC);
    snprintf(nm, sizeof nm, "matmul_backward_w.%s%s.dinp%s%s", shape, tag, wn, dt);
    dc_compare(s, nm, got, rdx, NC, OC + 1, s->u_gemm);
    free(got);
    got = dc_down(s, d_dw, OCC);
    snprintf(nm, sizeof nm, "matmul_backward_w.%s%s.dweight%s%s", shape, tag, wn, dt);
    dc_compare(s, nm, got, rdw, OCC, N + 1, s->u_gemm);
    free(got);
    if (with_bias) {
      got = dc_down(s, d_db, (size_t)OC);
      snprintf(nm, sizeof nm, "matmul_backward_w.%s%s.dbias%s%s", shape, tag, wn, dt);
      dc_compare(s, nm, got, rdb, (size_t)OC, N + 1, U32);
      free(got);
    }
    free(rdx), free(rdw), free(rdb), free(w16), free(wr);
    dc_dfree(s, d_x), dc_dfree(s, d_w), dc_dfree(s, d_b), dc_dfree(s, d_out), dc_dfree(s, d_dout);
    dc_dfree(s, d_dx), dc_dfree(s, d_dw), dc_dfree(s, d_db);
  }
}

void dc_check_gpt(dc_suite *s, const dc_shape *sh) {
  const loom_device_v1 *o = s->ops;
  int B = sh->B, T = sh->T, C = sh->C, NH = sh->NH, V = sh->V, HS = C / NH, N = B * T;
  size_t NC = (size_t)N * C;
  char nm[128];
  const char *dt = s->dtype == LOOM_BF16 ? ".bf16" : "";
#define NAME(kernel, extra) (snprintf(nm, sizeof nm, "%s.%s%s%s", kernel, sh->name, extra, dt), nm)

  /* encoder: forward n = 2 (one add); backward: a wte row sums up to N positions, wpe B */
  if (dc_have(s, "encoder_forward", (void *)o->encoder_forward) &&
      dc_have(s, "encoder_backward", (void *)o->encoder_backward)) {
    int32_t *inp = dc_rand_tok(s, (size_t)N, V, 0);
    float *wte = dc_rand_f(s, (size_t)V * C, 1), *wpe = dc_rand_f(s, (size_t)T * C, 1);
    float *dout = dc_rand_f(s, NC, 1), *dwte0 = dc_rand_f(s, (size_t)V * C, 1);
    float *dwpe0 = dc_rand_f(s, (size_t)T * C, 1);
    void *d_inp = dc_up(s, inp, (size_t)N * 4), *d_wte = dc_up(s, wte, (size_t)V * C * 4);
    void *d_wpe = dc_up(s, wpe, (size_t)T * C * 4), *d_out = dc_up(s, NULL, NC * 4);
    void *d_dout = dc_up(s, dout, NC * 4), *d_dwte = dc_up(s, dwte0, (size_t)V * C * 4);
    void *d_dwpe = dc_up(s, dwpe0, (size_t)T * C * 4);
    o->encoder_forward(s->ctx, d_out, d_inp, d_wte, d_wpe, B, T, C);
    double *ref = malloc(NC * sizeof *ref);
    ref_encoder_forward(ref, inp, wte, wpe, B, T, C);
    float *got = dc_down(s, d_out, NC);
    dc_compare(s, NAME("encoder_forward", ""), got, ref, NC, 2, U32);
    free(got);
    free(ref);
    o->encoder_backward(s->ctx, d_dwte, d_dwpe, d_dout, d_inp, B, T, C);
    double *rw = dc_to_d(dwte0, (size_t)V * C), *rp = dc_to_d(dwpe0, (size_t)T * C);
    ref_encoder_backward(rw, rp, dout, inp, B, T, C);
    got = dc_down(s, d_dwte, (size_t)V * C);
    dc_compare(s, NAME("encoder_backward", ".dwte"), got, rw, (size_t)V * C, N + 1, U32);
    free(got);
    got = dc_down(s, d_dwpe, (size_t)T * C);
    dc_compare(s, NAME("encoder_backward", ".dwpe"), got, rp, (size_t)T * C, B + 1, U32);
    free(got);
    free(rw), free(rp), free(inp), free(wte), free(wpe), free(dout), free(dwte0), free(dwpe0);
    dc_dfree(s, d_inp), dc_dfree(s, d_wte), dc_dfree(s, d_wpe), dc_dfree(s, d_out), dc_dfree(s, d_dout);
    dc_dfree(s, d_dwte), dc_dfree(s, d_dwpe);
  }

  /* layernorm: forward n = 2C (mean, variance) + 4; backward dinp n = 2C + 4, dweight/dbias
   * n = N + 1 (summed over rows, onto the initial value) */
  if (dc_have(s, "layernorm_forward", (void *)o->layernorm_forward) &&
      dc_have(s, "layernorm_backward", (void *)o->layernorm_backward)) {
    float *x = dc_rand_f(s, NC, 2), *w = dc_rand_f(s, (size_t)C, 1), *b = dc_rand_f(s, (size_t)C, 1);
    float *dout = dc_rand_f(s, NC, 1), *dinp0 = dc_rand_f(s, NC, 1), *dw0 = dc_rand_f(s, (size_t)C, 1);
    float *db0 = dc_rand_f(s, (size_t)C, 1);
    void *d_x = dc_up(s, x, NC * 4), *d_w = dc_up(s, w, (size_t)C * 4), *d_b = dc_up(s, b, (size_t)C * 4);
    void *d_out = dc_up(s, NULL, NC * 4), *d_mean = dc_up(s, NULL, (size_t)N * 4);
    void *d_rstd = dc_up(s, NULL, (size_t)N * 4);
    o->layernorm_forward(s->ctx, d_out, d_mean, d_rstd, d_x, d_w, d_b, N, C);
    double *ref = malloc(NC * sizeof *ref), *rm = malloc((size_t)N * 8), *rr = malloc((size_t)N * 8);
    ref_layernorm_forward(ref, x, w, b, N, C);
    ref_layernorm_stats(rm, rr, x, N, C);
    float *got = dc_down(s, d_out, NC);
    dc_compare(s, NAME("layernorm_forward", ".out"), got, ref, NC, 2.0 * C + 4, U32);
    free(got);
    got = dc_down(s, d_rstd, (size_t)N);
    dc_compare(s, NAME("layernorm_forward", ".rstd"), got, rr, (size_t)N, 2.0 * C + 4, U32);
    free(got);
    /* backward from the reference's statistics (rounded to fp32), the same on both sides */
    float *fm = malloc((size_t)N * 4), *fr = malloc((size_t)N * 4);
    for (int i = 0; i < N; i++) fm[i] = (float)rm[i], fr[i] = (float)rr[i];
    s->ops->from_host(s->ctx, d_mean, fm, (size_t)N * 4);
    s->ops->from_host(s->ctx, d_rstd, fr, (size_t)N * 4);
    void *d_dout = dc_up(s, dout, NC * 4), *d_dinp = dc_up(s, dinp0, NC * 4);
    void *d_dw = dc_up(s, dw0, (size_t)C * 4), *d_db = dc_up(s, db0, (size_t)C * 4);
    o->layernorm_backward(s->ctx, d_dinp, d_dw, d_db, d_dout, d_x, d_w, d_mean, d_rstd, N, C);
    double *rdi = dc_to_d(dinp0, NC), *rdw = dc_to_d(dw0, (size_t)C), *rdb = dc_to_d(db0, (size_t)C);
    ref_layernorm_backward(rdi, rdw, rdb, dout, x, w, fm, fr, N, C);
    got = dc_down(s, d_dinp, NC);
    dc_compare(s, NAME("layernorm_backward", ".dinp"), got, rdi, NC, 2.0 * C + 4, U32);
    free(got);
    got = dc_down(s, d_dw, (size_t)C);
    dc_compare(s, NAME("layernorm_backward", ".dweight"), got, rdw, (size_t)C, N + 1, U32);
    free(got);
    got = dc_down(s, d_db, (size_t)C);
    dc_compare(s, NAME("layernorm_backward", ".dbias"), got, rdb, (size_t)C, N + 1, U32);
    free(got);
    free(ref), free(rm), free(rr), free(fm), free(fr), free(rdi), free(rdw), free(rdb);
    free(x), free(w), free(b), free(dout), free(dinp0), free(dw0), free(db0);
    dc_dfree(s, d_x), dc_dfree(s, d_w), dc_dfree(s, d_b), dc_dfree(s, d_out), dc_dfree(s, d_mean);
    dc_dfree(s, d_rstd), dc_dfree(s, d_dout), dc_dfree(s, d_dinp), dc_dfree(s, d_dw), dc_dfree(s, d_db);
  }

  /* matmul: the block's four GEMM shapes (qkv 3C, attention proj C, fc 4C, the head V when the
   * float64 reference stays under ~0.6 G multiply-adds). forward n = C + 1 (bias); backward
   * dinp n = OC + 1, dweight and dbias n = N + 1 */
  if (dc_have(s, "matmul_forward", (void *)o->matmul_forward) &&
      dc_have(s, "matmul_backward", (void *)o->matmul_backward)) {
    int ocs[4] = {3 * C, C, 4 * C, V};
    for (int k = 0; k < 4; k++) {
      int OC = ocs[k];
      if ((double)N * C * OC > 6e8) continue;
      const char *tag = k == 0 ? ".qkv" : k == 1 ? ".proj" : k == 2 ? ".fc" : ".head";
      int with_bias = k != 3, with_dinp = k != 1; /* head: no bias (tied wte); proj: no dinp */
      size_t NO = (size_t)N * OC, OCC = (size_t)OC * C;
      float *x = dc_rand_f(s, NC, 1), *w = dc_rand_f(s, OCC, 0.2), *b = dc_rand_f(s, (size_t)OC, 1);
      float *dout = dc_rand_f(s, NO, 1), *dx0 = dc_rand_f(s, NC, 1), *dw0 = dc_rand_f(s, OCC, 1);
      float *db0 = dc_rand_f(s, (size_t)OC, 1);
      void *d_x = dc_up(s, x, NC * 4), *d_w = dc_up(s, w, OCC * 4);
      void *d_b = with_bias ? dc_up(s, b, (size_t)OC * 4) : NULL, *d_out = dc_up(s, NULL, NO * 4);
      o->matmul_forward(s->ctx, d_out, d_x, d_w, d_b, N, C, OC);
      double *ref = malloc(NO * sizeof *ref);
      ref_matmul_forward(ref, x, w, with_bias ? b : NULL, N, C, OC);
      float *got = dc_down(s, d_out, NO);
      char extra[32];
      snprintf(extra, sizeof extra, "%s%s", tag, with_bias ? "" : ".nobias");
      dc_compare(s, NAME("matmul_forward", extra), got, ref, NO, C + 1, s->u_gemm);
      free(got);
      free(ref);
      void *d_dout = dc_up(s, dout, NO * 4), *d_dx = with_dinp ? dc_up(s, dx0, NC * 4) : NULL;
      void *d_dw = dc_up(s, dw0, OCC * 4), *d_db = with_bias ? dc_up(s, db0, (size_t)OC * 4) : NULL;
      o->matmul_backward(s->ctx, d_dx, d_dw, d_db, d_dout, d_x, d_w, N, C, OC);
      double *rdx = with_dinp ? dc_to_d(dx0, NC) : NULL, *rdw = dc_to_d(dw0, OCC);
      double *rdb = with_bias ? dc_to_d(db0, (size_t)OC) : NULL;
      ref_matmul_backward(rdx, rdw, rdb, dout, x, w, N, C, OC);
      if (with_dinp) {
        got = dc_down(s, d_dx, NC);
        snprintf(extra, sizeof extra, "%s.dinp", tag);
        dc_compare(s, NAME("matmul_backward", extra), got, rdx, NC, OC + 1, s->u_gemm);
        free(got);
      }
      got = dc_down(s, d_dw, OCC);
      snprintf(extra, sizeof extra, "%s.dweight", tag);
      dc_compare(s, NAME("matmul_backward", extra), got, rdw, OCC, N + 1, s->u_gemm);
      free(got);
      if (with_bias) {
        got = dc_down(s, d_db, (size_t)OC);
        snprintf(extra, sizeof extra, "%s.dbias", tag);
        dc_compare(s, NAME("matmul_backward", extra), got, rdb, (size_t)OC, N + 1, U32);
        free(got);
      }
      if (k == 0 || k == 3) /* with bias and dinp, and the head */
        dc_check_matmul_w(s, sh->name, tag, with_bias, x, w, b, dout, dx0, dw0, db0, N, C, OC);
      free(rdx), free(rdw), free(rdb), free(x), free(w), free(b), free(dout), free(dx0);
      free(dw0), free(db0);
      dc_dfree(s, d_x), dc_dfree(s, d_w), dc_dfree(s, d_b), dc_dfree(s, d_out), dc_dfree(s, d_dout);
      dc_dfree(s, d_dx), dc_dfree(s, d_dw), dc_dfree(s, d_db);
    }
  }

  /* attention: forward n = HS + 2T (scores, softmax sum, weighted sum of v); backward
   * n = 2T + HS + T (the same paths back, plus the softmax Jacobian's dot product) */
  if (dc_have(s, "attention_forward", (void *)o->attention_forward) &&
      dc_have(s, "attention_backward", (void *)o->attention_backward)) {
    size_t Q = (size_t)N * 3 * C, A = (size_t)B * NH * T * T;
    float *qkv = dc_rand_f(s, Q, 1), *dout = dc_rand_f(s, NC, 1), *dq0 = dc_rand_f(s, Q, 1);
    void *d_qkv = dc_up(s, qkv, Q * 4), *d_out = dc_up(s, NULL, NC * 4), *d_att = dc_up(s, NULL, A * 4);
    o->attention_forward(s->ctx, d_out, d_att, d_qkv, B, T, NH, HS);
    double *ro = malloc(NC * sizeof *ro), *ra = malloc(A * sizeof *ra);
    ref_attention_forward(ro, ra, qkv, B, T, NH, HS);
    float *got = dc_down(s, d_out, NC);
    dc_compare(s, NAME("attention_forward", ".out"), got, ro, NC, HS + 2.0 * T, s->u_gemm);
    free(got);
    got = dc_down(s, d_att, A);
    dc_compare(s, NAME("attention_forward", ".att"), got, ra, A, HS + 2.0 * T, s->u_gemm);
    free(got);
    float *fa = malloc(A * 4); /* the reference's probabilities, the same input to both */
    for (size_t i = 0; i < A; i++) fa[i] = (float)ra[i];
    s->ops->from_host(s->ctx, d_att, fa, A * 4);
    void *d_dout = dc_up(s, dout, NC * 4), *d_dq = dc_up(s, dq0, Q * 4), *d_datt = dc_up(s, NULL, A * 4);
    o->attention_backward(s->ctx, d_dq, d_datt, d_dout, d_qkv, d_att, B, T, NH, HS);
    double *rdq = dc_to_d(dq0, Q);
    ref_attention_backward(rdq, dout, qkv, fa, B, T, NH, HS);
    got = dc_down(s, d_dq, Q);
    dc_compare(s, NAME("attention_backward", ".dqkv"), got, rdq, Q, 3.0 * T + HS + 1, s->u_gemm);
    free(got);
    free(ro), free(ra), free(fa), free(rdq), free(qkv), free(dout), free(dq0);
    dc_dfree(s, d_qkv), dc_dfree(s, d_out), dc_dfree(s, d_att), dc_dfree(s, d_dout), dc_dfree(s, d_dq);
    dc_dfree(s, d_datt);
  }

  /* ABI 1.9's lse attention (optional: both NULL is a SKIP, one of the pair a FAIL): forward
   * out n = HS + 2T as above, lse n = HS + T (the scores, the sum); backward from the device's
   * own out and lse, n = 4T + 2HS + 2 (the lse's HS + T feed P's recomputation, then the
   * materialised backward's 3T + HS + 1) */
  if (!o->attention_forward_lse && !o->attention_backward_lse) {
    dc_line("SKIP", NAME("attention_lse", ""), "no lse attention (ABI 1.9 slots NULL): the host "
            "keeps the probabilities");
    s->skipped++;
  } else if (dc_have(s, "attention_forward_lse", (void *)o->attention_forward_lse) &&
             dc_have(s, "attention_backward_lse", (void *)o->attention_backward_lse)) {
    const size_t Q = (size_t)N * 3 * C, L = (size_t)B * NH * T;
    float *qkv = dc_rand_f(s, Q, 1), *dout = dc_rand_f(s, NC, 1), *dq0 = dc_rand_f(s, Q, 1);
    void *d_qkv = dc_up(s, qkv, Q * 4), *d_out = dc_up(s, NULL, NC * 4);
    void *d_lse = dc_up(s, NULL, L * 4);
    o->attention_forward_lse(s->ctx, d_out, d_lse, d_qkv, B, T, NH, HS);
    double *ro = malloc(NC * sizeof *ro), *ra = malloc((size_t)B * NH * T * T * sizeof *ra);
    double *rl = malloc(L * sizeof *rl);
    ref_attention_forward(ro, ra, qkv, B, T, NH, HS);
    ref_attention_lse(rl, qkv, B, T, NH, HS);
    float *out = dc_down(s, d_out, NC), *got = dc_down(s, d_lse, L);
    dc_compare(s, NAME("attention_forward_lse", ".out"), out, ro, NC, HS + 2.0 * T, s->u_gemm);
    dc_compare(s, NAME("attention_forward_lse", ".lse"), got, rl, L, HS + 1.0 * T, s->u_gemm);
    free(got);
    void *d_dout = dc_up(s, dout, NC * 4), *d_dq = dc_up(s, dq0, Q * 4);
    o->attention_backward_lse(s->ctx, d_dq, d_dout, d_qkv, d_out, d_lse, B, T, NH, HS);
    double *rdq = dc_to_d(dq0, Q);
    ref_attention_backward_lse(rdq, dout, qkv, out, B, T, NH, HS);
    got = dc_down(s, d_dq, Q);
    dc_compare(s, NAME("attention_backward_lse", ".dqkv"), got, rdq, Q, 4.0 * T + 2.0 * HS + 2,
               s->u_gemm);
    free(got), free(out), free(ro), free(ra), free(rl), free(rdq), free(qkv), free(dout);
    free(dq0);
    dc_dfree(s, d_qkv), dc_dfree(s, d_out), dc_dfree(s, d_lse), dc_dfree(s, d_dout);
    dc_dfree(s, d_dq);
  }

  /* GELU over the MLP's (N, 4C): ~10 roundings per element including tanh; residual: 1 */
  if (dc_have(s, "gelu_forward", (void *)o->gelu_forward) &&
      dc_have(s, "gelu_backward", (void *)o->gelu_backward) &&
      dc_have(s, "residual_forward", (void *)o->residual_forward)) {
    size_t M = NC * 4;
    float *x = dc_rand_f(s, M, 4), *dout = dc_rand_f(s, M, 1), *dx0 = dc_rand_f(s, M, 1);
    void *d_x = dc_up(s, x, M * 4), *d_out = dc_up(s, NULL, M * 4), *d_dout = dc_up(s, dout, M * 4);
    void *d_dx = dc_up(s, dx0, M * 4);
    o->gelu_forward(s->ctx, d_out, d_x, M);
    double *ref = malloc(M * sizeof *ref);
    ref_gelu_forward(ref, x, M);
    float *got = dc_down(s, d_out, M);
    dc_compare(s, NAME("gelu_forward", ""), got, ref, M, 10, U32);
    free(got);
    o->gelu_backward(s->ctx, d_dx, d_x, d_dout, M);
    double *rdx = dc_to_d(dx0, M);
    ref_gelu_backward(rdx, x, dout, M);
    got = dc_down(s, d_dx, M);
    dc_compare(s, NAME("gelu_backward", ""), got, rdx, M, 12, U32);
    free(got);
    /* residual, out aliasing a (as the model calls it) */
    o->residual_forward(s->ctx, d_x, d_x, d_dout, M);
    for (size_t i = 0; i < M; i++) ref[i] = (double)x[i] + dout[i];
    got = dc_down(s, d_x, M);
    dc_compare(s, NAME("residual_forward", ".inplace"), got, ref, M, 1, U32);
    free(got);
    free(ref), free(rdx), free(x), free(dout), free(dx0);
    dc_dfree(s, d_x), dc_dfree(s, d_out), dc_dfree(s, d_dout), dc_dfree(s, d_dx);
  }

  /* softmax cross-entropy over (N, V), every third row ignored (target -1): n = V + 2 */
  if (dc_have(s, "crossentropy_forward", (void *)o->crossentropy_forward) &&
      dc_have(s, "crossentropy_backward", (void *)o->crossentropy_backward)) {
    size_t NV = (size_t)N * V;
    float *logits = dc_rand_f(s, NV, 8);
    int32_t *tg = dc_rand_tok(s, (size_t)N, V, 3);
    void *d_l = dc_up(s, logits, NV * 4), *d_t = dc_up(s, tg, (size_t)N * 4);
    void *d_p = dc_up(s, NULL, NV * 4), *d_loss = dc_up(s, NULL, (size_t)N * 4);
    o->crossentropy_forward(s->ctx, d_loss, d_p, d_l, d_t, N, V);
    double *rl = malloc((size_t)N * 8), *rp = malloc(NV * sizeof *rp);
    ref_crossentropy_forward(rl, rp, logits, tg, N, V);
    float *got = dc_down(s, d_loss, (size_t)N);
    dc_compare(s, NAME("crossentropy_forward", ".losses"), got, rl, (size_t)N, V + 2.0, U32);
    free(got);
    got = dc_down(s, d_p, NV); /* probabilities of the rows that count */
    float *gp = malloc(NV * 4);
    double *rpp = malloc(NV * sizeof *rpp);
    size_t k = 0;
    for (int n = 0; n < N; n++)
      if (tg[n] >= 0)
        for (int v = 0; v < V; v++, k++)
          gp[k] = got[(size_t)n * V + v], rpp[k] = rp[(size_t)n * V + v];
    dc_compare(s, NAME("crossentropy_forward", ".probs"), gp, rpp, k, V + 2.0, U32);
    free(got), free(gp), free(rpp);
    float *fp = malloc(NV * 4);
    for (size_t i = 0; i < NV; i++) fp[i] = (float)rp[i];
    s->ops->from_host(s->ctx, d_p, fp, NV * 4);
    float dloss = 1.0f / (float)N;
    o->crossentropy_backward(s->ctx, d_l, d_p, d_t, dloss, N, V); /* assigned: reuse logits */
    double *rd = malloc(NV * sizeof *rd);
    ref_crossentropy_backward(rd, fp, tg, dloss, N, V);
    got = dc_down(s, d_l, NV);
    dc_compare(s, NAME("crossentropy_backward", ""), got, rd, NV, 2, U32);
    free(got);
    free(rl), free(rp), free(fp), free(rd), free(logits), free(tg);
    dc_dfree(s, d_l), dc_dfree(s, d_t), dc_dfree(s, d_p), dc_dfree(s, d_loss);
  }
#undef NAME
}
