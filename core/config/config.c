/* Loading the run configuration: parse the JSON (jansson), apply `--set PATH=VALUE` overrides,
 * then validate every section into loom_config. The first error stops the load; messages are
 * one line, "FILE: JSON.PATH: expected WHAT, got VALUE" (see docs/config.md). */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config_internal.h"
#include "model/gpt.h"
#include "util/input_file.h"
#include "util/one_line.h"
#include "../util/fs_util.h"

#define PARSE_FLAGS JSON_REJECT_DUPLICATES
#define CONFIG_MAX_BYTES (16u << 20) /* a config is a few KiB; more is not a config */
#define MAX_PATH_STEPS 32 /* depth of an override path: "a.b[0].c" is 4 steps */

typedef struct ctx {
  loom_config *cfg;
  const char *file; /* for messages */
  char *err;
  size_t errlen;
} ctx;


/* ---- overrides -------------------------------------------------------------------------- */

typedef struct path_step {
  int is_index;
  size_t index;    /* when is_index */
  const char *key; /* else */
} path_step;

/* Split "a.b[0].c" (modified in place) into steps. Returns the number of steps or -1. */
static int parse_path(char *buf, path_step *steps, int max) {
  int k = 0;
  size_t i = 0;
  for (;;) {
    size_t start = i;
    while (buf[i] && buf[i] != '.' && buf[i] != '[' && buf[i] != ']') i++;
    if (i == start || k == max) return -1;
    char c = buf[i];
    buf[i] = '\0';
    steps[k++] = (path_step){.key = buf + start};
    while (c == '[') {
      size_t d = ++i, idx = 0;
      while (buf[i] >= '0' && buf[i] <= '9') {
        if (i - d >= 9) return -1; /* an index of a billion is a typo */
        idx = idx * 10 + (size_t)(buf[i] - '0');
        i++;
      }
      if (i == d || buf[i] != ']' || k == max) return -1;
      steps[k++] = (path_step){.is_index = 1, .index = idx};
      c = buf[++i];
    }
    if (c == '\0') return k;
    if (c != '.') return -1;
    i++;
  }
}

/* The argument as shown in messages: at most 80 bytes, control characters replaced. */
static void show_arg(const char *arg, char *buf, size_t n) {
  if (!arg) {
    snprintf(buf, n, "(null)");
    return;
  }
  size_t len = strlen(arg), cut = len > 80 ? 77 : len;
  while (cut < len && cut > 0 && ((unsigned char)arg[cut] & 0xC0) == 0x80) cut--; /* UTF-8 */
  snprintf(buf, n, "%.*s%s", (int)cut, arg, cut < len ? "..." : "");
  for (char *c = buf; *c; c++)
    if ((unsigned char)*c < 0x20) *c = '?';
}

/* "parallel": {...} means a one-element array; make it one so that "parallel[0].x" addresses it
 * and cfg->root has a single shape. */
static void normalize_parallel(json_t *root) {
  json_t *p = json_object_get(root, "parallel");
  if (!json_is_object(p)) return;
  json_t *arr = json_array();
  if (!arr || json_array_append(arr, p)) { /* defensive: out of memory; validation still */
    json_decref(arr);                       /* accepts the object form */
    return;
  }
  json_object_set_new(root, "parallel", arr); /* on failure jansson frees arr; same as above */
}

/* Apply one "PATH=VALUE" to root (an object). */
static int apply_override(json_t *root, const char *arg, char *err, size_t errlen) {
  char shown[96];
  show_arg(arg, shown, sizeof shown);
  const char *eq = arg ? strchr(arg, '=') : NULL;
  if (!eq || eq == arg) {
    loom__set_err(err, errlen, "--set '%s': expected PATH=VALUE", shown);
    return -1;
  }
  size_t plen = (size_t)(eq - arg);
  char *buf = malloc(plen + 1);
  if (!buf) { /* defensive */
    loom__set_err(err, errlen, "--set '%s': out of memory", shown);
    return -1;
  }
  memcpy(buf, arg, plen);
  buf[plen] = '\0';
  path_step steps[MAX_PATH_STEPS];
  int n = parse_path(buf, steps, MAX_PATH_STEPS);
  if (n < 1) {
    free(buf);
    loom__set_err(err, errlen, "--set '%s': expected PATH=VALUE", shown);
    return -1;
  }
  json_t *val = json_loads(eq + 1, JSON_DECODE_ANY | PARSE_FLAGS, NULL);
  if (!val) val = json_string(eq + 1);
  if (!val) {
    free(buf);
    loom__set_err(err, errlen, "--set '%s': value is not valid UTF-8", shown);
    return -1;
  }

  int rc = 0;
  json_t *cur = root; /* an object when steps[i] is a key, an array when it is an index */
  char where[512] = "";
  size_t wlen = 0;
  for (int i = 0; i < n && rc == 0; i++) {
    const path_step *s = &steps[i];
    size_t size = s->is_index ? json_array_size(cur) : 0;
    if (s->is_index)
      wlen += (size_t)snprintf(where + wlen, sizeof where - wlen, "[%zu]", s->index);
    else
      wlen += (size_t)snprintf(where + wlen, sizeof where - wlen, "%s%s", i ? "." : "", s->key);
    if (wlen >= sizeof where) wlen = sizeof where - 1;
    if (s->is_index && s->index > size) {
      loom__set_err(err, errlen, "--set '%s': %s: index out of range (the array has %zu element%s)",
              shown, where, size, size == 1 ? "" : "s");
      rc = -1;
      break;
    }
    json_t *child = !s->is_index          ? json_object_get(cur, s->key)
                    : s->index < size ? json_array_get(cur, s->index)
                                      : NULL;
    int last = i == n - 1;
    int want_array = !last && steps[i + 1].is_index;
    json_t *put = NULL; /* what to store at this step, if anything */
    if (last) {
      put = val;
      json_incref(put);
    } else if (!child || json_is_null(child)) { /* missing intermediate: create it */
      put = want_array ? json_array() : json_object();
    } else if (want_array ? !json_is_array(child) : !json_is_object(child)) {
      char got[96];
      loom__json_repr(child, got, sizeof got);
      loom__set_err(err, errlen, "--set '%s': %s: expected %s, got %s", shown, where,
              want_array ? "an array" : "an object", got);
      rc = -1;
      break;
    }
    if (put) {
      int bad = !s->is_index         ? json_object_set_new(cur, s->key, put)
                : s->index < size ? json_array_set_new(cur, s->index, put)
                                  : json_array_append_new(cur, put);
      if (bad) { /* jansson freed `put`; a key that is not UTF-8, or out of memory */
        loom__set_err(err, errlen, "--set '%s': %s: cannot set this key (not valid UTF-8?)", shown,
                where);
        rc = -1;
        break;
      }
      child = put;
    }
    cur = child;
  }
  json_decref(val);
  free(buf);
  return rc;
}

