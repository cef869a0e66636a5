/* Writing safetensors and llm.c model files from global tensors (model_files.h). */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpt2_layout.h"
#include "model_files.h"
#include "util/fs_util.h"
#include "util/input_file.h"

int loom__model_format(const char *name) {
  if (!strcmp(name, "safetensors")) return LOOM_FORMAT_SAFETENSORS;
  if (!strcmp(name, "llmc")) return LOOM_FORMAT_LLMC;
  return -1;
}

typedef struct writer {
  int fd;
  const char *path; /* the .tmp being written, for messages */
  char *err;
  size_t errlen;
} writer;

static int put(writer *w, const void *buf, size_t n) {
  const char *p = buf;
  while (n > 0) {
    ssize_t r = write(w->fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      loom__set_err(w->err, w->errlen, "%s: write error: %s", w->path, strerror(errno));
      return -1;
    }
    p += r;
    n -= (size_t)r;
  }
  return 0;
}

/* One tensor through rd into buf, transposed into tbuf when asked; returns what to write. */
static const float *fetch(const gpt_param *p, int transposed, loom_tensor_reader rd, void *ctx,
                          float *buf, float *tbuf, char *err, size_t errlen) {
  if (rd(ctx, p, buf, err, errlen) != 0) return NULL;
  if (!transposed) return buf;
  const int64_t rows = p->shape[0], cols = p->shape[1];
  for (int64_t i = 0; i < rows; i++) /* (rows, cols) -> (cols, rows): HF's Conv1D (in, out) */
    for (int64_t j = 0; j < cols; j++) tbuf[j * rows + i] = buf[i * cols + j];
  return tbuf;
}

static size_t largest_tensor(const gpt_model *t) {
  size_t big = 0;
  for (int i = 0; i < t->n_params; i++)
    if (t->params[i].numel > big) big = t->params[i].numel;
  return big;
}

/* The safetensors header: "__metadata__" then every tensor in loom's order, offsets packed. */
static char *safetensors_header(const gpt_model *t, const char *metadata, size_t *len,
                                char *err, size_t errlen) {
  json_error_t je;
  json_t *meta = metadata ? json_loads(metadata, 0, &je) : json_object();
  const char *k;
  json_t *v;
  int ok = json_is_object(meta);
  json_object_foreach(meta, k, v) ok = ok && json_is_string(v);
  if (!ok) {
    json_decref(meta);
    loom__set_err(err, errlen, "safetensors metadata: expected a JSON object of strings");
    return NULL;
  }
  json_object_set_new(meta, "format", json_string("pt"));
  json_t *h = json_object();
  json_object_set_new(h, "__metadata__", meta);
  uint64_t off = 0;
  for (int i = 0; i < t->n_params; i++) {
    const gpt_param *p = &t->params[i];
    char name[96];
    int tr;
    loom__hf_name(p, name, sizeof name, &tr);
    json_t *shape = p->ndim == 1 ? json_pack("[I]", (json_int_t)p->shape[0])
                    : tr ? json_pack("[I, I]", (json_int_t)p->shape[1], (json_int_t)p->shape[0])
                         : json_pack("[I, I]", (json_int_t)p->shape[0], (json_int_t)p->shape[1]);
    uint64_t end = off + p->numel * sizeof(float);
    json_object_set_new(h, name, json_pack("{s:s, s:o, s:[I, I]}", "dtype", "F32", "shape",
                                           shape, "data_offsets", (json_int_t)off,
                                           (json_int_t)end));
    off = end;
  }
  char *text = json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(h);
  if (!text) {
    loom__set_err(err, errlen, "out of host memory (safetensors header)");
    return NULL;
  }
  /* pad with spaces so the data starts 8-byte aligned, as the safetensors library writes it */
  size_t n = strlen(text), padded = (8 + n + 7) / 8 * 8 - 8;
  char *out = realloc(text, padded + 1);
  if (!out) {
    free(text);
    loom__set_err(err, errlen, "out of host memory (safetensors header)");
    return NULL;
  }
  memset(out + n, ' ', padded - n);
  out[padded] = '\0';
  *len = padded;
  return out;
}

