/* zero3.so — ZeRO stage 3: optimizer state, gradient and parameter partitioning (Rajbhandari et
 * al. 2020, §5.3, P_os+g+p).
 *
 * The host allocates neither the flat parameter nor the flat gradient buffer (SHARD_PARAMS,
 * SHARD_GRADS). Per rank: 4Ψ/N parameter partition + 4Ψ/N gradient partition + 8Ψ/N optimizer
 * state = 16Ψ/N, plus the gathered parameters of the unit being computed (LOOM_MEM_PARAMS:
 * "the largest gathered layer", the head's counting the tied wte it reads; one more with
 * prefetch) and transient gradient buckets (LOOM_MEM_COMM). Under bf16/fp16 with 16-bit
 * storage (ABI 1.4) the parameter partition, the gathers and their all-gathers are 16-bit, the
 * gradients as zero2, the fp32 master with m, v: 2Ψ/N + 2Ψ/N + 12Ψ/N = 16Ψ/N + 2 × the gathered
 * unit.
 *
 *   - setup: the parameter partition is initialised with init_params_range (bitwise the values
 *     a single-rank run starts from) and published; the host's AdamW updates it in place, so
 *     nothing is gathered after the optimizer step.
 *   - pre_forward(u) / pre_backward(u): all-gather unit u's parameters (uneven all-gather:
 *     each rank contributes its partition ∩ unit, from a separate send buffer) into a gather
 *     buffer and point the tensors' data views there; post_forward(u) / post_backward(u) free
 *     it and reset the views to NULL. The head (last unit) computes its logits with the tied
 *     wte (unit 0), so the head's gather carries wte along as a second range.
 *   - Within a training step a forward is always followed by its backward, so the head's gather
 *     is kept from post_forward(head) to pre_backward(head) instead of being gathered twice in a
 *     row (the parameters cannot change in between). Unit 0's backward (the embedding's) reads
 *     no parameters, so unit 0 is not gathered for backward. Outside a step (evaluation,
 *     sampling: forward only, every rank in lockstep) everything is released after use.
 *   - Gradients: as zero2 (zero_common.h): zeroed bucket buffers handed out in pre_backward
 *     (unit 0's from the head's pre_backward on: the head adds into wte's gradient), reduce-
 *     scattered when their lowest unit's backward is done, into the partition gradient
 *     (LOOM_MEM_GRADS) on every micro-step (DeepSpeed's behaviour under gradient accumulation:
 *     there is no full buffer to accumulate in) — received in place on the step's first,
 *     added on later ones; the sum is the average (LOOM_PAR_GRAD_PREDIVIDED, ABI 1.5) — and
 *     buckets freed once reduced (unit 0's kept from step to step).
 * Communication per micro-step, (N-1)/N factored out: all-gathers Ψ in forward (+ wte for the
 * head) and Ψ - unit 0 in backward, reduce-scatter Ψ: 3Ψ - wpe, i.e. 1.5x DDP's 2Ψ.
 *
 * Options (DeepSpeed's names):
 *   reduce_bucket_size  elements: units are merged into one gradient bucket up to this size
 *                       (a larger unit is a bucket of its own); default 1048576 = 2^20
 *   overlap_comm        true (default): a gradient bucket's reduce-scatter is non-blocking
 *                       and runs while backward fills the next one (at most one in flight);
 *                       false: blocking
 *   prefetch            false (default): gather each unit when it is needed. true: start the
 *                       next unit's all-gather (non-blocking) before the current unit computes,
 *                       which holds two gathered units at once (beyond ZeRO's 16Ψ/N + one
 *                       layer) and on CPU ranks gains little: MPI progresses a non-blocking
 *                       collective only inside MPI calls, i.e. between units */
#include <stdlib.h>

#include "zero_common.h"
#include "zero_estimate.h"

enum { G_RELEASED = 0, G_INFLIGHT = 1, G_READY = 2 };

typedef struct zgather {
  int nspan;          /* 1, or 2 for the head (its own range, then wte) */
  zc_span s[2];
  uint64_t len;       /* elements of the gather buffer: the spans back to back */
  void *buf;          /* LOOM_MEM_PARAMS while gathered (parameter dtype) */
  loom_request *req[2];
  int state;
} zgather;

