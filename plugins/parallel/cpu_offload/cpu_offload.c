/* cpu_offload.so — the optimizer step on the host (ZeRO-Offload, Ren et al. 2021, §4; DeepSpeed's
 * "offload_optimizer": {"device": "cpu"}).
 *
 * Role: OPTIMIZER on the data-parallel axis. It composes with whatever owns gradient sync and
 * the partition: with ddp the partition is the whole model (replicated on every rank); with
 * zero1/zero2/zero3 it is this rank's shard, published by that plugin in its setup() — which
 * runs before ours, because the host sets the optimizer owner up last.
 *
 * Memory: for the partition [begin, begin + count) it keeps, in host memory (LOOM_MEM_HOST, so
 * the device's optimizer category stays empty and the move is visible in the metrics):
 *   m, v      AdamW's moments                 8 bytes per element (what leaves the device)
 *   master    fp32 master copy of the params  4 bytes per element
 *   gstage    the gradient, staged to host    4 bytes per element
 * i.e. 16 bytes per partition element on the host and 0 optimizer bytes on the device.
 *
 * 16-bit storage (ABI 1.4: the model's param_dtype / grad_dtype bf16 or fp16): the fp32
 * master is the partition's (loom_partition_v1.master), which the host allocates in host
 * memory (LOOM_MEM_HOST) when a plugin owns the optimizer step, initialises, checkpoints and
 * restores; this plugin keeps m, v and the gradient staged in its own dtype (2 bytes, or 4
 * with accumulation over micro-batches): 12 + 2 bytes per element on the host. The step widens
 * the staged gradient element by element (exact), steps the master in fp32 with the same
 * expression, and writes the 16-bit parameters rounded from it (device_v1.convert: round to
 * nearest even, as the host's own step does). It needs a host-addressable device (the master
 * is host memory the device's convert reads).
 *
 * Step: device->to_host(gradient) -> AdamW on the host over master/m/v (OpenMP + SIMD, the
 * device kernel's formula, weight decay only where the tensor says so) -> device->from_host(
 * master -> partition.params). On the CPU device the two copies are memcpy; on a GPU they are
 * the PCIe transfers ZeRO-Offload pays for. The sharding plugin (zero1/2/3) then all-gathers
 * the updated shards in its end_step, as it does after the host's own AdamW.
 *
 * The master copy is filled from the device parameters lazily, at the first optimizer step of
 * the process: by then a checkpoint resume has loaded the parameters (after setup), so the
 * master copy is never stale. m and v are checkpointed as "optim.m" / "optim.v" chunks of the
 * partition — the host's own item names and layout — so a checkpoint saved with or without
 * offloading resumes either way, on any world size the checkpoint plugin can reshard to.
 *
 * Options (DeepSpeed's names; the whole plugin *is* the optimizer offload):
 *   "offload_optimizer": {"device": "cpu" (default) | "none", "pin_memory": bool}
 *                                                   "none" is refused: remove the plugin instead
 *   "pin_memory": false                             accepted; a no-op on the CPU device
 *   "offload_param": "none" (default) | "cpu"       "cpu" (ZeRO-3 parameter offload) is refused:
 *                                                   not supported yet
 * DeepSpeed writes these as objects ({"device": "cpu", "pin_memory": true}), read through the
 * host's opt_object; the plain string form ("offload_optimizer": "cpu") works too.
 *
 * Host memory: the buffers come from api->alloc(LOOM_MEM_HOST). That is host memory on a
 * host-addressable device (the CPU one). On a device whose memory is not host-addressable the
 * ABI 1.0 host would hand back device memory for that category too, so this plugin then falls
 * back to malloc (not counted in the metrics) and says so in the log. */
#include <loom/loom.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "offload_estimate.h"

#define PLUGIN_NAME "cpu_offload"
#define PAR_MIN 32768 /* elements below which the host AdamW loop stays on one thread */

