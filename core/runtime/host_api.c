/* The host API table: what plugins call. Every function takes the plugin's own loom_host so
 * messages name the plugin, and every collective is forwarded to the comm plugin and counted. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device_open.h"
#include "../config/config_internal.h"
#include "formats/model_files.h"
#include "abi/abi_compat.h"
#include "runtime.h"
#include "storage_plan.h"
#include "util/test_hooks.h"

void loom__host_init(loom_host *h, loom_runtime *rt, const char *label, const char *file,
                     const char *where, json_t *options) {
  memset(h, 0, sizeof *h);
  h->rt = rt;
  h->label = label;
  h->opts.file = file;
  h->opts.where = where;
  h->opts.obj = options;
}

static void host_log(loom_host *h, loom_log_level level, const char *fmt, ...) {
  static const char *names[] = {"error", "warning", "info", "debug"};
  if (level == LOOM_LOG_DEBUG && !getenv("LOOM_DEBUG")) return;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  int rank = h->rt ? h->rt->mesh.world_rank : 0;
  fprintf(stderr, "loom[%d] %s: %s: %s\n", rank, names[level & 3], h->label, msg);
}

static void host_set_error(loom_host *h, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(h->error, sizeof h->error, fmt, ap);
  va_end(ap);
}

/* ---- options: the config module's getters, with the message stored as the plugin's error */
static int host_opt_int(loom_host *h, const loom_options *o, const char *key, int64_t dflt,
                        int64_t min, int64_t max, int64_t *out) {
  return loom_opt_int(o, key, dflt, min, max, out, h->error, sizeof h->error)
             ? LOOM_INVALID_CONFIG : LOOM_OK;
}
static int host_opt_double(loom_host *h, const loom_options *o, const char *key, double dflt,
                           double min, double max, double *out) {
  return loom_opt_double(o, key, dflt, min, max, out, h->error, sizeof h->error)
             ? LOOM_INVALID_CONFIG : LOOM_OK;
}
static int host_opt_bool(loom_host *h, const loom_options *o, const char *key, int dflt,
                         int *out) {
  return loom_opt_bool(o, key, dflt, out, h->error, sizeof h->error) ? LOOM_INVALID_CONFIG
                                                                     : LOOM_OK;
}
static int host_opt_string(loom_host *h, const loom_options *o, const char *key,
                           const char *dflt, const char **out) {
  return loom_opt_string(o, key, dflt, out, h->error, sizeof h->error) ? LOOM_INVALID_CONFIG
                                                                       : LOOM_OK;
}
static int host_opt_check_keys(loom_host *h, const loom_options *o, const char *const *allowed) {
  return loom_opt_check_keys(o, allowed, h->error, sizeof h->error) ? LOOM_INVALID_CONFIG
                                                                    : LOOM_OK;
}

/* A nested options object handed to a plugin; lives until the plugin's handle is released. */
struct loom_sub_options {
  struct loom_sub_options *next;
  loom_options opts;
  char where[256];
};

static int host_opt_object(loom_host *h, const loom_options *o, const char *key,
                           const loom_options **out) {
  *out = NULL;
  json_t *v = o && o->obj ? json_object_get(o->obj, key) : NULL;
  if (!v) return LOOM_OK;
  if (!json_is_object(v)) {
    char got[96];
    loom__json_repr(v, got, sizeof got);
    loom__opt_error(o, key, h->error, sizeof h->error, "expected an object, got %s", got);
    return LOOM_INVALID_CONFIG;
  }
  struct loom_sub_options *s = calloc(1, sizeof *s);
  if (!s) {
    snprintf(h->error, sizeof h->error, "out of memory");
    return LOOM_NOMEM;
  }
  snprintf(s->where, sizeof s->where, "%s%s%s", o->where && *o->where ? o->where : "",
           o->where && *o->where ? "." : "", key);
  s->opts.file = o->file;
  s->opts.where = s->where;
  s->opts.obj = v;
  s->next = h->subs;
  h->subs = s;
  *out = &s->opts;
  return LOOM_OK;
}

void loom__host_release(loom_host *h) {
  while (h->subs) {
    struct loom_sub_options *next = h->subs->next;
    free(h->subs);
    h->subs = next;
  }
}

