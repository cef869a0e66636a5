/* A DeepSpeed config file (ds_config.json) read as it is: `"deepspeed": "PATH"` in a loom config,
 * or `loom train CONFIG --deepspeed PATH`. The DeepSpeed file supplies the parallel, precision,
 * optimizer, scheduler, batch and clipping settings; the loom config the rest (model, data,
 * logging, checkpoint). docs/config.md ("DeepSpeed configs") lists every key and its fate.
 *
 * Each key the file holds is one of
 *   mapped    same meaning in loom's schema: "FILE: zero_optimization.stage = 3: mapped ->
 *             parallel[0].plugin = "zero3""
 *   accepted  meaningless here, with a one-line note ("offload_param" on the CPU device: the
 *             parameters already live in host memory)
 *   refused   with its JSON path and why (NVMe offload, an unknown key, a wrong type)
 * and every key is one line of the report `loom check CONFIG --deepspeed FILE` prints. */
#ifndef LOOM_CORE_CONFIG_DEEPSPEED_H
#define LOOM_CORE_CONFIG_DEEPSPEED_H

#include <jansson.h>
#include <stddef.h>

/* DeepSpeed's three batch numbers, as bits of loom_deepspeed.given: which were set (in either
 * file); DeepSpeed's rule derives the others once the data-parallel size is known. */
#define LOOM_DS_TRAIN_BATCH 1 /* train_batch_size = train.global_batch_size */
#define LOOM_DS_MICRO_BATCH 2 /* train_micro_batch_size_per_gpu = train.micro_batch_size */
#define LOOM_DS_GRAD_ACCUM 4  /* gradient_accumulation_steps = train.grad_accum_steps */

typedef struct loom_deepspeed {
  char path[512];   /* the DeepSpeed file; "" = the config names none */
  json_t *report;   /* array of strings, one per key (owned; NULL when path is "") */
  int n_mapped, n_accepted, n_defaults; /* lines of each fate (defaults: DeepSpeed's default
                                           applied to a setting neither file holds) */
  int given;        /* LOOM_DS_* bits */
} loom_deepspeed;

/* Translate the DeepSpeed file root["deepspeed"] names into root's loom sections, in place,
 * and remove the key. `loom_file` names the loom config in messages. ds->report receives one
 * line per key whatever the outcome (so `loom check` can print the refused ones too; the
 * caller frees it). Where both files set the same setting differently, the load is refused
 * naming both values. Returns 0, or -1 with a one-line message in err naming the DeepSpeed
 * file and the JSON path: an unreadable file, invalid JSON, a refused key (the first one, and
 * how many others). */
int loom__deepspeed_apply(json_t *root, const char *loom_file, loom_deepspeed *ds, char *err,
                          size_t errlen);

/* DeepSpeed's batch rule (deepspeed/runtime/config.py, _set_batch_related_parameters and
 * _batch_assertion) on dp data-parallel ranks: train_batch_size = micro x accumulation x dp;
 * with two of the three given the third is derived (integer division, as DeepSpeed does), with
 * one, accumulation is 1. *tb, *mb, *ga hold the given values (0 = not given) and receive the
 * result. Returns 0, or -1 with "FILE: train_batch_size 128 != train_micro_batch_size_per_gpu
 * 21 x gradient_accumulation_steps 4 x data-parallel size 1 ..." in err. */
int loom__deepspeed_batch(const char *ds_file, int given, int dp, long long *tb, long long *mb,
                          long long *ga, char *err, size_t errlen);

#endif
