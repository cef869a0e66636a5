/* The config's device (built-in CPU or a device plugin), the rank's place on its node, and the
 * core's own host-memory collectives ("control traffic") on a device whose memory is not host
 * memory. See device_open.c. */
#ifndef LOOM_CORE_DEVICE_OPEN_H
#define LOOM_CORE_DEVICE_OPEN_H

#include "runtime.h"

/* This rank's index on its node and the number of ranks there, and where that came from
 * ("Open MPI", "Slurm", "the comm plugin's shared-memory split", "no launcher"). rt may be
 * NULL (launcher variables only). */
void loom__local_rank(loom_runtime *rt, int *local_rank, int *local_size, const char **source);

/* Open cfg->device into rt->dev (a plugin stays open in rt->dev_plugin). threads: the CPU
 * device's thread count (cfg->device.threads for training, 1 for `loom check`). Returns 0, or
 * -1 with "CONFIG: device.type 'TYPE' [FILE]: create failed: REASON (local rank R of N, from
 * SOURCE)" or the loader's message. */
int loom__device_open(loom_runtime *rt, int threads, char *err, size_t errlen);
/* Tell the device the precision plugin's compute dtype (device_v1.set_compute_dtype, ABI 1.4;
 * nothing for an older backend). Call after loom__precision_create. */
void loom__device_hint_dtype(loom_runtime *rt);
/* Close the device (every live allocation freed) and its plugin. Safe when never opened. */
void loom__device_close(loom_runtime *rt);

/* The core's collectives on host memory (statistics, flags, a logits row): as the comm plugin's
 * blocking all_reduce / broadcast, bounced through a device buffer when the device's memory is
 * not host memory (comm buffers are device memory once the device is open: comm_v1.h).
 * Not counted in the communication statistics. Errors: the comm plugin's, its message in
 * rt->comm_host.error. */
int loom__ctl_all_reduce(loom_runtime *rt, loom_comm *comm, void *host_buf, size_t count,
                         loom_dtype dt, loom_red_op op);
int loom__ctl_broadcast(loom_runtime *rt, loom_comm *comm, void *host_buf, size_t count,
                        loom_dtype dt, int root);

#endif
