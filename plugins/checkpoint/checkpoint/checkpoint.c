/* checkpoint.so — sharded checkpoints in a directory per step, published atomically.
 *
 *   DIR/step-00000100/manifest.json   format, step, world size, the host's metadata, and every
 *                                     item's chunks {rank, offset, count, file, at, crc32}
 *   DIR/step-00000100/rank-00001.bin  the chunks rank 1 wrote, then its private blob
 *   DIR/latest                        "step-00000100"
 *
 * Save: every rank writes and fsyncs its shard into DIR/.tmp-step-N/; the ranks agree that all
 * succeeded; rank 0 writes the manifest, fsyncs, renames the directory to step-N and then
 * replaces `latest` (write + fsync + rename). A crash at any point leaves either the previous
 * checkpoint or the new one, never a half-written one that `latest` names.
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

typedef struct ckpt {
  const loom_host_api_v1 *api;
  loom_host *host;
  const char *dir;
  int64_t every;  /* save every N steps (0 = only the last step) */
  int64_t keep;   /* keep the newest N checkpoints (0 = all) */
  int resume;     /* resume from `latest` at start */
  int rank, world;
  loom_comm *comm;
  char *meta;     /* last loaded metadata (returned by load) */
  int lock_fd;    /* rank 0: DIR/.lock held with flock while the job runs, else -1 */
} ckpt;

