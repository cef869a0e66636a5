/* tp_estimate.c: what tensor_parallel.so holds and moves for a plan (ABI 1.6's
 * loom_parallel_v1.estimate), from the option create() validated (communication_data_type
 * "fp32": force_fp32). Fills `out` (zero-filled by the host). */
#ifndef LOOM_TP_ESTIMATE_H
#define LOOM_TP_ESTIMATE_H

#include <loom/loom.h>

void tp_estimate_figures(const loom_estimate_plan_v1 *pl, int force_fp32, loom_estimate_v1 *out);

#endif
