/* pipeline.so — pipeline parallelism: the layers split into stages over the PP axis of the
 * mesh (contiguous, or v interleaved chunks per stage), activations and their gradients sent
 * point-to-point between neighbouring stages, the micro-batches of gradient accumulation
 * scheduled by this plugin (ABI 1.2; chunks 1.12; LOOM_PAR_CAP_SCHEDULE | LOOM_PAR_CAP_AXIS_PP).
 *
 * The host owns the placement (the entry's host-level "size" = number of stages, optional
 * "chunks" = model chunks per stage and "stages" = units per (virtual) stage; by default
 * balanced by parameter count, with chunks n_layer / (p·v) blocks per virtual stage),
 * allocates only the stage's units, keeps the tied wte on the first and the last stage and
 * sums its gradient, and reduces the loss and the gradient norm over the stages. The plugin
 * owns the order in which the stage's micro-steps run, through the entry points of
 * loom_schedule_v1:
 *
 *   "sequential"  one micro-batch at a time through all stages, forward then backward: the
 *                 plain layer-split model parallelism (only one stage busy at any moment)
 *   "gpipe"       all m forwards, then all m backwards (Huang et al. 2019): every stage holds
 *                 the activations of all m micro-batches
 *   "1f1b"        PipeDream-Flush / Megatron (Narayanan et al. 2021, §2.2): p − stage − 1
 *                 warm-up forwards, then alternate one forward and one backward, then drain:
 *                 at most p − stage micro-batches in flight; needs m >= p
 *   "interleaved" Megatron's interleaved 1F1B (Narayanan et al. 2021, §2.2.1) over "chunks" v
 *                 model chunks per rank (the host places rank s's chunk k at virtual stage
 *                 k·p + s): (p − s − 1)·2 + (v − 1)·p warm-up forwards, micro-batches in
 *                 groups of p through every chunk; the bubble shrinks to (p − 1)/(v·m + p − 1);
 *                 needs m % p == 0
 *
 * The order is pipeline_order.c's (unit.check_pipeline_order simulates it on every rank).
 * Activations go forward with tag 2(i·v + k), gradients backward with tag 2(i·v + k) + 1 (i =
 * micro-batch, k = the receiving chunk; v = 1: 2i and 2i + 1), as non-blocking sends (so two
 * neighbours sending to each other never deadlock) and blocking receives. The time spent
 * blocked in receives and in send completions is this stage's idle time: the plugin logs its
 * fraction of the step (the pipeline bubble) at the end, against the ideal
 * (p − 1)/(v·m + p − 1).
 *
 * Mixed precision (bf16.so, fp16.so): the boundary tensors hold 16-bit values (the model rounds
 * every activation and activation gradient it stores), so they travel packed in the compute
 * dtype — half the bytes, and lossless: the receiver unpacks exactly the values that were sent.
 * The packed copies are communication buffers (LOOM_MEM_COMM, one per (micro-batch, chunk) and
 * direction, plus one for receiving), allocated on first use. Under "interleaved" the gradient
 * sends complete only at the end of the step (pipeline_order.h, pp_defer_grad_sends), so in
 * fp32 they go from a copy too (one per (micro-batch, chunk) with a previous virtual stage).
 *
 * Options: "schedule": "sequential" | "gpipe" | "1f1b" | "interleaved" (default "1f1b");
 * The pipeline entry's host key "chunks" (v >= 1, default 1; > 1 only with "interleaved") is the
 * host's placement; the plugin reads it as api->n_chunks (host ABI 1.12). */
#include <loom/loom.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pipeline_estimate.h"
#include "pipeline_order.h"

static const char *const sched_names[] = {"sequential", "gpipe", "1f1b", "interleaved"};

