/* Ring attention's block kernels on the CPU (device ABI 1.13; loom/device_v1.h,
 * attention_block_forward / attention_block_backward): causal attention of this rank's query
 * chunks against one block of keys and values whose tokens are other chunks of the same
 * sequence (Liu et al. 2023, "Ring Attention with Blockwise Transformers"; the load-balanced
 * chunk placement of Megatron-LM's context parallel). The forward merges each block into the
 * running (out, lse) with the online softmax (Milakov & Gimelshein 2018), the state
 * FlashAttention-2 keeps (Dao 2023, Alg. 1: O and L = m + log l); the backward recomputes the
 * block's probabilities from the final lse (Alg. 2), so every block's backward is independent.
 *
 * Work goes by (query chunk, key chunk) pairs of one (b, h): a key chunk of a lower global index
 * is seen whole, the query's own chunk up to the diagonal (the scores above it set to -inf), a
 * higher one not at all (skipped: no work). A visible pair is an (L, L) score tile, L the chunk
 * length, computed with the context's GEMMs (cpu_gemm.h, fp32 operands):
 *   forward:  S = Q K^T / sqrt(HS); P = exp(S - m) (rows); O_p = P V / l; lse_p = m + log l;
 *             (out, lse) merged with (O_p, lse_p);
 *   backward: P = exp(S - lse); dV += P^T dO; dP = dO V^T; dS = P (dP - D) / sqrt(HS) with
 *             D = rowsum(dO * out); dQ += dS K; dK += dS^T Q.
 * Pairs run one after another in a fixed order (the GEMMs and the row loops use the context's
 * threads), so results do not depend on the thread count beyond oneDNN's own (cpu_gemm.h).
 * Scratch: two (RB, L) tiles and an (RB, HS) block, the context's flash scratch
 * (loom__cpu_team_scratch; the flash kernels never run at the same time). */
#include <math.h>
#include <string.h>

#include "cpu_kernels.h"

/* 0: key chunk kc invisible to query chunk qc, 1: whole, 2: up to the diagonal. */
static int visibility(const loom_attn_block_v1 *g, int qc, int kc) {
  const int a = g->q_chunk[qc], b = g->k_chunk[kc];
  return b < a ? 1 : b == a ? 2 : 0;
}

/* Query rows per GEMM: a diagonal tile's row block [i0, i0 + RB) needs only the keys below
 * i0 + RB, so the causal half above the diagonal is (almost all) skipped. */
#define RB 128

/* Scratch: S and dP tiles (RB*L each), an (RB, HS) block and 2 x RB row values. */
static float *scratch(void *ctx, int L, int HS, const char *kernel) {
  size_t stride;
  return loom__cpu_team_scratch(ctx, 2 * (size_t)RB * L + (size_t)RB * HS + 2 * RB, &stride,
                                kernel);
}

/* S (R, n) = scale * Q (R rows of ldq) K^T (K: n rows of ldk); with diag the query rows are
 * i0.. of the chunk whose keys are 0..n-1: -inf where key > query. */
static void scores(cpu_gemm *gm, float *S, const float *q, int ldq, const float *k, int ldk,
                   int R, int n, int HS, float scale, int diag, int i0) {
  loom__cpu_gemm(gm, 0, 1, R, n, HS, scale, q, ldq, k, ldk, 0.0f, S, n, NULL, 0);
  if (diag)
    for (int i = 0; i < R; i++)
      for (int j = i0 + i + 1; j < n; j++) S[(size_t)i * n + j] = -INFINITY;
}

static float row_max(const float *x, int n) {
  float m = -INFINITY;
#pragma omp simd reduction(max : m)
  for (int j = 0; j < n; j++) m = x[j] > m ? x[j] : m;
  return m;
}

static float row_sum(const float *x, int n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int j = 0; j < n; j++) s += x[j];
  return s;
}

