/* CPU causal multi-head self-attention, forward and backward.
 *
 * Legend: B = batch, T = time, NH = heads, HS = head size, C = NH*HS. qkv is (B,T,3C) laid out
 * [q | k | v], head h using channels h*HS..h*HS+HS-1 of each third, so within one batch row the
 * q/k/v of head h are (T,HS) matrices with a leading dimension of 3C: every product below is one
 * strided fp32 GEMM per (b,h) (cpu_gemm.h; never bf16 operands: the probabilities are fp32
 * values). att (B,NH,T,T) holds the softmax probabilities, 0 above the diagonal.
 *
 * Per (b,h):  S = Q K^T / sqrt(HS);  P = causal_softmax(S);  out = P V
 * Backward:   dP = dout V^T;  dV += P^T dout;  dS = P * (dP - rowsum(P*dP)) / sqrt(HS);
 *             dQ += dS K;  dK += dS^T Q
 * The (b,h) loop is serial and oneDNN threads each GEMM; the row-wise softmax is OpenMP
 * parallel. Nothing is reduced across threads, so results do not depend on the thread count.
 *
 * Causal blocking: with m = T/2, the (T,T) products skip the block of rows 0..m-1, columns
 * m..T-1, which is masked (S, dP: never read) or zero (P, dS): each product is two GEMMs, one
 * over the first m rows (or columns) with an inner size of m, and 25% of the attention FLOPs are
 * saved. The skipped terms are exact zeros, so only the GEMMs' rounding order changes. */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "cpu_kernels.h"

/* The causal blocking's three products, each as its two GEMMs (m = T/2; A is a (T,T) matrix
 * with leading dimension T, X and Z are (T,HS) with leading dimensions ldx, ldz).
 *
 * S (T,T) = alpha * X @ Z^T, but for the masked block (rows 0..m-1, columns m..T-1). */
static void causal_x_zt(cpu_gemm *g, int T, int m, int HS, float alpha, const float *x, int ldx,
                        const float *z, int ldz, float *s) {
  if (m)
    loom__cpu_gemm(g, 0, 1, m, m, HS, alpha, x, ldx, z, ldz, 0.0f, s, T, NULL, 0);
  loom__cpu_gemm(g, 0, 1, T - m, T, HS, alpha, x + (size_t)m * ldx, ldx, z, ldz, 0.0f,
                 s + (size_t)m * T, T, NULL, 0);
}

/* Y (T,HS) = A @ X + beta * Y for a causal A (zero in rows 0..m-1, columns m..T-1): rows
 * 0..m-1 of Y need only A's first m columns. */
static void causal_a_x(cpu_gemm *g, int T, int m, int HS, const float *a, const float *x, int ldx,
                       float beta, float *y, int ldy) {
  if (m)
    loom__cpu_gemm(g, 0, 0, m, HS, m, 1.0f, a, T, x, ldx, beta, y, ldy, NULL, 0);
  loom__cpu_gemm(g, 0, 0, T - m, HS, T, 1.0f, a + (size_t)m * T, T, x, ldx, beta,
                 y + (size_t)m * ldy, ldy, NULL, 0);
}

/* Y (T,HS) = A^T @ X + beta * Y for the same causal A: rows m..T-1 of Y need only rows m..T-1
 * of A and of X. */
static void causal_at_x(cpu_gemm *g, int T, int m, int HS, const float *a, const float *x, int ldx,
                        float beta, float *y, int ldy) {
  if (m)
    loom__cpu_gemm(g, 1, 0, m, HS, T, 1.0f, a, T, x, ldx, beta, y, ldy, NULL, 0);
  loom__cpu_gemm(g, 1, 0, T - m, HS, T - m, 1.0f, a + (size_t)m * T + m, T, x + (size_t)m * ldx,
                 ldx, beta, y + (size_t)m * ldy, ldy, NULL, 0);
}

