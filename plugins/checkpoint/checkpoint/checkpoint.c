/* checkpoint.so — sharded checkpoints in a directory per step, published atomically.
 *
 *   DIR/step-00000100/manifest.json   format, step, world size, the host's metadata, and every
 *                                     item's chunks {rank, offset, count, file, at, crc32} and
 *                                     each rank's private blob {blob_at, blob_bytes, blob_crc32}
 *   DIR/step-00000100/manifest.crc32  CRC-32 of manifest.json's bytes ("%08x\n")
 *   DIR/step-00000100/rank-00001.bin  the chunks rank 1 wrote, then its private blob
 *   DIR/latest                        "step-00000100" (a hint for people and tools)
 *
 * Every byte the loader uses is covered by a checksum: the manifest by manifest.crc32, each
 * chunk and each blob by its CRC-32 in the manifest. Every field of the manifest is type- and
 * range-checked before use (manifest.c), and every file is opened without blocking and
 * refused unless it is a regular file (a FIFO never hangs a resume).
 *
 * Save: every rank writes and fsyncs its shard into DIR/.tmp-step-N/; the ranks agree that all
 * succeeded; rank 0 writes the manifest and its checksum, fsyncs, renames the directory to
 * step-N and then replaces `latest` (write + fsync + rename). A crash at any point leaves
 * either the previous checkpoint or the new one, never a half-written one.
 * Resume: the newest step-N directory with a manifest, verified against its checksum; `latest`
 * only confirms it (a crash between the rename and the update of `latest` leaves `latest` one
 * checkpoint behind: the newer one is used, and said so). A newest checkpoint that fails
 * verification stops the resume with the reason rather than silently falling back to an
 * older one whose continuation would overwrite it.
 * Load: each rank reads the chunks it asks for from whichever shard holds them (so a replicated
 * item written once by rank 0 is read by all), verifying each chunk's CRC-32 and the tensor's
 * global size. */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <loom/loom.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "checkpoint.h"
#include "manifest.h"
#include "reader.h"
#include "slice.h"

typedef struct ckpt {
  const loom_host_api_v1 *api;
  loom_host *host;
  const char *dir;
  int64_t every;  /* save every N steps (0 = only the last step) */
  int64_t keep;   /* keep the newest N checkpoints (0 = all) */
  int resume;     /* resume from the newest verified checkpoint at start */
  int rank, world;
  loom_comm *comm;
  char *meta;     /* last loaded metadata (returned by load) */
  int lock_fd;    /* rank 0: DIR/.lock held with flock while the job runs, else -1 */
  char last_error[1024]; /* the last io_fail message, for wrapping in a wider one */
} ckpt;

/* Record an I/O failure as the plugin's error; returns 0 so it reads `ok = io_fail(...)`. */
__attribute__((format(printf, 2, 3))) static int io_fail(ckpt *c, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  snprintf(c->last_error, sizeof c->last_error, "%s", msg);
  c->api->set_error(c->host, "%s", msg);
  return 0;
}

/* ---- small file helpers ---- */
/* snprintf for paths; create() bounds the directory's length, so truncation cannot happen. */
__attribute__((format(printf, 3, 4))) static void path_fmt(char *out, size_t n,
                                                           const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out, n, fmt, ap);
  va_end(ap);
}
static int mkdirs(const char *path) {
  char buf[PATH_MAX];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf + 1; *p; p++)
    if (*p == '/') {
      *p = '\0';
      if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
      *p = '/';
    }
  return mkdir(buf, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

static int fsync_path(const char *path) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return -1;
  int rc = fsync(fd);
  close(fd);
  return rc;
}

static int write_all(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Write `len` bytes to path atomically: path.tmp, fsync, rename. */
static int write_file_atomic(const char *path, const char *text, size_t len) {
  char tmp[PATH_MAX];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  /* replace whatever a killed run or anyone left at tmp: a FIFO there would block the save,
   * a symlink would send the bytes elsewhere (O_EXCL | O_NOFOLLOW refuse what reappears) */
  struct stat st;
  if (lstat(tmp, &st) == 0 && !S_ISDIR(st.st_mode)) (void)unlink(tmp);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  if (write_all(fd, text, len) != 0 || fsync(fd) != 0) {
    close(fd);
    return -1;
  }
  close(fd);
  return rename(tmp, path);
}

/* Open `path` for reading only if it is a regular file: opened non-blocking so a FIFO (or a
 * device) planted in the checkpoint dir is refused at once instead of blocking the job, then
 * switched back to blocking reads. Returns the fd and its size, or -1 with the error set. */
static int open_regular(ckpt *c, const char *path, off_t *size) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    io_fail(c, "cannot open %s: %s", path, strerror(errno));
    return -1;
  }
  struct stat sb;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    io_fail(c, "%s: not a regular file", path);
    close(fd);
    return -1;
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  *size = sb.st_size;
  return fd;
}

/* The whole of a regular file of at most max_bytes, NUL-terminated (caller frees), or NULL
 * with the error set. */
