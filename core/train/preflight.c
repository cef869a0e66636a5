/* `loom check`'s validation (see preflight.h): the trainer's start-up checks in the trainer's
 * order, with a stand-in mesh instead of the comm plugin's world. The building blocks are the
 * ones `loom train` and `loom estimate` call (loom_config_load, loom__plugins_open/_create,
 * loom_config_check_batch, loom__pp_split, gpt_init_ex, loom_loader_open, loom_tokenizer_load),
 * so a rule changed there is changed here. */
#include "../runtime/device_open.h"
#include "preflight.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../config/config.h"
#include "../data/shards.h"
#include "../data/tokenizer.h"
#include "../device/device.h"
#include "formats/init_from.h"
#include "../model/gpt.h"
#include "../runtime/plugins.h"
#include "../runtime/pp_split.h"
#include "../runtime/runtime.h"
#include "../util/input_file.h"
#include "train/ckpt/ckpt_compat.h"

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return -1;
}

/* The mesh loom__mesh_init would build on `world` ranks, as world rank 0 sees it (no
 * communicators: create() only records them). */
static int stand_in_mesh(loom_runtime *rt, int world, char *err, size_t errlen) {
  int tp = rt->tp_size, pp = rt->pp_size;
  if (world % (tp * pp) != 0)
    return fail(err, errlen,
                "%s: parallel: the mesh is dp x tp x pp = world size, but tensor-parallel size "
                "%d x pipeline size %d = %d does not divide the world size %d (run a multiple "
                "of %d ranks; check with --world N)", rt->cfg->path, tp, pp, tp * pp, world,
                tp * pp);
  loom_mesh *m = &rt->mesh;
  memset(m, 0, sizeof *m);
  m->world_size = world;
  m->tp = tp;
  m->pp = pp;
  m->dp = world / (tp * pp);
  /* hybrid sharding: a numeric shard size must divide dp ("node" is resolved from the
   * launcher when the job starts, checked there) */
  int K = rt->shard_size > 0 ? rt->shard_size : m->dp;
  if (m->dp % K != 0)
    return fail(err, errlen, "%s: %s.shard_size: %d does not divide the data-parallel size %d "
                "(world %d / tp %d / pp %d): the data-parallel ranks form shard groups of "
                "shard_size ranks (check with --world N)", rt->cfg->path,
                rt->cfg->parallel[rt->shard_owner].json_path, K, m->dp, world, tp, pp);
  m->dp_shard = K;
  m->dp_replica = m->dp / K;
  /* context parallel: dp counts the dp x cp gradient group (mesh.c) */
  m->cp = rt->cp_size > 1 ? rt->cp_size : 1;
  if (m->dp % m->cp != 0)
    return fail(err, errlen, "%s: parallel: context-parallel size %d does not divide the %d "
                "ranks left after tensor-parallel size %d x pipeline size %d (world %d; check "
                "with --world N)", rt->cfg->path, m->cp, m->dp, tp, pp, world);
  m->data_dp = m->dp / m->cp;
  return 0;
}

int loom__data_open(const loom_config *cfg, int dp, loom_run_data *d, char *err,
                    size_t errlen) {
  char e[1500];
  int T = cfg->train.seq_len, B = cfg->train.micro_batch_size, V = cfg->model.vocab_size;
  memset(d, 0, sizeof *d);
  if (!cfg->data.train[0])
    return fail(err, errlen, "%s: data.train: expected a glob of token shards, got nothing",
                cfg->path);
  if (loom_loader_open(&d->train, cfg->data.train, T, V, e, sizeof e) != 0)
    return fail(err, errlen, "%s: data.train: %s", cfg->path, e);
  if (cfg->data.val[0]) {
    if (loom_loader_open(&d->val, cfg->data.val, T, V, e, sizeof e) != 0) {
      loom__data_close(d);
      return fail(err, errlen, "%s: data.val: %s", cfg->path, e);
    }
    d->has_val = 1;
    uint64_t need = (uint64_t)cfg->train.eval_batches * (uint64_t)B * (uint64_t)dp;
    if (need > d->val.n_seqs) {
      fail(err, errlen, "%s: train.eval_batches: %d batches x %d sequences x dp %d = %llu "
           "validation sequences, but data.val holds only %zu sequences of %d tokens",
           cfg->path, cfg->train.eval_batches, B, dp, (unsigned long long)need,
           d->val.n_seqs, T);
      loom__data_close(d);
      return -1;
    }
  }
  uint64_t G = (uint64_t)cfg->train.global_batch_size;
  if (G > d->train.n_seqs) {
    fail(err, errlen, "%s: train.global_batch_size: %llu sequences per step, but data.train "
         "holds only %zu sequences of %d tokens", cfg->path, (unsigned long long)G,
         d->train.n_seqs, T);
    loom__data_close(d);
    return -1;
  }
  if (loom_tokenizer_load(&d->tok, cfg->data.vocab, e, sizeof e) != 0) {
    loom__data_close(d);
    return fail(err, errlen, "%s: data.vocab: %s", cfg->path, e);
  }
  if (d->tok.vocab_size > V) {
    fail(err, errlen, "%s: model.vocab_size: expected >= the tokenizer's vocabulary (%d), "
         "got %d", cfg->path, d->tok.vocab_size, V);
    loom__data_close(d);
    return -1;
  }
  return 0;
}

