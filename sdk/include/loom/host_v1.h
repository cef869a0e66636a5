/* loom ABI v1 — the host API: the table of host functions every plugin receives in create().
 *
 * Plugins link nothing of the core. Everything they need — logging and errors, their config
 * options, the process mesh and collectives, device memory and kernels, the model's tensors —
 * comes through this table. It is append-only: a slot is never removed or reordered; a plugin
 * that needs a slot added in a later minor version checks LOOM_HOST_HAS(api, slot) first
 * (Redis's RMAPI_FUNC_SUPPORTED; compat.h). */
#ifndef LOOM_HOST_V1_H
#define LOOM_HOST_V1_H

#include "common_v1.h"
#include "device_v1.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loom_options loom_options; /* a plugin's options object from the config (opaque) */

typedef enum loom_log_level {
  LOOM_LOG_ERROR = 0, LOOM_LOG_WARN = 1, LOOM_LOG_INFO = 2, LOOM_LOG_DEBUG = 3,
} loom_log_level;

/* Axes of the process mesh (dp x tp x pp; tp innermost: world rank =
 * (pp_rank * dp_size + dp_rank) * tp_size + tp_rank, as Megatron-LM lays ranks out).
 * ABI 1.11, hybrid sharding (FSDP's HSDP, DeepSpeed's MiCS): the data-parallel axis is also
 * split into shard groups of K consecutive dp ranks (DP_SHARD: dp ranks [g*K, (g+1)*K), rank
 * dp_rank % K) and replica groups across them (DP_REPLICA: the dp ranks with the same
 * dp_rank % K, rank dp_rank / K), dp = K x R. Without a shard size (the config's
 * "shard_size") K = dp: DP_SHARD is the DP group and DP_REPLICA this rank alone. A host older
 * than 1.11 answers size -1 and comm NULL for them: check api->abi_minor >= 11
 * (LOOM_SHARD_AXIS, compat.h).
 * ABI 1.13, context parallel: CP groups the ranks that hold the chunks of the same sequences
 * (context_parallel.so's ring). The host folds CP into DP, as Megatron-LM folds cp into its
 * data-parallel gradient group: DP is the dp x cp ranks that must sum their gradients (each cp
 * rank's gradient is its tokens' part), laid out with cp innermost (dp_rank = data_rank * cp +
 * cp_rank), so size(DP) = dp x cp and every data-parallel plugin reduces over the right group
 * unchanged. Without context parallel CP is this rank alone (size 1). A host older than 1.13
 * answers size -1 and comm NULL. */
typedef enum loom_axis {
  LOOM_AXIS_WORLD = 0, LOOM_AXIS_DP = 1, LOOM_AXIS_TP = 2, LOOM_AXIS_PP = 3,
  LOOM_AXIS_DP_SHARD = 4, LOOM_AXIS_DP_REPLICA = 5,
  LOOM_AXIS_CP = 6,
} loom_axis;

typedef enum loom_red_op { LOOM_OP_SUM = 0, LOOM_OP_MAX = 1, LOOM_OP_MIN = 2 } loom_red_op;

/* A parameter tensor of the model as plugins see it. `shape` is global (unsplit); numel and
 * offset describe this rank's LOCAL tensor in the flat buffers (under tensor parallel a split
 * tensor holds 1/tp of the global one: local_shape). data and grad are the current device
 * views; a plugin that owns parameter storage (ZeRO-3) may redirect them between
 * pre_forward/pre_backward and the matching post hook. */
