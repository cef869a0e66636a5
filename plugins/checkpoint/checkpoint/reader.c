/* checkpoint.so's reader (checkpoint_v1.h, ABI 1.6): its own directories read by a command
 * with no job (loom export). The path is a step directory (holding manifest.json), a checkpoint
 * directory (its step-N directories), or a run directory whose ckpt/ is one. A step is verified
 * as a load verifies it: manifest.json against manifest.crc32 and every field checked
 * (manifest.c); each chunk's CRC-32 is streamed (1 MiB at a time) the first time a read touches
 * it, then the elements asked for are read where they lie. Tensors are the manifest's items;
 * a read of any element range of one is assembled from the chunks of every rank under
 * whatever slicing saved them (slice.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <loom/loom.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "manifest.h"
#include "reader.h"
#include "slice.h"

typedef struct rd_reader {
  const loom_host_api_v1 *api;
  loom_host *host;
  char dir[PATH_MAX];   /* the directory holding the step-N directories */
  int only_step;        /* > 0: the path named this step's directory, the only step */
  char where[PATH_MAX]; /* the selected step's directory */
  json_t *man;          /* its manifest (owned) */
  char *meta;           /* man.meta as compact text */
  json_t *names;        /* the items' names, in the order first saved */
  json_t *chunks;       /* {name: [chunk, ...]} (borrowed chunk references) */
} rd_reader;

__attribute__((format(printf, 3, 4))) static int rd_fail(rd_reader *r, int rc, const char *fmt,
                                                         ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  r->api->set_error(r->host, "%s", msg);
  return rc;
}

static int rd_is_file(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Open a regular file without blocking (a FIFO planted in the directory is refused at once). */
static int rd_open_regular(rd_reader *r, const char *path, off_t *size) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  struct stat sb;
  if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    rd_fail(r, 0, "%s: %s", path, fd < 0 ? strerror(errno) : "not a regular file");
    if (fd >= 0) close(fd);
    return -1;
  }
  *size = sb.st_size;
  return fd;
}

/* A whole regular file of at most max bytes, NUL-terminated (caller frees), or NULL. */
static char *rd_read_small(rd_reader *r, const char *path, size_t max, size_t *len) {
  off_t size;
  int fd = rd_open_regular(r, path, &size);
  if (fd < 0) return NULL;
  char *buf = size >= 0 && (uint64_t)size <= max ? malloc((size_t)size + 1) : NULL;
  ssize_t got = buf ? pread(fd, buf, (size_t)size, 0) : -1;
  close(fd);
  if (!buf || got != size) {
    rd_fail(r, 0, "%s: %s", path, !buf ? "too large for a checkpoint's file" : "short read");
    free(buf);
    return NULL;
  }
  buf[size] = '\0';
  *len = (size_t)size;
  return buf;
}

static int rd_has_step(const char *dir, int step) {
  char p[PATH_MAX + 64];
  snprintf(p, sizeof p, "%s/step-%08d/manifest.json", dir, step);
  return rd_is_file(p);
}

/* The complete steps under dir, ascending, into steps[0 .. max); returns how many in all. */
static int rd_list_steps(const char *dir, int *steps, int max) {
  struct dirent **ents;
  int n = scandir(dir, &ents, NULL, alphasort), k = 0; /* %08d names sort by step */
  for (int i = 0; i < n; i++) {
    int s = ckpt_step_of(ents[i]->d_name);
    if (s > 0 && rd_has_step(dir, s)) {
      if (k < max) steps[k] = s;
      k++;
    }
    free(ents[i]);
  }
  if (n >= 0) free(ents);
  return k;
}