/* Record an I/O failure as the plugin's error; returns 0 so it reads `ok = io_fail(...)`. */
__attribute__((format(printf, 2, 3))) static int io_fail(ckpt *c, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
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
  int fd = open(path, O_RDONLY);
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

/* Write `text` to path atomically: path.tmp, fsync, rename. */
static int write_file_atomic(const char *path, const char *text) {
  char tmp[PATH_MAX];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return -1;
  if (write_all(fd, text, strlen(text)) != 0 || fsync(fd) != 0) {
    close(fd);
    return -1;
  }
  close(fd);
  return rename(tmp, path);
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

/* The step of a "step-%08d" directory name, or -1. */
static int step_of(const char *name) {
  int step;
  char tail;
  return sscanf(name, "step-%d%c", &step, &tail) == 1 && step >= 0 ? step : -1;
}

static int has_manifest(ckpt *c, const char *name) {
  char p[PATH_MAX];
  path_fmt(p, sizeof p, "%s/%s/manifest.json", c->dir, name);
  return access(p, R_OK) == 0;
}

/* The newest step with a complete (published) checkpoint in the directory, or 0. */
static int newest_complete_step(ckpt *c) {
  DIR *d = opendir(c->dir);
  if (!d) return 0;
  int best = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    int step = step_of(e->d_name);
    if (step > best && has_manifest(c, e->d_name)) best = step;
  }
  closedir(d);
  return best;
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
    c->lock_fd = open(lp, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (c->lock_fd < 0 || flock(c->lock_fd, LOCK_EX | LOCK_NB) != 0) {
      int busy = c->lock_fd >= 0 && errno == EWOULDBLOCK;
      api->set_error(host, "option 'dir': %s %s", c->dir,
                     busy ? "is in use by another running job (it holds .lock): wait for it "
                            "to end, or give this run its own checkpoint dir"
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

/* This rank's shard: the chunks it writes, then its blob. Returns its index as JSON. */
static json_t *write_shard(ckpt *c, const char *dir, const loom_ckpt_state_v1 *st) {
  char path[PATH_MAX], file[32];
  snprintf(file, sizeof file, "rank-%05d.bin", c->rank);
  path_fmt(path, sizeof path, "%s/%s", dir, file);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
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
    uLong crc = crc32(0L, host, (uInt)0);
    for (size_t off = 0; off < bytes; off += 1u << 30) {
      size_t n = bytes - off < (1u << 30) ? bytes - off : (1u << 30);
      crc = crc32(crc, (const Bytef *)host + off, (uInt)n);
    }
    if (write_all(fd, host, bytes) != 0) {
      ok = io_fail(c, "writing %s: %s", path, strerror(errno));
    }
    free(host);
    json_array_append_new(chunks,
                          json_pack("{s:s, s:i, s:I, s:I, s:I, s:i, s:s, s:I, s:I}", "name",
                                    it->name, "dtype", (int)it->dtype, "global_numel",
                                    (json_int_t)it->global_numel, "offset",
                                    (json_int_t)it->offset, "count", (json_int_t)it->count,
                                    "rank", c->rank, "file", file, "at", (json_int_t)at, "crc32",
                                    (json_int_t)crc));
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
  return json_pack("{s:i, s:o, s:I, s:I}", "rank", c->rank, "chunks", chunks, "blob_at",
                   (json_int_t)at, "blob_bytes", (json_int_t)st->rank_blob_bytes);
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
    int step = step_of(ents[i]->d_name);
    if (step >= 0 && step <= current && ++kept > c->keep) {
      char p[PATH_MAX];
      path_fmt(p, sizeof p, "%s/%s", c->dir, ents[i]->d_name);
      rm_tree(p);
    }
    free(ents[i]);
  }
  free(ents);
}

static int ckpt_save(void *ctx, const loom_ckpt_state_v1 *st) {
  ckpt *c = ctx;
  char tmp[PATH_MAX], final[PATH_MAX], name[32];
  snprintf(name, sizeof name, "step-%08d", st->step);
  path_fmt(tmp, sizeof tmp, "%s/.tmp-%s", c->dir, name);
  path_fmt(final, sizeof final, "%s/%s", c->dir, name);
  int ok = 1;
  if (c->rank == 0) {
    rm_tree(tmp); /* leftovers of a crashed save */
    if (mkdirs(tmp) != 0) ok = io_fail(c, "cannot create %s: %s", tmp, strerror(errno));
  }
  if (!all_ok(c, ok)) {
    if (ok) io_fail(c, "rank 0 could not create %s", tmp);
    return LOOM_IO;
  }

  json_t *index = write_shard(c, tmp, st);
  char *index_text = index ? json_dumps(index, JSON_COMPACT) : NULL;
  json_decref(index);
  if (index_text) {
    char p[PATH_MAX];
    path_fmt(p, sizeof p, "%s/rank-%05d.json", tmp, c->rank);
    if (write_file_atomic(p, index_text) != 0) ok = io_fail(c, "writing %s: %s", p, strerror(errno));
  } else {
    ok = 0;
  }
  free(index_text);
  if (!all_ok(c, ok)) {
    if (ok) c->api->set_error(c->host, "another rank failed to write its shard");
    return LOOM_IO;
  }

  if (c->rank == 0) {
    json_error_t je;
    json_t *meta = json_loads(st->meta_json ? st->meta_json : "{}", 0, &je);
    json_t *man = json_pack("{s:s, s:i, s:i, s:o, s:[]}", "format", "loom-checkpoint-1", "step",
                            st->step, "world_size", c->world, "meta",
                            meta ? meta : json_object(), "shards");
    json_t *shards = json_object_get(man, "shards");
    for (int r = 0; r < c->world && ok; r++) {
      char p[PATH_MAX];
      path_fmt(p, sizeof p, "%s/rank-%05d.json", tmp, r);
      json_t *ix = json_load_file(p, 0, &je);
      if (!ix) ok = io_fail(c, "%s: %s", p, je.text);
      else json_array_append_new(shards, ix);
    }
    char mp[PATH_MAX];
    path_fmt(mp, sizeof mp, "%s/manifest.json", tmp);
    if (ok && json_dump_file(man, mp, JSON_INDENT(1)) != 0)
      ok = io_fail(c, "writing %s", mp);
    json_decref(man);
    if (ok && (fsync_path(mp) != 0 || fsync_path(tmp) != 0))
      ok = io_fail(c, "fsync %s: %s", tmp, strerror(errno));
    if (ok) {
      rm_tree(final); /* an older save of the same step (a rerun) */
      if (rename(tmp, final) != 0 || fsync_path(c->dir) != 0)
        ok = io_fail(c, "publishing %s: %s", final, strerror(errno));
    }
    char latest[PATH_MAX];
    path_fmt(latest, sizeof latest, "%s/latest", c->dir);
    if (ok && (write_file_atomic(latest, name) != 0 || fsync_path(c->dir) != 0))
      ok = io_fail(c, "updating %s: %s", latest, strerror(errno));
    if (ok) prune(c, st->step);
  }
  if (!all_ok(c, ok)) {
    if (ok) c->api->set_error(c->host, "rank 0 failed to publish the checkpoint");
    return LOOM_IO;
  }
  return LOOM_OK;
}

/* Rank 0 decides; every rank gets the same step. */
/* Rank 0 decides; every rank gets the same step. `latest` names the checkpoint; without it
 * (deleted, or a crash before the first publish) the newest complete one is used. */
static int ckpt_resume_step(void *ctx, int *step) {
  ckpt *c = ctx;
  int32_t s = 0;
  if (c->resume && c->rank == 0) {
    char p[PATH_MAX], buf[64] = "";
    path_fmt(p, sizeof p, "%s/latest", c->dir);
    FILE *f = fopen(p, "r");
    if (f) {
      if (!fgets(buf, sizeof buf, f) || (s = step_of(buf)) <= 0) s = -1;
      fclose(f);
    } else if ((s = newest_complete_step(c)) > 0) {
      c->api->log(c->host, LOOM_LOG_WARN, "%s/latest is missing: resuming from the newest "
                  "complete checkpoint, step-%08d", c->dir, s);
    }
  }
  if (c->world > 1 &&
      c->api->broadcast(c->host, c->comm, &s, 1, LOOM_I32, 0, NULL) != LOOM_OK)
    return LOOM_REMOTE;
  if (s < 0) {
    c->api->set_error(c->host, "%s/latest does not name a step-N directory (empty or "
                      "damaged): fix or delete it", c->dir);
    return LOOM_CORRUPT;
  }
  *step = s;
  return LOOM_OK;
}

/* Read `bytes` at `at` of `file` in `dir` into buf. */
static int read_at(ckpt *c, const char *dir, const char *file, uint64_t at, void *buf,
                   size_t bytes) {
  char p[PATH_MAX];
  path_fmt(p, sizeof p, "%s/%s", dir, file);
  int fd = open(p, O_RDONLY);
  if (fd < 0) {
    io_fail(c, "cannot open %s: %s", p, strerror(errno));
    return -1;
  }
  size_t got = 0;
  while (got < bytes) {
    ssize_t r = pread(fd, (char *)buf + got, bytes - got, (off_t)(at + got));
    if (r <= 0) {
      close(fd);
      c->api->set_error(c->host, "%s: truncated (wanted %zu bytes at %llu)", p, bytes,
                        (unsigned long long)at);
      return -1;
    }
    got += (size_t)r;
  }
  close(fd);
  return 0;
}

/* Fill one requested chunk from the saved chunks of the same item that overlap it. */
static int load_item(ckpt *c, const char *dir, json_t *shards, loom_ckpt_item_v1 *it) {
  void *dev_ctx;
  const loom_device_v1 *dev = c->api->device(c->host, &dev_ctx);
  size_t esz = loom_dtype_size(it->dtype);
  uint64_t covered = 0, want_lo = it->offset, want_hi = it->offset + it->count;
  size_t si;
  json_t *shard;
  json_array_foreach(shards, si, shard) {
    size_t ci;
    json_t *ch;
    json_array_foreach(json_object_get(shard, "chunks"), ci, ch) {
      if (strcmp(json_string_value(json_object_get(ch, "name")), it->name) != 0) continue;
      uint64_t gn = (uint64_t)json_integer_value(json_object_get(ch, "global_numel"));
      int dt = (int)json_integer_value(json_object_get(ch, "dtype"));
      if (gn != it->global_numel || dt != (int)it->dtype) {
        c->api->set_error(c->host,
                          "%s: item '%s' has %llu elements of dtype %d, this run needs %llu of "
                          "dtype %d: the checkpoint was made for a different model (compare "
                          "the model section with meta.config.model in its manifest.json)",
                          dir, it->name, (unsigned long long)gn, dt,
                          (unsigned long long)it->global_numel, (int)it->dtype);
        return LOOM_CORRUPT;
      }
      uint64_t lo = (uint64_t)json_integer_value(json_object_get(ch, "offset"));
      uint64_t n = (uint64_t)json_integer_value(json_object_get(ch, "count"));
      uint64_t a = lo > want_lo ? lo : want_lo, b = lo + n < want_hi ? lo + n : want_hi;
      if (a >= b) continue;
      size_t bytes = (size_t)n * esz;
      void *buf = malloc(bytes ? bytes : 1);
      if (!buf) {
        io_fail(c, "out of host memory reading %s", it->name);
        return LOOM_NOMEM;
      }
      const char *file = json_string_value(json_object_get(ch, "file"));
      if (read_at(c, dir, file, (uint64_t)json_integer_value(json_object_get(ch, "at")), buf,
                  bytes) != 0) {
        free(buf);
        return LOOM_IO;
      }
      uLong crc = crc32(0L, Z_NULL, 0);
      for (size_t off = 0; off < bytes; off += 1u << 30) {
        size_t k = bytes - off < (1u << 30) ? bytes - off : (1u << 30);
        crc = crc32(crc, (const Bytef *)buf + off, (uInt)k);
      }
      if ((json_int_t)crc != json_integer_value(json_object_get(ch, "crc32"))) {
        free(buf);
        c->api->set_error(c->host, "%s/%s: checksum mismatch in item '%s' [%llu, +%llu): the "
                          "checkpoint is corrupt", dir, file, it->name,
                          (unsigned long long)lo, (unsigned long long)n);
        return LOOM_CORRUPT;
      }
      dev->from_host(dev_ctx, (char *)it->data + (a - want_lo) * esz,
                     (char *)buf + (a - lo) * esz, (size_t)(b - a) * esz);
      free(buf);
      covered += b - a;
    }
  }
  if (covered != it->count) {
    c->api->set_error(c->host, "%s: item '%s' [%llu, +%llu) is not fully in the checkpoint "
                      "(%llu of %llu elements found)", dir, it->name,
                      (unsigned long long)it->offset, (unsigned long long)it->count,
                      (unsigned long long)covered, (unsigned long long)it->count);
    return LOOM_CORRUPT;
  }
  return LOOM_OK;
}

static int ckpt_load(void *ctx, int step, loom_ckpt_state_v1 *st, const char **meta_json) {
  ckpt *c = ctx;
  char dir[PATH_MAX], mp[PATH_MAX];
  path_fmt(dir, sizeof dir, "%s/step-%08d", c->dir, step);
  path_fmt(mp, sizeof mp, "%s/manifest.json", dir);
  json_error_t je;
  json_t *man = json_load_file(mp, 0, &je);
  int rc = LOOM_OK;
  if (!man) {
    c->api->set_error(c->host, "%s: %s", mp, je.text);
    rc = LOOM_CORRUPT;
  }
  json_t *shards = man ? json_object_get(man, "shards") : NULL;
  if (!rc && (!json_is_array(shards) ||
              json_integer_value(json_object_get(man, "step")) != step)) {
    c->api->set_error(c->host, "%s: not a loom checkpoint manifest for step %d", mp, step);
    rc = LOOM_CORRUPT;
  }
  for (int i = 0; !rc && i < st->n_items; i++) rc = load_item(c, dir, shards, &st->items[i]);
  /* the private blob: this rank's own, when the world size is the same */
  int saved_world = man ? (int)json_integer_value(json_object_get(man, "world_size")) : 0;
  if (!rc && st->rank_blob_bytes && saved_world == c->world) {
    json_t *mine = json_array_get(shards, (size_t)c->rank);
    uint64_t at = (uint64_t)json_integer_value(json_object_get(mine, "blob_at"));
    uint64_t n = (uint64_t)json_integer_value(json_object_get(mine, "blob_bytes"));
    char file[32];
    snprintf(file, sizeof file, "rank-%05d.bin", c->rank);
    if (n != st->rank_blob_bytes) {
      c->api->set_error(c->host, "%s/%s: private state is %llu bytes, expected %zu", dir, file,
                        (unsigned long long)n, st->rank_blob_bytes);
      rc = LOOM_CORRUPT;
    } else if (read_at(c, dir, file, at, st->rank_blob, (size_t)n) != 0) {
      rc = LOOM_IO;
    }
  }
  if (!rc) {
    free(c->meta);
    c->meta = json_dumps(json_object_get(man, "meta"), JSON_COMPACT);
    *meta_json = c->meta;
  }
  json_decref(man);
  if (!all_ok(c, rc == LOOM_OK) && rc == LOOM_OK) {
    c->api->set_error(c->host, "another rank failed to load step %d", step);
    rc = LOOM_REMOTE;
  }
  return rc;
}

LOOM_EXPORT const loom_checkpoint_v1 loom_plugin_v1 = {
  .hdr = LOOM_PLUGIN_HEADER_INIT(LOOM_KIND_CHECKPOINT, "checkpoint", "1.0.0",
                                 "sharded checkpoints: per-rank shards + manifest, atomic "
                                 "publish, CRC-32 verified, chunk-addressed",
                                 LOOM_CKPT_CAP_RESHARD, loom_checkpoint_v1),
  .create = ckpt_create,
  .destroy = ckpt_destroy,
  .should_save = ckpt_should_save,
  .save = ckpt_save,
  .resume_step = ckpt_resume_step,
  .load = ckpt_load,
};
