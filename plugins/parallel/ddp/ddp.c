/* ddp.so — distributed data parallel (Li et al. 2020, "PyTorch Distributed", §3.2).
 *
 * Gradients are grouped into buckets of about bucket_size_mb, laid out from the end of the flat
 * gradient buffer (the order backward produces them). When a unit's backward is done, every
 * bucket lying entirely at or above that unit's first offset holds final gradients, and its
 * all-reduce is started at once, so communication overlaps the rest of backward. On
 * gradient-accumulation micro-steps other than the last nothing is communicated (PyTorch's
 * no_sync). At the end of backward the host waits for every bucket. The average is the host's:
 * ddp sets LOOM_PAR_GRAD_PREDIVIDED (ABI 1.5), so the loss gradient already carries 1/dp and the
 * all-reduce's sum is the average; a host older than 1.5 (no api->grads_predivided) does not
 * predivide, and ddp then scales every bucket by 1/dp after its all-reduce, as before.
 *
 * Mixed precision (bf16.so, fp16.so): gradients are all-reduced in the compute dtype — half
 * the bytes of fp32 (Micikevicius et al. 2018; DeepSpeed's communication_data_type defaults to
 * the training dtype too). With 16-bit gradient storage (ABI 1.4, one micro-batch per step)
 * the buckets already are 16-bit and are reduced in place; with fp32 gradient storage
 * (accumulation over micro-batches in fp32, DeepSpeed's grad_accum_dtype, or a host without
 * 16-bit storage) each bucket is packed to 16 bits, reduced, and unpacked. Option
 * "communication_data_type": "auto" (default, the compute dtype) or "fp32" (16-bit buckets are
 * widened to fp32, reduced, and rounded back once). Without predivision the 1/dp average of a
 * 16-bit bucket goes through a bounded fp32 stage (exact when dp is a power of two).
 *
 * The tied embedding (wte, V x C: 80 % of a GPT-2-vocabulary model's parameters) is the first
 * tensor of the flat buffer, so its bucket would be ready last: its gradient is final only after
 * the encoder's backward, the very end. But the gradient has two parts: the LM head's, dense over
 * all V rows and ready first (the head is the first unit backward runs), and the encoder's, which
 * touches only the rows of the micro-batch's tokens. With overlap (fp32 communication, no tensor
 * or pipeline split) ddp splits it: after the head's backward it starts the all-reduce of wte's
 * gradient (the head's part plus what earlier no_sync micro-steps accumulated), which runs during
 * the blocks' backward; before the encoder's backward it waits for it, gathers every rank's token
 * ids (B*T int32 each), moves the summed rows at those ids aside and zeroes them, so the encoder
 * writes only this rank's sparse part there; after it, those rows alone (at most dp*B*T*C
 * floats) are all-reduced and added to the rows moved aside. Same sum, other association: the
 * rows the batch touches round as (sum of head parts) + (sum of encoder parts). The host must
 * offer micro_tokens (host ABI 1.4); otherwise wte travels in its bucket as any tensor.
 * Option "split_embedding": "auto" (default: split when wte holds at least half of the
 * parameters, where it is the bulk of the all-reduce), true (whenever possible), false. */
