/* DeepSpeed's config keys (https://www.deepspeed.ai/docs/config-json/) and the fate of each in
 * loom: mapped onto loom's schema, accepted with a one-line note, or refused with why. The
 * table below is the list docs/config.md ("DeepSpeed configs") shows; tests/integration/cli/
 * deepspeed_table.sh feeds each of that page's rows to `loom check` and compares the fates.
 *
 * Mapped keys keep DeepSpeed's meaning exactly: where loom computes something else (weight
 * decay on every parameter, a partial offload, a schedule loom has no form of) the key is
 * refused rather than approximated. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "config_internal.h"
#include "deepspeed_internal.h"

typedef enum { T_ANY, T_OBJ, T_BOOL, T_INT, T_POS, T_NUM, T_STR } ds_type;

typedef struct ds_key ds_key;
typedef void (*ds_fn)(ds_ctx *c, const ds_key *k, const char *path, json_t *v);

struct ds_key {
  const char *path; /* JSON path in the DeepSpeed file */
  ds_type type;
  ds_fn fn;
  const char *to;   /* map: the loom path; note/only: the accepted note */
  const char *why;  /* only/refuse: why it is refused */
  const char *dflt; /* only: the one value accepted (JSON text) */
  int stages;       /* zero keys: bit s = meaningful at ZeRO stage s */
};

/* ---- lines ------------------------------------------------------------------------------- */

void loom__ds_line(ds_ctx *c, const char *path, const json_t *v, const char *fmt, ...) {
  char msg[640], got[96] = "", line[900];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (v) loom__json_repr(v, got, sizeof got);
  snprintf(line, sizeof line, "%s: %s%s%s: %s", c->file, path, v ? " = " : "", got, msg);
  for (char *p = line; *p; p++)
    if ((unsigned char)*p < 0x20) *p = '?'; /* one line, whatever the file's keys hold */
  json_array_append_new(c->ds->report, json_string(line));
  if (!strncmp(msg, "refused", 7) && c->n_refused++ == 0)
    snprintf(c->first_refused, sizeof c->first_refused, "%s", line);
  else if (!strncmp(msg, "mapped", 6)) c->ds->n_mapped++;
  else if (!strncmp(msg, "accepted", 8)) c->ds->n_accepted++;
}

void loom__ds_shown(const char *to, char *buf, size_t n) {
  if (!strncmp(to, "@zero.", 6)) snprintf(buf, n, "parallel[0].%s", to + 6);
  else if (!strncmp(to, "@fp16.", 6)) snprintf(buf, n, "precision.%s", to + 6);
  else snprintf(buf, n, "%s", to);
}

void loom__ds_put(ds_ctx *c, const char *to, json_t *value, const char *from) {
  char shown[128];
  loom__ds_shown(to, shown, sizeof shown);
  json_object_set_new(c->origin, shown, json_string(from));
  if (!strncmp(to, "@zero.", 6)) {
    json_object_set_new(c->zero, to + 6, value);
  } else if (!strncmp(to, "@fp16.", 6)) {
    json_object_set_new(c->fp16_opts, to + 6, value);
  } else {
    char sec[64];
    const char *dot = strchr(to, '.');
    size_t n = dot ? (size_t)(dot - to) : 0;
    if (!dot || n >= sizeof sec) { /* defensive: every table target is SECTION.KEY */
      json_decref(value);
      return;
    }
    memcpy(sec, to, n);
    sec[n] = '\0';
    json_t *s = json_object_get(c->hard, sec);
    if (!s) json_object_set_new(c->hard, sec, s = json_object());
    json_object_set_new(s, dot + 1, value);
  }
}

static void mapped(ds_ctx *c, const char *path, json_t *v, const char *to, json_t *value) {
  char shown[128], val[96];
  loom__ds_shown(to, shown, sizeof shown);
  loom__json_repr(value, val, sizeof val);
  loom__ds_line(c, path, v, "mapped -> %s = %s", shown, val);
  loom__ds_put(c, to, value, path);
}

/* ---- types ------------------------------------------------------------------------------- */

/* An integral number (DeepSpeed files write bucket sizes as 5e8) as an integer. */
static int as_int(const json_t *v, long long *out) {
  if (json_is_integer(v)) {
    *out = json_integer_value(v);
    return 1;
  }
  double x = json_real_value(v);
  if (json_is_real(v) && x == (double)(long long)x && x >= -9e15 && x <= 9e15) {
    *out = (long long)x;
    return 1;
  }
  return 0;
}

