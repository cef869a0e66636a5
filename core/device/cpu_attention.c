/* CPU causal multi-head self-attention, forward and backward.
 *
 * Legend: B = batch, T = time, NH = heads, HS = head size, C = NH*HS. qkv is (B,T,3C) laid out
 * [q | k | v], head h using channels h*HS..h*HS+HS-1 of each third, so within one batch row the
 * q/k/v of head h are (T,HS) matrices with a leading dimension of 3C: every product below is one
 * strided cblas_sgemm per (b,h). att (B,NH,T,T) holds the softmax probabilities, 0 above the
 * diagonal.
 *
 * Per (b,h):  S = Q K^T / sqrt(HS);  P = causal_softmax(S);  out = P V
 * Backward:   dP = dout V^T;  dV += P^T dout;  dS = P * (dP - rowsum(P*dP)) / sqrt(HS);
 *             dQ += dS K;  dK += dS^T Q
 * The (b,h) loop is serial and OpenBLAS threads each GEMM; the row-wise softmax is OpenMP
 * parallel. Nothing is reduced across threads, so results do not depend on the thread count.
 *
 * Causal blocking: with m = T/2, the (T,T) products skip the block of rows 0..m-1, columns
 * m..T-1, which is masked (S, dP: never read) or zero (P, dS): each product is two GEMMs, one
 * over the first m rows (or columns) with an inner size of m, and 25% of the attention FLOPs are
 * saved. The skipped terms are exact zeros, so only the GEMMs' rounding order changes. */
#include <cblas.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "cpu_kernels.h"

void loom__cpu_attention_forward(void *ctx, float *out, float *att, const float *qkv, int B,
                                 int T, int NH, int HS) {
  (void)ctx;
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
      if (m)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, m, HS, scale, q, C3, k, C3, 0.0f,
                    p, T);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T - m, T, HS, scale,
                  q + (size_t)m * C3, C3, k, C3, 0.0f, p + (size_t)m * T, T);
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
      if (m)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, HS, m, 1.0f, p, T, v, C3, 0.0f,
                    o, C);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T - m, HS, T, 1.0f,
                  p + (size_t)m * T, T, v, C3, 0.0f, o + (size_t)m * C, C);
    }
  }
}

void loom__cpu_attention_backward(void *ctx, float *dqkv, float *datt, const float *dout,
                                  const float *qkv, const float *att, int B, int T, int NH,
                                  int HS) {
  (void)ctx;
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
      if (m)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, m, HS, 1.0f, dob, C, v, C3, 0.0f,
                    dp, T);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T - m, T, HS, 1.0f,
                  dob + (size_t)m * C, C, v, C3, 0.0f, dp + (size_t)m * T, T);
      /* dV (T,HS) += P^T (T,T) @ dout (T,HS); rows m.. of dV only see rows m.. of P */
      if (m)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, m, HS, T, 1.0f, p, T, dob, C, 1.0f, dv,
                    C3);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T - m, HS, T - m, 1.0f,
                  p + (size_t)m * T + m, T, dob + (size_t)m * C, C, 1.0f, dv + (size_t)m * C3, C3);
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
      if (m)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, HS, m, 1.0f, dp, T, k, C3, 1.0f,
                    dq, C3);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T - m, HS, T, 1.0f,
                  dp + (size_t)m * T, T, k, C3, 1.0f, dq + (size_t)m * C3, C3);
      if (m)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, m, HS, T, 1.0f, dp, T, q, C3, 1.0f, dk,
                    C3);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T - m, HS, T - m, 1.0f,
                  dp + (size_t)m * T + m, T, q + (size_t)m * C3, C3, 1.0f, dk + (size_t)m * C3,
                  C3);
    }
  }
}
