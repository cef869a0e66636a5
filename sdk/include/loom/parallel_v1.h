/* loom ABI v1 — parallelism plugins (ddp.so, zero1/2/3.so, cpu_offload.so, tensor_parallel.so,
 * pipeline.so).
 *
 * The core runs the GPT model unit by unit (unit 0 embedding, 1..L blocks, L+1 head) and calls
 * the hooks below at fixed points of every optimizer step:
 *
 *   begin_step(step)
 *   for micro in 0..n_micro-1:
 *     begin_micro(micro, n_micro)                    -- micro == n_micro-1: the sync micro-step
 *     for u = 0..L+1:   pre_forward(u)  <unit u forward>  post_forward(u)
 *     for u = L+1..0:   pre_backward(u) <unit u backward> post_backward(u)
 *     end_backward(micro, n_micro)
 *   grad_norm_sq(&sq)                                -- global squared L2 norm of the gradient
 *   optimizer_step(args)                             -- or the host's AdamW when NULL
 *   end_step(step)
 *
 * After post_backward(u), every gradient at flat offset >= unit_offset[u] is final for the
 * micro-step (units are laid out in order and backward runs in reverse), which is when DDP
 * launches the all-reduce of the buckets that lie there.
 *
 * Every hook may be NULL ("not implemented: the host's default, single-device behaviour").
 * Hooks return LOOM_OK or an error after api->set_error(); the host then stops the job on every
 * rank with that message.
 *
 * Roles: what a plugin owns is declared by its caps; the host refuses two plugins that claim the
 * same role (two gradient-sync owners, two optimizer owners, two schedule drivers) at load time. */
#ifndef LOOM_PARALLEL_V1_H
#define LOOM_PARALLEL_V1_H

#include "checkpoint_v1.h"
#include "host_v1.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Roles (caps). */
#define LOOM_PAR_CAP_GRAD_SYNC (1u << 0)    /* owns data-parallel gradient synchronisation */
#define LOOM_PAR_CAP_OPTIMIZER (1u << 1)    /* owns the optimizer step and its state */
#define LOOM_PAR_CAP_SCHEDULE (1u << 2)     /* drives the micro-batch schedule (pipeline) */
#define LOOM_PAR_CAP_SPLIT_LAYERS (1u << 3) /* splits the blocks' matmuls over the TP axis
                                               (tensor parallel, ABI 1.1): the host builds
                                               local shapes and calls `region` */
#define LOOM_PAR_CAP_SHARD_PARAMS (1u << 4) /* owns parameter storage (ZeRO-3): the host
                                               allocates no flat parameter buffer; the plugin
                                               points the tensor views at gathered memory
                                               around each unit's forward and backward */
#define LOOM_PAR_CAP_SHARD_GRADS (1u << 5)  /* owns gradient storage (ZeRO-2/3): the host
                                               allocates no flat gradient buffer; the plugin
                                               points the gradient views at bucket memory from
                                               pre_backward until its post_backward */
#define LOOM_PAR_CAP_SHARD_OPTIM (1u << 6)   /* publishes a sharded optimizer partition
                                               (ZeRO-1 and up): optimizer state is 1/dp */
/* The mesh axis the plugin works on (exactly one). */
#define LOOM_PAR_CAP_AXIS_DP (1u << 16)
#define LOOM_PAR_CAP_AXIS_TP (1u << 17)
#define LOOM_PAR_CAP_AXIS_PP (1u << 18)
/* ABI 1.13: the context-parallel axis (context_parallel.so): the host splits every sequence of
 * the micro-batch over the CP ranks (the entry's host-level "size") and calls `ring` inside
 * every block's attention; a 1.11 host refuses the unknown cap by name. */
#define LOOM_PAR_CAP_AXIS_CP (1u << 19)

