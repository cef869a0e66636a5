/* `loom estimate`: per-rank memory by category and communication volume per step for a config,
 * before anything runs (no MPI, no training, no tensor allocated).
 *
 * Mixed precision (bf16.so, fp16.so), 16-bit storage (ABI 1.4: every parallel plugin sets
 * LOOM_PAR_STORAGE_16BIT; loom__storage_plan decides as the host does): parameters P = 2
 * bytes, gradients G = 2 (4 with grad_accum_steps > 1: fp32 accumulation), optimizer K = 12
 * (fp32 master, m, v), so the ZeRO paper's own mixed-precision formulas hold exactly: DDP 16Ψ,
 * ZeRO-1 4Ψ + 12Ψ/N, ZeRO-2 2Ψ + 14Ψ/N, ZeRO-3 16Ψ/N + 2·gathered; cpu_offload's host memory
 * (12 + G)Ψ/N. The fp32 working copies of one unit (weights, gradient accumulators, the stages)
 * are temporary buffers ("other"); ZeRO's buckets and scratch are G bytes per element, plus the
 * plugins' 2 × 32 KiB fp32 averaging scratch; every collective moves P or G bytes per element.
 * Without 16-bit storage (a plugin built against ABI <= 1.3) the 1.3 layout: the fp32 master
 * is the parameter buffer (4Ψ + the largest unit's 4·W working copy), fp32 gradients, K = 8, and
 * ddp holds 16-bit buckets (2Ψ, comm). The paper's formula is printed next to the model states
 * (paper_states, paper_formula; `working` = what the 1.3 layout adds to them).
 *
 * The accounting is the ZeRO paper's (Rajbhandari et al. 2020, §3 and §5, Table 1); for fp32
 * training: parameters 4Ψ, gradients 4Ψ, Adam's optimizer state K·Ψ with K = 8 (m and v; in
 * fp32 the parameters are their own master copy). What is sharded is decided by the ROLES (caps)
 * the configured parallel plugins declare, never by their names:
 *   no sharding role                 params 4Ψ      grads 4Ψ      optim 8Ψ        (DDP)
 *   LOOM_PAR_CAP_SHARD_OPTIM         params 4Ψ      grads 4Ψ      optim 8Ψ/N      (ZeRO-1, P_os)
 *   + LOOM_PAR_CAP_SHARD_GRADS       params 4Ψ      grads 4Ψ/N    optim 8Ψ/N      (ZeRO-2, P_os+g)
 *   + LOOM_PAR_CAP_SHARD_PARAMS      params 4Ψ/N + the gathered working set       (ZeRO-3)
 *   an OPTIMIZER owner with no other role (cpu_offload): optim 0 on the device; host memory
 *   16 bytes per partition element (m, v, fp32 master copy, gradient staging).
 * Who accounts what (ABI 1.6): the host holds the model's parameters, gradients and
 * optimizer state (4Ψ/4Ψ/8Ψ in fp32), the activations and the token buffers; every parallel
 * plugin then describes what it owns and holds besides for the plan through
 * loom_parallel_v1.estimate (its shards and partition, buckets, scratch, host memory, the
 * gathered working set, the micro-batches in flight, its traffic), with its own options, or,
 * when it leaves the slot NULL, is accounted by its caps as the reference plugin of its role
 * with default options (estimate_roles.c). This file reads no plugin option. Activations are
 * the exact pool gpt.c allocates for (micro_batch_size, seq_len) (gpt_activation_bytes) under
 * the activation_checkpointing policy, plus once its recompute scratch (gpt_recompute_bytes),
 * "other" the two token buffers (and a padded vocabulary's 4Vp-byte logits mask on the stage
 * with the head). Our plugins' figures: ZeRO-3's gathered working set is the largest unit (the
 * head counted with the tied wte it reads), or the largest pair of neighbouring units when it
 * gathers ahead; ZeRO-1's reduce-scatter scratch (4Ψ/N), ZeRO-2/3's gradient buckets of whole
 * units (exact when the reductions block, an upper bound when a reduction runs during the next bucket's
 * backward). Every category is the largest over the data-parallel ranks (rank 0's shard is
 * the largest), so the total bounds every rank's peak (mem_peak_bytes_max in the metrics).
 *
 * Communication per optimizer step per rank (S = 4Ψ bytes; the host counts algorithmic bytes:
 * ring all-reduce 2(N-1)/N, reduce-scatter and all-gather (N-1)/N), A = grad_accum_steps:
 *   DDP, ZeRO-1   2(N-1)/N·S           (gradients synced once per step: no_sync on accumulation)
 *   ZeRO-2        (A+1)(N-1)/N·S       (reduce-scatter every micro-step, all-gather once)
 *   ZeRO-3        A(N-1)/N·4(3Ψ − wpe − head)
 *                 the paper's 3Ψ (§7: gather for forward, gather for backward, reduce-scatter)
 *                 corrected for this model: the head's gather carries the tied wte again and
 *                 is kept from its forward to its backward, and unit 0's backward (the
 *                 embedding's) reads no parameter, so it is not gathered (+wte − head − wte −
 *                 wpe); the paper's value is reported alongside (comm_bytes_paper).
 *
 * Pipeline parallel (p stages on the pp axis): N = world / (tp·p), and every stage is
 * accounted on its own parameter table (the split is loom__pp_split's, the trainer's): Ψ is
 * the stage's parameters, the last stage's with its copy of the tied wte (V·C). The stage holds
 * one activation pool (and its two token buffers) per micro-batch in flight, as the schedule
 * owner reports (pipeline.so: 1 sequential, m = A gpipe, min(p − s, m) 1f1b on stage s); the
 * first and last stage hold the tied wte's
 * gradient buffer (4VC, comm). Its traffic adds, per step: the tied wte's gradient sum over the
 * first and last stage's 2N ranks, 2(2N−1)/(2N)·4VC (first and last stage only), and the
 * boundary sends, A·4BTC per direction with a neighbour (activations forward to s+1, their
 * gradients back to s−1); tensor parallel's f/g count the stage's blocks only. The top-level
 * figures are the largest stage's (by total bytes: the worst rank); `stages` has every one. */
