/* Where the job's ranks run — each rank's node and its index there — gathered once at start-up
 * for train's start-up line ("loom: placement: ..."). See placement.c. */
#ifndef LOOM_CORE_PLACEMENT_H
#define LOOM_CORE_PLACEMENT_H

#include "runtime.h"

/* Gather every rank's node name, node id and local rank over the world communicator and write
 * the summary rank 0 prints into rt->placement. Collective: every rank calls it after
 * loom__mesh_init and before the device is open (the gather runs on host memory). One rank:
 * no communication. Node: SLURMD_NODENAME when Slurm set it, else the host name; node id:
 * SLURM_NODEID when srun started the ranks (the local rank came from SLURM_LOCALID), else the
 * nodes numbered in the order of their lowest rank; local rank: loom__local_rank's (the
 * launcher's variables first). Returns 0, or -1 with "gathering the ranks' placement failed:
 * REASON" in err. */
int loom__placement_gather(loom_runtime *rt, char *err, size_t errlen);

#endif
