/* The training loop. Reads like the algorithm:
 *   for each step: lr = schedule(step); zero_grad;
 *     for each micro-step: next_batch; forward; backward (hooks let plugins sync gradients);
 *     grad norm (global); clip; optimizer step; log; eval; checkpoint.
 * Every failure ends in tr->err and loom_trainer_fail, which takes the whole job down. */
#include "../runtime/device_open.h"
#include "trainer.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "formats/init_from.h"
#include "model/gpt_cp.h"
#include "../runtime/placement.h"
#include "../runtime/plugins.h"
#include "../runtime/pp_split.h"
#include "util/one_line.h"
#include "util/test_hooks.h"
#include "lr_schedule.h"
#include "metrics.h"
#include "preflight.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* SIGINT / SIGTERM (Ctrl-C, scancel, a scheduler's preemption) / SIGUSR1 (what mpirun forwards
 * to every rank, remote ones too: loom launch's stop, Slurm's --signal=USR1@SECONDS warning):
 * finish the step, agree with the other ranks, save a checkpoint, exit. */
static volatile sig_atomic_t stop_signal = 0;
static void on_stop_signal(int sig) { stop_signal = sig; }

static int fail(loom_trainer *tr, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tr->err, sizeof tr->err, fmt, ap);
  va_end(ap);
  return -1;
}

/* A device fault (device_v1.error, ABI 1.10; loom__dev_error): -1 with the device's own message,
 * so the job ends saying what failed instead of reading its failed context's NaNs (0xff bytes)
 * as a diverged run, an fp16 overflow to skip, or a plugin's error. 0 while the device is
 * healthy. Asked once per step after the loss and the gradient norm were read (reads that wait
 * for the device, so a fault of queued work has shown), and wherever a pass failed. */
static int device_failed(loom_trainer *tr) {
  const char *msg = loom__dev_error(&tr->rt.dev);
  if (!msg) return 0;
  fail(tr, "device '%s' failed: %s", tr->rt.dev.ops->hdr.name, msg);
  return 1;
}

/* On an error path (a hook, a collective, the optimizer failed): wait for the device first, so
 * a fault of queued work has shown and is reported as the cause (a comm plugin often sees a
 * device fault before the device does). 1 if the device failed. */
static int device_caused(loom_trainer *tr) {
  tr->rt.dev.ops->synchronize(tr->rt.dev.ctx);
  return device_failed(tr);
}

/* ---- parallel hooks: each plugin in config order (a failing hook on a failed device reports
 * the device's fault: the hook's own error, e.g. a staging copy's, is its consequence) ---- */
#define CALL_HOOKS(tr, hook, name, ...)                                                   \
  do {                                                                                    \
    loom_runtime *rt_ = &(tr)->rt;                                                        \
    for (int i_ = 0; i_ < rt_->n_parallel; i_++) {                                        \
      const loom_parallel_v1 *p_ = &rt_->parallel[i_].u.parallel;                         \
      int rc_ = p_->hook ? p_->hook(rt_->parallel_ctx[i_], __VA_ARGS__) : LOOM_OK;        \
      if (rc_ != LOOM_OK)                                                                 \
        return device_caused(tr) ? -1                                                     \
                                 : loom__hook_error(rt_, i_, name, rc_, (tr)->err,       \
                                                    sizeof (tr)->err);                    \
    }                                                                                     \
  } while (0)

static int hook_pre_forward(void *ud, int u) { CALL_HOOKS((loom_trainer *)ud, pre_forward, "pre_forward", u); return 0; }
static int hook_post_forward(void *ud, int u) { CALL_HOOKS((loom_trainer *)ud, post_forward, "post_forward", u); return 0; }
static int hook_pre_backward(void *ud, int u) { CALL_HOOKS((loom_trainer *)ud, pre_backward, "pre_backward", u); return 0; }
static int hook_post_backward(void *ud, int u) { CALL_HOOKS((loom_trainer *)ud, post_backward, "post_backward", u); return 0; }

static int hook_region(void *ud, int which, int backward, float *buf, size_t n) {
  CALL_HOOKS((loom_trainer *)ud, region, which == LOOM_REGION_F ? "region f" : "region g",
             which, backward, buf, n);
  return 0;
}

/* Vocabulary parallel's all-reduces over tp (gpt_hooks.tp_reduce): the host's own traffic,
 * counted in the communication statistics as the strategy's. */
static int hook_tp_reduce(void *ud, void *buf, size_t n, int dtype, int op) {
  loom_trainer *tr = ud;
  loom_runtime *rt = &tr->rt;
  if (loom__host_api()->all_reduce(&tr->core_host, rt->mesh.axis[LOOM_AXIS_TP], buf, n,
                                   (loom_dtype)dtype, (loom_red_op)op, NULL) != LOOM_OK) {
    if (device_caused(tr)) return -1;
    fail(tr, "tensor parallel: host all-reduce of %zu elements over the %d tp ranks failed: %s",
         n, rt->mesh.tp, tr->core_host.error);
    return -1;
  }
  return 0;
}

/* Sequence parallel's all-gathers and reduce-scatters along T over tp (gpt_hooks,
 * core/model/gpt_sp.c): the host's own traffic through the comm plugin, counted as the
 * strategy's. n is the shard's floats. */
static int tp_sp_failed(loom_trainer *tr, const char *what, size_t n) {
  if (device_caused(tr)) return -1;
  fail(tr, "sequence_parallel: %s of %zu-float shards over the %d tp ranks failed: %s", what, n,
       tr->rt.mesh.tp, tr->core_host.error);
  return -1;
}
/* Under bf16/fp16 (the plan's activation_comm_dtype) the shards hold 16-bit values in fp32
 * buffers: they travel packed in 16 bits (exact; a reduce-scatter's sum rounded once by the comm
 * plugin), as tensor_parallel.so's regions do. The staging holds the whole tensor (tp x n) then
 * the shard (n), grown when n grows. NULL (fp32 traffic) in fp32 or on a device without
 * convert; *fail set when the staging cannot be allocated. */
static void *sp_stage16(loom_trainer *tr, size_t n, loom_dtype *dt, int *fail_) {
  loom_runtime *rt = &tr->rt;
  const loom_dtype d = rt->plan.v.activation_comm_dtype;
  *fail_ = 0;
  if (d == LOOM_F32 || !rt->dev.ops->convert) return NULL;
  const size_t need = ((size_t)rt->mesh.tp + 1) * n * loom_dtype_size(d);
  if (need > rt->sp16_bytes) {
    loom__dev_free(&rt->dev, rt->sp16);
    rt->sp16_bytes = 0;
    rt->sp16 = loom__dev_alloc(&rt->dev, need, LOOM_MEM_COMM);
    if (!rt->sp16) {
      *fail_ = 1;
      return NULL;
    }
    rt->sp16_bytes = need;
  }
  *dt = d;
  return rt->sp16;
}
/* One of sequence parallel's collectives over tp: gather (in: this rank's n-float shard, out:
 * the tp * n whole) or reduce-scatter (in: the whole, out: this rank's shard of the sum). In the
 * 16-bit staging the whole sits first and the shard after it. */