void loom__cpu_attention_forward(void *ctx, float *out, float *att, const float *qkv, int B,
                                 int T, int NH, int HS) {
  cpu_gemm *g = loom__cpu_gemm_of(ctx);
  const int C = NH * HS, C3 = 3 * C;
  const float scale = 1.0f / sqrtf((float)HS);
  const int m = T / 2; /* causal blocking, see the top */
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      const float *q = qkv + (size_t)b * T * C3 + (size_t)h * HS;
      const float *k = q + C;
      const float *v = q + 2 * C;
      float *p = att + ((size_t)b * NH + h) * T * T; /* (T,T) */
      float *o = out + (size_t)b * T * C + (size_t)h * HS; /* (T,HS), leading dim C */
      /* S (T,T) = scale * Q (T,HS) @ K^T; the upper triangle is computed (but for the top-right
       * block) and then masked */
      causal_x_zt(g, T, m, HS, scale, q, C3, k, C3, p);
#pragma omp parallel for schedule(static) if ((size_t)T * T > LOOM_CPU_PAR_MIN)
      for (int t = 0; t < T; t++) {
        float *row = p + (size_t)t * T;
        float maxv = -INFINITY;
#pragma omp simd reduction(max : maxv)
        for (int s = 0; s <= t; s++) maxv = row[s] > maxv ? row[s] : maxv;
        loom__cpu_exp_sub(row, row, (size_t)t + 1, maxv);
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int s = 0; s <= t; s++) sum += row[s];
        float inv = 1.0f / sum;
#pragma omp simd
        for (int s = 0; s <= t; s++) row[s] *= inv;
        memset(row + t + 1, 0, (size_t)(T - t - 1) * sizeof(float));
      }
      /* out (T,HS) = P (T,T) @ V (T,HS) */
      causal_a_x(g, T, m, HS, p, v, C3, 0.0f, o, C);
    }
  }
}

void loom__cpu_attention_backward(void *ctx, float *dqkv, float *datt, const float *dout,
                                  const float *qkv, const float *att, int B, int T, int NH,
                                  int HS) {
  cpu_gemm *g = loom__cpu_gemm_of(ctx);
  const int C = NH * HS, C3 = 3 * C;
  const float scale = 1.0f / sqrtf((float)HS);
  const int m = T / 2; /* causal blocking, see the top */
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      size_t qoff = (size_t)b * T * C3 + (size_t)h * HS;
      const float *q = qkv + qoff, *k = q + C, *v = q + 2 * C;
      float *dq = dqkv + qoff, *dk = dq + C, *dv = dq + 2 * C;
      const float *p = att + ((size_t)b * NH + h) * T * T;
      float *dp = datt + ((size_t)b * NH + h) * T * T;
      const float *dob = dout + (size_t)b * T * C + (size_t)h * HS;
      /* dP (T,T) = dout (T,HS) @ V^T */
      causal_x_zt(g, T, m, HS, 1.0f, dob, C, v, C3, dp);
      /* dV (T,HS) += P^T (T,T) @ dout (T,HS); rows m.. of dV only see rows m.. of P */
      causal_at_x(g, T, m, HS, p, dob, C, 1.0f, dv, C3);
      /* softmax backward, in place: dS = P * (dP - sum_s P*dP) * scale; 0 above the diagonal */
#pragma omp parallel for schedule(static) if ((size_t)T * T > LOOM_CPU_PAR_MIN)
      for (int t = 0; t < T; t++) {
        const float *prow = p + (size_t)t * T;
        float *drow = dp + (size_t)t * T;
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int s = 0; s <= t; s++) dot += prow[s] * drow[s];
#pragma omp simd
        for (int s = 0; s <= t; s++) drow[s] = prow[s] * (drow[s] - dot) * scale;
        memset(drow + t + 1, 0, (size_t)(T - t - 1) * sizeof(float));
      }
      /* dQ (T,HS) += dS (T,T) @ K (T,HS);  dK (T,HS) += dS^T @ Q */
      causal_a_x(g, T, m, HS, dp, k, C3, 1.0f, dq, C3);
      causal_at_x(g, T, m, HS, dp, q, C3, 1.0f, dk, C3);
    }
  }
}