/* 1 when v has the key's type; else a refused line saying what was expected. */
static int type_ok(ds_ctx *c, const ds_key *k, const char *path, json_t *v) {
  long long i;
  int ok;
  static const char *const what[] = {"", "an object", "true or false", "an integer >= 0",
                                     "an integer >= 1", "a number", "a string"};
  switch (k->type) {
  case T_OBJ: ok = json_is_object(v); break;
  case T_BOOL: ok = json_is_boolean(v); break;
  case T_INT: ok = as_int(v, &i) && i >= 0; break;
  case T_POS: ok = as_int(v, &i) && i >= 1; break;
  case T_NUM: ok = json_is_number(v); break;
  case T_STR: ok = json_is_string(v); break;
  default: ok = 1;
  }
  if (ok) return 1;
  if (json_is_string(v) && !strcmp(json_string_value(v), "auto"))
    loom__ds_line(c, path, v, "refused: \"auto\" is a placeholder Hugging Face's Trainer fills "
                  "in before DeepSpeed reads the file: write %s", what[k->type]);
  else
    loom__ds_line(c, path, v, "refused: expected %s", what[k->type]);
  return 0;
}

/* ---- fates ------------------------------------------------------------------------------- */

static void h_map(ds_ctx *c, const ds_key *k, const char *path, json_t *v) {
  if (!type_ok(c, k, path, v)) return;
  long long i;
  json_t *val = (k->type == T_INT || k->type == T_POS) && as_int(v, &i) ? json_integer(i)
                                                                        : json_deep_copy(v);
  mapped(c, path, v, k->to, val);
}

static void h_note(ds_ctx *c, const ds_key *k, const char *path, json_t *v) {
  if (type_ok(c, k, path, v)) loom__ds_line(c, path, v, "accepted: %s", k->to);
}

static void h_refuse(ds_ctx *c, const ds_key *k, const char *path, json_t *v) {
  loom__ds_line(c, path, v, "refused: %s", k->why);
}

/* Accepted (with the note) only at the one value loom's behaviour matches. */
static void h_only(ds_ctx *c, const ds_key *k, const char *path, json_t *v) {
  if (!type_ok(c, k, path, v)) return;
  json_t *d = json_loads(k->dflt, JSON_DECODE_ANY, NULL);
  int same = d && (json_equal(d, v) || (json_is_number(d) && json_is_number(v) &&
                                        json_number_value(d) == json_number_value(v)));
  json_decref(d);
  if (same) loom__ds_line(c, path, v, "accepted: %s", k->to);
  else loom__ds_line(c, path, v, "refused: %s (only %s is)", k->why, k->dflt);
}

/* A monitor or feature section: accepted while "enabled" is false, refused when true. */
static void h_switch(ds_ctx *c, const ds_key *k, const char *path, json_t *v) {
  if (!type_ok(c, k, path, v)) return;
  if (json_is_true(json_object_get(v, "enabled")))
    loom__ds_line(c, path, v, "refused: %s", k->why);
  else
    loom__ds_line(c, path, v, "accepted: not enabled (%s)", k->to);
}

static void h_section(ds_ctx *c, const ds_key *k, const char *path, json_t *v) {
  if (type_ok(c, k, path, v)) loom__ds_walk(c, path, v);
}

static void h_stage(ds_ctx *c, const ds_key *k, const char *path, json_t *v) {
  long long s;
  if (!type_ok(c, k, path, v)) return;
  if (!as_int(v, &s) || s > 3) {
    loom__ds_line(c, path, v, "refused: expected 0, 1, 2 or 3 (DeepSpeed's ZeRO stages)");
    return;
  }
  static const char *const plugin[] = {"ddp", "zero1", "zero2", "zero3"};
  mapped(c, path, v, "@zero.plugin", json_string(plugin[s]));
}