/* ---- field helpers (each sets the error and returns -1 on failure) ---------------------- */

/* A top-level section: absent is fine (o->obj = NULL, every key takes its default). */
static int section(ctx *c, const char *key, const char *const *allowed, loom_options *o) {
  json_t *v = json_object_get(c->cfg->root, key);
  *o = (loom_options){.file = c->file, .where = key, .obj = NULL};
  if (!v) return 0;
  if (!json_is_object(v)) {
    char got[96];
    loom__json_repr(v, got, sizeof got);
    loom_options top = {.file = c->file};
    return loom__opt_error(&top, key, c->err, c->errlen, "expected an object, got %s", got);
  }
  o->obj = v;
  return loom_opt_check_keys(o, allowed, c->err, c->errlen);
}

static int get_int(ctx *c, const loom_options *o, const char *key, int dflt, int min, int max,
                   int *out) {
  int64_t v;
  if (loom_opt_int(o, key, dflt, min, max, &v, c->err, c->errlen)) return -1;
  *out = (int)v;
  return 0;
}

static int get_num(ctx *c, const loom_options *o, const char *key, double dflt, double lo,
                   int lo_open, double hi, int hi_open, double *out) {
  json_t *v = json_object_get(o->obj, key);
  if (!v) {
    *out = dflt;
    return 0;
  }
  return loom__opt_number(o, key, v, lo, lo_open, hi, hi_open, out, c->err, c->errlen);
}

/* A string copied into dst[cap]; too long is an error, never a truncation. */
static int get_str(ctx *c, const loom_options *o, const char *key, const char *dflt, char *dst,
                   size_t cap) {
  const char *s;
  if (loom_opt_string(o, key, dflt, &s, c->err, c->errlen)) return -1;
  size_t n = strlen(s);
  if (n >= cap) {
    char got[96];
    loom__json_repr(json_object_get(o->obj, key), got, sizeof got);
    return loom__opt_error(o, key, c->err, c->errlen,
                           "expected a string of at most %zu bytes, got %s (%zu bytes)", cap - 1,
                           got, n);
  }
  memcpy(dst, s, n + 1);
  return 0;
}

/* Error for a string field that is not one of the accepted values. */
static int bad_choice(ctx *c, const loom_options *o, const char *key, const char *expected) {
  char got[96];
  loom__json_repr(json_object_get(o->obj, key), got, sizeof got);
  return loom__opt_error(o, key, c->err, c->errlen, "expected %s, got %s", expected, got);
}

/* A plugin object {"plugin": NAME, ...options} at `where`. */
static int plugin_at(ctx *c, json_t *v, const char *where, const char *example,
                     loom_plugin_cfg *out) {
  char got[96];
  snprintf(out->json_path, sizeof out->json_path, "%s", where);
  if (!json_is_object(v)) {
    loom__json_repr(v, got, sizeof got);
    loom_options top = {.file = c->file};
    return loom__opt_error(&top, where, c->err, c->errlen,
                           "expected an object like {\"plugin\": \"%s\"}, got %s", example, got);
  }
  loom_options o = {.file = c->file, .where = where, .obj = v};
  json_t *p = json_object_get(v, "plugin");
  if (!p)
    return loom__opt_error(&o, "plugin", c->err, c->errlen,
                           "required key missing (expected a plugin name like \"%s\" or a path "
                           "ending in .so)",
                           example);
  const char *name = json_string_value(p);
  size_t len = name ? strlen(name) : 0;
  int is_path = name && strchr(name, '/');
  if (len == 0 || (is_path && (len < 4 || strcmp(name + len - 3, ".so") != 0))) {
    loom__json_repr(p, got, sizeof got);
    return loom__opt_error(&o, "plugin", c->err, c->errlen,
                           "expected a plugin name like \"%s\" or a path ending in .so, got %s",
                           example, got);
  }
  if (len >= sizeof out->name) {
    loom__json_repr(p, got, sizeof got);
    return loom__opt_error(&o, "plugin", c->err, c->errlen,
                           "expected a string of at most %zu bytes, got %s (%zu bytes)",
                           sizeof out->name - 1, got, len);
  }
  memcpy(out->name, name, len + 1);
  /* the options: the object minus "plugin" and "_comments"; values shared with root */
  out->options = json_object();
  if (!out->options) goto oom;
  const char *key;
  json_t *val;
  json_object_foreach(v, key, val) {
    if (key[0] == '_' || strcmp(key, "plugin") == 0) continue;
    if (json_object_set(out->options, key, val)) goto oom;
  }
  return 0;
oom: /* defensive */
  loom__set_err(c->err, c->errlen, "%s: %s: out of memory", c->file, where);
  return -1;
}