typedef struct loom_tensor_v1 {
  uint32_t struct_size;
  const char *name;   /* "wte", "h.0.attn.qkv.weight", ... (PyTorch-style) */
  int unit;           /* 0 embedding, 1..n_layer blocks, n_layer+1 head */
  int ndim;           /* 1 or 2 */
  int64_t shape[4];   /* global shape */
  uint64_t numel;     /* element count of this rank's (local) tensor: the global count unless
                         the tensor is split over tensor-parallel ranks */
  uint64_t offset;    /* first element within the flat parameter/gradient buffers */
  int weight_decay;   /* 1 if AdamW's weight decay applies (2-D weights), else 0 */
  float **data;       /* -> current view of the values (device memory, fp32) */
  float **grad;       /* -> current view of the gradient (device memory, fp32) */
  /* ---- ABI 1.1 (check struct_size before reading) ---- */
  int split_dim;      /* tensor-parallel placement: -1 replicated over the TP axis, 0 rows
                         split (column-parallel weights, their biases), 1 columns split
                         (row-parallel weights) */
  int64_t local_shape[4]; /* this rank's shape: shape with dim split_dim divided by tp */
  int split_parts;    /* the split dim is this many equal blocks, each split over tp ranks
                         (attn.qkv: 3 — q, k, v — so a rank holds its heads' rows of each;
                         else 1): tp rank r holds slice r of every block */
} loom_tensor_v1;

/* The model's parameters as one flat fp32 buffer laid out unit by unit. */
/* Element i of model->tensors. Index through this macro, not `tensors[i]`: the element's
 * struct_size is the stride, so a later minor version can append fields to loom_tensor_v1. */
#define LOOM_TENSOR_AT(model, i) \
  ((loom_tensor_v1 *)((char *)(model)->tensors + (size_t)(i) * (model)->tensors[0].struct_size))

/* ---- ABI 1.6: the storage plan ----
 * How the run stores and moves the model's numbers, decided ONCE by the host from the roles
 * and storage flags of the loaded parallel plugins, the precision plugin's compute dtype,
 * train.grad_accum_steps and the data-parallel size (core/runtime/storage_plan.c), before any
 * plugin's setup. Every plugin reads it from loom_model_v1.plan instead of re-deriving the
 * rules; a plugin that must also run on an older host reads it through loom_storage_plan_of
 * (compat.h), which rebuilds it there from the fields that host published. Owned by the host,
 * valid from setup() to destroy(), never changes during a run. */
typedef struct loom_storage_plan_v1 {
  uint32_t struct_size;
  loom_dtype compute_dtype;  /* the precision plugin's: GEMMs, activations, gradient values */
  loom_dtype param_dtype;    /* elements of model->params and every tensor's *data */
  loom_dtype grad_dtype;     /* elements of model->grads and every tensor's *grad; also what
                                collectives over stored gradient buckets move (ZeRO's
                                reduce-scatters) */
  loom_dtype master_dtype;   /* the optimizer's copy (loom_partition_v1.master): LOOM_F32 */
  int master_is_params;      /* 1: param_dtype is LOOM_F32 and the parameters are their own
                                master (partition.master == partition.params); 0: a separate
                                fp32 master the host allocates (mixed-precision storage) */
  loom_dtype grad_comm_dtype; /* the default wire dtype of a data-parallel gradient reduction
                                that packs its payload (ddp's communication_data_type absent):
                                compute_dtype under a 16-bit precision with dp > 1, else
                                LOOM_F32. A plugin option may still ask for fp32 */
  loom_dtype param_comm_dtype; /* parameter all-gathers (ZeRO-1/2 after the step, ZeRO-3
                                around each unit): param_dtype */
  loom_dtype activation_comm_dtype; /* the default wire dtype of activations and their
                                gradients: tensor parallel's f/g all-reduces, the pipeline's
                                boundary tensors (compute_dtype under bf16/fp16, else F32) */
  int grads_predivided;      /* 1: the host folds 1/dp into the loss gradient (the gradient-
                                sync owner set LOOM_PAR_GRAD_PREDIVIDED and dp > 1): the sync
                                only sums. What api->grads_predivided answers */
  int dp;                    /* the data-parallel size the plan was made for */
  const char *reason;        /* why, one line for logs (host-owned): e.g. "bf16 values in fp32
                                buffers: ddp (parallel[0]) does not set
                                LOOM_PAR_STORAGE_16BIT; ..." */
} loom_storage_plan_v1;