static char *read_small_file(ckpt *c, const char *path, size_t max_bytes, size_t *len) {
  off_t size;
  int fd = open_regular(c, path, &size);
  if (fd < 0) return NULL;
  if (size < 0 || (uint64_t)size > max_bytes) {
    io_fail(c, "%s: %lld bytes, more than the %zu such a file can hold: not loom's", path,
            (long long)size, max_bytes);
    close(fd);
    return NULL;
  }
  char *buf = malloc((size_t)size + 1);
  size_t got = 0;
  while (buf && got < (size_t)size) {
    ssize_t r = read(fd, buf + got, (size_t)size - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  close(fd);
  if (!buf || got != (size_t)size) {
    io_fail(c, "reading %s: %s", path, buf ? "short read" : "out of memory");
    free(buf);
    return NULL;
  }
  buf[got] = '\0';
  *len = got;
  return buf;
}

static int rm_tree(const char *path) {
  DIR *d = opendir(path);
  if (!d) return errno == ENOENT ? 0 : -1;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char p[PATH_MAX];
    path_fmt(p, sizeof p, "%s/%s", path, e->d_name);
    unlink(p);
  }
  closedir(d);
  return rmdir(path);
}

static uint32_t crc_of(const void *buf, size_t bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  for (size_t off = 0; off < bytes; off += 1u << 30) {
    size_t n = bytes - off < (1u << 30) ? bytes - off : (1u << 30);
    crc = crc32(crc, (const Bytef *)buf + off, (uInt)n);
  }
  return (uint32_t)crc;
}

static int has_manifest(ckpt *c, const char *name) {
  char p[PATH_MAX];
  path_fmt(p, sizeof p, "%s/%s/manifest.json", c->dir, name);
  return access(p, F_OK) == 0;
}

/* The newest step with a complete (published) checkpoint in the directory, or 0. */
static int newest_complete_step(ckpt *c) {
  DIR *d = opendir(c->dir);
  if (!d) return 0;
  int best = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    int step = ckpt_step_of(e->d_name);
    if (step > best && has_manifest(c, e->d_name)) best = step;
  }
  closedir(d);
  return best;
}

/* Read, verify against manifest.crc32, parse and check the manifest of `step`. Returns the
 * document (caller decrefs), or NULL with the error set (LOOM_CORRUPT-worthy). */
static json_t *read_manifest(ckpt *c, int step) {
  char mp[PATH_MAX], cp[PATH_MAX];
  path_fmt(mp, sizeof mp, "%s/step-%08d/manifest.json", c->dir, step);
  path_fmt(cp, sizeof cp, "%s/step-%08d/manifest.crc32", c->dir, step);
  size_t len, clen;
  char *text = read_small_file(c, mp, CKPT_MAX_MANIFEST_BYTES, &len);
  if (!text) return NULL;
  char *ctext = read_small_file(c, cp, 64, &clen);
  uint32_t want;
  if (!ctext || ckpt_parse_crc_text(ctext, clen, &want) != 0) {
    if (ctext) io_fail(c, "%s: expected 8 hex digits (the CRC-32 of manifest.json): the "
                       "checkpoint is corrupt", cp);
    free(text);
    free(ctext);
    return NULL;
  }
  free(ctext);
  uint32_t got = crc_of(text, len);
  if (got != want) {
    io_fail(c, "%s: checksum mismatch (CRC-32 %08x, manifest.crc32 says %08x): the checkpoint "
            "is corrupt", mp, got, want);
    free(text);
    return NULL;
  }
  json_error_t je;
  json_t *man = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
  free(text);
  if (!man) {
    io_fail(c, "%s: line %d: %s", mp, je.line, je.text);
    return NULL;
  }
  char why[512];
  if (ckpt_manifest_check(man, step, why, sizeof why) != 0) {
    io_fail(c, "%s: %s", mp, why);
    json_decref(man);
    return NULL;
  }
  return man;
}

/* ---- collectives helpers ---- */
/* 1 if every rank says ok, else 0 (an all-reduce MIN of the flags). */
static int all_ok(ckpt *c, int ok) {
  int32_t v = ok;
  if (c->world > 1 &&
      c->api->all_reduce(c->host, c->comm, &v, 1, LOOM_I32, LOOM_OP_MIN, NULL) != LOOM_OK)
    return 0;
  return v;
}

/* Collective: 1 if every rank says ok. Else 0, and every rank's error is the message of the
 * lowest failing rank ("rank 1: …"), so whichever rank reports the failure names the cause. */
static int agree(ckpt *c, int ok) {
  if (c->world <= 1) return ok;
  int32_t first = ok ? INT32_MAX : c->rank;
  if (c->api->all_reduce(c->host, c->comm, &first, 1, LOOM_I32, LOOM_OP_MIN, NULL) != LOOM_OK)
    return 0;
  if (first == INT32_MAX) return 1;
  char msg[sizeof c->last_error];
  snprintf(msg, sizeof msg, "%s", c->last_error);
  if (c->api->broadcast(c->host, c->comm, msg, sizeof msg, LOOM_U8, first, NULL) != LOOM_OK)
    snprintf(msg, sizeof msg, "(its message could not be received)");
  msg[sizeof msg - 1] = '\0';
  if (c->rank != first) io_fail(c, "rank %d: %s", (int)first, msg);
  return 0;
}

