/* pipeline_estimate.c: what pipeline.so holds and moves on one stage for a plan (ABI 1.6's
 * loom_parallel_v1.estimate), for the schedule create() validated (pipeline_order.h's
 * PP_SEQUENTIAL .. PP_INTERLEAVED, named `schedule`) over v model chunks per stage. Fills
 * `out` (zero-filled by the host; per-chunk in-flight counts when its struct_size has them). */
#ifndef LOOM_PIPELINE_ESTIMATE_H
#define LOOM_PIPELINE_ESTIMATE_H

#include <loom/loom.h>

void pipeline_estimate_figures(const loom_estimate_plan_v1 *pl, int sched, const char *schedule,
                               int v, loom_estimate_v1 *out);

#endif