typedef struct offload {
  const loom_host_api_v1 *api;
  loom_host *host;
  int pin_memory;             /* option, recorded (no-op on the CPU device) */
  int dp, dp_rank;
  const loom_device_v1 *dev;
  void *dev_ctx;
  const loom_model_v1 *model;
  loom_partition_v1 part;     /* copy of the host's partition at setup */
  int host_accounted;         /* 1: buffers from api->alloc(LOOM_MEM_HOST); 0: malloc */
  loom_dtype pdt, gdt;        /* the storage plan's param_dtype / grad_dtype */
  size_t gel;                 /* bytes per gradient element */
  float *m, *v, *master;      /* host, part.count floats each; master only with fp32 storage
                                 (16-bit: the partition's master, see above) */
  void *gstage;               /* host, part.count gradient elements */
  int master_fresh;           /* master holds the device parameters (after the first step) */
  /* checkpoint items must be device memory (checkpoint_v1.h): on a device whose memory is not
   * host memory, state_items hands out device copies of m and v (LOOM_MEM_OTHER), read back
   * into the host state at the next step (a resume wrote them) and freed then */
  float *dev_m, *dev_v;
  /* per-tensor segments of the partition: [lo, hi) in partition-relative elements */
  int n_seg;
  struct seg { uint64_t lo, hi; int wd; } *seg;
} offload;

/* ---- options ---- */

/* A device option, in DeepSpeed's object form {"device": "cpu", "pin_memory": true} or as the
 * plain string "cpu" / "none". */
static int device_option(offload *o, const loom_options *opts, const char *key,
                         const char *dflt, const char **out) {
  const loom_host_api_v1 *api = o->api;
  const loom_options *sub = NULL;
  int rc = LOOM_HOST_HAS(api, opt_object) ? api->opt_object(o->host, opts, key, &sub) : 1;
  if (rc == LOOM_OK && sub) {
    static const char *const keys[] = {"device", "pin_memory", NULL};
    rc = api->opt_check_keys(o->host, sub, keys);
    if (!rc) rc = api->opt_string(o->host, sub, "device", dflt, out);
    if (!rc) rc = api->opt_bool(o->host, sub, "pin_memory", o->pin_memory, &o->pin_memory);
    if (rc) return rc;
  } else if (api->opt_string(o->host, opts, key, dflt, out) != LOOM_OK) {
    api->set_error(o->host, "%s: expected {\"device\": \"cpu\"} or \"cpu\" / \"none\"", key);
    return LOOM_INVALID_CONFIG;
  }
  if (strcmp(*out, "cpu") != 0 && strcmp(*out, "none") != 0) {
    api->set_error(o->host, "%s.device: expected \"cpu\" or \"none\", got \"%s\" (this "
                   "plugin offloads to host memory only; NVMe is not supported)", key, *out);
    return LOOM_INVALID_CONFIG;
  }
  return LOOM_OK;
}

static int off_create(const loom_host_api_v1 *api, loom_host *host, const loom_options *opts,
                      void **ctx) {
  static const char *const keys[] = {"offload_optimizer", "offload_param", "pin_memory", NULL};
  int rc = api->opt_check_keys(host, opts, keys);
  if (rc != LOOM_OK) return rc;
  offload *o = calloc(1, sizeof *o);
  if (!o) {
    api->set_error(host, "out of memory");
    return LOOM_NOMEM;
  }
  o->api = api;
  o->host = host;
  const char *optim_dev = NULL, *param_dev = NULL;
  rc = api->opt_bool(host, opts, "pin_memory", 0, &o->pin_memory); /* the nested one wins */
  if (!rc) rc = device_option(o, opts, "offload_optimizer", "cpu", &optim_dev);
  if (!rc) rc = device_option(o, opts, "offload_param", "none", &param_dev);
  if (!rc && strcmp(optim_dev, "none") == 0) {
    api->set_error(host, "offload_optimizer: \"none\" keeps the optimizer on the device, which "
                   "is what leaving this plugin out does: remove {\"plugin\": \"cpu_offload\"} "
                   "from \"parallel\" (the host, or the ZeRO plugin's partition, then runs "
                   "AdamW on the device)");
    rc = LOOM_INVALID_CONFIG;
  }
  if (!rc && strcmp(param_dev, "cpu") == 0) {
    api->set_error(host, "offload_param: \"cpu\" (ZeRO-3 parameter partitions in host memory) "
                   "is not supported yet; remove offload_param or set it to \"none\" "
                   "(the optimizer offload works with zero3 without it)");
    rc = LOOM_UNSUPPORTED;
  }
  if (rc != LOOM_OK) {
    free(o);
    return rc;
  }
  o->dp = api->size(host, LOOM_AXIS_DP);
  o->dp_rank = api->rank(host, LOOM_AXIS_DP);
  *ctx = o;
  return LOOM_OK;
}

