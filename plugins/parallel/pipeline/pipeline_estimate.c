/* What pipeline.so holds and moves on stage s of p for a plan (ABI 1.6), m = n_micro, v model
 * chunks (ABI 1.12):
 *   in flight  pipeline_order.c's peak of (micro, chunk) activation sets the order holds at
 *              once: 1 (sequential), m (gpipe), min(p - s, m) (1f1b: the warm-up depth),
 *              min((p - s - 1)·2 + (v - 1)·p + 1, m·v) (interleaved: Narayanan et al. 2021,
 *              §2.2.1, the warm-up plus the steady state's one), and the same per chunk
 *   comm       under a 16-bit precision the boundaries travel packed in 16 bits: one packed
 *              buffer per (micro-batch, chunk) with a next virtual stage (activations) and per
 *              one with a previous virtual stage (gradients), plus one to receive into; under
 *              "interleaved" in fp32 the gradient sends go from fp32 copies, one per
 *              (micro-batch, chunk) with a previous virtual stage (they complete at the step's
 *              end: pipeline_order.h)
 *   traffic    one boundary send of B*T*C per (micro-batch, chunk) and direction with a
 *              neighbour, in 16 bits under a 16-bit precision. */
#include "pipeline_estimate.h"

#include <stddef.h>
#include <stdio.h>

#include "pipeline_order.h"

void pipeline_estimate_figures(const loom_estimate_plan_v1 *pl, int sched, const char *schedule,
                               int v, loom_estimate_v1 *out) {
  const int P = pl->pp, s = pl->stage, last = P - 1, m = pl->n_micro;
  const uint64_t B = (uint64_t)pl->micro_batch, T = (uint64_t)pl->seq_len,
                 C = (uint64_t)pl->n_embd, A = (uint64_t)m;
  snprintf(out->schedule, sizeof out->schedule, "%s", schedule);
  if (m <= 0) return;
  out->in_flight = pp_peak_inflight(sched, P, s, m, v);
  if (v > 1 && out->struct_size > offsetof(loom_estimate_v1, in_flight_chunk)) {
    out->n_chunks = v;
    for (int k = 0; k < v; k++)
      out->in_flight_chunk[k] = pp_peak_inflight_chunk(sched, P, s, m, v, k);
  }
  if (P <= 1) return;
  /* (micro, chunk) sets with a next / a previous virtual stage */
  const uint64_t n_out = A * (uint64_t)(v - (s == last)), n_gin = A * (uint64_t)(v - (s == 0));
  const int packed = pl->compute_dtype != LOOM_F32;
  if (packed) {
    out->bytes[LOOM_MEM_COMM] = 2 * B * T * C * (n_out + n_gin + 1);
    snprintf(out->formula[LOOM_MEM_COMM], 64, "16-bit boundaries");
  } else if (pp_defer_grad_sends(sched)) {
    out->bytes[LOOM_MEM_COMM] = 4 * B * T * C * n_gin;
    snprintf(out->formula[LOOM_MEM_COMM], 64, "gradient send copies");
  }
  out->comm_bytes = (packed ? 2 : 4) * B * T * C * (n_out + n_gin);
  if (out->comm_bytes)
    snprintf(out->comm_formula, sizeof out->comm_formula, "%s",
             v > 1 ? "(n_out + n_in)*4BTC p2p"
             : s > 0 && s < last ? "2 x A*4BTC p2p" : "A*4BTC p2p");
}
