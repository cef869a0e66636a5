/* CPU softmax cross-entropy over (N, V) logits: the separate forward and backward kernels and the
 * fused classifier (device_v1.h's crossentropy_fused, llm.c's fused_classifier).
 *
 * Why fused: with a GPT-2 vocabulary (V = 50257) the (N, V) logits dwarf every other activation
 * (256 rows: 51 MB, far beyond any cache). The separate kernels make five passes over such
 * buffers (max, exp into probs, sum, scale probs, then backward reads probs and writes dlogits
 * into a third buffer); the fused kernel makes four over one buffer (max, exp in place, sum,
 * scale by 1/sum·dloss in place) and no probs buffer exists. The training forward calls it with
 * dlogits == logits, so the backward GEMMs read the dlogits the forward left in the logits buffer.
 *
 * Same bits: both paths run the row's max, exp and double sum through row_exp_sum below (one
 * function, one loop), then the float products p = e·(1/sum), d = p·dloss and d[t] = (p[t] − 1)·
 * dloss in the same order; check_kernels' fused classifier test compares them bit for bit.
 *
 * Legend: N = rows (B·T), V = vocabulary. Rows are independent: parallel over rows, every row's
 * reductions in a fixed order whatever the thread count. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"

/* e (V) = exp(l - max l) (e may be l), *maxv = max l; returns sum e in double. */
static inline double row_exp_sum(float *e, const float *l, int V, float *maxv) {
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
static inline float row_loss(double sum, float lt, float maxv) {
  return (float)(log(sum) - (double)(lt - maxv));
}

void loom__cpu_crossentropy_forward(void *ctx, float *losses, float *probs, const float *logits,
                                    const int32_t *targets, int N, int V) {
  (void)ctx;
#pragma omp parallel for schedule(static) if ((size_t)N * V > LOOM_CPU_PAR_MIN)
  for (int n = 0; n < N; n++) {
    const float *l = logits + (size_t)n * V;
    float *p = probs + (size_t)n * V;
    float maxv;
    double sum = row_exp_sum(p, l, V, &maxv);
    float inv = (float)(1.0 / sum);
#pragma omp simd
    for (int v = 0; v < V; v++) p[v] *= inv;
    int32_t t = targets[n];
    losses[n] = t < 0 ? 0.0f : row_loss(sum, l[t], maxv);
  }
}

void loom__cpu_crossentropy_backward(void *ctx, float *dlogits, const float *probs,
                                     const int32_t *targets, float dloss, int N, int V) {
  (void)ctx;
#pragma omp parallel for schedule(static) if ((size_t)N * V > LOOM_CPU_PAR_MIN)
  for (int n = 0; n < N; n++) {
    const float *p = probs + (size_t)n * V;
    float *d = dlogits + (size_t)n * V;
    int32_t t = targets[n];
    if (t < 0) {
      memset(d, 0, (size_t)V * sizeof(float));
      continue;
    }
#pragma omp simd
    for (int v = 0; v < V; v++) d[v] = p[v] * dloss;
    d[t] = (p[t] - 1.0f) * dloss;
  }
}

/* One row of the fused classifier: e (V) is the row's work buffer (the dlogits row, which may
 * be l itself, or a per-thread scratch row for the loss only). */
static inline float fused_row(float *e, const float *l, int32_t t, float dloss, int write_d,
                              int V) {
  const float lt = t < 0 ? 0.0f : l[t]; /* before an in-place exp overwrites it */
  float maxv;
  double sum = row_exp_sum(e, l, V, &maxv);
  float loss = t < 0 ? 0.0f : row_loss(sum, lt, maxv);
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

void loom__cpu_crossentropy_fused(void *ctx, float *losses, float *dlogits, const float *logits,
                                  const int32_t *targets, float dloss, int N, int V) {
  (void)ctx;
  int oom = 0;
#pragma omp parallel if ((size_t)N * V > LOOM_CPU_PAR_MIN) reduction(| : oom)
  {
    /* loss only: the exps of a row go to a per-thread scratch row (one malloc per thread) */
    float *scratch = dlogits ? NULL : malloc((size_t)V * sizeof(float));
    if (!dlogits && !scratch) oom = 1;
#pragma omp for schedule(static)
    for (int n = 0; n < N; n++) {
      const float *l = logits + (size_t)n * V;
      if (dlogits) {
        losses[n] = fused_row(dlogits + (size_t)n * V, l, targets[n], dloss, 1, V);
      } else if (scratch) {
        losses[n] = fused_row(scratch, l, targets[n], dloss, 0, V);
      }
    }
    free(scratch);
  }
  if (oom) { /* no row buffer: the loss from a max/sum pass without storing the exps */
    for (int n = 0; n < N; n++) {
      const float *l = logits + (size_t)n * V;
      int32_t t = targets[n];
      float mx = -INFINITY;
      for (int v = 0; v < V; v++) mx = l[v] > mx ? l[v] : mx;
      double sum = 0.0;
      for (int v = 0; v < V; v++) sum += expf(l[v] - mx);
      losses[n] = t < 0 ? 0.0f : row_loss(sum, l[t], mx);
    }
  }
}
