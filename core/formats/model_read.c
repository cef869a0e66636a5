/* Reading safetensors and llm.c model files into one rank's parameters (model_files.h). */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <loom/half_v1.h>
#include <loom/loom.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpt2_layout.h"
#include "half.h"
#include "model_files.h"
#include "util/fs_util.h"
#include "util/input_file.h"

#define ST_MAX_HEADER_BYTES (100u << 20) /* the safetensors library's own limit */

/* Where one tensor of the whole-model table sits in the file. */
typedef struct file_tensor {
  char name[48];     /* loom's name (gpt_param.name) */
  uint64_t at;       /* byte offset of element 0 in the file */
  int dtype;         /* LOOM_F32, LOOM_BF16 or LOOM_F16 */
  int transposed;    /* stored (cols, rows): HF's Conv1D */
  int64_t rows, cols; /* loom's global shape (cols 1 for 1-D) */
} file_tensor;

struct loom_model_file {
  int fd;
  char path[4096];
  off_t size;
  int n;
  file_tensor *t; /* n, in table order */
};

void loom__model_file_close(loom_model_file *f) {
  if (!f) return;
  if (f->fd >= 0) close(f->fd);
  free(f->t);
  free(f);
}

static int read_exact(loom_model_file *f, void *buf, size_t n, uint64_t at, char *err,
                      size_t errlen) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = pread(f->fd, (char *)buf + got, n - got, (off_t)(at + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      loom__set_err(err, errlen, "%s: %s reading %zu bytes at %" PRIu64, f->path,
                    r < 0 ? strerror(errno) : "unexpected end of file", n, at);
      return -1;
    }
    got += (size_t)r;
  }
  return 0;
}

/* ---- llm.c ---- */

static int open_llmc(loom_model_file *f, const gpt_model *t, char *err, size_t errlen) {
  int32_t h[LOOM_LLMC_HEADER_INTS];
  if ((uint64_t)f->size < sizeof h) {
    loom__set_err(err, errlen, "%s: %lld bytes, shorter than llm.c's 1024-byte header: not an "
                  "llm.c model file", f->path, (long long)f->size);
    return -1;
  }
  if (read_exact(f, h, sizeof h, 0, err, errlen)) return -1;
  if (h[0] != LOOM_LLMC_MAGIC) {
    loom__set_err(err, errlen, "%s: magic %d, expected %d: not an llm.c model file%s", f->path,
                  h[0], LOOM_LLMC_MAGIC, h[0] == 20240520 ? " (20240520 is llm.c's token shard)"
                                                          : "");
    return -1;
  }
  if (h[1] != LOOM_LLMC_VERSION) {
    loom__set_err(err, errlen, "%s: llm.c model file version %d, expected %d (fp32 "
                  "parameters)%s", f->path, h[1], LOOM_LLMC_VERSION,
                  h[1] == 5 ? ": version 5 holds bf16 parameters (llm.c's _bf16.bin); export "
                              "the fp32 one" : "");
    return -1;
  }
  const gpt_config *c = &t->cfg;
  static const char *const what[] = {"context length", "vocab_size", "n_layer", "n_head",
                                     "n_embd"};
  static const char *const key[] = {"model.context_length", "model.vocab_size",
                                    "model.n_layer", "model.n_head", "model.n_embd"};
  const int want[] = {c->max_seq_len, c->vocab_size, c->n_layer, c->n_head, c->n_embd};
  for (int i = 0; i < 5; i++)
    if (h[2 + i] != want[i]) {
      loom__set_err(err, errlen, "%s: the file's %s is %d, the config's %s is %d: the model "
                    "does not match", f->path, what[i], h[2 + i], key[i], want[i]);
      return -1;
    }
  const int64_t V = c->vocab_size, Vp = h[7], C = c->n_embd;
  if (Vp < V || Vp > V + (1 << 20)) {
    loom__set_err(err, errlen, "%s: padded vocabulary %" PRId64 " is below vocab_size %" PRId64
                  " (or absurdly larger)", f->path, Vp, V);
    return -1;
  }
  uint64_t at = sizeof h;
  int k = 0;
  for (int role = GPT_WTE; role <= GPT_LNF_B; role++)
    for (int i = 0; i < t->n_params; i++) {
      const gpt_param *p = &t->params[i];
      if ((int)p->role != role) continue;
      file_tensor *ft = &f->t[i];
      snprintf(ft->name, sizeof ft->name, "%s", p->name);
      ft->at = at;
      ft->dtype = LOOM_F32;
      ft->rows = p->shape[0];
      ft->cols = p->ndim == 2 ? p->shape[1] : 1;
      at += (uint64_t)(role == GPT_WTE ? Vp * C : (int64_t)p->numel) * sizeof(float);
      k++;
    }
  if (k != t->n_params || at != (uint64_t)f->size) {
    loom__set_err(err, errlen, "%s: %lld bytes, the header's model needs %" PRIu64 ": the file "
                  "is truncated or not llm.c's fp32 GPT-2", f->path, (long long)f->size, at);
    return -1;
  }
  return 0;
}