#include <loom/loom.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ddp_estimate.h"

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
  loom_storage_plan_v1 plan; /* the host's storage plan (loom_storage_plan_of, from setup) */
  bucket *buckets;  /* buckets[0] covers the highest offsets (ready first) */
  int n_buckets;
  int next;         /* first bucket not launched yet in this sync micro-step */
  int sync;         /* this micro-step synchronises */
  int force_fp32;   /* communication_data_type "fp32" */
  loom_dtype comm_dt; /* LOOM_F32, or the 16-bit compute dtype the buckets travel in */
  loom_dtype grad_dt; /* the model's gradient storage */
  void *stage;      /* the buckets in comm_dt when it differs from grad_dt (numel elements,
                       LOOM_MEM_COMM), else NULL */
  int predivided;   /* the host divides the loss gradient by dp (plan.grads_predivided): the
                       all-reduce's sum is the average, nothing to scale */
  float *avg;       /* AVG_FLOATS fp32 (LOOM_MEM_COMM): averaging 16-bit buckets when not
                       predivided, else NULL */
  const loom_device_v1 *dev;
  void *dev_ctx;
  /* the split of the tied embedding's all-reduce (see the top of the file) */
  int split_mode;      /* split_embedding: -1 auto, 0 false, 1 true */
  int split;           /* 1: wte (tensor 0) is reduced as head part + sparse encoder rows */
  int head_unit;       /* the unit whose backward makes the head's part of wte's gradient */
  uint64_t wte_numel;  /* V*C */
  int C;
  loom_request *wte_req; /* the head part's all-reduce in flight */
  int32_t *ids_dev;    /* every rank's token ids (dp*B*T, device, LOOM_MEM_COMM) */
  int32_t *ids_host;   /* the same on the host, then the distinct rows touched, sorted */
  uint8_t *seen;       /* V flags for the distinct-row pass */
  float *rows_kept;    /* distinct rows x C: the summed head part moved aside (device) */
  float *rows_enc;     /* distinct rows x C: the encoder parts, packed for the all-reduce */
  size_t cap_ids;      /* capacity of ids_dev / ids_host / rows_* (in rows) */
  size_t n_rows;       /* distinct rows of this sync micro-step */
} ddp;

static int ddp_create(const loom_host_api_v1 *api, loom_host *host, const loom_options *opts,
                      void **out) {
  static const char *const keys[] = {"bucket_size_mb", "overlap", "communication_data_type",
                                     "split_embedding", NULL};
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
  /* split_embedding: "auto" (also when absent) or a boolean */
  const char *split = "auto";
  int split_bool = 0;
  d->split_mode = -1;
  if (!rc && api->opt_string(host, opts, "split_embedding", "auto", &split) == LOOM_OK) {
    if (strcmp(split, "auto") != 0) {
      api->set_error(host, "split_embedding: expected \"auto\", true or false, got \"%s\"",
                     split);
      rc = LOOM_INVALID_CONFIG;
    }
  } else if (!rc) { /* not a string: must be a boolean (opt_bool's message names the key) */
    rc = api->opt_bool(host, opts, "split_embedding", 0, &split_bool);
    d->split_mode = split_bool;
  }
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
  if (d->wte_req) d->api->wait(d->host, d->wte_req);
  if (d->stage) d->api->free(d->host, d->stage);
  if (d->avg) d->api->free(d->host, d->avg);
  if (d->ids_dev) d->api->free(d->host, d->ids_dev);
  if (d->rows_kept) d->api->free(d->host, d->rows_kept);
  if (d->rows_enc) d->api->free(d->host, d->rows_enc);
  free(d->ids_host);
  free(d->seen);
  free(d->buckets);
  free(d);
}

/* NULL if the tied embedding's all-reduce can be split (see the top of the file): overlap on, a
 * data-parallel group, fp32 gradients and communication, the whole model on this rank (no
 * tensor or pipeline split), tensor 0 is "wte" (vocab_size rows, or more: a padded vocabulary's
 * extra rows are never a token's, so the encoder never touches them) and the host says which
 * tokens a micro-batch holds; else why not. */
static const char *split_blocker(const ddp *d, loom_dtype dt) {
  const loom_model_v1 *m = d->model;
  if (!d->overlap) return "overlap is off";
  if (d->dp <= 1) return "no data-parallel group";
  if (dt != LOOM_F32 && !d->force_fp32) return "communication is 16-bit";
  if (!LOOM_HOST_HAS(d->api, micro_tokens)) return "the host has no micro_tokens (ABI < 1.4)";
  if (d->api->size(d->host, LOOM_AXIS_TP) != 1 || d->api->size(d->host, LOOM_AXIS_PP) != 1)
    return "the model is split by tensor or pipeline parallelism";
  if (m->n_tensors < 2 || !m->grads || d->plan.grad_dtype != LOOM_F32)
    return "gradients are not stored in fp32";
  const loom_tensor_v1 *t = LOOM_TENSOR_AT(m, 0);
  if (strcmp(t->name, "wte") != 0 || t->unit != 0 || t->offset != 0 || t->ndim != 2 ||
      t->shape[0] < m->vocab_size || t->shape[1] != m->n_embd ||
      t->numel != (uint64_t)t->shape[0] * (uint64_t)m->n_embd)
    return "tensor 0 is not the (vocabulary x n_embd) token embedding";
  return NULL;
}

