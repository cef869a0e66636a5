/* What the core puts into a checkpoint and takes back out: the state items (parameters and
 * optimizer state: one item per global tensor and kind, each rank's a slice of it, so any
 * mesh can load them — the global view, docs/checkpoints.md "Resharding at load"), the metadata
 * document (ckpt_meta.h: everything that gives
 * the numbers their meaning), and each rank's RNG. The checkpoint plugin decides how they are
 * stored and verifies every byte; resume refuses what would reinterpret the saved state and
 * reports (ckpt_report.c) what changes how the run continues. */
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/device_open.h"
#include "runtime/plugins.h"
#include "runtime/pp_split.h"
#include "ckpt_compat.h"
#include "ckpt_meta.h"
#include "ckpt_resume.h"
#include "train/lr_schedule.h"
#include "train/trainer.h"

#define MAX_FLAT 16 /* flat state items: params, optim.m, optim.v, a plugin's own */

typedef struct rank_blob { loom_rng rank_rng, sample_rng; } rank_blob;

/* The items of one save or load, and their slice descriptors (NULL: per-rank flat items). */
typedef struct ckpt_items {
  loom_ckpt_item_v1 *items;
  loom_ckpt_slice_v1 *slices;
  char (*names)[96];
  int n;
} ckpt_items;

static void ckpt_items_free(ckpt_items *x) {
  free(x->items);
  free(x->slices);
  free(x->names);
  memset(x, 0, sizeof *x);
}

static loom_ckpt_item_v1 flat_item(const char *name, uint64_t n, void *data, int writer) {
  loom_ckpt_item_v1 it = {.struct_size = sizeof it, .name = name, .dtype = LOOM_F32,
                          .global_numel = n, .offset = 0, .count = n, .data = data,
                          .writer = writer};
  return it;
}

/* A chunk of the partition: written by its rank when partitions are disjoint (under hybrid
 * sharding by the first replica only: the replica groups hold the same chunks), else by data-
 * parallel rank 0 only (the others hold the same values). */
static loom_ckpt_item_v1 partition_item(loom_runtime *rt, const char *name, void *data) {
  const loom_partition_v1 *p = &rt->partition;
  loom_ckpt_item_v1 it = flat_item(name, rt->model.num_parameters, data,
                                   p->sharded ? rt->mesh.replica_rank == 0
                                              : rt->mesh.dp_rank == 0);
  it.offset = p->begin;
  it.count = p->count;
  return it;
}

/* The state as flat items over this rank's flat parameter layout: parameters (or this rank's
 * ZeRO-3 partition of them) and Adam's m and v (the host's, or the optimizer owner's). */
static int flat_items(loom_trainer *tr, loom_ckpt_item_v1 *items, int *n) {
  loom_runtime *rt = &tr->rt;
  uint64_t N = rt->model.num_parameters;
  int k = 0;
  if (rt->plan.v.param_dtype != LOOM_F32) /* 16-bit storage: the fp32 master is the parameter value,
                                      so the checkpoint does not depend on the precision */
    items[k++] = rt->partition.sharded || rt->shard_params
                     ? partition_item(rt, "params", rt->partition.master)
                     : flat_item("params", N, rt->partition.master, rt->mesh.dp_rank == 0);
  else if (rt->shard_params) /* each rank holds its partition of the parameters only */
    items[k++] = partition_item(rt, "params", rt->partition.params);
  else /* replicated across data-parallel ranks: one writer */
    items[k++] = flat_item("params", N, rt->model.params_memory, rt->mesh.dp_rank == 0);
  if (rt->optimizer_owner < 0) {
    items[k++] = partition_item(rt, "optim.m", rt->optim_m);
    items[k++] = partition_item(rt, "optim.v", rt->optim_v);
  } else {
    int i = rt->optimizer_owner;
    const loom_parallel_v1 *p = &rt->parallel[i].u.parallel;
    int m = 0;
    int rc = p->state_items ? p->state_items(rt->parallel_ctx[i], items + k, MAX_FLAT - k, &m)
                            : LOOM_OK;
    if (rc != LOOM_OK) return loom__hook_error(rt, i, "state_items", rc, tr->err, sizeof tr->err);
    k += m;
  }
  *n = k;
  return 0;
}

