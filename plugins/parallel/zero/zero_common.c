/* Partitioning, buckets and the uneven collectives shared by zero1/2/3 (see zero_common.h). */
#include "zero_common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int zc_create(const loom_host_api_v1 *api, loom_host *host, const char *name, zero **out) {
  zero *z = calloc(1, sizeof *z);
  if (!z) {
    api->set_error(host, "out of host memory");
    return LOOM_NOMEM;
  }
  z->api = api;
  z->host = host;
  z->name = name;
  z->wte = -1;
  /* the shard group: the whole data-parallel group unless the config asks for hybrid
   * sharding (ABI 1.11: the host then sums the partition's gradient over the replicas) */
  loom_axis ax = LOOM_SHARD_AXIS(api);
  z->dp = api->size(host, ax);
  z->rank = api->rank(host, ax);
  z->comm = api->comm(host, ax);
  z->dp_full = api->size(host, LOOM_AXIS_DP);
  *out = z;
  return LOOM_OK;
}

int zc_opt_elems(zero *z, const loom_options *o, const char *key, uint64_t dflt,
                 uint64_t *out) {
  double x;
  /* MPI counts are ints: a bucket of more than 2^31-1 elements could not be sent */
  int rc = z->api->opt_double(z->host, o, key, (double)dflt, 1.0, 2147483647.0, &x);
  if (rc) return rc;
  if (x != floor(x)) {
    z->api->set_error(z->host, "%s: expected a whole number of elements, got %g", key, x);
    return LOOM_INVALID_CONFIG;
  }
  *out = (uint64_t)x;
  return LOOM_OK;
}

static void span_wait(zero *z, loom_request **req) {
  if (*req) z->api->wait(z->host, *req);
  *req = NULL;
}

void zc_destroy(zero *z) {
  if (!z) return;
  const loom_host_api_v1 *api = z->api;
  for (int i = 0; i < z->n_gb; i++) {
    zc_gbucket *b = &z->gb[i];
    span_wait(z, &b->req);
    if (b->buf) api->free(z->host, b->buf);
    if (b->recv && !b->recv_direct) api->free(z->host, b->recv);
    zc_span_free(&b->s);
  }
  free(z->gb);
  free(z->bucket_of);
  zc_flat_free(z, z->ag, z->n_ag);
  if (z->cvt) api->free(z->host, z->cvt);
  if (z->own_part_params && z->part_params) api->free(z->host, z->part_params);
  if (z->own_part_grads && z->part_grads) api->free(z->host, z->part_grads);
  free(z->bound);
  free(z->t_first);
  free(z);
}

void *zc_alloc(zero *z, uint64_t count, size_t el, loom_mem_category cat) {
  return z->api->alloc(z->host, (size_t)(count ? count : 1) * el, cat);
}

void zc_avg_into(zero *z, void *dst, const void *src, float scale, uint64_t n, int accumulate) {
  if (z->gdt == LOOM_F32) {
    if (accumulate) {
      z->dev->axpy(z->dctx, dst, scale, src, (size_t)n);
    } else {
      if (dst != src) z->dev->copy(z->dctx, dst, src, (size_t)n * sizeof(float));
      if (scale != 1.0f) z->dev->scale(z->dctx, dst, scale, (size_t)n);
    }
    return;
  }
  if (!accumulate && scale == 1.0f) { /* a copy: the 16-bit values are already the result */
    if (dst != src) z->dev->copy(z->dctx, dst, src, (size_t)n * z->gel);
    return;
  }
  float *a = z->cvt, *b = z->cvt + z->cvt_n;
  for (uint64_t k = 0; k < n; k += z->cvt_n) {
    size_t c = (size_t)(n - k < z->cvt_n ? n - k : z->cvt_n);
    void *d = zc_at(dst, k, z->gel);
    if (accumulate) z->dev->convert(z->dctx, a, LOOM_F32, d, z->gdt, c);
    else z->dev->memset_zero(z->dctx, a, c * sizeof(float));
    z->dev->convert(z->dctx, b, LOOM_F32, zc_at((void *)src, k, z->gel), z->gdt, c);
    z->dev->axpy(z->dctx, a, scale, b, c);
    z->dev->convert(z->dctx, d, z->gdt, a, LOOM_F32, c);
  }
}

