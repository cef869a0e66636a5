/* zero2.so — ZeRO stage 2: optimizer state and gradient partitioning (Rajbhandari et al. 2020,
 * §5.2, P_os+g).
 *
 * The host keeps the full parameters but allocates NO gradient buffer (SHARD_GRADS): per rank
 * 4Ψ params + 4Ψ/N gradient partition + 8Ψ/N optimizer state = 4Ψ + 12Ψ/N, plus transient
 * bucket memory (LOOM_MEM_COMM). Under bf16/fp16 with 16-bit storage (ABI 1.4): 16-bit
 * parameters, gradient partition, buckets and collectives, the fp32 master with m, v:
 * 2Ψ + 2Ψ/N + 12Ψ/N = 2Ψ + 14Ψ/N (fp32 gradients with accumulation: 2Ψ + 16Ψ/N).
 *
 *   - begin_step: the partition gradient (LOOM_MEM_GRADS, this rank's range only) is marked
 *     empty: the step's first micro-step reduce-scatters straight into it (no zeroing pass).
 *   - pre_backward(u): unit u's gradient views point at a zeroed bucket buffer (LOOM_MEM_COMM)
 *     covering its bucket of whole units (units merged from the head down up to
 *     reduce_bucket_size). The head also adds into the tied wte's gradient (unit 0), so unit
 *     0's bucket is handed out at pre_backward(head) and held until post_backward(0); unit 0
 *     is therefore always a bucket of its own, and its buffer is kept from step to step
 *     (zeroed in place: it is in every backward's peak anyway).
 *   - post_backward(u), when u is the lowest unit of its bucket: the views go back to NULL and
 *     the bucket is reduce-scattered (uneven: each rank receives the sum of its range ∩ bucket),
 *     on the step's first micro-step straight into the partition gradient, on later ones into
 *     scratch that is then ADDED to it; the bucket and its scratch are freed when that
 *     completes. zero2 sets LOOM_PAR_GRAD_PREDIVIDED (ABI 1.5): the host folds 1/N into the
 *     loss gradient, so the sum is the average (an older host does not: the block is then
 *     scaled by 1/N). So no rank ever holds the full gradient, only the buckets in flight.
 *   - Gradient accumulation: this happens on EVERY micro-step, accumulating in the partition
 *     gradient buffer (DeepSpeed's ZeRO-2 behaviour: there is no full-size buffer to
 *     accumulate in, so there is no no_sync; communication grows with the number of
 *     micro-steps).
 *   - end_step: the host's AdamW updated this rank's partition of the full parameter buffer;
 *     all-gather the partitions in place, in buckets (as zero1).
 *
 * Options (DeepSpeed's names):
 *   reduce_bucket_size     elements: units are merged into one gradient bucket up to this size
 *                          (a larger unit is a bucket of its own); default 1048576 = 2^20
 *   allgather_bucket_size  elements per parameter all-gather bucket (default 2^20)
 *   overlap_comm           true (default): a bucket's reduce-scatter is non-blocking and runs
 *                          while backward fills the next bucket (DeepSpeed's double buffering:
 *                          at most one in flight; it is completed when it has finished, when
 *                          the next one is launched, or at end_backward); false: blocking, in
 *                          post_backward */
#include "zero_common.h"
#include "zero_estimate.h"

static int z2_create(const loom_host_api_v1 *api, loom_host *host, const loom_options *opts,
                     void **out) {
  static const char *const keys[] = {"reduce_bucket_size", "allgather_bucket_size",
                                     "overlap_comm", NULL};
  if (api->opt_check_keys(host, opts, keys)) return LOOM_INVALID_CONFIG;
  zero *z;
  int rc = zc_create(api, host, "zero2", &z);
  if (rc) return rc;
  rc = zc_opt_elems(z, opts, "reduce_bucket_size", ZC_DEFAULT_BUCKET, &z->reduce_bucket);
  if (!rc)
    rc = zc_opt_elems(z, opts, "allgather_bucket_size", ZC_DEFAULT_BUCKET, &z->allgather_bucket);
  if (!rc) rc = api->opt_bool(host, opts, "overlap_comm", 1, &z->overlap);
  if (rc) {
    zc_destroy(z);
    return rc;
  }
  *out = z;
  return LOOM_OK;
}