static int sp_collective(loom_trainer *tr, int gather, const float *in, float *out, size_t n) {
  const loom_device_v1 *d = tr->rt.dev.ops;
  loom_dtype dt = LOOM_F32;
  int oom;
  char *st = sp_stage16(tr, n, &dt, &oom);
  if (oom) return fail(tr, "sequence_parallel: out of memory (16-bit staging of %zu elements)",
                       n * ((size_t)tr->rt.mesh.tp + 1));
  const size_t tpn = (size_t)tr->rt.mesh.tp * n, es = loom_dtype_size(dt);
  const size_t n_in = gather ? n : tpn, n_out = gather ? tpn : n;
  char *st_in = st ? st + (gather ? tpn * es : 0) : NULL;
  char *st_out = st ? st + (gather ? 0 : tpn * es) : NULL;
  const void *src = st ? (const void *)st_in : in;
  void *dst = st ? (void *)st_out : out;
  int rc = st ? d->convert(tr->rt.dev.ctx, st_in, dt, in, LOOM_F32, n_in) : LOOM_OK;
  const loom_host_api_v1 *api = loom__host_api();
  loom_comm *tp = tr->rt.mesh.axis[LOOM_AXIS_TP];
  if (!rc)
    rc = gather ? api->all_gather(&tr->core_host, tp, src, dst, n, dt, NULL)
                : api->reduce_scatter(&tr->core_host, tp, src, dst, n, dt, LOOM_OP_SUM, NULL);
  if (!rc && st) rc = d->convert(tr->rt.dev.ctx, out, LOOM_F32, st_out, dt, n_out);
  return rc != LOOM_OK ? tp_sp_failed(tr, gather ? "all-gather" : "reduce-scatter", n) : 0;
}
static int hook_tp_all_gather(void *ud, const float *shard, float *full, size_t n) {
  return sp_collective(ud, 1, shard, full, n);
}
static int hook_tp_reduce_scatter(void *ud, const float *full, float *shard, size_t n) {
  return sp_collective(ud, 0, full, shard, n);
}
/* Context parallel's ring hop (gpt_hooks.cp_ring): the context_parallel plugin's `ring`. */
static int hook_cp_ring(void *ud, const float *send, float *recv, size_t n) {
  loom_trainer *tr = ud;
  loom_runtime *rt = &tr->rt;
  const int i = rt->cp_owner;
  int rc = rt->parallel[i].u.parallel.ring(rt->parallel_ctx[i], send, recv, n);
  if (rc == LOOM_OK) return 0;
  return device_caused(tr) ? -1 : loom__hook_error(rt, i, "ring", rc, tr->err, sizeof tr->err);
}

static gpt_hooks make_hooks(loom_trainer *tr) {
  gpt_hooks h = {.ud = tr, .pre_forward = hook_pre_forward, .post_forward = hook_post_forward,
                 .pre_backward = hook_pre_backward, .post_backward = hook_post_backward,
                 .region = hook_region, .tp_reduce = hook_tp_reduce,
                 .tp_all_gather = hook_tp_all_gather,
                 .tp_reduce_scatter = hook_tp_reduce_scatter};
  if (tr->rt.cp_owner >= 0) h.cp_ring = hook_cp_ring;
  return h;
}

/* Batch `micro` of `ld` for this rank's data-parallel coordinate (under context parallel the
 * cp ranks of a group read the same sequences: data_dp groups, data_rank). */
static void fill_batch(loom_trainer *tr, loom_loader *ld, int micro) {
  const loom_mesh *m = &tr->rt.mesh;
  loom_loader_fill(ld, tr->B, m->data_dp, micro, m->data_rank, tr->inputs, tr->targets);
}

/* The forward's ids and targets for (B, T) host tokens: this rank's chunks under context
 * parallel (T becomes the local Tl), else the tokens themselves. */
static void cp_local(loom_trainer *tr, const int32_t **in, const int32_t **tg, int B, int *T) {
  const loom_mesh *m = &tr->rt.mesh;
  if (m->cp <= 1) return;
  gpt_cp_take(tr->cp_inputs, *in, B, *T, m->cp, m->cp_rank);
  *in = tr->cp_inputs;
  if (*tg) gpt_cp_take(tr->cp_targets, *tg, B, *T, m->cp, m->cp_rank), *tg = tr->cp_targets;
  *T /= m->cp;
}

/* Sum `vals` over the data-parallel group with the comm plugin directly (control traffic: not
 * counted in the communication statistics, which measure the strategy's own traffic). */
static int axis_sum(loom_trainer *tr, loom_axis axis, int size, double *vals, int n) {
  loom_runtime *rt = &tr->rt;
  if (size <= 1) return 0;
  if (loom__ctl_all_reduce(rt, rt->mesh.axis[axis], vals, (size_t)n, LOOM_F64,
                    LOOM_OP_SUM) != LOOM_OK)
    return device_caused(tr) ? -1
                             : fail(tr, "all-reduce of step statistics failed: %s",
                                    rt->comm_host.error);
  return 0;
}

static int dp_sum(loom_trainer *tr, double *vals, int n) {
  return axis_sum(tr, LOOM_AXIS_DP, tr->rt.mesh.dp, vals, n);
}

/* Hybrid sharding (ABI 1.11): the sharding plugin summed the gradient over its shard group
 * (each addend already divided by the full dp); the replicas of the partition, one per shard
 * group, hold the sums of their own groups' batches: summing them over DP_REPLICA gives every
 * replica the whole data-parallel average, the same bits (MiCS's / HSDP's second stage). Once
 * per step, after the last micro-step, in the gradient's storage dtype; counted. */
static int replica_sum(loom_trainer *tr) {
  loom_runtime *rt = &tr->rt;
  const loom_partition_v1 *part = &rt->partition;
  if (rt->mesh.dp_replica <= 1 || !part->sharded) return 0;
  if (loom__host_api()->all_reduce(&tr->core_host, rt->mesh.axis[LOOM_AXIS_DP_REPLICA],
                                   part->grads, part->count ? part->count : 0,
                                   rt->plan.v.grad_dtype, LOOM_OP_SUM, NULL) != LOOM_OK)
    return device_caused(tr) ? -1
                             : fail(tr, "hybrid sharding: summing the partition's gradient over "
                                    "the %d replicas failed: %s", rt->mesh.dp_replica,
                                    tr->core_host.error);
  return 0;
}

/* Every rank must run the same configuration (file and --set overrides): different seeds or
 * step counts would silently train different replicas or hang in a collective. Compare a
 * hash of the canonical JSON across the world (control traffic, not counted). */
