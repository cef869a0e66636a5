/* Global tensors out of a loom checkpoint (ckpt_view.h). */
#include "ckpt_view.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <loom/loom.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "../../plugins/checkpoint/checkpoint/manifest.h"
#include "export/gpt2_layout.h"
#include "export/half.h"
#include "util/fs_util.h"
#include "util/input_file.h"

/* "step-00000100" -> 100; -1 for any other name (the plugin's canonical spelling only). */
static int step_of(const char *name) {
  int step;
  char tail, canon[32];
  if (sscanf(name, "step-%d%c", &step, &tail) != 1 || step < 0) return -1;
  snprintf(canon, sizeof canon, "step-%08d", step);
  return strcmp(canon, name) == 0 ? step : -1;
}

static int is_file(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* The newest step-N under dir holding a manifest.json: its step, or 0. */
static int newest_step(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int best = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    int s = step_of(e->d_name);
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s/manifest.json", dir, e->d_name);
    if (s > best && is_file(p)) best = s;
  }
  closedir(d);
  return best;
}

/* Resolve `path` to a step directory in v->dir and its step in v->step. */
static int resolve(loom_ckpt_view *v, const char *path, char *err, size_t errlen) {
  char p[PATH_MAX];
  snprintf(p, sizeof p, "%s/manifest.json", path);
  if (is_file(p)) { /* a step directory: its name gives the step ("ckpt/step-00000100/") */
    char name[PATH_MAX];
    snprintf(name, sizeof name, "%s", path);
    size_t n = strlen(name);
    while (n > 1 && name[n - 1] == '/') name[--n] = '\0';
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    v->step = step_of(base);
    if (v->step < 0) {
      loom__set_err(err, errlen, "%s: a checkpoint step directory is named step-NNNNNNNN (as "
                    "the checkpoint plugin writes it), got '%s'", path, base);
      return -1;
    }
    snprintf(v->dir, sizeof v->dir, "%s", name);
    return 0;
  }
  const char *bases[2] = {path, p};
  snprintf(p, sizeof p, "%s/ckpt", path);
  for (int i = 0; i < 2; i++) {
    int s = newest_step(bases[i]);
    if (s > 0) {
      v->step = s;
      snprintf(v->dir, sizeof v->dir, "%s/step-%08d", bases[i], s);
      return 0;
    }
  }
  loom__set_err(err, errlen, "%s: no checkpoint there (expected a step directory holding "
                "manifest.json, a checkpoint directory holding step-NNNNNNNN directories, or a "
                "run directory whose ckpt/ holds them)", path);
  return -1;
}

static uint32_t crc_of(const void *buf, size_t bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  for (size_t off = 0; off < bytes;) {
    size_t n = bytes - off > (1u << 30) ? (1u << 30) : bytes - off;
    crc = crc32(crc, (const Bytef *)buf + off, (uInt)n);
    off += n;
  }
  return (uint32_t)crc;
}

/* Read and verify manifest.json against manifest.crc32, then check every field. */
static int read_manifest(loom_ckpt_view *v, char *err, size_t errlen) {
  char mp[PATH_MAX], cp[PATH_MAX], e[1024];
  snprintf(mp, sizeof mp, "%s/manifest.json", v->dir);
  snprintf(cp, sizeof cp, "%s/manifest.crc32", v->dir);
  size_t len, clen;
  char *text = loom__read_regular(mp, CKPT_MAX_MANIFEST_BYTES, &len, e, sizeof e);
  if (!text) {
    loom__set_err(err, errlen, "%s", e);
    return -1;
  }
  char *ctext = loom__read_regular(cp, 64, &clen, e, sizeof e);
  uint32_t want;
  if (!ctext || ckpt_parse_crc_text(ctext, clen, &want) != 0 || crc_of(text, len) != want) {
    loom__set_err(err, errlen, "%s: %s", mp, !ctext ? e : "does not match manifest.crc32: the "
                  "checkpoint is damaged");
    free(text);
    free(ctext);
    return -1;
  }
  free(ctext);
  json_error_t je;
  v->man = json_loadb(text, len, 0, &je);
  free(text);
  char why[512];
  if (!v->man || ckpt_manifest_check(v->man, v->step, why, sizeof why) != 0) {
    loom__set_err(err, errlen, "%s: %s", mp, v->man ? why : je.text);
    return -1;
  }
  return 0;
}