/* ---- ABI 1.2: the pipeline schedule ----
 * What the host hands the schedule owner (LOOM_PAR_CAP_SCHEDULE) once per optimizer step: this
 * rank's stage and the entry points of the stage's micro-steps. The plugin calls them in its
 * schedule's order and moves the boundary tensors between stages itself (api->send/recv on
 * api->comm(host, LOOM_AXIS_PP); stage s talks to s-1 and s+1). Every micro-batch in
 * [0, n_micro) must get exactly one forward and then one backward; backwards must run in
 * increasing micro order (the last one, n_micro-1, is the data-parallel sync micro-step: the
 * host calls the other plugins' begin_micro / end_backward around each backward, so DDP's
 * no_sync and its buckets work unchanged). */
typedef struct loom_schedule_v1 {
  uint32_t struct_size;
  int n_micro;             /* micro-batches this step (train.grad_accum_steps) */
  int stage, n_stages;     /* this rank's pipeline coordinate (= api->rank/size(PP)) */
  uint64_t boundary_numel; /* floats in one boundary tensor (micro_batch * seq_len * n_embd) */
  void *ud;                /* pass to every entry point */
  /* Run the stage's forward of micro-batch `micro`. A stage other than the first must have
   * received its input activation into boundary(micro, LOOM_BOUNDARY_INPUT) first. On the last
   * stage this computes the loss. */
  int (*forward)(void *ud, int micro);
  /* Run the stage's backward of `micro` (after its forward). A stage other than the last must
   * have received the gradient of its output into boundary(micro, LOOM_BOUNDARY_GRAD_OUTPUT). */
  int (*backward)(void *ud, int micro);
  /* Device memory (boundary_numel floats) of micro-batch `micro`'s boundary tensor `which`
   * (LOOM_BOUNDARY_*); NULL with an error when the activations cannot be allocated. The first
   * call for a micro-batch takes an activation slot: the host keeps one per micro-batch in
   * flight, allocated lazily, so the schedule's peak in-flight count is its activation memory. */
  float *(*boundary)(void *ud, int micro, int which);
  /* The plugin is done with `micro` (its backward ran and its boundary sends completed): the
   * host recycles its activation slot. Slots still held when run_step returns are recycled
   * then. */
  int (*release)(void *ud, int micro);
  /* ---- ABI 1.12: interleaved pipelines (virtual stages, Narayanan et al. 2021, §2.2.1) ----
   * Absent (struct_size ending before n_chunks) from a 1.11 host: one chunk. With n_chunks
   * v > 1 the model is n_stages * v virtual stages and this rank holds chunk k = virtual stage
   * k * n_stages + stage, for k in [0, v): chunk k's input comes from stage - 1's chunk k, or
   * on stage 0 from the last stage's chunk k - 1 (the ring wrap), its output goes to stage +
   * 1's chunk k or from the last stage to stage 0's chunk k + 1. The plugin then drives the
   * entries below (the ones above are chunk 0's): every (micro, chunk) gets one forward and
   * then one backward; each chunk's backwards run in increasing micro order, and the step's
   * last backward is (n_micro - 1, chunk 0): the host numbers the backward calls j = 0 ..
   * n_micro * v - 1 in call order and calls the other plugins' begin_micro(j, n_micro * v)
   * and end_backward(j, n_micro * v) around each, so the data-parallel sync runs once, after
   * the last (every chunk's gradients final; DDP's buckets launch during chunk 0's backward
   * over the units it holds, the later chunks' buckets lying above them in the flat buffer).
   * Activation slots are kept per chunk (a chunk's activations differ in size: the first
   * holds the embedding's, the last the head's). */
  int n_chunks;
  int (*forward_chunk)(void *ud, int micro, int chunk);
  int (*backward_chunk)(void *ud, int micro, int chunk);
  float *(*boundary_chunk)(void *ud, int micro, int chunk, int which);
  int (*release_chunk)(void *ud, int micro, int chunk);
} loom_schedule_v1;