/* Where `path` points: a step directory (r->only_step), or a directory of steps. */
static int rd_resolve(rd_reader *r, const char *path) {
  char p[PATH_MAX + 64];
  snprintf(p, sizeof p, "%s/manifest.json", path);
  if (rd_is_file(p)) { /* a step directory: its name gives the step ("ckpt/step-00000100/") */
    char name[PATH_MAX];
    snprintf(name, sizeof name, "%s", path);
    size_t n = strlen(name);
    while (n > 1 && name[n - 1] == '/') name[--n] = '\0';
    char *slash = strrchr(name, '/');
    const char *base = slash ? slash + 1 : name;
    r->only_step = ckpt_step_of(base);
    if (r->only_step < 0)
      return rd_fail(r, LOOM_IO, "%s: a checkpoint step directory is named step-NNNNNNNN (as the "
                  "checkpoint plugin writes it), got '%s'", path, base);
    if (slash) *slash = '\0';
    snprintf(r->dir, sizeof r->dir, "%s", slash ? (name[0] ? name : "/") : ".");
    return LOOM_OK;
  }
  snprintf(p, sizeof p, "%s/ckpt", path);
  const char *bases[2] = {path, p};
  for (int i = 0; i < 2; i++)
    if (rd_list_steps(bases[i], NULL, 0) > 0) {
      snprintf(r->dir, sizeof r->dir, "%s", bases[i]);
      return LOOM_OK;
    }
  return rd_fail(r, LOOM_IO, "%s: no checkpoint there (expected a step directory holding "
              "manifest.json, a checkpoint directory holding step-NNNNNNNN directories, or a "
              "run directory whose ckpt/ holds them)", path);
}

int ckpt_reader_open(const loom_host_api_v1 *api, loom_host *host, const loom_options *opts,
                       const char *path, void **out) {
  static const char *const keys[] = {"dir", "every", "keep", "resume", NULL};
  if (api->opt_check_keys(host, opts, keys)) return LOOM_INVALID_CONFIG;
  const char *dir = "";
  if (api->opt_string(host, opts, "dir", "", &dir)) return LOOM_INVALID_CONFIG;
  rd_reader *r = calloc(1, sizeof *r);
  if (!r) return LOOM_NOMEM;
  r->api = api;
  r->host = host;
  int rc = path || dir[0] ? rd_resolve(r, path ? path : dir)
                          : rd_fail(r, LOOM_INVALID_CONFIG, "no checkpoint named: give its path, "
                                 "or option 'dir'");
  if (rc) {
    free(r);
    return rc;
  }
  *out = r;
  return LOOM_OK;
}

static void rd_unselect(rd_reader *r) {
  json_decref(r->man);
  json_decref(r->names);
  json_decref(r->chunks);
  free(r->meta);
  r->man = r->names = r->chunks = NULL;
  r->meta = NULL;
}

void ckpt_reader_close(void *ctx) {
  rd_reader *r = ctx;
  if (!r) return;
  rd_unselect(r);
  free(r);
}

int ckpt_reader_steps(void *ctx, int *steps, int max, int *n) {
  rd_reader *r = ctx;
  if (r->only_step > 0) {
    if (max > 0) steps[0] = r->only_step;
    *n = 1;
  } else {
    *n = rd_list_steps(r->dir, steps, max);
  }
  return LOOM_OK;
}

static uint32_t rd_crc_text(const char *text, size_t len) {
  return (uint32_t)crc32(crc32(0L, Z_NULL, 0), (const Bytef *)text, (uInt)len);
}

/* Read and verify r->where/manifest.json against manifest.crc32, then check every field. */
static int rd_read_manifest(rd_reader *r, int step) {
  char mp[PATH_MAX + 16], cp[PATH_MAX + 16];
  snprintf(mp, sizeof mp, "%s/manifest.json", r->where);
  snprintf(cp, sizeof cp, "%s/manifest.crc32", r->where);
  size_t len, clen;
  char *text = rd_read_small(r, mp, CKPT_MAX_MANIFEST_BYTES, &len);
  if (!text) return LOOM_CORRUPT;
  char *ctext = rd_read_small(r, cp, 64, &clen);
  uint32_t want;
  if (!ctext || ckpt_parse_crc_text(ctext, clen, &want) != 0 || rd_crc_text(text, len) != want) {
    if (ctext) rd_fail(r, 0, "%s: does not match manifest.crc32: the checkpoint is damaged", mp);
    free(text);
    free(ctext);
    return LOOM_CORRUPT;
  }
  free(ctext);
  json_error_t je;
  r->man = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
  free(text);
  char why[512];
  if (!r->man || ckpt_manifest_check(r->man, step, why, sizeof why) != 0)
    return rd_fail(r, LOOM_CORRUPT, "%s: %s", mp, r->man ? why : je.text);
  return LOOM_OK;
}

