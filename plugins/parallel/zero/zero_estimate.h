/* zero_estimate.c: what ZeRO stage 1, 2 or 3 holds and moves for a plan (ABI 1.6's
 * loom_parallel_v1.estimate), with the options create() validated: reduce_bucket_size `cap`
 * (elements), overlap_comm, prefetch (stage 3). Fills `out` (zero-filled by the host). */
#ifndef LOOM_ZERO_ESTIMATE_H
#define LOOM_ZERO_ESTIMATE_H

#include "zero_common.h"

void zc_estimate(int stage, uint64_t cap, int overlap, int prefetch,
                 const loom_estimate_plan_v1 *pl, loom_estimate_v1 *out);

#endif