void loom__data_close(loom_run_data *d) {
  loom_loader_close(&d->train); /* a zeroed loader closes as a no-op */
  loom_loader_close(&d->val);
  loom_tokenizer_free(&d->tok); /* GPT-2's tables; a zeroed or byte tokenizer is a no-op */
  memset(d, 0, sizeof *d);
}

static int check_data(const loom_config *cfg, int dp, char *err, size_t errlen) {
  loom_run_data d;
  if (loom__data_open(cfg, dp, &d, err, errlen) != 0) return -1;
  loom__data_close(&d);
  return 0;
}

/* The model's tables for every stage (no storage): sizes, the tensor-parallel split and the
 * pipeline split are checked as gpt_init_ex checks them for the trainer. */
static int check_model(loom_runtime *rt, char *err, size_t errlen) {
  const loom_config *cfg = rt->cfg;
  char e[1024];
  gpt_config full = {.vocab_size = cfg->model.vocab_size,
                     .padded_vocab_size = cfg->model.padded_vocab_size,
                     .max_seq_len = cfg->model.context_length, .n_layer = cfg->model.n_layer,
                     .n_head = cfg->model.n_head, .n_embd = cfg->model.n_embd,
                     .tp_size = rt->mesh.tp, .tp_rank = 0, .vocab_parallel = rt->tp_vocab,
                   .sequence_parallel = rt->tp_seq,
                     .ckpt_policy = cfg->activation_checkpointing.policy,
                     .ckpt_every = cfg->activation_checkpointing.every};
  /* model.attention "flash" on a device without the ABI 1.9 slots: train's refusal (its acts16
   * table's slots, which need the precision's dtype, train checks itself) */
  const loom_device_v1 *d = rt->dev.ops;
  if (cfg->model.attention == LOOM_ATTN_FLASH && d &&
      (!d->attention_forward_lse || !d->attention_backward_lse))
    return fail(err, errlen, "%s: model.attention: \"flash\", but device '%s' (ABI %d.%d) has "
                "no attention_forward_lse / attention_backward_lse (ABI 1.9): use \"auto\" or "
                "\"materialized\"", cfg->path, d->hdr.name, d->hdr.abi_major, d->hdr.abi_minor);
  if (rt->mesh.pp > 1 && loom__pp_split(rt, &full, e, sizeof e) != 0)
    return fail(err, errlen, "%s: %s", cfg->path, e);
  for (int s = 0; s < rt->mesh.pp; s++) {
    gpt_config sc = rt->mesh.pp > 1 ? loom__pp_stage_config(rt, &full, s) : full;
    gpt_model m;
    int rc = gpt_init_ex(&m, &sc, NULL, GPT_NO_PARAM_STORAGE | GPT_NO_GRAD_STORAGE, e, sizeof e);
    gpt_free(&m);
    if (rc != LOOM_OK) return fail(err, errlen, "%s: %s", cfg->path, e);
    /* the trainer would find out at its first forward (out of memory) */
    if (gpt_activation_bytes(&sc, cfg->train.micro_batch_size, cfg->train.seq_len) == SIZE_MAX)
      return fail(err, errlen, "%s: train.micro_batch_size: the activations of one "
                  "micro-batch of %d x %d tokens (n_layer %d, n_embd %d, n_head %d) exceed "
                  "2^54 bytes: no machine holds them", cfg->path, cfg->train.micro_batch_size,
                  cfg->train.seq_len, cfg->model.n_layer, cfg->model.n_embd,
                  cfg->model.n_head);
  }
  return 0;
}

/* init_from as train treats it (trainer.c's open_init_from): ignored when the run resumes
 * from a checkpoint (resume wins: train does not open the file), else opened with every
 * tensor's shape checked. `start` gets train's start-up line for the case. */
static int check_init_from(const loom_config *cfg, int resume_step, char *start,
                           size_t startlen, char *err, size_t errlen) {
  const char *path = cfg->init_from.path;
  if (resume_step > 0 && path[0]) {
    snprintf(start, startlen, "init_from %s ignored: resuming from the checkpoint of step %d "
             "(resume wins)", path, resume_step);
    return 0;
  }
  if (resume_step > 0) {
    snprintf(start, startlen, "resuming from the checkpoint of step %d", resume_step);
    return 0;
  }
  if (!path[0]) return 0;
  loom_model_file *init = NULL;
  if (loom__init_from_open(cfg, &init, err, errlen) != 0) return -1;
  loom__model_file_close(init);
  snprintf(start, startlen, "parameters initialised from %s (%s)", path, cfg->init_from.format);
  return 0;
}

