/* offload_estimate.c: what cpu_offload.so holds for a plan (ABI 1.6's
 * loom_parallel_v1.estimate): the optimizer state of the partition in host memory, none of it
 * on the device. Fills `out` (zero-filled by the host). */
#ifndef LOOM_OFFLOAD_ESTIMATE_H
#define LOOM_OFFLOAD_ESTIMATE_H

#include <loom/loom.h>

void offload_estimate_figures(const loom_estimate_plan_v1 *pl, loom_estimate_v1 *out);

#endif
