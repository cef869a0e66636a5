/* Opening the config's device: "device": {"type": "cpu" | "cuda" | NAME | PATH, ...}.
 *
 * "cpu" is the backend built into the core. Any other type is a device plugin (kind
 * LOOM_KIND_DEVICE) found and checked by the loader like every other plugin: NAME.so on the
 * plugin search path, or a path to a .so. The plugin gets the whole "device" object as its
 * options and checks its own keys.
 *
 * Which GPU a rank takes is the backend's business; what it is told is the rank's place on its
 * node. The launcher's own variables win — they are what it bound the ranks by:
 * OMPI_COMM_WORLD_LOCAL_RANK / _LOCAL_SIZE (Open MPI's mpirun), then SLURM_LOCALID /
 * SLURM_NTASKS_PER_NODE (srun). Without either (another launcher, a plain run), the comm
 * plugin's shared-memory split (comm_v1.local, MPI_COMM_TYPE_SHARED) says it; without that
 * too, the rank is alone on its node (0 of 1). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device_open.h"

/* A non-negative integer environment variable; -1 when absent or malformed. Slurm writes
 * SLURM_NTASKS_PER_NODE as "2" or "2(x3)": the leading count is read. */
static int env_count(const char *name) {
  const char *v = getenv(name);
  if (!v || !*v) return -1;
  char *end;
  long x = strtol(v, &end, 10);
  if (end == v || x < 0 || x > 1 << 20) return -1;
  return (int)x;
}

