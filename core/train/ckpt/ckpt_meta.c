/* Parsing of the checkpoint metadata document (ckpt_meta.h): type and range of every field. */
#include "ckpt_meta.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define MAX_I62 (INT64_C(1) << 62)

void loom__fnv1a_hex(const void *data, size_t n, char out[17]) {
  uint64_t h = 0xcbf29ce484222325ull;
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
  snprintf(out, 17, "%016" PRIx64, h);
}

typedef struct parser {
  char *err;
  size_t errlen;
} parser;

__attribute__((format(printf, 2, 3))) static int bad(parser *p, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(p->err, p->errlen, fmt, ap);
  va_end(ap);
  return -1;
}

static const char *kind(const json_t *v) {
  if (!v) return "nothing (the key is missing)";
  switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    default: return "null";
  }
}

static json_t *object(parser *p, json_t *o, const char *where, const char *key) {
  json_t *v = json_object_get(o, key);
  if (!json_is_object(v)) bad(p, "%s%s: expected an object, got %s", where, key, kind(v));
  return json_is_object(v) ? v : NULL;
}

static int i64(parser *p, json_t *o, const char *where, const char *key, int64_t lo, int64_t hi,
               int64_t *out) {
  json_t *v = json_object_get(o, key);
  if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
    if (json_is_integer(v))
      return bad(p, "%s%s: expected an integer in [%" PRId64 ", %" PRId64 "], got %" PRId64,
                 where, key, lo, hi, (int64_t)json_integer_value(v));
    return bad(p, "%s%s: expected an integer in [%" PRId64 ", %" PRId64 "], got %s", where,
               key, lo, hi, kind(v));
  }
  *out = json_integer_value(v);
  return 0;
}

static int int_in(parser *p, json_t *o, const char *where, const char *key, int lo, int hi,
                  int *out) {
  int64_t v;
  if (i64(p, o, where, key, lo, hi, &v)) return -1;
  *out = (int)v;
  return 0;
}

static int u64_in(parser *p, json_t *o, const char *where, const char *key, uint64_t *out) {
  int64_t v;
  if (i64(p, o, where, key, 0, MAX_I62, &v)) return -1;
  *out = (uint64_t)v;
  return 0;
}

static int num(parser *p, json_t *o, const char *where, const char *key, double *out) {
  json_t *v = json_object_get(o, key);
  double x = json_number_value(v);
  if (!json_is_number(v) || !isfinite(x) || x < 0 || x > 1e30)
    return bad(p, "%s%s: expected a finite number >= 0, got %s", where, key, kind(v));
  *out = x;
  return 0;
}

static int str(parser *p, json_t *o, const char *where, const char *key, size_t max_len,
               const char **out) {
  json_t *v = json_object_get(o, key);
  if (!json_is_string(v) || json_string_length(v) > max_len ||
      strlen(json_string_value(v)) != json_string_length(v))
    return bad(p, "%s%s: expected a string of at most %zu characters, got %s", where, key,
               max_len, json_is_string(v) ? "another string" : kind(v));
  *out = json_string_value(v);
  return 0;
}

static int parse_mesh(parser *p, json_t *r, loom_ckpt_meta *m) {
  if (int_in(p, r, "", "step", 1, INT32_MAX, &m->step) ||
      int_in(p, r, "", "world_size", 1, 1 << 20, &m->world_size) ||
      int_in(p, r, "", "dp", 1, 1 << 20, &m->dp) || int_in(p, r, "", "tp", 1, 1 << 20, &m->tp) ||
      int_in(p, r, "", "pp", 1, 1 << 20, &m->pp))
    return -1;
  if ((int64_t)m->dp * m->tp * m->pp != m->world_size)
    return bad(p, "dp x tp x pp = %d x %d x %d is not world_size %d", m->dp, m->tp, m->pp,
               m->world_size);
  if (m->pp == 1) return 0;
  m->stages = json_object_get(r, "stages");
  if (!json_is_array(m->stages) || json_array_size(m->stages) != (size_t)m->pp)
    return bad(p, "stages: expected an array of pp = %d entries, got %s", m->pp,
               kind(m->stages));
  for (int s = 0; s < m->pp; s++) {
    json_t *x = json_array_get(m->stages, (size_t)s);
    char w[32];
    snprintf(w, sizeof w, "stages[%d].", s);
    int first, last;
    if (!json_is_object(x)) return bad(p, "stages[%d]: expected an object, got %s", s, kind(x));
    if (int_in(p, x, w, "first_unit", 0, 1 << 24, &first) ||
        int_in(p, x, w, "last_unit", first, 1 << 24, &last))
      return -1;
  }
  return 0;
}