static int ckpt_create(const loom_host_api_v1 *api, loom_host *host, const loom_options *opts,
                       void **out) {
  static const char *const keys[] = {"dir", "every", "keep", "resume", NULL};
  if (api->opt_check_keys(host, opts, keys)) return LOOM_INVALID_CONFIG;
  ckpt *c = calloc(1, sizeof *c);
  if (!c) return LOOM_NOMEM;
  c->api = api;
  c->host = host;
  int rc = api->opt_string(host, opts, "dir", "", &c->dir);
  if (!rc) rc = api->opt_int(host, opts, "every", 0, 0, INT32_MAX, &c->every);
  if (!rc) rc = api->opt_int(host, opts, "keep", 0, 0, INT32_MAX, &c->keep);
  if (!rc) rc = api->opt_bool(host, opts, "resume", 1, &c->resume);
  if (!rc && strlen(c->dir) > PATH_MAX - 64) {
    api->set_error(host, "option 'dir' is longer than %d characters", PATH_MAX - 64);
    rc = LOOM_INVALID_CONFIG;
  }
  if (!rc && !c->dir[0]) {
    api->set_error(host, "option 'dir' is required: the directory to keep checkpoints in, "
                   "e.g. \"dir\": \"runs/NAME/ckpt\"");
    rc = LOOM_INVALID_CONFIG;
  }
  if (rc) {
    free(c);
    return rc;
  }
  c->rank = api->rank(host, LOOM_AXIS_WORLD);
  c->world = api->size(host, LOOM_AXIS_WORLD);
  c->comm = api->comm(host, LOOM_AXIS_WORLD);
  struct stat sb;
  if (mkdirs(c->dir) != 0 || stat(c->dir, &sb) != 0 || !S_ISDIR(sb.st_mode) ||
      access(c->dir, W_OK | X_OK) != 0) {
    api->set_error(host, "option 'dir': %s is not a writable directory: %s", c->dir,
                   strerror(errno ? errno : ENOTDIR));
    free(c);
    return LOOM_IO;
  }
  /* One job per directory: rank 0 holds an flock (released by the kernel when the process
   * dies, so a crash never leaves a stale lock). Two jobs writing one directory would publish
   * each other's steps. */
  c->lock_fd = -1;
  if (c->rank == 0) {
    char lp[PATH_MAX];
    path_fmt(lp, sizeof lp, "%s/.lock", c->dir);
    c->lock_fd = open(lp, O_RDWR | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0644);
    struct stat lb;
    int regular = c->lock_fd >= 0 && fstat(c->lock_fd, &lb) == 0 && S_ISREG(lb.st_mode);
    if (c->lock_fd < 0 || !regular || flock(c->lock_fd, LOCK_EX | LOCK_NB) != 0) {
      int busy = c->lock_fd >= 0 && regular && errno == EWOULDBLOCK;
      api->set_error(host, "option 'dir': %s %s", c->dir,
                     busy ? "is in use by another running job (it holds .lock): wait for it "
                            "to end, or give this run its own checkpoint dir"
                     : !regular && c->lock_fd >= 0 ? "cannot be locked: .lock is not a regular "
                                                     "file (remove it)"
                                                   : "cannot be locked");
      if (c->lock_fd >= 0) close(c->lock_fd);
      free(c);
      return busy ? LOOM_INVALID_USAGE : LOOM_IO;
    }
  }
  int newest = c->resume ? 0 : newest_complete_step(c);
  if (newest > 0) {
    api->set_error(host, "option 'dir': %s already holds checkpoints (newest step %d) and "
                   "'resume' is false: use an empty directory, or resume", c->dir, newest);
    if (c->lock_fd >= 0) close(c->lock_fd);
    free(c);
    return LOOM_INVALID_CONFIG;
  }
  *out = c;
  return LOOM_OK;
}

static void ckpt_destroy(void *ctx) {
  ckpt *c = ctx;
  if (!c) return;
  if (c->lock_fd >= 0) close(c->lock_fd); /* releases the flock */
  free(c->meta);
  free(c);
}

static int ckpt_should_save(void *ctx, int step, int last) {
  ckpt *c = ctx;
  return last || (c->every > 0 && step % c->every == 0);
}

/* ---- the global view (slice.h) ---- */
/* The slice item i of `st` holds: the host's descriptor (ABI 1.4), else the whole flat item. */
static void item_slice(const loom_ckpt_state_v1 *st, int i, ckpt_slice *out) {
  const loom_ckpt_item_v1 *it = &st->items[i];
  *out = (ckpt_slice){.rows = (int64_t)it->global_numel, .cols = 1, .split_dim = -1,
                      .parts = 1, .index = 0, .size = 1};
  if (!LOOM_CKPT_HAS_SLICES(st)) return;
  const loom_ckpt_slice_v1 *d = LOOM_CKPT_SLICE_AT(st, i);
  out->rows = d->shape[0];
  out->cols = d->ndim == 2 ? d->shape[1] : 1;
  if (d->split_dim >= 0 && d->split_size > 1) {
    out->split_dim = d->split_dim;
    out->parts = d->split_parts;
    out->index = d->split_index;
    out->size = d->split_size;
  }
}

static int item_ndim(const loom_ckpt_state_v1 *st, int i) {
  return LOOM_CKPT_HAS_SLICES(st) ? LOOM_CKPT_SLICE_AT(st, i)->ndim : 1;
}