/* "NAME@pp1of2@tp0of2": the per-rank name of a flat item under pipeline and tensor parallel
 * (the layout before the global view, and items no tensor table describes). */
static void per_rank_name(const loom_runtime *rt, const char *name, char out[96]) {
  char pp[32] = "", tp[32] = "";
  if (rt->mesh.pp > 1) snprintf(pp, sizeof pp, "@pp%dof%d", rt->mesh.pp_rank, rt->mesh.pp);
  if (rt->mesh.tp > 1) snprintf(tp, sizeof tp, "@tp%dof%d", rt->mesh.tp_rank, rt->mesh.tp);
  snprintf(out, 96, "%s%s%s", name, pp, tp);
}

/* The whole of a flat item of n elements, as a slice descriptor. */
static loom_ckpt_slice_v1 whole_slice(uint64_t n) {
  return (loom_ckpt_slice_v1){.struct_size = sizeof(loom_ckpt_slice_v1), .ndim = 1,
                              .shape = {(int64_t)n}, .split_dim = -1, .split_parts = 1,
                              .split_index = 0, .split_size = 1};
}

/* Append one item (its name copied) and its slice. */
static void push(ckpt_items *x, loom_ckpt_item_v1 it, const char *name, loom_ckpt_slice_v1 sl) {
  snprintf(x->names[x->n], sizeof x->names[x->n], "%s", name);
  it.name = x->names[x->n];
  x->items[x->n] = it;
  if (x->slices) x->slices[x->n] = sl;
  x->n++;
}

/* The global view: each flat item over the parameter layout becomes one item per tensor it
 * touches, "KIND/TENSOR" ("optim.m/h.0.attn.qkv.weight"), holding [offset, +count) of this tp
 * rank's slice of the global tensor. Replicated tensors are written by tp rank 0 only. The
 * last pipeline stage's tied copy of wte loads from "KIND/wte"; a save writes its parameters
 * as "params/wte@tied_copy", which nothing loads: tools check it equals wte (the pipeline's
 * tied-gradient sum kept the two copies identical). */
static void split_by_tensor(const loom_runtime *rt, const loom_ckpt_item_v1 *f, int saving,
                            ckpt_items *x) {
  const gpt_model *m = &rt->model;
  size_t esz = loom_dtype_size(f->dtype);
  uint64_t lo = f->offset, hi = f->offset + f->count;
  for (int i = 0; i < m->n_params; i++) {
    const gpt_param *t = &m->params[i];
    if (!t->present) continue;
    uint64_t a = lo > t->offset ? lo : t->offset;
    uint64_t b = hi < t->offset + t->numel ? hi : t->offset + t->numel;
    if (a >= b) continue;
    int split = t->split_dim >= 0 && rt->mesh.tp > 1;
    loom_ckpt_slice_v1 sl = whole_slice(0);
    sl.ndim = t->ndim;
    sl.shape[0] = t->shape[0];
    sl.shape[1] = t->ndim == 2 ? t->shape[1] : 0;
    if (split) {
      sl.split_dim = t->split_dim;
      sl.split_parts = t->split_parts;
      sl.split_index = rt->mesh.tp_rank;
      sl.split_size = rt->mesh.tp;
    }
    loom_ckpt_item_v1 it = *f;
    it.global_numel = (uint64_t)t->shape[0] * (uint64_t)(t->ndim == 2 ? t->shape[1] : 1);
    it.offset = a - t->offset;
    it.count = b - a;
    it.data = (char *)f->data + (size_t)(a - lo) * esz;
    int tied_record = saving && t->tied_copy && strcmp(f->name, "params") == 0;
    if (saving && t->tied_copy && !tied_record) continue;
    it.writer = f->writer && (!t->tied_copy || tied_record) && (split || rt->mesh.tp_rank == 0);
    char name[96];
    snprintf(name, sizeof name, "%s/%s%s", f->name, t->name, tied_record ? "@tied_copy" : "");
    push(x, it, name, sl);
  }
}

/* Whether this run's checkpoint plugin loads the global view (ABI 1.4). */
static int plugin_global_view(const loom_runtime *rt) {
  return (rt->checkpoint.u.checkpoint.hdr.caps & LOOM_CKPT_CAP_GLOBAL_VIEW) != 0;
}

/* The items of a save (`saving`; global: the layout this run writes) or of a load of a
 * checkpoint whose items are `global` or per rank. */