/* An integer of the metadata (meta.KEY or meta.OBJ.KEY) in [lo, hi] into *out. */
static int meta_int(loom_ckpt_view *v, const char *obj, const char *key, int lo, int hi,
                    int *out, char *err, size_t errlen) {
  json_t *o = obj ? json_object_get(v->meta, obj) : v->meta;
  json_t *x = json_object_get(o, key);
  if (!json_is_integer(x) || json_integer_value(x) < lo || json_integer_value(x) > hi) {
    loom__set_err(err, errlen, "%s/manifest.json: meta.%s%s%s: expected an integer in [%d, %d]",
                  v->dir, obj ? obj : "", obj ? "." : "", key, lo, hi);
    return -1;
  }
  *out = (int)json_integer_value(x);
  return 0;
}

/* The parameters' items: format 2's flat "params", "params@ppSofP@tpRofT", and format 3's
 * "params/TENSOR" (the pipeline's "params/wte@tied_copy" too: verified, never read). */
static int is_params_item(const char *name) {
  return strcmp(name, "params") == 0 || strncmp(name, "params@", 7) == 0 ||
         strncmp(name, "params/", 7) == 0;
}

/* Stream every parameter chunk through CRC-32 (1 MiB at a time) and compare. */
static int verify_chunks(loom_ckpt_view *v, char *err, size_t errlen) {
  enum { BLOCK = 1 << 20 };
  unsigned char *buf = malloc(BLOCK);
  if (!buf) {
    loom__set_err(err, errlen, "out of host memory");
    return -1;
  }
  int rc = 0;
  size_t si, ci;
  json_t *shard, *ch;
  json_array_foreach(json_object_get(v->man, "shards"), si, shard) {
    json_array_foreach(json_object_get(shard, "chunks"), ci, ch) {
      if (rc || !is_params_item(json_string_value(json_object_get(ch, "name")))) continue;
      const char *file = json_string_value(json_object_get(ch, "file"));
      size_t esz = loom_dtype_size((loom_dtype)json_integer_value(json_object_get(ch, "dtype")));
      uint64_t at = (uint64_t)json_integer_value(json_object_get(ch, "at"));
      uint64_t bytes = (uint64_t)json_integer_value(json_object_get(ch, "count")) * esz;
      char p[PATH_MAX], e[1024];
      snprintf(p, sizeof p, "%s/%s", v->dir, file);
      off_t size;
      int fd = loom__open_regular(p, &size, e, sizeof e);
      if (fd < 0) {
        loom__set_err(err, errlen, "%s", e);
        rc = -1;
        continue;
      }
      if (at > (uint64_t)size || bytes > (uint64_t)size - at) {
        loom__set_err(err, errlen, "%s: truncated: %" PRIu64 " bytes wanted at %" PRIu64 ", "
                      "the file holds %lld: the checkpoint is damaged", p, bytes, at,
                      (long long)size);
        rc = -1;
      }
      uLong crc = crc32(0L, Z_NULL, 0);
      for (uint64_t done = 0; !rc && done < bytes;) {
        size_t n = bytes - done > BLOCK ? BLOCK : (size_t)(bytes - done);
        ssize_t r = pread(fd, buf, n, (off_t)(at + done));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
          loom__set_err(err, errlen, "%s: read error at %" PRIu64 ": %s", p, at + done,
                        r < 0 ? strerror(errno) : "end of file");
          rc = -1;
          break;
        }
        crc = crc32(crc, buf, (uInt)r);
        done += (uint64_t)r;
      }
      close(fd);
      if (!rc && (uint32_t)crc != (uint32_t)json_integer_value(json_object_get(ch, "crc32"))) {
        loom__set_err(err, errlen, "%s: checksum mismatch in item '%s' (chunk at byte %" PRIu64
                      "): the checkpoint is damaged", p,
                      json_string_value(json_object_get(ch, "name")), at);
        rc = -1;
      }
    }
  }
  free(buf);
  return rc;
}

