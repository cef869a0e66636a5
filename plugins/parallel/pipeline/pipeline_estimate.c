/* What pipeline.so holds and moves on stage s of p for a plan (ABI 1.6), m = n_micro:
 *   in flight  1 (sequential: one micro-batch through all stages at a time), m (gpipe: every
 *              forward before the first backward), min(p - s, m) (1f1b: the warm-up depth)
 *   comm       under a 16-bit precision the boundaries travel packed in 16 bits: one packed
 *              buffer per micro-batch and direction with a neighbour, plus one to receive into
 *   traffic    A boundary sends of B*T*C per direction with each neighbour (activations to
 *              s+1, their gradients to s-1), in 16 bits under a 16-bit precision. */
#include "pipeline_estimate.h"

#include <stdio.h>
#include <string.h>

void pipeline_estimate_figures(const loom_estimate_plan_v1 *pl, const char *schedule,
                               loom_estimate_v1 *out) {
  const int P = pl->pp, s = pl->stage, last = P - 1, m = pl->n_micro;
  const uint64_t B = (uint64_t)pl->micro_batch, T = (uint64_t)pl->seq_len,
                 C = (uint64_t)pl->n_embd, A = (uint64_t)m;
  snprintf(out->schedule, sizeof out->schedule, "%s", schedule);
  out->in_flight = !strcmp(schedule, "gpipe") ? m
                   : !strcmp(schedule, "1f1b") ? (P - s < m ? P - s : m) : 1;
  if (P <= 1) return;
  const uint64_t nb = (uint64_t)((s < last) + (s > 0)); /* neighbours */
  const int packed = pl->compute_dtype != LOOM_F32;
  if (packed) {
    out->bytes[LOOM_MEM_COMM] = 2 * B * T * C * (A * nb + 1);
    snprintf(out->formula[LOOM_MEM_COMM], 64, "16-bit boundaries");
  }
  out->comm_bytes = A * (packed ? 2 : 4) * B * T * C * nb;
  if (out->comm_bytes)
    snprintf(out->comm_formula, sizeof out->comm_formula, "%s",
             s > 0 && s < last ? "2 x A*4BTC p2p" : "A*4BTC p2p");
}