static int build_items(loom_trainer *tr, int global, int saving, ckpt_items *x) {
  loom_runtime *rt = &tr->rt;
  loom_ckpt_item_v1 flat[MAX_FLAT];
  int nf = 0;
  memset(x, 0, sizeof *x);
  if (flat_items(tr, flat, &nf) != 0) return -1;
  int cap = nf * (global ? rt->model.n_params : 1);
  x->items = calloc((size_t)cap, sizeof *x->items);
  x->names = calloc((size_t)cap, sizeof *x->names);
  x->slices = global ? calloc((size_t)cap, sizeof *x->slices) : NULL;
  if (!x->items || !x->names || (global && !x->slices)) {
    ckpt_items_free(x);
    snprintf(tr->err, sizeof tr->err, "checkpoint: out of host memory for %d items", cap);
    return -1;
  }
  for (int i = 0; i < nf; i++) {
    if (global && flat[i].global_numel == rt->model.num_parameters) {
      split_by_tensor(rt, &flat[i], saving, x);
      continue;
    }
    /* per rank: the layout before the global view, or an item of a plugin's own */
    char name[96];
    per_rank_name(rt, flat[i].name, name);
    push(x, flat[i], name, whole_slice(flat[i].global_numel));
  }
  return 0;
}

/* The tensor table of the flat "params" item (per tp rank: the local tensors), so tools can
 * reassemble global tensors: name, global shape, split_dim, split_parts, local offset and
 * count. Identical on every rank. */
static json_t *model_tensors_json(const gpt_model *m) {
  json_t *arr = json_array();
  for (int i = 0; i < m->n_params; i++) {
    const gpt_param *t = &m->params[i];
    if (!t->present) continue;
    json_t *shape = json_array();
    for (int d = 0; d < t->ndim; d++) json_array_append_new(shape, json_integer(t->shape[d]));
    json_t *o = json_pack("{s:s, s:o, s:i, s:i, s:I, s:I}", "name", t->name, "shape", shape,
                          "split_dim", t->split_dim, "split_parts", t->split_parts, "offset",
                          (json_int_t)t->offset, "numel", (json_int_t)t->numel);
    if (t->tied_copy) json_object_set_new(o, "tied_copy", json_true());
    json_array_append_new(arr, o);
  }
  return arr;
}

static json_t *tensors_json(loom_runtime *rt) { return model_tensors_json(&rt->model); }

/* Under pipeline parallel: every stage's tensor table (each stage's flat items hold its own
 * units), built from storage-less models of each stage, and the stages' unit ranges. */
static json_t *stage_tensors_json(loom_runtime *rt) {
  json_t *arr = json_array();
  for (int s = 0; s < rt->mesh.pp; s++) {
    gpt_config c = loom__pp_stage_config(rt, &rt->model.cfg, s);
    gpt_model tmp;
    char e[256];
    if (gpt_init_ex(&tmp, &c, &rt->dev, GPT_NO_PARAM_STORAGE | GPT_NO_GRAD_STORAGE, e,
                    sizeof e) != LOOM_OK) {
      json_array_append_new(arr, json_null());
      continue;
    }
    json_t *rec = json_pack("{s:i, s:i, s:o}", "first_unit", c.pp_first, "last_unit",
                            c.pp_end - 1, "tensors", model_tensors_json(&tmp));
    if (c.pp_chunks > 1) { /* interleaved: the stage's chunks, [first, last] each */
      json_t *ch = json_array();
      for (int k = 0; k < c.pp_chunks; k++)
        json_array_append_new(ch, json_pack("[i, i]", c.pp_chunk_first[k],
                                            c.pp_chunk_end[k] - 1));
      json_object_set_new(rec, "chunk_units", ch);
    }
    json_array_append_new(arr, rec);
    gpt_free(&tmp);
  }
  return arr;
}

static const char *ckpt_error(loom_trainer *tr) {
  return tr->rt.checkpoint_host.error[0] ? tr->rt.checkpoint_host.error : "no message";
}

/* The lr step `step` runs at under the config's schedule. */
static double config_lr(const loom_config *cfg, int step) { return loom_lr_config(cfg, step); }