int loom__ckpt_view_open(loom_ckpt_view *v, const char *path, char *err, size_t errlen) {
  memset(v, 0, sizeof *v);
  if (resolve(v, path, err, errlen) != 0 || read_manifest(v, err, errlen) != 0) goto fail;
  v->meta = json_object_get(v->man, "meta");
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
    loom__set_err(err, errlen, "%s/manifest.json: meta.%s: expected %s (the tensor table a "
                  "loom checkpoint records)", v->dir, v->pp > 1 ? "stages" : "tensors",
                  v->pp > 1 ? "one entry per pipeline stage" : "an array");
    goto fail;
  }
  if (verify_chunks(v, err, errlen) != 0) goto fail;
  return 0;
fail:
  loom__ckpt_view_close(v);
  return -1;
}

void loom__ckpt_view_close(loom_ckpt_view *v) {
  json_decref(v->man);
  memset(v, 0, sizeof *v);
}

/* Elements [first, first + n) of chunk ch (of item `item`) into dst, widened to fp32. */
static int read_values(loom_ckpt_view *v, json_t *ch, const char *item, uint64_t first,
                       size_t n, float *dst, char *err, size_t errlen) {
  loom_dtype dt = (loom_dtype)json_integer_value(json_object_get(ch, "dtype"));
  if (dt != LOOM_F32 && dt != LOOM_BF16 && dt != LOOM_F16) {
    loom__set_err(err, errlen, "%s: item '%s' has dtype %d: parameters are fp32, bf16 or fp16",
                  v->dir, item, (int)dt);
    return -1;
  }
  char p[PATH_MAX], e[1024];
  snprintf(p, sizeof p, "%s/%s", v->dir, json_string_value(json_object_get(ch, "file")));
  off_t size;
  int fd = loom__open_regular(p, &size, e, sizeof e);
  if (fd < 0) {
    loom__set_err(err, errlen, "%s", e);
    return -1;
  }
  const size_t esz = loom_dtype_size(dt), bytes = n * esz;
  const uint64_t at = (uint64_t)json_integer_value(json_object_get(ch, "at")) + first * esz;
  /* 16-bit values land in the upper half of dst's range and widen in place */
  char *to = (char *)dst + (dt == LOOM_F32 ? 0 : bytes);
  size_t got = 0;
  while (got < bytes) {
    ssize_t r = pread(fd, to + got, bytes - got, (off_t)(at + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  close(fd);
  if (got != bytes) {
    loom__set_err(err, errlen, "%s: truncated reading item '%s'", p, item);
    return -1;
  }
  if (dt != LOOM_F32) loom__widen_16(dt == LOOM_BF16, (const uint16_t *)to, dst, n);
  return 0;
}

/* All `count` elements of chunk ch (of item `item`) into dst, widened to fp32. */
static int read_chunk(loom_ckpt_view *v, json_t *ch, const char *item, float *dst, char *err,
                      size_t errlen) {
  const size_t n = (size_t)json_integer_value(json_object_get(ch, "count"));
  return read_values(v, ch, item, 0, n, dst, err, errlen);
}

/* Elements [off, off+n) of item `item` into dst (fp32), from whichever chunks hold them. */
static int read_item(loom_ckpt_view *v, const char *item, uint64_t off, uint64_t n, float *dst,
                     char *err, size_t errlen) {
  uint64_t covered = 0;
  size_t si, ci;
  json_t *shard, *ch;
  json_array_foreach(json_object_get(v->man, "shards"), si, shard) {
    json_array_foreach(json_object_get(shard, "chunks"), ci, ch) {
      if (strcmp(json_string_value(json_object_get(ch, "name")), item) != 0) continue;
      uint64_t lo = (uint64_t)json_integer_value(json_object_get(ch, "offset"));
      uint64_t cnt = (uint64_t)json_integer_value(json_object_get(ch, "count"));
      uint64_t a = lo > off ? lo : off, b = lo + cnt < off + n ? lo + cnt : off + n;
      if (a >= b) continue;
      if (read_values(v, ch, item, a - lo, (size_t)(b - a), dst + (a - off), err, errlen) != 0)
        return -1;
      covered += b - a;
    }
  }
  if (covered != n) {
    loom__set_err(err, errlen, "%s: item '%s' [%" PRIu64 ", +%" PRIu64 ") is not fully in the "
                  "checkpoint (%" PRIu64 " elements found)", v->dir, item, off, n, covered);
    return -1;
  }
  return 0;
}

/* Format 3: the global tensor `p` from the chunks of item "params/NAME". Each chunk holds local
 * elements [offset, offset + count) of one tensor-parallel slice; the slice's runs (slice.h)
 * place them in the global tensor. Elements past p's own (a padded wte's rows V..Vp-1, at the
 * end in row-major order) are dropped; every one of p's must be found. */
static int read_global(loom_ckpt_view *v, const gpt_param *p, float *dst, char *err,
                       size_t errlen) {
  const int64_t rows = p->shape[0], cols = p->ndim == 2 ? p->shape[1] : 1;
  const uint64_t want = (uint64_t)rows * (uint64_t)cols;
  char item[96];
  snprintf(item, sizeof item, "params/%s", p->name);
  uint64_t covered = 0;
  int found = 0;
  size_t si, ci;
  json_t *shard, *ch;
  json_array_foreach(json_object_get(v->man, "shards"), si, shard) {
    json_array_foreach(json_object_get(shard, "chunks"), ci, ch) {
      if (strcmp(json_string_value(json_object_get(ch, "name")), item) != 0) continue;
      ckpt_slice s;
      ckpt_chunk_slice(ch, &s);
      json_t *shape = json_object_get(ch, "shape");
      /* only wte's rows may differ: the checkpoint's Vp against the table's V */
      int rows_ok = s.rows == rows || (p->role == GPT_WTE && s.rows > rows);
      if (!json_is_array(shape) || json_array_size(shape) != (size_t)p->ndim || !rows_ok ||
          s.cols != cols) {
        loom__set_err(err, errlen, "%s/manifest.json: item '%s' has global shape [%" PRId64
                      ", %" PRId64 "], a GPT-2 of the checkpoint's meta.model needs [%" PRId64
                      ", %" PRId64 "]%s", v->dir, item, (int64_t)s.rows, (int64_t)s.cols, rows,
                      cols, p->role == GPT_WTE ? " (or more rows: a padded vocabulary)" : "");
        return -1;
      }
      uint64_t lo = (uint64_t)json_integer_value(json_object_get(ch, "offset"));
      uint64_t cnt = (uint64_t)json_integer_value(json_object_get(ch, "count"));
      found = 1;
      if (cnt == 0) continue;
      float *buf = malloc(cnt * sizeof(float));
      if (!buf) {
        loom__set_err(err, errlen, "out of host memory reading '%s'", item);
        return -1;
      }
      int rc = read_chunk(v, ch, item, buf, err, errlen);
      const uint64_t run = ckpt_slice_run_len(&s);
      for (uint64_t k = lo / run; !rc && k * run < lo + cnt; k++) {
        uint64_t a = k * run > lo ? k * run : lo;
        uint64_t b = (k + 1) * run < lo + cnt ? (k + 1) * run : lo + cnt;
        uint64_t g = ckpt_slice_run_global(&s, k) + (a - k * run);
        if (g >= want) continue; /* a padded row */
        uint64_t n = b - a < want - g ? b - a : want - g;
        memcpy(dst + g, buf + (a - lo), n * sizeof(float));
        covered += n;
      }
      free(buf);
      if (rc) return -1;
    }
  }
  if (!found || covered != want) {
    loom__set_err(err, errlen, "%s: item '%s' %s (%" PRIu64 " of its %" PRIu64 " elements "
                  "found): the checkpoint is damaged or not a GPT-2 of its meta.model", v->dir,
                  item, found ? "is not fully in the checkpoint" : "is missing", covered, want);
    return -1;
  }
  return 0;
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
    loom__set_err(err, errlen, "%s/manifest.json: the tensor table has no consistent entry for "
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
    rc = read_item(v, item, (uint64_t)json_integer_value(offset), local_n, local, err, errlen);
    for (int64_t i = 0; !rc && i < rows; i++)
      for (int64_t j = 0; j < cols; j++) {
        int64_t li = loom__tp_local_index(rows, cols, sd, sp, tp, r, i, j);
        if (li >= 0) dst[i * cols + j] = local[li];
      }
  }
  free(local);
  return rc;
}