/* ---- mesh ---- */
static int host_rank(loom_host *h, loom_axis axis) {
  const loom_mesh *m = &h->rt->mesh;
  switch (axis) {
    case LOOM_AXIS_WORLD: return m->world_rank;
    case LOOM_AXIS_DP: return m->dp_rank;
    case LOOM_AXIS_TP: return m->tp_rank;
    case LOOM_AXIS_PP: return m->pp_rank;
    case LOOM_AXIS_DP_SHARD: return m->shard_rank;
    case LOOM_AXIS_DP_REPLICA: return m->replica_rank;
    case LOOM_AXIS_CP: return m->cp_rank;
  }
  return -1;
}
static int host_size(loom_host *h, loom_axis axis) {
  const loom_mesh *m = &h->rt->mesh;
  switch (axis) {
    case LOOM_AXIS_WORLD: return m->world_size;
    case LOOM_AXIS_DP: return m->dp;
    case LOOM_AXIS_TP: return m->tp;
    case LOOM_AXIS_PP: return m->pp;
    case LOOM_AXIS_DP_SHARD: return m->dp_shard;
    case LOOM_AXIS_DP_REPLICA: return m->dp_replica;
    case LOOM_AXIS_CP: return m->cp;
  }
  return -1;
}
static loom_comm *host_comm(loom_host *h, loom_axis axis) {
  return (unsigned)axis < 7 ? h->rt->mesh.axis[axis] : NULL;
}

/* ---- collectives, counted ---- */
static int comm_size_of(loom_runtime *rt, loom_comm *c) {
  if (c && c == rt->emb_comm) return 2 * rt->mesh.dp;
  for (int a = 0; a < 7; a++)
    if (rt->mesh.axis[a] == c) return host_size(&rt->comm_host, (loom_axis)a);
  return 0;
}

static void count(loom_runtime *rt, double bytes) {
  rt->comm_stats.bytes_sent += (uint64_t)(bytes + 0.5);
  rt->comm_stats.ops++;
}

/* The comm plugin reports errors through its own host handle; move the message to the caller's
 * handle so it is printed with the plugin that made the call. */
static int forward_error(loom_host *h, int rc) {
  if (rc != LOOM_OK)
    snprintf(h->error, sizeof h->error, "communication failed: %s", h->rt->comm_host.error);
  return rc;
}

#define COMM(rt) (&(rt)->comm_plugin.u.comm)

/* A plugin's small host-memory control traffic (agreeing on a flag, a step number) on a device
 * whose memory is not host memory: the comm plugin takes device memory only (comm_v1.h), so the
 * host bounces the values through the device. Blocking only: an asynchronous collective on
 * host memory there is a plugin bug, refused with a message. 1 when it applies (*rc set). */
static int host_memory_bounce(loom_host *h, const void *buf, loom_request **req, int *rc) {
  loom_runtime *rt = h->rt;
  if (!rt->dev.ops || LOOM_DEVICE_HOST_ADDRESSABLE(rt->dev.ops) || !buf ||
      loom__dev_owns(&rt->dev, buf))
    return 0;
  if (req) {
    snprintf(h->error, sizeof h->error, "an asynchronous collective on host memory (%p): the "
             "%s device's memory is not host memory, so buffers must come from the host API's "
             "alloc (blocking calls on a few host values are bounced)", buf, rt->dev.ops->hdr.name);
    *rc = LOOM_INVALID_USAGE;
  } else {
    *rc = LOOM_OK;
  }
  return 1;
}