int zc_setup(zero *z, int want_params, int want_grads) {
  const loom_host_api_v1 *api = z->api;
  z->model = api->model(z->host);
  const loom_model_v1 *m = z->model;
  if (!m) {
    api->set_error(z->host, "no model");
    return LOOM_INVALID_USAGE;
  }
  z->dev = api->device(z->host, &z->dctx);
  if ((m->params != NULL) != want_params || (m->grads != NULL) != want_grads) {
    api->set_error(z->host, "expected the host %s the flat parameter buffer and %s the flat "
                   "gradient buffer (another plugin owns parameter or gradient storage?)",
                   want_params ? "to allocate" : "not to allocate",
                   want_grads ? "to allocate" : "not to allocate");
    return LOOM_INVALID_USAGE;
  }
  z->numel = m->numel;
  const loom_storage_plan_v1 plan = loom_storage_plan_of(api, z->host, m);
  /* the plan says whether the host folds 1/dp into the loss gradient: then sum only */
  z->predivided = z->dp_full > 1 && plan.grads_predivided;
  z->inv_dp = z->predivided ? 1.0f : 1.0f / (float)z->dp_full;
  z->pdt = plan.param_dtype;
  z->gdt = plan.grad_dtype;
  z->pel = loom_dtype_size(z->pdt);
  z->gel = loom_dtype_size(z->gdt);
  if ((z->pdt != LOOM_F32 && z->pel != 2) || (z->gdt != LOOM_F32 && z->gel != 2)) {
    api->set_error(z->host, "%s: parameter/gradient storage dtypes %d/%d: expected fp32, bf16 "
                   "or fp16", z->name, (int)z->pdt, (int)z->gdt);
    return LOOM_UNSUPPORTED;
  }
  z->bound = calloc((size_t)z->dp + 1, sizeof *z->bound);
  z->t_first = calloc((size_t)m->n_units + 1, sizeof *z->t_first);
  if (!z->bound || !z->t_first) {
    api->set_error(z->host, "out of host memory");
    return LOOM_NOMEM;
  }
  uint64_t S = (z->numel + (uint64_t)z->dp - 1) / (uint64_t)z->dp;
  for (int i = 0; i <= z->dp; i++) {
    uint64_t b = (uint64_t)i * S;
    z->bound[i] = b < z->numel ? b : z->numel;
  }
  z->begin = z->bound[z->rank];
  z->count = z->bound[z->rank + 1] - z->begin;
  if (z->pdt != LOOM_F32 || z->gdt != LOOM_F32) {
    if (!LOOM_HAS(z->dev, convert)) {
      api->set_error(z->host, "%s: 16-bit storage needs the device's convert slot (ABI 1.3)",
                     z->name);
      return LOOM_UNSUPPORTED;
    }
    z->cvt_n = z->count < ZC_CVT_CHUNK ? (z->count ? z->count : 1) : ZC_CVT_CHUNK;
    z->cvt = zc_alloc(z, 2 * z->cvt_n, sizeof(float), LOOM_MEM_COMM);
    if (!z->cvt) return LOOM_NOMEM;
  }

  /* tensors are in flat order, unit by unit */
  int t = 0;
  for (int u = 0; u <= m->n_units; u++) {
    while (t < m->n_tensors && LOOM_TENSOR_AT(m, t)->unit < u) t++;
    z->t_first[u] = t;
  }
  for (int i = 0; i < m->n_tensors && z->wte < 0; i++)
    if (!strcmp(LOOM_TENSOR_AT(m, i)->name, "wte")) z->wte = i;
  /* only ZeRO-3 (no flat parameter buffer) gathers wte for the head; a pipeline stage may
   * hold no wte, or the last stage's tied copy in the head's unit */
  if (!m->params && (z->wte < 0 || LOOM_TENSOR_AT(m, z->wte)->unit != 0)) {
    api->set_error(z->host, "the model has no tied embedding 'wte' in unit 0");
    return LOOM_UNSUPPORTED;
  }
  return LOOM_OK;
}

