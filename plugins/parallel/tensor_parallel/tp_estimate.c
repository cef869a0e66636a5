/* What tensor_parallel.so holds and moves for a plan (ABI 1.6): Megatron-LM's f and g
 * (Shoeybi et al. 2019, §3) are all-reduces of one (B, T, C) region over the tp ranks, four
 * per block and micro-step (f and g of attention and of the MLP, one direction each), plus a
 * fully recomputed block's attention g once more in backward; the host counts each as
 * 2(tp-1)/tp of the region's fp32 bytes. Under a 16-bit precision the region is packed to 16
 * bits in one (B, T, C) buffer (LOOM_MEM_COMM) unless communication_data_type is "fp32". */
#include "tp_estimate.h"

#include <stdio.h>

void tp_estimate_figures(const loom_estimate_plan_v1 *pl, int force_fp32, loom_estimate_v1 *out) {
  const uint64_t tp = (uint64_t)pl->tp, B = (uint64_t)pl->micro_batch,
                 T = (uint64_t)pl->seq_len, C = (uint64_t)pl->n_embd, A = (uint64_t)pl->n_micro;
  if (tp <= 1) return;
  if (pl->compute_dtype != LOOM_F32 && !force_fp32) {
    out->bytes[LOOM_MEM_COMM] = 2 * B * T * C;
    snprintf(out->formula[LOOM_MEM_COMM], 64, "tp 16-bit region");
  }
  out->comm_bytes = ((uint64_t)pl->n_blocks * 4 + (uint64_t)pl->n_recomputed) * A * 2 *
                    (tp - 1) * B * T * C * 4 / tp;
  snprintf(out->comm_formula, sizeof out->comm_formula, "tp f/g");
}
