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
#include "cpu_rows.h"

void loom__cpu_crossentropy_forward(void *ctx, float *losses, float *probs, const float *logits,
                                    const int32_t *targets, int N, int V) {
  (void)ctx;
#pragma omp parallel for schedule(static) if ((size_t)N * V > LOOM_CPU_PAR_MIN)
  for (int n = 0; n < N; n++) {
    const float *l = logits + (size_t)n * V;
    float *p = probs + (size_t)n * V;
    float maxv;
    double sum = loom__cpu_row_exp_sum(p, l, V, &maxv);
    float inv = (float)(1.0 / sum);
#pragma omp simd
    for (int v = 0; v < V; v++) p[v] *= inv;
    int32_t t = targets[n];
    losses[n] = t < 0 ? 0.0f : loom__cpu_row_loss(sum, l[t], maxv);
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
        losses[n] = loom__cpu_fused_row(dlogits + (size_t)n * V, l, targets[n], dloss, 1, V);
      } else if (scratch) {
        losses[n] = loom__cpu_fused_row(scratch, l, targets[n], dloss, 0, V);
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
      losses[n] = t < 0 ? 0.0f : loom__cpu_row_loss(sum, l[t], mx);
    }
  }
}