int zc_publish(zero *z, void *params, void *grads) {
  loom_partition_v1 p = {.struct_size = sizeof p, .begin = z->begin, .count = z->count,
                         .params = params, .grads = grads, .sharded = 1};
  z->part_params = params;
  z->part_grads = grads;
  return z->api->set_partition(z->host, &p);
}

int zc_span_init(zero *z, zc_span *s, uint64_t lo, uint64_t hi) {
  s->lo = lo;
  s->hi = hi;
  s->counts = calloc((size_t)z->dp, sizeof *s->counts);
  if (!s->counts) {
    z->api->set_error(z->host, "out of host memory");
    return LOOM_NOMEM;
  }
  for (int i = 0; i < z->dp; i++) {
    uint64_t a = z->bound[i] > lo ? z->bound[i] : lo;
    uint64_t b = z->bound[i + 1] < hi ? z->bound[i + 1] : hi;
    s->counts[i] = b > a ? (size_t)(b - a) : 0;
  }
  s->my_lo = z->begin < lo ? lo : (z->begin > hi ? hi : z->begin);
  s->my_n = s->counts[z->rank];
  return LOOM_OK;
}

void zc_span_free(zc_span *s) {
  free(s->counts);
  s->counts = NULL;
}

int zc_flat_build(zero *z, uint64_t size, int from_top, zc_flat **out, int *n) {
  uint64_t nb = (z->numel + size - 1) / size;
  zc_flat *b = calloc(nb ? (size_t)nb : 1, sizeof *b);
  if (!b) {
    z->api->set_error(z->host, "out of host memory");
    return LOOM_NOMEM;
  }
  for (uint64_t i = 0; i < nb; i++) {
    uint64_t lo, hi;
    if (from_top) {
      hi = z->numel - i * size;
      lo = hi > size ? hi - size : 0;
    } else {
      lo = i * size;
      hi = lo + size < z->numel ? lo + size : z->numel;
    }
    int rc = zc_span_init(z, &b[i].s, lo, hi);
    if (rc) {
      zc_flat_free(z, b, (int)i);
      return rc;
    }
  }
  *out = b;
  *n = (int)nb;
  return LOOM_OK;
}

void zc_flat_free(zero *z, zc_flat *b, int n) {
  if (!b) return;
  for (int i = 0; i < n; i++) {
    span_wait(z, &b[i].req);
    if (b[i].recv) z->api->free(z->host, b[i].recv);
    zc_span_free(&b[i].s);
  }
  free(b);
}

int zc_allgather_params(zero *z, void *params) {
  int rc = LOOM_OK;
  for (int i = 0; i < z->n_ag && !rc; i++) {
    zc_flat *b = &z->ag[i];
    /* in place: this rank's block (send) sits at its displacement inside recv; in the
     * parameter dtype (16 bits: half of fp32's bytes) */
    rc = z->api->all_gather_v(z->host, z->comm, zc_at(params, b->s.my_lo, z->pel),
                              zc_at(params, b->s.lo, z->pel), b->s.counts, z->pdt, &b->req);
  }
  for (int i = 0; i < z->n_ag; i++) {
    if (!z->ag[i].req) continue;
    int w = z->api->wait(z->host, z->ag[i].req);
    z->ag[i].req = NULL;
    if (!rc) rc = w;
  }
  return rc;
}

int zc_first_step_gather(zero *z) {
  if (z->gathered_once || z->dp <= 1 || z->pdt == LOOM_F32) return LOOM_OK;
  z->gathered_once = 1;
  return zc_allgather_params(z, z->model->params);
}