/* Checkpoints before model.padded_vocab_size was recorded: wte's rows in the tensor table they
 * carry for tools (meta.tensors, or stage 0's under pp > 1); the unpadded vocab_size when
 * there is none or it is not a sane row count. */
static int padded_vocab_of_old(json_t *r, const loom_ckpt_meta *m) {
  json_t *table = json_object_get(r, "tensors");
  if (m->pp > 1) table = json_object_get(json_array_get(m->stages, 0), "tensors");
  size_t i;
  json_t *t;
  json_array_foreach(table, i, t) {
    if (!json_is_string(json_object_get(t, "name")) ||
        strcmp(json_string_value(json_object_get(t, "name")), "wte") != 0)
      continue;
    json_t *rows = json_array_get(json_object_get(t, "shape"), 0);
    json_int_t v = json_is_integer(rows) ? json_integer_value(rows) : 0;
    return v >= m->model.vocab_size && v <= INT32_MAX ? (int)v : m->model.vocab_size;
  }
  return m->model.vocab_size;
}

static int parse_identity(parser *p, json_t *r, loom_ckpt_meta *m) {
  json_t *mo = object(p, r, "", "model"), *to;
  if (!mo) return -1;
  if (int_in(p, mo, "model.", "vocab_size", 1, INT32_MAX, &m->model.vocab_size) ||
      int_in(p, mo, "model.", "context_length", 1, INT32_MAX, &m->model.context_length) ||
      int_in(p, mo, "model.", "n_layer", 1, INT32_MAX, &m->model.n_layer) ||
      int_in(p, mo, "model.", "n_head", 1, INT32_MAX, &m->model.n_head) ||
      int_in(p, mo, "model.", "n_embd", 1, INT32_MAX, &m->model.n_embd) ||
      !(to = object(p, r, "", "tokenizer")) ||
      int_in(p, to, "tokenizer.", "type", 0, INT32_MAX, &m->tokenizer.type) ||
      int_in(p, to, "tokenizer.", "vocab_size", 1, INT32_MAX, &m->tokenizer.vocab_size) ||
      str(p, to, "tokenizer.", "fingerprint", 16, &m->tokenizer.fingerprint))
    return -1;
  if (!json_object_get(mo, "padded_vocab_size")) {
    m->model.padded_vocab_size = padded_vocab_of_old(r, m);
    return 0;
  }
  return int_in(p, mo, "model.", "padded_vocab_size", m->model.vocab_size, INT32_MAX,
                &m->model.padded_vocab_size);
}

static int parse_data(parser *p, json_t *r, loom_ckpt_meta *m) {
  json_t *d = object(p, r, "", "data");
  const char *units;
  if (!d || str(p, d, "data.", "units", 16, &units)) return -1;
  if (strcmp(units, "tokens") != 0)
    return bad(p, "data.units: expected \"tokens\" (the position's unit), got \"%s\"", units);
  int64_t shard_index;
  if (str(p, d, "data.", "pattern", 4096, &m->data.pattern) ||
      str(p, d, "data.", "shard", 4096, &m->data.shard) ||
      int_in(p, d, "data.", "seq_len", 1, INT32_MAX, &m->data.seq_len) ||
      int_in(p, d, "data.", "micro_batch_size", 1, INT32_MAX, &m->data.micro_batch_size) ||
      int_in(p, d, "data.", "grad_accum_steps", 1, INT32_MAX, &m->data.grad_accum_steps) ||
      u64_in(p, d, "data.", "global_batch", &m->data.global_batch) ||
      i64(p, d, "data.", "epoch", 0, INT64_C(1) << 40, (int64_t *)&m->data.epoch) ||
      i64(p, d, "data.", "shard_index", 0, INT32_MAX, &shard_index) ||
      u64_in(p, d, "data.", "shard_tokens", &m->data.shard_tokens) ||
      i64(p, d, "data.", "token", 0, (int64_t)m->data.shard_tokens, (int64_t *)&m->data.token))
    return -1;
  m->data.shard_index = (int)shard_index;
  if (json_object_get(d, "fingerprint") &&
      str(p, d, "data.", "fingerprint", 64, &m->data.fingerprint))
    return -1;
  json_t *seg = json_object_get(d, "segment");
  if (!seg) return 0;
  if (!json_is_object(seg)) return bad(p, "data.segment: expected an object, got %s", kind(seg));
  if (int_in(p, seg, "data.segment.", "step", 0, m->step, &m->data.segment_step) ||
      u64_in(p, seg, "data.segment.", "cursor", &m->data.segment_cursor) ||
      u64_in(p, seg, "data.segment.", "stream_sequences", &m->data.segment_stream))
    return -1;
  if (m->data.segment_stream == 0)
    return bad(p, "data.segment.stream_sequences: expected an integer >= 1, got 0");
  m->data.has_segment = 1;
  return 0;
}

