/* A read-only global view of the parameters in one of loom's checkpoints, whatever layout wrote
 * it. Format 3 (the global view, docs/checkpoints.md "The checkpoint format"): one item per tensor,
 * "params/TENSOR", each chunk a range of one tensor-parallel slice of the global tensor
 * (plugins/checkpoint/checkpoint/slice.h); the pipeline's "params/wte@tied_copy" is skipped.
 * Format 2 (still read): flat items per rank ("params", "params@pp1of2@tp0of2") and the tensor
 * tables of meta.tensors / meta.stages. Either way replicated (ddp), ZeRO partitions, tensor-
 * parallel pieces and pipeline stages, or all at once. It reads the checkpoint's documented
 * format (manifest.json verified by manifest.crc32 and plugins/checkpoint/checkpoint/
 * manifest.c's field checks, then chunks verified by their CRC-32) without loading the plugin
 * or starting any rank.
 *
 * A padded vocabulary (model.padded_vocab_size: wte has Vp >= V rows) reads as the model's V
 * real rows: the rows past V are the masked logits' and belong to no token.
 *
 * Memory: opening verifies every parameter chunk by streaming it in 1 MiB blocks; reading a
 * tensor holds that tensor (global) plus one chunk (format 3) or one tensor-parallel piece
 * (format 2) of it. */
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
  int global;         /* 1: format 3's global view (meta.items "global"); 0: flat items */
  int vocab_size, context_length, n_layer, n_head, n_embd; /* meta.model */
} loom_ckpt_view;

/* Open `path`: a step directory (holding manifest.json), a checkpoint directory (its newest
 * step-N with a manifest, as resume picks it), or a run directory whose ckpt/ is one. A newest
 * checkpoint that fails verification is an error (never a silent fall-back to an older one);
 * name the step directory to export another. Returns 0, or -1 with why in err. */
int loom__ckpt_view_open(loom_ckpt_view *v, const char *path, char *err, size_t errlen);

/* The global tensor `p` (a tensor of loom__gpt2_table's whole-model table: name, role, global
 * shape) into dst (host, p->numel floats, row-major (rows, cols) as loom stores it), assembled
 * from every rank's chunks; 16-bit chunks are widened to fp32. A checkpoint tensor with more
 * rows than p (a padded vocabulary's wte) gives its first p->shape[0] rows; any other shape
 * that differs is an error. Returns 0, or -1 with err. */
int loom__ckpt_view_read(loom_ckpt_view *v, const gpt_param *p, float *dst, char *err,
                         size_t errlen);

void loom__ckpt_view_close(loom_ckpt_view *v);

#endif