static int check_same_config(loom_trainer *tr) {
  loom_runtime *rt = &tr->rt;
  if (rt->mesh.world_size <= 1) return 0;
  char *text = json_dumps(tr->cfg.root, JSON_COMPACT | JSON_SORT_KEYS);
  if (!text) return fail(tr, "out of memory (config hash)");
  uint64_t h = 1469598103934665603ull; /* FNV-1a, 64 bit */
  for (const char *c = text; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
  free(text);
  int64_t v[2] = {(int64_t)(h >> 1), -(int64_t)(h >> 1)}; /* max of both = max and -min */
  if (loom__ctl_all_reduce(rt, rt->mesh.axis[LOOM_AXIS_WORLD], v, 2, LOOM_I64,
                           LOOM_OP_MAX) != LOOM_OK)
    return fail(tr, "comparing the configuration across ranks failed: %s",
                rt->comm_host.error);
  if (v[0] != -v[1])
    return fail(tr, "%s: the ranks were started with different configurations (config file "
                "or --set overrides differ between ranks): every rank must run the same one",
                tr->cfg.path);
  return 0;
}

/* 1 on every rank when any rank got a stop signal (one small all-reduce per step). */
static int stop_requested(loom_trainer *tr, int *stop) {
  loom_runtime *rt = &tr->rt;
  int32_t v = stop_signal != 0;
  if (rt->mesh.world_size > 1) {
    if (loom__ctl_all_reduce(rt, rt->mesh.axis[LOOM_AXIS_WORLD], &v, 1, LOOM_I32,
                      LOOM_OP_MAX) != LOOM_OK)
      return fail(tr, "agreeing on a stop signal failed: %s", rt->comm_host.error);
  }
  *stop = v;
  return 0;
}

/* The peak memory of every category, maximised over all ranks (stages and ZeRO partitions
 * differ): one small all-reduce per step, control traffic, not counted. */
static int gather_peak_memory(loom_trainer *tr) {
  loom_runtime *rt = &tr->rt;
  for (int k = 0; k < LOOM_MEM__COUNT; k++) tr->mem_peak_max[k] = (int64_t)rt->dev.bytes_peak[k];
  tr->mem_peak_max[LOOM_MEM__COUNT] = (int64_t)rt->dev.total_peak;
  if (rt->mesh.world_size <= 1) return 0;
  if (loom__ctl_all_reduce(rt, rt->mesh.axis[LOOM_AXIS_WORLD], tr->mem_peak_max,
                    LOOM_MEM__COUNT + 1, LOOM_I64,
                           LOOM_OP_MAX) != LOOM_OK)
    return fail(tr, "gathering peak memory failed: %s", rt->comm_host.error);
  return 0;
}

/* init_from: open the file unless the run resumes from a checkpoint (resume wins: the
 * checkpoint holds the run's own parameters; the file is then not even opened). The resume
 * step is asked for here as loom__ckpt_resume asks later (the same collective answer). */
static int open_init_from(loom_trainer *tr, char *e, size_t elen) {
  loom_runtime *rt = &tr->rt;
  const loom_config *cfg = &tr->cfg;
  if (!cfg->init_from.path[0]) return 0;
  int step = 0;
  if (rt->has_checkpoint) {
    const loom_checkpoint_v1 *ck = &rt->checkpoint.u.checkpoint;
    if (ck->resume_step(rt->checkpoint_ctx, &step) != LOOM_OK) {
      snprintf(e, elen, "plugin %s: finding a checkpoint failed: %s", rt->checkpoint_host.label,
               rt->checkpoint_host.error);
      return -1;
    }
  }
  if (step > 0) {
    if (rt->mesh.world_rank == 0)
      printf("loom: init_from %s ignored: resuming from the checkpoint of step %d (resume "
             "wins)\n", cfg->init_from.path, step);
    return 0;
  }
  if (loom__init_from_open(cfg, &rt->init_file, e, elen) != 0) return -1;
  tr->init_from = loom__init_from_record(cfg);
  if (rt->mesh.world_rank == 0)
    printf("loom: parameters initialised from %s (%s)\n", cfg->init_from.path,
           cfg->init_from.format);
  return 0;
}

gpt_hooks loom__forward_hooks(loom_trainer *tr) {
  gpt_hooks h = make_hooks(tr);
  h.pre_backward = h.post_backward = NULL;
  return h;
}

/* 16-bit storage: the fp32 master of the published partition (optimizer state, partitioned
 * like m and v), from the initial values of a single-rank run; fp32 storage: the parameters
 * themselves. A plugin that set partition.master owns it. */
static int setup_master(loom_trainer *tr) {
  loom_runtime *rt = &tr->rt;
  loom_partition_v1 *p = &rt->partition;
  if (rt->plan.v.param_dtype == LOOM_F32) {
    p->master = p->params;
    return 0;
  }
  rt->stage = loom__dev_alloc(&rt->dev, LOOM_STAGE_FLOATS * sizeof(float), LOOM_MEM_OTHER);
  if (!rt->stage) return fail(tr, "out of memory (staging buffer)");
  if (p->master || p->count == 0) return 0;
  /* a plugin that owns the step (cpu_offload) keeps the optimizer state in host memory, and
   * the master with it: ZeRO-Offload's fp32 master lives on the CPU */
  rt->master = loom__dev_alloc(&rt->dev, p->count * sizeof(float),
                               rt->optimizer_owner >= 0 ? LOOM_MEM_HOST : LOOM_MEM_OPTIM);
  if (!rt->master) return fail(tr, "out of memory (fp32 master weights, %llu parameters)",
                               (unsigned long long)p->count);
  p->master = rt->master;
  /* init_from: the master takes the file's fp32 values (the 16-bit parameters are their
   * rounding); seeding it instead would replace the file's model after the first update */
  if (rt->init_file) {
    char e[512];
    if (loom__model_file_fill(rt->init_file, &rt->model, p->begin, p->count, rt->master, e,
                              sizeof e) != 0)
      return fail(tr, "%s: init_from.path (fp32 master weights): %s", tr->cfg.path, e);
    return 0;
  }
  gpt_init_weights_range(&rt->model, tr->cfg.train.seed, p->begin, p->count, rt->master);
  return 0;
}

/* A DeepSpeed file's mapping in one line, then its accepted keys' notes (what it does not
 * apply, and why); `loom check --deepspeed` prints every key. */
static void deepspeed_summary(const loom_config *cfg, int dp) {
  const loom_deepspeed *ds = &cfg->deepspeed;
  if (!ds->path[0]) return;
  printf("loom: deepspeed %s: %d keys mapped, %d accepted, %d DeepSpeed defaults (loom check "
         "CONFIG --deepspeed %s lists each); train_batch_size %d = micro %d x accumulation %d "
         "x dp %d\n", ds->path, ds->n_mapped, ds->n_accepted, ds->n_defaults, ds->path,
         cfg->train.global_batch_size, cfg->train.micro_batch_size,
         cfg->train.grad_accum_steps, dp);
  size_t i;
  json_t *line;
  json_array_foreach(ds->report, i, line) {
    const char *l = json_string_value(line);
    if (strstr(l, ": accepted: ")) loom__put_line(stdout, "loom: deepspeed: ", l);
  }
  fflush(stdout); /* before the ranks' own lines, as the start-up lines are */
}

int loom_trainer_init(loom_trainer *tr, const char *config_path, const char *const *overrides,
                      int n_overrides, const loom_restart_info *restart) {
  memset(tr, 0, sizeof *tr);
  if (restart) tr->restart = *restart;
  loom_config *cfg = &tr->cfg;
  loom_runtime *rt = &tr->rt;
  rt->cfg = cfg;
  char e[1500];
  if (loom_config_load(cfg, config_path, overrides, n_overrides, e, sizeof e) != 0)
    return fail(tr, "%s", e);
  if (!cfg->data.train[0])
    return fail(tr, "%s: data.train: expected a glob of token shards, got nothing", cfg->path);
  /* plugins are opened before anything talks to other ranks: a missing plugin is reported
   * on every rank at once and nobody waits */
  if (loom__plugins_open(rt, e, sizeof e) != 0) return fail(tr, "%s", e);
  if (loom__mesh_init(rt, rt->tp_size, rt->pp_size, e, sizeof e) != 0) return fail(tr, "%s", e);
  loom__host_init(&tr->core_host, rt, "core", cfg->path, "", NULL);
  if (check_same_config(tr) != 0) return -1;
  /* the batch first: under a DeepSpeed file it derives grad_accum_steps, which the storage plan
   * and the plugins' create read */
  if (loom_config_check_batch(cfg, rt->mesh.data_dp, e, sizeof e) != 0)
    return fail(tr, "%s", e);
  if (rt->mesh.world_rank == 0) deepspeed_summary(cfg, rt->mesh.data_dp);
  if (rt->mesh.dp > 1 && rt->grad_sync_owner < 0)
    return fail(tr, "%s: parallel: %d data-parallel ranks but no plugin owns gradient sync: "
                "the replicas would drift apart (add {\"plugin\": \"ddp\"})", cfg->path,
                rt->mesh.dp);

  if (loom__placement_gather(rt, e, sizeof e) != 0) return fail(tr, "%s", e);
  if (loom__device_open(rt, cfg->device.threads, e, sizeof e) != 0) return fail(tr, "%s", e);
  if (loom__plugins_create(rt, e, sizeof e) != 0) return fail(tr, "%s", e);

  tr->B = cfg->train.micro_batch_size;
  tr->T = cfg->train.seq_len;
  tr->Tl = tr->T / rt->mesh.cp; /* plugins.c checked T % (2 cp) */
  tr->accum = cfg->train.grad_accum_steps;
  tr->G = (uint64_t)cfg->train.global_batch_size;

  gpt_config mc = {.vocab_size = cfg->model.vocab_size,
                   .padded_vocab_size = cfg->model.padded_vocab_size,
                   .max_seq_len = cfg->model.context_length,
                   .n_layer = cfg->model.n_layer, .n_head = cfg->model.n_head,
                   .n_embd = cfg->model.n_embd, .tp_size = rt->mesh.tp,
                   .tp_rank = rt->mesh.tp_rank, .vocab_parallel = rt->tp_vocab,
                   .sequence_parallel = rt->tp_seq,
                   .cp_size = rt->mesh.cp, .cp_rank = rt->mesh.cp_rank,
                   .ckpt_policy = cfg->activation_checkpointing.policy,
                   .ckpt_every = cfg->activation_checkpointing.every,
                   .dtype = (int)rt->compute_dtype, .param_dtype = (int)rt->plan.v.param_dtype,
                   .grad_dtype = (int)rt->plan.v.grad_dtype};
  /* 16-bit activations end to end where the device has the kernels (gpt.c takes them for the
   * whole model without tp; elsewhere only the saved values are 16-bit) */
  const loom_device_v1 *dops = rt->dev.ops;
  mc.acts_typed = mc.dtype != LOOM_F32 && dops->acts16 &&
                  dops->acts16(rt->dev.ctx, (loom_dtype)mc.dtype) != NULL;
  if (rt->mesh.pp > 1) {
    /* the split loom estimate accounts by (core/runtime/pp_split.c) */
    if (loom__pp_split(rt, &mc, e, sizeof e) != 0) return fail(tr, "%s: %s", cfg->path, e);
    mc = loom__pp_stage_config(rt, &mc, rt->mesh.pp_rank);
  }
  /* flash attention (model.attention, device ABI 1.9) where the device has the kernels this
   * model calls; "flash" insists, "materialized" keeps the (B,NH,T,T) probabilities */
  int lse = gpt_device_has_attn_lse(&mc, &rt->dev);
  if (cfg->model.attention == LOOM_ATTN_FLASH && !lse)
    return fail(tr, "%s: model.attention: \"flash\", but device '%s' (ABI %d.%d) has no "
                "attention_forward_lse / attention_backward_lse (ABI 1.9)%s: use \"auto\" or "
                "\"materialized\"", cfg->path, dops->hdr.name, dops->hdr.abi_major,
                dops->hdr.abi_minor,
                dops->attention_forward_lse && dops->attention_backward_lse
                    ? " in its acts16 table (16-bit activations)" : "");
  mc.attn_lse = lse && cfg->model.attention != LOOM_ATTN_MATERIALIZED;
  /* context parallel keeps flash attention's (out, lse) state with its own block kernels
   * (plugins.c refused "materialized"; gpt_cp_check the device without them) */
  if (rt->mesh.cp > 1) mc.attn_lse = 1;
  int flags = (rt->shard_params ? GPT_NO_PARAM_STORAGE : 0) |
              (rt->shard_grads ? GPT_NO_GRAD_STORAGE : 0);
  if (gpt_init_ex(&rt->model, &mc, &rt->dev, flags, e, sizeof e) != LOOM_OK)
    return fail(tr, "%s: %s", cfg->path, e);
  if (open_init_from(tr, e, sizeof e) != 0) return fail(tr, "%s", e);
  /* same seed (or file) on every rank: replicas start identical without a broadcast (a plugin
   * that shards the parameters initialises its shard through init_params_range instead) */
  if (!rt->shard_params && rt->init_file) {
    if (loom__model_file_fill_as(rt->init_file, &rt->model, 0, rt->model.num_parameters,
                                 rt->model.params_memory, (loom_dtype)rt->model.cfg.param_dtype,
                                 e, sizeof e) != 0)
      return fail(tr, "%s: init_from.path: %s", cfg->path, e);
  } else if (!rt->shard_params && gpt_init_weights(&rt->model, cfg->train.seed) != LOOM_OK) {
    return fail(tr, "out of memory (initialising the 16-bit parameters)");
  }
  if (loom__model_view_build(rt) != 0) return fail(tr, "out of host memory (model view)");
  if (rt->mesh.pp > 1 && (rt->mesh.pp_rank == 0 || rt->mesh.pp_rank == rt->mesh.pp - 1)) {
    rt->emb_buf = loom__dev_alloc(&rt->dev, (size_t)gpt_vocab_rows(&mc) * mc.n_embd * sizeof(float),
                                  LOOM_MEM_COMM);
    if (!rt->emb_buf) return fail(tr, "out of memory (tied embedding gradient buffer)");
  }
  /* the default partition: the whole model, replicated */
  rt->partition = (loom_partition_v1){.struct_size = sizeof rt->partition, .begin = 0,
                                      .count = rt->model.num_parameters,
                                      .params = rt->model.params_memory,
                                      .grads = rt->model.grads_memory, .sharded = 0};
  int setup_rc = loom__plugins_setup(rt, e, sizeof e);
  if (setup_rc != 0) return fail(tr, "%s", e);
  if ((rt->shard_params || rt->shard_grads) && rt->partition_owner < 0)
    return fail(tr, "%s: parallel: a plugin owns parameter or gradient storage but none "
                "published the optimizer partition (set_partition in setup)", cfg->path);
  int master_rc = setup_master(tr);
  loom__model_file_close(rt->init_file); /* every parameter and the master are initialised */
  rt->init_file = NULL;
  if (master_rc != 0) return -1;
  if (rt->optimizer_owner < 0) {
    size_t bytes = rt->partition.count * sizeof(float);
    rt->optim_m = loom__dev_alloc(&rt->dev, bytes, LOOM_MEM_OPTIM);
    rt->optim_v = loom__dev_alloc(&rt->dev, bytes, LOOM_MEM_OPTIM);
    if (bytes && (!rt->optim_m || !rt->optim_v))
      return fail(tr, "out of memory (optimizer state)");
  }

  loom_run_data data; /* opened and checked as `loom check` does (preflight.c) */
  if (loom__data_open(cfg, rt->mesh.data_dp, &data, e, sizeof e) != 0) return fail(tr, "%s", e);
  tr->train = data.train; /* the trainer owns them from here (closed in loom_trainer_free) */
  tr->val = data.val;
  tr->has_val = data.has_val;
  tr->tok = data.tok;
  tr->inputs = malloc((size_t)tr->B * tr->T * sizeof(int32_t));
  tr->targets = malloc((size_t)tr->B * tr->T * sizeof(int32_t));
  if (rt->mesh.cp > 1) {
    tr->cp_inputs = malloc((size_t)tr->B * tr->Tl * sizeof(int32_t));
    tr->cp_targets = malloc((size_t)tr->B * tr->Tl * sizeof(int32_t));
    if (!tr->cp_inputs || !tr->cp_targets) return fail(tr, "out of host memory (batch)");
  }
  if (!tr->inputs || !tr->targets) return fail(tr, "out of host memory (batch)");

  loom__rng_seed(&tr->rank_rng, cfg->train.seed * 1000003ull + (uint64_t)rt->mesh.world_rank);
  loom__rng_seed(&tr->sample_rng, cfg->train.seed ^ 0x5eed5eed5eedull);
  if (rt->has_checkpoint && loom__ckpt_resume(tr) != 0) return -1;
  if (rt->mesh.world_rank == 0 && loom_metrics_open(tr) != 0) return -1;
  return 0;
}

/* LOOM_INJECT_INF (tests, util/test_hooks.h): the named world rank adds +inf to the first
 * element of its gradient partition at each listed step, after backward and the gradient sync:
 * only that rank sees it, so the overflow flag's agreement over every rank is what makes the
 * others skip too. */
static void injected_inf(loom_trainer *tr, int step) {
  loom_runtime *rt = &tr->rt;
  if (!loom__hook_inject_inf(rt->mesh.world_rank, step) || rt->partition.count == 0) return;
  float inf = INFINITY;
  if (rt->plan.v.grad_dtype == LOOM_F32) {
    rt->dev.ops->from_host(rt->dev.ctx, rt->partition.grads, &inf, sizeof inf);
  } else { /* +inf is exact in bf16 and fp16 */
    rt->dev.ops->from_host(rt->dev.ctx, rt->stage, &inf, sizeof inf);
    rt->dev.ops->convert(rt->dev.ctx, rt->partition.grads, rt->plan.v.grad_dtype, rt->stage, LOOM_F32,
                         1);
  }
  fprintf(stderr, "loom[%d] info: LOOM_INJECT_INF: +inf in this rank's gradient at step %d\n",
          rt->mesh.world_rank, step);
}

/* 1 on every rank if any rank's gradient is non-finite: the overflow flag agreed over the whole
 * mesh (dp, tp and pp), so every rank skips the same steps (control traffic, not counted). */
static int agree_overflow(loom_trainer *tr, int *nonfinite) {
  loom_runtime *rt = &tr->rt;
  if (rt->mesh.world_size <= 1) return 0;
  double flag = *nonfinite ? 1.0 : 0.0;
  if (loom__ctl_all_reduce(rt, rt->mesh.axis[LOOM_AXIS_WORLD], &flag, 1, LOOM_F64,
                    LOOM_OP_SUM) != LOOM_OK)
    return device_caused(tr) ? -1
                             : fail(tr, "all-reduce of the gradient overflow flag failed: %s",
                                    rt->comm_host.error);
  *nonfinite = flag > 0.0;
  return 0;
}

/* Fault injection for the fault tests (SQLite's idea: failures are designed in): LOOM_FAULT
 * (util/test_hooks.h) makes one world rank fail with an error at one step, or die abruptly
 * (no MPI shutdown), like a crashed process. */
static int injected_fault(loom_trainer *tr, int step) {
  loom_fault_kind kind = loom__hook_fault(tr->rt.mesh.world_rank, step);
  if (kind == LOOM_FAULT_NONE) return 0;
  if (kind == LOOM_FAULT_EXIT) loom__fault_crash();
  if (kind == LOOM_FAULT_KILL) loom__fault_kill();
  return fail(tr, "fault injected by LOOM_FAULT=%s at step %d", loom__test_hooks()->fault.text,
              step);
}

/* The message for a failed forward/backward that did not come from a plugin hook. */
static int pass_failed(loom_trainer *tr, const char *pass, int rc) {
  if (tr->err[0]) return -1; /* a hook already said what went wrong */
  if (device_caused(tr)) return -1;
  if (rc == LOOM_NOMEM)
    return fail(tr, "%s: out of memory allocating activations for micro_batch_size %d x "
                "seq_len %d (lower train.micro_batch_size and raise grad_accum_steps)", pass,
                tr->B, tr->T);
  return fail(tr, "%s failed: %s", pass, rc == LOOM_INVALID_USAGE ? "invalid input" : "error");
}

/* Sum of squares of n gradient elements at element k of `grads` (the grad dtype; 16-bit ones
 * widened through rt->stage, exact). */
static double grad_sum_squares(loom_runtime *rt, const float *grads, uint64_t k, uint64_t n) {
  const loom_device_v1 *dev = rt->dev.ops;
  if (rt->plan.v.grad_dtype == LOOM_F32) return dev->sum_squares(rt->dev.ctx, grads + k, (size_t)n);
  const size_t es = loom_dtype_size(rt->plan.v.grad_dtype);
  double sq = 0.0;
  for (uint64_t i = 0; i < n; i += LOOM_STAGE_FLOATS) {
    size_t c = (size_t)(n - i < LOOM_STAGE_FLOATS ? n - i : LOOM_STAGE_FLOATS);
    dev->convert(rt->dev.ctx, rt->stage, LOOM_F32, (const char *)grads + (k + i) * es,
                 rt->plan.v.grad_dtype, c);
    sq += dev->sum_squares(rt->dev.ctx, rt->stage, c);
  }
  return sq;
}

/* This rank's sum of squares of the gradient over the partition. Under tensor parallel the
 * split tensors' squares are summed over the TP axis, and a tensor replicated over it (its
 * gradient is the same on every tp rank) is weighted 1/tp so the sum counts it once (control
 * traffic, not counted). */
static int grad_sq_partition(loom_trainer *tr, double *out) {
  loom_runtime *rt = &tr->rt;
  const loom_partition_v1 *part = &rt->partition;
  if (rt->mesh.tp <= 1 && rt->mesh.pp <= 1) {
    *out = grad_sum_squares(rt, part->grads, 0, part->count);
    return 0;
  }
  const loom_model_v1 *mv = &rt->model_view;
  uint64_t begin = part->begin, end = part->begin + part->count;
  double sq = 0.0;
  for (int i = 0; i < mv->n_tensors; i++) {
    const loom_tensor_v1 *t = LOOM_TENSOR_AT(mv, i);
    uint64_t lo = t->offset > begin ? t->offset : begin;
    uint64_t hi = t->offset + t->numel < end ? t->offset + t->numel : end;
    if (lo >= hi) continue;
    if (rt->tensor_tied[i]) continue; /* the last stage's wte copy: counted on the first */
    double s = grad_sum_squares(rt, part->grads, lo - begin, hi - lo);
    sq += t->split_dim < 0 ? s / rt->mesh.tp : s;
  }
  *out = sq;
  if (rt->mesh.tp <= 1) return 0;
  if (loom__ctl_all_reduce(rt, rt->mesh.axis[LOOM_AXIS_TP], &sq, 1, LOOM_F64,
                           LOOM_OP_SUM) != LOOM_OK)
    return fail(tr, "all-reduce of the gradient norm over tensor-parallel ranks failed: %s",
                rt->comm_host.error);
  *out = sq;
  return 0;
}

/* Sum `vals` over the pipeline stages (control traffic, not counted). */
static int pp_sum(loom_trainer *tr, double *vals, int n) {
  loom_runtime *rt = &tr->rt;
  if (rt->mesh.pp <= 1) return 0;
  if (loom__ctl_all_reduce(rt, rt->mesh.axis[LOOM_AXIS_PP], vals, (size_t)n, LOOM_F64,
                    LOOM_OP_SUM) != LOOM_OK)
    return device_caused(tr) ? -1
                             : fail(tr, "all-reduce of step statistics over pipeline stages "
                                    "failed: %s", rt->comm_host.error);
  return 0;
}

/* ---- the pipeline step: the entry points the schedule owner calls ----
 * With model chunks (interleaved, rt->pp_chunks v > 1) every entry takes the chunk; each
 * chunk has its own activation slots (a slot's pool is laid out for one chunk: gpt_chunks.c),
 * slot k * n_micro + j being chunk k's j-th. */
typedef struct pp_step {
  loom_trainer *tr;
  gpt_hooks hooks;
  float dloss;
  double loss_sum;
  int n_micro, v;
  int *slot_of, *busy; /* (micro * v + chunk) -> activation slot (-1: none); slot in use */
  int n_bwd;           /* backward calls so far (the begin_micro numbering under chunks) */
  int failed;
} pp_step;

static int pp_acquire(pp_step *ps, int micro, int chunk) {
  if (micro < 0 || micro >= ps->n_micro || chunk < 0 || chunk >= ps->v) {
    fail(ps->tr, "pipeline schedule: micro-batch %d chunk %d outside [0, %d) x [0, %d)", micro,
         chunk, ps->n_micro, ps->v);
    return -1;
  }
  int id = micro * ps->v + chunk;
  if (ps->slot_of[id] >= 0) return ps->slot_of[id];
  int s = chunk * ps->n_micro;
  while (ps->busy[s]) s++; /* at most n_micro slots of the chunk in use */
  ps->busy[s] = 1;
  ps->slot_of[id] = s;
  return s;
}

static int pp_forward_chunk(void *ud, int micro, int chunk) {
  pp_step *ps = ud;
  loom_trainer *tr = ps->tr;
  loom_runtime *rt = &tr->rt;
  int slot = pp_acquire(ps, micro, chunk);
  if (slot < 0) return ps->failed = 1, LOOM_INVALID_USAGE;
  fill_batch(tr, &tr->train, micro);
  float loss;
  int rc = gpt_chunk_forward(&rt->model, chunk, slot, tr->inputs, tr->targets, tr->B, tr->T,
                             &ps->hooks, &loss);
  if (rc != LOOM_OK) return pass_failed(tr, "forward", rc), ps->failed = 1, rc;
  if (rt->mesh.pp_rank == rt->mesh.pp - 1 && chunk == ps->v - 1) ps->loss_sum += loss;
  return LOOM_OK;
}

/* Under chunks the other plugins see the rank's backward calls numbered in call order as
 * micro-steps of n_micro * v: only the step's last (micro n_micro - 1 on chunk 0: the
 * schedule's contract, parallel_v1.h) synchronises, when every chunk's gradients are final. */
static int pp_backward_hooks(pp_step *ps, int micro, int chunk, int slot) {
  loom_trainer *tr = ps->tr;
  int j = ps->v > 1 ? ps->n_bwd++ : micro, n = ps->n_micro * ps->v;
  if (ps->v > 1 && j == n - 1 && (micro != ps->n_micro - 1 || chunk != 0))
    return fail(tr, "pipeline schedule: the step's last backward is micro-batch %d chunk %d; "
                "the data-parallel sync needs micro-batch %d chunk 0 last", micro, chunk,
                ps->n_micro - 1);
  CALL_HOOKS(tr, begin_micro, "begin_micro", j, n);
  int rc = gpt_chunk_backward(&tr->rt.model, chunk, slot, ps->dloss, &ps->hooks);
  if (rc != LOOM_OK) return pass_failed(tr, "backward", rc);
  CALL_HOOKS(tr, end_backward, "end_backward", j, n);
  return 0;
}

static int pp_backward_chunk(void *ud, int micro, int chunk) {
  pp_step *ps = ud;
  int slot = pp_acquire(ps, micro, chunk);
  if (slot < 0 || pp_backward_hooks(ps, micro, chunk, slot) != 0)
    return ps->failed = 1, LOOM_REMOTE;
  return LOOM_OK;
}

static float *pp_boundary_chunk(void *ud, int micro, int chunk, int which) {
  pp_step *ps = ud;
  loom_trainer *tr = ps->tr;
  int slot = pp_acquire(ps, micro, chunk);
  if (slot < 0) return ps->failed = 1, NULL;
  int rc = gpt_chunk_slot_ensure(&tr->rt.model, chunk, slot, tr->B, tr->T);
  if (rc != LOOM_OK) return pass_failed(tr, "activations", rc), ps->failed = 1, NULL;
  return gpt_chunk_buffer(&tr->rt.model, chunk, slot, which);
}

static int pp_release_chunk(void *ud, int micro, int chunk) {
  pp_step *ps = ud;
  if (micro < 0 || micro >= ps->n_micro || chunk < 0 || chunk >= ps->v) return LOOM_OK;
  int id = micro * ps->v + chunk;
  if (ps->slot_of[id] < 0) return LOOM_OK;
  ps->busy[ps->slot_of[id]] = 0;
  ps->slot_of[id] = -1;
  return LOOM_OK;
}

/* The ABI 1.2 entries: chunk 0 (the stage, without chunks). */
static int pp_forward(void *ud, int micro) { return pp_forward_chunk(ud, micro, 0); }
static int pp_backward(void *ud, int micro) { return pp_backward_chunk(ud, micro, 0); }
static float *pp_boundary(void *ud, int micro, int which) {
  return pp_boundary_chunk(ud, micro, 0, which);
}
static int pp_release(void *ud, int micro) { return pp_release_chunk(ud, micro, 0); }

/* The tied wte: the first stage's wte and the last stage's copy each hold part of the
 * gradient; after the data-parallel sync, sum them over the embedding group (first and last
 * stage, every dp rank, same tp rank) so both copies take the same AdamW step. Each rank
 * contributes the part of wte it owns (its partition when sharded, else dp rank 0 all of it)
 * and zeros elsewhere, so the sum is g_first + g_last, the same bits on every member. */
/* n elements from src (dtype sdt) into dst (dtype ddt) on the device: a copy when both are
 * fp32, else the device's exact widening / rounding conversion. */
static void move_grads(const loom_runtime *rt, void *dst, loom_dtype ddt, const void *src,
                       loom_dtype sdt, size_t n) {
  if (ddt == LOOM_F32 && sdt == LOOM_F32)
    rt->dev.ops->copy(rt->dev.ctx, dst, src, n * sizeof(float));
  else
    rt->dev.ops->convert(rt->dev.ctx, dst, ddt, src, sdt, n);
}

static int pp_tied_sum(loom_trainer *tr) {
  loom_runtime *rt = &tr->rt;
  if (!rt->emb_buf) return 0;
  gpt_model *m = &rt->model;
  gpt_param *w = m->tied_copy >= 0 ? &m->params[m->tied_copy] : &m->params[0];
  const loom_device_v1 *d = rt->dev.ops;
  d->memset_zero(rt->dev.ctx, rt->emb_buf, w->numel * sizeof(float));
  const loom_partition_v1 *part = &rt->partition;
  uint64_t lo = w->offset, hi = w->offset + w->numel;
  if (part->sharded) {
    if (part->begin > lo) lo = part->begin;
    if (part->begin + part->count < hi) hi = part->begin + part->count;
  } else if (rt->mesh.dp_rank != 0) {
    hi = lo;
  }
  /* 16-bit gradients: summed in fp32 (each addend widened exactly), rounded once back. The
   * owned range is read from, and its sum written back to, the published partition's gradient,
   * which a sharding plugin may keep outside the flat buffer (zero1 receives its reduce-scatter
   * there); the flat buffer gets the whole sum as before. */
  const size_t es = loom_dtype_size(rt->plan.v.grad_dtype);
  const size_t n_own = (size_t)(hi - lo);
  float *sum_own = rt->emb_buf + (lo - w->offset);
  char *flat_own = (char *)w->grad + (lo - w->offset) * es;
  char *own = lo >= hi ? NULL
              : part->sharded ? (char *)part->grads + (lo - part->begin) * es : flat_own;
  if (own) move_grads(rt, sum_own, LOOM_F32, own, rt->plan.v.grad_dtype, n_own);
  if (loom__host_api()->all_reduce(&tr->core_host, rt->emb_comm, rt->emb_buf, w->numel,
                                   LOOM_F32, LOOM_OP_SUM, NULL) != LOOM_OK)
    return fail(tr, "summing the tied embedding's gradient between the first and last "
                "pipeline stage failed: %s", tr->core_host.error);
  if (own && own != flat_own) move_grads(rt, own, rt->plan.v.grad_dtype, sum_own, LOOM_F32, n_own);
  move_grads(rt, w->grad, rt->plan.v.grad_dtype, rt->emb_buf, LOOM_F32, w->numel);
  return 0;
}

/* The micro-batches of one step under the schedule owner; the loss sum on the last stage. */
static int pp_run_step(loom_trainer *tr, float dloss, double *loss_sum) {
  loom_runtime *rt = &tr->rt;
  const int v = gpt_n_chunks(&rt->model.cfg), n = tr->accum * v;
  pp_step ps = {.tr = tr, .hooks = make_hooks(tr), .dloss = dloss, .n_micro = tr->accum,
                .v = v};
  ps.slot_of = malloc((size_t)n * sizeof(int));
  ps.busy = calloc((size_t)n + 1, sizeof(int));
  if (!ps.slot_of || !ps.busy) {
    free(ps.slot_of), free(ps.busy);
    return fail(tr, "out of host memory (pipeline step)");
  }
  for (int i = 0; i < n; i++) ps.slot_of[i] = -1;
  loom_schedule_v1 s = {.struct_size = sizeof s, .n_micro = tr->accum,
                        .stage = rt->mesh.pp_rank, .n_stages = rt->mesh.pp,
                        .boundary_numel = (uint64_t)tr->B * tr->T * tr->cfg.model.n_embd,
                        .ud = &ps, .forward = pp_forward, .backward = pp_backward,
                        .boundary = pp_boundary, .release = pp_release, .n_chunks = v,
                        .forward_chunk = pp_forward_chunk, .backward_chunk = pp_backward_chunk,
                        .boundary_chunk = pp_boundary_chunk, .release_chunk = pp_release_chunk};
  int i = rt->schedule_owner;
  int rc = rt->parallel[i].u.parallel.run_step(rt->parallel_ctx[i], &s);
  free(ps.slot_of), free(ps.busy);
  if (rc == LOOM_OK && ps.n_bwd != (v > 1 ? n : 0))
    return fail(tr, "pipeline schedule: %d backward calls for %d micro-batches x %d chunks",
                ps.n_bwd, tr->accum, v);
  if (rc != LOOM_OK) {
    if (ps.failed && tr->err[0]) return -1;
    if (device_caused(tr)) return -1;
    return loom__hook_error(rt, i, "run_step", rc, tr->err, sizeof tr->err);
  }
  *loss_sum = ps.loss_sum;
  return pp_tied_sum(tr);
}

/* A forward-only pass through the pipeline (eval, sampling) on activation slot 0: each stage
 * receives its input from the previous one and sends its output on; the last has the loss and
 * the logits. Blocking, in stage order (counted like the schedule's traffic). */
static int pp_forward_only(loom_trainer *tr, const int32_t *inputs, const int32_t *targets,
                           int B, int T, float *loss) {
  loom_runtime *rt = &tr->rt;
  gpt_hooks hooks = loom__forward_hooks(tr);
  const loom_host_api_v1 *api = loom__host_api();
  loom_comm *c = rt->mesh.axis[LOOM_AXIS_PP];
  const int s = rt->mesh.pp_rank, P = rt->mesh.pp, v = gpt_n_chunks(&rt->model.cfg);
  size_t n = (size_t)B * T * tr->cfg.model.n_embd;
  /* chunk k's slot k * accum (the step's first of the chunk); virtual stage k * P + s gets
   * its input from the previous one: stage s - 1's chunk k, or on stage 0 the last stage's
   * chunk k - 1 (the ring wrap) */
  for (int k = 0; k < v; k++) {
    int slot = k * tr->accum, from = s > 0 ? s - 1 : P - 1, to = s < P - 1 ? s + 1 : 0;
    int rc = gpt_chunk_slot_ensure(&rt->model, k, slot, B, T);
    if (rc != LOOM_OK) return pass_failed(tr, "forward", rc);
    if ((s > 0 || k > 0) &&
        api->recv(&tr->core_host, c, gpt_chunk_buffer(&rt->model, k, slot, GPT_BUF_INPUT), n,
                  LOOM_F32, from, 0x7ff0, NULL) != LOOM_OK)
      return fail(tr, "pipeline forward: receiving from stage %d failed: %s", from,
                  tr->core_host.error);
    rc = gpt_chunk_forward(&rt->model, k, slot, inputs, targets, B, T, &hooks, loss);
    if (rc != LOOM_OK) return pass_failed(tr, "forward", rc);
    if ((s < P - 1 || k < v - 1) &&
        api->send(&tr->core_host, c, gpt_chunk_buffer(&rt->model, k, slot, GPT_BUF_OUTPUT), n,
                  LOOM_F32, to, 0x7ff0, NULL) != LOOM_OK)
      return fail(tr, "pipeline forward: sending to stage %d failed: %s", to,
                  tr->core_host.error);
  }
  if (s < P - 1 && loss) *loss = 0.0f; /* the loss lives on the last stage */
  return 0;
}

int loom__model_forward(loom_trainer *tr, const int32_t *inputs, const int32_t *targets, int B,
                        int T, float *loss) {
  gpt_set_train_dloss(&tr->rt.model, 0.0f); /* no backward follows: keep the logits */
  if (tr->rt.mesh.pp > 1) {
    if (pp_forward_only(tr, inputs, targets, B, T, loss) != 0) return -1;
    return device_failed(tr) ? -1 : 0; /* the stage's loss or boundary was read back */
  }
  gpt_hooks hooks = loom__forward_hooks(tr);
  cp_local(tr, &inputs, &targets, B, &T);
  int rc = gpt_forward(&tr->rt.model, inputs, targets, B, T, &hooks, loss);
  if (rc != LOOM_OK) return pass_failed(tr, "forward", rc);
  return device_failed(tr) ? -1 : 0; /* the loss was read back: a fault has shown */
}

/* One optimizer step over accum micro-steps. */
static int train_step(loom_trainer *tr, int step, double lr, loom_step_metrics *sm) {
  loom_runtime *rt = &tr->rt;
  loom_config *cfg = &tr->cfg;
  gpt_hooks hooks = make_hooks(tr);
  const loom_precision_v1 *prec = &rt->precision.u.precision;
  float loss_scale = prec->loss_scale(rt->precision_ctx);

  if (injected_fault(tr, step) != 0) return -1;
  CALL_HOOKS(tr, begin_step, "begin_step", step);
  gpt_zero_grad(&rt->model);
  double loss_sum = 0.0;
  /* mean over the global batch: each position's loss weighs 1/(B*T*accum) here; the data-
   * parallel average (sum / dp) is the gradient-sync plugin's job, unless it only sums
   * (LOOM_PAR_GRAD_PREDIVIDED, ABI 1.5): then 1/dp is folded in here, which saves the plugin's
   * averaging pass over the whole gradient (bitwise the same for a power-of-two dp: scaling by
   * 2^-k commutes with every rounding of backward and of the sum) */
  float rows = (float)tr->B * (float)tr->Tl * (float)tr->accum; /* this rank's positions */
  if (rt->plan.v.grads_predivided) rows *= (float)rt->mesh.dp;
  float dloss = loss_scale / rows;
  /* known before forward: the fused classifier writes dlogits during the forward */
  gpt_set_train_dloss(&rt->model, dloss);
  if (rt->schedule_owner >= 0 && pp_run_step(tr, dloss, &loss_sum) != 0) return -1;
  for (int micro = 0; rt->schedule_owner < 0 && micro < tr->accum; micro++) {
    fill_batch(tr, &tr->train, micro);
    CALL_HOOKS(tr, begin_micro, "begin_micro", micro, tr->accum);
    float loss;
    const int32_t *in = tr->inputs, *tg = tr->targets;
    int T = tr->T;
    cp_local(tr, &in, &tg, tr->B, &T);
    int rc = gpt_forward(&rt->model, in, tg, tr->B, T, &hooks, &loss);
    if (rc != LOOM_OK) return pass_failed(tr, "forward", rc);
    loss_sum += loss;
    rc = gpt_backward(&rt->model, dloss, &hooks);
    if (rc != LOOM_OK) return pass_failed(tr, "backward", rc);
    CALL_HOOKS(tr, end_backward, "end_backward", micro, tr->accum);
  }
  if (replica_sum(tr) != 0) return -1;
  gpt_set_train_dloss(&rt->model, 0.0f); /* evaluation and sampling forwards keep logits */
  if (device_failed(tr)) return -1; /* the losses were read back (to_host) */
  double stats[1] = {loss_sum};
  if (pp_sum(tr, stats, 1) != 0) return -1; /* the loss is the last stage's */
  if (dp_sum(tr, stats, 1) != 0) return -1;
  sm->loss = stats[0] / (double)(tr->accum * rt->mesh.dp);

  injected_inf(tr, step); /* tests: found by the norm below like a real overflow */
  /* the norm over the partition; disjoint partitions are summed over data-parallel ranks */
  const loom_partition_v1 *part = &rt->partition;
  double sq;
  if (grad_sq_partition(tr, &sq) != 0) return -1;
  /* sum_squares waited for the device: a fault is the device's, never an overflow or divergence
   * (before any rank agrees on the flag, so an fp16 run does not skip past it) */
  if (device_failed(tr)) return -1;
  /* hybrid: the replicas hold the same partition, so only the shard group's are disjoint */
  if (part->sharded && axis_sum(tr, LOOM_AXIS_DP_SHARD, rt->mesh.dp_shard, &sq, 1) != 0)
    return -1;
  if (pp_sum(tr, &sq, 1) != 0) return -1; /* each stage holds its own units */
  CALL_HOOKS(tr, grad_norm_sq, "grad_norm_sq", &sq);
  int nonfinite = !isfinite(sq);
  if (agree_overflow(tr, &nonfinite) != 0) return -1;
  int finite = !nonfinite;
  int skip = 0;
  if (prec->after_backward(rt->precision_ctx, step, finite, &skip) != LOOM_OK)
    return fail(tr, "plugin %s: %s", rt->precision_host.label, rt->precision_host.error);
  double norm = finite ? sqrt(sq) / loss_scale : INFINITY;
  sm->grad_norm = norm;
  sm->loss_scale = loss_scale;
  double clip = cfg->optimizer.grad_clip;
  double coef = (clip > 0 && norm > clip) ? clip / (norm + 1e-6) : 1.0;
  /* Adam's t counts the steps taken (a skipped step never reached the optimizer) */
  loom_step_args_v1 args = {
    .struct_size = sizeof args, .step = step - tr->skipped_steps, .lr = (float)lr,
    .beta1 = (float)cfg->optimizer.beta1, .beta2 = (float)cfg->optimizer.beta2,
    .eps = (float)cfg->optimizer.eps, .weight_decay = (float)cfg->optimizer.weight_decay,
    .grad_scale = (float)(coef / loss_scale)};
  sm->skipped = skip;
  tr->skipped_steps += skip;
  if (!skip) {
    if (rt->optimizer_owner >= 0) {
      int i = rt->optimizer_owner;
      int rc = rt->parallel[i].u.parallel.optimizer_step(rt->parallel_ctx[i], &args);
      if (rc != LOOM_OK)
        return device_caused(tr) ? -1
                                 : loom__hook_error(rt, i, "optimizer_step", rc, tr->err,
                                                    sizeof tr->err);
    } else {
      /* fp32: the master is the parameters themselves (adamw_range, bitwise) */
      int rc = loom__host_api()->adamw_range_mixed(
          &tr->core_host, &args, part->begin, part->count, part->master, part->grads,
          rt->plan.v.grad_dtype, rt->optim_m, rt->optim_v,
          part->master == part->params ? NULL : part->params, rt->plan.v.param_dtype);
      if (rc != LOOM_OK)
        return device_caused(tr) ? -1 : fail(tr, "optimizer step: %s", tr->core_host.error);
    }
  }
  CALL_HOOKS(tr, end_step, "end_step", step);
  loom_loader_advance(&tr->train, tr->G);
  return 0;
}

int loom_trainer_eval(loom_trainer *tr, double *val_loss) {
  loom_runtime *rt = &tr->rt;
  if (!tr->has_val) return fail(tr, "no validation data (data.val)");
  uint64_t saved = tr->val.cursor;
  tr->val.cursor = 0; /* the same validation batches every time */
  double sum = 0.0;
  int n = tr->cfg.train.eval_batches;
  for (int i = 0; i < n; i++) {
    fill_batch(tr, &tr->val, i);
    float loss;
    if (loom__model_forward(tr, tr->inputs, tr->targets, tr->B, tr->T, &loss) != 0) return -1;
    sum += loss;
    /* each batch is progress: a long evaluation is not a stall (train.timeout_s bounds the
     * time without progress, not the evaluation's length) */
    loom_watchdog_beat(&tr->watchdog, tr->step);
  }
  tr->val.cursor = saved;
  double stats[1] = {sum};
  if (pp_sum(tr, stats, 1) != 0) return -1;
  if (dp_sum(tr, stats, 1) != 0) return -1;
  *val_loss = stats[0] / (double)(n * rt->mesh.dp);
  return 0;
}

/* LOOM_DATA_TRACE=FILE (tests, util/test_hooks.h): rank 0 appends, for every sequence of
 * the global batch of `step`, "step STEP epoch E shard INDEX token OFFSET len T": the tokens
 * [OFFSET, OFFSET + T) of that shard, in epoch E, are the step's inputs. How the resume tests
 * prove no token is read twice or skipped. */
static int trace_data(loom_trainer *tr, int step) {
  const char *path = loom__test_hooks()->data_trace;
  if (!path || tr->rt.mesh.world_rank != 0) return 0;
  FILE *f = fopen(path, "a");
  if (!f) return fail(tr, "LOOM_DATA_TRACE=%s: cannot open it for appending", path);
  for (uint64_t k = 0; k < tr->G; k++) {
    loom_data_pos pos;
    loom_loader_seq_position(&tr->train, tr->train.cursor + k, &pos);
    fprintf(f, "step %d epoch %llu shard %d token %llu len %d\n", step,
            (unsigned long long)pos.epoch, pos.shard, (unsigned long long)pos.token, tr->T);
  }
  return fclose(f) == 0 ? 0 : fail(tr, "LOOM_DATA_TRACE=%s: write error", path);
}

int loom_trainer_run(loom_trainer *tr) {
  loom_config *cfg = &tr->cfg;
  loom_runtime *rt = &tr->rt;
  int steps = cfg->train.steps;
  int start = tr->start_step = tr->step;
  tr->t0 = now_s();
  loom_metrics_start(tr);
  if (loom_metrics_restart(tr) != 0) return -1;
  int horizon = loom_lr_horizon(steps, cfg->lr_schedule.decay_steps);
  if (start >= steps && rt->mesh.world_rank == 0)
    printf("loom: the checkpoint is at step %d of train.steps = %d: nothing left to train. "
           "To train on, raise train.steps and keep the schedule's horizon, so the lr "
           "continues at min_lr instead of jumping back up the cosine: --set train.steps=%d "
           "--set lr_schedule.decay_steps=%d (or remove %s to start over)\n", start, steps,
           2 * start, horizon, rt->has_checkpoint ? "the checkpoint dir" : "it");
  if (loom_watchdog_start(&tr->watchdog, cfg->train.timeout_s, rt->mesh.world_rank) != 0)
    return fail(tr, "cannot start the watchdog thread");
  signal(SIGINT, on_stop_signal);
  signal(SIGTERM, on_stop_signal);
  signal(SIGUSR1, on_stop_signal);
  for (int step = start + 1; step <= steps; step++) {
    double t = now_s();
    /* the schedule advances on the steps taken only (skipped steps: trainer.h) */
    double lr = loom_lr_config(cfg, step - tr->skipped_steps);
    if (trace_data(tr, step) != 0) return -1;
    loom_step_metrics sm = {.step = step, .lr = lr};
    if (train_step(tr, step, lr, &sm) != 0) return -1;
    tr->step = step;
    sm.seconds = now_s() - t;
    if (gather_peak_memory(tr) != 0) return -1;
    if (loom_metrics_step(tr, &sm) != 0) return -1;
    int last = step == steps;
    loom_watchdog_beat(&tr->watchdog, step);
    if (tr->has_val && ((cfg->train.eval_interval > 0 && step % cfg->train.eval_interval == 0) ||
                        last)) {
      double vl;
      if (loom_trainer_eval(tr, &vl) != 0) return -1;
      loom_watchdog_beat(&tr->watchdog, step);
      if (loom_metrics_eval(tr, step, vl) != 0) return -1;
    }
    int stop = 0;
    if (stop_requested(tr, &stop) != 0) return -1;
    if (rt->has_checkpoint &&
        (stop || rt->checkpoint.u.checkpoint.should_save(rt->checkpoint_ctx, step, last))) {
      /* the optimizer's kernels may still be queued: a fault there must not be saved */
      rt->dev.ops->synchronize(rt->dev.ctx);
      if (device_failed(tr) || loom__ckpt_save(tr) != 0) return -1;
      /* a fault during the save's own reads: the files hold its 0xff bytes; fail loudly (the
       * checkpoint plugin has published them by now: resuming needs an older checkpoint) */
      if (device_caused(tr)) return -1;
    }
    loom_watchdog_beat(&tr->watchdog, step);
    if (stop) { /* every rank agreed: a clean exit, not an abort */
      if (device_caused(tr)) return -1; /* the last step's optimizer: no fault left unseen */
      loom_metrics_end_line(tr);
      if (rt->mesh.world_rank == 0)
        printf("loom: stopped by a signal after step %d%s\n", step,
               rt->has_checkpoint ? "; checkpoint saved, run again to resume" : "");
      tr->stopped = 1;
      return 0;
    }
  }
  rt->dev.ops->synchronize(rt->dev.ctx); /* the last step's optimizer: no fault left unseen */
  if (device_failed(tr)) return -1;
  if (gather_peak_memory(tr) != 0) return -1; /* collective: every rank gets here */
  loom_metrics_end(tr);
  char chunks[160] = ""; /* interleaved: the stage's units are its chunks within the hull */
  for (int k = 0, n = 0; k < rt->model.cfg.pp_chunks && n < (int)sizeof chunks; k++)
    n += snprintf(chunks + n, sizeof chunks - (size_t)n, "%s%d..%d", k ? " " : "; chunks ",
                  rt->model.cfg.pp_chunk_first[k], rt->model.cfg.pp_chunk_end[k] - 1);
  if (rt->mesh.pp > 1) /* every stage's own activation peak (the metrics file is rank 0's) */
    fprintf(stderr, "loom[%d] info: pipeline stage %d of %d (units %d..%d): peak activation "
            "memory %zu bytes; params %zu, grads %zu, optim %zu bytes (loom estimate's "
            "stages%s)\n", rt->mesh.world_rank, rt->mesh.pp_rank, rt->mesh.pp,
            rt->model.first_unit, rt->model.last_unit,
            rt->dev.bytes_peak[LOOM_MEM_ACTIVATIONS], rt->dev.bytes_peak[LOOM_MEM_PARAMS],
            rt->dev.bytes_peak[LOOM_MEM_GRADS], rt->dev.bytes_peak[LOOM_MEM_OPTIM], chunks);
  return 0;
}

void loom_trainer_fail(loom_trainer *tr, int code) {
  loom__fatal(&tr->rt, code, tr->err[0] ? tr->err : "unknown error");
}

void loom_trainer_free(loom_trainer *tr) {
  loom_runtime *rt = &tr->rt;
  loom_watchdog_stop(&tr->watchdog);
  loom_metrics_close(tr);
  free(tr->inputs);
  free(tr->targets);
  free(tr->cp_inputs);
  free(tr->cp_targets);
  loom_loader_close(&tr->train);
  if (tr->has_val) loom_loader_close(&tr->val);
  loom_tokenizer_free(&tr->tok);
  loom__plugins_destroy(rt);
  if (rt->model_view.numel) loom__model_view_free(rt);
  loom__model_file_close(rt->init_file);
  rt->init_file = NULL;
  json_decref(tr->init_from);
  tr->init_from = NULL;
  if (rt->model.params) gpt_free(&rt->model);
  if (rt->optim_m) loom__dev_free(&rt->dev, rt->optim_m);
  if (rt->optim_v) loom__dev_free(&rt->dev, rt->optim_v);
  if (rt->emb_buf) loom__dev_free(&rt->dev, rt->emb_buf);
  if (rt->sp16) loom__dev_free(&rt->dev, rt->sp16);
  rt->sp16 = NULL;
  if (rt->master) loom__dev_free(&rt->dev, rt->master);
  if (rt->stage) loom__dev_free(&rt->dev, rt->stage);
  loom__device_close(rt);
  loom__mesh_free(rt);
  loom_config_free(&tr->cfg);
}