#define LOOM_BOUNDARY_INPUT 0       /* stage input activation: recv from stage-1 before forward */
#define LOOM_BOUNDARY_OUTPUT 1      /* stage output activation: send to stage+1 after forward */
#define LOOM_BOUNDARY_GRAD_OUTPUT 2 /* gradient of the output: recv from stage+1 before backward */
#define LOOM_BOUNDARY_GRAD_INPUT 3  /* gradient of the input: send to stage-1 after backward
                                       (the same memory as GRAD_OUTPUT, overwritten) */

/* ---- ABI 1.6: what a strategy holds and moves, for `loom estimate` ----
 * The plan the host hands loom_parallel_v1.estimate: one pipeline stage of one configuration,
 * described without a model, a tensor, a device or a communicator (`loom estimate` runs with
 * none of them). Read fields beyond what you know only when struct_size covers them. */
typedef struct loom_estimate_plan_v1 {
  uint32_t struct_size;
  /* the model, per tensor-parallel rank (the shapes the layer code builds) */
  int n_layer, n_head, n_embd, vocab_size, max_seq_len;
  int vocab_rows;               /* rows of the tied embedding (the padded vocabulary) */
  uint64_t wte_numel;           /* elements of the tied embedding wte (vocab_rows x n_embd) */
  int n_units;                  /* n_layer + 2, as loom_model_v1.n_units */
  const uint64_t *unit_offset;  /* n_units + 1 entries: this stage's flat layout as the model
                                   view will show it (units outside the stage are empty);
                                   borrowed for the call */
  uint64_t numel;               /* this stage's parameters (Psi; the last stage's with its
                                   copy of the tied wte) */
  int first_unit, last_unit;    /* the stage's units (0 embedding, 1..L blocks, L+1 head) */
  int n_blocks;                 /* transformer blocks on the stage */
  int n_recomputed;             /* of them, blocks whose forward runs again in backward (full
                                   activation checkpointing) */
  /* the mesh and this stage */
  int dp, tp, pp, stage;
  /* the batch */
  int micro_batch, seq_len;     /* per rank, per micro-batch (B, T) */
  int n_micro;                  /* micro-batches per optimizer step (train.grad_accum_steps) */
  /* precision and storage (what loom_model_v1 will say) */
  loom_dtype compute_dtype, param_dtype, grad_dtype;
  int grads_predivided;         /* 1: the host will fold 1/dp into the loss gradient
                                   (api->grads_predivided in the run): the sync only sums */
  /* the optimizer partition as the plugins called before this one reported it (the host calls
   * the optimizer owner last, as in setup): elements of the largest rank's, 1 when ranks hold
   * disjoint partitions */
  uint64_t partition;
  int partition_sharded;
  /* ---- ABI 1.11: hybrid sharding (absent: dp_shard = dp, dp_replica = 1) ---- */
  int dp_shard, dp_replica;     /* the shard group's and the replica group's sizes */
  /* ---- ABI 1.13: context parallel (absent: cp = 1) ---- */
  int cp;                       /* ranks each sequence is split over; dp above counts the
                                   dp x cp gradient group (host_v1.h, LOOM_AXIS_CP) and
                                   seq_len is the LOCAL T / cp */
} loom_estimate_plan_v1;

/* Categories a report can hold: loom_mem_category values below this (room to grow). */
#define LOOM_ESTIMATE_CATEGORIES 16

/* Model chunks per pipeline rank a report can describe (loom_estimate_v1.in_flight_chunk). */
#define LOOM_ESTIMATE_MAX_CHUNKS 16

/* loom_estimate_v1.flags */
#define LOOM_ESTIMATE_GRAD_COMM_16BIT 1u /* the gradient sync travels in the 16-bit compute dtype */

