/* zero1.so — ZeRO stage 1: optimizer state partitioning (Rajbhandari et al. 2020, §5.1, P_os).
 *
 * Every data-parallel rank keeps the full parameters and a full gradient buffer (the host
 * allocates both); the AdamW state m, v exists only for this rank's partition of the flat
 * buffer (8Ψ/N instead of 8Ψ: per rank 4Ψ params + 4Ψ grads + 8Ψ/N optimizer state). The
 * partition is published with set_partition, so the host computes the gradient norm over it
 * (summed over data-parallel ranks) and runs AdamW on it with its own partition-sized m, v.
 * Under bf16/fp16 with 16-bit storage (ABI 1.4) the buffers, the scratch and both collectives
 * are 16-bit and the host's partition-sized fp32 master joins m, v: 2Ψ + 2Ψ + 12Ψ/N (the ZeRO
 * paper's 4Ψ + 12Ψ/N), half the bytes on the wire (zero_common.h).
 *
 *   - accumulation micro-steps other than the last: no communication (DDP's no_sync);
 *   - last micro-step: contiguous gradient buckets, from the top of the flat buffer down, are
 *     reduce-scattered as soon as backward has finished them (post_backward), each rank
 *     receiving the sum over ranks of its partition ∩ bucket into its place in a partition-
 *     sized buffer (LOOM_MEM_COMM, allocated once: the blocks of one step together are the
 *     partition); end_backward waits for the rest. That buffer is the gradient zero1 publishes
 *     with its partition (with N > 1), so the host's norm and AdamW read the reduced values
 *     where they arrived: no copy back into the full gradient buffer. The sum is the average:
 *     zero1 sets LOOM_PAR_GRAD_PREDIVIDED (ABI 1.5) and the host folds 1/N into the loss
 *     gradient (an older host does not: then the blocks are scaled by 1/N in place). The full
 *     gradient buffer keeps this rank's local, unreduced values: nobody reads them.
 *   - after the optimizer step (end_step): all-gather the updated partitions in place into the
 *     full parameter buffer, in buckets.
 * Communication per step equals DDP's all-reduce: reduce-scatter + all-gather, 2(N-1)/N Ψ.
 *
 * Options (DeepSpeed's names):
 *   reduce_bucket_size     elements per gradient reduce-scatter bucket (default 1048576 = 2^20,
 *                          4 MiB of fp32; buckets may cross tensor and unit boundaries)
 *   allgather_bucket_size  elements per parameter all-gather bucket (default 2^20)
 *   overlap_comm           true (default): launch buckets during backward as they become
 *                          ready; false: reduce-scatter everything at end_backward, blocking */
#include <stdlib.h>

#include "zero_common.h"
#include "zero_estimate.h"

typedef struct zero1 {
  zero *z;
  zc_flat *rs;  /* gradient buckets, rs[0] = the highest offsets (finished first) */
  int n_rs;
  int next;     /* first bucket not launched yet in this sync micro-step */
  int sync;     /* this micro-step reduce-scatters */
  void *recv;   /* the partition's reduced gradient (count elements of gdt, LOOM_MEM_COMM) when
                   dp > 1, published as the partition's grads: each bucket's block at its
                   offset (the receive side must not overlap the send buffer, the full
                   gradient) */
} zero1;

static int z1_create(const loom_host_api_v1 *api, loom_host *host, const loom_options *opts,
                     void **out) {
  static const char *const keys[] = {"reduce_bucket_size", "allgather_bucket_size",
                                     "overlap_comm", NULL};
  if (api->opt_check_keys(host, opts, keys)) return LOOM_INVALID_CONFIG;
  zero1 *p = calloc(1, sizeof *p);
  if (!p) return LOOM_NOMEM;
  int rc = zc_create(api, host, "zero1", &p->z);
  zero *z = p->z;
  if (!rc) rc = zc_opt_elems(z, opts, "reduce_bucket_size", ZC_DEFAULT_BUCKET, &z->reduce_bucket);
  if (!rc)
    rc = zc_opt_elems(z, opts, "allgather_bucket_size", ZC_DEFAULT_BUCKET, &z->allgather_bucket);
  if (!rc) rc = api->opt_bool(host, opts, "overlap_comm", 1, &z->overlap);
  if (rc) {
    zc_destroy(z);
    free(p);
    return rc;
  }
  *out = p;
  return LOOM_OK;
}

static void z1_destroy(void *ctx) {
  zero1 *p = ctx;
  if (!p) return;
  for (int i = 0; i < p->n_rs; i++) p->rs[i].recv = NULL; /* views into p->recv */
  zc_flat_free(p->z, p->rs, p->n_rs);
  if (p->recv) p->z->api->free(p->z->host, p->recv);
  zc_destroy(p->z);
  free(p);
}

static int z1_setup(void *ctx) {
  zero1 *p = ctx;
  zero *z = p->z;
  int rc = zc_setup(z, 1, 1);
  if (rc) return rc;
  const loom_model_v1 *m = z->model;
  /* once for the run rather than per bucket and step: the blocks are all alive at the end of
   * backward anyway (the same peak), and a fresh zero-filled allocation of the partition's
   * size every step cost page faults and zeroing */
  if (z->dp > 1 && !(p->recv = zc_alloc(z, z->count, z->gel, LOOM_MEM_COMM))) return LOOM_NOMEM;
  rc = zc_publish(z, zc_at(m->params, z->begin, z->pel),
                  p->recv ? p->recv : zc_at(m->grads, z->begin, z->gel));
  if (!rc) rc = zc_flat_build(z, z->reduce_bucket, 1, &p->rs, &p->n_rs);
  if (!rc) rc = zc_flat_build(z, z->allgather_bucket, 0, &z->ag, &z->n_ag);
  if (rc) return rc;
  z->api->log(z->host, LOOM_LOG_DEBUG,
              "partition [%llu, %llu) of %llu; %d reduce-scatter and %d all-gather buckets",
              (unsigned long long)z->begin, (unsigned long long)(z->begin + z->count),
              (unsigned long long)z->numel, p->n_rs, z->n_ag);
  return LOOM_OK;
}