/* ---- safetensors ---- */

static int st_dtype(const char *s) {
  if (!strcmp(s, "F32")) return LOOM_F32;
  if (!strcmp(s, "BF16")) return LOOM_BF16;
  if (!strcmp(s, "F16")) return LOOM_F16;
  return -1;
}

/* The file's name `key` without GPT2LMHeadModel's "transformer." prefix. */
static const char *st_base(const char *key) {
  return strncmp(key, "transformer.", 12) == 0 ? key + 12 : key;
}

/* Names a GPT-2 file may hold that loom has no tensor for, and ignores. */
static int st_ignored(const char *base) {
  int l, n = 0;
  if (!strcmp(base, "lm_head.weight")) return 1; /* tied to wte */
  if (sscanf(base, "h.%d.attn.bias%n", &l, &n) == 1 && base[n] == '\0') return 1;
  if (sscanf(base, "h.%d.attn.masked_bias%n", &l, &n) == 1 && base[n] == '\0') return 1;
  return 0;
}

static void shape_str(json_t *shape, char *out, size_t n) {
  size_t i, len = 0;
  json_t *d;
  len += (size_t)snprintf(out, n, "[");
  json_array_foreach(shape, i, d) if (len < n) len += (size_t)snprintf(
      out + len, n - len, "%s%" JSON_INTEGER_FORMAT, i ? ", " : "", json_integer_value(d));
  if (len < n) snprintf(out + len, n - len, "]");
}

/* dim i of a shape array (-1 when missing or not an integer). */
static int64_t dim_at(json_t *entry, size_t i) {
  json_t *d = json_array_get(json_object_get(entry, "shape"), i);
  return json_is_integer(d) ? (int64_t)json_integer_value(d) : -1;
}

/* The model's dimensions as the file holds them, checked against the config's first, so a
 * GPT-2 of another size is named as such rather than as one odd tensor. */
static int st_check_dims(loom_model_file *f, json_t *hdr, const gpt_config *c, char *err,
                         size_t errlen) {
  json_t *wte = NULL, *wpe = NULL;
  int layers = 0;
  const char *k;
  json_t *v;
  json_object_foreach(hdr, k, v) {
    const char *b = st_base(k);
    int l;
    if (!strcmp(b, "wte.weight")) wte = v;
    if (!strcmp(b, "wpe.weight")) wpe = v;
    if (sscanf(b, "h.%d.", &l) == 1 && l >= 0 && l < GPT_MAX_N_LAYER && l + 1 > layers)
      layers = l + 1;
  }
  if (!wte || !wpe) {
    loom__set_err(err, errlen, "%s: no %s tensor: not a GPT-2 safetensors file (loom expects "
                  "Hugging Face GPT-2 names: wte.weight, wpe.weight, h.N.*, ln_f.*)", f->path,
                  wte ? "wpe.weight" : "wte.weight");
    return -1;
  }
  struct { const char *what, *key; int64_t file; int want; } d[] = {
      {"vocabulary (wte.weight rows)", "model.vocab_size", dim_at(wte, 0), c->vocab_size},
      {"context length (wpe.weight rows)", "model.context_length", dim_at(wpe, 0),
       c->max_seq_len},
      {"layer count (h.0 .. h.N)", "model.n_layer", layers, c->n_layer},
      {"width (wte.weight columns)", "model.n_embd", dim_at(wte, 1), c->n_embd},
  };
  for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
    if (d[i].file != d[i].want) {
      loom__set_err(err, errlen, "%s: the file's %s is %" PRId64 ", the config's %s is %d: the "
                    "model does not match", f->path, d[i].what, d[i].file, d[i].key, d[i].want);
      return -1;
    }
  return 0;
}