#ifndef LOOM_CORE_ESTIMATE_H
#define LOOM_CORE_ESTIMATE_H

#include <jansson.h>
#include <loom/loom.h>
#include <stdint.h>
#include <stdio.h>

#include "config/config.h"
#include "runtime/runtime.h"

/* One pipeline stage's accounting (pp 1: the single stage, the whole model). */
typedef struct loom_estimate_stage {
  int first_unit, last_unit; /* units [first, last]: 0 embedding, 1..L blocks, L+1 head */
  int n_blocks;
  uint64_t psi;              /* the stage's parameters (with the last stage's tied wte copy) */
  int in_flight;             /* micro-batches whose activations the schedule holds at once */
  uint64_t act_per_micro;    /* gpt_activation_bytes of the stage at (B, T) */
  uint64_t bytes[LOOM_MEM__COUNT];
  uint64_t total, model_states;
  uint64_t comm_bytes;       /* per step per rank: the sum of the four below */
  uint64_t dp_comm_bytes, tied_comm_bytes, p2p_comm_bytes, tp_comm_bytes;
  uint64_t cp_comm_bytes;    /* context parallel's K/V ring (in comm_bytes) */
  uint64_t replica_comm_bytes; /* hybrid sharding: the host's sum over the replicas (in
                                  comm_bytes; dp_comm_bytes is then the shard group's) */
  uint64_t node_comm_bytes, cross_comm_bytes; /* a hierarchical all-reduce's split of
                                  dp_comm_bytes: in the node, across (estimate_axes.c) */
} loom_estimate_stage;

