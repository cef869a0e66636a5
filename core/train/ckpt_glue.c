/* What the core puts into a checkpoint and takes back out: the state items (parameters and
 * optimizer state as flat chunks), the metadata document, and each rank's RNG. The checkpoint
 * plugin decides how they are stored. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/plugins.h"
#include "trainer.h"

#define MAX_ITEMS 16
#define CKPT_FORMAT "loom-checkpoint-1"

typedef struct rank_blob { loom_rng rank_rng, sample_rng; } rank_blob;

static loom_ckpt_item_v1 flat_item(const char *name, uint64_t n, void *data, int writer) {
  loom_ckpt_item_v1 it = {.struct_size = sizeof it, .name = name, .dtype = LOOM_F32,
                          .global_numel = n, .offset = 0, .count = n, .data = data,
                          .writer = writer};
  return it;
}

/* A chunk of the partition: written by its rank when partitions are disjoint, else by data-
 * parallel rank 0 only (the others hold the same values). */
static loom_ckpt_item_v1 partition_item(loom_runtime *rt, const char *name, void *data) {
  const loom_partition_v1 *p = &rt->partition;
  loom_ckpt_item_v1 it = flat_item(name, rt->model.num_parameters, data,
                                   p->sharded || rt->mesh.dp_rank == 0);
  it.offset = p->begin;
  it.count = p->count;
  return it;
}

/* Under tensor parallel each tp rank's flat buffers hold different (local) tensors: its items
 * are saved under names carrying the tp coordinate, "params@tp1of2", so the tp ranks' chunks
 * never mix, and a resume with another tp size finds no chunk of its names. */
static char item_names[MAX_ITEMS][64];

/* Under pipeline parallel likewise each stage's: "params@pp1of2", "params@pp1of2@tp0of2". */
static void tp_rename(loom_runtime *rt, loom_ckpt_item_v1 *items, int n) {
  if (rt->mesh.tp <= 1 && rt->mesh.pp <= 1) return;
  for (int i = 0; i < n && i < MAX_ITEMS; i++) {
    char pp[32] = "", tp[32] = "";
    if (rt->mesh.pp > 1) snprintf(pp, sizeof pp, "@pp%dof%d", rt->mesh.pp_rank, rt->mesh.pp);
    if (rt->mesh.tp > 1) snprintf(tp, sizeof tp, "@tp%dof%d", rt->mesh.tp_rank, rt->mesh.tp);
    snprintf(item_names[i], sizeof item_names[i], "%s%s%s", items[i].name, pp, tp);
    items[i].name = item_names[i];
  }
}

static int build_items(loom_trainer *tr, loom_ckpt_item_v1 *items, int *n) {
  loom_runtime *rt = &tr->rt;
  uint64_t N = rt->model.num_parameters;
  int k = 0;
  if (rt->shard_params) /* each rank holds its partition of the parameters only */
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
    if (p->state_items && p->state_items(rt->parallel_ctx[i], items + k, MAX_ITEMS - k, &m))
      return loom__hook_error(rt, i, "state_items", tr->err, sizeof tr->err);
    k += m;
  }
  tp_rename(rt, items, k);
  *n = k;
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
    gpt_config c = rt->model.cfg;
    c.pp_first = rt->pp_first[s];
    c.pp_end = rt->pp_last[s] + 1;
    gpt_model tmp;
    char e[256];
    if (gpt_init_ex(&tmp, &c, &rt->dev, GPT_NO_PARAM_STORAGE | GPT_NO_GRAD_STORAGE, e,
                    sizeof e) != LOOM_OK) {
      json_array_append_new(arr, json_null());
      continue;
    }
    json_array_append_new(arr, json_pack("{s:i, s:i, s:o}", "first_unit", c.pp_first,
                                         "last_unit", c.pp_end - 1, "tensors",
                                         model_tensors_json(&tmp)));
    gpt_free(&tmp);
  }
  return arr;
}

static const char *ckpt_error(loom_trainer *tr) {
  return tr->rt.checkpoint_host.error[0] ? tr->rt.checkpoint_host.error : "no message";
}

