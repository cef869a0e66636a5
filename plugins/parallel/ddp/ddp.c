/* ddp.so — distributed data parallel (Li et al. 2020, "PyTorch Distributed", §3.2).
 *
 * Gradients are grouped into buckets of about bucket_size_mb, laid out from the end of the flat
 * gradient buffer (the order backward produces them). When a unit's backward is done, every
 * bucket lying entirely at or above that unit's first offset holds final gradients, and its
 * all-reduce is started at once, so communication overlaps the rest of backward. On
 * gradient-accumulation micro-steps other than the last nothing is communicated (PyTorch's
 * no_sync). At the end of backward the host waits for every bucket and averages (1/dp).
 *
 * Mixed precision (bf16.so, fp16.so): gradients are all-reduced in the compute dtype — half
 * the bytes of fp32 (Micikevicius et al. 2018; DeepSpeed's communication_data_type defaults to
 * the training dtype too). With 16-bit gradient storage (ABI 1.4, one micro-batch per step)
 * the buckets already are 16-bit and are reduced in place; with fp32 gradient storage
 * (accumulation over micro-batches in fp32, DeepSpeed's grad_accum_dtype, or a host without
 * 16-bit storage) each bucket is packed to 16 bits, reduced, and unpacked. Option
 * "communication_data_type": "auto" (default, the compute dtype) or "fp32" (16-bit buckets are
 * widened to fp32, reduced, and rounded back once). The 1/dp average of a 16-bit bucket goes
 * through a bounded fp32 stage (exact when dp is a power of two). */
#include <loom/loom.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { AVG_FLOATS = 16384 }; /* the averaging stage: 64 KiB */

typedef struct bucket {
  uint64_t begin, end; /* flat gradient range [begin, end) */
  loom_request *req;   /* outstanding all-reduce, or NULL */
} bucket;

typedef struct ddp {
  const loom_host_api_v1 *api;
  loom_host *host;
  double bucket_mb;
  int overlap;      /* 1: launch buckets during backward; 0: all at end_backward */
  int dp;
  loom_comm *comm;
  const loom_model_v1 *model;
  bucket *buckets;  /* buckets[0] covers the highest offsets (ready first) */
  int n_buckets;
  int next;         /* first bucket not launched yet in this sync micro-step */
  int sync;         /* this micro-step synchronises */
  int force_fp32;   /* communication_data_type "fp32" */
  loom_dtype comm_dt; /* LOOM_F32, or the 16-bit compute dtype the buckets travel in */
  loom_dtype grad_dt; /* the model's gradient storage */
  void *stage;      /* the buckets in comm_dt when it differs from grad_dt (numel elements,
                       LOOM_MEM_COMM), else NULL */
  float *avg;       /* AVG_FLOATS fp32 (LOOM_MEM_COMM): averaging 16-bit buckets, else NULL */
  const loom_device_v1 *dev;
  void *dev_ctx;
} ddp;

static int ddp_create(const loom_host_api_v1 *api, loom_host *host, const loom_options *opts,
                      void **out) {
  static const char *const keys[] = {"bucket_size_mb", "overlap", "communication_data_type",
                                     NULL};
  if (api->opt_check_keys(host, opts, keys)) return LOOM_INVALID_CONFIG;
  ddp *d = calloc(1, sizeof *d);
  if (!d) return LOOM_NOMEM;
  d->api = api;
  d->host = host;
  int rc = api->opt_double(host, opts, "bucket_size_mb", 25.0, 0.001, 65536.0, &d->bucket_mb);
  if (!rc) rc = api->opt_bool(host, opts, "overlap", 1, &d->overlap);
  const char *cdt = "auto";
  if (!rc) rc = api->opt_string(host, opts, "communication_data_type", "auto", &cdt);
  if (!rc && strcmp(cdt, "auto") != 0 && strcmp(cdt, "fp32") != 0) {
    api->set_error(host, "communication_data_type: expected \"auto\" (the compute dtype) or "
                   "\"fp32\", got \"%s\"", cdt);
    rc = LOOM_INVALID_CONFIG;
  }
  d->force_fp32 = strcmp(cdt, "fp32") == 0;
  if (rc) {
    free(d);
    return rc;
  }
  d->dp = api->size(host, LOOM_AXIS_DP);
  d->comm = api->comm(host, LOOM_AXIS_DP);
  *out = d;
  return LOOM_OK;
}