/* What the plugin reports for the plan: the host zero-fills it and sets struct_size. */
typedef struct loom_estimate_v1 {
  uint32_t struct_size;
  /* Device (and host, LOOM_MEM_HOST) bytes this rank holds at its peak, by loom_mem_category.
   * A category whose bit (1u << c) is set in `replaces` is the plugin's whole figure for it
   * (storage it owns: a shard of the parameters, the optimizer state of its partition, or
   * none of it: 0 with the bit set), replacing the host's default; the others are added to
   * what the host and the other plugins report (buckets, scratch, a gathered working set). */
  uint64_t bytes[LOOM_ESTIMATE_CATEGORIES];
  uint32_t replaces;
  /* How bytes[c] is made up ("4Psi/N", "unit0 + largest bucket"): the category's text when
   * replacing; appended as " + TEXT" when adding (empty: nothing appended). */
  char formula[LOOM_ESTIMATE_CATEGORIES][64];
  /* Bytes this rank sends per optimizer step (the host's algorithmic count of the collectives
   * the plugin calls: ring all-reduce 2(N-1)/N, reduce-scatter and all-gather (N-1)/N of the
   * total, send its bytes), and how ("2(N-1)/N*4Psi"; empty: none). */
  uint64_t comm_bytes;
  char comm_formula[128];
  /* A plugin that publishes the optimizer partition (api->set_partition): its elements on the
   * largest rank and whether ranks hold disjoint ranges (handed to the plugins after it in
   * plan.partition). 0: publishes none. */
  uint64_t partition;
  int partition_sharded;
  /* LOOM_PAR_CAP_SHARD_PARAMS: elements of the largest parameter set gathered at once */
  uint64_t gathered;
  /* LOOM_PAR_CAP_SCHEDULE: micro-batches whose activations this stage holds at once (the
   * host holds one activation pool per micro-batch in flight), and the schedule's name */
  int in_flight;
  char schedule[16];
  uint32_t flags;              /* LOOM_ESTIMATE_* */
  /* Optional: one line the table prints ("" none), and one named figure `loom estimate
   * --json` prints as "NAME": {"on", "rows", "bytes", "comm_bytes_per_step"} (name "" none). */
  char note[256];
  char detail_name[32];
  int detail_on;
  uint64_t detail_rows, detail_bytes, detail_comm_bytes;
  /* ---- ABI 1.12 (LOOM_PAR_CAP_SCHEDULE with model chunks) ----
   * Per chunk k < n_chunks: the most micro-batches whose chunk-k activations this stage holds
   * at once (the host keeps one slot pool per chunk, so chunk k's activation memory is
   * in_flight_chunk[k] times its slot). n_chunks 0 (a 1.11 plugin): one chunk, in_flight. */
  int n_chunks;
  int in_flight_chunk[LOOM_ESTIMATE_MAX_CHUNKS];
} loom_estimate_v1;

