/* A read-only global view of the parameters in one of loom's checkpoints, whatever layout wrote
 * it: replicated (ddp), ZeRO partitions (chunks of the flat buffer on several ranks), tensor-
 * parallel pieces ("params@tp1of2"), pipeline stages ("params@pp1of2"), or all at once. It reads
 * the checkpoint's documented format (plugins/checkpoint/checkpoint/checkpoint.c: manifest.json
 * verified by manifest.crc32 and plugins/checkpoint/checkpoint/manifest.c's field checks, then
 * chunks verified by their CRC-32) without loading the plugin or starting any rank.
 *
 * Memory: opening verifies every parameter chunk by streaming it in 1 MiB blocks; reading a
 * tensor holds that tensor (global) plus one tensor-parallel piece of it. */
#ifndef LOOM_CORE_EXPORT_CKPT_VIEW_H
#define LOOM_CORE_EXPORT_CKPT_VIEW_H

#include <jansson.h>
#include <limits.h>
#include <stddef.h>

#include "model/gpt.h"

typedef struct loom_ckpt_view {
  char dir[PATH_MAX]; /* the step directory ("runs/x/ckpt/step-00000100") */
  json_t *man;        /* manifest.json (owned) */
  json_t *meta;       /* man.meta (borrowed) */
  int step, tp, pp;
  int vocab_size, context_length, n_layer, n_head, n_embd; /* meta.model */
} loom_ckpt_view;

/* Open `path`: a step directory (holding manifest.json), a checkpoint directory (its newest
 * step-N with a manifest, as resume picks it), or a run directory whose ckpt/ is one. A newest
 * checkpoint that fails verification is an error (never a silent fall-back to an older one);
 * name the step directory to export another. Returns 0, or -1 with why in err. */
int loom__ckpt_view_open(loom_ckpt_view *v, const char *path, char *err, size_t errlen);

/* The global tensor `p` (a tensor of loom__gpt2_table's whole-model table: name, role, global
 * shape) into dst (host, p->numel floats, row-major (rows, cols) as loom stores it), assembled
 * from every rank's chunks; 16-bit chunks are widened to fp32. Returns 0, or -1 with err. */
int loom__ckpt_view_read(loom_ckpt_view *v, const gpt_param *p, float *dst, char *err,
                         size_t errlen);

void loom__ckpt_view_close(loom_ckpt_view *v);

#endif
