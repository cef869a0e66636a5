/* The host runtime: one per process. It owns the device, the communicator mesh, the model, the
 * loaded plugins, and the per-plugin host handles through which plugins call back in. */
#ifndef LOOM_CORE_RUNTIME_H
#define LOOM_CORE_RUNTIME_H

#include <loom/loom.h>

#include "../config/config.h"
#include "../device/device.h"
#include "../model/gpt.h"
#include "loader.h"

typedef struct loom_runtime loom_runtime;

/* The run's storage plan as the host keeps it (decided by loom__storage_plan, storage_plan.c). */
typedef struct loom_plan {
  loom_storage_plan_v1 v; /* what plugins read (loom_model_v1.plan); v.reason points at reason */
  int legacy;             /* the first parallel plugin without LOOM_PAR_STORAGE_16BIT (under a
                             16-bit precision it keeps the buffers fp32), or -1 */
  char reason[384];
} loom_plan;

#define LOOM_MAX_STAGES 64 /* pipeline stages */

/* The handle a plugin receives: knows which plugin it serves (for messages) and its options. */
struct loom_host {
  loom_runtime *rt;
  const char *label;     /* "ddp (parallel[0])" — used to prefix logs and errors */
  loom_options opts;     /* the plugin's options with the config file and JSON path */
  struct loom_sub_options *subs; /* nested option objects handed out (opt_object), owned */
  char error[1024];      /* last message from set_error */
};

/* Communication volume, counted by the host for every collective it forwards (algorithmic
 * bytes sent per rank: ring all-reduce 2(n-1)/n * bytes, reduce-scatter and all-gather
 * (n-1)/n * total bytes, broadcast and send their bytes). */
typedef struct loom_comm_stats {
  uint64_t bytes_sent;   /* since start */
  uint64_t ops;          /* operations since start */
} loom_comm_stats;

/* A communicator of the mesh as the host hands it out (plugins see it as loom_comm*). */
typedef struct loom_mesh {
  int world_rank, world_size;
  int dp, tp, pp;                /* sizes; dp * tp * pp == world_size */
  int dp_rank, tp_rank, pp_rank;
  int dp_shard, dp_replica;      /* hybrid sharding (ABI 1.11): dp = dp_shard * dp_replica;
                                    without "shard_size" dp_shard = dp, dp_replica = 1 */
  int shard_rank, replica_rank;  /* dp_rank % dp_shard, dp_rank / dp_shard */
  /* context parallel (ABI 1.13): dp above is the gradient group dp x cp (host_v1.h,
   * LOOM_AXIS_CP); data_dp = dp / cp ranks read distinct batches, data_rank = dp_rank / cp is
   * this rank's, cp_rank = dp_rank % cp its place in the ring. cp 1: data_dp = dp. */
  int cp, cp_rank, data_dp, data_rank;
  loom_comm *axis[7];            /* indexed by loom_axis; axis[WORLD] is the plugin's world */
} loom_mesh;

struct loom_runtime {
  loom_config *cfg;
  loom_dev dev;
  loom_plugin dev_plugin;       /* the device plugin (handle NULL for the built-in CPU device) */
  int local_rank, local_size;   /* this rank's place on its node (device_open.c) */
  char placement[640];          /* every rank's node and local rank, summed up (placement.c) */
  void *ctl_buf;                /* device bounce buffer for host control traffic (unaccounted) */
  size_t ctl_bytes;

  loom_plugin comm_plugin;
  void *comm_ctx;
  loom_host comm_host;
  char comm_label[LOOM_PATH_MAX + 16];
  loom_mesh mesh;
  loom_comm_stats comm_stats;

  int n_parallel;
  loom_plugin parallel[LOOM_MAX_PARALLEL];
  void *parallel_ctx[LOOM_MAX_PARALLEL];
  loom_host parallel_host[LOOM_MAX_PARALLEL];
  int grad_sync_owner;   /* index into parallel[] or -1 */
  int optimizer_owner;   /* index into parallel[] or -1 */
  int tp_owner;          /* the tensor-parallel plugin (LOOM_PAR_CAP_AXIS_TP) or -1 */
  int tp_size;           /* its "size" (1 without one): the mesh's tp */
  int tp_vocab;          /* its "vocab_parallel": wte and the head split over the vocabulary */
  int tp_seq;            /* its "sequence_parallel": LayerNorms and residuals sharded along T */
  int schedule_owner;    /* the pipeline plugin (LOOM_PAR_CAP_SCHEDULE) or -1 */
  int pp_size;           /* its "size" (1 without one): the mesh's pp */
  int cp_owner;          /* the context-parallel plugin (LOOM_PAR_CAP_AXIS_CP) or -1 */
  int cp_size;           /* its "size" (1 without one): the mesh's cp */
  int shard_size;        /* the hybrid sharding plugin's "shard_size": K, LOOM_SHARD_NODE
                            ("node": the ranks per node / tp), or 0 (none: K = dp) */
  int shard_owner;       /* the plugin it was given to, or -1 */
  int pp_explicit;       /* "stages" given: pp_units holds the units per stage */
  int pp_units[LOOM_MAX_STAGES];
  int pp_first[LOOM_MAX_STAGES], pp_last[LOOM_MAX_STAGES]; /* each stage's units [first, last]
                                                              (with chunks: their hull) */
  int pp_chunks;         /* its "chunks" v (1 without): model chunks per stage, interleaved */
  int pp_vfirst[LOOM_MAX_STAGES], pp_vlast[LOOM_MAX_STAGES]; /* with chunks: virtual stage j's
                                                              units [first, last], j < pp * v
                                                              (stage j % pp's chunk j / pp) */
  loom_comm *emb_comm;   /* first and last stage, same tp rank (the tied wte's gradient sum) */
  int *tensor_tied;      /* per model_view tensor: 1 for the tied wte copy (norm weight 0) */
  float *emb_buf;        /* V*C floats (LOOM_MEM_COMM): the tied gradient sum's buffer */
  void *sp16;            /* sequence parallel under bf16/fp16: its 16-bit staging, (tp + 1) x
                            the shard (LOOM_MEM_COMM; trainer.c sp_stage16), or NULL */
  size_t sp16_bytes;