static int host_all_reduce(loom_host *h, loom_comm *c, void *buf, size_t count_, loom_dtype dt,
                           loom_red_op op, loom_request **req) {
  loom_runtime *rt = h->rt;
  int n = comm_size_of(rt, c);
  if (n > 1) count(rt, 2.0 * (n - 1) / n * (double)(count_ * loom_dtype_size(dt)));
  int rc;
  if (host_memory_bounce(h, buf, req, &rc))
    return rc != LOOM_OK ? rc : forward_error(h, loom__ctl_all_reduce(rt, c, buf, count_, dt, op));
  return forward_error(h, COMM(rt)->all_reduce(rt->comm_ctx, c, buf, count_, dt, op, req));
}
static int host_reduce_scatter(loom_host *h, loom_comm *c, const void *send, void *recv,
                               size_t recv_count, loom_dtype dt, loom_red_op op,
                               loom_request **req) {
  loom_runtime *rt = h->rt;
  int n = comm_size_of(rt, c);
  if (n > 1) count(rt, (double)(n - 1) * (double)(recv_count * loom_dtype_size(dt)));
  return forward_error(h, COMM(rt)->reduce_scatter(rt->comm_ctx, c, send, recv, recv_count, dt,
                                                   op, req));
}
static int host_all_gather(loom_host *h, loom_comm *c, const void *send, void *recv,
                           size_t send_count, loom_dtype dt, loom_request **req) {
  loom_runtime *rt = h->rt;
  int n = comm_size_of(rt, c);
  if (n > 1) count(rt, (double)(n - 1) * (double)(send_count * loom_dtype_size(dt)));
  return forward_error(h, COMM(rt)->all_gather(rt->comm_ctx, c, send, recv, send_count, dt,
                                               req));
}
static int host_broadcast(loom_host *h, loom_comm *c, void *buf, size_t count_, loom_dtype dt,
                          int root, loom_request **req) {
  loom_runtime *rt = h->rt;
  if (comm_size_of(rt, c) > 1 && host_rank(h, LOOM_AXIS_WORLD) >= 0)
    count(rt, (double)(count_ * loom_dtype_size(dt)));
  int rc;
  if (host_memory_bounce(h, buf, req, &rc))
    return rc != LOOM_OK ? rc : forward_error(h, loom__ctl_broadcast(rt, c, buf, count_, dt, root));
  return forward_error(h, COMM(rt)->broadcast(rt->comm_ctx, c, buf, count_, dt, root, req));
}
static int host_send(loom_host *h, loom_comm *c, const void *buf, size_t count_, loom_dtype dt,
                     int peer, int tag, loom_request **req) {
  loom_runtime *rt = h->rt;
  count(rt, (double)(count_ * loom_dtype_size(dt)));
  return forward_error(h, COMM(rt)->send(rt->comm_ctx, c, buf, count_, dt, peer, tag, req));
}
static int host_recv(loom_host *h, loom_comm *c, void *buf, size_t count_, loom_dtype dt,
                     int peer, int tag, loom_request **req) {
  loom_runtime *rt = h->rt;
  return forward_error(h, COMM(rt)->recv(rt->comm_ctx, c, buf, count_, dt, peer, tag, req));
}
static int host_test(loom_host *h, loom_request *req, int *done) {
  return forward_error(h, COMM(h->rt)->test(h->rt->comm_ctx, req, done));
}
static int host_wait(loom_host *h, loom_request *req) {
  return forward_error(h, COMM(h->rt)->wait(h->rt->comm_ctx, req));
}
static int host_barrier(loom_host *h, loom_comm *c) {
  return forward_error(h, COMM(h->rt)->barrier(h->rt->comm_ctx, c));
}

static int host_reduce_scatter_v(loom_host *h, loom_comm *c, const void *send, void *recv,
                                 const size_t *counts, loom_dtype dt, loom_red_op op,
                                 loom_request **req) {
  loom_runtime *rt = h->rt;
  int n = comm_size_of(rt, c);
  if (n > 1) {
    size_t total = 0;
    for (int i = 0; i < n; i++) total += counts[i];
    count(rt, (double)(n - 1) / n * (double)(total * loom_dtype_size(dt)));
  }
  return forward_error(h, COMM(rt)->reduce_scatter_v(rt->comm_ctx, c, send, recv, counts, dt,
                                                     op, req));
}
static int host_all_gather_v(loom_host *h, loom_comm *c, const void *send, void *recv,
                             const size_t *counts, loom_dtype dt, loom_request **req) {
  loom_runtime *rt = h->rt;
  int n = comm_size_of(rt, c);
  if (n > 1) {
    size_t total = 0;
    for (int i = 0; i < n; i++) total += counts[i];
    count(rt, (double)(n - 1) / n * (double)(total * loom_dtype_size(dt)));
  }
  return forward_error(h, COMM(rt)->all_gather_v(rt->comm_ctx, c, send, recv, counts, dt, req));
}

/* ---- device ---- */
static void *host_alloc(loom_host *h, size_t bytes, loom_mem_category cat) {
  void *p = loom__dev_alloc(&h->rt->dev, bytes, cat);
  if (!p)
    snprintf(h->error, sizeof h->error, "out of device memory allocating %zu bytes (%s)",
             bytes, loom__mem_category_name(cat));
  return p;
}
static void host_free(loom_host *h, void *ptr) { loom__dev_free(&h->rt->dev, ptr); }
static const loom_device_v1 *host_device(loom_host *h, void **device_ctx) {
  if (device_ctx) *device_ctx = h->rt->dev.ctx;
  return h->rt->dev.ops;
}

static const loom_model_v1 *host_model(loom_host *h) {
  return h->rt->model_view.numel ? &h->rt->model_view : NULL;
}

