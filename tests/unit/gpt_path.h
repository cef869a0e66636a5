/* Reduction lengths along the GPT model's forward and backward paths: the n of fp32_tol
 * (fp_tolerance.h) for checks that compare whole-model losses, logits or gradients. */
#ifndef LOOM_TEST_GPT_PATH_H
#define LOOM_TEST_GPT_PATH_H

#include "model/gpt.h"

/* The reduction length along the model's forward path, for fp32_tol: per block the two
 * layernorms (mean and variance, C each), the qkv, attention-projection and fc GEMMs (C), the
 * MLP projection (4C), attention (q.k over HS, softmax and att.v over T); then ln_f, the tied
 * head (C) and the softmax over V. */
static inline double gpt_forward_reductions(const gpt_config *c, int T) {
  const double C = c->n_embd, HS = C / c->n_head;
  return c->n_layer * (2 * C + C + HS + 2 * T + C + 2 * C + C + 4 * C) + 2 * C + C + c->vocab_size;
}

/* ... and along the backward path to a parameter gradient: per block the layernorm backwards
 * (two C-sums each), the GEMMs' dinp (4C through the MLP projection's transpose, C, C, 3C),
 * attention's (T, HS); the head's dinp (V), ln_f; then the sum over the N = B T rows that makes
 * a weight or bias gradient. */
static inline double gpt_backward_reductions(const gpt_config *c, int B, int T) {
  const double C = c->n_embd, HS = C / c->n_head;
  return c->n_layer * (2 * C + 4 * C + C + C + 3 * C + T + HS + 2 * C) + c->vocab_size + 2 * C +
         (double)B * T;
}

#endif
