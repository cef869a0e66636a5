/* gpt_vocab.c — the host side of the vocabulary-parallel cross-entropy (Megatron-LM, Shoeybi
 * et al. 2019, §3): each tensor-parallel rank holds a (rows, Vl) slice of the logits, columns
 * [v0, v0 + Vl) of the padded vocabulary. Per row the global softmax needs
 *   M = max over all ranks of the slice's max          (all-reduced MAX by the caller)
 *   S = sum over all ranks of sum_j exp(l_j - M)        (all-reduced SUM)
 *   l_t = the target's logit, from the rank owning t   (all-reduced SUM, 0 elsewhere)
 * then loss = log S - (l_t - M) (as the fused classifier's loom__cpu_row_loss) and
 * dlogits_j = (exp(l_j - M) / S - [j == t]) * dloss on the slice. The padded columns carry
 * the -inf bias: exp gives 0, so they never enter S. Rows are independent. */
#include "gpt_vocab.h"

#include <math.h>

void gpt_vp_row_max(const float *l, int rows, int V, double *mx) {
  for (int r = 0; r < rows; r++) {
    const float *x = l + (size_t)r * V;
    float m = -INFINITY;
    for (int j = 0; j < V; j++) m = x[j] > m ? x[j] : m;
    mx[r] = m;
  }
}

void gpt_vp_row_sums(const float *l, int rows, int V, const double *mx, const int32_t *tl,
                     double *sum, double *lt) {
  for (int r = 0; r < rows; r++) {
    const float *x = l + (size_t)r * V;
    const float m = (float)mx[r];
    double s = 0.0;
    for (int j = 0; j < V; j++) s += expf(x[j] - m);
    sum[r] = s;
    lt[r] = tl[r] >= 0 ? x[tl[r]] : 0.0;
  }
}

float gpt_vp_row_loss(double sum, double lt, double mx) {
  return (float)(log(sum) - (double)((float)lt - (float)mx));
}

void gpt_vp_row_dlogits(float *l, int rows, int V, const double *mx, const double *sum,
                        const int32_t *tl, float dloss) {
  for (int r = 0; r < rows; r++) {
    float *x = l + (size_t)r * V;
    const float m = (float)mx[r], inv = (float)(1.0 / sum[r]);
    const float pt = tl[r] >= 0 ? expf(x[tl[r]] - m) * inv : 0.0f;
    for (int j = 0; j < V; j++) x[j] = (expf(x[j] - m) * inv) * dloss; /* p rounded first */
    if (tl[r] >= 0) x[tl[r]] = (pt - 1.0f) * dloss;
  }
}