void loom__cpu_attention_block_forward(void *ctx, float *out, float *lse, const float *q,
                                       const float *k, const float *v,
                                       const loom_attn_block_v1 *g, int merge) {
  const int B = g->B, NH = g->NH, HS = g->HS, L = g->chunk_len, T = g->n_chunks * L;
  const int C = NH * HS;
  const float scale = 1.0f / sqrtf((float)HS);
  float *S = scratch(ctx, L, HS, "attention_block_forward"), *O = S + 2 * (size_t)RB * L;
  float *lb = O + (size_t)RB * HS, *il = lb + RB; /* the rows' lse and 1 / l */
  cpu_gemm *gm = loom__cpu_gemm_of(ctx);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int qc = 0; qc < g->n_chunks; qc++) {
        int first = !merge; /* the chunk's first visible pair writes (merge 0) */
        for (int kc = 0; kc < g->n_chunks; kc++) {
          const int vis = visibility(g, qc, kc);
          if (!vis) continue;
          const size_t q0 = (size_t)b * T + (size_t)qc * L, k0 = (size_t)b * T + (size_t)kc * L;
          for (int i0 = 0; i0 < L; i0 += RB) {
            const int R = L - i0 < RB ? L - i0 : RB, n = vis == 2 ? i0 + R : L;
            scores(gm, S, q + (q0 + i0) * g->q_stride + h * HS, g->q_stride,
                   k + k0 * g->kv_stride + h * HS, g->kv_stride, R, n, HS, scale, vis == 2, i0);
            for (int i = 0; i < R; i++) {
              float *row = S + (size_t)i * n;
              const float mx = row_max(row, n);
              loom__cpu_exp_sub(row, row, (size_t)n, mx);
              const float l = row_sum(row, n);
              lb[i] = mx + logf(l);
              il[i] = 1.0f / l;
            }
            /* O = P V, then each row / l: the pair's normalised output */
            loom__cpu_gemm(gm, 0, 0, R, HS, n, 1.0f, S, n, v + k0 * g->kv_stride + h * HS,
                           g->kv_stride, 0.0f, O, HS, NULL, 0);
            for (int i = 0; i < R; i++) {
              float *ot = out + (q0 + i0 + i) * C + h * HS;
              float *lt = lse + ((size_t)b * NH + h) * T + (size_t)qc * L + i0 + i;
              const float *oi = O + (size_t)i * HS;
              if (first) {
                for (int d = 0; d < HS; d++) ot[d] = oi[d] * il[i];
                *lt = lb[i];
                continue;
              }
              /* the online softmax's merge of (ot, *lt) with the pair's (oi / l, lb[i]) */
              const float m2 = *lt > lb[i] ? *lt : lb[i];
              const float ln = m2 + logf(expf(*lt - m2) + expf(lb[i] - m2));
              const float wa = expf(*lt - ln), wb = expf(lb[i] - ln) * il[i];
              for (int d = 0; d < HS; d++) ot[d] = ot[d] * wa + oi[d] * wb;
              *lt = ln;
            }
          }
          first = 0;
        }
      }
}

void loom__cpu_attention_block_backward(void *ctx, float *dq, float *dk, float *dv,
                                        const float *dout, const float *q, const float *k,
                                        const float *v, const float *out, const float *lse,
                                        const loom_attn_block_v1 *g) {
  const int B = g->B, NH = g->NH, HS = g->HS, L = g->chunk_len, T = g->n_chunks * L;
  const int C = NH * HS, qs = g->q_stride, ks = g->kv_stride;
  const float scale = 1.0f / sqrtf((float)HS);
  float *P = scratch(ctx, L, HS, "attention_block_backward"), *dP = P + (size_t)RB * L;
  float *D = dP + (size_t)RB * L + (size_t)RB * HS;
  cpu_gemm *gm = loom__cpu_gemm_of(ctx);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int qc = 0; qc < g->n_chunks; qc++)
        for (int kc = 0; kc < g->n_chunks; kc++) {
          const int vis = visibility(g, qc, kc);
          if (!vis) continue;
          const size_t k0 = (size_t)b * T + (size_t)kc * L;
          const float *K = k + k0 * ks + h * HS, *V = v + k0 * ks + h * HS;
          float *dK = dk + k0 * ks + h * HS, *dV = dv + k0 * ks + h * HS;
          for (int i0 = 0; i0 < L; i0 += RB) {
            const int R = L - i0 < RB ? L - i0 : RB, n = vis == 2 ? i0 + R : L;
            const size_t q0 = (size_t)b * T + (size_t)qc * L + i0;
            const float *Q = q + q0 * qs + h * HS, *dO = dout + q0 * C + h * HS;
            const float *lt = lse + ((size_t)b * NH + h) * T + (size_t)qc * L + i0;
            float *dQ = dq + q0 * qs + h * HS;
            for (int i = 0; i < R; i++) { /* D = rowsum(dO * out) */
              const float *x = dO + (size_t)i * C, *y = out + (q0 + i) * C + h * HS;
              float s = 0.0f;
#pragma omp simd reduction(+ : s)
              for (int d = 0; d < HS; d++) s += x[d] * y[d];
              D[i] = s;
            }
            scores(gm, P, Q, qs, K, ks, R, n, HS, scale, vis == 2, i0);
            for (int i = 0; i < R; i++)
              loom__cpu_exp_sub(P + (size_t)i * n, P + (size_t)i * n, (size_t)n, lt[i]);
            loom__cpu_gemm(gm, 1, 0, n, HS, R, 1.0f, P, n, dO, C, 1.0f, dV, ks, NULL, 0);
            loom__cpu_gemm(gm, 0, 1, R, n, HS, 1.0f, dO, C, V, ks, 0.0f, dP, n, NULL, 0);
            for (int i = 0; i < R; i++) {
              float *pi = P + (size_t)i * n, *di = dP + (size_t)i * n;
              const float Di = D[i];
#pragma omp simd
              for (int j = 0; j < n; j++) di[j] = pi[j] * (di[j] - Di) * scale;
            }
            loom__cpu_gemm(gm, 0, 0, R, HS, n, 1.0f, dP, n, K, ks, 1.0f, dQ, qs, NULL, 0);
            loom__cpu_gemm(gm, 1, 0, n, HS, R, 1.0f, dP, n, Q, qs, 1.0f, dK, ks, NULL, 0);
          }
        }
}