int ckpt_reader_select(void *ctx, int step, loom_ckpt_info_v1 *info) {
  rd_reader *r = ctx;
  rd_unselect(r);
  if (step == 0) {
    int n = 0;
    ckpt_reader_steps(r, NULL, 0, &n);
    int *all = calloc((size_t)n + 1, sizeof *all);
    if (!all) return rd_fail(r, LOOM_NOMEM, "out of host memory");
    ckpt_reader_steps(r, all, n, &n);
    step = n > 0 ? all[n - 1] : 0;
    free(all);
  }
  if (step <= 0 || (r->only_step > 0 ? step != r->only_step : !rd_has_step(r->dir, step)))
    return rd_fail(r, LOOM_INVALID_USAGE, "%s: no complete checkpoint of step %d there",
                r->dir, step);
  snprintf(r->where, sizeof r->where, "%s/step-%08d", r->dir, step);
  int rc = rd_read_manifest(r, step);
  if (rc) return rc;
  r->meta = json_dumps(json_object_get(r->man, "meta"), JSON_COMPACT);
  r->names = json_array();
  r->chunks = json_object();
  size_t si, ci;
  json_t *shard, *ch;
  json_array_foreach(json_object_get(r->man, "shards"), si, shard) {
    json_array_foreach(json_object_get(shard, "chunks"), ci, ch) {
      const char *name = json_string_value(json_object_get(ch, "name"));
      json_t *list = json_object_get(r->chunks, name);
      if (!list) {
        json_array_append_new(r->names, json_string(name));
        json_object_set_new(r->chunks, name, list = json_array());
      }
      json_array_append(list, ch);
    }
  }
  if (!r->meta) return rd_fail(r, LOOM_NOMEM, "out of host memory");
  info->step = step;
  info->where = r->where;
  info->meta_json = r->meta;
  info->n_tensors = (int)json_array_size(r->names);
  return LOOM_OK;
}

static uint64_t rd_u64_of(json_t *o, const char *key) {
  return (uint64_t)json_integer_value(json_object_get(o, key));
}

int ckpt_reader_tensor(void *ctx, int i, loom_ckpt_tensor_v1 *out) {
  rd_reader *r = ctx;
  const char *name = json_string_value(json_array_get(r->names, (size_t)i));
  if (!name) return rd_fail(r, LOOM_INVALID_USAGE, "no saved tensor %d", i);
  json_t *ch = json_array_get(json_object_get(r->chunks, name), 0);
  ckpt_slice s;
  ckpt_chunk_slice(ch, &s);
  json_t *shape = json_object_get(ch, "shape");
  out->name = name;
  out->dtype = (loom_dtype)rd_u64_of(ch, "dtype");
  out->numel = rd_u64_of(ch, "global_numel");
  out->ndim = json_array_size(shape) == 2 ? 2 : 1;
  out->shape[0] = s.rows;
  out->shape[1] = out->ndim == 2 ? s.cols : 0;
  return LOOM_OK;
}

/* Stream the chunk's bytes through CRC-32 and compare, once per chunk ("verified" marks it in
 * the manifest held in memory). */