typedef struct pl {
  const loom_host_api_v1 *api;
  loom_host *host;
  int sched;
  int p, s;             /* stages, this stage */
  int v;                /* model chunks on this stage ("chunks") */
  loom_comm *comm;
  const loom_schedule_v1 *cur;
  /* per (micro-batch, chunk) id = micro * v + chunk (n_req of them): activation / gradient
   * sends, and their packed (16-bit) or copied (deferred fp32 gradient) send buffers */
  loom_request **req_out, **req_gin;
  int n_req;
  double idle, busy_total; /* this step */
  double sum_idle, sum_total; /* over the steps after the first */
  int steps, inflight, peak_inflight, n_micro;
  loom_dtype dt;        /* LOOM_F32, or the 16-bit compute dtype the boundaries travel in */
  const loom_device_v1 *dev;
  void *dev_ctx;
  void **pack_out, **pack_gin; /* per id: packed sends (16-bit) / gradient copies, or NULL */
  uint16_t *pack_in;    /* the packed receive */
  uint64_t pack_numel;  /* elements of each packed buffer */
  pp_op *ops;           /* this step's order (2 * n_req entries) */
} pl;

/* The send buffer *slot of `bytes` (allocated on first use); NULL when out of memory. */
static void *packed(pl *P, void **slot, size_t bytes) {
  if (!*slot) *slot = P->api->alloc(P->host, bytes, LOOM_MEM_COMM);
  return *slot;
}

