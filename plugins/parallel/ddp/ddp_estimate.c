/* What ddp.so holds and moves for a plan (ABI 1.6), as ddp.c implements it: gradients reduced
 * in place in their storage, or through a stage in the communication dtype, plus the split of
 * the tied embedding's all-reduce (see the top of ddp.c). No model, device or communicator. */
#include "ddp_estimate.h"

#include <stdio.h>
#include <string.h>

/* The rows the split's buffers hold (dp*B*T: every rank's token ids of a micro-batch), or 0
 * where ddp does not split: split_blocker and split_decide on the plan. */
static uint64_t split_rows(const loom_estimate_plan_v1 *pl, int overlap, int comm16,
                           int split_mode) {
  if (!overlap || pl->dp <= 1 || pl->tp > 1 || pl->pp > 1 || pl->first_unit != 0) return 0;
  if (comm16 || pl->grad_dtype != LOOM_F32) return 0;
  if (split_mode == 0 || (split_mode == -1 && 2 * pl->wte_numel < pl->numel)) return 0;
  return (uint64_t)pl->dp * (uint64_t)pl->micro_batch * (uint64_t)pl->seq_len;
}

void ddp_estimate_figures(const loom_estimate_plan_v1 *pl, int overlap, int force_fp32,
                          int split_mode, loom_estimate_v1 *out) {
  const uint64_t N = pl->dp > 1 ? (uint64_t)pl->dp : 1, psi = pl->numel,
                 C = (uint64_t)pl->n_embd;
  const int comm16 = pl->compute_dtype != LOOM_F32 && !force_fp32;
  const int grad16 = pl->grad_dtype != LOOM_F32;
  if (comm16) out->flags |= LOOM_ESTIMATE_GRAD_COMM_16BIT;
  /* communication buffers: 16-bit gradients reduce in place (or widened into a 4Psi fp32
   * stage when told fp32), averaged through a 64 KiB fp32 stage unless predivided; fp32
   * gradients reduced in 16 bits travel in a 2Psi stage; fp32 in fp32: in place */
  out->replaces |= 1u << LOOM_MEM_COMM;
  char *cf = out->formula[LOOM_MEM_COMM];
  if (grad16 && N > 1) {
    out->bytes[LOOM_MEM_COMM] = (comm16 ? 0 : 4 * psi) + (pl->grads_predivided ? 0 : 65536);
    snprintf(cf, 64, "%s%s", comm16 ? "in place" : "4Psi fp32 buckets",
             pl->grads_predivided ? " (predivided: no averaging)" : " + 64 KiB averaging stage");
  } else if (comm16 && N > 1) {
    out->bytes[LOOM_MEM_COMM] = 2 * psi;
    snprintf(cf, 64, "2Psi 16-bit buckets");
  } else {
    snprintf(cf, 64, "0 (in place)");
  }
  /* one all-reduce of the gradients per step (no_sync on accumulation micro-steps) */
  if (N > 1) {
    out->comm_bytes = 2 * (N - 1) * ((comm16 ? 2 : 4) * psi) / N;
    snprintf(out->comm_formula, sizeof out->comm_formula, "%s",
             comm16 ? "2(N-1)/N*2Psi (16-bit)" : "2(N-1)/N*4Psi");
  }
  /* the split: every rank's token ids (int32) and two row buffers (C fp32 per row), kept from
   * the first synchronising backward on; per step the ids' all-gather and the all-reduce of
   * at most min(N*B*T, V) distinct rows (wte's full all-reduce stays counted above) */
  const uint64_t rows = split_rows(pl, overlap, comm16, split_mode);
  snprintf(out->detail_name, sizeof out->detail_name, "split_embedding");
  if (!rows) return;
  const uint64_t bytes = rows * (4 + 8 * C), V = (uint64_t)pl->vocab_size, BT = rows / N;
  const uint64_t touched = rows < V ? rows : V;
  const uint64_t comm = (N - 1) * 4 * BT + 2 * (N - 1) * 4 * touched * C / N;
  out->bytes[LOOM_MEM_COMM] += bytes;
  size_t k = strlen(cf);
  snprintf(cf + k, 64 - k, " + split wte N*B*T*(4+8C)");
  out->comm_bytes += comm;
  k = strlen(out->comm_formula);
  snprintf(out->comm_formula + k, sizeof out->comm_formula - k,
           " + (N-1)*4BT ids + <= 2(N-1)/N*4C*min(NBT,V) rows");
  out->detail_on = 1;
  out->detail_rows = rows;
  out->detail_bytes = bytes;
  out->detail_comm_bytes = comm;
  snprintf(out->note, sizeof out->note, "ddp splits the tied embedding's all-reduce: %llu token "
           "rows held (N*B*T*(4+8C) = %llu bytes, comm), ids all-gather + touched rows <= %llu "
           "bytes per step, included below", (unsigned long long)rows,
           (unsigned long long)bytes, (unsigned long long)comm);
}
