/* What zero1.so, zero2.so and zero3.so share (Rajbhandari et al. 2020, "ZeRO", §5): the
 * partition of the flat parameter buffer, the bookkeeping of uneven reduce-scatter / all-gather
 * over flat element ranges, the post-step parameter all-gather (stages 1 and 2) and the
 * per-unit gradient buckets handed to the layer code and released after their reduce-scatter
 * (stages 2 and 3). Each plugin compiles this file into its own .so (hidden visibility), so
 * nothing here is part of any ABI.
 *
 * Partition: data-parallel size N, rank r, S = ceil(numel / N); rank r owns the flat range
 * [min(r*S, numel), min((r+1)*S, numel)). Uneven sizes need no padding: every collective is a
 * v-collective whose counts are each rank's range intersected with the bucket. */
#ifndef LOOM_ZERO_COMMON_H
#define LOOM_ZERO_COMMON_H

#include <loom/loom.h>

/* One uneven collective over the flat element range [lo, hi): rank i's block is its partition
 * intersected with [lo, hi); blocks lie in rank order, contiguous, because partitions do. */
typedef struct zc_span {
  uint64_t lo, hi;
  size_t *counts;  /* dp entries (stay valid until the collective completes: owned here) */
  uint64_t my_lo;  /* first flat element of this rank's block: clamp(begin, lo, hi) */
  size_t my_n;     /* counts[rank] */
} zc_span;

/* A flat bucket: ZeRO-1's gradient reduce-scatter, ZeRO-1/2's parameter all-gather. */
typedef struct zc_flat {
  zc_span s;
  void *recv;        /* reduce-scatter destination scratch (LOOM_MEM_COMM, grad dtype) while
                        in flight */
  loom_request *req; /* outstanding operation, or NULL */
} zc_flat;

/* ZeRO-2/3: a gradient bucket of whole units [ulo, uhi] (flat range s.lo .. s.hi). */
enum { ZC_IDLE = 0, ZC_HELD = 1, ZC_REDUCING = 2 };
typedef struct zc_gbucket {
  int ulo, uhi;
  zc_span s;
  void *buf;         /* the bucket's gradient (LOOM_MEM_COMM, grad dtype): the layer code's grad
                        views point here from acquire until launch; freed when the
                        reduce-scatter is done */
  void *recv;        /* this rank's block of the reduced bucket: scratch (LOOM_MEM_COMM, grad
                        dtype), or its place in the partition gradient itself (recv_direct) */
  int recv_direct;   /* recv is the partition gradient's block: the step's first micro-step */
  int keep;          /* buf stays allocated between steps (unit 0's bucket, see zc_gb_build) */
  loom_request *req;
  int state;         /* ZC_IDLE, ZC_HELD (views set), ZC_REDUCING (launched) */
} zc_gbucket;

typedef struct zero {
  const loom_host_api_v1 *api;
  loom_host *host;
  const char *name;        /* "zero1", ... for messages */
  const loom_device_v1 *dev;
  void *dctx;
  const loom_model_v1 *model;
  loom_comm *comm;         /* the shard group (LOOM_SHARD_AXIS: DP_SHARD, DP on old hosts) */
  int dp, rank;            /* its size (N of the partition) and this rank's place in it */
  int dp_full;             /* the whole data-parallel size (= dp unless hybrid): the average's
                              divisor; the host sums the replica groups (ABI 1.11) */
  uint64_t numel;
  /* storage: the host's storage plan (loom_storage_plan_v1 param_dtype / grad_dtype, read in
   * setup): the flat parameter and gradient elements, and everything this plugin holds of them
   * (partitions, gathers, buckets, the collectives' payloads), are of these dtypes */
  loom_dtype pdt, gdt;
  size_t pel, gel;         /* their element sizes in bytes */
  float *cvt;              /* 2 x ZC_CVT_CHUNK fp32 (LOOM_MEM_COMM) when either is 16-bit: where
                              16-bit values are widened for arithmetic (averaging a reduced
                              block, initialising a ZeRO-3 parameter partition); NULL in fp32 */
  uint64_t cvt_n;          /* elements per half of cvt */
  uint64_t *bound;         /* dp + 1 entries: rank i owns [bound[i], bound[i+1]) */
  uint64_t begin, count;   /* this rank's partition */
  int predivided;          /* the host divides the loss gradient by dp (the storage plan's
                              grads_predivided, from setup): a reduced block is the average */
  float inv_dp;            /* what a reduced block is multiplied by: 1 / dp, or 1 predivided */
  int *t_first;            /* n_units + 1: unit u's tensors are [t_first[u], t_first[u+1]) */
  int wte;                 /* index of the tied embedding "wte" (unit 0, read by the head) */

  /* options (not every stage reads every one) */
  uint64_t reduce_bucket;    /* reduce_bucket_size, elements */
  uint64_t allgather_bucket; /* allgather_bucket_size, elements */
  int overlap;               /* overlap_comm */
  int prefetch;              /* prefetch (ZeRO-3) */
  int gathered_once;         /* zc_first_step_gather has run */
  int part_fresh;            /* ZeRO-2/3: the partition gradient holds nothing of this step yet
                                (begin_step until the first micro-step's end_backward): blocks
                                are reduced straight into it instead of added */

  /* the partition's storage as published with set_partition (pdt / gdt elements) */
  void *part_params, *part_grads;
  int own_part_params, own_part_grads; /* allocated by the plugin (freed in destroy) */

  /* ZeRO-1/2: parameter all-gather after the optimizer step */
  zc_flat *ag;
  int n_ag;

  /* ZeRO-2/3: gradient buckets, [0] = the highest units (reduced first) */
  zc_gbucket *gb;
  int n_gb;
  int *bucket_of;          /* n_units: the bucket of each unit */
} zero;