static void h_precision(ds_ctx *c, const ds_key *k, const char *path, json_t *v) {
  if (!type_ok(c, k, path, v)) return;
  int is_fp16 = !strcmp(k->to, "fp16");
  if (c->fp16 && c->bf16)
    loom__ds_line(c, path, v, "refused: fp16 and bf16 are both enabled (DeepSpeed refuses "
                  "that too): enable one");
  else if (json_is_true(v))
    loom__ds_line(c, path, v, "mapped -> precision.plugin = \"%s\"%s", k->to,
                  is_fp16 ? " (dynamic loss scaling unless fp16.loss_scale > 0)" : "");
  else
    loom__ds_line(c, path, v, "accepted: %s off", k->to);
}

/* fp16's scaler keys: loom's fp16 plugin has DeepSpeed's names and meaning. */
static void h_fp16(ds_ctx *c, const ds_key *k, const char *path, json_t *v) {
  if (!c->fp16) {
    if (type_ok(c, k, path, v))
      loom__ds_line(c, path, v, "accepted: no effect, fp16.enabled is not true");
    return;
  }
  h_map(c, k, path, v);
}

/* A zero_optimization key meaningful at the stages in k->stages. */
static void h_zero(ds_ctx *c, const ds_key *k, const char *path, json_t *v) {
  if (!(k->stages >> c->stage & 1)) {
    if (type_ok(c, k, path, v))
      loom__ds_line(c, path, v, "accepted: no effect at ZeRO stage %d (DeepSpeed ignores it "
                    "there too)", c->stage);
    return;
  }
  h_map(c, k, path, v);
}

static void h_prefetch(ds_ctx *c, const ds_key *k, const char *path, json_t *v) {
  if (!type_ok(c, k, path, v)) return;
  if (c->stage != 3) {
    loom__ds_line(c, path, v, "accepted: no effect at ZeRO stage %d", c->stage);
    return;
  }
  loom__ds_line(c, path, v, "mapped -> parallel[0].prefetch = %s (loom gathers the next unit "
                "whole, not a bucket of this size)", json_number_value(v) > 0 ? "true" : "false");
  loom__ds_put(c, "@zero.prefetch", json_boolean(json_number_value(v) > 0), path);
}

static void h_mics(ds_ctx *c, const ds_key *k, const char *path, json_t *v) {
  long long n;
  if (!json_is_number(v) || !as_int(v, &n)) {
    loom__ds_line(c, path, v, "refused: expected an integer (-1: off)");
  } else if (n <= 0) {
    loom__ds_line(c, path, v, "accepted: MiCS off (DeepSpeed's default -1)");
  } else if (c->stage != 3) {
    loom__ds_line(c, path, v, "refused: MiCS shards ZeRO-3's states: needs stage 3");
  } else {
    (void)k;
    mapped(c, path, v, "@zero.shard_size", json_integer(n));
  }
}

static void h_offload_dev(ds_ctx *c, const ds_key *k, const char *path, json_t *v) {
  if (!type_ok(c, k, path, v)) return;
  const char *d = json_string_value(v);
  int param = !strcmp(k->to, "param");
  if (!strcmp(d, "none")) {
    loom__ds_line(c, path, v, "accepted: no offload");
  } else if (!strcmp(d, "nvme")) {
    loom__ds_line(c, path, v, "refused: NVMe offload (ZeRO-Infinity) is not built: loom "
                  "offloads to host memory only (\"cpu\")");
  } else if (strcmp(d, "cpu") != 0) {
    loom__ds_line(c, path, v, "refused: expected \"cpu\", \"nvme\" or \"none\"");
  } else if (!param) {
    if (c->stage < 1)
      loom__ds_line(c, path, v, "refused: DeepSpeed offloads the optimizer under ZeRO stages "
                    "1-3 only (zero_optimization.stage is %d)", c->stage);
    else
      loom__ds_line(c, path, v, "mapped -> parallel[1] = {\"plugin\": \"cpu_offload\"} "
                    "(AdamW on the host, ZeRO-Offload)");
  } else if (c->stage != 3) {
    loom__ds_line(c, path, v, "refused: parameter offload is ZeRO-3's (zero_optimization.stage "
                  "is %d)", c->stage);
  } else if (c->cpu_device) {
    loom__ds_line(c, path, v, "accepted: on the CPU device the parameters already live in "
                  "host memory");
  } else {
    loom__ds_line(c, path, v, "refused: on a GPU device, ZeRO-3 parameters kept in pinned host "
                  "memory and gathered per unit are not built: there was no GPU to measure "
                  "such an offload on (offload_optimizer works)");
  }
}