typedef struct loom_parallel_v1 {
  loom_plugin_header hdr;

  /* Read and check options (api->opt_*), keep `api` and `host`. The mesh exists already:
   * api->size/rank/comm work. Must not touch the model (not built yet). */
  int (*create)(const loom_host_api_v1 *api, loom_host *host, const loom_options *opts,
                void **ctx);
  /* Release everything (device memory through api->free). */
  void (*destroy)(void *ctx);

  /* The model and its buffers exist (api->model()); allocate buckets, shards, state; publish
   * the optimizer partition (api->set_partition) if the plugin shards it. The plugin that owns
   * the optimizer step is set up last, so it sees the partition the others published. */
  int (*setup)(void *ctx);

  int (*begin_step)(void *ctx, int step);
  /* micro in [0, n_micro); gradient sync belongs to the last one (the others are DDP's
   * no_sync micro-steps). */
  int (*begin_micro)(void *ctx, int micro, int n_micro);
  int (*pre_forward)(void *ctx, int unit);
  int (*post_forward)(void *ctx, int unit);
  int (*pre_backward)(void *ctx, int unit);
  int (*post_backward)(void *ctx, int unit);
  /* The micro-step's backward is done: finish outstanding communication of this micro-step. */
  int (*end_backward)(void *ctx, int micro, int n_micro);

  /* On entry *sq is the host's sum of squares over the whole flat gradient buffer of this
   * rank; a plugin that shards or splits gradients replaces it with the global value (the same
   * on every rank). */
  int (*grad_norm_sq)(void *ctx, double *sq);
  /* Run the optimizer step (plugins with LOOM_PAR_CAP_OPTIMIZER). NULL: host AdamW over the
   * flat buffers with the host's m and v. */
  int (*optimizer_step)(void *ctx, const loom_step_args_v1 *args);
  int (*end_step)(void *ctx, int step);

  /* Checkpointing of state the plugin owns (LOOM_PAR_CAP_OPTIMIZER: m, v shards). Fills up to
   * max items describing its buffers; returns the count via *n. NULL: nothing to save. */
  int (*state_items)(void *ctx, loom_ckpt_item_v1 *items, int max, int *n);

  /* ---- ABI 1.1 ---- */
  /* Tensor-parallel region boundary (Megatron-LM's f and g, Shoeybi et al. 2019, §3), called
   * by the host inside every block when the tensor-parallel size is > 1, on every rank in
   * lockstep (training forward and backward, evaluation and sampling forwards):
   *   which = LOOM_REGION_F: before a column-parallel matmul (attn.qkv, mlp.fc) — forward
   *     (backward = 0) identity; backward (backward = 1) buf is the gradient of the matmul's
   *     input, partial on each rank: all-reduce it over the TP axis;
   *   which = LOOM_REGION_G: after a row-parallel matmul (attn.proj, mlp.proj) — forward buf
   *     is the partial output: all-reduce it over the TP axis; backward identity.
   * buf: n floats of device memory (B*T*C), updated in place before the host goes on.
   * Required with LOOM_PAR_CAP_SPLIT_LAYERS; NULL otherwise. */
  int (*region)(void *ctx, int which, int backward, float *buf, size_t n);

  /* ---- ABI 1.2 ---- */
  /* Drive one optimizer step's micro-batches (LOOM_PAR_CAP_SCHEDULE, required with it): called
   * between begin_step and the gradient norm instead of the host's micro-step loop. The host
   * then sums the tied embedding's gradient between the first and the last stage, the loss and
   * the gradient norm over the stages. */
  int (*run_step)(void *ctx, const loom_schedule_v1 *s);

  /* ---- ABI 1.4 ---- */
  /* What the plugin can work with, LOOM_PAR_STORAGE_* flags (0 in a plugin built against
   * ABI <= 1.3: its struct ends before this field). A field, not a cap bit: a host that does
   * not know it ignores it, where an unknown cap makes a host refuse the plugin. */
  uint64_t storage;

  /* ---- ABI 1.5 ---- */
  /* How the gradient-sync owner (LOOM_PAR_CAP_GRAD_SYNC) wants its gradients: LOOM_PAR_GRAD_*
   * flags (0 in a plugin built against ABI <= 1.4: the 1.0 contract, the plugin averages).
   * Read only from the plugin that owns GRAD_SYNC. A field, not a cap bit, for the reason
   * `storage` is one: a 1.4 host still loads the plugin (and the plugin, asking
   * api->grads_predivided, averages itself there). */
  uint64_t grad_sync;
  /* ---- ABI 1.6 ---- */
  /* What the plugin holds and moves for `plan` (`loom estimate`, and `loom conformance`'s
   * check of a plugin's peak). Called WITHOUT create(): no mesh, model, tensor or device
   * exists. Usable in `api`: log, set_error, the opt_* getters on `opts` (the plugin's options,
   * as create() gets them: validate them as create() does; an error fails the estimate with
   * the same message), size and rank (the planned mesh, rank 0 of each axis but this stage on
   * pp) and n_micro; nothing else. Fill `out` (zero-filled by the host, struct_size set) and
   * return LOOM_OK, or an error after api->set_error (`loom estimate` then fails with it).
   * NULL: the host accounts the plugin by its caps as the reference plugin of each role does
   * with its default options (docs/abi.md, "Estimates"). Called once per pipeline stage. */
  int (*estimate)(const loom_host_api_v1 *api, loom_host *host, const loom_options *opts,
                  const loom_estimate_plan_v1 *plan, loom_estimate_v1 *out);
  /* ---- ABI 1.11 ---- */
  /* LOOM_PAR_HYBRID_* flags (0 in a plugin built against ABI <= 1.10). A field, not a cap
   * bit, for the reason `storage` is one. */
  uint64_t hybrid;
  /* ---- ABI 1.13 ---- */
  /* One hop of context parallel's ring (LOOM_PAR_CAP_AXIS_CP, required with it): send n floats
   * of device memory `send` to the next rank of the CP axis (rank + 1 mod cp) and receive n
   * floats from the previous one into `recv` (a distinct buffer), both complete on return.
   * Called by the host inside every block's attention on every cp rank in lockstep: (cp - 1)
   * hops of K/V per forward, (cp - 1) of K/V and cp - 1 of dK/dV per backward (gpt_cp.c). */
  int (*ring)(void *ctx, const float *send, float *recv, size_t n);
} loom_parallel_v1;