/* Refuse a host's slice descriptor that does not describe its item (a host bug, named). */
static int check_items(ckpt *c, const loom_ckpt_state_v1 *st) {
  for (int i = 0; i < st->n_items; i++) {
    const loom_ckpt_item_v1 *it = &st->items[i];
    ckpt_slice sl;
    item_slice(st, i, &sl);
    int nd = item_ndim(st, i);
    if ((nd != 1 && nd != 2) || ckpt_slice_valid(&sl) != 0 ||
        (uint64_t)sl.rows * (uint64_t)sl.cols != it->global_numel ||
        it->offset > ckpt_slice_numel(&sl) || it->count > ckpt_slice_numel(&sl) - it->offset) {
      io_fail(c, "item '%s': its slice (shape [%lld, %lld], split_dim %d, %d blocks, slice %d "
              "of %d) does not hold [%llu, +%llu) of %llu elements: the host described it "
              "wrongly", it->name, (long long)sl.rows, (long long)sl.cols, sl.split_dim,
              sl.parts, sl.index, sl.size, (unsigned long long)it->offset,
              (unsigned long long)it->count, (unsigned long long)it->global_numel);
      return LOOM_INVALID_USAGE;
    }
  }
  return LOOM_OK;
}

/* This rank's shard: the chunks it writes, then its blob. Returns its index as JSON. */
static json_t *write_shard(ckpt *c, const char *dir, const loom_ckpt_state_v1 *st) {
  char path[PATH_MAX], file[32];
  ckpt_shard_name(file, c->rank);
  path_fmt(path, sizeof path, "%s/%s", dir, file);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    io_fail(c, "cannot create %s: %s", path, strerror(errno));
    return NULL;
  }
  void *dev_ctx;
  const loom_device_v1 *dev = c->api->device(c->host, &dev_ctx);
  json_t *chunks = json_array();
  uint64_t at = 0;
  int ok = 1;
  for (int i = 0; i < st->n_items && ok; i++) {
    const loom_ckpt_item_v1 *it = &st->items[i];
    if (!it->writer) continue;
    size_t bytes = (size_t)it->count * loom_dtype_size(it->dtype);
    void *host = malloc(bytes ? bytes : 1);
    if (!host) {
      ok = io_fail(c, "out of host memory staging %s", it->name);
      break;
    }
    dev->to_host(dev_ctx, host, it->data, bytes);
    uint32_t crc = crc_of(host, bytes);
    if (write_all(fd, host, bytes) != 0) {
      ok = io_fail(c, "writing %s: %s", path, strerror(errno));
    }
    free(host);
    ckpt_slice sl;
    item_slice(st, i, &sl);
    json_t *shape = sl.cols > 1 || item_ndim(st, i) == 2
                        ? json_pack("[I, I]", (json_int_t)sl.rows, (json_int_t)sl.cols)
                        : json_pack("[I]", (json_int_t)sl.rows);
    json_array_append_new(
        chunks, json_pack("{s:s, s:i, s:I, s:o, s:i, s:i, s:i, s:i, s:I, s:I, s:i, s:s, s:I, "
                          "s:I}", "name", it->name, "dtype", (int)it->dtype, "global_numel",
                          (json_int_t)it->global_numel, "shape", shape, "split_dim",
                          sl.split_dim, "split_parts", sl.parts, "split_index", sl.index,
                          "split_size", sl.size, "offset", (json_int_t)it->offset, "count",
                          (json_int_t)it->count, "rank", c->rank, "file", file, "at",
                          (json_int_t)at, "crc32", (json_int_t)crc));
    at += bytes;
  }
  if (ok && st->rank_blob_bytes && write_all(fd, st->rank_blob, st->rank_blob_bytes) != 0) {
    ok = io_fail(c, "writing %s: %s", path, strerror(errno));
  }
  if (ok && fsync(fd) != 0) {
    ok = io_fail(c, "fsync %s: %s", path, strerror(errno));
  }
  close(fd);
  if (!ok) {
    json_decref(chunks);
    return NULL;
  }
  uint32_t blob_crc = crc_of(st->rank_blob_bytes ? st->rank_blob : "", st->rank_blob_bytes);
  return json_pack("{s:i, s:o, s:I, s:I, s:I}", "rank", c->rank, "chunks", chunks, "blob_at",
                   (json_int_t)at, "blob_bytes", (json_int_t)st->rank_blob_bytes, "blob_crc32",
                   (json_int_t)blob_crc);
}

/* Keep the checkpoint just saved and the newest keep-1 older ones of this run. Checkpoints
 * with a higher step than the current one are never touched. */
static void prune(ckpt *c, int current) {
  if (c->keep <= 0) return;
  struct dirent **ents;
  int n = scandir(c->dir, &ents, NULL, alphasort); /* %08d names sort by step */
  if (n < 0) return;
  int kept = 0;
  for (int i = n - 1; i >= 0; i--) {
    int step = ckpt_step_of(ents[i]->d_name);
    if (step >= 0 && step <= current && ++kept > c->keep) {
      char p[PATH_MAX];
      path_fmt(p, sizeof p, "%s/%s", c->dir, ents[i]->d_name);
      rm_tree(p);
    }
    free(ents[i]);
  }
  free(ents);
}

/* Rank 0: merge the ranks' shard indexes into manifest.json (+ manifest.crc32) in tmp, and
 * remove the per-rank index files (nothing in a published checkpoint goes unverified). */