/* A single-plugin section: absent = `dflt` ("" = none) with no options; null = none when
 * allowed. */
static int plugin_section(ctx *c, const char *key, const char *dflt, const char *example,
                          int null_is_none, loom_plugin_cfg *out) {
  json_t *v = json_object_get(c->cfg->root, key);
  snprintf(out->json_path, sizeof out->json_path, "%s", key);
  if (!v || (null_is_none && json_is_null(v))) {
    snprintf(out->name, sizeof out->name, "%s", dflt);
    if (!*dflt) return 0;
    out->options = json_object();
    if (out->options) return 0;
    loom__set_err(c->err, c->errlen, "%s: %s: out of memory", c->file, key); /* defensive */
    return -1;
  }
  return plugin_at(c, v, key, example, out);
}

/* ---- sections ----------------------------------------------------------------------------- */

static int load_model(ctx *c) {
  static const char *const keys[] = {"vocab_size", "context_length",    "n_layer", "n_head",
                                     "n_embd",     "padded_vocab_size", "attention", NULL};
  loom_options o;
  if (section(c, "model", keys, &o)) return -1;
  loom_config *cfg = c->cfg;
  /* the upper bounds keep every count and size computed from these in range (gpt.h) */
  if (get_int(c, &o, "vocab_size", 256, 2, 65536, &cfg->model.vocab_size) ||
      get_int(c, &o, "context_length", 256, 1, GPT_MAX_SEQ_LEN, &cfg->model.context_length) ||
      get_int(c, &o, "n_layer", 4, 1, GPT_MAX_N_LAYER, &cfg->model.n_layer) ||
      get_int(c, &o, "n_head", 4, 1, GPT_MAX_N_EMBD, &cfg->model.n_head) ||
      get_int(c, &o, "n_embd", 128, 1, GPT_MAX_N_EMBD, &cfg->model.n_embd) ||
      get_int(c, &o, "padded_vocab_size", cfg->model.vocab_size, cfg->model.vocab_size, 65536,
              &cfg->model.padded_vocab_size))
    return -1;
  const char *attn;
  if (loom_opt_string(&o, "attention", "auto", &attn, c->err, c->errlen)) return -1;
  if (strcmp(attn, "auto") == 0) cfg->model.attention = LOOM_ATTN_AUTO;
  else if (strcmp(attn, "flash") == 0) cfg->model.attention = LOOM_ATTN_FLASH;
  else if (strcmp(attn, "materialized") == 0) cfg->model.attention = LOOM_ATTN_MATERIALIZED;
  else return bad_choice(c, &o, "attention", "\"auto\", \"flash\" or \"materialized\"");
  if (cfg->model.n_embd % cfg->model.n_head != 0)
    return loom__opt_error(&o, "n_embd", c->err, c->errlen,
                           "expected a multiple of model.n_head (%d), got %d", cfg->model.n_head,
                           cfg->model.n_embd);
  double n = gpt_param_count_estimate(cfg->model.padded_vocab_size, cfg->model.context_length,
                                      cfg->model.n_layer, cfg->model.n_embd);
  if (n > (double)GPT_MAX_PARAMS)
    return loom__opt_error(&o, "n_layer", c->err, c->errlen,
                           "n_layer %d x n_embd %d gives %.3g parameters, more than the 2^40 "
                           "(%.3g) this loom can size: lower model.n_layer or model.n_embd",
                           cfg->model.n_layer, cfg->model.n_embd, n, (double)GPT_MAX_PARAMS);
  return 0;
}

/* "activation_checkpointing": absent, null or "none" = off; "full" or "selective" for every
 * block; or {"policy": "full" | "selective" | "none", "every": k} for the blocks whose index
 * is a multiple of k (gpt.h, GPT_CKPT_*). */
static int load_activation_checkpointing(ctx *c) {
  static const char *const keys[] = {"policy", "every", NULL};
  static const char *const expected = "\"none\", \"full\" or \"selective\"";
  const char *key = "activation_checkpointing";
  loom_config *cfg = c->cfg;
  cfg->activation_checkpointing.policy = GPT_CKPT_NONE;
  cfg->activation_checkpointing.every = 1;
  json_t *v = json_object_get(cfg->root, key);
  if (!v || json_is_null(v)) return 0;
  loom_options top = {.file = c->file, .obj = cfg->root};
  const char *name = json_string_value(v);
  if (json_is_object(v)) {
    loom_options o;
    if (section(c, key, keys, &o) ||
        loom_opt_string(&o, "policy", "full", &name, c->err, c->errlen) ||
        get_int(c, &o, "every", 1, 1, GPT_MAX_N_LAYER, &cfg->activation_checkpointing.every))
      return -1;
    top = o; /* errors below name activation_checkpointing.policy */
    key = "policy";
  }
  static const struct { const char *name; int policy; } policies[] = {
      {"none", GPT_CKPT_NONE}, {"full", GPT_CKPT_FULL}, {"selective", GPT_CKPT_SELECTIVE}};
  for (size_t i = 0; name && i < sizeof policies / sizeof policies[0]; i++) {
    if (strcmp(name, policies[i].name) == 0) {
      cfg->activation_checkpointing.policy = policies[i].policy;
      return 0;
    }
  }
  char got[96];
  loom__json_repr(json_object_get(top.obj, key), got, sizeof got);
  return loom__opt_error(&top, key, c->err, c->errlen,
                         "expected %s, or an object {\"policy\": ..., \"every\": k}, got %s",
                         expected, got);
}