static void ddp_destroy(void *ctx) {
  ddp *d = ctx;
  if (!d) return;
  for (int i = 0; i < d->n_buckets; i++)
    if (d->buckets[i].req) d->api->wait(d->host, d->buckets[i].req);
  if (d->stage) d->api->free(d->host, d->stage);
  if (d->avg) d->api->free(d->host, d->avg);
  free(d->buckets);
  free(d);
}

/* Buckets from the last tensor backwards, closing one when it reaches the size; a tensor is
 * never split, so a bucket is ready exactly when the unit of its lowest tensor is done. */
static int ddp_setup(void *ctx) {
  ddp *d = ctx;
  d->model = d->api->model(d->host);
  const loom_model_v1 *m = d->model;
  uint64_t cap = (uint64_t)(d->bucket_mb * 1024.0 * 1024.0 / sizeof(float));
  if (cap < 1) cap = 1;
  d->buckets = calloc((size_t)m->n_tensors, sizeof *d->buckets);
  if (!d->buckets) return LOOM_NOMEM;
  uint64_t end = m->numel, begin = m->numel;
  for (int i = m->n_tensors - 1; i >= 0; i--) {
    begin = LOOM_TENSOR_AT(m, i)->offset;
    if (end - begin >= cap || i == 0) {
      d->buckets[d->n_buckets++] = (bucket){.begin = begin, .end = end};
      end = begin;
    }
  }
  d->api->log(d->host, LOOM_LOG_DEBUG, "%d buckets of up to %.3g MB over %llu parameters",
              d->n_buckets, d->bucket_mb, (unsigned long long)m->numel);
  d->dev = d->api->device(d->host, &d->dev_ctx);
  loom_dtype dt = LOOM_MODEL_COMPUTE_DTYPE(m);
  d->grad_dt = LOOM_MODEL_GRAD_DTYPE(m);
  d->comm_dt = d->dp > 1 && dt != LOOM_F32 && !d->force_fp32 ? dt : LOOM_F32;
  if (d->dp <= 1) return LOOM_OK;
  int has_convert = d->dev->hdr.struct_size > offsetof(loom_device_v1, convert) &&
                    d->dev->convert;
  if ((d->comm_dt != LOOM_F32 || d->grad_dt != LOOM_F32) && !has_convert) {
    d->api->set_error(d->host, "16-bit gradient all-reduce needs the device's convert (device "
                      "ABI 1.3); set communication_data_type to \"fp32\"");
    return LOOM_UNSUPPORTED;
  }
  if (d->comm_dt != d->grad_dt) {
    d->stage = d->api->alloc(d->host, (size_t)m->numel * loom_dtype_size(d->comm_dt),
                             LOOM_MEM_COMM);
    if (!d->stage) return LOOM_NOMEM;
  }
  if (d->grad_dt != LOOM_F32) {
    d->avg = d->api->alloc(d->host, AVG_FLOATS * sizeof(float), LOOM_MEM_COMM);
    if (!d->avg) return LOOM_NOMEM;
  }
  return LOOM_OK;
}

/* Element k of a buffer of dtype dt. */
static void *at(void *base, loom_dtype dt, uint64_t k) {
  return (char *)base + k * loom_dtype_size(dt);
}

static int ddp_begin_micro(void *ctx, int micro, int n_micro) {
  ddp *d = ctx;
  d->sync = d->dp > 1 && micro == n_micro - 1;
  d->next = 0;
  return LOOM_OK;
}