static int write_manifest(ckpt *c, const char *tmp, const loom_ckpt_state_v1 *st) {
  json_error_t je;
  json_t *meta = json_loads(st->meta_json ? st->meta_json : "{}", 0, &je);
  if (!json_is_object(meta)) {
    json_decref(meta);
    return io_fail(c, "the host's metadata is not a JSON object");
  }
  json_t *man = json_pack("{s:s, s:i, s:i, s:o, s:[]}", "format", CKPT_MANIFEST_FORMAT, "step",
                          st->step, "world_size", c->world, "meta", meta, "shards");
  json_t *shards = json_object_get(man, "shards");
  int ok = 1;
  for (int r = 0; r < c->world && ok; r++) {
    char p[PATH_MAX];
    path_fmt(p, sizeof p, "%s/rank-%05d.json", tmp, r);
    json_t *ix = json_load_file(p, 0, &je);
    if (!ix) ok = io_fail(c, "%s: %s", p, je.text);
    else json_array_append_new(shards, ix);
    unlink(p);
  }
  char *text = ok ? json_dumps(man, JSON_INDENT(1)) : NULL;
  json_decref(man);
  if (ok && !text) return io_fail(c, "out of host memory writing the manifest");
  if (!ok) return 0;
  size_t len = strlen(text);
  char crc[16], mp[PATH_MAX], cp[PATH_MAX];
  snprintf(crc, sizeof crc, "%08x\n", crc_of(text, len));
  path_fmt(mp, sizeof mp, "%s/manifest.json", tmp);
  path_fmt(cp, sizeof cp, "%s/manifest.crc32", tmp);
  if (write_file_atomic(mp, text, len) != 0 || write_file_atomic(cp, crc, strlen(crc)) != 0)
    ok = io_fail(c, "writing %s: %s", mp, strerror(errno));
  free(text);
  return ok;
}

static int ckpt_save(void *ctx, const loom_ckpt_state_v1 *st) {
  ckpt *c = ctx;
  char tmp[PATH_MAX], final[PATH_MAX], name[32];
  snprintf(name, sizeof name, "step-%08d", st->step);
  path_fmt(tmp, sizeof tmp, "%s/.tmp-%s", c->dir, name);
  path_fmt(final, sizeof final, "%s/%s", c->dir, name);
  int ok = check_items(c, st) == LOOM_OK;
  if (ok && c->rank == 0) {
    rm_tree(tmp); /* leftovers of a crashed save */
    if (mkdirs(tmp) != 0) ok = io_fail(c, "cannot create %s: %s", tmp, strerror(errno));
  }
  if (!agree(c, ok)) return LOOM_IO;

  json_t *index = write_shard(c, tmp, st);
  char *index_text = index ? json_dumps(index, JSON_COMPACT) : NULL;
  json_decref(index);
  if (index_text) {
    char p[PATH_MAX];
    path_fmt(p, sizeof p, "%s/rank-%05d.json", tmp, c->rank);
    if (write_file_atomic(p, index_text, strlen(index_text)) != 0)
      ok = io_fail(c, "writing %s: %s", p, strerror(errno));
  } else {
    ok = 0;
  }
  free(index_text);
  if (!all_ok(c, ok)) {
    if (ok) io_fail(c, "another rank failed to write its shard");
    return LOOM_IO;
  }

  if (c->rank == 0) {
    ok = write_manifest(c, tmp, st);
    if (ok && fsync_path(tmp) != 0) ok = io_fail(c, "fsync %s: %s", tmp, strerror(errno));
    if (ok) {
      if (has_manifest(c, name)) /* resume starts from the newest, so only a rerun by hand */
        c->api->log(c->host, LOOM_LOG_WARN, "replacing the existing %s", final);
      rm_tree(final);
      if (rename(tmp, final) != 0 || fsync_path(c->dir) != 0)
        ok = io_fail(c, "publishing %s: %s", final, strerror(errno));
    }
    char latest[PATH_MAX];
    path_fmt(latest, sizeof latest, "%s/latest", c->dir);
    /* The host's fault point for tests/integration/resume_verify.sh: a crash between
     * publishing the step and updating `latest`, the window a kill can land in. */
    if (ok && LOOM_HOST_HAS(c->api, fault_point) &&
        c->api->fault_point(c->host, "ckpt.before_latest") != LOOM_OK)
      ok = 0;
    if (ok && (write_file_atomic(latest, name, strlen(name)) != 0 || fsync_path(c->dir) != 0))
      ok = io_fail(c, "updating %s: %s", latest, strerror(errno));
    if (ok) prune(c, st->step);
  }
  if (!all_ok(c, ok)) {
    if (ok) io_fail(c, "rank 0 failed to publish the checkpoint");
    return LOOM_IO;
  }
  return LOOM_OK;
}

/* What `latest` says, for comparing with the newest checkpoint: its step, 0 when it is missing,
 * -1 when it is not a regular file of one "step-%08d" line. */
static int latest_step(ckpt *c) {
  char p[PATH_MAX];
  path_fmt(p, sizeof p, "%s/latest", c->dir);
  if (access(p, F_OK) != 0) return 0;
  size_t len;
  char *text = read_small_file(c, p, 64, &len);
  if (!text) return -1;
  if (len > 0 && text[len - 1] == '\n') text[--len] = '\0';
  int s = strlen(text) == len ? ckpt_step_of(text) : -1;
  free(text);
  return s > 0 ? s : -1;
}