static int load_data(ctx *c) {
  static const char *const keys[] = {"train", "val", "vocab", NULL};
  loom_options o;
  loom_config *cfg = c->cfg;
  if (section(c, "data", keys, &o) ||
      get_str(c, &o, "train", "", cfg->data.train, sizeof cfg->data.train) ||
      get_str(c, &o, "val", "", cfg->data.val, sizeof cfg->data.val) ||
      get_str(c, &o, "vocab", "", cfg->data.vocab, sizeof cfg->data.vocab))
    return -1;
  return 0;
}

static int load_train(ctx *c) {
  static const char *const keys[] = {"micro_batch_size", "seq_len",       "grad_accum_steps",
                                     "global_batch_size", "steps",        "eval_interval",
                                     "eval_batches",      "seed",         "timeout_s",
                                     NULL};
  loom_options o;
  if (section(c, "train", keys, &o)) return -1;
  loom_config *cfg = c->cfg;
  int64_t seed;
  /* counts are bounded by LOOM_MAX_COUNT so that a step counter (int, counting to steps + 1)
   * and products of counts computed in 64 bits cannot overflow */
  if (get_int(c, &o, "micro_batch_size", 4, 1, LOOM_MAX_COUNT, &cfg->train.micro_batch_size) ||
      get_int(c, &o, "seq_len", cfg->model.context_length, 1, GPT_MAX_SEQ_LEN,
              &cfg->train.seq_len))
    return -1;
  if (cfg->train.seq_len > cfg->model.context_length)
    return loom__opt_error(&o, "seq_len", c->err, c->errlen,
                           "expected <= model.context_length (%d), got %d",
                           cfg->model.context_length, cfg->train.seq_len);
  /* B*T rows of a micro-batch are an int in the kernels */
  if ((int64_t)cfg->train.micro_batch_size * cfg->train.seq_len > INT_MAX)
    return loom__opt_error(&o, "micro_batch_size", c->err, c->errlen,
                           "micro_batch_size %d x seq_len %d = %lld tokens per micro-batch, more "
                           "than %d: lower it and raise train.grad_accum_steps",
                           cfg->train.micro_batch_size, cfg->train.seq_len,
                           (long long)cfg->train.micro_batch_size * cfg->train.seq_len, INT_MAX);
  if (get_int(c, &o, "grad_accum_steps", 1, 1, LOOM_MAX_COUNT, &cfg->train.grad_accum_steps) ||
      get_int(c, &o, "global_batch_size", 0, 0, INT_MAX, &cfg->train.global_batch_size) ||
      get_int(c, &o, "steps", 100, 1, LOOM_MAX_COUNT, &cfg->train.steps) ||
      get_int(c, &o, "eval_interval", 0, 0, LOOM_MAX_COUNT, &cfg->train.eval_interval) ||
      get_int(c, &o, "eval_batches", 8, 1, LOOM_MAX_COUNT, &cfg->train.eval_batches) ||
      get_int(c, &o, "timeout_s", 600, 0, LOOM_MAX_TIMEOUT_S, &cfg->train.timeout_s) ||
      loom_opt_int(&o, "seed", 1337, 0, INT64_MAX, &seed, c->err, c->errlen))
    return -1;
  cfg->train.seed = (uint64_t)seed;
  return 0;
}

static int load_optimizer(ctx *c) {
  static const char *const keys[] = {"name", "lr", "betas", "eps", "weight_decay", "grad_clip",
                                     NULL};
  loom_options o;
  const char *name;
  if (section(c, "optimizer", keys, &o) ||
      loom_opt_string(&o, "name", "adamw", &name, c->err, c->errlen))
    return -1;
  if (strcmp(name, "adamw") != 0)
    return bad_choice(c, &o, "name", "\"adamw\" (the only optimizer so far)");
  loom_config *cfg = c->cfg;
  if (get_num(c, &o, "lr", 3e-4, 0, 1, INFINITY, 0, &cfg->optimizer.lr)) return -1;
  cfg->optimizer.beta1 = 0.9;
  cfg->optimizer.beta2 = 0.95;
  json_t *betas = json_object_get(o.obj, "betas");
  if (betas) {
    if (!json_is_array(betas) || json_array_size(betas) != 2) {
      char got[96];
      loom__json_repr(betas, got, sizeof got);
      return loom__opt_error(&o, "betas", c->err, c->errlen,
                             "expected an array of 2 numbers [beta1, beta2], got %s", got);
    }
    if (loom__opt_number(&o, "betas[0]", json_array_get(betas, 0), 0, 0, 1, 1,
                         &cfg->optimizer.beta1, c->err, c->errlen) ||
        loom__opt_number(&o, "betas[1]", json_array_get(betas, 1), 0, 0, 1, 1,
                         &cfg->optimizer.beta2, c->err, c->errlen))
      return -1;
  }
  if (get_num(c, &o, "eps", 1e-8, 0, 1, INFINITY, 0, &cfg->optimizer.eps) ||
      get_num(c, &o, "weight_decay", 0.0, 0, 0, INFINITY, 0, &cfg->optimizer.weight_decay) ||
      get_num(c, &o, "grad_clip", 1.0, 0, 0, INFINITY, 0, &cfg->optimizer.grad_clip))
    return -1;
  return 0;
}