static void free_packed(pl *P) {
  for (int i = 0; i < P->n_req; i++) {
    if (P->pack_out && P->pack_out[i]) P->api->free(P->host, P->pack_out[i]);
    if (P->pack_gin && P->pack_gin[i]) P->api->free(P->host, P->pack_gin[i]);
  }
  if (P->pack_in) P->api->free(P->host, P->pack_in);
  free(P->pack_out), free(P->pack_gin);
  P->pack_out = P->pack_gin = NULL;
  P->pack_in = NULL;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int pl_create(const loom_host_api_v1 *api, loom_host *host, const loom_options *opts,
                     void **out) {
  static const char *const keys[] = {"schedule", NULL}; /* "size", "stages", "chunks": the
                                                           host's */
  if (api->opt_check_keys(host, opts, keys)) return LOOM_INVALID_CONFIG;
  const char *name;
  if (api->opt_string(host, opts, "schedule", "1f1b", &name)) return LOOM_INVALID_CONFIG;
  int sched = -1;
  for (int i = 0; i < PP_N_SCHEDULES; i++)
    if (!strcmp(name, sched_names[i])) sched = i;
  if (sched < 0) {
    api->set_error(host, "schedule: expected \"sequential\", \"gpipe\", \"1f1b\" or "
                   "\"interleaved\", got \"%s\"", name);
    return LOOM_INVALID_CONFIG;
  }
  /* the host's placement: model chunks per stage (ABI 1.12; one on an older host) */
  int64_t v = LOOM_HOST_HAS(api, n_chunks) ? api->n_chunks(host) : 1;
  if (v < 1 || v > LOOM_ESTIMATE_MAX_CHUNKS) {
    api->set_error(host, "chunks %lld: expected 1..%d", (long long)v, LOOM_ESTIMATE_MAX_CHUNKS);
    return LOOM_INVALID_CONFIG;
  }
  int p = api->size(host, LOOM_AXIS_PP);
  int m = LOOM_HOST_HAS(api, n_micro) ? api->n_micro(host) : 0;
  if (v > 1 && sched != PP_INTERLEAVED) {
    api->set_error(host, "chunks %lld needs \"schedule\": \"interleaved\" (schedule \"%s\" "
                   "runs one contiguous stage per rank)", (long long)v, name);
    return LOOM_INVALID_CONFIG;
  }
  if (sched == PP_1F1B && m < p) {
    api->set_error(host, "schedule \"1f1b\" needs at least as many micro-batches as stages: "
                   "train.grad_accum_steps is %d, the pipeline has %d stages (raise "
                   "grad_accum_steps to >= %d, or use \"gpipe\" / \"sequential\")", m, p, p);
    return LOOM_INVALID_CONFIG;
  }
  if (sched == PP_INTERLEAVED && (p < 2 || m % p != 0 || m < p)) {
    api->set_error(host, "schedule \"interleaved\" needs at least 2 stages and a number of "
                   "micro-batches that is a multiple of the stages: train.grad_accum_steps is "
                   "%d, the pipeline has %d stages (its micro-batches go through the chunks in "
                   "groups of p)", m, p);
    return LOOM_INVALID_CONFIG;
  }
  pl *P = calloc(1, sizeof *P);
  if (!P) return LOOM_NOMEM;
  P->api = api;
  P->host = host;
  P->sched = sched;
  P->p = p;
  P->v = (int)v;
  P->s = api->rank(host, LOOM_AXIS_PP);
  P->comm = api->comm(host, LOOM_AXIS_PP);
  *out = P;
  return LOOM_OK;
}

static void pl_destroy(void *ctx) {
  pl *P = ctx;
  if (!P) return;
  if (P->steps > 0) {
    int m = P->n_micro;
    P->api->log(P->host, LOOM_LOG_INFO,
                "bubble: stage %d of %d, schedule %s, m %d, chunks %d: idle %.4f of the "
                "pipeline time over %d steps (ideal %s = %.4f; above it: bubble plus load "
                "imbalance between stages); peak %d micro-batches in flight",
                P->s, P->p, sched_names[P->sched], m, P->v,
                P->sum_total > 0 ? P->sum_idle / P->sum_total : 0.0, P->steps - 1,
                /* sequential runs one micro-batch through all stages at a time */
                P->sched == 0 ? "(p-1)/p" : "(p-1)/(v*m+p-1)",
                P->sched == 0 ? (double)(P->p - 1) / (double)P->p
                              : (double)(P->p - 1) / (double)(P->v * m + P->p - 1),
                P->peak_inflight);
  }
  free_packed(P);
  free(P->req_out);
  free(P->req_gin);
  free(P->ops);
  free(P);
}

static int recv_timed(pl *P, float *buf, uint64_t n, int peer, int tag) {
  if (!buf) return LOOM_NOMEM;
  double t = now_s();
  int rc;
  if (P->dt == LOOM_F32) {
    rc = P->api->recv(P->host, P->comm, buf, (size_t)n, LOOM_F32, peer, tag, NULL);
  } else {
    uint16_t *in = packed(P, (void **)&P->pack_in, (size_t)n * sizeof(uint16_t));
    if (!in) return LOOM_NOMEM;
    rc = P->api->recv(P->host, P->comm, in, (size_t)n, P->dt, peer, tag, NULL);
    if (!rc) rc = P->dev->convert(P->dev_ctx, buf, LOOM_F32, in, P->dt, (size_t)n);
  }
  P->idle += now_s() - t;
  return rc;
}

/* Start sending boundary tensor buf (n floats); *pack is its packed copy under 16-bit
 * precision, or with `copy` its fp32 copy (kept until the send completes). */
static int send_boundary(pl *P, const float *buf, uint64_t n, void **pack, int copy, int peer,
                         int tag, loom_request **req) {
  if (P->dt == LOOM_F32 && !copy)
    return P->api->send(P->host, P->comm, buf, (size_t)n, LOOM_F32, peer, tag, req);
  void *out = packed(P, pack, (size_t)n * loom_dtype_size(P->dt));
  if (!out) return LOOM_NOMEM;
  int rc = LOOM_OK;
  if (P->dt == LOOM_F32)
    P->dev->copy(P->dev_ctx, out, buf, (size_t)n * sizeof(float));
  else
    rc = P->dev->convert(P->dev_ctx, out, P->dt, buf, LOOM_F32, (size_t)n);
  return rc ? rc : P->api->send(P->host, P->comm, out, (size_t)n, P->dt, peer, tag, req);
}

static int wait_timed(pl *P, loom_request **r) {
  if (!*r) return LOOM_OK;
  double t = now_s();
  int rc = P->api->wait(P->host, *r);
  *r = NULL;
  P->idle += now_s() - t;
  return rc;
}

/* The host's entry points for chunk k (the ABI 1.2 ones for a single chunk). */
static int s_forward(const loom_schedule_v1 *S, int i, int k) {
  return S->n_chunks > 1 ? S->forward_chunk(S->ud, i, k) : S->forward(S->ud, i);
}
static int s_backward(const loom_schedule_v1 *S, int i, int k) {
  return S->n_chunks > 1 ? S->backward_chunk(S->ud, i, k) : S->backward(S->ud, i);
}
static float *s_boundary(const loom_schedule_v1 *S, int i, int k, int which) {
  return S->n_chunks > 1 ? S->boundary_chunk(S->ud, i, k, which) : S->boundary(S->ud, i, which);
}
static int s_release(const loom_schedule_v1 *S, int i, int k) {
  if (S->n_chunks > 1) return S->release_chunk ? S->release_chunk(S->ud, i, k) : LOOM_OK;
  return S->release ? S->release(S->ud, i) : LOOM_OK;
}

static int fwd(pl *P, int i, int k) {
  const loom_schedule_v1 *S = P->cur;
  const int id = i * P->v + k;
  pp_peer pr, nx;
  int rc;
  if (pp_prev(P->p, P->v, P->s, k, &pr) &&
      (rc = recv_timed(P, s_boundary(S, i, k, LOOM_BOUNDARY_INPUT), S->boundary_numel,
                       pr.rank, pp_tag_act(P->v, i, k))) != LOOM_OK)
    return rc;
  if ((rc = s_forward(S, i, k)) != LOOM_OK) return rc;
  if (++P->inflight > P->peak_inflight) P->peak_inflight = P->inflight;
  if (pp_next(P->p, P->v, P->s, k, &nx)) {
    float *out = s_boundary(S, i, k, LOOM_BOUNDARY_OUTPUT);
    if (!out) return LOOM_NOMEM;
    return send_boundary(P, out, S->boundary_numel, &P->pack_out[id], 0, nx.rank,
                         pp_tag_act(P->v, i, nx.chunk), &P->req_out[id]);
  }
  return LOOM_OK;
}

/* Backward of (micro i, chunk k), then its sends completed (the gradient's at the end of the
 * step under pp_defer_grad_sends) and its activations released. */
static int bwd(pl *P, int i, int k) {
  const loom_schedule_v1 *S = P->cur;
  const int id = i * P->v + k, defer = pp_defer_grad_sends(P->sched);
  pp_peer pr, nx;
  int rc;
  if (pp_next(P->p, P->v, P->s, k, &nx) &&
      (rc = recv_timed(P, s_boundary(S, i, k, LOOM_BOUNDARY_GRAD_OUTPUT), S->boundary_numel,
                       nx.rank, pp_tag_grad(P->v, i, k))) != LOOM_OK)
    return rc;
  if ((rc = s_backward(S, i, k)) != LOOM_OK) return rc;
  if (pp_prev(P->p, P->v, P->s, k, &pr)) {
    float *g = s_boundary(S, i, k, LOOM_BOUNDARY_GRAD_INPUT);
    if (!g) return LOOM_NOMEM;
    rc = send_boundary(P, g, S->boundary_numel, &P->pack_gin[id], defer, pr.rank,
                       pp_tag_grad(P->v, i, pr.chunk), &P->req_gin[id]);
    if (rc) return rc;
  }
  if (!defer && (rc = wait_timed(P, &P->req_gin[id])) != LOOM_OK) return rc;
  if ((rc = wait_timed(P, &P->req_out[id])) != LOOM_OK) return rc;
  P->inflight--;
  return s_release(S, i, k);
}

/* Room for n (micro, chunk) ids and their order. */
static int reserve(pl *P, int n, uint64_t numel) {
  if (n <= P->n_req && numel == P->pack_numel) return LOOM_OK;
  free_packed(P); /* every send completed at the end of the previous step */
  free(P->req_out), free(P->req_gin), free(P->ops);
  if (n < P->n_req) n = P->n_req;
  P->req_out = calloc((size_t)n, sizeof *P->req_out);
  P->req_gin = calloc((size_t)n, sizeof *P->req_gin);
  P->pack_out = calloc((size_t)n, sizeof *P->pack_out);
  P->pack_gin = calloc((size_t)n, sizeof *P->pack_gin);
  P->ops = calloc((size_t)2 * n, sizeof *P->ops);
  P->n_req = 0;
  if (!P->req_out || !P->req_gin || !P->pack_out || !P->pack_gin || !P->ops) return LOOM_NOMEM;
  P->n_req = n;
  P->pack_numel = numel;
  return LOOM_OK;
}

static int pl_run_step(void *ctx, const loom_schedule_v1 *S) {
  pl *P = ctx;
  const int m = S->n_micro, p = P->p, v = P->v;
  if (!P->dev) { /* first step: the model exists; its compute dtype decides the packing */
    P->dev = P->api->device(P->host, &P->dev_ctx);
    const loom_model_v1 *model = P->api->model(P->host);
    /* the boundary tensors travel in the plan's activation dtype (16-bit under bf16/fp16) */
    loom_dtype dt =
        model ? loom_storage_plan_of(P->api, P->host, model).activation_comm_dtype : LOOM_F32;
    P->dt = (dt == LOOM_BF16 || dt == LOOM_F16) && LOOM_HAS(P->dev, convert) ? dt : LOOM_F32;
  }
  int host_chunks = S->struct_size > offsetof(loom_schedule_v1, n_chunks) ? S->n_chunks : 1;
  if (host_chunks != v || (v > 1 && (S->struct_size < sizeof *S || !S->forward_chunk ||
                                     !S->backward_chunk || !S->boundary_chunk))) {
    P->api->set_error(P->host, "chunks %d: the host placed %d model chunks on this stage "
                      "(a host before ABI 1.12 places one)", v, host_chunks);
    return LOOM_INVALID_USAGE;
  }
  const char *why = pp_order_check(P->sched, p, m, v);
  if (why) {
    P->api->set_error(P->host, "%s: %d micro-batches, %d stages, %d chunks", why, m, p, v);
    return LOOM_INVALID_USAGE;
  }
  if (reserve(P, m * v, S->boundary_numel) != LOOM_OK) return LOOM_NOMEM;
  P->cur = S;
  P->n_micro = m;
  P->idle = 0.0;
  P->inflight = 0;
  double t0 = now_s();
  int rc = LOOM_OK, n = pp_order(P->sched, p, P->s, m, v, P->ops);
  for (int j = 0; j < n && !rc; j++)
    rc = P->ops[j].fwd ? fwd(P, P->ops[j].micro, P->ops[j].chunk)
                       : bwd(P, P->ops[j].micro, P->ops[j].chunk);
  for (int i = 0; i < m * v; i++) { /* the deferred gradient sends; after an error, no leak */
    if (P->req_gin[i]) {
      int w = wait_timed(P, &P->req_gin[i]);
      if (!rc) rc = w;
    }
    if (P->req_out[i]) P->api->wait(P->host, P->req_out[i]), P->req_out[i] = NULL;
  }
  P->cur = NULL;
  double total = now_s() - t0;
  if (!rc && P->steps++ > 0) { /* the first step pays for allocation: not in the average */
    P->sum_idle += P->idle;
    P->sum_total += total;
  }
  if (P->steps == 1) P->sum_idle = P->sum_total = 0.0;
  return rc;
}

/* ABI 1.6: what this stage holds and moves for `plan` (pipeline_estimate.c), for the schedule
 * create() validates (1f1b needs m >= p there; it reads only its option and the mesh). */
static int pl_estimate(const loom_host_api_v1 *api, loom_host *host, const loom_options *opts,
                       const loom_estimate_plan_v1 *plan, loom_estimate_v1 *out) {
  void *ctx = NULL;
  int rc = pl_create(api, host, opts, &ctx);
  if (rc) return rc;
  pl *P = ctx;
  pipeline_estimate_figures(plan, P->sched, sched_names[P->sched], P->v, out);
  pl_destroy(ctx);
  return LOOM_OK;
}

LOOM_EXPORT const loom_parallel_v1 loom_plugin_v1 = {
  .hdr = LOOM_PLUGIN_HEADER_INIT(LOOM_KIND_PARALLEL, "pipeline", "1.0.0",
                                 "pipeline parallel: stages over the pp axis, point-to-point "
                                 "activations; sequential, gpipe, 1f1b, interleaved schedules",
                                 LOOM_PAR_CAP_SCHEDULE | LOOM_PAR_CAP_AXIS_PP, loom_parallel_v1),
  .create = pl_create,
  .destroy = pl_destroy,
  .run_step = pl_run_step,
  .storage = LOOM_PAR_STORAGE_16BIT, /* it never touches parameter or gradient storage */
  .estimate = pl_estimate,
};