/* 1 if the split is on: possible, and asked for (true) or worth it ("auto": wte holds at least
 * half of the parameters). An explicit true that cannot be honoured is logged, not an error:
 * the result is the same sum, only the overlap differs. */
static int split_decide(ddp *d, loom_dtype dt) {
  const char *why = split_blocker(d, dt);
  if (why) {
    if (d->split_mode == 1)
      d->api->log(d->host, LOOM_LOG_WARN, "ddp: split_embedding is true but %s: wte is reduced "
                  "in its bucket", why);
    return 0;
  }
  const loom_model_v1 *m = d->model;
  return d->split_mode == 1 ||
         (d->split_mode == -1 && 2 * LOOM_TENSOR_AT(m, 0)->numel >= m->numel);
}

/* Buckets from the last tensor backwards, closing one when it reaches the size; a tensor is
 * never split, so a bucket is ready exactly when the unit of its lowest tensor is done. */

static int ddp_setup(void *ctx) {
  ddp *d = ctx;
  d->model = d->api->model(d->host);
  const loom_model_v1 *m = d->model;
  d->plan = loom_storage_plan_of(d->api, d->host, m);
  loom_dtype dt = d->plan.compute_dtype;
  d->split = split_decide(d, dt);
  if (d->split) {
    d->head_unit = m->n_units - 1;
    d->wte_numel = LOOM_TENSOR_AT(m, 0)->numel;
    d->C = m->n_embd;
    d->seen = calloc((size_t)m->vocab_size, 1);
    if (!d->seen) return LOOM_NOMEM;
  }
  uint64_t cap = (uint64_t)(d->bucket_mb * 1024.0 * 1024.0 / sizeof(float));
  if (cap < 1) cap = 1;
  d->buckets = calloc((size_t)m->n_tensors, sizeof *d->buckets);
  if (!d->buckets) return LOOM_NOMEM;
  const int first = d->split ? 1 : 0; /* a split wte is reduced on its own */
  uint64_t end = m->numel, begin = m->numel;
  for (int i = m->n_tensors - 1; i >= first; i--) {
    begin = LOOM_TENSOR_AT(m, i)->offset;
    if (end - begin >= cap || i == first) {
      d->buckets[d->n_buckets++] = (bucket){.begin = begin, .end = end};
      end = begin;
    }
  }
  d->api->log(d->host, LOOM_LOG_DEBUG, "%d buckets of up to %.3g MB over %llu parameters%s",
              d->n_buckets, d->bucket_mb, (unsigned long long)m->numel,
              d->split ? "; wte split: head part after the head, token rows after the encoder"
                       : "");
  d->dev = d->api->device(d->host, &d->dev_ctx);
  d->grad_dt = d->plan.grad_dtype;
  /* the plan's default wire dtype (the compute dtype with dp > 1), unless told fp32 */
  d->comm_dt = d->dp > 1 && !d->force_fp32 ? d->plan.grad_comm_dtype : LOOM_F32;
  if (d->dp <= 1) return LOOM_OK;
  d->predivided = d->plan.grads_predivided;
  if ((d->comm_dt != LOOM_F32 || d->grad_dt != LOOM_F32) && !LOOM_HAS(d->dev, convert)) {
    d->api->set_error(d->host, "16-bit gradient all-reduce needs the device's convert (device "
                      "ABI 1.3); set communication_data_type to \"fp32\"");
    return LOOM_UNSUPPORTED;
  }
  if (d->comm_dt != d->grad_dt) {
    d->stage = d->api->alloc(d->host, (size_t)m->numel * loom_dtype_size(d->comm_dt),
                             LOOM_MEM_COMM);
    if (!d->stage) return LOOM_NOMEM;
  }
  if (d->grad_dt != LOOM_F32 && !d->predivided) {
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
  /* without overlap nothing runs meanwhile: a blocking all-reduce (MPI's tuned algorithms
   * rather than the non-blocking collective's progress engine) */
  loom_request **req = d->overlap ? &b->req : NULL;
  void *g = at(d->model->grads, d->grad_dt, b->begin);
  if (d->comm_dt == d->grad_dt) /* fp32, or 16-bit storage: reduce the bucket as it is */
    return d->api->all_reduce(d->host, d->comm, g, n, d->comm_dt, LOOM_OP_SUM, req);
  /* pack the bucket to the wire dtype (16 bits: round to nearest even; fp32: exact) */
  void *s = at(d->stage, d->comm_dt, b->begin);
  int rc = d->dev->convert(d->dev_ctx, s, d->comm_dt, g, d->grad_dt, n);
  if (rc) return rc;
  return d->api->all_reduce(d->host, d->comm, s, n, d->comm_dt, LOOM_OP_SUM, req);
}

/* grads[begin, begin + n) *= 1/dp, in place: fp32 directly, 16-bit through d->avg; nothing
 * when the host predivided (the sum is the average already). */
static void average(ddp *d, uint64_t begin, size_t n) {
  if (d->predivided) return;
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

/* Room for `rows` token rows in the split's buffers. */
static int split_reserve(ddp *d, size_t rows) {
  if (rows <= d->cap_ids) return LOOM_OK;
  const loom_host_api_v1 *api = d->api;
  if (d->ids_dev) api->free(d->host, d->ids_dev);
  if (d->rows_kept) api->free(d->host, d->rows_kept);
  if (d->rows_enc) api->free(d->host, d->rows_enc);
  free(d->ids_host);
  d->cap_ids = 0;
  d->ids_dev = api->alloc(d->host, rows * sizeof(int32_t), LOOM_MEM_COMM);
  d->rows_kept = api->alloc(d->host, rows * (size_t)d->C * sizeof(float), LOOM_MEM_COMM);
  d->rows_enc = api->alloc(d->host, rows * (size_t)d->C * sizeof(float), LOOM_MEM_COMM);
  d->ids_host = malloc(rows * sizeof(int32_t));
  if (!d->ids_dev || !d->rows_kept || !d->rows_enc || !d->ids_host) return LOOM_NOMEM;
  d->cap_ids = rows;
  return LOOM_OK;
}

/* Before the encoder's backward: the head part's sum has arrived; gather the token ids of every
 * rank, keep the summed rows at the distinct ids aside and zero them for the encoder. */
static int split_before_encoder(ddp *d) {
  const loom_host_api_v1 *api = d->api;
  int rc = api->wait(d->host, d->wte_req);
  d->wte_req = NULL;
  if (rc) return rc;
  size_t n = 0;
  const int32_t *ids = api->micro_tokens(d->host, &n);
  if (!ids || n == 0) {
    api->set_error(d->host, "ddp: the host reports no token ids for this micro-batch");
    return LOOM_INVALID_USAGE;
  }
  if ((rc = split_reserve(d, n * (size_t)d->dp)) != LOOM_OK) return rc;
  if ((rc = api->all_gather(d->host, d->comm, ids, d->ids_dev, n, LOOM_I32, NULL)) != LOOM_OK)
    return rc;
  d->dev->to_host(d->dev_ctx, d->ids_host, d->ids_dev, n * (size_t)d->dp * sizeof(int32_t));
  /* the distinct rows, ascending (every rank computes the same list) */
  const int V = d->model->vocab_size;
  for (size_t i = 0; i < n * (size_t)d->dp; i++)
    if (d->ids_host[i] >= 0 && d->ids_host[i] < V) d->seen[d->ids_host[i]] = 1;
  d->n_rows = 0;
  for (int v = 0; v < V; v++)
    if (d->seen[v]) {
      d->seen[v] = 0;
      d->ids_host[d->n_rows++] = v;
    }
  const size_t C = (size_t)d->C, row = C * sizeof(float);
  float *g = d->model->grads;
  for (size_t k = 0; k < d->n_rows; k++) {
    float *r = g + (size_t)d->ids_host[k] * C;
    d->dev->copy(d->dev_ctx, d->rows_kept + k * C, r, row);
    d->dev->memset_zero(d->dev_ctx, r, row);
  }
  return LOOM_OK;
}

/* After the encoder's backward: the touched rows hold this rank's encoder part; sum it over the
 * ranks and add the head part kept aside. */
static int split_after_encoder(ddp *d) {
  const size_t C = (size_t)d->C, row = C * sizeof(float);
  float *g = d->model->grads;
  for (size_t k = 0; k < d->n_rows; k++)
    d->dev->copy(d->dev_ctx, d->rows_enc + k * C, g + (size_t)d->ids_host[k] * C, row);
  int rc = d->api->all_reduce(d->host, d->comm, d->rows_enc, d->n_rows * C, LOOM_F32,
                              LOOM_OP_SUM, NULL);
  if (rc) return rc;
  for (size_t k = 0; k < d->n_rows; k++) {
    float *r = g + (size_t)d->ids_host[k] * C;
    d->dev->copy(d->dev_ctx, r, d->rows_kept + k * C, row);
    d->dev->axpy(d->dev_ctx, r, 1.0f, d->rows_enc + k * C, C);
  }
  return LOOM_OK;
}

static int ddp_pre_backward(void *ctx, int unit) {
  ddp *d = ctx;
  if (!d->sync || !d->split || unit != 0 || !d->wte_req) return LOOM_OK;
  return split_before_encoder(d);
}

static int ddp_post_backward(void *ctx, int unit) {
  ddp *d = ctx;
  if (!d->sync || !d->overlap) return LOOM_OK;
  if (d->split && unit == d->head_unit) { /* the head's part of wte's gradient is complete */
    int rc = d->api->all_reduce(d->host, d->comm, d->model->grads, d->wte_numel, LOOM_F32,
                                LOOM_OP_SUM, &d->wte_req);
    if (rc) return rc;
  }
  if (d->split && unit == 0 && d->n_rows) {
    int rc = split_after_encoder(d);
    d->n_rows = 0;
    if (rc) return rc;
  }
  uint64_t ready_from = d->model->unit_offset[unit];
  while (d->next < d->n_buckets && d->buckets[d->next].begin >= ready_from) {
    int rc = launch(d, d->next++);
    if (rc) return rc;
  }
  if (d->wte_req) { /* MPI progresses it only inside MPI calls */
    int done = 0;
    int rc = d->api->test(d->host, d->wte_req, &done);
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
  if (d->wte_req) { /* only when a unit 0 never ran its backward here */
    int rc = d->api->wait(d->host, d->wte_req);
    d->wte_req = NULL;
    if (rc) return rc;
  }
  while (d->next < d->n_buckets) {
    int rc = launch(d, d->next++);
    if (rc) return rc;
  }
  for (int i = 0; i < d->n_buckets; i++) {
    bucket *b = &d->buckets[i];
    size_t n = (size_t)(b->end - b->begin);
    int rc = b->req ? d->api->wait(d->host, b->req) : LOOM_OK;
    b->req = NULL;
    if (rc) return rc;
    if (d->comm_dt != d->grad_dt &&
        (rc = d->dev->convert(d->dev_ctx, at(d->model->grads, d->grad_dt, b->begin),
                              d->grad_dt, at(d->stage, d->comm_dt, b->begin), d->comm_dt,
                              n)) != LOOM_OK)
      return rc;
    average(d, b->begin, n);
  }
  if (d->split) /* reduced in post_backward of the head and of unit 0 */
    average(d, 0, d->wte_numel);
  return LOOM_OK;
}

/* ABI 1.6: what ddp holds and moves for `plan` (ddp_estimate.c), with the options create()
 * validates; create() only reads them and the planned mesh. */
static int ddp_estimate(const loom_host_api_v1 *api, loom_host *host, const loom_options *opts,
                        const loom_estimate_plan_v1 *plan, loom_estimate_v1 *out) {
  void *ctx = NULL;
  int rc = ddp_create(api, host, opts, &ctx);
  if (rc) return rc;
  const ddp *d = ctx;
  ddp_estimate_figures(plan, d->overlap, d->force_fp32, d->split_mode, out);
  ddp_destroy(ctx);
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
  .pre_backward = ddp_pre_backward,
  .post_backward = ddp_post_backward,
  .end_backward = ddp_end_backward,
  .storage = LOOM_PAR_STORAGE_16BIT,
  .grad_sync = LOOM_PAR_GRAD_PREDIVIDED, /* sums only; the host folds in 1/dp (ABI 1.5) */
  .estimate = ddp_estimate,
};
