/* Global tensors out of a checkpoint, through its plugin's reader (ckpt_view.h). */
#include "ckpt_view.h"

#include <inttypes.h>
#include <loom/loom.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/gpt2_layout.h"
#include "formats/half.h"
#include "util/fs_util.h"

/* An integer of the metadata (meta.KEY or meta.OBJ.KEY) in [lo, hi] into *out. */
static int meta_int(loom_ckpt_view *v, const char *obj, const char *key, int lo, int hi,
                    int *out, char *err, size_t errlen) {
  json_t *o = obj ? json_object_get(v->meta, obj) : v->meta;
  json_t *x = json_object_get(o, key);
  if (!json_is_integer(x) || json_integer_value(x) < lo || json_integer_value(x) > hi) {
    loom__set_err(err, errlen, "%s: meta.%s%s%s: expected an integer in [%d, %d]",
                  v->dir, obj ? obj : "", obj ? "." : "", key, lo, hi);
    return -1;
  }
  *out = (int)json_integer_value(x);
  return 0;
}

int loom__ckpt_view_open(loom_ckpt_view *v, const loom_ckpt_source *src, const char *path,
                         char *err, size_t errlen) {
  memset(v, 0, sizeof *v);
  if (loom__ckpt_reader_open(&v->rd, src && src->plugin ? src->plugin : "checkpoint",
                             src ? src->options : NULL, src ? src->file : NULL,
                             src ? src->json_path : NULL, path, 0, err, errlen) != 0)
    return -1;
  v->dir = v->rd.info.where;
  v->step = v->rd.info.step;
  json_error_t je;
  v->meta = json_loads(v->rd.info.meta_json, 0, &je);
  if (!json_is_object(v->meta)) {
    loom__set_err(err, errlen, "%s: its metadata is not a JSON object (%s): not a loom "
                  "checkpoint, or a damaged one", v->dir, v->meta ? "another value" : je.text);
    goto fail;
  }
  if (meta_int(v, NULL, "tp", 1, 1 << 20, &v->tp, err, errlen) ||
      meta_int(v, NULL, "pp", 1, 1 << 20, &v->pp, err, errlen) ||
      meta_int(v, "model", "vocab_size", 2, 1 << 30, &v->vocab_size, err, errlen) ||
      meta_int(v, "model", "context_length", 1, GPT_MAX_SEQ_LEN, &v->context_length, err,
               errlen) ||
      meta_int(v, "model", "n_layer", 1, GPT_MAX_N_LAYER, &v->n_layer, err, errlen) ||
      meta_int(v, "model", "n_head", 1, GPT_MAX_N_EMBD, &v->n_head, err, errlen) ||
      meta_int(v, "model", "n_embd", 1, GPT_MAX_N_EMBD, &v->n_embd, err, errlen))
    goto fail;
  v->global = json_is_string(json_object_get(v->meta, "items")) &&
              strcmp(json_string_value(json_object_get(v->meta, "items")), "global") == 0;
  json_t *tables = v->pp > 1 ? json_object_get(v->meta, "stages") : NULL;
  if (v->pp > 1 ? json_array_size(tables) != (size_t)v->pp
                : !json_is_array(json_object_get(v->meta, "tensors"))) {
    loom__set_err(err, errlen, "%s: meta.%s: expected %s (the tensor table a loom checkpoint "
                  "records)", v->dir, v->pp > 1 ? "stages" : "tensors",
                  v->pp > 1 ? "one entry per pipeline stage" : "an array");
    goto fail;
  }
  return 0;
fail:
  loom__ckpt_view_close(v);
  return -1;
}

void loom__ckpt_view_close(loom_ckpt_view *v) {
  json_decref(v->meta);
  if (v->rd.plugin.handle) loom__ckpt_reader_close(&v->rd);
  memset(v, 0, sizeof *v);
}

/* Elements [first, first + n) of saved tensor `item` into dst, widened to fp32. */
static int read_values(loom_ckpt_view *v, const char *item, uint64_t first, size_t n,
                       float *dst, char *err, size_t errlen) {
  loom_ckpt_tensor_v1 t;
  if (loom__ckpt_reader_find(&v->rd, item, &t) != 0) {
    loom__set_err(err, errlen, "%s: item '%s' is not in the checkpoint", v->dir, item);
    return -1;
  }
  loom_dtype dt = t.dtype;
  if (dt != LOOM_F32 && dt != LOOM_BF16 && dt != LOOM_F16) {
    loom__set_err(err, errlen, "%s: item '%s' has dtype %d: parameters are fp32, bf16 or fp16",
                  v->dir, item, (int)dt);
    return -1;
  }
  /* 16-bit values land in the upper half of dst's range and widen in place */
  const size_t bytes = n * loom_dtype_size(dt);
  char *to = (char *)dst + (dt == LOOM_F32 ? 0 : bytes);
  if (loom__ckpt_reader_read(&v->rd, item, first, n, to, err, errlen) != 0) return -1;
  if (dt != LOOM_F32) loom__widen_16(dt == LOOM_BF16, (const uint16_t *)to, dst, n);
  return 0;
}

/* The global view: the global tensor `p` from saved tensor "params/NAME", which the plugin
 * assembles from its slices. Elements past p's own (a padded wte's rows V..Vp-1, at the end in
 * row-major order) are not read. */