int loom__ckpt_save(loom_trainer *tr) {
  loom_runtime *rt = &tr->rt;
  loom_ckpt_item_v1 items[MAX_ITEMS];
  int n;
  if (build_items(tr, items, &n) != 0) return -1;
  json_t *meta = json_pack("{s:s, s:i, s:I, s:i, s:i, s:i, s:O, s:o}", "format", CKPT_FORMAT,
                           "step", tr->step, "data_cursor", (json_int_t)tr->train.cursor,
                           "world_size", rt->mesh.world_size, "dp", rt->mesh.dp, "tp",
                           rt->mesh.tp, "config", tr->cfg.root, "tensors",
                           rt->mesh.pp > 1 ? json_null() : tensors_json(rt));
  const loom_precision_v1 *prec = &rt->precision.u.precision;
  const char *ps = prec->state_json ? prec->state_json(rt->precision_ctx) : NULL;
  json_t *pj = ps ? json_loads(ps, 0, NULL) : NULL;
  json_object_set_new(meta, "precision", pj ? pj : json_null());
  json_object_set_new(meta, "pp", json_integer(rt->mesh.pp));
  if (rt->mesh.pp > 1) json_object_set_new(meta, "stages", stage_tensors_json(rt));
  char *text = json_dumps(meta, JSON_COMPACT | JSON_SORT_KEYS);
  json_decref(meta);
  rank_blob blob = {tr->rank_rng, tr->sample_rng};
  loom_ckpt_state_v1 st = {.struct_size = sizeof st, .step = tr->step, .n_items = n,
                           .items = items, .meta_json = text, .rank_blob = &blob,
                           .rank_blob_bytes = sizeof blob};
  int rc = rt->checkpoint.u.checkpoint.save(rt->checkpoint_ctx, &st);
  free(text);
  if (rc != LOOM_OK) {
    snprintf(tr->err, sizeof tr->err, "plugin %s: saving step %d failed: %s",
             rt->checkpoint_host.label, tr->step, ckpt_error(tr));
    return -1;
  }
  return 0;
}

/* Resuming with a different seed, global batch or data is allowed (an elastic restart may
 * change the batch) but never silent: rank 0 says what changed. */
static void warn_changes(loom_trainer *tr, json_t *saved, int step) {
  if (!saved || tr->rt.mesh.world_rank != 0) return;
  static const char *const keys[][2] = {{"train", "seed"},
                                        {"train", "micro_batch_size"},
                                        {"train", "grad_accum_steps"},
                                        {"data", "train"}};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    json_t *a = json_object_get(json_object_get(saved, keys[i][0]), keys[i][1]);
    json_t *b = json_object_get(json_object_get(tr->cfg.root, keys[i][0]), keys[i][1]);
    if (a && b && !json_equal(a, b)) {
      char *sa = json_dumps(a, JSON_ENCODE_ANY), *sb = json_dumps(b, JSON_ENCODE_ANY);
      fprintf(stderr, "loom[0] warning: resuming step %d with %s.%s = %s (the checkpoint was "
              "trained with %s)\n", step, keys[i][0], keys[i][1], sb ? sb : "?", sa ? sa : "?");
      free(sa);
      free(sb);
    }
  }
}