static int parse_schedule(parser *p, json_t *r, loom_ckpt_meta *m) {
  json_t *s = object(p, r, "", "schedule"), *o;
  const char *decay;
  if (!s || int_in(p, s, "schedule.", "steps", 1, INT32_MAX, &m->schedule.steps) ||
      int_in(p, s, "schedule.", "horizon", 1, INT32_MAX, &m->schedule.horizon) ||
      int_in(p, s, "schedule.", "warmup_steps", 0, INT32_MAX, &m->schedule.warmup_steps) ||
      str(p, s, "schedule.", "decay", 15, &decay) ||
      num(p, s, "schedule.", "lr", &m->schedule.lr) ||
      num(p, s, "schedule.", "min_lr", &m->schedule.min_lr) ||
      num(p, s, "schedule.", "last_lr", &m->schedule.last_lr))
    return -1;
  if (strcmp(decay, "cosine") != 0 && strcmp(decay, "constant") != 0)
    return bad(p, "schedule.decay: expected \"cosine\" or \"constant\", got \"%s\"", decay);
  m->schedule.cosine = strcmp(decay, "cosine") == 0;
  if (!(o = object(p, r, "", "optimizer")) ||
      num(p, o, "optimizer.", "beta1", &m->optimizer.beta1) ||
      num(p, o, "optimizer.", "beta2", &m->optimizer.beta2) ||
      num(p, o, "optimizer.", "eps", &m->optimizer.eps) ||
      num(p, o, "optimizer.", "weight_decay", &m->optimizer.weight_decay) ||
      num(p, o, "optimizer.", "grad_clip", &m->optimizer.grad_clip))
    return -1;
  return 0;
}

int loom__ckpt_meta_parse(const char *text, loom_ckpt_meta *m, char *err, size_t errlen) {
  memset(m, 0, sizeof *m);
  parser p = {err, errlen};
  json_error_t je;
  json_t *r = text ? json_loads(text, JSON_REJECT_DUPLICATES, &je) : NULL;
  if (!json_is_object(r)) {
    json_decref(r);
    return bad(&p, "expected a JSON object%s%s", text ? ": " : "", text ? je.text : "");
  }
  const char *format, *seed_text;
  int rc = str(&p, r, "", "format", 64, &format);
  if (!rc && strcmp(format, LOOM_CKPT_META_FORMAT) != 0)
    rc = bad(&p, "format: expected \"%s\", got \"%s\"", LOOM_CKPT_META_FORMAT, format);
  if (!rc) rc = parse_mesh(&p, r, m);
  if (!rc) rc = parse_identity(&p, r, m);
  if (!rc) rc = parse_data(&p, r, m);
  if (!rc) rc = parse_schedule(&p, r, m);
  /* the seed is a uint64: kept as a decimal string so it survives JSON's int64 */
  if (!rc) rc = str(&p, r, "", "seed", 20, &seed_text);
  if (!rc) {
    char *end;
    m->seed = strtoull(seed_text, &end, 10);
    if (!*seed_text || *end) rc = bad(&p, "seed: expected a decimal integer string");
  }
  if (!rc) rc = str(&p, r, "", "precision_plugin", 4096, &m->precision_plugin);
  /* optional (checkpoints before mixed precision have none: 0) */
  if (!rc && json_object_get(r, "skipped_steps"))
    rc = int_in(&p, r, "", "skipped_steps", 0, m->step, &m->skipped_steps);
  /* optional: absent in checkpoints before the global view (their items are per rank) */
  const char *items = "per-rank";
  if (!rc && json_object_get(r, "items")) rc = str(&p, r, "", "items", 16, &items);
  if (!rc && strcmp(items, "global") != 0 && strcmp(items, "per-rank") != 0)
    rc = bad(&p, "items: expected \"global\" or \"per-rank\", got \"%s\"", items);
  if (!rc) m->global_items = strcmp(items, "global") == 0;
  json_t *prec = json_object_get(r, "precision");
  if (!rc && !json_is_null(prec) && !json_is_object(prec))
    rc = bad(&p, "precision: expected an object or null, got %s", kind(prec));
  if (!rc && !json_is_object(json_object_get(r, "config")))
    rc = bad(&p, "config: expected an object, got %s", kind(json_object_get(r, "config")));
  if (rc) {
    json_decref(r);
    memset(m, 0, sizeof *m);
    return -1;
  }
  m->precision = json_is_object(prec) ? prec : NULL;
  m->root = r;
  return 0;
}

void loom__ckpt_meta_free(loom_ckpt_meta *m) {
  if (!m) return;
  json_decref(m->root);
  memset(m, 0, sizeof *m);
}