typedef struct zero3 {
  zero *z;
  zgather *ga;  /* one per unit */
  int in_step;  /* between begin_step and end_step: every forward has its backward */
} zero3;

static int z3_create(const loom_host_api_v1 *api, loom_host *host, const loom_options *opts,
                     void **out) {
  static const char *const keys[] = {"reduce_bucket_size", "overlap_comm", "prefetch", NULL};
  if (api->opt_check_keys(host, opts, keys)) return LOOM_INVALID_CONFIG;
  zero3 *p = calloc(1, sizeof *p);
  if (!p) return LOOM_NOMEM;
  int rc = zc_create(api, host, "zero3", &p->z);
  zero *z = p->z;
  if (!rc) rc = zc_opt_elems(z, opts, "reduce_bucket_size", ZC_DEFAULT_BUCKET, &z->reduce_bucket);
  if (!rc) rc = api->opt_bool(host, opts, "overlap_comm", 1, &z->overlap);
  if (!rc) rc = api->opt_bool(host, opts, "prefetch", 0, &z->prefetch);
  if (rc) {
    zc_destroy(z);
    free(p);
    return rc;
  }
  *out = p;
  return LOOM_OK;
}

/* Point (buf != NULL) or reset the data views of the tensors gather u covers. A view is reset
 * only if it points into this gather's buffer (wte is covered by unit 0's and the head's). */
static void set_views(zero3 *p, int u, void *buf) {
  zero *z = p->z;
  const loom_model_v1 *m = z->model;
  zgather *g = &p->ga[u];
  uint64_t at = 0;
  for (int k = 0; k < g->nspan; k++) {
    const zc_span *s = &g->s[k];
    int lo = k == 0 ? z->t_first[u] : z->wte, hi = k == 0 ? z->t_first[u + 1] : z->wte + 1;
    for (int i = lo; i < hi; i++) {
      loom_tensor_v1 *t = LOOM_TENSOR_AT(m, i);
      if (buf)
        *t->data = zc_at(buf, at + (t->offset - s->lo), z->pel);
      else if ((uintptr_t)*t->data >= (uintptr_t)g->buf &&
               (uintptr_t)*t->data < (uintptr_t)zc_at(g->buf, g->len, z->pel))
        *t->data = NULL;
    }
    at += s->hi - s->lo;
  }
}

static int wait_gather(zero3 *p, zgather *g) {
  int rc = LOOM_OK;
  for (int k = 0; k < g->nspan; k++) {
    if (!g->req[k]) continue;
    int w = p->z->api->wait(p->z->host, g->req[k]);
    g->req[k] = NULL;
    if (!rc) rc = w;
  }
  return rc;
}

static int start_gather(zero3 *p, int u) {
  zero *z = p->z;
  zgather *g = &p->ga[u];
  g->buf = zc_alloc(z, g->len, z->pel, LOOM_MEM_PARAMS);
  if (!g->buf) return LOOM_NOMEM;
  g->state = G_INFLIGHT;
  uint64_t at = 0;
  for (int k = 0; k < g->nspan; k++) {
    const zc_span *s = &g->s[k];
    /* this rank's block comes from its partition (not in place: a separate send buffer); in
     * the parameter dtype (16 bits: half of fp32's bytes) */
    const void *send = zc_at(z->part_params, s->my_n ? s->my_lo - z->begin : 0, z->pel);
    int rc = z->api->all_gather_v(z->host, z->comm, send, zc_at(g->buf, at, z->pel), s->counts,
                                  z->pdt, &g->req[k]);
    if (rc) return rc;
    at += s->hi - s->lo;
  }
  return LOOM_OK;
}

static int acquire(zero3 *p, int u) {
  zgather *g = &p->ga[u];
  if (g->state == G_READY) return LOOM_OK;
  int rc = g->state == G_RELEASED ? start_gather(p, u) : LOOM_OK;
  if (!rc) rc = wait_gather(p, g);
  if (rc) return rc;
  set_views(p, u, g->buf);
  g->state = G_READY;
  return LOOM_OK;
}

static int prefetch(zero3 *p, int u) {
  if (!p->z->prefetch || u < 0 || u >= p->z->model->n_units) return LOOM_OK;
  return p->ga[u].state == G_RELEASED ? start_gather(p, u) : LOOM_OK;
}