static int open_safetensors(loom_model_file *f, const gpt_model *t, char *err, size_t errlen) {
  unsigned char len8[8];
  if (f->size < 8 || read_exact(f, len8, 8, 0, err, errlen)) {
    if (f->size < 8) loom__set_err(err, errlen, "%s: %lld bytes: not a safetensors file",
                                   f->path, (long long)f->size);
    return -1;
  }
  uint64_t hlen = 0;
  for (int b = 7; b >= 0; b--) hlen = hlen << 8 | len8[b];
  if (hlen > ST_MAX_HEADER_BYTES || hlen > (uint64_t)f->size - 8) {
    loom__set_err(err, errlen, "%s: header length %" PRIu64 " (file %lld bytes): not a "
                  "safetensors file%s", f->path, hlen, (long long)f->size,
                  hlen == 20240326 || len8[0] == 0x46 ? " (an llm.c file? use \"format\": "
                                                        "\"llmc\")" : "");
    return -1;
  }
  char *text = malloc(hlen + 1);
  if (!text) {
    loom__set_err(err, errlen, "out of host memory (safetensors header)");
    return -1;
  }
  if (read_exact(f, text, hlen, 8, err, errlen)) {
    free(text);
    return -1;
  }
  json_error_t je;
  json_t *hdr = json_loadb(text, hlen, 0, &je);
  free(text);
  if (!json_is_object(hdr)) {
    loom__set_err(err, errlen, "%s: header: %s", f->path,
                  hdr ? "expected a JSON object" : je.text);
    json_decref(hdr);
    return -1;
  }
  int rc = st_check_dims(f, hdr, &t->cfg, err, errlen);
  /* the head count is in no tensor's shape: a file loom wrote records it in its metadata */
  json_t *lm = json_object_get(json_object_get(hdr, "__metadata__"), "loom.model");
  json_t *lmj = json_is_string(lm) ? json_loads(json_string_value(lm), 0, NULL) : NULL;
  json_t *nh = json_object_get(lmj, "n_head");
  if (!rc && json_is_integer(nh) && json_integer_value(nh) != t->cfg.n_head) {
    loom__set_err(err, errlen, "%s: the file's n_head (metadata loom.model) is %" JSON_INTEGER_FORMAT
                  ", the config's model.n_head is %d: the model does not match", f->path,
                  json_integer_value(nh), t->cfg.n_head);
    rc = -1;
  }
  json_decref(lmj);
  const uint64_t data0 = 8 + hlen, data_bytes = (uint64_t)f->size - data0;
  const char *k;
  json_t *v;
  int found = 0;
  json_object_foreach(hdr, k, v) {
    if (rc || !strcmp(k, "__metadata__")) continue;
    const char *b = st_base(k);
    if (st_ignored(b)) continue;
    int i = 0;
    for (; i < t->n_params; i++) {
      char hf[96];
      int tr;
      loom__hf_name(&t->params[i], hf, sizeof hf, &tr);
      if (!strcmp(hf, b)) break;
    }
    if (i == t->n_params) {
      loom__set_err(err, errlen, "%s: tensor '%s' is not part of a GPT-2 of the config's "
                    "dimensions (loom reads Hugging Face GPT-2 names)", f->path, k);
      rc = -1;
      continue;
    }
    const gpt_param *p = &t->params[i];
    file_tensor *ft = &f->t[i];
    char hf[96];
    int tr;
    loom__hf_name(p, hf, sizeof hf, &tr);
    json_t *dt = json_object_get(v, "dtype"), *shape = json_object_get(v, "shape");
    json_t *offs = json_object_get(v, "data_offsets");
    int dtype = json_is_string(dt) ? st_dtype(json_string_value(dt)) : -1;
    const int64_t want0 = tr ? p->shape[1] : p->shape[0], want1 = tr ? p->shape[0] : p->shape[1];
    int shape_ok = json_is_array(shape) && json_array_size(shape) == (size_t)p->ndim &&
                   dim_at(v, 0) == want0 && (p->ndim == 1 || dim_at(v, 1) == want1);
    if (dtype < 0 || !shape_ok) {
      char got[96];
      shape_str(shape, got, sizeof got);
      if (dtype < 0)
        loom__set_err(err, errlen, "%s: tensor '%s' has dtype %s, loom reads F32, BF16 or F16",
                      f->path, k, json_is_string(dt) ? json_string_value(dt) : "(missing)");
      else if (p->ndim == 1)
        loom__set_err(err, errlen, "%s: tensor '%s' has shape %s, the config needs [%" PRId64
                      "]", f->path, k, got, want0);
      else
        loom__set_err(err, errlen, "%s: tensor '%s' has shape %s, the config needs [%" PRId64
                      ", %" PRId64 "]%s", f->path, k, got, want0, want1,
                      tr ? " (Conv1D: (in, out))" : "");
      rc = -1;
      continue;
    }
    json_t *o0 = json_array_get(offs, 0), *o1 = json_array_get(offs, 1);
    uint64_t b0 = json_is_integer(o0) ? (uint64_t)json_integer_value(o0) : UINT64_MAX;
    uint64_t b1 = json_is_integer(o1) ? (uint64_t)json_integer_value(o1) : 0;
    uint64_t want_bytes = (uint64_t)p->numel * loom_dtype_size((loom_dtype)dtype);
    if (!json_is_array(offs) || json_array_size(offs) != 2 || b0 > b1 || b1 > data_bytes ||
        b1 - b0 != want_bytes) {
      loom__set_err(err, errlen, "%s: tensor '%s': data_offsets do not hold %" PRIu64 " bytes "
                    "inside the file's %" PRIu64 " bytes of data: the file is damaged", f->path,
                    k, want_bytes, data_bytes);
      rc = -1;
      continue;
    }
    if (ft->name[0]) {
      loom__set_err(err, errlen, "%s: tensor '%s' appears twice (with and without the "
                    "\"transformer.\" prefix)", f->path, b);
      rc = -1;
      continue;
    }
    snprintf(ft->name, sizeof ft->name, "%s", p->name);
    ft->at = data0 + b0;
    ft->dtype = dtype;
    ft->transposed = tr;
    ft->rows = p->shape[0];
    ft->cols = p->ndim == 2 ? p->shape[1] : 1;
    found++;
  }
  for (int i = 0; !rc && i < t->n_params; i++)
    if (!f->t[i].name[0]) {
      char hf[96];
      int tr;
      loom__hf_name(&t->params[i], hf, sizeof hf, &tr);
      loom__set_err(err, errlen, "%s: tensor '%s' is missing (%d of the %d tensors a GPT-2 of "
                    "the config's dimensions has are there)", f->path, hf, found, t->n_params);
      rc = -1;
    }
  json_decref(hdr);
  return rc;
}