static void h_offload_pin(ds_ctx *c, const ds_key *k, const char *path, json_t *v) {
  if (!type_ok(c, k, path, v)) return;
  if (!c->offload_opt) {
    loom__ds_line(c, path, v, "accepted: no effect without offload_optimizer.device \"cpu\"");
    return;
  }
  (void)k;
  c->offload_pin = json_is_true(v);
  loom__ds_line(c, path, v, "mapped -> parallel[1].offload_optimizer.pin_memory = %s",
                c->offload_pin ? "true" : "false");
  json_object_set_new(c->origin, "parallel[1]", json_string(path));
}

static void h_opt_type(ds_ctx *c, const ds_key *k, const char *path, json_t *v) {
  if (!type_ok(c, k, path, v)) return;
  const char *t = json_string_value(v);
  if (!strcasecmp(t, "adamw") || !strcasecmp(t, "adam"))
    mapped(c, path, v, "optimizer.name", json_string("adamw"));
  else
    loom__ds_line(c, path, v, "refused: loom's optimizer is AdamW (DeepSpeed's \"Adam\" with "
                  "adam_w_mode, or \"AdamW\"); %s is not built", t);
}

static void h_betas(ds_ctx *c, const ds_key *k, const char *path, json_t *v) {
  if (!json_is_array(v) || json_array_size(v) != 2 || !json_is_number(json_array_get(v, 0)) ||
      !json_is_number(json_array_get(v, 1))) {
    loom__ds_line(c, path, v, "refused: expected [beta1, beta2]");
    return;
  }
  mapped(c, path, v, k->to, json_deep_copy(v));
}

static void h_weight_decay(ds_ctx *c, const ds_key *k, const char *path, json_t *v) {
  if (!type_ok(c, k, path, v)) return;
  if (json_number_value(v) == 0)
    mapped(c, path, v, k->to, json_real(0));
  else
    loom__ds_line(c, path, v, "refused: DeepSpeed's optimizer decays every parameter; loom's "
                  "AdamW decays the 2-D weights only (not biases, LayerNorm, wpe): not the same "
                  "run (0 maps)");
}

