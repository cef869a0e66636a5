/* Validation of checkpoint manifests (see manifest.h). Everything here is a pure function of
 * the document: the fuzz test (tests/unit/check_ckpt_fuzz.c) drives it with mutated input. */
#include "manifest.h"

#include <inttypes.h>
#include <loom/loom.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void ckpt_shard_name(char out[32], int rank) { snprintf(out, 32, "rank-%05d.bin", rank); }

int ckpt_step_of(const char *name) {
  int step;
  char tail, canon[32];
  if (sscanf(name, "step-%d%c", &step, &tail) != 1 || step < 0) return -1;
  snprintf(canon, sizeof canon, "step-%08d", step);
  return strcmp(canon, name) == 0 ? step : -1;
}

int ckpt_parse_crc_text(const char *text, size_t len, uint32_t *crc) {
  if (len == 9 && text[8] == '\n') len = 8;
  if (len != 8) return -1;
  uint32_t v = 0;
  for (size_t i = 0; i < 8; i++) {
    char ch = text[i];
    int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
    if (d < 0) return -1;
    v = v << 4 | (uint32_t)d;
  }
  *crc = v;
  return 0;
}

__attribute__((format(printf, 3, 4))) static int why_fmt(char *why, size_t n, const char *fmt,
                                                        ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, n, fmt, ap);
  va_end(ap);
  return -1;
}

/* What a JSON value is, for messages: its integer value, or its type. */
static void describe(const json_t *v, char *out, size_t n) {
  if (!v) snprintf(out, n, "nothing (the key is missing)");
  else if (json_is_integer(v)) snprintf(out, n, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
  else if (json_is_string(v)) snprintf(out, n, "a string");
  else if (json_is_real(v)) snprintf(out, n, "a real number");
  else if (json_is_object(v)) snprintf(out, n, "an object");
  else if (json_is_array(v)) snprintf(out, n, "an array");
  else if (json_is_boolean(v)) snprintf(out, n, "a boolean");
  else snprintf(out, n, "null");
}

/* obj[key] as an integer in [lo, hi] into *out; else -1 with why[] = "WHERE.KEY: ...". */
static int int_field(json_t *obj, const char *where, const char *key, int64_t lo, int64_t hi,
                     int64_t *out, char *why, size_t n) {
  json_t *v = json_object_get(obj, key);
  if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
    char got[64];
    describe(v, got, sizeof got);
    return why_fmt(why, n, "%s%s: expected an integer in [%" PRId64 ", %" PRId64 "], got %s",
                   where, key, lo, hi, got);
  }
  *out = json_integer_value(v);
  return 0;
}

/* obj[key] as a string of 1..max_len bytes; else -1. */
static int str_field(json_t *obj, const char *where, const char *key, size_t max_len,
                     const char **out, char *why, size_t n) {
  json_t *v = json_object_get(obj, key);
  size_t len = json_string_length(v);
  if (!json_is_string(v) || len == 0 || len > max_len ||
      strlen(json_string_value(v)) != len) { /* no embedded NUL */
    char got[64];
    describe(v, got, sizeof got);
    return why_fmt(why, n, "%s%s: expected a string of 1..%zu characters, got %s", where, key,
                   max_len, json_is_string(v) ? "another string" : got);
  }
  *out = json_string_value(v);
  return 0;
}

void ckpt_chunk_slice(json_t *ch, ckpt_slice *out) {
  json_t *shape = json_object_get(ch, "shape");
  *out = (ckpt_slice){.rows = json_integer_value(json_object_get(ch, "global_numel")), .cols = 1,
                      .split_dim = -1, .parts = 1, .index = 0, .size = 1};
  if (!json_is_array(shape)) return; /* format 2: flat */
  out->rows = json_integer_value(json_array_get(shape, 0));
  out->cols = json_array_size(shape) == 2 ? json_integer_value(json_array_get(shape, 1)) : 1;
  out->split_dim = (int)json_integer_value(json_object_get(ch, "split_dim"));
  out->parts = (int)json_integer_value(json_object_get(ch, "split_parts"));
  out->index = (int)json_integer_value(json_object_get(ch, "split_index"));
  out->size = (int)json_integer_value(json_object_get(ch, "split_size"));
}

/* Format 3's slice fields of a chunk whose global_numel is gn; the local element count of the
 * slice into *local. */
static int check_slice(json_t *ch, const char *w, int64_t gn, int64_t *local, char *why,
                       size_t n) {
  json_t *shape = json_object_get(ch, "shape");
  size_t nd = json_array_size(shape);
  if (!json_is_array(shape) || nd < 1 || nd > 2)
    return why_fmt(why, n, "%sshape: expected an array of 1 or 2 integers", w);
  int64_t dims[2] = {1, 1}, sd, parts, size, index;
  for (size_t d = 0; d < nd; d++) {
    json_t *v = json_array_get(shape, d);
    if (!json_is_integer(v) || json_integer_value(v) < 1 ||
        json_integer_value(v) > CKPT_MAX_ELEMENTS)
      return why_fmt(why, n, "%sshape[%zu]: expected an integer in [1, %" PRId64 "]", w, d,
                     CKPT_MAX_ELEMENTS);
    dims[d] = json_integer_value(v);
  }
  if (dims[0] > CKPT_MAX_ELEMENTS / dims[1] || dims[0] * dims[1] != gn)
    return why_fmt(why, n, "%sshape: its elements are not global_numel = %" PRId64, w, gn);
  if (int_field(ch, w, "split_dim", -1, (int64_t)nd - 1, &sd, why, n) ||
      int_field(ch, w, "split_parts", 1, CKPT_MAX_WORLD, &parts, why, n) ||
      int_field(ch, w, "split_size", 1, CKPT_MAX_WORLD, &size, why, n) ||
      int_field(ch, w, "split_index", 0, size - 1, &index, why, n))
    return -1;
  ckpt_slice s;
  ckpt_chunk_slice(ch, &s);
  if (ckpt_slice_valid(&s) != 0)
    return why_fmt(why, n, "%ssplit_*: shape [%" PRId64 ", %" PRId64 "] cannot be cut along dim "
                   "%" PRId64 " into %" PRId64 " blocks of %" PRId64 " slices", w, dims[0],
                   dims[1], sd, parts, size);
  *local = (int64_t)ckpt_slice_numel(&s);
  return 0;
}

