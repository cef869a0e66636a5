/* The host's accounting of a parallel plugin that leaves loom_parallel_v1.estimate NULL (ABI
 * 1.6): by its caps, as the reference plugin of each role holds and moves with its default
 * options (docs/abi.md, "Estimates"). Nothing here reads a plugin's options. */
#ifndef LOOM_CORE_ESTIMATE_ROLES_H
#define LOOM_CORE_ESTIMATE_ROLES_H

#include <loom/loom.h>

/* Fill `out` (zero-filled) for a plugin with `caps` on `pl`. */
void loom__estimate_by_role(uint64_t caps, const loom_estimate_plan_v1 *pl,
                            loom_estimate_v1 *out);

#endif
