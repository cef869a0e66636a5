/* ddp.so — distributed data parallel (Li et al. 2020, "PyTorch Distributed", §3.2).
 *
 * Gradients are grouped into buckets of about bucket_size_mb, laid out from the end of the flat
 * gradient buffer (the order backward produces them). When a unit's backward is done, every
 * bucket lying entirely at or above that unit's first offset holds final gradients, and its
 * all-reduce is started at once, so communication overlaps the rest of backward. On
 * gradient-accumulation micro-steps other than the last nothing is communicated (PyTorch's
 * no_sync). At the end of backward the host waits for every bucket and averages (1/dp). */
#include <loom/loom.h>
#include <stdlib.h>
#include <string.h>

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
} ddp;

static int ddp_create(const loom_host_api_v1 *api, loom_host *host, const loom_options *opts,
                      void **out) {
  static const char *const keys[] = {"bucket_size_mb", "overlap", NULL};
  if (api->opt_check_keys(host, opts, keys)) return LOOM_INVALID_CONFIG;
  ddp *d = calloc(1, sizeof *d);
  if (!d) return LOOM_NOMEM;
  d->api = api;
  d->host = host;
  int rc = api->opt_double(host, opts, "bucket_size_mb", 25.0, 0.001, 65536.0, &d->bucket_mb);
  if (!rc) rc = api->opt_bool(host, opts, "overlap", 1, &d->overlap);
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
  return LOOM_OK;
}

static int ddp_begin_micro(void *ctx, int micro, int n_micro) {
  ddp *d = ctx;
  d->sync = d->dp > 1 && micro == n_micro - 1;
  d->next = 0;
  return LOOM_OK;
}

static int launch(ddp *d, int i) {
  bucket *b = &d->buckets[i];
  return d->api->all_reduce(d->host, d->comm, d->model->grads + b->begin,
                            (size_t)(b->end - b->begin), LOOM_F32, LOOM_OP_SUM, &b->req);
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
  void *dev_ctx;
  const loom_device_v1 *dev = d->api->device(d->host, &dev_ctx);
  for (int i = 0; i < d->n_buckets; i++) {
    bucket *b = &d->buckets[i];
    int rc = d->api->wait(d->host, b->req);
    b->req = NULL;
    if (rc) return rc;
    dev->scale(dev_ctx, d->model->grads + b->begin, 1.0f / (float)d->dp,
               (size_t)(b->end - b->begin));
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
};