/* ---- host buffers ---- */

static void *host_buf_el(offload *o, size_t n, size_t el) {
  size_t bytes = n * el;
  if (o->host_accounted) return o->api->alloc(o->host, bytes, LOOM_MEM_HOST);
  void *p = NULL;
  size_t rounded = (bytes + 63) / 64 * 64;
  if (posix_memalign(&p, 64, rounded ? rounded : 64) != 0) return NULL;
  memset(p, 0, rounded);
  return p;
}

static float *host_buf(offload *o, size_t n) { return host_buf_el(o, n, sizeof(float)); }

static void host_buf_free(offload *o, void *p) {
  if (!p) return;
  if (o->host_accounted) o->api->free(o->host, p);
  else free(p);
}

static void off_destroy(void *ctx) {
  offload *o = ctx;
  if (!o) return;
  host_buf_free(o, o->m);
  host_buf_free(o, o->v);
  host_buf_free(o, o->master);
  host_buf_free(o, o->gstage);
  if (o->dev_m) o->api->free(o->host, o->dev_m);
  if (o->dev_v) o->api->free(o->host, o->dev_v);
  free(o->seg);
  free(o);
}

/* The partition is final here: a ZeRO plugin's setup (run before ours) published it. */
static int off_setup(void *ctx) {
  offload *o = ctx;
  const loom_host_api_v1 *api = o->api;
  o->model = api->model(o->host);
  o->dev = api->device(o->host, &o->dev_ctx);
  const loom_partition_v1 *p = api->partition(o->host);
  if (!o->model || !o->dev || !p) {
    api->set_error(o->host, "setup: the host gave no model, device or partition");
    return LOOM_INVALID_USAGE;
  }
  memset(&o->part, 0, sizeof o->part);
  memcpy(&o->part, p, p->struct_size < sizeof o->part ? p->struct_size : sizeof o->part);
  const loom_model_v1 *m = o->model;
  uint64_t begin = o->part.begin, end = begin + o->part.count;
  if (end > m->numel || (o->part.count && (!o->part.params || !o->part.grads))) {
    api->set_error(o->host, "setup: partition [%llu, %llu) of a %llu-parameter model has no "
                   "buffers or lies outside it", (unsigned long long)begin,
                   (unsigned long long)end, (unsigned long long)m->numel);
    return LOOM_INVALID_USAGE;
  }
  /* tensor boundaries inside the partition, for per-tensor weight decay */
  o->seg = calloc((size_t)m->n_tensors + 1, sizeof *o->seg);
  if (!o->seg) {
    api->set_error(o->host, "out of host memory");
    return LOOM_NOMEM;
  }
  for (int i = 0; i < m->n_tensors; i++) {
    const loom_tensor_v1 *t = LOOM_TENSOR_AT(m, i);
    uint64_t lo = t->offset > begin ? t->offset : begin;
    uint64_t hi = t->offset + t->numel < end ? t->offset + t->numel : end;
    if (lo >= hi) continue;
    int wd = t->weight_decay != 0;
    if (o->n_seg && o->seg[o->n_seg - 1].wd == wd && o->seg[o->n_seg - 1].hi == lo - begin)
      o->seg[o->n_seg - 1].hi = hi - begin; /* merge neighbours with the same decay */
    else
      o->seg[o->n_seg++] = (struct seg){lo - begin, hi - begin, wd};
  }

  const loom_storage_plan_v1 plan = loom_storage_plan_of(api, o->host, m);
  o->pdt = plan.param_dtype;
  o->gdt = plan.grad_dtype;
  o->gel = loom_dtype_size(o->gdt);
  o->host_accounted = (o->dev->hdr.caps & LOOM_DEVICE_CAP_HOST_ADDRESSABLE) != 0;
  if (o->pdt != LOOM_F32 && (!o->host_accounted || !LOOM_HAS(o->dev, convert))) {
    api->set_error(o->host, "16-bit parameter storage needs a host-addressable device with "
                   "convert (the fp32 master is host memory the device rounds from); device "
                   "'%s' is not", o->dev->hdr.name ? o->dev->hdr.name : "?");
    return LOOM_UNSUPPORTED;
  }
  if ((o->gdt != LOOM_F32 && o->gdt != LOOM_BF16 && o->gdt != LOOM_F16) ||
      (o->pdt != LOOM_F32 && o->pdt != LOOM_BF16 && o->pdt != LOOM_F16)) {
    api->set_error(o->host, "storage dtypes %d/%d: expected fp32, bf16 or fp16", (int)o->pdt,
                   (int)o->gdt);
    return LOOM_UNSUPPORTED;
  }
  if (!o->host_accounted)
    api->log(o->host, LOOM_LOG_WARN, "device '%s' is not host-addressable: optimizer state "
             "goes to malloc'ed host memory, not counted in the metrics' host category",
             o->dev->hdr.name ? o->dev->hdr.name : "?");
  if (o->pin_memory && o->host_accounted)
    api->log(o->host, LOOM_LOG_INFO, "pin_memory: no-op on the %s device (its memory is host "
             "memory already)", o->dev->hdr.name ? o->dev->hdr.name : "?");
  size_t n = (size_t)o->part.count;
  if (n) {
    o->m = host_buf(o, n);
    o->v = host_buf(o, n);
    if (o->pdt == LOOM_F32) o->master = host_buf(o, n);
    o->gstage = host_buf_el(o, n, o->gel);
    if (!o->m || !o->v || (o->pdt == LOOM_F32 && !o->master) || !o->gstage) {
      api->set_error(o->host, "out of host memory for the optimizer state of %zu parameters "
                     "(%.1f MiB)", n, (12.0 + (double)o->gel) * (double)n / 1048576.0);
      return LOOM_NOMEM;
    }
  }
  api->log(o->host, LOOM_LOG_DEBUG, "AdamW of [%llu, %llu) (%s, %d segments) on the host: "
           "m, v, master, gradient staging = %.2f MiB", (unsigned long long)begin,
           (unsigned long long)end, o->part.sharded ? "this rank's shard" : "replicated",
           o->n_seg, (12.0 + (double)o->gel) * (double)n / 1048576.0);
  return LOOM_OK;
}

