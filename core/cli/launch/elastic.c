/* The elastic restart's arithmetic (elastic.h). */
#include "elastic.h"

#include <stdio.h>

int loom__elastic_accum(const loom_batch_plan *plan, int world, char *err, size_t errlen) {
  int mp = plan->tp * plan->pp, b = plan->micro_batch_size, g = plan->global_batch_size;
  if (world < 1 || mp < 1 || b < 1 || g < 1) {
    snprintf(err, errlen, "cannot plan a world of %d ranks (tp %d x pp %d, micro-batch %d, "
             "global batch %d)", world, plan->tp, plan->pp, b, g);
    return -1;
  }
  if (world % mp != 0) {
    snprintf(err, errlen, "%d ranks remain, but tensor-parallel %d x pipeline %d = %d does not "
             "divide %d: the mesh cannot be built on them", world, plan->tp, plan->pp, mp,
             world);
    return -1;
  }
  int dp = world / mp;
  long long per_accum = (long long)b * dp; /* sequences per micro-batch over all replicas */
  if (g % per_accum != 0) {
    snprintf(err, errlen, "%d ranks remain (dp %d = %d / (tp %d x pp %d)), but the global batch "
             "of %d sequences is not a multiple of micro_batch_size %d x dp %d = %lld: it cannot "
             "be kept by gradient accumulation", world, dp, world, plan->tp, plan->pp, g, b, dp,
             per_accum);
    return -1;
  }
  return (int)(g / per_accum);
}