static int release(zero3 *p, int u) {
  zgather *g = &p->ga[u];
  if (g->state == G_RELEASED) return LOOM_OK;
  int rc = wait_gather(p, g);
  if (g->state == G_READY) set_views(p, u, NULL);
  p->z->api->free(p->z->host, g->buf);
  g->buf = NULL;
  g->state = G_RELEASED;
  return rc;
}

/* Drive progress of prefetched gathers (MPI advances non-blocking collectives only inside
 * MPI calls). */
static int poke(zero3 *p) {
  for (int u = 0; u < p->z->model->n_units; u++) {
    zgather *g = &p->ga[u];
    if (g->state != G_INFLIGHT) continue;
    for (int k = 0; k < g->nspan; k++) {
      int done = 0;
      int rc = g->req[k] ? p->z->api->test(p->z->host, g->req[k], &done) : LOOM_OK;
      if (rc) return rc;
    }
  }
  return LOOM_OK;
}

/* The parameter partition's initial values, bitwise those of a single-rank run: written in
 * place in fp32; in 16 bits staged through the fp32 scratch in chunks and rounded (the host
 * initialises the fp32 master from the same values). */
static int init_partition(zero *z) {
  if (!z->count) return LOOM_OK;
  if (z->pdt == LOOM_F32)
    return z->api->init_params_range(z->host, z->begin, z->count, z->part_params);
  for (uint64_t k = 0; k < z->count; k += z->cvt_n) {
    uint64_t c = z->count - k < z->cvt_n ? z->count - k : z->cvt_n;
    int rc = z->api->init_params_range(z->host, z->begin + k, c, z->cvt);
    if (rc) return rc;
    z->dev->convert(z->dctx, zc_at(z->part_params, k, z->pel), z->pdt, z->cvt, LOOM_F32,
                    (size_t)c);
  }
  return LOOM_OK;
}

static void z3_destroy(void *ctx) {
  zero3 *p = ctx;
  if (!p) return;
  if (p->ga && p->z->model) {
    for (int u = 0; u < p->z->model->n_units; u++) {
      release(p, u);
      for (int k = 0; k < 2; k++) zc_span_free(&p->ga[u].s[k]);
    }
  }
  free(p->ga);
  zc_destroy(p->z);
  free(p);
}

static int z3_setup(void *ctx) {
  zero3 *p = ctx;
  zero *z = p->z;
  int rc = zc_setup(z, 0, 0);
  if (rc) return rc;
  const loom_model_v1 *m = z->model;
  void *params = zc_alloc(z, z->count, z->pel, LOOM_MEM_PARAMS);
  if (!params) return LOOM_NOMEM;
  z->own_part_params = 1;
  z->part_params = params;
  void *grads = zc_alloc(z, z->count, z->gel, LOOM_MEM_GRADS);
  if (!grads) return LOOM_NOMEM;
  z->own_part_grads = 1;
  z->part_grads = grads;
  if ((rc = init_partition(z))) return rc;
  rc = zc_publish(z, params, grads);
  if (!rc) rc = zc_gb_build(z);
  if (rc) return rc;

  p->ga = calloc((size_t)m->n_units, sizeof *p->ga);
  if (!p->ga) return LOOM_NOMEM;
  const loom_tensor_v1 *wte = LOOM_TENSOR_AT(m, z->wte);
  uint64_t largest = 0;
  for (int u = 0; u < m->n_units; u++) {
    zgather *g = &p->ga[u];
    g->nspan = u == m->n_units - 1 ? 2 : 1;
    rc = zc_span_init(z, &g->s[0], m->unit_offset[u], m->unit_offset[u + 1]);
    if (!rc && g->nspan == 2) rc = zc_span_init(z, &g->s[1], wte->offset, wte->offset + wte->numel);
    if (rc) return rc;
    for (int k = 0; k < g->nspan; k++) g->len += g->s[k].hi - g->s[k].lo;
    if (g->len > largest) largest = g->len;
  }
  z->api->log(z->host, LOOM_LOG_DEBUG,
              "partition [%llu, %llu) of %llu; %d gradient buckets; largest gather %llu",
              (unsigned long long)z->begin, (unsigned long long)(z->begin + z->count),
              (unsigned long long)z->numel, z->n_gb, (unsigned long long)largest);
  return LOOM_OK;
}

static int z3_begin_step(void *ctx, int step) {
  zero3 *p = ctx;
  p->in_step = 1;
  return zc_gb_begin_step(p->z);
}