/* ---- ZeRO-2/3 gradient buckets ---- */

int zc_gb_build(zero *z) {
  const loom_model_v1 *m = z->model;
  const uint64_t *off = m->unit_offset;
  z->gb = calloc((size_t)m->n_units, sizeof *z->gb);
  z->bucket_of = calloc((size_t)m->n_units, sizeof *z->bucket_of);
  if (!z->gb || !z->bucket_of) {
    z->api->set_error(z->host, "out of host memory");
    return LOOM_NOMEM;
  }
  /* whole units, from the head down, merged while the bucket stays within reduce_bucket_size
   * (a unit larger than that is a bucket of its own: its gradient is final only as a whole).
   * Unit 0 is always alone: its bucket is held through the whole backward (the head adds into
   * wte's gradient), so merging unit 1 into it would hold that too. */
  for (int u = m->n_units - 1; u >= 0;) {
    int ulo = u;
    while (ulo > 1 && off[u + 1] - off[ulo - 1] <= z->reduce_bucket) ulo--;
    zc_gbucket *b = &z->gb[z->n_gb];
    b->ulo = ulo;
    b->uhi = u;
    int rc = zc_span_init(z, &b->s, off[ulo], off[u + 1]);
    if (rc) return rc;
    for (int k = ulo; k <= u; k++) z->bucket_of[k] = z->n_gb;
    b->keep = ulo == 0; /* unit 0's: held through every backward, so kept between steps */
    z->n_gb++;
    u = ulo - 1;
  }
  return LOOM_OK;
}

int zc_gb_begin_step(zero *z) {
  z->part_fresh = 1; /* the buckets cover [0, numel): the first micro-step writes every block */
  return LOOM_OK;
}

static void gb_views(zero *z, zc_gbucket *b, void *buf) {
  const loom_model_v1 *m = z->model;
  for (int i = z->t_first[b->ulo]; i < z->t_first[b->uhi + 1]; i++) {
    loom_tensor_v1 *t = LOOM_TENSOR_AT(m, i);
    *t->grad = buf ? zc_at(buf, t->offset - b->s.lo, z->gel) : NULL;
  }
}

static int gb_acquire(zero *z, int bi) {
  zc_gbucket *b = &z->gb[bi];
  if (b->state == ZC_HELD) return LOOM_OK;
  if (b->state != ZC_IDLE) {
    z->api->set_error(z->host, "gradient bucket of units %d..%d reused before its "
                      "reduce-scatter completed", b->ulo, b->uhi);
    return LOOM_INVALID_USAGE;
  }
  /* zeroed: the kernels accumulate (+=) into gradients */
  if (b->buf) /* kept from the last step */
    z->dev->memset_zero(z->dctx, b->buf, (size_t)(b->s.hi - b->s.lo) * z->gel);
  else if (!(b->buf = zc_alloc(z, b->s.hi - b->s.lo, z->gel, LOOM_MEM_COMM)))
    return LOOM_NOMEM;
  gb_views(z, b, b->buf);
  b->state = ZC_HELD;
  return LOOM_OK;
}

/* The partition gradient's block of bucket b (a pointer into it even when the block is empty). */
static void *gb_part_block(zero *z, const zc_gbucket *b) {
  return b->s.my_n ? zc_at(z->part_grads, b->s.my_lo - z->begin, z->gel) : z->part_grads;
}

/* The reduced block is the SUM over ranks (the average when predivided): on the step's first
 * micro-step it was received in place and is scaled there by 1/dp unless predivided; later
 * ones add sum/dp into the partition gradient (16-bit gradients: widened, added in fp32,
 * rounded once). */