/* Rank 0: the step to resume from (0: none), or -1 with the error set. */
static int choose_step(ckpt *c) {
  int newest = newest_complete_step(c);
  int hint = latest_step(c);
  if (newest == 0) {
    if (hint != 0) c->api->log(c->host, LOOM_LOG_WARN, "%s/latest is there but no step-N "
                               "directory holds a complete checkpoint: starting from step 0",
                               c->dir);
    return 0;
  }
  json_t *man = read_manifest(c, newest);
  if (!man) {
    io_fail(c, "%s/step-%08d, the newest checkpoint, fails verification: %s. Resuming from "
            "an older one would train those steps again and then overwrite it: move it away "
            "(mv %s/step-%08d %s/damaged-step-%08d) to resume from the checkpoint before it",
            c->dir, newest, c->last_error, c->dir, newest, c->dir, newest);
    return -1;
  }
  json_decref(man);
  if (hint < 0)
    c->api->log(c->host, LOOM_LOG_WARN, "%s/latest is damaged (not one \"step-NNNNNNNN\" line "
                "naming a checkpoint): ignoring it; resuming from the newest verified "
                "checkpoint, step-%08d", c->dir, newest);
  else if (hint == 0)
    c->api->log(c->host, LOOM_LOG_WARN, "%s/latest is missing: resuming from the newest "
                "verified checkpoint, step-%08d", c->dir, newest);
  else if (hint > newest)
    c->api->log(c->host, LOOM_LOG_WARN, "%s/latest names step-%08d, which is not a complete "
                "checkpoint: resuming from the newest verified one, step-%08d", c->dir, hint,
                newest);
  else if (hint != newest)
    c->api->log(c->host, LOOM_LOG_WARN, "%s/latest names step-%08d, but step-%08d is newer, "
                "complete and verified (a run stopped after publishing it, before updating "
                "latest): resuming from step %d", c->dir, hint, newest, newest);
  return newest;
}

/* Rank 0 decides; every rank gets the same step. */
static int ckpt_resume_step(void *ctx, int *step) {
  ckpt *c = ctx;
  int32_t s = 0;
  if (c->resume && c->rank == 0) s = choose_step(c);
  if (!agree(c, s >= 0)) return LOOM_CORRUPT;
  if (c->world > 1 &&
      c->api->broadcast(c->host, c->comm, &s, 1, LOOM_I32, 0, NULL) != LOOM_OK)
    return LOOM_REMOTE;
  *step = s;
  return LOOM_OK;
}

/* Read `bytes` at `at` of `file` in `dir` into buf. */
static int read_at(ckpt *c, const char *dir, const char *file, uint64_t at, void *buf,
                   size_t bytes) {
  char p[PATH_MAX];
  path_fmt(p, sizeof p, "%s/%s", dir, file);
  off_t size;
  int fd = open_regular(c, p, &size);
  if (fd < 0) return -1;
  if (at > (uint64_t)size || bytes > (uint64_t)size - at) {
    close(fd);
    io_fail(c, "%s: truncated: %zu bytes wanted at %llu, the file holds %lld: the checkpoint "
            "is corrupt", p, bytes, (unsigned long long)at, (long long)size);
    return -1;
  }
  size_t got = 0;
  while (got < bytes) {
    ssize_t r = pread(fd, (char *)buf + got, bytes - got, (off_t)(at + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      close(fd);
      io_fail(c, "%s: truncated (wanted %zu bytes at %llu)", p, bytes, (unsigned long long)at);
      return -1;
    }
    got += (size_t)r;
  }
  close(fd);
  return 0;
}

/* An integer field of a chunk or shard that ckpt_manifest_check already range-checked. */
static uint64_t u64_of(json_t *o, const char *key) {
  return (uint64_t)json_integer_value(json_object_get(o, key));
}

/* Where the pieces of one saved chunk go: into the host staging buffer of the requested item
 * (global view), or straight to its device memory (flat items). */
typedef struct piece_sink {
  const loom_device_v1 *dev;
  void *dev_ctx;
  char *stage;     /* host, the requested item's count elements, or NULL: copy to device */
  char *dst;       /* the item's device memory */
  uint64_t dst_lo; /* the item's first element (its offset in its slice) */
  const char *src; /* the saved chunk's bytes */
  uint64_t src_lo; /* the chunk's first element in its slice */
  size_t esz;
} piece_sink;

/* ckpt_overlap_fn: `len` elements from the saved chunk's slice element b to the item's a. */
static int put_piece(void *ud, uint64_t a, uint64_t b, uint64_t len) {
  piece_sink *k = ud;
  const char *from = k->src + (b - k->src_lo) * k->esz;
  size_t at = (size_t)(a - k->dst_lo) * k->esz, bytes = (size_t)len * k->esz;
  if (k->stage) memcpy(k->stage + at, from, bytes);
  else k->dev->from_host(k->dev_ctx, k->dst + at, from, bytes);
  return 0;
}

/* Read a saved chunk whole and verify its CRC-32: a chunk is at most one tensor's slice in
 * format 3 (the read buffer of the memory bound), one rank's flat partition in format 2.
 * Returns the bytes (caller frees), or NULL with the error set and *rc the result. */
static char *read_chunk(ckpt *c, const char *dir, json_t *ch, const char *name, int *rc) {
  size_t bytes = (size_t)u64_of(ch, "count") * loom_dtype_size((loom_dtype)u64_of(ch, "dtype"));
  const char *file = json_string_value(json_object_get(ch, "file"));
  char p[PATH_MAX];
  path_fmt(p, sizeof p, "%s/%s", dir, file);
  struct stat sb; /* the size first: a huge count in a damaged manifest allocates nothing */
  if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode) &&
      (u64_of(ch, "at") > (uint64_t)sb.st_size ||
       bytes > (uint64_t)sb.st_size - u64_of(ch, "at"))) {
    io_fail(c, "%s: truncated: item '%s' needs %zu bytes at %llu, the file holds %lld: the "
            "checkpoint is corrupt", p, name, bytes, (unsigned long long)u64_of(ch, "at"),
            (long long)sb.st_size);
    *rc = LOOM_CORRUPT;
    return NULL;
  }
  char *buf = malloc(bytes ? bytes : 1);
  if (!buf) {
    io_fail(c, "out of host memory reading %s", name);
    *rc = LOOM_NOMEM;
    return NULL;
  }
  if (read_at(c, dir, file, u64_of(ch, "at"), buf, bytes) != 0) {
    free(buf);
    *rc = LOOM_CORRUPT;
    return NULL;
  }
  if (crc_of(buf, bytes) != (uint32_t)u64_of(ch, "crc32")) {
    free(buf);
    *rc = LOOM_CORRUPT;
    io_fail(c, "%s/%s: checksum mismatch in item '%s' [%llu, +%llu): the checkpoint is corrupt",
            dir, file, name, (unsigned long long)u64_of(ch, "offset"),
            (unsigned long long)u64_of(ch, "count"));
    return NULL;
  }
  return buf;
}