static int z1_begin_step(void *ctx, int step) {
  zero1 *p = ctx;
  return zc_first_step_gather(p->z);
}

static int z1_begin_micro(void *ctx, int micro, int n_micro) {
  zero1 *p = ctx;
  p->sync = p->z->dp > 1 && micro == n_micro - 1;
  p->next = 0;
  return LOOM_OK;
}

static int launch(zero1 *p, int i) {
  zero *z = p->z;
  zc_flat *b = &p->rs[i];
  /* send and recv must not overlap: receive into scratch, copy into the partition later */
  b->recv = b->s.my_n ? zc_at(p->recv, b->s.my_lo - z->begin, z->gel) : p->recv;
  /* in the gradient dtype: 16 bits with one micro-batch (half of fp32's bytes) */
  return z->api->reduce_scatter_v(z->host, z->comm, zc_at(z->model->grads, b->s.lo, z->gel),
                                  b->recv, b->s.counts, z->gdt, LOOM_OP_SUM, &b->req);
}

static int z1_post_backward(void *ctx, int unit) {
  zero1 *p = ctx;
  zero *z = p->z;
  if (!p->sync || !z->overlap) return LOOM_OK;
  uint64_t ready_from = z->model->unit_offset[unit];
  while (p->next < p->n_rs && p->rs[p->next].s.lo >= ready_from) {
    int rc = launch(p, p->next++);
    if (rc) return rc;
  }
  /* MPI progresses non-blocking collectives only inside MPI calls: poke the oldest ones */
  for (int i = 0; i < p->next; i++) {
    if (!p->rs[i].req) continue;
    int done = 0;
    int rc = z->api->test(z->host, p->rs[i].req, &done);
    if (rc) return rc;
    if (!done) break;
  }
  return LOOM_OK;
}

static int z1_end_backward(void *ctx, int micro, int n_micro) {
  (void)micro, (void)n_micro; /* begin_micro decided whether this micro-step syncs */
  zero1 *p = ctx;
  zero *z = p->z;
  if (!p->sync) return LOOM_OK;
  int rc = LOOM_OK;
  while (!rc && p->next < p->n_rs) rc = launch(p, p->next++);
  for (int i = 0; i < p->n_rs; i++) {
    zc_flat *b = &p->rs[i];
    if (b->req) {
      int w = z->api->wait(z->host, b->req);
      b->req = NULL;
      if (!rc) rc = w;
    }
    if (!rc && b->s.my_n) /* the data-parallel average, in place (nothing when predivided) */
      zc_avg_into(z, b->recv, b->recv, z->inv_dp, b->s.my_n, 0);
    b->recv = NULL; /* a view into p->recv */
  }
  return rc;
}

static int z1_end_step(void *ctx, int step) {
  zero1 *p = ctx;
  zero *z = p->z;
  return z->dp > 1 ? zc_allgather_params(z, z->model->params) : LOOM_OK;
}

/* ABI 1.6: what this stage holds and moves for `plan` (zero_estimate.c), with the options
 * create() validates; create() here only reads them and the planned mesh. */
static int z1_estimate(const loom_host_api_v1 *api, loom_host *host, const loom_options *opts,
                        const loom_estimate_plan_v1 *plan, loom_estimate_v1 *out) {
  void *ctx = NULL;
  int rc = z1_create(api, host, opts, &ctx);
  if (rc) return rc;
  zero *z = ((zero1 *)ctx)->z;
  zc_estimate(1, z->reduce_bucket, z->overlap, z->prefetch, plan, out);
  z1_destroy(ctx);
  return LOOM_OK;
}

LOOM_EXPORT const loom_parallel_v1 loom_plugin_v1 = {
  .hdr = LOOM_PLUGIN_HEADER_INIT(LOOM_KIND_PARALLEL, "zero1", "1.0.0",
                                 "ZeRO stage 1: optimizer state partitioned over data-parallel "
                                 "ranks; bucketed gradient reduce-scatter, parameter all-gather",
                                 LOOM_PAR_CAP_GRAD_SYNC | LOOM_PAR_CAP_SHARD_OPTIM |
                                     LOOM_PAR_CAP_AXIS_DP,
                                 loom_parallel_v1),
  .create = z1_create,
  .destroy = z1_destroy,
  .setup = z1_setup,
  .begin_step = z1_begin_step,
  .begin_micro = z1_begin_micro,
  .post_backward = z1_post_backward,
  .end_backward = z1_end_backward,
  .end_step = z1_end_step,
  .storage = LOOM_PAR_STORAGE_16BIT, /* partitions, buckets, gathers in param_dtype/grad_dtype */
  .grad_sync = LOOM_PAR_GRAD_PREDIVIDED, /* sums only; the host folds in 1/dp (ABI 1.5) */
  .estimate = z1_estimate,
};