int loom_preflight(const char *config_path, const char *const *overrides, int n_overrides,
                   int world, loom_preflight_info *info, char *start, size_t startlen,
                   char *err, size_t errlen) {
  if (startlen) start[0] = '\0';
  if (world < 1) return fail(err, errlen, "--world: expected an integer >= 1, got %d", world);
  loom_config *cfg = calloc(1, sizeof *cfg);
  loom_runtime *rt = calloc(1, sizeof *rt);
  if (!cfg || !rt) {
    free(cfg);
    free(rt);
    return fail(err, errlen, "out of memory");
  }
  rt->cfg = cfg;
  char e[1500];
  int rc = -1;
  loom_tokenizer tok; /* freed at out: */
  loom_tokenizer_init_bytes(&tok);
  if (loom_config_load(cfg, config_path, overrides, n_overrides, err, errlen) != 0) goto out;
  if (loom__plugins_open(rt, err, errlen) != 0) goto out;
  if (stand_in_mesh(rt, world, err, errlen) != 0) goto out;
  if (rt->mesh.dp > 1 && rt->grad_sync_owner < 0) {
    fail(err, errlen, "%s: parallel: %d data-parallel ranks but no plugin owns gradient sync: "
         "the replicas would drift apart (add {\"plugin\": \"ddp\"})", cfg->path, rt->mesh.dp);
    goto out;
  }
  if (loom__device_open(rt, 1, err, errlen) != 0) goto out;
  /* the checks without side effects first (train checks the plugins' options first; the
   * first error differs only when both are wrong), then create(), where the plugins validate
   * their own options (unknown keys, types, ranges) and the checkpoint plugin makes its
   * directory: a config whose data is missing leaves nothing behind */
  if (loom_config_check_batch(cfg, rt->mesh.data_dp, err, errlen) != 0) goto out;
  if (check_model(rt, err, errlen) != 0) goto out;
  if (check_data(cfg, rt->mesh.data_dp, err, errlen) != 0) goto out;
  if (cfg->logging.metrics[0] && loom__check_output_path(cfg->logging.metrics, e, sizeof e)) {
    fail(err, errlen, "%s: logging.metrics: %s", cfg->path, e);
    goto out;
  }
  if (loom__plugins_create(rt, err, errlen) != 0) goto out;
  if (loom__comm_check_options(rt, err, errlen) != 0) goto out; /* train: mesh init */
  /* a hierarchical all-reduce over nodes of K consecutive ranks (comm ABI 1.11): K must
   * divide the world, as mpi.so's create() checks on every rank */
  int node_size = 0;
  if (loom__comm_all_reduce_nodes(rt, &node_size, err, errlen) != 0) goto out;
  if (node_size > 0 && world % node_size != 0) {
    fail(err, errlen, "%s: %s: plugin '%s': node_size: %d does not divide the world size %d "
         "(every node holds node_size consecutive ranks; check with --world N)", cfg->path,
         cfg->comm.json_path, cfg->comm.name, node_size, world);
    goto out;
  }
  /* the checkpoint train would resume from: what train refuses in it before step 1 (another
   * model, vocabulary or split; a manifest that fails verification) is refused here too */
  if (loom_tokenizer_load(&tok, cfg->data.vocab, e, sizeof e) != 0) { /* checked above */
    fail(err, errlen, "%s: data.vocab: %s", cfg->path, e);
    goto out;
  }
  int resume_step = 0;
  if (loom__ckpt_preflight(rt, &tok, &resume_step, err, errlen) != 0) goto out;
  /* init_from after the checkpoint, as train decides it: only a run that does not resume
   * opens the file (a bad file then fails after create(), as it does in train) */
  if (check_init_from(cfg, resume_step, start, startlen, err, errlen) != 0) goto out;
  if (info)
    *info = (loom_preflight_info){.world = world, .dp = rt->mesh.dp, .tp = rt->mesh.tp,
                                  .pp = rt->mesh.pp,
                                  .micro_batch_size = cfg->train.micro_batch_size,
                                  .grad_accum_steps = cfg->train.grad_accum_steps,
                                  .global_batch_size = cfg->train.global_batch_size,
                                  .resume_step = resume_step,
                                  .has_checkpoint = rt->has_checkpoint};
  rc = 0;
out:
  loom_tokenizer_free(&tok);
  loom__plugins_destroy(rt);
  loom__device_close(rt);
  loom_config_free(cfg);
  free(rt);
  free(cfg);
  return rc;
}
