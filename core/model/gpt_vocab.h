/* gpt_vocab.h — row statistics of the vocabulary-parallel cross-entropy on a host copy of a
 * (rows, V) slice of fp32 logits (gpt_vocab.c: the formulas and their source). tl: per row the
 * target's column inside the slice, or -1 when another rank owns it. */
#ifndef LOOM_CORE_GPT_VOCAB_H
#define LOOM_CORE_GPT_VOCAB_H

#include <stddef.h>
#include <stdint.h>

/* mx[r] = max_j l[r, j] (-inf for an all-padding slice) */
void gpt_vp_row_max(const float *l, int rows, int V, double *mx);
/* sum[r] = sum_j exp(l[r, j] - mx[r]) in double; lt[r] = l[r, tl[r]] or 0 */
void gpt_vp_row_sums(const float *l, int rows, int V, const double *mx, const int32_t *tl,
                     double *sum, double *lt);
/* -log softmax[t] from the all-reduced statistics (logsumexp - logit) */
float gpt_vp_row_loss(double sum, double lt, double mx);
/* l := (softmax(l) - onehot(tl)) * dloss in place, with the global mx and sum */
void gpt_vp_row_dlogits(float *l, int rows, int V, const double *mx, const double *sum,
                        const int32_t *tl, float dloss);

#endif