static int read_global(loom_ckpt_view *v, const gpt_param *p, float *dst, char *err,
                       size_t errlen) {
  const int64_t rows = p->shape[0], cols = p->ndim == 2 ? p->shape[1] : 1;
  char item[96];
  snprintf(item, sizeof item, "params/%s", p->name);
  loom_ckpt_tensor_v1 t;
  if (loom__ckpt_reader_find(&v->rd, item, &t) != 0) {
    loom__set_err(err, errlen, "%s: item '%s' is missing: the checkpoint is damaged or not a "
                  "GPT-2 of its meta.model", v->dir, item);
    return -1;
  }
  const int64_t trows = t.shape[0], tcols = t.ndim == 2 ? t.shape[1] : 1;
  /* only wte's rows may differ: the checkpoint's Vp against the table's V */
  int rows_ok = trows == rows || (p->role == GPT_WTE && trows > rows);
  if (t.ndim != p->ndim || !rows_ok || tcols != cols) {
    loom__set_err(err, errlen, "%s: item '%s' has global shape [%" PRId64 ", %" PRId64 "], a "
                  "GPT-2 of the checkpoint's meta.model needs [%" PRId64 ", %" PRId64 "]%s",
                  v->dir, item, trows, tcols, rows, cols,
                  p->role == GPT_WTE ? " (or more rows: a padded vocabulary)" : "");
    return -1;
  }
  return read_values(v, item, 0, (size_t)(rows * cols), dst, err, errlen);
}

/* The entry named `name` (not the pipeline's tied wte copy) in a tensor table, or NULL. */
static json_t *table_entry(json_t *table, const char *name) {
  size_t i;
  json_t *t;
  json_array_foreach(table, i, t) {
    if (json_is_true(json_object_get(t, "tied_copy"))) continue;
    const char *n = json_string_value(json_object_get(t, "name"));
    if (n && strcmp(n, name) == 0) return t;
  }
  return NULL;
}

int loom__ckpt_view_read(loom_ckpt_view *v, const gpt_param *p, float *dst, char *err,
                         size_t errlen) {
  if (v->global) return read_global(v, p, dst, err, errlen);
  /* the stage holding the tensor, and its entry */
  int stage = 0;
  json_t *entry = NULL;
  for (int s = 0; s < v->pp && !entry; s++) {
    json_t *table = v->pp > 1 ? json_object_get(json_array_get(json_object_get(v->meta,
                                                                                "stages"),
                                                                (size_t)s),
                                                 "tensors")
                              : json_object_get(v->meta, "tensors");
    entry = table_entry(table, p->name);
    stage = s;
  }
  const int64_t rows = p->shape[0], cols = p->ndim == 2 ? p->shape[1] : 1;
  json_t *split = entry ? json_object_get(entry, "split_dim") : NULL;
  json_t *parts = entry ? json_object_get(entry, "split_parts") : NULL;
  json_t *offset = entry ? json_object_get(entry, "offset") : NULL;
  json_t *numel = entry ? json_object_get(entry, "numel") : NULL;
  int sd = (int)json_integer_value(split), sp = (int)json_integer_value(parts);
  int tp = sd >= 0 ? v->tp : 1;
  uint64_t local_n = (uint64_t)(rows * cols) / (uint64_t)tp;
  if (!entry || !json_is_integer(split) || sd < -1 || sd > (p->ndim == 2 ? 1 : 0) ||
      !json_is_integer(parts) || sp < 1 || (sd >= 0 && (sd == 0 ? rows : cols) % (sp * tp)) ||
      !json_is_integer(offset) || json_integer_value(offset) < 0 ||
      !json_is_integer(numel) || (uint64_t)json_integer_value(numel) != local_n) {
    loom__set_err(err, errlen, "%s: the tensor table has no consistent entry for "
                  "'%s' (global shape %" PRId64 " x %" PRId64 " split over tp %d): the "
                  "checkpoint is damaged or not a GPT-2 of these dimensions", v->dir, p->name,
                  rows, cols, v->tp);
    return -1;
  }
  float *local = malloc(local_n * sizeof(float) + 1);
  if (!local) {
    loom__set_err(err, errlen, "out of host memory reading '%s'", p->name);
    return -1;
  }
  int rc = 0;
  for (int r = 0; r < v->tp && !rc; r++) {
    if (sd < 0 && r > 0) break; /* replicated over tp: tp rank 0's copy */
    char item[96] = "params", pps[32] = "", tps[32] = "";
    if (v->pp > 1) snprintf(pps, sizeof pps, "@pp%dof%d", stage, v->pp);
    if (v->tp > 1) snprintf(tps, sizeof tps, "@tp%dof%d", r, v->tp);
    snprintf(item, sizeof item, "params%s%s", pps, tps);
    rc = read_values(v, item, (uint64_t)json_integer_value(offset), local_n, local, err,
                     errlen);
    for (int64_t i = 0; !rc && i < rows; i++)
      for (int64_t j = 0; j < cols; j++) {
        int64_t li = loom__tp_local_index(rows, cols, sd, sp, tp, r, i, j);
        if (li >= 0) dst[i * cols + j] = local[li];
      }
  }
  free(local);
  return rc;
}