static int launch(ddp *d, int i) {
  bucket *b = &d->buckets[i];
  size_t n = (size_t)(b->end - b->begin);
  void *g = at(d->model->grads, d->grad_dt, b->begin);
  if (d->comm_dt == d->grad_dt) /* fp32, or 16-bit storage: reduce the bucket as it is */
    return d->api->all_reduce(d->host, d->comm, g, n, d->comm_dt, LOOM_OP_SUM, &b->req);
  /* pack the bucket to the wire dtype (16 bits: round to nearest even; fp32: exact) */
  void *s = at(d->stage, d->comm_dt, b->begin);
  int rc = d->dev->convert(d->dev_ctx, s, d->comm_dt, g, d->grad_dt, n);
  if (rc) return rc;
  return d->api->all_reduce(d->host, d->comm, s, n, d->comm_dt, LOOM_OP_SUM, &b->req);
}

/* grads[begin, begin + n) *= 1/dp, in place: fp32 directly, 16-bit through d->avg. */
static void average(ddp *d, uint64_t begin, size_t n) {
  float inv = 1.0f / (float)d->dp;
  if (d->grad_dt == LOOM_F32) {
    d->dev->scale(d->dev_ctx, d->model->grads + begin, inv, n);
    return;
  }
  for (size_t k = 0; k < n; k += AVG_FLOATS) {
    size_t c = n - k < AVG_FLOATS ? n - k : AVG_FLOATS;
    void *g = at(d->model->grads, d->grad_dt, begin + k);
    d->dev->convert(d->dev_ctx, d->avg, LOOM_F32, g, d->grad_dt, c);
    d->dev->scale(d->dev_ctx, d->avg, inv, c);
    d->dev->convert(d->dev_ctx, g, d->grad_dt, d->avg, LOOM_F32, c);
  }
}

static int ddp_post_backward(void *ctx, int unit) {
  ddp *d = ctx;
  if (!d->sync || !d->overlap) return LOOM_OK;
  uint64_t ready_from = d->model->unit_offset[unit];
  while (d->next < d->n_buckets && d->buckets[d->next].begin >= ready_from) {
    int rc = launch(d, d->next++);
    if (rc) return rc;
  }
  /* MPI progresses non-blocking collectives only inside MPI calls: poke the oldest one */
  for (int i = 0; i < d->next; i++) {
    if (!d->buckets[i].req) continue;
    int done = 0;
    int rc = d->api->test(d->host, d->buckets[i].req, &done);
    if (rc) return rc;
    if (!done) break;
  }
  return LOOM_OK;
}

static int ddp_end_backward(void *ctx, int micro, int n_micro) {
  (void)micro, (void)n_micro; /* begin_micro already decided whether this one syncs */
  ddp *d = ctx;
  if (!d->sync) return LOOM_OK;
  while (d->next < d->n_buckets) {
    int rc = launch(d, d->next++);
    if (rc) return rc;
  }
  for (int i = 0; i < d->n_buckets; i++) {
    bucket *b = &d->buckets[i];
    size_t n = (size_t)(b->end - b->begin);
    int rc = d->api->wait(d->host, b->req);
    b->req = NULL;
    if (rc) return rc;
    if (d->comm_dt != d->grad_dt &&
        (rc = d->dev->convert(d->dev_ctx, at(d->model->grads, d->grad_dt, b->begin),
                              d->grad_dt, at(d->stage, d->comm_dt, b->begin), d->comm_dt,
                              n)) != LOOM_OK)
      return rc;
    average(d, b->begin, n);
  }
  return LOOM_OK;
}

LOOM_EXPORT const loom_parallel_v1 loom_plugin_v1 = {
  .hdr = LOOM_PLUGIN_HEADER_INIT(LOOM_KIND_PARALLEL, "ddp", "1.0.0",
                                 "data parallel: bucketed gradient all-reduce overlapped with "
                                 "backward, no_sync on accumulation micro-steps",
                                 LOOM_PAR_CAP_GRAD_SYNC | LOOM_PAR_CAP_AXIS_DP,
                                 loom_parallel_v1),
  .create = ddp_create,
  .destroy = ddp_destroy,
  .setup = ddp_setup,
  .begin_micro = ddp_begin_micro,
  .post_backward = ddp_post_backward,
  .end_backward = ddp_end_backward,
  .storage = LOOM_PAR_STORAGE_16BIT,
};