void loom__local_rank(loom_runtime *rt, int *local_rank, int *local_size, const char **source) {
  static const struct { const char *rank, *size, *who; } launchers[] = {
      {"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "Open MPI"},
      {"SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "Slurm"},
  };
  for (size_t i = 0; i < sizeof launchers / sizeof launchers[0]; i++) {
    int r = env_count(launchers[i].rank), n = env_count(launchers[i].size);
    if (r < 0) continue;
    *local_rank = r;
    *local_size = n > r ? n : r + 1;
    *source = launchers[i].who;
    return;
  }
  const loom_comm_v1 *c = rt ? &rt->comm_plugin.u.comm : NULL;
  int r, n;
  if (c && rt->comm_ctx && c->local && c->local(rt->comm_ctx, &r, &n) == LOOM_OK && r >= 0 &&
      n > r) {
    *local_rank = r;
    *local_size = n;
    *source = "the comm plugin's shared-memory split";
    return;
  }
  *local_rank = 0;
  *local_size = 1;
  *source = "no launcher";
}

int loom__device_open(loom_runtime *rt, int threads, char *err, size_t errlen) {
  loom_config *cfg = rt->cfg;
  const char *type = cfg->device.type[0] ? cfg->device.type : "cpu";
  const loom_device_v1 *ops;
  char opts_buf[256], *opts_dyn = NULL;
  const char *opts;
  const char *where = "built in";
  if (strcmp(type, "cpu") == 0) {
    ops = loom__cpu_device();
    snprintf(opts_buf, sizeof opts_buf, "{\"type\":\"cpu\",\"threads\":%d}", threads);
    opts = opts_buf;
  } else {
    char e[1200];
    if (loom__plugin_open(&rt->dev_plugin, type, LOOM_KIND_DEVICE, e, sizeof e) != 0) {
      snprintf(err, errlen, "%s: device.type: %s", cfg->path, e);
      return -1;
    }
    ops = &rt->dev_plugin.u.device;
    where = rt->dev_plugin.path;
    opts_dyn = cfg->device.options ? json_dumps(cfg->device.options, JSON_COMPACT) : NULL;
    opts = opts_dyn ? opts_dyn : "{}";
  }
  int local_rank, local_size;
  const char *source;
  loom__local_rank(rt, &local_rank, &local_size, &source);
  rt->local_rank = local_rank;
  rt->local_size = local_size;
  char e[1024];
  int rc = loom__dev_open_ex(&rt->dev, ops, opts, local_rank, local_size, e, sizeof e);
  free(opts_dyn);
  if (rc != LOOM_OK) {
    snprintf(err, errlen, "%s: device.type '%s' [%s]: %s (local rank %d of %d, from %s)",
             cfg->path, type, where, e, local_rank, local_size, source);
    loom__plugin_close(&rt->dev_plugin);
    return -1;
  }
  /* the comm plugin must reach the device's memory (caps): nccl.so GPU memory only; mpi.so
   * host memory, and device memory by staging through the host */
  const loom_plugin *cp = &rt->comm_plugin;
  uint64_t cc = cp->u.hdr.caps;
  int host_mem = LOOM_DEVICE_HOST_ADDRESSABLE(ops);
  if (cp->handle && !(cc & (host_mem ? LOOM_COMM_CAP_HOST_MEMORY : LOOM_COMM_CAP_DEVICE_MEMORY))) {
    snprintf(err, errlen, "%s: %s: plugin '%s' [%s] moves %s memory only, but device '%s' keeps "
             "tensors in %s memory: use {\"plugin\": \"mpi\"}, which works with every device",
             cfg->path, cfg->comm.json_path, cfg->comm.name, cp->path,
             host_mem ? "device (GPU)" : "host", type, host_mem ? "host" : "device");
    loom__device_close(rt);
    return -1;
  }
  return 0;
}

void loom__device_hint_dtype(loom_runtime *rt) {
  const loom_device_v1 *ops = rt->dev.ops;
  if (ops && ops->set_compute_dtype)
    ops->set_compute_dtype(rt->dev.ctx, rt->compute_dtype);
}

void loom__device_close(loom_runtime *rt) {
  if (rt->ctl_buf) rt->dev.ops->free(rt->dev.ctx, rt->ctl_buf);
  rt->ctl_buf = NULL;
  rt->ctl_bytes = 0;
  if (rt->dev.ops) loom__dev_close(&rt->dev);
  loom__plugin_close(&rt->dev_plugin); /* after destroy: the table lives in the plugin */
}

/* ---- control traffic ---- */

/* A device buffer of at least `bytes` for bouncing host values (kept, grown on demand; not
 * charged to a memory category: a few hundred bytes, or one logits row when sampling). */
static void *ctl_buffer(loom_runtime *rt, size_t bytes) {
  if (rt->ctl_bytes >= bytes) return rt->ctl_buf;
  if (rt->ctl_buf) rt->dev.ops->free(rt->dev.ctx, rt->ctl_buf);
  rt->ctl_buf = rt->dev.ops->alloc(rt->dev.ctx, bytes);
  rt->ctl_bytes = rt->ctl_buf ? bytes : 0;
  return rt->ctl_buf;
}

/* Host memory goes to the comm plugin as is while no device is open or the device's memory is
 * host memory; else through the bounce buffer. */
static int bounce(loom_runtime *rt) {
  return rt->dev.ops && !LOOM_DEVICE_HOST_ADDRESSABLE(rt->dev.ops);
}

/* The bounce buffer holding a copy of host_buf (bytes), or NULL with the error set. */
static void *ctl_stage_in(loom_runtime *rt, const void *host_buf, size_t bytes) {
  void *d = ctl_buffer(rt, bytes);
  if (!d) {
    snprintf(rt->comm_host.error, sizeof rt->comm_host.error,
             "out of device memory (%zu bytes for control traffic)", bytes);
    return NULL;
  }
  rt->dev.ops->from_host(rt->dev.ctx, d, host_buf, bytes);
  return d;
}

int loom__ctl_all_reduce(loom_runtime *rt, loom_comm *comm, void *host_buf, size_t count,
                         loom_dtype dt, loom_red_op op) {
  const loom_comm_v1 *c = &rt->comm_plugin.u.comm;
  if (!bounce(rt)) return c->all_reduce(rt->comm_ctx, comm, host_buf, count, dt, op, NULL);
  size_t bytes = count * loom_dtype_size(dt);
  void *d = ctl_stage_in(rt, host_buf, bytes);
  if (!d) return LOOM_NOMEM;
  int rc = c->all_reduce(rt->comm_ctx, comm, d, count, dt, op, NULL);
  if (rc == LOOM_OK) rt->dev.ops->to_host(rt->dev.ctx, host_buf, d, bytes);
  return rc;
}

int loom__ctl_broadcast(loom_runtime *rt, loom_comm *comm, void *host_buf, size_t count,
                        loom_dtype dt, int root) {
  const loom_comm_v1 *c = &rt->comm_plugin.u.comm;
  if (!bounce(rt)) return c->broadcast(rt->comm_ctx, comm, host_buf, count, dt, root, NULL);
  size_t bytes = count * loom_dtype_size(dt);
  void *d = ctl_stage_in(rt, host_buf, bytes);
  if (!d) return LOOM_NOMEM;
  int rc = c->broadcast(rt->comm_ctx, comm, d, count, dt, root, NULL);
  if (rc == LOOM_OK) rt->dev.ops->to_host(rt->dev.ctx, host_buf, d, bytes);
  return rc;
}
