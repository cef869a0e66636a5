/* Ring attention's block kernels on the CPU (device ABI 1.12; loom/device_v1.h,
 * attention_block_forward / attention_block_backward): causal attention of this rank's query
 * chunks against one block of keys and values whose tokens are other chunks of the same
 * sequence (Liu et al. 2023, "Ring Attention with Blockwise Transformers"; the load-balanced
 * chunk placement of Megatron-LM's context parallel). The forward merges each block into the
 * running (out, lse) with the online softmax (Milakov & Gimelshein 2018), the state
 * FlashAttention-2 keeps (Dao 2023, Alg. 1: O and L = m + log l); the backward recomputes the
 * block's probabilities from the final lse (Alg. 2), so every block's backward is independent.
 *
 * Masking works on chunk pairs: a query chunk sees a key chunk of a lower global index whole,
 * its own chunk up to the diagonal, a higher one not at all (skipped, no work).
 *
 * Threads: one (b, h) pair per task, each writing only head h's columns of out, dq, dk and dv
 * and its own lse rows, so no two threads touch the same element and the result does not
 * depend on the thread count. Scores of one query row live in a per-thread buffer of the
 * block's Tk floats (loom__cpu_team_scratch). */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "cpu_kernels.h"

/* How many keys of key chunk kc (its first ones) a query at offset i of query chunk qc sees. */
static int visible(const loom_attn_block_v1 *g, int qc, int i, int kc) {
  const int a = g->q_chunk[qc], b = g->k_chunk[kc];
  return b < a ? g->chunk_len : b == a ? i + 1 : 0;
}

static float dot(const float *x, const float *y, int n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int d = 0; d < n; d++) s += x[d] * y[d];
  return s;
}

void loom__cpu_attention_block_forward(void *ctx, float *out, float *lse, const float *q,
                                       const float *k, const float *v,
                                       const loom_attn_block_v1 *g, int merge) {
  const int B = g->B, NH = g->NH, HS = g->HS, L = g->chunk_len, T = g->n_chunks * L;
  const int C = NH * HS;
  const float scale = 1.0f / sqrtf((float)HS);
  size_t stride;
  float *rows = loom__cpu_team_scratch(ctx, (size_t)T, &stride, "attention_block_forward");
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; bh++) {
    const int b = bh / NH, h = bh % NH;
    float *s = rows + (size_t)omp_get_thread_num() * stride;
    float o[HS > 0 ? HS : 1];
    for (int t = 0; t < T; t++) {
      const int qc = t / L, i = t % L;
      const float *qt = q + ((size_t)b * T + t) * g->q_stride + h * HS;
      float mx = -INFINITY;
      int any = 0;
      for (int kc = 0; kc < g->n_chunks; kc++) {
        const int n = visible(g, qc, i, kc);
        for (int j = 0; j < n; j++) {
          const int u = kc * L + j;
          s[u] = dot(qt, k + ((size_t)b * T + u) * g->kv_stride + h * HS, HS) * scale;
          if (s[u] > mx) mx = s[u];
        }
        any |= n > 0;
      }
      float *ot = out + ((size_t)b * T + t) * C + h * HS;
      float *lt = lse + ((size_t)b * NH + h) * T + t;
      if (!any) {
        if (!merge) { memset(ot, 0, (size_t)HS * sizeof(float)); *lt = -INFINITY; }
        continue;
      }
      float l = 0.0f;
      for (int d = 0; d < HS; d++) o[d] = 0.0f;
      for (int kc = 0; kc < g->n_chunks; kc++) {
        const int n = visible(g, qc, i, kc);
        for (int j = 0; j < n; j++) {
          const int u = kc * L + j;
          const float p = expf(s[u] - mx);
          const float *vu = v + ((size_t)b * T + u) * g->kv_stride + h * HS;
          l += p;
#pragma omp simd
          for (int d = 0; d < HS; d++) o[d] += p * vu[d];
        }
      }
      const float lb = mx + logf(l);
      if (!merge || *lt == -INFINITY) {
        for (int d = 0; d < HS; d++) ot[d] = o[d] / l;
        *lt = lb;
        continue;
      }
      /* the online softmax's merge of (ot, *lt) with the block's (o / l, lb) */
      const float m2 = *lt > lb ? *lt : lb;
      const float ln = m2 + logf(expf(*lt - m2) + expf(lb - m2));
      const float wa = expf(*lt - ln), wb = expf(lb - ln) / l;
      for (int d = 0; d < HS; d++) ot[d] = ot[d] * wa + o[d] * wb;
      *lt = ln;
    }
  }
}

void loom__cpu_attention_block_backward(void *ctx, float *dq, float *dk, float *dv,
                                        const float *dout, const float *q, const float *k,
                                        const float *v, const float *out, const float *lse,
                                        const loom_attn_block_v1 *g) {
  (void)ctx;
  const int B = g->B, NH = g->NH, HS = g->HS, L = g->chunk_len, T = g->n_chunks * L;
  const int C = NH * HS;
  const float scale = 1.0f / sqrtf((float)HS);
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; bh++) {
    const int b = bh / NH, h = bh % NH;
    for (int t = 0; t < T; t++) {
      const int qc = t / L, i = t % L;
      const size_t qr = ((size_t)b * T + t);
      const float *qt = q + qr * g->q_stride + h * HS;
      float *dqt = dq + qr * g->q_stride + h * HS;
      const float *dot_ = dout + qr * C + h * HS;
      const float D = dot(dot_, out + qr * C + h * HS, HS);
      const float lt = lse[((size_t)b * NH + h) * T + t];
      for (int kc = 0; kc < g->n_chunks; kc++) {
        const int n = visible(g, qc, i, kc);
        for (int j = 0; j < n; j++) {
          const size_t kr = (size_t)b * T + kc * L + j;
          const float *ku = k + kr * g->kv_stride + h * HS;
          const float *vu = v + kr * g->kv_stride + h * HS;
          float *dku = dk + kr * g->kv_stride + h * HS;
          float *dvu = dv + kr * g->kv_stride + h * HS;
          const float p = expf(dot(qt, ku, HS) * scale - lt);
          const float ds = p * (dot(dot_, vu, HS) - D) * scale;
#pragma omp simd
          for (int d = 0; d < HS; d++) {
            dvu[d] += p * dot_[d];
            dqt[d] += ds * ku[d];
            dku[d] += ds * qt[d];
          }
        }
      }
    }
  }
}