loom_model_file *loom__model_file_open(const char *path, loom_model_format format,
                                       const gpt_model *table, char *err, size_t errlen) {
  loom_model_file *f = calloc(1, sizeof *f);
  if (f) f->t = calloc((size_t)table->n_params, sizeof *f->t);
  if (!f || !f->t) {
    loom__model_file_close(f);
    loom__set_err(err, errlen, "out of host memory");
    return NULL;
  }
  snprintf(f->path, sizeof f->path, "%s", path);
  f->n = table->n_params;
  f->fd = loom__open_regular(path, &f->size, err, errlen);
  int rc = f->fd < 0 ? -1
           : format == LOOM_FORMAT_LLMC ? open_llmc(f, table, err, errlen)
                                        : open_safetensors(f, table, err, errlen);
  if (rc) {
    loom__model_file_close(f);
    return NULL;
  }
  return f;
}

/* Local element lo..hi-1 of `p` (a tensor of one rank's model) from file tensor ft into buf
 * (buf[0] is element lo): every file row is walked, and each run of elements this rank holds
 * is read with one pread. */
static int fill_tensor(loom_model_file *f, const file_tensor *ft, const gpt_param *p, int tp,
                       int tp_rank, size_t lo, size_t hi, float *buf, char *err,
                       size_t errlen) {
  const int64_t rows = ft->rows, cols = ft->cols;
  const int64_t frows = ft->transposed ? cols : rows, fcols = ft->transposed ? rows : cols;
  const size_t esz = loom_dtype_size((loom_dtype)ft->dtype);
  if (!ft->transposed && (tp <= 1 || p->split_dim < 0)) {
    /* the rank's piece is the whole tensor in the file's order: one read of [lo, hi). A padded
     * vocabulary's wte has rows past the file's V (its last elements, row-major): they are
     * zero, as llm.c's files hold them; the masked logits give them no say in anything. */
    const size_t in_file = (size_t)(rows * cols), first = lo - p->offset;
    size_t cnt = hi - lo, bytes;
    if (first + cnt > in_file) {
      size_t keep = first < in_file ? in_file - first : 0;
      memset(buf + keep, 0, (cnt - keep) * sizeof(float));
      cnt = keep;
    }
    bytes = cnt * esz;
    char *to = (char *)buf + (esz == 4 ? 0 : bytes); /* 16-bit: upper half, widened in place */
    if (cnt && read_exact(f, to, bytes, ft->at + (uint64_t)first * esz, err, errlen))
      return -1;
    if (esz != 4) loom__widen_16(ft->dtype == LOOM_BF16, (const uint16_t *)to, buf, cnt);
    return 0;
  }
  if (p->shape[0] != rows) { /* defensive: only wte (replicated, untransposed) is padded */
    loom__set_err(err, errlen, "%s: '%s' has %" PRId64 " rows in the model, %" PRId64 " in the "
                  "file", f->path, p->name, p->shape[0], rows);
    return -1;
  }
  float *row = malloc((size_t)fcols * sizeof(float));
  if (!row) {
    loom__set_err(err, errlen, "out of host memory");
    return -1;
  }
  int rc = 0;
  for (int64_t fr = 0; fr < frows && !rc; fr++) {
    int64_t run = -1; /* start of the current run of wanted elements in this file row */
    for (int64_t fc = 0; fc <= fcols && !rc; fc++) {
      int wanted = 0;
      if (fc < fcols) {
        int64_t r = ft->transposed ? fc : fr, c = ft->transposed ? fr : fc;
        int64_t li = loom__tp_local_index(rows, cols, p->split_dim, p->split_parts, tp,
                                          tp_rank, r, c);
        size_t e = p->offset + (size_t)li;
        wanted = li >= 0 && e >= lo && e < hi;
      }
      if (wanted && run < 0) run = fc;
      if (wanted || run < 0) continue;
      /* elements [run, fc) of file row fr: read, widen, scatter */
      size_t cnt = (size_t)(fc - run), bytes = cnt * esz;
      char *to = (char *)(row + run) + (esz == 4 ? 0 : bytes);
      rc = read_exact(f, to, bytes, ft->at + ((uint64_t)fr * (uint64_t)fcols + (uint64_t)run) * esz,
                      err, errlen);
      if (!rc && esz != 4) loom__widen_16(ft->dtype == LOOM_BF16, (const uint16_t *)to, row + run, cnt);
      for (int64_t j = run; !rc && j < fc; j++) {
        int64_t r = ft->transposed ? j : fr, c = ft->transposed ? fr : j;
        int64_t li = loom__tp_local_index(rows, cols, p->split_dim, p->split_parts, tp, tp_rank,
                                          r, c);
        buf[p->offset + (size_t)li - lo] = row[j];
      }
      run = -1;
    }
  }
  free(row);
  return rc;
}