static const char *const SCHEDULERS[] = {"", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR"};

static void h_sched_type(ds_ctx *c, const ds_key *k, const char *path, json_t *v) {
  if (!type_ok(c, k, path, v)) return;
  if (c->sched_type > 0)
    mapped(c, path, v, "lr_schedule.type", json_string(SCHEDULERS[c->sched_type]));
  else
    loom__ds_line(c, path, v, "refused: loom has DeepSpeed's WarmupLR, WarmupDecayLR and "
                  "WarmupCosineLR; %s is not built", json_string_value(v));
}

/* A scheduler parameter of the schedulers in k->stages (bit t = loom_lr_type t). */
static void h_sched(ds_ctx *c, const ds_key *k, const char *path, json_t *v) {
  if (c->sched_type > 0 && !(k->stages >> c->sched_type & 1)) {
    loom__ds_line(c, path, v, "refused: not a parameter of %s (DeepSpeed raises a TypeError)",
                  SCHEDULERS[c->sched_type]);
    return;
  }
  if (c->sched_type <= 0) {
    if (type_ok(c, k, path, v))
      loom__ds_line(c, path, v, "accepted: no effect without a scheduler.type loom has");
    return;
  }
  h_map(c, k, path, v);
}

#define Z123 14
#define Z12 6
/* schedulers (bits of loom_lr_type) */
#define S_LR 6     /* WarmupLR, WarmupDecayLR */
#define S_TOTAL 12 /* WarmupDecayLR, WarmupCosineLR */
#define S_COS 8    /* WarmupCosineLR */
#define S_ALL 14

static const char NOTE_PERF[] = "a performance knob of DeepSpeed's own implementation, no "
                                "effect on loom's (same arithmetic)";

static const ds_key KEYS[] = {
    /* batch, clipping, logging */
    {"train_batch_size", T_POS, h_map, "train.global_batch_size", 0, 0, 0},
    {"train_micro_batch_size_per_gpu", T_POS, h_map, "train.micro_batch_size", 0, 0, 0},
    {"gradient_accumulation_steps", T_POS, h_map, "train.grad_accum_steps", 0, 0, 0},
    {"gradient_clipping", T_NUM, h_map, "optimizer.grad_clip", 0, 0, 0},
    {"steps_per_print", T_POS, h_map, "logging.interval", 0, 0, 0},
    {"wall_clock_breakdown", T_BOOL, h_note, "loom's metrics record times every step "
     "(step_ms, tokens_per_s) whatever this says", 0, 0, 0},
    {"memory_breakdown", T_BOOL, h_note, "loom's metrics record each memory category every "
     "step", 0, 0, 0},
    {"dump_state", T_BOOL, h_note, "`loom check` prints the mapping; no engine state to dump",
     0, 0, 0},
    {"prescale_gradients", T_BOOL, h_only, "false: gradients summed, then averaged, as loom "
     "does", "loom divides after the sum", "false", 0},
    {"gradient_predivide_factor", T_NUM, h_only, "1: no predivision", "loom does not split the "
     "average into a pre- and a post-division", "1.0", 0},
    {"sparse_gradients", T_BOOL, h_only, "false: dense gradients", "loom's embedding gradient "
     "is dense", "false", 0},
    {"zero_allow_untested_optimizer", T_BOOL, h_note, "loom's ZeRO plugins run loom's AdamW "
     "only", 0, 0, 0},
    {"zero_force_ds_cpu_optimizer", T_BOOL, h_note, "cpu_offload runs loom's own host AdamW",
     0, 0, 0},
    {"dataloader_drop_last", T_BOOL, h_note, "loom reads token shards sequentially, no "
     "DataLoader", 0, 0, 0},
    {"communication_data_type", T_ANY, h_refuse, 0, "loom's sync plugins choose the wire "
     "dtype themselves (ddp's communication_data_type is a loom config option)", 0, 0},
    /* precision */
    {"fp16", T_OBJ, h_section, 0, 0, 0, 0},
    {"fp16.enabled", T_BOOL, h_precision, "fp16", 0, 0, 0},
    {"fp16.loss_scale", T_NUM, h_fp16, "@fp16.loss_scale", 0, 0, 0},
    {"fp16.initial_scale_power", T_INT, h_fp16, "@fp16.initial_scale_power", 0, 0, 0},
    {"fp16.loss_scale_window", T_POS, h_fp16, "@fp16.loss_scale_window", 0, 0, 0},
    {"fp16.hysteresis", T_POS, h_fp16, "@fp16.hysteresis", 0, 0, 0},
    {"fp16.consecutive_hysteresis", T_BOOL, h_fp16, "@fp16.consecutive_hysteresis", 0, 0, 0},
    {"fp16.min_loss_scale", T_NUM, h_fp16, "@fp16.min_loss_scale", 0, 0, 0},
    {"fp16.auto_cast", T_BOOL, h_only, "false: the model's own dtypes", "loom casts nothing "
     "to fp16 behind the model's back", "false", 0},
    {"fp16.fp16_master_weights_and_grads", T_BOOL, h_only, "false: fp32 master weights",
     "loom keeps the fp32 master", "false", 0},
    {"bf16", T_OBJ, h_section, 0, 0, 0, 0},
    {"bf16.enabled", T_BOOL, h_precision, "bf16", 0, 0, 0},
    {"bf16.immediate_grad_update", T_BOOL, h_note, NOTE_PERF, 0, 0, 0},
    {"bfloat16", T_OBJ, h_section, 0, 0, 0, 0},
    {"bfloat16.enabled", T_BOOL, h_precision, "bf16", 0, 0, 0},
    {"amp", T_OBJ, h_switch, "Apex AMP", "Apex AMP is PyTorch's; use fp16 or bf16", 0, 0},
    {"data_types", T_OBJ, h_section, 0, 0, 0, 0},
    {"data_types.grad_accum_dtype", T_STR, h_only, "\"fp32\": loom accumulates micro-batches' "
     "16-bit gradients in fp32", "loom accumulates in fp32", "\"fp32\"", 0},
    /* ZeRO */
    {"zero_optimization", T_OBJ, h_section, 0, 0, 0, 0},
    {"zero_optimization.stage", T_INT, h_stage, 0, 0, 0, 0},
    {"zero_optimization.overlap_comm", T_BOOL, h_zero, "@zero.overlap_comm", 0, 0, Z123},
    {"zero_optimization.reduce_bucket_size", T_POS, h_zero, "@zero.reduce_bucket_size", 0, 0,
     Z123},
    {"zero_optimization.allgather_bucket_size", T_POS, h_zero, "@zero.allgather_bucket_size",
     0, 0, Z12},
    {"zero_optimization.allgather_partitions", T_BOOL, h_note, "loom all-gathers the "
     "partitions (true) in either case", 0, 0, 0},
    {"zero_optimization.reduce_scatter", T_BOOL, h_only, "true: loom's ZeRO reduce-scatters",
     "loom's ZeRO always reduce-scatters", "true", 0},
    {"zero_optimization.contiguous_gradients", T_BOOL, h_note, "loom's gradients are one "
     "flat buffer: always contiguous", 0, 0, 0},
    {"zero_optimization.round_robin_gradients", T_BOOL, h_note, NOTE_PERF, 0, 0, 0},
    {"zero_optimization.load_from_fp32_weights", T_BOOL, h_note, "loom's checkpoints "
     "hold the fp32 master; a resume loads it", 0, 0, 0},
    {"zero_optimization.elastic_checkpoint", T_BOOL, h_note, "loom's checkpoints reshard "
     "to any world size", 0, 0, 0},
    {"zero_optimization.ignore_unused_parameters", T_BOOL, h_note, "every GPT parameter "
     "gets a gradient", 0, 0, 0},
    {"zero_optimization.sub_group_size", T_POS, h_note, NOTE_PERF, 0, 0, 0},
    {"zero_optimization.stage3_max_live_parameters", T_POS, h_note, "loom's ZeRO-3 holds "
     "one unit gathered (two with prefetch)", 0, 0, 0},
    {"zero_optimization.stage3_max_reuse_distance", T_INT, h_note, "loom's ZeRO-3 "
     "releases a unit after its pass", 0, 0, 0},
    {"zero_optimization.stage3_prefetch_bucket_size", T_INT, h_prefetch, 0, 0, 0, 0},
    {"zero_optimization.stage3_param_persistence_threshold", T_INT, h_note, "loom's "
     "ZeRO-3 shards every tensor", 0, 0, 0},
    {"zero_optimization.stage3_gather_16bit_weights_on_model_save", T_BOOL, h_note,
     "`loom export` writes the whole model from a checkpoint", 0, 0, 0},
    {"zero_optimization.stage3_gather_fp16_weights_on_model_save", T_BOOL, h_note,
     "`loom export` writes the whole model from a checkpoint", 0, 0, 0},
    {"zero_optimization.mics_shard_size", T_ANY, h_mics, 0, 0, 0, 0},
    {"zero_optimization.mics_hierarchical_params_gather", T_BOOL, h_only, "false: one-step "
     "gather, as loom's",
     "loom gathers parameters in one step", "false", 0},
    {"zero_optimization.zero_hpz_partition_size", T_POS, h_only, "1: no secondary partition",
     "ZeRO++'s hierarchical partitioning is not built", "1", 0},
    {"zero_optimization.zero_quantized_weights", T_BOOL, h_only, "false: full-precision "
     "weights", "ZeRO++'s quantized "
     "weights are not built", "false", 0},
    {"zero_optimization.zero_quantized_gradients", T_BOOL, h_only, "false: full-precision "
     "gradients", "ZeRO++'s "
     "quantized gradients are not built", "false", 0},
    {"zero_optimization.cpu_offload", T_BOOL, h_refuse, 0, "DeepSpeed's deprecated form: write "
     "offload_optimizer {\"device\": \"cpu\"}", 0, 0},
    {"zero_optimization.offload_optimizer", T_OBJ, h_section, 0, 0, 0, 0},
    {"zero_optimization.offload_optimizer.device", T_STR, h_offload_dev, "optimizer", 0, 0, 0},
    {"zero_optimization.offload_optimizer.pin_memory", T_BOOL, h_offload_pin, 0, 0, 0, 0},
    {"zero_optimization.offload_optimizer.nvme_path", T_STR, h_note, "used with device "
     "\"nvme\" only", 0, 0, 0},
    {"zero_optimization.offload_optimizer.buffer_count", T_POS, h_note, "NVMe's buffers", 0, 0,
     0},
    {"zero_optimization.offload_optimizer.fast_init", T_BOOL, h_note, "NVMe's", 0, 0, 0},
    {"zero_optimization.offload_optimizer.ratio", T_NUM, h_only, "1: the whole optimizer on "
     "the host", "a partial offload (ZeRO-Offload++) is not built", "1.0", 0},
    {"zero_optimization.offload_param", T_OBJ, h_section, 0, 0, 0, 0},
    {"zero_optimization.offload_param.device", T_STR, h_offload_dev, "param", 0, 0, 0},
    {"zero_optimization.offload_param.pin_memory", T_BOOL, h_note, "nothing to pin: the "
     "parameters stay where the device keeps them", 0, 0, 0},
    {"zero_optimization.offload_param.nvme_path", T_STR, h_note, "used with device \"nvme\" "
     "only", 0, 0, 0},
    {"zero_optimization.offload_param.buffer_count", T_POS, h_note, "NVMe's buffers", 0, 0, 0},
    {"zero_optimization.offload_param.buffer_size", T_POS, h_note, "NVMe's buffers", 0, 0, 0},
    {"zero_optimization.offload_param.max_in_cpu", T_POS, h_note, "NVMe's", 0, 0, 0},
    /* optimizer and scheduler */
    {"optimizer", T_OBJ, h_section, 0, 0, 0, 0},
    {"optimizer.type", T_STR, h_opt_type, 0, 0, 0, 0},
    {"optimizer.params", T_OBJ, h_section, 0, 0, 0, 0},
    {"optimizer.params.lr", T_NUM, h_map, "optimizer.lr", 0, 0, 0},
    {"optimizer.params.betas", T_ANY, h_betas, "optimizer.betas", 0, 0, 0},
    {"optimizer.params.eps", T_NUM, h_map, "optimizer.eps", 0, 0, 0},
    {"optimizer.params.weight_decay", T_NUM, h_weight_decay, "optimizer.weight_decay", 0, 0, 0},
    {"optimizer.params.adam_w_mode", T_BOOL, h_only, "true: decoupled weight decay (AdamW)",
     "Adam with L2 regularisation is not built", "true", 0},
    {"optimizer.params.bias_correction", T_BOOL, h_only, "true: loom's AdamW corrects the "
     "moments' bias", "loom's AdamW always corrects", "true", 0},
    {"optimizer.params.amsgrad", T_BOOL, h_only, "false: Adam's own second moment",
     "AMSGrad is not built", "false", 0},
    {"optimizer.params.torch_adam", T_BOOL, h_note, "which implementation DeepSpeed picks; the "
     "same arithmetic", 0, 0, 0},
    {"optimizer.legacy_fusion", T_BOOL, h_note, NOTE_PERF, 0, 0, 0},
    {"scheduler", T_OBJ, h_section, 0, 0, 0, 0},
    {"scheduler.type", T_STR, h_sched_type, 0, 0, 0, 0},
    {"scheduler.params", T_OBJ, h_section, 0, 0, 0, 0},
    {"scheduler.params.warmup_min_lr", T_NUM, h_sched, "lr_schedule.warmup_min_lr", 0, 0, S_LR},
    {"scheduler.params.warmup_max_lr", T_NUM, h_sched, "lr_schedule.warmup_max_lr", 0, 0, S_LR},
    {"scheduler.params.warmup_num_steps", T_INT, h_sched, "lr_schedule.warmup_num_steps", 0, 0,
     S_ALL},
    {"scheduler.params.warmup_type", T_STR, h_sched, "lr_schedule.warmup_type", 0, 0, S_ALL},
    {"scheduler.params.total_num_steps", T_POS, h_sched, "lr_schedule.total_num_steps", 0, 0,
     S_TOTAL},
    {"scheduler.params.warmup_min_ratio", T_NUM, h_sched, "lr_schedule.warmup_min_ratio", 0, 0,
     S_COS},
    {"scheduler.params.cos_min_ratio", T_NUM, h_sched, "lr_schedule.cos_min_ratio", 0, 0, S_COS},
    {"scheduler.params.last_batch_iteration", T_ANY, h_only, "-1: a fresh start (a resumed loom "
     "run continues at its checkpoint's step)", "loom's scheduler starts at -1", "-1", 0},
    /* sections of DeepSpeed features loom's DeepSpeed import leaves to the loom config */
    {"activation_checkpointing", T_OBJ, h_note, "it configures deepspeed.checkpointing calls "
     "in the model's code; loom's is the loom config's activation_checkpointing", 0, 0, 0},
    {"checkpoint", T_OBJ, h_note, "DeepSpeed's checkpoint engine; loom's is the loom config's "
     "checkpoint section", 0, 0, 0},
    {"aio", T_OBJ, h_note, "NVMe's asynchronous I/O (NVMe offload is refused)", 0, 0, 0},
    {"tensorboard", T_OBJ, h_switch, "logging.tensorboard", "loom writes TensorBoard events "
     "where the loom config's logging.tensorboard says: set it there", 0, 0},
    {"wandb", T_OBJ, h_switch, "logging", "loom writes TensorBoard events (logging.tensorboard "
     "in the loom config); `wandb sync` uploads them", 0, 0},
    {"csv_monitor", T_OBJ, h_switch, "logging", "loom writes JSONL metrics (logging.metrics in "
     "the loom config)", 0, 0},
    {"comms_logger", T_OBJ, h_switch, "comm", "loom's metrics count each step's comm_bytes "
     "always", 0, 0},
    {"flops_profiler", T_OBJ, h_switch, "MFU", "loom's metrics report MFU from "
     "logging.peak_gflops in the loom config", 0, 0},
    {"elasticity", T_OBJ, h_switch, "elastic", "`loom launch --min-nodes` restarts on fewer "
     "nodes with the same global batch; DeepSpeed's elastic batch search is not built", 0, 0},
    {"autotuning", T_OBJ, h_switch, "autotuning", "the autotuner is not built (`loom "
     "estimate` predicts memory)", 0, 0},
    {"curriculum_learning", T_OBJ, h_switch, "curriculum", "curriculum learning is not built",
     0, 0},
    {"data_efficiency", T_OBJ, h_switch, "data efficiency", "DeepSpeed's data efficiency "
     "library is not built", 0, 0},
    {"compression_training", T_ANY, h_refuse, 0, "DeepSpeed's compression library is not "
     "built", 0, 0},
    {"sparse_attention", T_ANY, h_refuse, 0, "sparse attention is not built (loom's attention: "
     "model.attention in the loom config)", 0, 0},
    {"pipeline", T_ANY, h_refuse, 0, "DeepSpeed's PipelineModule settings; loom's pipeline "
     "plugin is a loom config parallel entry", 0, 0},
    {"tensor_parallel", T_ANY, h_refuse, 0, "DeepSpeed's AutoTP settings; loom's "
     "tensor_parallel plugin is a loom config parallel entry", 0, 0},
    {"sequence_parallel_size", T_ANY, h_refuse, 0, "sequence parallelism (Ulysses) is not "
     "built", 0, 0},
};

static const ds_key *find(const char *path) {
  for (size_t i = 0; i < sizeof KEYS / sizeof KEYS[0]; i++)
    if (!strcmp(KEYS[i].path, path)) return &KEYS[i];
  return NULL;
}

void loom__ds_walk(ds_ctx *c, const char *prefix, json_t *v) {
  const char *key;
  json_t *val;
  json_object_foreach(v, key, val) {
    if (key[0] == '_') continue; /* loom's comment convention holds in this file too */
    char path[256];
    snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", key);
    const ds_key *k = find(path);
    if (k) {
      k->fn(c, k, path, val);
      continue;
    }
    /* the keys loom knows at this level, for the message: as many as fit */
    char known[360] = "";
    size_t n = 0, plen = strlen(prefix);
    int cut = 0;
    for (size_t i = 0; i < sizeof KEYS / sizeof KEYS[0] && !cut; i++) {
      const char *p = KEYS[i].path;
      if (plen && (strncmp(p, prefix, plen) || p[plen] != '.')) continue;
      const char *rest = plen ? p + plen + 1 : p;
      if (strchr(rest, '.')) continue;
      if (n + strlen(rest) + 2 >= sizeof known) cut = 1;
      else n += (size_t)snprintf(known + n, sizeof known - n, "%s%s", n ? ", " : "", rest);
    }
    loom__ds_line(c, path, NULL, "refused: unknown key (expected one of: %s%s)", known,
                  cut ? ", ...: docs/config.md, \"DeepSpeed configs\", lists them all" : "");
  }
}