/* Default bucket sizes (elements) when the config gives none: 2^20 = 4 MiB of fp32. DeepSpeed's
 * default (5e8) targets billion-parameter models on GPUs; on the models loom trains it would be
 * one bucket for the whole model, i.e. no overlap and (ZeRO-2/3) the full gradient held at once.
 * 2^20 keeps one transformer block of the ~3M-parameter fortunes model per bucket. */
#define ZC_DEFAULT_BUCKET (1u << 20)

/* ZeRO-2/3 with overlap_comm: gradient reduce-scatters in flight at once; launching one more
 * first completes the oldest. 1 = DeepSpeed's double buffering: one bucket is reduced while
 * the next one is filled by backward. */
#define ZC_MAX_INFLIGHT 1

/* Fp32 scratch of the 16-bit arithmetic: at most this many elements per half (32 KiB). Bounded
 * rather than partition-sized: the widened copy is transient, and a full-size one would be
 * the 4Ψ/N the 16-bit storage saves. */
#define ZC_CVT_CHUNK 8192u

/* Element k of a buffer of el-byte elements. */
static inline void *zc_at(void *base, uint64_t k, size_t el) { return (char *)base + k * el; }

/* Allocate the context and keep api/host. */
int zc_create(const loom_host_api_v1 *api, loom_host *host, const char *name, zero **out);
/* Read a size in elements (a JSON integer, or a whole number such as DeepSpeed's 5e8). */
int zc_opt_elems(zero *z, const loom_options *o, const char *key, uint64_t dflt,
                 uint64_t *out);
/* Wait for whatever is still outstanding and free everything. */
void zc_destroy(zero *z);

/* Setup, first part: the model, device, mesh; the partition bounds; the unit -> tensor map.
 * Checks that the host allocated (1) / did not allocate (0) the flat params and grads as the
 * stage's caps say. */
int zc_setup(zero *z, int want_params, int want_grads);
/* Allocate count elements of el bytes of category cat (at least one, so empty partitions have a
 * pointer). */
void *zc_alloc(zero *z, uint64_t count, size_t el, loom_mem_category cat);
/* Publish [begin, begin+count) with the given storage (pdt / gdt elements; sharded). The fp32
 * master is left to the host (partition_v1.master NULL: it allocates and initialises it). */
int zc_publish(zero *z, void *params, void *grads);
/* dst[0, n) (gdt) = scale * src[0, n) (gdt) + (accumulate ? dst : 0): the data-parallel average
 * of a reduced block, in fp32 through z->cvt when gdt is 16-bit (one rounding at the end).
 * dst may be src (accumulate 0: scaled in place). With scale 1 and accumulate 0 in fp32 it is a
 * copy (nothing at all in place). */
void zc_avg_into(zero *z, void *dst, const void *src, float scale, uint64_t n, int accumulate);

/* Fill a span over [lo, hi). */
int zc_span_init(zero *z, zc_span *s, uint64_t lo, uint64_t hi);
void zc_span_free(zc_span *s);

/* Flat buckets over [0, numel) of `size` elements; bucket 0 is the highest range when
 * from_top (the order backward finishes gradients), else the lowest. */
int zc_flat_build(zero *z, uint64_t size, int from_top, zc_flat **out, int *n);
void zc_flat_free(zero *z, zc_flat *b, int n);

/* ZeRO-1/2: all-gather the updated parameters in place into the full flat buffer `params`
 * (each rank's block is its partition, already there), one v-collective per bucket, all
 * launched then waited. */
int zc_allgather_params(zero *z, void *params);
/* ZeRO-1/2 begin_step: under 16-bit storage, at the process's first step, all-gather the
 * parameters once. A resume restores each rank's fp32 master partition and rounds its own
 * range of the 16-bit parameters from it (the host); the other ranks' ranges come from them.
 * On a fresh start the values are identical on every rank and the gather changes nothing. */
int zc_first_step_gather(zero *z);

/* ---- ZeRO-2/3 gradient buckets ---- */
int zc_gb_build(zero *z);
/* begin_step: the partition gradient starts empty: the first micro-step's reduce-scatters
 * write their blocks straight into it (no zeroing pass, no scratch), later micro-steps add
 * theirs (it accumulates over micro-steps). */
int zc_gb_begin_step(zero *z);
/* pre_backward(u): hand unit u's tensors a zeroed gradient buffer (and unit 0's as well when
 * u is the head, which adds into the tied wte's gradient). Unit 0's buffer is kept from step
 * to step and zeroed in place: it is held through every backward anyway, so keeping it does
 * not raise the peak, and it saves allocating (and the kernel's zeroing of) ~V*C floats. */
int zc_gb_pre_backward(zero *z, int u);
/* post_backward(u): when u closes its bucket, release the views and start the reduce-scatter
 * (blocking and completed at once without overlap_comm); then complete finished ones. */
int zc_gb_post_backward(zero *z, int u);
/* end_backward: complete every reduce-scatter of this micro-step. */
int zc_gb_end_backward(zero *z);

#endif