/* ---- the step ---- */

/* AdamW over n host elements; the same expression, in the same order, as the CPU device's
 * kernel (core/device/cpu_device.c), so an offloaded run matches a device run bit for bit. */
static void adamw_host(float *restrict p, const float *restrict g_in, float *restrict m,
                       float *restrict v, size_t n, float lr, float beta1, float beta2,
                       float eps, float wd, float grad_scale, float bc1, float bc2) {
  ptrdiff_t len = (ptrdiff_t)n;
#pragma omp parallel for simd schedule(static) if (len > PAR_MIN)
  for (ptrdiff_t i = 0; i < len; i++) {
    float g = g_in[i] * grad_scale;
    float mi = beta1 * m[i] + (1.0f - beta1) * g;
    float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    float mhat = mi / bc1, vhat = vi / bc2;
    p[i] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * p[i]);
    m[i] = mi;
    v[i] = vi;
  }
}

/* A 16-bit value widened to fp32 (exact). bf16: the upper half of an fp32. fp16: sign,
 * exponent rebiased 15 -> 127, subnormals normalised, inf/NaN kept. */
static inline float widen_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline float widen_f16(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, mant = h & 0x3ffu, u;
  if (e == 0x1f) {
    u = sign | 0x7f800000u | (mant << 13);
  } else if (e) {
    u = sign | ((e + 112u) << 23) | (mant << 13);
  } else if (!mant) {
    u = sign;
  } else { /* subnormal: mant * 2^-24, normalised */
    int sh = 0;
    while (!(mant & 0x400u)) mant <<= 1, sh++;
    u = sign | ((uint32_t)(113 - sh) << 23) | ((mant & 0x3ffu) << 13);
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* adamw_host with a 16-bit gradient (bf16 when is_bf16, else fp16), widened per element: the
 * same expression on the same fp32 values as the host's step on widened gradients. */
static void adamw_host16(float *restrict p, const uint16_t *restrict g_in, int is_bf16,
                         float *restrict m, float *restrict v, size_t n, float lr, float beta1,
                         float beta2, float eps, float wd, float grad_scale, float bc1,
                         float bc2) {
  ptrdiff_t len = (ptrdiff_t)n;
#pragma omp parallel for schedule(static) if (len > PAR_MIN)
  for (ptrdiff_t i = 0; i < len; i++) {
    float g = (is_bf16 ? widen_bf16(g_in[i]) : widen_f16(g_in[i])) * grad_scale;
    float mi = beta1 * m[i] + (1.0f - beta1) * g;
    float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    float mhat = mi / bc1, vhat = vi / bc2;
    p[i] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * p[i]);
    m[i] = mi;
    v[i] = vi;
  }
}

static int off_optimizer_step(void *ctx, const loom_step_args_v1 *a) {
  offload *o = ctx;
  size_t n = (size_t)o->part.count;
  if (!n) return LOOM_OK;
  size_t bytes = n * sizeof(float);
  float *master = o->master;
  if (o->pdt != LOOM_F32) {
    /* the partition's fp32 master (host memory, set by the host after setup) */
    const loom_partition_v1 *p = o->api->partition(o->host);
    master = p ? LOOM_PARTITION_MASTER(p) : NULL;
    if (!master) {
      o->api->set_error(o->host, "16-bit parameter storage but the host published no fp32 "
                        "master for the partition (loom_partition_v1.master)");
      return LOOM_INVALID_USAGE;
    }
  } else if (!o->master_fresh) { /* first step of this process: after init or a resume's load */
    o->dev->to_host(o->dev_ctx, o->master, o->part.params, bytes);
    o->master_fresh = 1;
  }
  if (o->dev_m) { /* the checkpoint items' device copies: a resume loaded m and v into them */
    o->dev->to_host(o->dev_ctx, o->m, o->dev_m, bytes);
    o->dev->to_host(o->dev_ctx, o->v, o->dev_v, bytes);
    o->api->free(o->host, o->dev_m);
    o->api->free(o->host, o->dev_v);
    o->dev_m = o->dev_v = NULL;
  }
  o->dev->to_host(o->dev_ctx, o->gstage, o->part.grads, n * o->gel);
  /* a host-side field of the args, read through the compat accessor */
  float grad_scale = LOOM_STEP_GRAD_SCALE(a);
  const float bc1 = (float)(1.0 - pow((double)a->beta1, a->step));
  const float bc2 = (float)(1.0 - pow((double)a->beta2, a->step));
  for (int s = 0; s < o->n_seg; s++) {
    const struct seg *sg = &o->seg[s];
    float wd = sg->wd ? a->weight_decay : 0.0f;
    size_t len = (size_t)(sg->hi - sg->lo);
    if (o->gdt == LOOM_F32)
      adamw_host(master + sg->lo, (const float *)o->gstage + sg->lo, o->m + sg->lo,
                 o->v + sg->lo, len, a->lr, a->beta1, a->beta2, a->eps, wd, grad_scale, bc1,
                 bc2);
    else
      adamw_host16(master + sg->lo, (const uint16_t *)o->gstage + sg->lo,
                   o->gdt == LOOM_BF16, o->m + sg->lo, o->v + sg->lo, len, a->lr, a->beta1,
                   a->beta2, a->eps, wd, grad_scale, bc1, bc2);
  }
  if (o->pdt == LOOM_F32) {
    o->dev->from_host(o->dev_ctx, o->part.params, master, bytes);
  } else if (o->dev->convert(o->dev_ctx, o->part.params, o->pdt, master, LOOM_F32, n) !=
             LOOM_OK) { /* the 16-bit parameters, rounded from the master */
    o->api->set_error(o->host, "the device cannot round fp32 to dtype %d", (int)o->pdt);
    return LOOM_UNSUPPORTED;
  }
  return LOOM_OK;
}

/* m and v as the host names them: chunks of the partition, so checkpoints interoperate with
 * runs that keep the optimizer on the device. The master copy is not saved here: in fp32 it
 * equals the parameters, which the host saves, and it is refreshed from them after a resume;
 * with 16-bit storage it is the partition's master, which the host saves and restores as the
 * parameter values. */
static int off_state_items(void *ctx, loom_ckpt_item_v1 *items, int max, int *n) {
  offload *o = ctx;
  *n = 0;
  if (!o->part.count) return LOOM_OK;
  if (max < 2) {
    o->api->set_error(o->host, "state_items: room for %d items, need 2", max);
    return LOOM_INVALID_USAGE;
  }
  /* disjoint partitions: each rank writes its chunk; under hybrid sharding (ABI 1.11) the
   * replica groups hold the same chunks, so only the first replica writes */
  int replica = o->api->abi_minor >= 11 ? o->api->rank(o->host, LOOM_AXIS_DP_REPLICA) : 0;
  int writer = o->part.sharded ? replica == 0 : o->dp_rank == 0;
  const char *names[2] = {"optim.m", "optim.v"};
  float *bufs[2] = {o->m, o->v};
  if (!o->host_accounted) { /* host state on a non-host-addressable device: device copies */
    size_t bytes = (size_t)o->part.count * sizeof(float);
    if (!o->dev_m) o->dev_m = o->api->alloc(o->host, bytes, LOOM_MEM_OTHER);
    if (!o->dev_v) o->dev_v = o->api->alloc(o->host, bytes, LOOM_MEM_OTHER);
    if (!o->dev_m || !o->dev_v) return LOOM_NOMEM; /* alloc set the error */
    o->dev->from_host(o->dev_ctx, o->dev_m, o->m, bytes);
    o->dev->from_host(o->dev_ctx, o->dev_v, o->v, bytes);
    bufs[0] = o->dev_m;
    bufs[1] = o->dev_v;
  }
  for (int k = 0; k < 2; k++)
    items[k] = (loom_ckpt_item_v1){.struct_size = sizeof(loom_ckpt_item_v1), .name = names[k],
                                   .dtype = LOOM_F32, .global_numel = o->model->numel,
                                   .offset = o->part.begin, .count = o->part.count,
                                   .data = bufs[k], .writer = writer};
  /* asked for on save and on resume; a resume writes m, v here and the parameters on the
   * device, so the master copy is refreshed from them at the next step (after a save that is
   * a harmless re-read of identical values) */
  o->master_fresh = 0;
  *n = 2;
  return LOOM_OK;
}

/* ABI 1.6: what the offload holds for `plan` (offload_estimate.c), after create() validated
 * the options (it reads only them and the planned mesh). */
static int off_estimate(const loom_host_api_v1 *api, loom_host *host, const loom_options *opts,
                        const loom_estimate_plan_v1 *plan, loom_estimate_v1 *out) {
  void *ctx = NULL;
  int rc = off_create(api, host, opts, &ctx);
  if (rc) return rc;
  off_destroy(ctx);
  offload_estimate_figures(plan, out);
  return LOOM_OK;
}

LOOM_EXPORT const loom_parallel_v1 loom_plugin_v1 = {
  .hdr = LOOM_PLUGIN_HEADER_INIT(LOOM_KIND_PARALLEL, PLUGIN_NAME, "1.0.0",
                                 "optimizer offload: AdamW state, master params and the step "
                                 "in host memory (ZeRO-Offload); composes with ddp, zero1/2/3",
                                 LOOM_PAR_CAP_OPTIMIZER | LOOM_PAR_CAP_AXIS_DP,
                                 loom_parallel_v1),
  .create = off_create,
  .destroy = off_destroy,
  .setup = off_setup,
  .optimizer_step = off_optimizer_step,
  .state_items = off_state_items,
  .storage = LOOM_PAR_STORAGE_16BIT, /* the 16-bit gradient staged, the partition's fp32 master stepped */
  .estimate = off_estimate,
};
