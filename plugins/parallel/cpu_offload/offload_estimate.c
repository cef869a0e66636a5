/* What cpu_offload.so holds for a plan (ABI 1.6): the partition's Adam m and v and its fp32
 * master copy in host memory (LOOM_MEM_HOST), and the gradient staged there for the host
 * AdamW, in the gradient's dtype; with fp32 parameters the master is a copy of its own (the
 * device's parameters are not the optimizer's then). Nothing of the optimizer on the device.
 * The partition is the one the plugins before it published (plan.partition), else the model. */
#include "offload_estimate.h"

#include <stdio.h>

void offload_estimate_figures(const loom_estimate_plan_v1 *pl, loom_estimate_v1 *out) {
  const int s16 = pl->param_dtype != LOOM_F32;
  const uint64_t G = loom_dtype_size(pl->grad_dtype), K = s16 ? 12 : 8;
  const uint64_t part = pl->partition ? pl->partition : pl->numel;
  const char *pp = pl->partition_sharded && pl->dp > 1 ? "/N" : "";
  out->replaces |= 1u << LOOM_MEM_OPTIM | 1u << LOOM_MEM_HOST;
  out->bytes[LOOM_MEM_OPTIM] = 0;
  snprintf(out->formula[LOOM_MEM_OPTIM], 64, "0 (offloaded)");
  out->bytes[LOOM_MEM_HOST] = (K + (s16 ? 0 : 4) + G) * part;
  if (s16)
    snprintf(out->formula[LOOM_MEM_HOST], 64, "(12+%llu)Psi%s master,m,v+grad stage",
             (unsigned long long)G, pp);
  else
    snprintf(out->formula[LOOM_MEM_HOST], 64, "(8+4+4)Psi%s m,v+master+grad stage", pp);
}