/* lr_schedule.type "WarmupLR" | "WarmupDecayLR" | "WarmupCosineLR": DeepSpeed's parameters,
 * names and defaults (deepspeed/runtime/lr_schedules.py); loom's own keys are refused beside
 * them, and each parameter outside its scheduler. */
static int load_lr_deepspeed(ctx *c, loom_options *o, int type) {
  static const char *const loom_keys[] = {"warmup_steps", "decay", "min_lr", "decay_steps", NULL};
  static const char *const names[] = {"", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR"};
  loom_config *cfg = c->cfg;
  loom_lr_ds *d = &cfg->lr_schedule.ds;
  for (int i = 0; loom_keys[i]; i++)
    if (json_object_get(o->obj, loom_keys[i]))
      return loom__opt_error(o, loom_keys[i], c->err, c->errlen, "loom's schedule key, not one "
                             "of %s's (warmup_num_steps, warmup_type, ...)", names[type]);
  int cosine = type == LOOM_LR_WARMUP_COSINE;
  static const char *const lr_keys[] = {"warmup_min_lr", "warmup_max_lr"};
  static const char *const ratio_keys[] = {"warmup_min_ratio", "cos_min_ratio"};
  for (int i = 0; i < 2; i++) {
    const char *k = cosine ? lr_keys[i] : ratio_keys[i];
    if (json_object_get(o->obj, k))
      return loom__opt_error(o, k, c->err, c->errlen, "not a parameter of %s", names[type]);
  }
  if (type == LOOM_LR_WARMUP && json_object_get(o->obj, "total_num_steps"))
    return loom__opt_error(o, "total_num_steps", c->err, c->errlen, "not a parameter of "
                           "WarmupLR (WarmupDecayLR and WarmupCosineLR have it)");
  if (type != LOOM_LR_WARMUP && !json_object_get(o->obj, "total_num_steps"))
    return loom__opt_error(o, "total_num_steps", c->err, c->errlen, "required by %s (the step "
                           "its decay ends at)", names[type]);
  d->type = type;
  const char *wt;
  if (get_int(c, o, "warmup_num_steps", 1000, 0, LOOM_MAX_COUNT, &d->warmup_num_steps) ||
      get_int(c, o, "total_num_steps", 0, 1, LOOM_MAX_COUNT, &d->total_num_steps) ||
      loom_opt_string(o, "warmup_type", "log", &wt, c->err, c->errlen) ||
      get_num(c, o, "warmup_min_lr", 0.0, 0, 0, INFINITY, 0, &d->warmup_min_lr) ||
      get_num(c, o, "warmup_max_lr", 0.001, 0, 0, INFINITY, 0, &d->warmup_max_lr) ||
      get_num(c, o, "warmup_min_ratio", 0.0, 0, 0, 1, 0, &d->warmup_min_ratio) ||
      get_num(c, o, "cos_min_ratio", 0.0001, 0, 0, 1, 0, &d->cos_min_ratio))
    return -1;
  if (strcmp(wt, "log") != 0 && strcmp(wt, "linear") != 0)
    return bad_choice(c, o, "warmup_type", "\"log\" or \"linear\"");
  d->log_warmup = !strcmp(wt, "log");
  int w = d->warmup_num_steps < 2 ? 2 : d->warmup_num_steps; /* DeepSpeed's max(2, .) */
  if (cosine && d->total_num_steps == w) /* DeepSpeed divides by total - warmup there */
    return loom__opt_error(o, "total_num_steps", c->err, c->errlen, "expected != warmup_num_steps"
                           " (%d): WarmupCosineLR's cosine divides by their difference", w);
  /* loom's own fields, unused, at the values that describe no schedule of their own */
  cfg->lr_schedule.warmup_steps = 0;
  snprintf(cfg->lr_schedule.decay, sizeof cfg->lr_schedule.decay, "constant");
  cfg->lr_schedule.min_lr = cfg->optimizer.lr;
  return 0;
}

static int load_lr_schedule(ctx *c) {
  static const char *const keys[] = {"warmup_steps", "decay", "min_lr", "decay_steps", "type",
                                     "warmup_num_steps", "warmup_type", "total_num_steps",
                                     "warmup_min_lr", "warmup_max_lr", "warmup_min_ratio",
                                     "cos_min_ratio", NULL};
  static const char *const types[] = {"loom", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR"};
  loom_options o;
  if (section(c, "lr_schedule", keys, &o)) return -1;
  loom_config *cfg = c->cfg;
  const char *type;
  if (loom_opt_string(&o, "type", "loom", &type, c->err, c->errlen)) return -1;
  for (int t = 1; t < 4; t++)
    if (!strcmp(type, types[t])) return load_lr_deepspeed(c, &o, t);
  if (strcmp(type, "loom") != 0)
    return bad_choice(c, &o, "type", "\"loom\" (default), or DeepSpeed's \"WarmupLR\", "
                      "\"WarmupDecayLR\", \"WarmupCosineLR\"");
  for (int i = 5; keys[i]; i++)
    if (json_object_get(o.obj, keys[i]))
      return loom__opt_error(&o, keys[i], c->err, c->errlen, "a parameter of DeepSpeed's "
                             "schedulers: set lr_schedule.type (\"WarmupLR\", ...) with it");
  if (get_int(c, &o, "warmup_steps", 0, 0, INT_MAX, &cfg->lr_schedule.warmup_steps)) return -1;
  if (cfg->lr_schedule.warmup_steps > cfg->train.steps)
    return loom__opt_error(&o, "warmup_steps", c->err, c->errlen,
                           "expected <= train.steps (%d), got %d", cfg->train.steps,
                           cfg->lr_schedule.warmup_steps);
  const char *decay;
  if (loom_opt_string(&o, "decay", "cosine", &decay, c->err, c->errlen)) return -1;
  if (strcmp(decay, "cosine") != 0 && strcmp(decay, "constant") != 0)
    return bad_choice(c, &o, "decay", "\"cosine\" or \"constant\"");
  snprintf(cfg->lr_schedule.decay, sizeof cfg->lr_schedule.decay, "%s", decay);
  if (get_int(c, &o, "decay_steps", 0, 0, INT_MAX, &cfg->lr_schedule.decay_steps)) return -1;
  /* == warmup_steps is a horizon at the end of the warm-up (min_lr after it): what a finished
   * run with train.steps == warmup_steps is extended with, as its resume message advises */
  if (cfg->lr_schedule.decay_steps > 0 &&
      cfg->lr_schedule.decay_steps < cfg->lr_schedule.warmup_steps)
    return loom__opt_error(&o, "decay_steps", c->err, c->errlen,
                           "expected 0 (= train.steps) or >= warmup_steps (%d), got %d",
                           cfg->lr_schedule.warmup_steps, cfg->lr_schedule.decay_steps);
  double lr = cfg->optimizer.lr;
  json_t *v = json_object_get(o.obj, "min_lr");
  if (!v) {
    cfg->lr_schedule.min_lr = 0.1 * lr;
    return 0;
  }
  double x = json_number_value(v);
  if (!json_is_number(v) || x < 0 || x > lr) {
    char got[96], l[64];
    loom__json_repr(v, got, sizeof got);
    loom__fmt_double(lr, l, sizeof l);
    return loom__opt_error(&o, "min_lr", c->err, c->errlen,
                           "expected a number in [0, optimizer.lr (%s)], got %s", l, got);
  }
  cfg->lr_schedule.min_lr = x;
  return 0;
}

static int load_device(ctx *c) {
  loom_options o;
  /* the keys of the built-in CPU device are checked here; a plugin device (cuda.so) gets the
   * whole object and checks its own keys in create_ex, so only "type" is looked at first */
  static const char *const any_key[] = {"type", "threads", NULL};
  json_t *dv = json_object_get(c->cfg->root, "device");
  if (dv && json_is_object(dv) && json_object_get(dv, "type") &&
      json_is_string(json_object_get(dv, "type")) &&
      strcmp(json_string_value(json_object_get(dv, "type")), "cpu") != 0) {
    o = (loom_options){.file = c->file, .where = "device", .obj = dv};
  } else if (section(c, "device", any_key, &o)) {
    return -1;
  }
  loom_config *cfg = c->cfg;
  const char *type;
  if (loom_opt_string(&o, "type", "cpu", &type, c->err, c->errlen)) return -1;
  if (!*type || strlen(type) >= sizeof cfg->device.type)
    return bad_choice(c, &o, "type", "\"cpu\", a device plugin's name (\"cuda\") or a path to "
                      "a device plugin .so");
  snprintf(cfg->device.type, sizeof cfg->device.type, "%s", type);
  if (get_int(c, &o, "threads", 0, 0, LOOM_MAX_THREADS, &cfg->device.threads)) return -1;
  if (!o.obj) { /* absent: give the device layer an empty object rather than NULL */
    o.obj = json_object();
    if (!o.obj || json_object_set_new(cfg->root, "device", o.obj)) { /* defensive */
      loom__set_err(c->err, c->errlen, "%s: device: out of memory", c->file);
      return -1;
    }
  }
  cfg->device.options = o.obj;
  return 0;
}

static int load_parallel(ctx *c) {
  loom_config *cfg = c->cfg;
  json_t *v = json_object_get(cfg->root, "parallel");
  if (!v || json_is_null(v)) return 0;
  if (json_is_object(v)) { /* only if normalize_parallel ran out of memory */
    cfg->n_parallel = 1;
    return plugin_at(c, v, "parallel[0]", "ddp", &cfg->parallel[0]);
  }
  loom_options top = {.file = c->file};
  if (!json_is_array(v)) {
    char got[96];
    loom__json_repr(v, got, sizeof got);
    return loom__opt_error(&top, "parallel", c->err, c->errlen,
                           "expected an array of plugin objects like [{\"plugin\": \"ddp\"}], "
                           "got %s",
                           got);
  }
  size_t n = json_array_size(v);
  if (n > LOOM_MAX_PARALLEL)
    return loom__opt_error(&top, "parallel", c->err, c->errlen,
                           "expected at most %d plugins, got %zu", LOOM_MAX_PARALLEL, n);
  for (size_t i = 0; i < n; i++) {
    char where[32];
    snprintf(where, sizeof where, "parallel[%zu]", i);
    cfg->n_parallel = (int)i + 1; /* so loom_config_free releases what was made */
    if (plugin_at(c, json_array_get(v, i), where, "ddp", &cfg->parallel[i])) return -1;
  }
  return 0;
}

static int load_logging(ctx *c) {
  static const char *const keys[] = {"interval", "metrics", "tensorboard", "peak_gflops", NULL};
  loom_options o;
  loom_config *cfg = c->cfg;
  if (section(c, "logging", keys, &o) ||
      get_int(c, &o, "interval", 1, 1, LOOM_MAX_COUNT, &cfg->logging.interval) ||
      get_str(c, &o, "metrics", "", cfg->logging.metrics, sizeof cfg->logging.metrics) ||
      get_str(c, &o, "tensorboard", "", cfg->logging.tensorboard,
              sizeof cfg->logging.tensorboard) ||
      get_num(c, &o, "peak_gflops", 0, 0, 0, INFINITY, 0, &cfg->logging.peak_gflops))
    return -1;
  return 0;
}

static int load_sample(ctx *c) {
  static const char *const keys[] = {"prompt", "tokens", "temperature", "top_k", NULL};
  loom_options o;
  loom_config *cfg = c->cfg;
  if (section(c, "sample", keys, &o) ||
      get_str(c, &o, "prompt", "\n", cfg->sample.prompt, sizeof cfg->sample.prompt) ||
      get_int(c, &o, "tokens", 0, 0, LOOM_MAX_COUNT, &cfg->sample.tokens) ||
      get_num(c, &o, "temperature", 1.0, 0, 1, INFINITY, 0, &cfg->sample.temperature) ||
      get_int(c, &o, "top_k", 0, 0, 65536, &cfg->sample.top_k))
    return -1;
  return 0;
}

/* "init_from": {"path": FILE, "format": "safetensors" | "llmc"} (or null: none). The format
 * may be left out when FILE ends in .safetensors or .bin (llm.c's name for its model files). */
static int load_init_from(ctx *c) {
  static const char *const keys[] = {"path", "format", NULL};
  loom_config *cfg = c->cfg;
  if (json_is_null(json_object_get(cfg->root, "init_from"))) return 0;
  loom_options o;
  if (section(c, "init_from", keys, &o)) return -1;
  if (!o.obj) return 0;
  if (!json_object_get(o.obj, "path"))
    return loom__opt_error(&o, "path", c->err, c->errlen, "required key missing (expected the "
                           "model file to start from, a .safetensors or llm.c .bin file)");
  if (get_str(c, &o, "path", "", cfg->init_from.path, sizeof cfg->init_from.path) ||
      get_str(c, &o, "format", "", cfg->init_from.format, sizeof cfg->init_from.format))
    return -1;
  if (!cfg->init_from.path[0])
    return bad_choice(c, &o, "path", "a file name (a .safetensors or llm.c .bin model file)");
  size_t n = strlen(cfg->init_from.path);
  const char *f = cfg->init_from.format;
  if (!f[0]) {
    if (n > 12 && !strcmp(cfg->init_from.path + n - 12, ".safetensors")) f = "safetensors";
    else if (n > 4 && !strcmp(cfg->init_from.path + n - 4, ".bin")) f = "llmc";
    else
      return loom__opt_error(&o, "format", c->err, c->errlen, "required when path does not "
                             "end in .safetensors or .bin (expected \"safetensors\" or "
                             "\"llmc\")");
    snprintf(cfg->init_from.format, sizeof cfg->init_from.format, "%s", f);
  }
  if (strcmp(f, "safetensors") != 0 && strcmp(f, "llmc") != 0)
    return bad_choice(c, &o, "format", "\"safetensors\" or \"llmc\"");
  return 0;
}

/* Take ownership of root, apply the overrides, validate. On error cfg is released. */
static int finish(loom_config *cfg, const char *file, json_t *root, const char *const *overrides,
                  int n_overrides, char *err, size_t errlen) {
  static const char *const top_keys[] = {
      "model",  "activation_checkpointing", "data", "train", "optimizer", "lr_schedule", "device",
      "comm",   "parallel", "precision", "checkpoint", "logging",     "sample",
      "init_from", NULL};
  ctx c = {.cfg = cfg, .file = file, .err = err, .errlen = errlen};
  cfg->root = root;
  if (!json_is_object(root)) {
    char got[96];
    loom__json_repr(root, got, sizeof got);
    loom__set_err(err, errlen, "%s: expected a JSON object at the top level, got %s", file, got);
    goto fail;
  }
  for (int i = 0; overrides && i < n_overrides; i++) {
    normalize_parallel(root);
    if (apply_override(root, overrides[i], err, errlen)) goto fail;
  }
  normalize_parallel(root);
  /* a DeepSpeed file is read into loom's sections first: everything below checks the result
   * as it checks a loom config of its own */
  if (json_object_get(root, "deepspeed") &&
      loom__deepspeed_apply(root, file, &cfg->deepspeed, err, errlen))
    goto fail;
  loom_options top = {.file = file, .obj = root};
  if (loom_opt_check_keys(&top, top_keys, err, errlen) || load_model(&c) ||
      load_activation_checkpointing(&c) || load_data(&c) ||
      load_train(&c) || load_optimizer(&c) || load_lr_schedule(&c) || load_device(&c) ||
      plugin_section(&c, "comm", "mpi", "mpi", 0, &cfg->comm) || load_parallel(&c) ||
      plugin_section(&c, "precision", "fp32", "fp32", 0, &cfg->precision) ||
      plugin_section(&c, "checkpoint", "", "checkpoint", 1, &cfg->checkpoint) ||
      load_logging(&c) || load_sample(&c) || load_init_from(&c))
    goto fail;
  return 0;
fail:
  loom_config_free(cfg);
  return -1;
}

/* Zero cfg and record the file name; -1 if it does not fit. */
static int start(loom_config *cfg, const char *file, char *err, size_t errlen) {
  memset(cfg, 0, sizeof *cfg);
  size_t n = strlen(file);
  if (n >= sizeof cfg->path) {
    loom__set_err(err, errlen, "%s: file name too long (at most %zu bytes)", file,
            sizeof cfg->path - 1);
    return -1;
  }
  memcpy(cfg->path, file, n + 1);
  return 0;
}

static void syntax_error(const char *file, const json_error_t *je, char *err, size_t errlen) {
  if (je->line > 0)
    loom__set_err(err, errlen, "%s:%d:%d: %s", file, je->line, je->column, je->text);
  else
    loom__set_err(err, errlen, "%s: %s", file, je->text);
}

int loom_config_load(loom_config *cfg, const char *path, const char *const *overrides,
                     int n_overrides, char *err, size_t errlen) {
  if (!path) path = "(null)"; /* defensive: the open below fails with a message */
  if (start(cfg, path, err, errlen)) return -1;
  /* never a blocking open: a FIFO or device named as the config is refused, not waited on */
  size_t len;
  char *text = loom__read_regular(path, CONFIG_MAX_BYTES, &len, err, errlen);
  if (!text) return -1;
  json_error_t je;
  json_t *root = json_loadb(text, len, PARSE_FLAGS, &je);
  free(text);
  if (!root) {
    syntax_error(path, &je, err, errlen);
    return -1;
  }
  return finish(cfg, cfg->path, root, overrides, n_overrides, err, errlen);
}

int loom_config_load_string(loom_config *cfg, const char *name, const char *json_text,
                            const char *const *overrides, int n_overrides, char *err,
                            size_t errlen) {
  if (!name) name = "<string>";
  if (start(cfg, name, err, errlen)) return -1;
  json_error_t je;
  json_t *root = json_text ? json_loads(json_text, PARSE_FLAGS, &je) : NULL;
  if (!root) {
    if (!json_text) snprintf(je.text, sizeof je.text, "no JSON text"), je.line = 0;
    syntax_error(name, &je, err, errlen);
    return -1;
  }
  return finish(cfg, cfg->path, root, overrides, n_overrides, err, errlen);
}

void loom_config_free(loom_config *cfg) {
  if (!cfg) return;
  json_decref(cfg->comm.options);
  json_decref(cfg->precision.options);
  json_decref(cfg->checkpoint.options);
  for (int i = 0; i < LOOM_MAX_PARALLEL; i++) json_decref(cfg->parallel[i].options);
  json_decref(cfg->root);
  json_decref(cfg->deepspeed.report);
  memset(cfg, 0, sizeof *cfg);
}

int loom_config_check_batch(loom_config *cfg, int dp_size, char *err, size_t errlen) {
  loom_options o = {.file = cfg->path, .where = "train"};
  if (dp_size < 1)
    return loom__opt_error(&o, "global_batch_size", err, errlen,
                           "data-parallel size must be >= 1, got %d", dp_size);
  if (cfg->deepspeed.path[0]) {
    long long tb = cfg->train.global_batch_size, mb = cfg->train.micro_batch_size,
              ga = cfg->train.grad_accum_steps;
    if (loom__deepspeed_batch(cfg->deepspeed.path, cfg->deepspeed.given, dp_size, &tb, &mb, &ga,
                              err, errlen))
      return -1;
    if (tb > INT_MAX || ga > LOOM_MAX_COUNT || mb > LOOM_MAX_COUNT ||
        mb * cfg->train.seq_len > INT_MAX)
      return loom__opt_error(&o, "micro_batch_size", err, errlen,
                             "%lld x seq_len %d (from %s's batch rule: train_batch_size %lld, "
                             "gradient_accumulation_steps %lld) is more than %d tokens per "
                             "micro-batch or a count above 2^30",
                             mb, cfg->train.seq_len, cfg->deepspeed.path, tb, ga, INT_MAX);
    cfg->train.global_batch_size = (int)tb;
    cfg->train.micro_batch_size = (int)mb;
    cfg->train.grad_accum_steps = (int)ga;
    return 0;
  }
  int b = cfg->train.micro_batch_size, a = cfg->train.grad_accum_steps;
  long long want = (long long)b * a * dp_size;
  if (want > INT_MAX)
    return loom__opt_error(&o, "global_batch_size", err, errlen,
                           "micro_batch_size %d x grad_accum_steps %d x data-parallel size %d "
                           "(= %lld) is larger than %d",
                           b, a, dp_size, want, INT_MAX);
  if (cfg->train.global_batch_size == 0) {
    cfg->train.global_batch_size = (int)want;
    return 0;
  }
  if (cfg->train.global_batch_size != want)
    return loom__opt_error(&o, "global_batch_size", err, errlen,
                           "%d != micro_batch_size %d x grad_accum_steps %d x data-parallel size "
                           "%d (= %lld)",
                           cfg->train.global_batch_size, b, a, dp_size, want);
  return 0;
}

int loom_config_deepspeed_report(FILE *out, const char *path, const char *const *overrides,
                                 int n_overrides) {
  char err[1024];
  size_t len;
  char *text = path ? loom__read_regular(path, CONFIG_MAX_BYTES, &len, err, sizeof err) : NULL;
  if (!text) return 0;
  json_t *root = json_loadb(text, len, PARSE_FLAGS, NULL);
  free(text);
  int n = 0;
  for (int i = 0; json_is_object(root) && overrides && i < n_overrides; i++) {
    normalize_parallel(root);
    if (apply_override(root, overrides[i], err, sizeof err)) goto out;
  }
  normalize_parallel(root);
  if (!json_is_object(root) || !json_object_get(root, "deepspeed")) goto out;
  loom_deepspeed ds = {0};
  loom__deepspeed_apply(root, path, &ds, err, sizeof err); /* the load reports its error */
  size_t i;
  json_t *line;
  json_array_foreach(ds.report, i, line) loom__put_line(out, "loom: deepspeed: ",
                                                        json_string_value(line));
  n = (int)json_array_size(ds.report);
  json_decref(ds.report);
out:
  json_decref(root);
  return n;
}