typedef struct loom_model_v1 {
  uint32_t struct_size;
  int n_layer, n_head, n_embd, vocab_size, max_seq_len;
  int n_units;               /* n_layer + 2 */
  const uint64_t *unit_offset; /* n_units + 1 entries: unit u = [unit_offset[u], unit_offset[u+1]) */
  uint64_t numel;            /* total parameters (Psi in the ZeRO paper) */
  float *params;             /* device, numel: the flat parameter buffer (NULL when a plugin
                                with LOOM_PAR_CAP_SHARD_PARAMS owns parameter storage) */
  float *grads;              /* device, numel: the flat gradient buffer (NULL when a plugin
                                with LOOM_PAR_CAP_SHARD_GRADS owns gradient storage) */
  int n_tensors;
  loom_tensor_v1 *tensors;   /* n_tensors, in flat order; index with LOOM_TENSOR_AT */
  /* ---- ABI 1.3 (read only when struct_size covers it; absent = LOOM_F32) ---- */
  loom_dtype compute_dtype;  /* the precision plugin's: weights, activations and gradients are
                                values of this dtype, so a data-parallel plugin may reduce
                                gradients in it (half the bytes) */
  /* ---- ABI 1.4: real 16-bit storage (absent = LOOM_F32) ----
   * Element types of the flat buffers and of the tensor views: `params` and every `*data` hold
   * param_dtype elements, `grads` and every `*grad` grad_dtype elements — the `float *` type
   * then points at 16-bit elements (address element k as (char *)p + k * loom_dtype_size(dt)).
   * Under a 16-bit precision the host uses 16-bit storage only when every loaded parallel
   * plugin sets LOOM_PAR_STORAGE_16BIT (parallel_v1.h, .storage); otherwise both are LOOM_F32
   * and the buffers hold 16-bit values in fp32 (the ABI 1.3 layout). grad_dtype is LOOM_F32
   * whenever train.grad_accum_steps > 1 (accumulation over micro-batches in fp32, DeepSpeed's
   * grad_accum_dtype). The fp32 master copy the optimizer steps is loom_partition_v1.master. */
  loom_dtype param_dtype;
  loom_dtype grad_dtype;
  /* ---- ABI 1.6 ---- */
  const loom_storage_plan_v1 *plan; /* the run's storage plan (never NULL from a 1.6 host):
                                       read it with loom_storage_plan_of (compat.h) */
} loom_model_v1;

/* The part of the flat parameter buffer this rank's optimizer steps (ZeRO's partition).
 * Default: the whole model, replicated on every data-parallel rank. A plugin that shards the
 * optimizer state publishes its own with set_partition() during setup(). */
typedef struct loom_partition_v1 {
  uint32_t struct_size;
  uint64_t begin, count; /* flat element range [begin, begin + count) */
  float *params;         /* device: the values of that range (count elements of the model's
                            param_dtype) */
  float *grads;          /* device: its gradient, averaged over data-parallel ranks, final when
                            the optimizer step runs (count elements of the model's grad_dtype) */
  int sharded;           /* 1: ranks hold disjoint partitions (norms are summed over dp);
                            0: every data-parallel rank holds the same range. Under hybrid
                            sharding (ABI 1.11, DP_REPLICA size > 1) a sharding plugin sets
                            LOOM_PAR_HYBRID_SHARD and partitions over DP_SHARD: partitions
                            are disjoint within a shard group and the same across replicas.
                            The host then, after the last micro-step's end_backward,
                            all-reduces (sums) the partition's gradient over DP_REPLICA,
                            sums norms over DP_SHARD only and checkpoints each chunk from
                            replica 0 only */
  /* ---- ABI 1.4 ---- */
  float *master;         /* device, count fp32: the optimizer's copy of the range (mixed-
                            precision master weights, LOOM_MEM_OPTIM, partitioned like Adam's m
                            and v). The host allocates it after setup when param_dtype is 16-bit,
                            fills it with the initial fp32 values (init_params_range) and
                            checkpoints it as the parameter values; the step writes params from
                            it (rounded). Equals params when param_dtype is LOOM_F32. A plugin
                            may leave it NULL in set_partition (the host fills it in). */
} loom_partition_v1;

