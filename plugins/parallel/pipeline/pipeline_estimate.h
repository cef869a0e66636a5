/* pipeline_estimate.c: what pipeline.so holds and moves on one stage for a plan (ABI 1.6's
 * loom_parallel_v1.estimate), for the schedule create() validated ("sequential", "gpipe",
 * "1f1b"). Fills `out` (zero-filled by the host). */
#ifndef LOOM_PIPELINE_ESTIMATE_H
#define LOOM_PIPELINE_ESTIMATE_H

#include <loom/loom.h>

void pipeline_estimate_figures(const loom_estimate_plan_v1 *pl, const char *schedule,
                               loom_estimate_v1 *out);

#endif