static int write_safetensors(writer *w, const gpt_model *t, loom_tensor_reader rd, void *ctx,
                             const char *metadata, float *buf, float *tbuf) {
  size_t hlen;
  char *hdr = safetensors_header(t, metadata, &hlen, w->err, w->errlen);
  if (!hdr) return -1;
  unsigned char len8[8];
  for (int b = 0; b < 8; b++) len8[b] = (unsigned char)((uint64_t)hlen >> (8 * b));
  int rc = put(w, len8, 8) || put(w, hdr, hlen) ? -1 : 0;
  free(hdr);
  for (int i = 0; !rc && i < t->n_params; i++) {
    const gpt_param *p = &t->params[i];
    char name[96];
    int tr;
    loom__hf_name(p, name, sizeof name, &tr);
    const float *data = fetch(p, tr, rd, ctx, buf, tbuf, w->err, w->errlen);
    rc = !data || put(w, data, p->numel * sizeof(float)) ? -1 : 0;
  }
  return rc;
}

/* llm.c's order: tensor kinds in gpt_param_role order (the same as llm.c's ParameterTensors),
 * each over all layers; wte padded to Vp rows with zeros. */
static int write_llmc(writer *w, const gpt_model *t, loom_tensor_reader rd, void *ctx,
                      float *buf) {
  const gpt_config *c = &t->cfg;
  const int Vp = loom__llmc_padded_vocab(c->vocab_size);
  int32_t hdr[LOOM_LLMC_HEADER_INTS] = {LOOM_LLMC_MAGIC, LOOM_LLMC_VERSION, c->max_seq_len,
                                        c->vocab_size, c->n_layer, c->n_head, c->n_embd, Vp};
  if (put(w, hdr, sizeof hdr)) return -1;
  for (int role = GPT_WTE; role <= GPT_LNF_B; role++) {
    for (int i = 0; i < t->n_params; i++) { /* table order is layer order within a role */
      const gpt_param *p = &t->params[i];
      if ((int)p->role != role) continue;
      if (fetch(p, 0, rd, ctx, buf, NULL, w->err, w->errlen) == NULL ||
          put(w, buf, p->numel * sizeof(float)))
        return -1;
      if (role == GPT_WTE) { /* padded rows: zero, as llm.c's own export writes them */
        memset(buf, 0, (size_t)c->n_embd * sizeof(float));
        for (int r = c->vocab_size; r < Vp; r++)
          if (put(w, buf, (size_t)c->n_embd * sizeof(float))) return -1;
      }
    }
  }
  return 0;
}

int loom__model_file_write(const char *path, loom_model_format format, const gpt_model *table,
                           loom_tensor_reader rd, void *ctx, const char *metadata, char *err,
                           size_t errlen) {
  char tmp[4096];
  if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp) {
    loom__set_err(err, errlen, "%s: path too long", path);
    return -1;
  }
  size_t big = largest_tensor(table);
  float *buf = malloc(big * sizeof(float) + 1), *tbuf = malloc(big * sizeof(float) + 1);
  if (!buf || !tbuf) {
    free(buf);
    free(tbuf);
    loom__set_err(err, errlen, "out of host memory (two tensors of %zu floats)", big);
    return -1;
  }
  writer w = {.fd = loom__create_tmp(tmp, err, errlen), .path = tmp, .err = err,
              .errlen = errlen};
  int rc = w.fd < 0 ? -1 : 0;
  if (!rc)
    rc = format == LOOM_FORMAT_SAFETENSORS ? write_safetensors(&w, table, rd, ctx, metadata, buf,
                                                               tbuf)
                                           : write_llmc(&w, table, rd, ctx, buf);
  if (!rc && fsync(w.fd) != 0) {
    loom__set_err(err, errlen, "%s: fsync: %s", tmp, strerror(errno));
    rc = -1;
  }
  if (w.fd >= 0) close(w.fd);
  if (!rc && rename(tmp, path) != 0) {
    loom__set_err(err, errlen, "%s: cannot rename to %s: %s", tmp, path, strerror(errno));
    rc = -1;
  }
  if (rc && w.fd >= 0) unlink(tmp);
  free(buf);
  free(tbuf);
  return rc;
}