/* What the optimizer step needs, handed to a plugin that owns the step. */
typedef struct loom_step_args_v1 {
  uint32_t struct_size;
  int step;            /* 1-based optimizer step (AdamW's t) */
  float lr;            /* learning rate for this step, after the schedule */
  float beta1, beta2, eps, weight_decay;
  float grad_scale;    /* multiply gradients by this (clipping x 1/loss_scale) */
} loom_step_args_v1;

typedef struct loom_host_api_v1 {
  uint32_t struct_size;
  uint16_t abi_major, abi_minor;

  /* ---- diagnostics ---- */
  /* printf-style log line, prefixed with the plugin's name and rank. */
  void (*log)(loom_host *h, loom_log_level level, const char *fmt, ...);
  /* Describe the error the plugin is about to return; the host prints it on one line with the
   * config file, the plugin's name, JSON path and file, and what failed:
   * "loom[RANK]: error: CONFIG: plugin NAME (JSON.PATH) [FILE]: HOOK failed (...): MESSAGE".
   * The last call wins. */
  void (*set_error)(loom_host *h, const char *fmt, ...);

  /* ---- the plugin's options (its object in the config) ----
   * Each getter stores the value or the default (key absent) and returns LOOM_OK, or returns
   * LOOM_INVALID_CONFIG after setting an error "FILE: JSON.PATH.KEY: expected ..., got ...". */
  int (*opt_int)(loom_host *h, const loom_options *o, const char *key, int64_t dflt,
                 int64_t min, int64_t max, int64_t *out);
  int (*opt_double)(loom_host *h, const loom_options *o, const char *key, double dflt,
                    double min, double max, double *out);
  int (*opt_bool)(loom_host *h, const loom_options *o, const char *key, int dflt, int *out);
  /* *out stays valid for the plugin's lifetime. */
  int (*opt_string)(loom_host *h, const loom_options *o, const char *key, const char *dflt,
                    const char **out);
  /* Refuse keys not in `allowed` (NULL-terminated); keys starting with '_' are comments. */
  int (*opt_check_keys)(loom_host *h, const loom_options *o, const char *const *allowed);

  /* ---- the process mesh ---- */
  int (*rank)(loom_host *h, loom_axis axis); /* this process's index along axis */
  int (*size)(loom_host *h, loom_axis axis); /* number of processes along axis */
  loom_comm *(*comm)(loom_host *h, loom_axis axis); /* communicator of this process's group */

  /* ---- collectives on a communicator; counted by the host (bytes sent per rank) ----
   * Buffers are device memory. req == NULL: blocking. Else the call starts the operation and
   * stores a request that must be completed with wait(); buffers must not be touched until
   * then. Errors: LOOM_REMOTE (a peer failed), LOOM_INVALID_USAGE. */
  int (*all_reduce)(loom_host *h, loom_comm *c, void *buf, size_t count, loom_dtype dt,
                    loom_red_op op, loom_request **req);
  /* recv gets this rank's block (recv_count elements) of the reduced send buffer, which holds
   * size(c) * recv_count elements, block i for rank i. */
  int (*reduce_scatter)(loom_host *h, loom_comm *c, const void *send, void *recv,
                        size_t recv_count, loom_dtype dt, loom_red_op op, loom_request **req);
  /* recv (size(c) * send_count elements) gets every rank's send block in rank order. In place
   * when send is this rank's block inside recv (also for all_gather_v). */
  int (*all_gather)(loom_host *h, loom_comm *c, const void *send, void *recv,
                    size_t send_count, loom_dtype dt, loom_request **req);
  int (*broadcast)(loom_host *h, loom_comm *c, void *buf, size_t count, loom_dtype dt,
                   int root, loom_request **req);
  /* Point to point with rank `peer` of c, matched by (peer, tag) in posting order per (peer,
   * tag). Non-blocking sends and receives (req != NULL) progress independently of each other
   * and of their posting order, whatever the size: any set of posted operations whose matches
   * are posted on the peers completes when waited in any order (a ring's recv, recv, send,
   * send; 1F1B's non-blocking send then blocking receive). Blocking = post + wait. The full
   * contract, and nccl.so's restriction: comm_v1.h and docs/abi.md, "Point to point". */
  int (*send)(loom_host *h, loom_comm *c, const void *buf, size_t count, loom_dtype dt,
              int peer, int tag, loom_request **req);
  int (*recv)(loom_host *h, loom_comm *c, void *buf, size_t count, loom_dtype dt, int peer,
              int tag, loom_request **req);
  /* Drive progress; *done = 1 once complete (the request stays valid until wait()). */
  int (*test)(loom_host *h, loom_request *req, int *done);
  /* Complete and release a request. */
  int (*wait)(loom_host *h, loom_request *req);
  int (*barrier)(loom_host *h, loom_comm *c);

  /* ---- device memory and kernels (plugins never dereference device memory) ---- */
  /* Zeroed device memory charged to `cat`; NULL (with an error set) when out of memory. */
  void *(*alloc)(loom_host *h, size_t bytes, loom_mem_category cat);
  void (*free)(loom_host *h, void *ptr);
  /* The device backend's table and context, for copy/scale/axpy/sum_squares/adamw. */
  const loom_device_v1 *(*device)(loom_host *h, void **device_ctx);

  /* ---- the model ---- */
  const loom_model_v1 *(*model)(loom_host *h);

  /* ---- helpers ---- */
  /* AdamW over the flat-buffer element range [begin, begin + n): param/grad/m/v point at that
   * range's storage (any buffers the caller owns). Weight decay is applied per tensor as the
   * model says (only where loom_tensor_v1.weight_decay is 1). */
  int (*adamw_range)(loom_host *h, const loom_step_args_v1 *a, uint64_t begin, uint64_t n,
                     float *param, const float *grad, float *m, float *v);

  /* ---- uneven collectives (counted): see loom_comm_v1.reduce_scatter_v / all_gather_v ---- */
  int (*reduce_scatter_v)(loom_host *h, loom_comm *c, const void *send, void *recv,
                          const size_t *counts, loom_dtype dt, loom_red_op op,
                          loom_request **req);
  int (*all_gather_v)(loom_host *h, loom_comm *c, const void *send, void *recv,
                      const size_t *counts, loom_dtype dt, loom_request **req);

  /* ---- ZeRO support ---- */
  /* Publish the partition this rank's optimizer steps (copied; call in setup()). The host then
   * allocates the optimizer state for that range only, computes the gradient norm over it
   * (summed over dp when sharded) and checkpoints it as chunks. One plugin may publish. */
  int (*set_partition)(loom_host *h, const loom_partition_v1 *p);
  /* The current partition (the whole model when nobody published one). */
  const loom_partition_v1 *(*partition)(loom_host *h);
  /* Write the initial values of flat elements [begin, begin + n) into dst (device memory) —
   * exactly the values a single-rank run starts from, without materialising the whole model
   * (what a plugin with LOOM_PAR_CAP_SHARD_PARAMS needs). */
  int (*init_params_range)(loom_host *h, uint64_t begin, uint64_t n, float *dst);

  /* ---- nested options ---- */
  /* The sub-object at `key` as options of its own (errors then name "WHERE.KEY.SUBKEY"):
   * *out = NULL when the key is absent; LOOM_INVALID_CONFIG when it is not an object. The
   * returned options live as long as the plugin. DeepSpeed-style settings such as
   * "offload_optimizer": {"device": "cpu"} read this way. */
  int (*opt_object)(loom_host *h, const loom_options *o, const char *key,
                    const loom_options **out);

  /* ---- ABI 1.2 ---- */
  /* Micro-batches per optimizer step (train.grad_accum_steps): what a schedule owner checks in
   * create (1F1B needs at least as many micro-batches as stages). */
  int (*n_micro)(loom_host *h);

  /* ---- ABI 1.4: mixed-precision storage ---- */
  /* AdamW over flat elements [begin, begin + n) on the fp32 master copy: `grad` holds n
   * elements of grad_dtype (widened to fp32 in a bounded scratch; LOOM_F32 reads it in place),
   * `master`, m and v n fp32 each; afterwards `param` (n elements of param_dtype; NULL: none)
   * gets the updated master rounded to param_dtype (round to nearest even). With both dtypes
   * LOOM_F32 and param == master it is adamw_range, bitwise. Errors: LOOM_INVALID_USAGE (range
   * outside the model, a dtype other than F32/BF16/F16). */
  int (*adamw_range_mixed)(loom_host *h, const loom_step_args_v1 *a, uint64_t begin, uint64_t n,
                           float *master, const void *grad, loom_dtype grad_dtype, float *m,
                           float *v, void *param, loom_dtype param_dtype);
  /* The input token ids (int32, device memory, B*T of them in *n) of the micro-batch whose
   * forward ran last on this rank; NULL and *n = 0 before any forward. Valid until the next
   * forward. The embedding's gradient has nonzero rows only at these ids, so a data-parallel
   * plugin can reduce those rows alone (ddp's split of the tied embedding's all-reduce). */
  const int32_t *(*micro_tokens)(loom_host *h, size_t *n);

  /* ---- ABI 1.5 ---- */
  /* 1 when the host divides the loss gradient by the data-parallel size in this run (the
   * gradient-sync owner set LOOM_PAR_GRAD_PREDIVIDED in loom_parallel_v1.grad_sync and dp > 1):
   * the gradients backward produces are already divided by dp, and the sync must only sum them.
   * 0: the 1.0 contract (the sync averages, sum / dp). Fixed from create on. A plugin checks
   * LOOM_HOST_HAS(api, grads_predivided) first: an older host never predivides. */
  int (*grads_predivided)(loom_host *h);

  /* ---- ABI 1.6 ---- */
  /* A named point in the plugin's work where the host's tests inject a failure (SQLite's
   * designed-in faults): the plugin calls it where a crash or an error must be provable, e.g.
   * checkpoint.so between publishing a step and updating `latest` ("ckpt.before_latest").
   * name: a "<plugin>.<point>" string the plugin owns; the host knows the points its tests arm
   * and ignores the rest. Returns LOOM_OK when nothing is armed there (always in a production
   * run); a crash armed there ends the process inside the call (exit status 3, as a crashed
   * rank: the call does not return); any other return is an error the plugin fails the current
   * call with (the host has set the message). A plugin checks LOOM_HOST_HAS(api, fault_point)
   * first: an older host has no fault points. */
  int (*fault_point)(loom_host *h, const char *name);

  /* ---- ABI 1.12 ---- */
  /* Model chunks per pipeline stage (the pipeline entry's host key "chunks", 1 without): the
   * host places that many chunks on each stage (interleaved 1F1B, parallel_v1.h
   * loom_schedule_v1.n_chunks), and a schedule owner checks its schedule against it in create
   * (and estimate). A plugin checks LOOM_HOST_HAS(api, n_chunks) first: an older host places
   * one chunk. */
  int (*n_chunks)(loom_host *h);
} loom_host_api_v1;

/* LOOM_HOST_HAS(api, slot) and the other accessors for older hosts: compat.h. */

#ifdef __cplusplus
}
#endif
#endif /* LOOM_HOST_V1_H */