int loom__model_file_fill(loom_model_file *f, const gpt_model *local, size_t begin, size_t n,
                          float *dst, char *err, size_t errlen) {
  return loom__model_file_fill_as(f, local, begin, n, dst, LOOM_F32, err, errlen);
}

/* fp32 host values -> `dtype` in place at the front of buf (2-byte elements for 16 bits) */
static size_t narrow_in_place(float *buf, size_t n, loom_dtype dtype) {
  if (dtype == LOOM_F32) return n * sizeof(float);
  char *out = (char *)buf; /* element i lands in bytes [2i, 2i+2): after element i was read */
  for (size_t i = 0; i < n; i++) {
    uint16_t h = dtype == LOOM_BF16 ? loom_f32_to_bf16(buf[i]) : loom_f32_to_f16(buf[i]);
    memcpy(out + 2 * i, &h, sizeof h);
  }
  return n * sizeof(uint16_t);
}

int loom__model_file_fill_as(loom_model_file *f, const gpt_model *local, size_t begin, size_t n,
                             void *dst, loom_dtype dtype, char *err, size_t errlen) {
  const size_t el = loom_dtype_size(dtype);
  const size_t end = begin + n;
  const int tp = local->cfg.tp_size > 1 ? local->cfg.tp_size : 1, tp_rank = local->cfg.tp_rank;
  for (int i = 0; i < local->n_params; i++) {
    const gpt_param *p = &local->params[i];
    if (!p->present) continue;
    size_t lo = p->offset > begin ? p->offset : begin;
    size_t hi = p->offset + p->numel < end ? p->offset + p->numel : end;
    if (lo >= hi) continue;
    const file_tensor *ft = NULL;
    for (int k = 0; k < f->n && !ft; k++)
      if (!strcmp(f->t[k].name, p->name)) ft = &f->t[k];
    if (!ft) { /* defensive: open matched every tensor of the whole model */
      loom__set_err(err, errlen, "%s: no tensor for '%s'", f->path, p->name);
      return -1;
    }
    float *buf = malloc((hi - lo) * sizeof(float));
    if (!buf) {
      loom__set_err(err, errlen, "out of host memory importing '%s'", p->name);
      return -1;
    }
    int rc = fill_tensor(f, ft, p, tp, tp_rank, lo, hi, buf, err, errlen);
    if (!rc) {
      size_t bytes = narrow_in_place(buf, hi - lo, dtype);
      local->dev->ops->from_host(local->dev->ctx, (char *)dst + (lo - begin) * el, buf, bytes);
    }
    free(buf);
    if (rc) return -1;
  }
  return 0;
}
