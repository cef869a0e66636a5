/* ddp_estimate.c: what ddp.so holds and moves for a plan (ABI 1.6's loom_parallel_v1.estimate),
 * from the options create() validated: overlap, communication_data_type "fp32" (force_fp32),
 * split_embedding (-1 auto, 0 false, 1 true). Fills `out` (zero-filled by the host). */
#ifndef LOOM_DDP_ESTIMATE_H
#define LOOM_DDP_ESTIMATE_H

#include <loom/loom.h>

void ddp_estimate_figures(const loom_estimate_plan_v1 *pl, int overlap, int force_fp32,
                          int split_mode, loom_estimate_v1 *out);

#endif