/* The metadata document of ckpt_meta.h for the state after step tr->step. */
static json_t *meta_json(loom_trainer *tr) {
  loom_runtime *rt = &tr->rt;
  const loom_config *cfg = &tr->cfg;
  loom_data_pos pos;
  loom_loader_position(&tr->train, &pos);
  const loom_shard *sh = &tr->train.shards[pos.shard];
  char seed[24];
  snprintf(seed, sizeof seed, "%llu", (unsigned long long)cfg->train.seed);
  json_t *meta = json_pack(
      "{s:s, s:i, s:i, s:i, s:i, s:i, s:O, s:o, s:s, s:s}", "format", LOOM_CKPT_META_FORMAT,
      "step", tr->step, "world_size", rt->mesh.world_size, "dp", rt->mesh.dp, "tp", rt->mesh.tp,
      "pp", rt->mesh.pp, "config", cfg->root, "tensors",
      rt->mesh.pp > 1 ? json_null() : tensors_json(rt), "seed", seed, "precision_plugin",
      cfg->precision.name);
  json_object_set_new(meta, "model",
                      json_pack("{s:i, s:i, s:i, s:i, s:i, s:i}", "vocab_size",
                                cfg->model.vocab_size, "padded_vocab_size",
                                cfg->model.padded_vocab_size, "context_length",
                                cfg->model.context_length, "n_layer", cfg->model.n_layer,
                                "n_head", cfg->model.n_head, "n_embd", cfg->model.n_embd));
  json_object_set_new(meta, "tokenizer", json_pack("{s:i, s:i, s:s}", "type", (int)tr->tok.type,
                                                   "vocab_size", tr->tok.vocab_size,
                                                   "fingerprint", tr->vocab_fingerprint));
  json_object_set_new(
      meta, "data",
      json_pack("{s:s, s:s, s:i, s:i, s:i, s:I, s:I, s:i, s:s, s:I, s:I}", "units", "tokens",
                "pattern", cfg->data.train, "seq_len", tr->T, "micro_batch_size", tr->B,
                "grad_accum_steps", tr->accum, "global_batch", (json_int_t)tr->G, "epoch",
                (json_int_t)pos.epoch, "shard_index", pos.shard, "shard", sh->path,
                "shard_tokens", (json_int_t)sh->n_tokens, "token", (json_int_t)pos.token));
  /* what makes the position checkable on resume: the shard's content and the segment the
   * position must follow from (ckpt_meta.h) */
  json_t *data = json_object_get(meta, "data");
  json_object_set_new(data, "fingerprint",
                      json_string(loom_shard_fingerprint(&tr->train.shards[pos.shard])));
  json_object_set_new(data, "segment",
                      json_pack("{s:i, s:I, s:I}", "step", tr->data_seg_step, "cursor",
                                (json_int_t)tr->data_seg_cursor, "stream_sequences",
                                (json_int_t)tr->train.n_seqs));
  json_object_set_new(
      meta, "schedule",
      json_pack("{s:i, s:i, s:i, s:s, s:f, s:f, s:f}", "steps", cfg->train.steps, "horizon",
                loom_lr_horizon(cfg->train.steps, cfg->lr_schedule.decay_steps), "warmup_steps",
                cfg->lr_schedule.warmup_steps, "decay", cfg->lr_schedule.decay, "lr",
                cfg->optimizer.lr, "min_lr", cfg->lr_schedule.min_lr, "last_lr",
                config_lr(cfg, tr->step - tr->skipped_steps)));
  /* steps skipped on gradient overflow: the schedule resumes at step - skipped_steps */
  json_object_set_new(meta, "skipped_steps", json_integer(tr->skipped_steps));
  json_object_set_new(meta, "optimizer",
                      json_pack("{s:f, s:f, s:f, s:f, s:f}", "beta1", cfg->optimizer.beta1,
                                "beta2", cfg->optimizer.beta2, "eps", cfg->optimizer.eps,
                                "weight_decay", cfg->optimizer.weight_decay, "grad_clip",
                                cfg->optimizer.grad_clip));
  const loom_precision_v1 *prec = &rt->precision.u.precision;
  const char *ps = prec->state_json ? prec->state_json(rt->precision_ctx) : NULL;
  json_t *pj = ps ? json_loads(ps, 0, NULL) : NULL;
  json_object_set_new(meta, "precision", json_is_object(pj) ? pj : json_null());
  if (pj && !json_is_object(pj)) json_decref(pj);
  if (rt->mesh.pp > 1) json_object_set_new(meta, "stages", stage_tensors_json(rt));
  /* where the parameters came from before step 1 (config init_from; formats/init_from.h) */
  if (tr->init_from) json_object_set(meta, "init_from", tr->init_from);
  return meta;
}