static int host_adamw_range(loom_host *h, const loom_step_args_v1 *a, uint64_t begin,
                            uint64_t n, float *param, const float *grad, float *m, float *v) {
  loom_runtime *rt = h->rt;
  const loom_model_v1 *mv = &rt->model_view;
  if (begin + n > mv->numel) {
    snprintf(h->error, sizeof h->error, "adamw_range [%llu, %llu) outside the model (%llu)",
             (unsigned long long)begin, (unsigned long long)(begin + n),
             (unsigned long long)mv->numel);
    return LOOM_INVALID_USAGE;
  }
  uint64_t end = begin + n;
  for (int i = 0; i < mv->n_tensors; i++) {
    const loom_tensor_v1 *t = LOOM_TENSOR_AT(mv, i);
    uint64_t lo = t->offset > begin ? t->offset : begin;
    uint64_t hi = t->offset + t->numel < end ? t->offset + t->numel : end;
    if (lo >= hi) continue;
    uint64_t k = lo - begin;
    rt->dev.ops->adamw(rt->dev.ctx, param + k, grad + k, m + k, v + k, (size_t)(hi - lo), a->lr,
                       a->beta1, a->beta2, a->eps, t->weight_decay ? a->weight_decay : 0.0f,
                       a->grad_scale, a->step);
  }
  return LOOM_OK;
}

static int storage_dtype_ok(loom_dtype dt) {
  return dt == LOOM_F32 || dt == LOOM_BF16 || dt == LOOM_F16;
}

/* AdamW on the fp32 master with a gradient in grad_dtype, then the rounded copy into param.
 * 16-bit gradients are widened per tensor segment in chunks of rt->stage: AdamW is
 * elementwise, so the chunking changes no bit. */
static int host_adamw_range_mixed(loom_host *h, const loom_step_args_v1 *a, uint64_t begin,
                                  uint64_t n, float *master, const void *grad,
                                  loom_dtype grad_dtype, float *m, float *v, void *param,
                                  loom_dtype param_dtype) {
  loom_runtime *rt = h->rt;
  if (!storage_dtype_ok(grad_dtype) || !storage_dtype_ok(param_dtype)) {
    snprintf(h->error, sizeof h->error, "adamw_range_mixed: gradient dtype %d / parameter "
             "dtype %d: expected fp32, bf16 or fp16", (int)grad_dtype, (int)param_dtype);
    return LOOM_INVALID_USAGE;
  }
  if (grad_dtype == LOOM_F32) {
    int rc = host_adamw_range(h, a, begin, n, master, grad, m, v);
    if (rc != LOOM_OK) return rc;
  } else {
    const loom_model_v1 *mv = &rt->model_view;
    if (begin + n > mv->numel || !rt->stage) {
      snprintf(h->error, sizeof h->error, "adamw_range_mixed [%llu, %llu) outside the model "
               "(%llu) or called before setup", (unsigned long long)begin,
               (unsigned long long)(begin + n), (unsigned long long)mv->numel);
      return LOOM_INVALID_USAGE;
    }
    const size_t es = loom_dtype_size(grad_dtype);
    uint64_t end = begin + n;
    for (int i = 0; i < mv->n_tensors; i++) {
      const loom_tensor_v1 *t = LOOM_TENSOR_AT(mv, i);
      uint64_t lo = t->offset > begin ? t->offset : begin;
      uint64_t hi = t->offset + t->numel < end ? t->offset + t->numel : end;
      if (lo >= hi) continue; /* outside a partition that does not start at 0 */
      for (uint64_t k = lo - begin; k < hi - begin; k += LOOM_STAGE_FLOATS) {
        size_t c = (size_t)(hi - begin - k < LOOM_STAGE_FLOATS ? hi - begin - k
                                                                : LOOM_STAGE_FLOATS);
        rt->dev.ops->convert(rt->dev.ctx, rt->stage, LOOM_F32, (const char *)grad + k * es,
                             grad_dtype, c);
        rt->dev.ops->adamw(rt->dev.ctx, master + k, rt->stage, m + k, v + k, c, a->lr,
                           a->beta1, a->beta2, a->eps,
                           t->weight_decay ? a->weight_decay : 0.0f, a->grad_scale, a->step);
      }
    }
  }
  if (param && param != (void *)master) {
    int rc = rt->dev.ops->convert(rt->dev.ctx, param, param_dtype, master, LOOM_F32, (size_t)n);
    if (rc != LOOM_OK) {
      snprintf(h->error, sizeof h->error, "adamw_range_mixed: the device cannot convert fp32 "
               "to dtype %d", (int)param_dtype);
      return rc;
    }
  }
  return LOOM_OK;
}

