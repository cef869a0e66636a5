/* A read-only global view of the parameters in a checkpoint, read through its checkpoint
 * plugin's reader (runtime/ckpt_reader.h; loom's checkpoint.so by default, any plugin with the
 * ABI 1.6 reader slots), whatever layout wrote it. What is loom's own here is the host's
 * metadata (ckpt_meta.h): the model, and how the items map to tensors. The global view (meta
 * "items": "global"): one saved tensor per model tensor, "params/TENSOR", read whole (the
 * plugin assembles it from every rank's slices; the pipeline's "params/wte@tied_copy" is
 * skipped). Flat items ("params", "params@pp1of2@tp0of2": a checkpoint from before the global
 * view, or a plugin without it) with the tensor tables of meta.tensors / meta.stages: each
 * tensor's range of the item of its stage and tp rank, reassembled here. Either way
 * replicated (ddp), ZeRO partitions, tensor-parallel pieces and pipeline stages, or all at
 * once. No rank is started.
 *
 * A padded vocabulary (model.padded_vocab_size: wte has Vp >= V rows) reads as the model's V
 * real rows: the rows past V are the masked logits' and belong to no token.
 *
 * Memory: reading a tensor holds that tensor (global, as fp32) plus, for flat items, one
 * tensor-parallel piece of it; what the plugin holds (checkpoint.so: 1 MiB while it verifies a
 * chunk). */
#ifndef LOOM_CORE_EXPORT_CKPT_VIEW_H
#define LOOM_CORE_EXPORT_CKPT_VIEW_H

#include <jansson.h>
#include <limits.h>
#include <stddef.h>

#include "model/gpt.h"
#include "runtime/ckpt_reader.h"

typedef struct loom_ckpt_view {
  loom_ckpt_reader rd; /* the plugin's reader of the selected step */
  const char *dir;     /* where the step lies (the plugin's words: "runs/x/ckpt/step-00000100") */
  json_t *meta;        /* the host's metadata of that step (owned) */
  int step, tp, pp;
  int global;          /* 1: the global view (meta.items "global"); 0: flat items */
  int vocab_size, context_length, n_layer, n_head, n_embd; /* meta.model */
} loom_ckpt_view;

/* Which checkpoint plugin reads a checkpoint, and with what options. */
typedef struct loom_ckpt_source {
  const char *plugin;    /* a name or a path; NULL: "checkpoint" (loom's own) */
  json_t *options;       /* its options (NULL = {}) */
  const char *file;      /* the config they came from, for messages (NULL: none) */
  const char *json_path; /* "checkpoint" (NULL: none) */
} loom_ckpt_source;

/* Open `path` with src's plugin (NULL: loom's checkpoint.so): whatever that plugin's reader
 * accepts (checkpoint.so: a step directory holding manifest.json, a checkpoint directory (its
 * newest complete step), or a run directory whose ckpt/ is one); path NULL: where the options
 * say. A newest checkpoint that fails verification is an error (never a silent fall-back to an
 * older one). Returns 0, or -1 with why in err. */
int loom__ckpt_view_open(loom_ckpt_view *v, const loom_ckpt_source *src, const char *path,
                         char *err, size_t errlen);

/* The global tensor `p` (a tensor of loom__gpt2_table's whole-model table: name, role, global
 * shape) into dst (host, p->numel floats, row-major (rows, cols) as loom stores it), assembled
 * from every rank's chunks; 16-bit tensors are widened to fp32. A checkpoint tensor with more
 * rows than p (a padded vocabulary's wte) gives its first p->shape[0] rows; any other shape
 * that differs is an error. Returns 0, or -1 with err. */
int loom__ckpt_view_read(loom_ckpt_view *v, const gpt_param *p, float *dst, char *err,
                         size_t errlen);

/* Close an opened view (a zeroed or closed one too). */
void loom__ckpt_view_close(loom_ckpt_view *v);

#endif