static void z2_destroy(void *ctx) { zc_destroy(ctx); }

static int z2_setup(void *ctx) {
  zero *z = ctx;
  int rc = zc_setup(z, 1, 0);
  if (rc) return rc;
  void *grads = zc_alloc(z, z->count, z->gel, LOOM_MEM_GRADS);
  if (!grads) return LOOM_NOMEM;
  z->own_part_grads = 1;
  z->part_grads = grads;
  rc = zc_publish(z, zc_at(z->model->params, z->begin, z->pel), grads);
  if (!rc) rc = zc_gb_build(z);
  if (!rc) rc = zc_flat_build(z, z->allgather_bucket, 0, &z->ag, &z->n_ag);
  if (rc) return rc;
  z->api->log(z->host, LOOM_LOG_DEBUG,
              "partition [%llu, %llu) of %llu; %d gradient buckets, %d all-gather buckets",
              (unsigned long long)z->begin, (unsigned long long)(z->begin + z->count),
              (unsigned long long)z->numel, z->n_gb, z->n_ag);
  return LOOM_OK;
}

static int z2_begin_step(void *ctx, int step) {
  int rc = zc_first_step_gather(ctx);
  return rc ? rc : zc_gb_begin_step(ctx);
}
static int z2_pre_backward(void *ctx, int unit) { return zc_gb_pre_backward(ctx, unit); }
static int z2_post_backward(void *ctx, int unit) { return zc_gb_post_backward(ctx, unit); }
static int z2_end_backward(void *ctx, int micro, int n_micro) { return zc_gb_end_backward(ctx); }

static int z2_end_step(void *ctx, int step) {
  zero *z = ctx;
  return z->dp > 1 ? zc_allgather_params(z, z->model->params) : LOOM_OK;
}

/* ABI 1.6: what this stage holds and moves for `plan` (zero_estimate.c), with the options
 * create() validates; create() here only reads them and the planned mesh. */
static int z2_estimate(const loom_host_api_v1 *api, loom_host *host, const loom_options *opts,
                        const loom_estimate_plan_v1 *plan, loom_estimate_v1 *out) {
  void *ctx = NULL;
  int rc = z2_create(api, host, opts, &ctx);
  if (rc) return rc;
  zero *z = ctx;
  zc_estimate(2, z->reduce_bucket, z->overlap, z->prefetch, plan, out);
  z2_destroy(ctx);
  return LOOM_OK;
}

LOOM_EXPORT const loom_parallel_v1 loom_plugin_v1 = {
  .hdr = LOOM_PLUGIN_HEADER_INIT(LOOM_KIND_PARALLEL, "zero2", "1.0.0",
                                 "ZeRO stage 2: optimizer state and gradients partitioned over "
                                 "data-parallel ranks; per-bucket reduce-scatter during backward",
                                 LOOM_PAR_CAP_GRAD_SYNC | LOOM_PAR_CAP_SHARD_OPTIM |
                                     LOOM_PAR_CAP_SHARD_GRADS | LOOM_PAR_CAP_AXIS_DP,
                                 loom_parallel_v1),
  .create = z2_create,
  .destroy = z2_destroy,
  .setup = z2_setup,
  .begin_step = z2_begin_step,
  .pre_backward = z2_pre_backward,
  .post_backward = z2_post_backward,
  .end_backward = z2_end_backward,
  .end_step = z2_end_step,
  .storage = LOOM_PAR_STORAGE_16BIT, /* partitions, buckets, gathers in param_dtype/grad_dtype */
  .grad_sync = LOOM_PAR_GRAD_PREDIVIDED, /* sums only; the host folds in 1/dp (ABI 1.5) */
  .estimate = z2_estimate,
  .hybrid = LOOM_PAR_HYBRID_SHARD, /* shards over DP_SHARD; "shard_size" (ABI 1.11) */
};