/* Fill requested item i from the saved chunks of the same name (`saved`, from the name index)
 * that share elements with it, under whatever slicing each was saved: the slices' runs are
 * merged in global order (slice.h), so a tp 2 slice is filled from a tp 1 tensor, tp 4
 * slices, or a ZeRO partition's piece alike. The manifest passed ckpt_manifest_check: every
 * field read here has its type and range. */
static int load_item(ckpt *c, const char *dir, json_t *saved, const loom_ckpt_state_v1 *st,
                     int i) {
  loom_ckpt_item_v1 *it = &st->items[i];
  piece_sink k = {.esz = loom_dtype_size(it->dtype), .dst = it->data, .dst_lo = it->offset};
  k.dev = c->api->device(c->host, &k.dev_ctx);
  ckpt_slice want;
  item_slice(st, i, &want);
  int nd = item_ndim(st, i), rc = LOOM_OK;
  uint64_t covered = 0;
  if (LOOM_CKPT_HAS_SLICES(st) && it->count > 0) {
    k.stage = malloc((size_t)it->count * k.esz);
    if (!k.stage) {
      io_fail(c, "out of host memory reading %s", it->name);
      return LOOM_NOMEM;
    }
  }
  size_t ci;
  json_t *ch;
  json_array_foreach(saved, ci, ch) {
    uint64_t gn = u64_of(ch, "global_numel");
    int dt = (int)u64_of(ch, "dtype");
    ckpt_slice have;
    ckpt_chunk_slice(ch, &have);
    int same_shape = !json_is_array(json_object_get(ch, "shape")) || nd != 2 ||
                     (have.rows == want.rows && have.cols == want.cols);
    if (gn != it->global_numel || dt != (int)it->dtype || !same_shape) {
      io_fail(c, "%s: item '%s' has %llu elements (shape [%lld, %lld]) of dtype %d, this run "
              "needs %llu (shape [%lld, %lld]) of dtype %d: the checkpoint was made for a "
              "different model (compare the model section with meta.config.model in its "
              "manifest.json)", dir, it->name, (unsigned long long)gn, (long long)have.rows,
              (long long)have.cols, dt, (unsigned long long)it->global_numel,
              (long long)want.rows, (long long)want.cols, (int)it->dtype);
      rc = LOOM_CORRUPT;
      break;
    }
    uint64_t lo = u64_of(ch, "offset"), n = u64_of(ch, "count");
    /* a cheap test first: does any element of the chunk fall in the wanted range? */
    if (ckpt_slice_overlap(&want, it->offset, it->offset + it->count, &have, lo, lo + n,
                           NULL, NULL) == 0)
      continue;
    char *buf = read_chunk(c, dir, ch, it->name, &rc);
    if (!buf) break;
    k.src = buf;
    k.src_lo = lo;
    covered += ckpt_slice_overlap(&want, it->offset, it->offset + it->count, &have, lo, lo + n,
                                  put_piece, &k);
    free(buf);
  }
  if (rc == LOOM_OK && covered != it->count) {
    io_fail(c, "%s: item '%s' [%llu, +%llu) is not fully in the checkpoint "
            "(%llu of %llu elements found%s)", dir, it->name,
            (unsigned long long)it->offset, (unsigned long long)it->count,
            (unsigned long long)covered, (unsigned long long)it->count,
            covered > it->count ? ": chunks overlap, the checkpoint is corrupt" : "");
    rc = LOOM_CORRUPT;
  }
  if (rc == LOOM_OK && k.stage)
    k.dev->from_host(k.dev_ctx, it->data, k.stage, (size_t)it->count * k.esz);
  free(k.stage);
  return rc;
}