int loom__ckpt_save(loom_trainer *tr) {
  loom_runtime *rt = &tr->rt;
  ckpt_items x;
  int global = plugin_global_view(rt);
  if (build_items(tr, global, 1, &x) != 0) return -1;
  json_t *meta = meta_json(tr);
  if (meta && global) json_object_set_new(meta, "items", json_string("global"));
  char *text = meta ? json_dumps(meta, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
  json_decref(meta);
  /* what is written must read back: a save never publishes metadata a resume would refuse
   * (a json_pack that failed on a file name that is not UTF-8, say) */
  loom_ckpt_meta check;
  char why[512];
  if (!text || loom__ckpt_meta_parse(text, &check, why, sizeof why) != 0) {
    snprintf(tr->err, sizeof tr->err, "saving step %d: the checkpoint metadata would not read "
             "back: %s (are data.train's file names UTF-8?)", tr->step,
             text ? why : "out of host memory");
    free(text);
    ckpt_items_free(&x);
    return -1;
  }
  loom__ckpt_meta_free(&check);
  rank_blob blob = {tr->rank_rng, tr->sample_rng};
  loom_ckpt_state_v1 st = {.struct_size = sizeof st, .step = tr->step, .n_items = x.n,
                           .items = x.items, .meta_json = text, .rank_blob = &blob,
                           .rank_blob_bytes = sizeof blob, .slices = x.slices};
  int rc = rt->checkpoint.u.checkpoint.save(rt->checkpoint_ctx, &st);
  free(text);
  ckpt_items_free(&x);
  if (rc != LOOM_OK) {
    snprintf(tr->err, sizeof tr->err, "plugin %s: saving step %d failed: %s",
             rt->checkpoint_host.label, tr->step, ckpt_error(tr));
    return -1;
  }
  return 0;
}

/* Load the items and this rank's blob of `step` (the metadata was read already). */
static int load_state(loom_trainer *tr, const loom_ckpt_meta *m) {
  loom_runtime *rt = &tr->rt;
  ckpt_items x;
  if (build_items(tr, m->global_items, 0, &x) != 0) return -1;
  rank_blob blob;
  memset(&blob, 0, sizeof blob);
  loom_ckpt_state_v1 st = {.struct_size = sizeof st, .step = m->step, .n_items = x.n,
                           .items = x.items, .rank_blob = &blob, .rank_blob_bytes = sizeof blob,
                           .slices = x.slices};
  const char *meta_text = NULL;
  int rc = rt->checkpoint.u.checkpoint.load(rt->checkpoint_ctx, m->step, &st, &meta_text);
  ckpt_items_free(&x);
  if (rc != LOOM_OK) {
    snprintf(tr->err, sizeof tr->err, "plugin %s: loading step %d failed: %s",
             rt->checkpoint_host.label, m->step, ckpt_error(tr));
    return -1;
  }
  if (m->world_size != rt->mesh.world_size) return 0; /* fresh per-rank streams: reported */
  /* collective, so every rank refuses (and rank 0 reports nothing) when any rank's is bad */
  int32_t bad_rank = loom__rng_valid(&blob.rank_rng) && loom__rng_valid(&blob.sample_rng)
                         ? INT32_MAX : rt->mesh.world_rank;
  if (rt->mesh.world_size > 1 &&
      loom__ctl_all_reduce(rt, rt->mesh.axis[LOOM_AXIS_WORLD], &bad_rank, 1, LOOM_I32,
                    LOOM_OP_MIN) != LOOM_OK) {
    snprintf(tr->err, sizeof tr->err, "checkpoint step %d: agreeing on the restored random "
             "state failed: %s", m->step, rt->comm_host.error);
    return -1;
  }
  if (bad_rank != INT32_MAX) {
    snprintf(tr->err, sizeof tr->err,
             "checkpoint step %d: rank %d's saved random state is all zero, which no "
             "xoshiro256** generator can reach: the checkpoint is corrupt", m->step,
             (int)bad_rank);
    return -1;
  }
  tr->rank_rng = blob.rank_rng;
  tr->sample_rng = blob.sample_rng;
  return 0;
}

/* 16-bit storage: the parameters the model reads, rounded from the restored master. A plugin
 * with a sharded partition (ZeRO) gathers the other ranks' ranges itself. */
static int params_from_master(loom_trainer *tr) {
  loom_runtime *rt = &tr->rt;
  const loom_partition_v1 *p = &rt->partition;
  if (rt->plan.v.param_dtype == LOOM_F32 || p->count == 0) return 0;
  if (rt->dev.ops->convert(rt->dev.ctx, p->params, rt->plan.v.param_dtype, p->master, LOOM_F32,
                           (size_t)p->count) != LOOM_OK) {
    snprintf(tr->err, sizeof tr->err, "resume: the device cannot round the fp32 master to "
             "16 bits");
    return -1;
  }
  return 0;
}

/* Restore the precision plugin's state (loss scaler). */
static int load_precision(loom_trainer *tr, const loom_ckpt_meta *m) {
  loom_runtime *rt = &tr->rt;
  const loom_precision_v1 *prec = &rt->precision.u.precision;
  if (!m->precision || !prec->load_state_json) return 0;
  char *ps = json_dumps(m->precision, JSON_COMPACT);
  int rc = ps ? prec->load_state_json(rt->precision_ctx, ps) : LOOM_NOMEM;
  free(ps);
  if (rc != LOOM_OK) {
    snprintf(tr->err, sizeof tr->err, "plugin %s: restoring its state failed: %s",
             rt->precision_host.label, rt->precision_host.error);
    return -1;
  }
  return 0;
}

int loom__ckpt_resume(loom_trainer *tr) {
  loom_runtime *rt = &tr->rt;
  const loom_checkpoint_v1 *ck = &rt->checkpoint.u.checkpoint;
  if (loom__vocab_fingerprint(&tr->cfg, tr->vocab_fingerprint, tr->err, sizeof tr->err) != 0)
    return -1;
  int step = 0;
  if (ck->resume_step(rt->checkpoint_ctx, &step) != LOOM_OK) {
    snprintf(tr->err, sizeof tr->err, "plugin %s: finding a checkpoint failed: %s",
             rt->checkpoint_host.label, ckpt_error(tr));
    return -1;
  }
  if (step <= 0) return 0;
  /* the metadata first (a load of no items): everything that decides whether the saved state
   * means the same thing under this config is checked before any of it is loaded */
  loom_ckpt_state_v1 st0 = {.struct_size = sizeof st0, .step = step};
  const char *mt = NULL;
  if (ck->load(rt->checkpoint_ctx, step, &st0, &mt) != LOOM_OK) {
    snprintf(tr->err, sizeof tr->err, "plugin %s: loading step %d failed: %s",
             rt->checkpoint_host.label, step, ckpt_error(tr));
    return -1;
  }
  loom_ckpt_meta m;
  char why[512];
  if (loom__ckpt_meta_parse(mt, &m, why, sizeof why) != 0) {
    snprintf(tr->err, sizeof tr->err, "checkpoint step %d: manifest.json \"meta\": %s (the "
             "checkpoint is corrupt, or another version of loom wrote it)", step, why);
    return -1;
  }
  int rc = m.step != step ? -1 : 0;
  if (rc) snprintf(tr->err, sizeof tr->err, "checkpoint step %d: its metadata says step %d: "
                   "the checkpoint is corrupt", step, m.step);
  if (!rc) rc = loom__ckpt_check_compat(&tr->rt, &tr->tok, tr->vocab_fingerprint, &m, tr->err,
                                        sizeof tr->err);
  if (!rc) rc = loom__ckpt_seek_data(tr, &m);
  if (!rc) rc = load_state(tr, &m);
  if (!rc) rc = params_from_master(tr);
  if (!rc) rc = load_precision(tr, &m);
  if (!rc) {
    tr->step = step;
    tr->skipped_steps = m.skipped_steps;
    json_t *src = json_object_get(m.root, "init_from"); /* carried into later checkpoints */
    if (json_is_object(src)) {
      json_decref(tr->init_from);
      tr->init_from = json_deep_copy(src);
    }
    if (rt->mesh.world_rank == 0) loom__ckpt_report(tr, &m);
  }
  loom__ckpt_meta_free(&m);
  return rc;
}
