/* Internal to the CPU backend: the per-row (or per-column-range) bodies of the fp32 kernels
 * that the 16-bit activation kernels (cpu_acts16.c) run on widened tiles. One source for both,
 * so the fp32 kernels (cpu_layers.c, cpu_crossentropy.c) and cpu_acts16.c compile the same
 * float operations in the same order: the 16-bit kernels' bits are those of the fp32 kernels on
 * the widened inputs, rounded once on store. Every pointer here is fp32.
 *
 * Legend: C = channels, V = vocabulary. */
#ifndef LOOM_CORE_CPU_ROWS_H
#define LOOM_CORE_CPU_ROWS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cpu_kernels.h"

#define LOOM_CPU_LN_EPS 1e-5f

/* ---- encoder ---- */

/* o (C) = we (C) + pe (C): one token's embedding plus its position's */
static inline void loom__cpu_encoder_row(float *restrict o, const float *restrict we,
                                         const float *restrict pe, int C) {
#pragma omp simd
  for (int c = 0; c < C; c++) o[c] = we[c] + pe[c];
}

/* ---- layernorm ---- */

/* One row of LayerNorm's forward: o (C) = (x - m) * s * weight + bias; *mean = m, *rstd = s. */
static inline void loom__cpu_ln_forward_row(float *restrict o, float *mean, float *rstd,
                                            const float *restrict x, const float *restrict weight,
                                            const float *restrict bias, int C) {
  float m = 0.0f;
#pragma omp simd reduction(+ : m)
  for (int c = 0; c < C; c++) m += x[c];
  m /= (float)C;
  float v = 0.0f;
#pragma omp simd reduction(+ : v)
  for (int c = 0; c < C; c++) {
    float xm = x[c] - m;
    v += xm * xm;
  }
  v /= (float)C;
  float s = 1.0f / sqrtf(v + LOOM_CPU_LN_EPS);
#pragma omp simd
  for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * weight[c] + bias[c];
  *mean = m;
  *rstd = s;
}

/* One row of LayerNorm's backward: di += (dnorm - mean(dnorm) - norm * mean(dnorm * norm)) * s,
 * with dnorm = weight * d and norm = (x - m) * s. With dweight/dbias non-NULL it also adds the
 * row's terms to them (norm * d, d), so one thread makes one pass over x and d. */
static inline void loom__cpu_ln_backward_row(float *restrict di, float *restrict dweight,
                                             float *restrict dbias, const float *restrict d,
                                             const float *restrict x,
                                             const float *restrict weight, float m, float s,
                                             int C) {
  float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
  for (int c = 0; c < C; c++) {
    float norm = (x[c] - m) * s;
    float dnorm = weight[c] * d[c];
    dnorm_mean += dnorm;
    dnorm_norm_mean += dnorm * norm;
  }
  dnorm_mean /= (float)C;
  dnorm_norm_mean /= (float)C;
  if (dweight) {
#pragma omp simd
    for (int c = 0; c < C; c++) {
      float norm = (x[c] - m) * s;
      float dnorm = weight[c] * d[c];
      di[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
      dweight[c] += norm * d[c];
      dbias[c] += d[c];
    }
  } else {
#pragma omp simd
    for (int c = 0; c < C; c++) {
      float norm = (x[c] - m) * s;
      float dnorm = weight[c] * d[c];
      di[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
    }
  }
}

/* One row's terms of LayerNorm's dweight, dbias over columns [c0, c1): x and d point at the
 * row's column 0 (the same operations per element as loom__cpu_ln_backward_row's). */
static inline void loom__cpu_ln_dwdb_cols(float *restrict dweight, float *restrict dbias,
                                          const float *restrict x, const float *restrict d,
                                          float m, float s, int c0, int c1) {
#pragma omp simd
  for (int c = c0; c < c1; c++) {
    dweight[c] += (x[c] - m) * s * d[c];
    dbias[c] += d[c];
  }
}

/* ---- softmax cross-entropy ---- */

/* e (V) = exp(l - max l) (e may be l), *maxv = max l; returns sum e in double. */
static inline double loom__cpu_row_exp_sum(float *e, const float *l, int V, float *maxv) {
  float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
  for (int v = 0; v < V; v++) mx = l[v] > mx ? l[v] : mx;
  loom__cpu_exp_sub(e, l, (size_t)V, mx);
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (int v = 0; v < V; v++) sum += e[v];
  *maxv = mx;
  return sum;
}

/* -log softmax(l)[t] as logsumexp - logit: exact even when the probability underflows. */
static inline float loom__cpu_row_loss(double sum, float lt, float maxv) {
  return (float)(log(sum) - (double)(lt - maxv));
}

/* One row of the fused classifier: e (V) is the row's work buffer (the dlogits row, which may
 * be l itself, or a scratch row for the loss only). Returns the row's loss. */
static inline float loom__cpu_fused_row(float *e, const float *l, int32_t t, float dloss,
                                        int write_d, int V) {
  const float lt = t < 0 ? 0.0f : l[t]; /* before an in-place exp overwrites it */
  float maxv;
  double sum = loom__cpu_row_exp_sum(e, l, V, &maxv);
  float loss = t < 0 ? 0.0f : loom__cpu_row_loss(sum, lt, maxv);
  if (!write_d) return loss;
  if (t < 0) {
    memset(e, 0, (size_t)V * sizeof(float));
    return loss;
  }
  const float inv = (float)(1.0 / sum), pt = e[t] * inv;
#pragma omp simd
  for (int v = 0; v < V; v++) e[v] = (e[v] * inv) * dloss; /* p·dloss, p rounded first */
  e[t] = (pt - 1.0f) * dloss;
  return loss;
}

#endif