/* The saved chunks by item name: {name: [chunk, ...]} (borrowed chunk references). */
static json_t *chunks_by_name(json_t *shards) {
  json_t *index = json_object();
  size_t si, ci;
  json_t *shard, *ch;
  json_array_foreach(shards, si, shard) {
    json_array_foreach(json_object_get(shard, "chunks"), ci, ch) {
      const char *name = json_string_value(json_object_get(ch, "name"));
      json_t *list = json_object_get(index, name);
      if (!list) {
        list = json_array();
        json_object_set_new(index, name, list);
      }
      json_array_append(list, ch);
    }
  }
  return index;
}

/* This rank's private blob, when the world size is the one it was saved with, verified. */
static int load_blob(ckpt *c, const char *dir, json_t *man, loom_ckpt_state_v1 *st) {
  if (!st->rank_blob_bytes || u64_of(man, "world_size") != (uint64_t)c->world) return LOOM_OK;
  json_t *mine = json_array_get(json_object_get(man, "shards"), (size_t)c->rank);
  uint64_t n = u64_of(mine, "blob_bytes");
  char file[32];
  ckpt_shard_name(file, c->rank);
  if (n != st->rank_blob_bytes) {
    io_fail(c, "%s/%s: private state is %llu bytes, expected %zu", dir, file,
                      (unsigned long long)n, st->rank_blob_bytes);
    return LOOM_CORRUPT;
  }
  if (read_at(c, dir, file, u64_of(mine, "blob_at"), st->rank_blob, (size_t)n) != 0)
    return LOOM_CORRUPT;
  if (crc_of(st->rank_blob, (size_t)n) != (uint32_t)u64_of(mine, "blob_crc32")) {
    io_fail(c, "%s/%s: checksum mismatch in rank %d's private state (its RNG "
                      "streams): the checkpoint is corrupt", dir, file, c->rank);
    return LOOM_CORRUPT;
  }
  return LOOM_OK;
}

static int ckpt_load(void *ctx, int step, loom_ckpt_state_v1 *st, const char **meta_json) {
  ckpt *c = ctx;
  char dir[PATH_MAX];
  path_fmt(dir, sizeof dir, "%s/step-%08d", c->dir, step);
  json_t *man = read_manifest(c, step);
  int rc = man ? LOOM_OK : LOOM_CORRUPT;
  if (!rc && st->n_items > 0) rc = check_items(c, st);
  json_t *index = man && !rc && st->n_items > 0 ? chunks_by_name(json_object_get(man, "shards"))
                                                : NULL;
  json_t *none = json_array();
  for (int i = 0; !rc && i < st->n_items; i++) {
    json_t *saved = json_object_get(index, st->items[i].name);
    rc = load_item(c, dir, saved ? saved : none, st, i);
  }
  json_decref(none);
  json_decref(index);
  if (!rc) rc = load_blob(c, dir, man, st);
  if (!rc) {
    free(c->meta);
    c->meta = json_dumps(json_object_get(man, "meta"), JSON_COMPACT);
    *meta_json = c->meta;
    if (!c->meta) {
      io_fail(c, "out of host memory");
      rc = LOOM_NOMEM;
    }
  }
  json_decref(man);
  if (!agree(c, rc == LOOM_OK) && rc == LOOM_OK) rc = LOOM_CORRUPT;
  return rc;
}

/* The checkpoint directory, for the host's end-of-run line. */
static const char *ckpt_where(void *ctx) { return ((ckpt *)ctx)->dir; }

/* tests/fixtures builds these sources once more as ckpt_per_rank.so with CKPT_FIXTURE_PER_RANK:
 * a checkpoint plugin without the global view (as every one before ABI 1.4), so the tests
 * exercise the host's per-rank layout and its refusals. */
#ifdef CKPT_FIXTURE_PER_RANK
#define CKPT_CAPS LOOM_CKPT_CAP_RESHARD
#else
#define CKPT_CAPS (LOOM_CKPT_CAP_RESHARD | LOOM_CKPT_CAP_GLOBAL_VIEW)
#endif

LOOM_EXPORT const loom_checkpoint_v1 loom_plugin_v1 = {
  .hdr = LOOM_PLUGIN_HEADER_INIT(LOOM_KIND_CHECKPOINT, "checkpoint", "1.2.0",
                                 "sharded checkpoints: per-rank shards + manifest, atomic "
                                 "publish, every byte CRC-32 verified, a global view of each "
                                 "tensor resharded at load to any mesh",
                                 CKPT_CAPS, loom_checkpoint_v1),
  .create = ckpt_create,
  .destroy = ckpt_destroy,
  .should_save = ckpt_should_save,
  .save = ckpt_save,
  .resume_step = ckpt_resume_step,
  .load = ckpt_load,
  .where = ckpt_where,
  .reader_open = ckpt_reader_open,
  .reader_close = ckpt_reader_close,
  .reader_steps = ckpt_reader_steps,
  .reader_select = ckpt_reader_select,
  .reader_tensor = ckpt_reader_tensor,
  .reader_read = ckpt_reader_read,
};