/* ---- ZeRO support ---- */
static int host_set_partition(loom_host *h, const loom_partition_v1 *p) {
  loom_runtime *rt = h->rt;
  int me = (int)(h - rt->parallel_host);
  if (me < 0 || me >= rt->n_parallel) {
    snprintf(h->error, sizeof h->error, "set_partition: only parallel plugins may publish one");
    return LOOM_INVALID_USAGE;
  }
  if (rt->partition_owner >= 0 && rt->partition_owner != me) {
    snprintf(h->error, sizeof h->error, "set_partition: %s already published the partition",
             rt->parallel_host[rt->partition_owner].label);
    return LOOM_INVALID_USAGE;
  }
  if (!p || p->begin + p->count > rt->model_view.numel || (p->count && (!p->params || !p->grads))) {
    snprintf(h->error, sizeof h->error, "set_partition: range or buffers invalid");
    return LOOM_INVALID_USAGE;
  }
  memset(&rt->partition, 0, sizeof rt->partition);
  memcpy(&rt->partition, p, p->struct_size < sizeof rt->partition ? p->struct_size
                                                                  : sizeof rt->partition);
  rt->partition.struct_size = sizeof rt->partition;
  rt->partition_owner = me;
  return LOOM_OK;
}
static const loom_partition_v1 *host_partition(loom_host *h) { return &h->rt->partition; }
static int host_init_params_range(loom_host *h, uint64_t begin, uint64_t n, float *dst) {
  loom_runtime *rt = h->rt;
  if (begin + n > rt->model.num_parameters) {
    snprintf(h->error, sizeof h->error, "init_params_range: [%llu, +%llu) outside the model",
             (unsigned long long)begin, (unsigned long long)n);
    return LOOM_INVALID_USAGE;
  }
  if (rt->init_file) /* init_from: this range of the file, read by this rank only */
    return loom__model_file_fill(rt->init_file, &rt->model, begin, n, dst, h->error,
                                 sizeof h->error) == 0 ? LOOM_OK : LOOM_IO;
  gpt_init_weights_range(&rt->model, rt->cfg->train.seed, begin, n, dst);
  return LOOM_OK;
}

static int host_n_micro(loom_host *h) { return h->rt->cfg->train.grad_accum_steps; }
static int host_n_chunks(loom_host *h) { return h->rt->pp_chunks > 1 ? h->rt->pp_chunks : 1; }

static const int32_t *host_micro_tokens(loom_host *h, size_t *n) {
  const gpt_model *m = &h->rt->model;
  *n = m->inputs ? (size_t)m->B * (size_t)m->T : 0;
  return m->inputs;
}

static int host_grads_predivided(loom_host *h) { return loom__grads_predivided(h->rt); }

/* The tests' faults decide (test_hooks.c): a crash armed at `name` ends the process here. */
static int host_fault_point(loom_host *h, const char *name) {
  (void)h;
  return loom__fault_point(name);
}

static const loom_host_api_v1 host_api = {
  .struct_size = sizeof(loom_host_api_v1),
  .abi_major = LOOM_ABI_MAJOR,
  .abi_minor = LOOM_ABI_MINOR,
  .log = host_log,
  .set_error = host_set_error,
  .opt_int = host_opt_int,
  .opt_double = host_opt_double,
  .opt_bool = host_opt_bool,
  .opt_string = host_opt_string,
  .opt_check_keys = host_opt_check_keys,
  .rank = host_rank,
  .size = host_size,
  .comm = host_comm,
  .all_reduce = host_all_reduce,
  .reduce_scatter = host_reduce_scatter,
  .all_gather = host_all_gather,
  .broadcast = host_broadcast,
  .send = host_send,
  .recv = host_recv,
  .test = host_test,
  .wait = host_wait,
  .barrier = host_barrier,
  .alloc = host_alloc,
  .free = host_free,
  .device = host_device,
  .model = host_model,
  .adamw_range = host_adamw_range,
  .reduce_scatter_v = host_reduce_scatter_v,
  .all_gather_v = host_all_gather_v,
  .set_partition = host_set_partition,
  .partition = host_partition,
  .init_params_range = host_init_params_range,
  .opt_object = host_opt_object,
  .n_micro = host_n_micro,
  .adamw_range_mixed = host_adamw_range_mixed,
  .micro_tokens = host_micro_tokens,
  .grads_predivided = host_grads_predivided,
  .fault_point = host_fault_point,
  .n_chunks = host_n_chunks,
};

const loom_host_api_v1 *loom__host_api(void) { return loom__abi_host_table(&host_api); }

int loom__launcher_rank(void) {
  static const char *vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    if (v && *v) return atoi(v);
  }
  return 0;
}
