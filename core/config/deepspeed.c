/* Reading a DeepSpeed config into a loom config: the file, the keys that decide the others
 * (ZeRO stage, fp16/bf16, the offload devices), the walk over every key (deepspeed_keys.c),
 * then the merge into the loom config's sections with conflicts refused naming both values,
 * DeepSpeed's defaults where neither file says, and DeepSpeed's batch rule. */
#include "deepspeed.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_internal.h"
#include "deepspeed_internal.h"
#include "util/input_file.h"
#include "../util/fs_util.h"

#define DS_MAX_BYTES (16u << 20) /* as a loom config */

static json_t *at(json_t *o, const char *a, const char *b) {
  json_t *x = json_object_get(o, a);
  return b ? json_object_get(x, b) : x;
}

/* The keys the others' fate depends on, read before the walk (their own lines come from it). */
static void read_deciders(ds_ctx *c, json_t *ds) {
  json_t *z = json_object_get(ds, "zero_optimization");
  c->has_zero = json_is_object(z);
  json_t *s = json_object_get(z, "stage");
  c->stage = json_is_integer(s) && json_integer_value(s) >= 0 && json_integer_value(s) <= 3
                 ? (int)json_integer_value(s)
                 : 0;
  c->fp16 = json_is_true(at(ds, "fp16", "enabled"));
  c->bf16 = json_is_true(at(ds, "bf16", "enabled")) || json_is_true(at(ds, "bfloat16", "enabled"));
  json_t *od = json_object_get(json_object_get(z, "offload_optimizer"), "device");
  c->offload_opt = c->stage >= 1 && json_is_string(od) && !strcmp(json_string_value(od), "cpu");
  c->offload_pin = -1;
  c->has_optimizer = json_object_get(ds, "optimizer") != NULL;
  c->has_clip = json_object_get(ds, "gradient_clipping") != NULL;
  static const char *const sched[] = {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR"};
  json_t *st = at(ds, "scheduler", "type");
  c->sched_type = st ? -1 : 0;
  for (int i = 0; i < 3 && json_is_string(st); i++)
    if (!strcmp(json_string_value(st), sched[i])) c->sched_type = i + 1;
  c->has_sched = c->sched_type != 0; /* DeepSpeed runs no scheduler without a type */
}

/* Numbers equal by value (1 and 1.0), objects and arrays member by member. */
static int same(const json_t *a, const json_t *b) {
  if (json_is_number(a) && json_is_number(b)) return json_number_value(a) == json_number_value(b);
  if (json_is_array(a) && json_is_array(b)) {
    if (json_array_size(a) != json_array_size(b)) return 0;
    for (size_t i = 0; i < json_array_size(a); i++)
      if (!same(json_array_get(a, i), json_array_get(b, i))) return 0;
    return 1;
  }
  if (json_is_object(a) && json_is_object(b)) {
    const char *k;
    json_t *v;
    size_t na = 0, nb = 0;
    json_object_foreach((json_t *)a, k, v) {
      if (k[0] == '_') continue;
      na++;
      if (!same(v, json_object_get(b, k))) return 0;
    }
    json_object_foreach((json_t *)b, k, v) nb += k[0] != '_';
    return na == nb;
  }
  return json_equal((json_t *)a, (json_t *)b);
}

/* The DeepSpeed key a loom path came from: the path's own entry, else its nearest parent's. */
static const char *origin_of(ds_ctx *c, const char *path) {
  char p[256];
  snprintf(p, sizeof p, "%s", path);
  for (;;) {
    const char *o = json_string_value(json_object_get(c->origin, p));
    if (o) return o;
    char *cut = strrchr(p, '.');
    char *br = strrchr(p, '[');
    if (br && (!cut || br > cut)) cut = br;
    if (!cut) return "?";
    *cut = '\0';
  }
}

/* Merge src (the DeepSpeed file's settings) into dst (the loom config) at `path`. */
static int merge(ds_ctx *c, json_t *dst, json_t *src, const char *path, const char *loom_file,
                 char *err, size_t errlen) {
  const char *k;
  json_t *s;
  json_object_foreach(src, k, s) {
    char p[256];
    snprintf(p, sizeof p, "%s%s%s", path, *path ? "." : "", k);
    json_t *d = json_object_get(dst, k);
    if (!d) {
      json_object_set(dst, k, s);
    } else if (json_is_object(d) && json_is_object(s)) {
      if (merge(c, d, s, p, loom_file, err, errlen)) return -1;
    } else if (!same(d, s)) {
      char a[96], b[96];
      loom__json_repr(s, a, sizeof a);
      loom__json_repr(d, b, sizeof b);
      loom__set_err(err, errlen, "%s: %s (%s = %s) conflicts with %s: %s = %s: set it in one "
                    "file only", c->file, origin_of(c, p), p, a, loom_file, p, b);
      return -1;
    }
  }
  return 0;
}

/* A DeepSpeed default for a setting neither file holds: set it (and say so) when the loom
 * config has nothing at root[sec] (key NULL) or root[sec][key]. */
static void soft(ds_ctx *c, json_t *root, const char *sec, const char *key, json_t *v,
                 const char *why) {
  json_t *s = json_object_get(root, sec);
  if (key ? json_object_get(s, key) != NULL : s != NULL) {
    json_decref(v);
    return;
  }
  char shown[128], val[96];
  snprintf(shown, sizeof shown, "%s%s%s", sec, key ? "." : "", key ? key : "");
  loom__json_repr(v, val, sizeof val);
  loom__ds_line(c, why, NULL, "default -> %s = %s", shown, val);
  c->ds->n_defaults++;
  if (!key) {
    json_object_set_new(root, sec, v);
    return;
  }
  if (!s) json_object_set_new(root, sec, s = json_object());
  json_object_set_new(s, key, v);
}

/* The mapping in loom's schema, from what the walk collected. */
static void build(ds_ctx *c) {
  if (c->has_zero) {
    json_t *par = json_array();
    json_t *z = json_deep_copy(c->zero);
    if (!json_object_get(z, "plugin")) json_object_set_new(z, "plugin", json_string("ddp"));
    json_array_append_new(par, z);
    if (c->offload_opt) {
      json_t *dev = json_pack("{s:s}", "device", "cpu");
      if (c->offload_pin >= 0) json_object_set_new(dev, "pin_memory", json_boolean(c->offload_pin));
      json_array_append_new(par, json_pack("{s:s,s:o}", "plugin", "cpu_offload",
                                           "offload_optimizer", dev));
    }
    json_object_set_new(c->hard, "parallel", par);
    json_object_set_new(c->origin, "parallel", json_string("zero_optimization"));
  }
  if ((c->fp16 || c->bf16) && !(c->fp16 && c->bf16)) {
    json_t *p = c->fp16 ? json_deep_copy(c->fp16_opts) : json_object();
    json_object_set_new(p, "plugin", json_string(c->fp16 ? "fp16" : "bf16"));
    json_object_set_new(c->hard, "precision", p);
    json_object_set_new(c->origin, "precision", json_string(c->fp16 ? "fp16.enabled"
                                                                    : "bf16.enabled"));
  }
}

/* DeepSpeed's defaults for what it owns and neither file says. */
static void defaults(ds_ctx *c, json_t *root) {
  if (!c->has_zero)
    soft(c, root, "parallel", NULL, json_pack("[{s:s}]", "plugin", "ddp"),
         "(no zero_optimization) DeepSpeed's stage 0, data parallel");
  if (!c->fp16 && !c->bf16)
    soft(c, root, "precision", NULL, json_pack("{s:s}", "plugin", "fp32"),
         "(no fp16, bf16) DeepSpeed's fp32");
  if (!c->has_clip)
    soft(c, root, "optimizer", "grad_clip", json_real(0),
         "(no gradient_clipping) DeepSpeed's 0, no clipping");
  if (!c->has_sched)
    soft(c, root, "lr_schedule", NULL, json_pack("{s:i,s:s}", "warmup_steps", 0, "decay",
                                                 "constant"),
         "(no scheduler) DeepSpeed keeps the optimizer's lr");
  if (c->has_optimizer) { /* FusedAdam's defaults (deepspeed/ops/adam/fused_adam.py) */
    soft(c, root, "optimizer", "lr", json_real(1e-3), "(no optimizer.params.lr) DeepSpeed's");
    soft(c, root, "optimizer", "betas", json_pack("[f,f]", 0.9, 0.999),
         "(no optimizer.params.betas) DeepSpeed's");
    soft(c, root, "optimizer", "eps", json_real(1e-8), "(no optimizer.params.eps) DeepSpeed's");
    soft(c, root, "optimizer", "weight_decay", json_real(0),
         "(no optimizer.params.weight_decay) DeepSpeed's");
  }
}

/* Which of the three batch numbers either file gives (after the merge). */
static int batch_given(json_t *root) {
  json_t *t = json_object_get(root, "train");
  json_t *g = json_object_get(t, "global_batch_size");
  return (g && !(json_is_integer(g) && json_integer_value(g) == 0) ? LOOM_DS_TRAIN_BATCH : 0) |
         (json_object_get(t, "micro_batch_size") ? LOOM_DS_MICRO_BATCH : 0) |
         (json_object_get(t, "grad_accum_steps") ? LOOM_DS_GRAD_ACCUM : 0);
}

static int is_cpu_device(json_t *root) {
  json_t *t = at(root, "device", "type");
  return !t || (json_is_string(t) && !strcmp(json_string_value(t), "cpu"));
}

int loom__deepspeed_apply(json_t *root, const char *loom_file, loom_deepspeed *ds, char *err,
                          size_t errlen) {
  json_t *name = json_object_get(root, "deepspeed");
  if (!json_is_string(name) || !json_string_value(name)[0] ||
      strlen(json_string_value(name)) >= sizeof ds->path) {
    char got[96];
    loom__json_repr(name, got, sizeof got);
    loom__set_err(err, errlen, "%s: deepspeed: expected the path of a DeepSpeed config file "
                  "(ds_config.json, < %zu bytes), got %s", loom_file, sizeof ds->path, got);
    return -1;
  }
  snprintf(ds->path, sizeof ds->path, "%s", json_string_value(name));
  if (!ds->report) ds->report = json_array();
  char e[1024];
  size_t len;
  char *text = loom__read_regular(ds->path, DS_MAX_BYTES, &len, e, sizeof e);
  if (!text) {
    loom__set_err(err, errlen, "%s: deepspeed: %s", loom_file, e);
    return -1;
  }
  json_error_t je;
  json_t *dsj = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
  free(text);
  if (!dsj) {
    loom__set_err(err, errlen, "%s:%d:%d: %s (the DeepSpeed config %s: deepspeed names)",
                  ds->path, je.line, je.column, je.text, loom_file);
    return -1;
  }
  if (!json_is_object(dsj)) {
    char got[96];
    loom__json_repr(dsj, got, sizeof got);
    json_decref(dsj);
    loom__set_err(err, errlen, "%s: expected a JSON object at the top level, got %s", ds->path,
                  got);
    return -1;
  }
  ds_ctx c = {.file = ds->path, .cpu_device = is_cpu_device(root), .ds = ds,
              .hard = json_object(), .zero = json_object(), .fp16_opts = json_object(),
              .origin = json_object()};
  read_deciders(&c, dsj);
  loom__ds_walk(&c, "", dsj);
  int rc = -1;
  if (c.n_refused) {
    if (c.n_refused == 1) loom__set_err(err, errlen, "%s", c.first_refused);
    else
      loom__set_err(err, errlen, "%s (and %d more refused keys: `loom check CONFIG "
                    "--deepspeed %s` lists each)", c.first_refused, c.n_refused - 1, ds->path);
    goto out;
  }
  build(&c);
  if (merge(&c, root, c.hard, "", loom_file, err, errlen)) goto out;
  defaults(&c, root);
  ds->given = batch_given(root);
  if (!(ds->given & (LOOM_DS_TRAIN_BATCH | LOOM_DS_MICRO_BATCH))) {
    loom__set_err(err, errlen, "%s: train_batch_size: Either train_batch_size or "
                  "train_micro_batch_size_per_gpu needs to be provided (DeepSpeed's rule; "
                  "or train.global_batch_size / train.micro_batch_size in %s)", ds->path,
                  loom_file);
    goto out;
  }
  json_object_del(root, "deepspeed");
  rc = 0;
out:
  json_decref(dsj);
  json_decref(c.hard);
  json_decref(c.zero);
  json_decref(c.fp16_opts);
  json_decref(c.origin);
  return rc;
}

int loom__deepspeed_batch(const char *ds_file, int given, int dp, long long *tb, long long *mb,
                          long long *ga, char *err, size_t errlen) {
  int t = given & LOOM_DS_TRAIN_BATCH, m = given & LOOM_DS_MICRO_BATCH,
      g = given & LOOM_DS_GRAD_ACCUM;
  /* deepspeed/runtime/config.py, _set_batch_related_parameters: the same cases, in order */
  if (t && m && g) {
  } else if (t && m) {
    *ga = *tb / *mb / dp;
  } else if (t && g) {
    *mb = *tb / dp / *ga;
  } else if (m && g) {
    *tb = *mb * *ga * dp;
  } else if (t) {
    *ga = 1;
    *mb = *tb / dp;
  } else {
    *tb = *mb * dp;
    *ga = 1;
  }
  /* _batch_assertion */
  if (*mb <= 0 || *ga <= 0 || *tb != *mb * *ga * dp) {
    loom__set_err(err, errlen, "%s: train_batch_size %lld != train_micro_batch_size_per_gpu "
                  "%lld x gradient_accumulation_steps %lld x data-parallel size %d (DeepSpeed's "
                  "rule: train_batch_size = micro x accumulation x dp; %s)", ds_file, *tb, *mb,
                  *ga, dp,
                  t && m && g ? "all three given" : "derived from the given ones by integer "
                                                    "division, as DeepSpeed does");
    return -1;
  }
  return 0;
}