/* loom_parallel_v1.hybrid: the plugin shards over LOOM_AXIS_DP_SHARD (host ABI 1.11) and
 * leaves the replica groups to the host (host_v1.h, loom_partition_v1.sharded): its partition
 * gradient after end_backward is the sum over its shard group of gradients divided by the FULL
 * data-parallel size (what backward produces when api->grads_predivided says so; else the
 * plugin scales by 1/size(DP)), and the host sums it over DP_REPLICA. Only a plugin that sets
 * it may be given the host-level key "shard_size" (docs/config.md). */
#define LOOM_PAR_HYBRID_SHARD 1u

/* loom_parallel_v1.storage: the plugin handles 16-bit parameter/gradient storage
 * (loom_model_v1.param_dtype, grad_dtype, loom_partition_v1.master). Under bf16/fp16 the host
 * stores them in 16 bits only when every loaded parallel plugin sets it; otherwise it keeps
 * fp32 buffers holding 16-bit values (the ABI 1.3 layout) and logs one line naming the plugin
 * that does not. Not "built against ABI >= 1.4": a plugin rebuilt against the 1.4 headers is
 * not thereby written for 16-bit buffers. */
#define LOOM_PAR_STORAGE_16BIT 1u

/* loom_parallel_v1.grad_sync: the plugin only SUMS the gradients over the data-parallel group;
 * the host folds the 1/dp of the average into the loss gradient (dloss = loss scale /
 * (B*T*accum*dp)), so backward already produces gradient/dp on every rank (DeepSpeed's
 * gradient_predivide_factor = dp, PyTorch DDP's division before its comm hook). This saves the
 * averaging pass over the whole gradient after the sync. For a power-of-two dp the result is
 * bitwise the 1.0 contract's (scaling by 2^-k commutes with rounding, outside the subnormal
 * range); for another dp the gradient differs by about one rounding per element.
 * A host that honours the flag says so through api->grads_predivided (host ABI 1.5): a plugin
 * must ask it, because a 1.4 host ignores this field and the plugin then has to average as
 * before. */
#define LOOM_PAR_GRAD_PREDIVIDED 1u

/* loom_parallel_v1.region's `which`. */
#define LOOM_REGION_F 0 /* before a column-parallel matmul: identity fwd, all-reduce bwd */
#define LOOM_REGION_G 1 /* after a row-parallel matmul: all-reduce fwd, identity bwd */

#ifdef __cplusplus
}
#endif
#endif /* LOOM_PARALLEL_V1_H */