static int check_chunk(json_t *ch, int rank, int sliced, const char *where, char *why,
                       size_t n) {
  if (!json_is_object(ch)) return why_fmt(why, n, "%s: expected an object", where);
  char w[96];
  snprintf(w, sizeof w, "%s.", where);
  const char *name, *file;
  int64_t dtype, gn, local, off, count, r, at, crc;
  if (str_field(ch, w, "name", 127, &name, why, n) ||
      int_field(ch, w, "dtype", 0, LOOM_I64, &dtype, why, n) ||
      int_field(ch, w, "global_numel", 0, CKPT_MAX_ELEMENTS, &gn, why, n))
    return -1;
  local = gn;
  if (sliced && check_slice(ch, w, gn, &local, why, n) != 0) return -1;
  if (int_field(ch, w, "offset", 0, local, &off, why, n) ||
      int_field(ch, w, "count", 0, local - off, &count, why, n) ||
      int_field(ch, w, "rank", rank, rank, &r, why, n) ||
      str_field(ch, w, "file", 31, &file, why, n) ||
      int_field(ch, w, "at", 0, CKPT_MAX_OFFSET, &at, why, n) ||
      int_field(ch, w, "crc32", 0, UINT32_MAX, &crc, why, n))
    return -1;
  size_t esz = loom_dtype_size((loom_dtype)dtype);
  if (esz == 0) return why_fmt(why, n, "%sdtype: %" PRId64 " is not a known dtype", w, dtype);
  char own[32];
  ckpt_shard_name(own, rank);
  if (strcmp(file, own) != 0) /* a chunk lives in its writer's shard: no other path is read */
    return why_fmt(why, n, "%sfile: expected \"%s\" (the shard of rank %d)", w, own, rank);
  if (count * (int64_t)esz > CKPT_MAX_OFFSET - at)
    return why_fmt(why, n, "%sat: %" PRId64 " + %" PRId64 " bytes is beyond any shard", w, at,
                   count * (int64_t)esz);
  return 0;
}

static int check_shard(json_t *sh, int rank, int sliced, char *why, size_t n) {
  char w[64];
  snprintf(w, sizeof w, "shards[%d].", rank);
  if (!json_is_object(sh)) return why_fmt(why, n, "shards[%d]: expected an object", rank);
  int64_t r, at, bytes, crc;
  if (int_field(sh, w, "rank", rank, rank, &r, why, n) ||
      int_field(sh, w, "blob_at", 0, CKPT_MAX_OFFSET, &at, why, n) ||
      int_field(sh, w, "blob_bytes", 0, CKPT_MAX_BLOB_BYTES, &bytes, why, n) ||
      int_field(sh, w, "blob_crc32", 0, UINT32_MAX, &crc, why, n))
    return -1;
  json_t *chunks = json_object_get(sh, "chunks");
  if (!json_is_array(chunks)) return why_fmt(why, n, "%schunks: expected an array", w);
  for (size_t i = 0; i < json_array_size(chunks); i++) {
    char cw[96];
    snprintf(cw, sizeof cw, "shards[%d].chunks[%zu]", rank, i);
    if (check_chunk(json_array_get(chunks, i), rank, sliced, cw, why, n) != 0) return -1;
  }
  return 0;
}

int ckpt_manifest_check(json_t *man, int step, char *why, size_t n) {
  if (!json_is_object(man)) return why_fmt(why, n, "expected a JSON object");
  const char *format;
  if (str_field(man, "", "format", 64, &format, why, n)) return -1;
  int sliced = strcmp(format, CKPT_MANIFEST_FORMAT) == 0;
  if (!sliced && strcmp(format, CKPT_MANIFEST_FORMAT_FLAT) != 0)
    return why_fmt(why, n, "format: expected \"%s\" (or \"%s\"), got \"%s\"%s",
                   CKPT_MANIFEST_FORMAT, CKPT_MANIFEST_FORMAT_FLAT, format,
                   strcmp(format, "loom-checkpoint-1") == 0
                       ? " (an older loom wrote it: its private state carries no checksum and "
                         "its data cursor counts sequences of one length; start a new "
                         "checkpoint dir)"
                       : "");
  int64_t s, world;
  if (int_field(man, "", "step", step, step, &s, why, n) ||
      int_field(man, "", "world_size", 1, CKPT_MAX_WORLD, &world, why, n))
    return -1;
  if (!json_is_object(json_object_get(man, "meta")))
    return why_fmt(why, n, "meta: expected an object");
  json_t *shards = json_object_get(man, "shards");
  if (!json_is_array(shards) || json_array_size(shards) != (size_t)world)
    return why_fmt(why, n, "shards: expected an array of world_size = %" PRId64 " entries",
                   world);
  for (int r = 0; r < (int)world; r++)
    if (check_shard(json_array_get(shards, (size_t)r), r, sliced, why, n) != 0) return -1;
  return 0;
}