static int rd_verify_chunk(rd_reader *r, json_t *ch, int fd, const char *path) {
  if (json_is_true(json_object_get(ch, "verified"))) return LOOM_OK;
  enum { BLOCK = 1 << 20 };
  unsigned char *buf = malloc(BLOCK);
  if (!buf) return rd_fail(r, LOOM_NOMEM, "out of host memory");
  uint64_t at = rd_u64_of(ch, "at");
  uint64_t bytes = rd_u64_of(ch, "count") * loom_dtype_size((loom_dtype)rd_u64_of(ch, "dtype"));
  uLong crc = crc32(0L, Z_NULL, 0);
  int rc = LOOM_OK;
  for (uint64_t done = 0; done < bytes;) {
    size_t n = bytes - done > BLOCK ? BLOCK : (size_t)(bytes - done);
    ssize_t got = pread(fd, buf, n, (off_t)(at + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      rc = rd_fail(r, LOOM_CORRUPT, "%s: truncated: %" PRIu64 " bytes wanted at %" PRIu64 ": the "
                "checkpoint is damaged", path, bytes, at);
      break;
    }
    crc = crc32(crc, buf, (uInt)got);
    done += (uint64_t)got;
  }
  free(buf);
  if (!rc && (uint32_t)crc != (uint32_t)rd_u64_of(ch, "crc32"))
    rc = rd_fail(r, LOOM_CORRUPT, "%s: checksum mismatch in item '%s' (chunk at byte %" PRIu64
              "): the checkpoint is damaged", path,
              json_string_value(json_object_get(ch, "name")), at);
  if (!rc) json_object_set_new(ch, "verified", json_true());
  return rc;
}

/* Where the pieces of one chunk go: dst holds elements [first, ...) of the global tensor. */
typedef struct rd_sink {
  rd_reader *r;
  int fd;
  const char *path;
  char *dst;
  uint64_t first, chunk_lo, at;
  size_t esz;
} rd_sink;

/* ckpt_overlap_fn: `len` elements at global element a (the whole tensor is slice A) from local
 * element b of the chunk's slice. */
static int rd_read_piece(void *ud, uint64_t a, uint64_t b, uint64_t len) {
  rd_sink *k = ud;
  char *to = k->dst + (a - k->first) * k->esz;
  size_t bytes = (size_t)len * k->esz, got = 0;
  off_t from = (off_t)(k->at + (b - k->chunk_lo) * k->esz);
  while (got < bytes) {
    ssize_t n = pread(k->fd, to + got, bytes - got, from + (off_t)got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return rd_fail(k->r, -1, "%s: truncated reading the checkpoint", k->path);
    got += (size_t)n;
  }
  return 0;
}

int ckpt_reader_read(void *ctx, const char *name, uint64_t first, uint64_t count,
                       void *dst) {
  rd_reader *r = ctx;
  json_t *list = r->chunks ? json_object_get(r->chunks, name) : NULL;
  json_t *ch0 = json_array_get(list, 0);
  if (!ch0) return rd_fail(r, LOOM_INVALID_USAGE, "%s: no item '%s' saved", r->where, name);
  uint64_t numel = rd_u64_of(ch0, "global_numel");
  if (first > numel || count > numel - first)
    return rd_fail(r, LOOM_INVALID_USAGE, "%s: item '%s' has %" PRIu64 " elements, [%" PRIu64
                ", +%" PRIu64 ") asked for", r->where, name, numel, first, count);
  ckpt_slice whole;
  ckpt_chunk_slice(ch0, &whole);
  whole.split_dim = -1;
  whole.parts = whole.size = 1;
  whole.index = 0;
  uint64_t covered = 0;
  size_t ci;
  json_t *ch;
  json_array_foreach(list, ci, ch) {
    ckpt_slice have;
    ckpt_chunk_slice(ch, &have);
    uint64_t lo = rd_u64_of(ch, "offset"), n = rd_u64_of(ch, "count");
    if (rd_u64_of(ch, "dtype") != rd_u64_of(ch0, "dtype") || rd_u64_of(ch, "global_numel") != numel ||
        have.rows != whole.rows || have.cols != whole.cols)
      return rd_fail(r, LOOM_CORRUPT, "%s: the chunks of item '%s' disagree on its dtype or "
                  "shape: the checkpoint is damaged", r->where, name);
    if (ckpt_slice_overlap(&whole, first, first + count, &have, lo, lo + n, NULL, NULL) == 0)
      continue;
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", r->where,
             json_string_value(json_object_get(ch, "file")));
    off_t size;
    int fd = rd_open_regular(r, path, &size);
    if (fd < 0) return LOOM_IO;
    rd_sink k = {.r = r, .fd = fd, .path = path, .dst = dst, .first = first,
                    .chunk_lo = lo, .at = rd_u64_of(ch, "at"),
                    .esz = loom_dtype_size((loom_dtype)rd_u64_of(ch, "dtype"))};
    int rc = rd_verify_chunk(r, ch, fd, path);
    uint64_t got = rc ? 0 : ckpt_slice_overlap(&whole, first, first + count, &have, lo, lo + n,
                                               rd_read_piece, &k);
    close(fd);
    if (rc) return rc;
    if (got == UINT64_MAX) return LOOM_IO;
    covered += got;
  }
  if (covered != count)
    return rd_fail(r, LOOM_CORRUPT, "%s: item '%s' [%" PRIu64 ", +%" PRIu64 ") is not fully in the "
                "checkpoint (%" PRIu64 " elements found)", r->where, name, first, count,
                covered);
  return LOOM_OK;
}