static int z3_pre_forward(void *ctx, int unit) {
  zero3 *p = ctx;
  int rc = acquire(p, unit);
  if (!rc && unit + 1 < p->z->model->n_units) rc = prefetch(p, unit + 1);
  return rc;
}

static int z3_post_forward(void *ctx, int unit) {
  zero3 *p = ctx;
  int head = unit == p->z->model->n_units - 1;
  int rc = head && p->in_step ? LOOM_OK : release(p, unit); /* the head's backward comes next */
  return rc ? rc : poke(p);
}

/* Unit 0's backward is the embedding lookup's gradient (device_v1 encoder_backward: it takes
 * the upstream gradient and the token ids, no weights), so its parameters are not gathered for
 * backward: that saves the all-gather of wte and wpe on every micro-step. */
static int bwd_reads_params(int unit) { return unit != 0; }

static int z3_pre_backward(void *ctx, int unit) {
  zero3 *p = ctx;
  int rc = bwd_reads_params(unit) ? acquire(p, unit) : LOOM_OK;
  if (!rc && unit > 0 && bwd_reads_params(unit - 1)) rc = prefetch(p, unit - 1);
  if (!rc) rc = zc_gb_pre_backward(p->z, unit);
  return rc;
}

static int z3_post_backward(void *ctx, int unit) {
  zero3 *p = ctx;
  int rc = release(p, unit);
  if (!rc) rc = zc_gb_post_backward(p->z, unit);
  return rc ? rc : poke(p);
}

static int z3_end_backward(void *ctx, int micro, int n_micro) {
  zero3 *p = ctx;
  return zc_gb_end_backward(p->z);
}

static int z3_end_step(void *ctx, int step) {
  zero3 *p = ctx;
  p->in_step = 0;
  /* nothing to gather: the host's AdamW updated the parameter partition in place */
  for (int u = 0; u < p->z->model->n_units; u++) {
    int rc = release(p, u); /* none is held here; defensive */
    if (rc) return rc;
  }
  return LOOM_OK;
}

/* ABI 1.6: what this stage holds and moves for `plan` (zero_estimate.c), with the options
 * create() validates; create() here only reads them and the planned mesh. */
static int z3_estimate(const loom_host_api_v1 *api, loom_host *host, const loom_options *opts,
                        const loom_estimate_plan_v1 *plan, loom_estimate_v1 *out) {
  void *ctx = NULL;
  int rc = z3_create(api, host, opts, &ctx);
  if (rc) return rc;
  zero *z = ((zero3 *)ctx)->z;
  zc_estimate(3, z->reduce_bucket, z->overlap, z->prefetch, plan, out);
  z3_destroy(ctx);
  return LOOM_OK;
}

LOOM_EXPORT const loom_parallel_v1 loom_plugin_v1 = {
  .hdr = LOOM_PLUGIN_HEADER_INIT(LOOM_KIND_PARALLEL, "zero3", "1.0.0",
                                 "ZeRO stage 3: parameters, gradients and optimizer state "
                                 "partitioned; per-unit parameter all-gather around forward "
                                 "and backward",
                                 LOOM_PAR_CAP_GRAD_SYNC | LOOM_PAR_CAP_SHARD_OPTIM |
                                     LOOM_PAR_CAP_SHARD_GRADS | LOOM_PAR_CAP_SHARD_PARAMS |
                                     LOOM_PAR_CAP_AXIS_DP,
                                 loom_parallel_v1),
  .create = z3_create,
  .destroy = z3_destroy,
  .setup = z3_setup,
  .begin_step = z3_begin_step,
  .pre_forward = z3_pre_forward,
  .post_forward = z3_post_forward,
  .pre_backward = z3_pre_backward,
  .post_backward = z3_post_backward,
  .end_backward = z3_end_backward,
  .end_step = z3_end_step,
  .storage = LOOM_PAR_STORAGE_16BIT, /* partitions, buckets, gathers in param_dtype/grad_dtype */
  .grad_sync = LOOM_PAR_GRAD_PREDIVIDED, /* sums only; the host folds in 1/dp (ABI 1.5) */
  .estimate = z3_estimate,
  .hybrid = LOOM_PAR_HYBRID_SHARD, /* shards over DP_SHARD; "shard_size" (ABI 1.11) */
};