int loom__ckpt_resume(loom_trainer *tr) {
  loom_runtime *rt = &tr->rt;
  const loom_checkpoint_v1 *ck = &rt->checkpoint.u.checkpoint;
  int step = 0;
  if (ck->resume_step(rt->checkpoint_ctx, &step) != LOOM_OK) {
    snprintf(tr->err, sizeof tr->err, "plugin %s: finding a checkpoint failed: %s",
             rt->checkpoint_host.label, ckpt_error(tr));
    return -1;
  }
  if (step <= 0) return 0;
  /* The items' names carry the tensor-parallel coordinate: read the metadata first (a load
   * of no items) so a different tp size is named as such rather than as missing chunks. */
  {
    loom_ckpt_state_v1 st0 = {.struct_size = sizeof st0, .step = step};
    const char *mt = NULL;
    if (ck->load(rt->checkpoint_ctx, step, &st0, &mt) != LOOM_OK) {
      snprintf(tr->err, sizeof tr->err, "plugin %s: loading step %d failed: %s",
               rt->checkpoint_host.label, step, ckpt_error(tr));
      return -1;
    }
    json_t *m0 = mt ? json_loads(mt, 0, NULL) : NULL;
    json_t *jtp = m0 ? json_object_get(m0, "tp") : NULL;
    int saved_tp = json_is_integer(jtp) ? (int)json_integer_value(jtp) : 1;
    json_t *jpp = m0 ? json_object_get(m0, "pp") : NULL;
    int saved_pp = json_is_integer(jpp) ? (int)json_integer_value(jpp) : 1;
    json_t *jst = m0 ? json_object_get(m0, "stages") : NULL;
    int same_split = 1;
    for (int s = 0; saved_pp == rt->mesh.pp && rt->mesh.pp > 1 && s < rt->mesh.pp; s++) {
      json_t *x = json_array_get(jst, (size_t)s);
      same_split &= json_integer_value(json_object_get(x, "first_unit")) == rt->pp_first[s] &&
                    json_integer_value(json_object_get(x, "last_unit")) == rt->pp_last[s];
    }
    /* "[2, 4]": units per stage, saved and now, for the message */
    char saved_units[128] = "[", run_units[128] = "[";
    for (size_t s = 0; s < json_array_size(jst); s++) {
      json_t *x = json_array_get(jst, s);
      size_t k = strlen(saved_units);
      snprintf(saved_units + k, sizeof saved_units - k, "%s%lld", s ? ", " : "",
               (long long)(json_integer_value(json_object_get(x, "last_unit")) -
                           json_integer_value(json_object_get(x, "first_unit")) + 1));
    }
    for (int s = 0; s < rt->mesh.pp; s++) {
      size_t k = strlen(run_units);
      snprintf(run_units + k, sizeof run_units - k, "%s%d", s ? ", " : "",
               rt->pp_last[s] - rt->pp_first[s] + 1);
    }
    strncat(saved_units, "]", sizeof saved_units - strlen(saved_units) - 1);
    strncat(run_units, "]", sizeof run_units - strlen(run_units) - 1);
    if (json_array_size(jst) == 0) snprintf(saved_units, sizeof saved_units, "[all]");
    if (rt->mesh.pp <= 1) snprintf(run_units, sizeof run_units, "[all]");
    json_decref(m0);
    if (saved_pp != rt->mesh.pp || !same_split) {
      snprintf(tr->err, sizeof tr->err,
               "checkpoint step %d: the pipeline split differs: it was saved with pp %d, units "
               "per stage %s; this run has pp %d, units per stage %s (each stage's items hold "
               "its own units; resume with the same pipeline \"size\" and \"stages\", or start "
               "a new checkpoint dir)", step, saved_pp, saved_units, rt->mesh.pp, run_units);
      return -1;
    }
    if (saved_tp != rt->mesh.tp) {
      snprintf(tr->err, sizeof tr->err,
               "checkpoint step %d: the tensor-parallel size differs: it was saved with tp %d, "
               "this run has tp %d (each tp rank's tensors are slices of that split; resume "
               "with the same tensor_parallel \"size\", or start a new checkpoint dir)", step,
               saved_tp, rt->mesh.tp);
      return -1;
    }
  }
  loom_ckpt_item_v1 items[MAX_ITEMS];
  int n;
  if (build_items(tr, items, &n) != 0) return -1;
  rank_blob blob;
  loom_ckpt_state_v1 st = {.struct_size = sizeof st, .step = step, .n_items = n, .items = items,
                           .rank_blob = &blob, .rank_blob_bytes = sizeof blob};
  const char *meta_text = NULL;
  if (ck->load(rt->checkpoint_ctx, step, &st, &meta_text) != LOOM_OK) {
    snprintf(tr->err, sizeof tr->err, "plugin %s: loading step %d failed: %s",
             rt->checkpoint_host.label, step, ckpt_error(tr));
    return -1;
  }
  json_error_t je;
  json_t *meta = meta_text ? json_loads(meta_text, 0, &je) : NULL;
  const char *format = meta ? json_string_value(json_object_get(meta, "format")) : NULL;
  if (!format || strcmp(format, CKPT_FORMAT) != 0 ||
      !json_is_integer(json_object_get(meta, "data_cursor"))) {
    json_decref(meta);
    snprintf(tr->err, sizeof tr->err,
             "checkpoint step %d: metadata is not a %s document (corrupt or foreign)", step,
             CKPT_FORMAT);
    return -1;
  }
  tr->step = step;
  tr->train.cursor = (uint64_t)json_integer_value(json_object_get(meta, "data_cursor"));
  warn_changes(tr, json_object_get(meta, "config"), step);
  int saved_world = (int)json_integer_value(json_object_get(meta, "world_size"));
  if (saved_world == rt->mesh.world_size) {
    tr->rank_rng = blob.rank_rng;
    tr->sample_rng = blob.sample_rng;
  } /* else: a different world size has different per-rank streams; keep the fresh seeds */
  json_t *pj = json_object_get(meta, "precision");
  const loom_precision_v1 *prec = &rt->precision.u.precision;
  if (pj && !json_is_null(pj) && prec->load_state_json) {
    char *ps = json_dumps(pj, JSON_COMPACT);
    int rc = prec->load_state_json(rt->precision_ctx, ps);
    free(ps);
    if (rc != LOOM_OK) {
      json_decref(meta);
      snprintf(tr->err, sizeof tr->err, "plugin %s: restoring its state failed: %s",
               rt->precision_host.label, rt->precision_host.error);
      return -1;
    }
  }
  json_decref(meta);
  return 0;
}