typedef struct loom_estimate {
  char config[LOOM_PATH_MAX];
  char device[160];      /* device.type, and the plugin file for a device plugin */
  int world;                /* N = data-parallel ranks (the world / (tp * pp)); under
                               context parallel the dp x cp gradient group */
  int cp;                   /* context-parallel size (1 without) */
  int ranks_per_node;       /* --ranks-per-node: the launcher's ranks per node (0 unknown);
                               resolves shard_size "node" and a hierarchical all-reduce over
                               the launcher's nodes */
  int dp_shard, dp_replica; /* hybrid sharding ("shard_size"): K x R = N; else N x 1 */
  int hier_node;            /* the comm plugin's hierarchical all-reduce (comm ABI 1.11): the
                               data-parallel ranks per node, 0 flat or not splittable */
  /* traffic per step per rank by communicator ("axes"): the data-parallel plugin's (over the
   * shard group under hybrid sharding), the host's sum over the replicas, and, for ddp over a
   * hierarchical all-reduce, the dp bytes split into the in-node reduce-scatter + all-gather
   * and the across-node all-reduce (their sum: the dp bytes); estimate_axes.c */
  uint64_t axis_dp, axis_replica, axis_node, axis_cross;
  char axis_formula[4][96];
  int pp;                   /* pipeline stages (1 without a pipeline plugin) */
  char schedule[16];        /* the pipeline schedule as its owner names it ("" without one) */
  int worst_stage;          /* the stage the top-level figures are of */
  loom_estimate_stage stages[LOOM_MAX_STAGES];
  uint64_t psi_model;       /* the whole model's parameters (per tp rank) */
  int tp;                   /* tensor-parallel size (1 without tensor_parallel) */
  uint64_t tp_comm_bytes;   /* Megatron's f/g all-reduces per step per rank */
  uint64_t cp_comm_bytes;   /* context parallel's K/V (and dK/dV) ring per step per rank */
  int vocab_parallel;       /* tensor_parallel's vocab_parallel: wte and the logits split */
  int sequence_parallel;    /* tensor_parallel's sequence_parallel: LayerNorms sharded on T */
  int n_plugins;
  struct { char name[64]; uint64_t caps; } plugins[LOOM_MAX_PARALLEL];
  /* roles found among the plugins */
  int grad_sync, shard_optim, shard_grads, shard_params, offload;
  int predivide;            /* the gradient-sync owner sums only (LOOM_PAR_GRAD_PREDIVIDED, ABI
                               1.5): no averaging buffers */
  int stage;                /* 0 (none/DDP), 1, 2, 3: the highest sharding role */
  loom_dtype dtype;         /* the precision plugin's compute dtype */
  int sync16;               /* the gradient all-reduce travels in dtype (ddp under bf16/fp16) */
  loom_dtype param_dtype, grad_dtype; /* storage (loom__storage_plan; ABI 1.4) */
  int storage16;            /* 16-bit parameter storage (ABI 1.4; every plugin can) */
  int grad16;               /* 16-bit gradient storage (storage16 and one micro-batch) */
  int acts16;               /* 16-bit activations end to end (gpt_config.acts_typed: a device
                               with ABI 1.8 acts16, bf16/fp16, no tp, no pipeline) */
  int attn_lse;             /* flash attention (gpt_config.attn_lse: model.attention and a
                               device with ABI 1.9's lse slots): 4asb/t of lse for 4as^2b/t */
  int param_elem, grad_elem, optim_k; /* bytes per element: params P, grads G, optimizer K */
  uint64_t paper_states;    /* the ZeRO paper's model states (+ ZeRO-3's gathered set) */
  char paper_formula[96];   /* "2Psi + 14Psi/N", ... */
  uint64_t working;         /* model-state bytes beyond the formula: the 1.3 layout's fp32 unit */
  char strategy[128];       /* "ZeRO-2 (P_os+g) + optimizer offload", ... */
  /* model and batch */
  int n_layer, n_head, n_embd, vocab_size, context_length;
  int micro_batch, seq_len, accum;
  uint64_t psi;             /* parameters (of the worst stage under pp) */
  uint64_t part;            /* elements of rank 0's optimizer partition */
  uint64_t gathered;        /* ZeRO-3: elements of the largest gathered unit (0 otherwise) */
  /* bytes per rank, indexed by loom_mem_category, and the total */
  uint64_t bytes[LOOM_MEM__COUNT];
  uint64_t total;
  uint64_t model_states;    /* params + grads + optim + host */
  char formula[LOOM_MEM__COUNT][64];
  uint64_t comm_bytes;      /* per optimizer step per rank */
  uint64_t comm_bytes_paper; /* the same by the paper's formula (no tied-embedding terms) */
  char comm_formula[160];
  /* activation checkpointing (gpt.h GPT_CKPT_*, "every" k) and its recompute scratch, which a
   * rank holds once whatever the micro-batches in flight (included in bytes[activations]) */
  int ckpt_policy, ckpt_every;
  uint64_t act_recompute;
  /* what the plugins report besides their bytes (ABI 1.6 estimate slot): one line for the
   * table, one named figure for the JSON (ddp names its split of the tied embedding's
   * all-reduce there: rows held, their bytes and traffic, included above) */
  char note[256];
  char detail_name[32];
  int detail_on;
  uint64_t detail_rows, detail_bytes, detail_comm_bytes;
} loom_estimate;

/* Load `config_path` with the overrides, open its plugins (roles only: nothing is created) and
 * compute the estimate for `world` ranks placed `ranks_per_node` to a node by block (0: the
 * nodes unknown). Returns 0, or -1 with one line in err (the same messages `loom check` and
 * `loom train` print for a bad config or plugin). */
int loom_estimate_compute(const char *config_path, const char *const *overrides, int n_overrides,
                          int world, int ranks_per_node, loom_estimate *e, char *err,
                          size_t errlen);

/* A compact table (human) or one JSON object whose "bytes" keys are the metrics file's
 * mem_peak_bytes keys (params, grads, optim, activations, comm, host, other, total).
 * inter_node (NULL: none; the reference is taken) becomes its "inter_node" member
 * (estimate_nodes.h). */
void loom_estimate_print(FILE *out, const loom_estimate *e);
int loom_estimate_print_json(FILE *out, const loom_estimate *e, json_t *inter_node);

#endif