static int gb_complete(zero *z, zc_gbucket *b) {
  int rc = LOOM_OK;
  if (b->req) {
    rc = z->api->wait(z->host, b->req);
    b->req = NULL;
  }
  void *part = gb_part_block(z, b);
  if (!rc && b->s.my_n)
    zc_avg_into(z, part, b->recv, z->inv_dp, b->s.my_n, !b->recv_direct);
  if (!b->recv_direct) z->api->free(z->host, b->recv);
  if (!b->keep) {
    z->api->free(z->host, b->buf);
    b->buf = NULL;
  }
  b->recv = NULL;
  b->recv_direct = 0;
  b->state = ZC_IDLE;
  return rc;
}

static int gb_launch(zero *z, zc_gbucket *b) {
  /* at most ZC_MAX_INFLIGHT buckets in flight (DeepSpeed's double buffering: one reduced while
   * the next is filled): MPI progresses non-blocking collectives only inside MPI calls, so
   * without a bound every bucket could still be alive at end_backward, i.e. the full gradient */
  int inflight = 0, oldest = -1;
  for (int i = 0; i < z->n_gb; i++)
    if (z->gb[i].state == ZC_REDUCING && inflight++ == 0) oldest = i;
  if (inflight >= ZC_MAX_INFLIGHT) {
    int rc = gb_complete(z, &z->gb[oldest]);
    if (rc) return rc;
  }
  gb_views(z, b, NULL);
  /* the step's first micro-step: straight into the partition gradient (the bucket's send
   * buffer is separate memory, so the two do not overlap); later ones into scratch, added */
  b->recv_direct = z->part_fresh;
  b->recv = b->recv_direct ? gb_part_block(z, b) : zc_alloc(z, b->s.my_n, z->gel, LOOM_MEM_COMM);
  if (!b->recv) return LOOM_NOMEM;
  b->state = ZC_REDUCING;
  /* in the gradient dtype: 16 bits with one micro-batch (half of fp32's bytes) */
  int rc = z->api->reduce_scatter_v(z->host, z->comm, b->buf, b->recv, b->s.counts, z->gdt,
                                    LOOM_OP_SUM, z->overlap ? &b->req : NULL);
  if (rc) return rc;
  return z->overlap ? LOOM_OK : gb_complete(z, b);
}

/* Complete the reduce-scatters that have finished, oldest first (MPI progresses non-blocking
 * collectives only inside MPI calls, so testing also moves them along). */
static int gb_poll(zero *z) {
  for (int i = 0; i < z->n_gb; i++) {
    zc_gbucket *b = &z->gb[i];
    if (b->state != ZC_REDUCING) continue;
    int done = 0;
    int rc = z->api->test(z->host, b->req, &done);
    if (rc) return rc;
    if (!done) break;
    if ((rc = gb_complete(z, b))) return rc;
  }
  return LOOM_OK;
}

int zc_gb_pre_backward(zero *z, int u) {
  int rc = LOOM_OK;
  /* the head adds into the tied wte's gradient (unit 0): hold unit 0's bucket from here on */
  if (u == z->model->n_units - 1) rc = gb_acquire(z, z->bucket_of[0]);
  if (!rc) rc = gb_acquire(z, z->bucket_of[u]);
  return rc;
}

int zc_gb_post_backward(zero *z, int u) {
  zc_gbucket *b = &z->gb[z->bucket_of[u]];
  if (u == b->ulo) {
    int rc = gb_launch(z, b);
    if (rc) return rc;
  }
  return z->overlap ? gb_poll(z) : LOOM_OK;
}

int zc_gb_end_backward(zero *z) {
  for (int i = 0; i < z->n_gb; i++) {
    zc_gbucket *b = &z->gb[i];
    if (b->state == ZC_HELD) {
      z->api->set_error(z->host, "the backward of units %d..%d never completed", b->ulo,
                        b->uhi);
      return LOOM_INVALID_USAGE;
    }
    if (b->state == ZC_REDUCING) {
      int rc = gb_complete(z, b);
      if (rc) return rc;
    }
  }
  z->part_fresh = 0; /* every block is written: later micro-steps add to it */
  return LOOM_OK;
}
