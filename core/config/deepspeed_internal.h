/* What deepspeed.c (reading, merging, the batch rule) and deepspeed_keys.c (the key table and
 * each key's fate) share. */
#ifndef LOOM_CORE_CONFIG_DEEPSPEED_INTERNAL_H
#define LOOM_CORE_CONFIG_DEEPSPEED_INTERNAL_H

#include "deepspeed.h"

typedef struct ds_ctx {
  const char *file;     /* the DeepSpeed file, first word of every line */
  int cpu_device;       /* the loom config's device is the built-in CPU one */
  loom_deepspeed *ds;   /* report and counts */
  int n_refused;
  char first_refused[900]; /* the first refused line, the load's error */
  /* the keys that decide the others' fate, read before the walk */
  int stage;            /* zero_optimization.stage, 0 when absent (DeepSpeed's default) */
  int has_zero;         /* the file has a zero_optimization section */
  int fp16, bf16;       /* fp16.enabled / bf16.enabled are true */
  int offload_opt;      /* zero_optimization.offload_optimizer.device is "cpu" */
  int offload_pin;      /* its pin_memory: -1 absent, else 0/1 */
  int has_optimizer, has_clip, has_sched;
  int sched_type;       /* scheduler.type as a loom_lr_type; -1 one loom lacks, 0 absent */
  /* what the keys map to, in loom's schema */
  json_t *hard;         /* {"train": {...}, "optimizer": {...}, "lr_schedule": {...}, ...} */
  json_t *zero;         /* options of parallel[0] (the ZeRO stage's plugin) */
  json_t *fp16_opts;    /* options of the fp16 precision plugin */
  json_t *origin;       /* loom path shown -> the DeepSpeed key it came from */
} ds_ctx;

/* Walk the object v at JSON path `prefix` ("" = the top level): one report line per key, its
 * mapping stored in c. Refusals are counted in c, never a stop: every key gets its line. */
void loom__ds_walk(ds_ctx *c, const char *prefix, json_t *v);

/* Append one report line "FILE: PATH = VALUE: <fmt>" (or "FILE: PATH: <fmt>" when v is NULL). */
void loom__ds_line(ds_ctx *c, const char *path, const json_t *v, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Store value (stolen) at the loom path `to` of the mapping: "train.micro_batch_size" (a
 * section's key), "@zero.KEY" (parallel[0]'s options), "@fp16.KEY" (precision's options);
 * remembers that it came from `from`. */
void loom__ds_put(ds_ctx *c, const char *to, json_t *value, const char *from);

/* How `to` reads in messages: "@zero.overlap_comm" -> "parallel[0].overlap_comm". */
void loom__ds_shown(const char *to, char *buf, size_t n);

#endif