  loom_plugin precision;
  void *precision_ctx;
  loom_host precision_host;
  loom_dtype compute_dtype;     /* the precision plugin's: the model's 16-bit stores (gpt.h) */
  loom_plan plan;               /* the storage plan (storage_plan.c), decided once in
                                   loom__plugins_create: plan.v.param_dtype / grad_dtype are
                                   the flat buffers' storage; model_view.plan points here */

  int has_checkpoint;
  loom_plugin checkpoint;
  void *checkpoint_ctx;
  loom_host checkpoint_host;

  gpt_model model;
  loom_model_v1 model_view;     /* what plugins see */
  loom_tensor_v1 *tensors;      /* model_view.tensors */
  uint64_t *unit_offset;        /* model_view.unit_offset */
  float **tensor_data, **tensor_grad; /* storage of the views (point at gpt_param fields) */

  loom_partition_v1 partition;  /* what this rank's optimizer steps (default: whole model) */
  int partition_owner;          /* index of the plugin that published it, or -1 */
  int shard_params, shard_grads;/* a plugin owns parameter / gradient storage */
  float *optim_m, *optim_v;     /* host-owned AdamW state over the partition (NULL when a
                                   plugin owns the optimizer step) */
  struct loom_model_file *init_file; /* init_from's file while the parameters are initialised
                                   (until setup is done; init_params_range reads it), else NULL */
  float *master;                /* host-owned fp32 master of the partition under 16-bit
                                   storage (partition.master; NULL when params are fp32 or
                                   the publishing plugin owns it) */
  float *stage;                 /* LOOM_STAGE_FLOATS fp32 scratch (LOOM_MEM_OTHER): widening
                                   16-bit gradients for norms and the optimizer */
};

/* rt->shard_size for "shard_size": "node" (resolved from the launcher at mesh time). */
#define LOOM_SHARD_NODE (-1)

/* Floats of rt->stage: bounded, whatever the model size (64 KiB). */
#define LOOM_STAGE_FLOATS 16384

/* Format an error for the user: "loom: LABEL: MESSAGE" (LABEL = plugin and config path). */
void loom__host_init(loom_host *h, loom_runtime *rt, const char *label, const char *file,
                     const char *where, json_t *options);

/* Free what a plugin's handle accumulated (nested options). */
void loom__host_release(loom_host *h);

/* The host API table (static, one for all plugins; as a 1.4 host offers it under
 * LOOM_TEST_HOST_MINOR=4, for the tests of 1.5 plugins on an older host: abi_compat.c). */
const loom_host_api_v1 *loom__host_api(void);

/* Rank of this process as the launcher tells it (before MPI is up), 0 when not launched. */
int loom__launcher_rank(void);

/* Start the comm plugin and build the dp x tp x pp mesh. sizes: tp and pp (dp = the rest).
 * Returns 0 or -1 with a message. */
int loom__mesh_init(loom_runtime *rt, int tp, int pp, char *err, size_t errlen);
/* `loom check`: the comm plugin's options validated as its create() would (comm ABI 1.5
 * check_options) without joining a job. A 1.4 plugin: 0, nothing checked. Returns 0 or -1 with
 * a message naming the file, JSON path and plugin. */
int loom__comm_check_options(loom_runtime *rt, char *err, size_t errlen);
void loom__mesh_free(loom_runtime *rt);
/* `loom estimate`: how the comm plugin's all_reduce SUM runs (comm ABI 1.11 all_reduce_nodes):
 * *node_size 0 flat, K hierarchical over nodes of K consecutive world ranks, -1 over the
 * launcher's nodes. Returns 0 (an older plugin: 0, flat) or -1 with a message. */
int loom__comm_all_reduce_nodes(loom_runtime *rt, int *node_size, char *err, size_t errlen);

/* Bring the whole job down after printing `msg` (every rank exits non-zero, promptly). */
void loom__fatal(loom_runtime *rt, int code, const char *msg);



/* Build / free rt->model_view from rt->model (model_view.c). */
int loom__model_view_build(loom_runtime *rt);
void loom__model_view_free(loom_runtime *rt);
#endif
