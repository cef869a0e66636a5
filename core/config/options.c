/* Typed getters for a JSON options object (a plugin's, or a section of the config), with one-line
 * errors that name the file and the JSON path: "FILE: WHERE.KEY: expected WHAT, got VALUE".
 * Also the message helpers config.c shares (loom__json_repr, loom__fmt_double, loom__opt_error,
 * loom__opt_number). */
#include "config_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REPR_MAX 60 /* bytes of a value shown in a message before it is cut with "..." */

/* Write `v` as compact one-line JSON into buf, cut to about REPR_MAX bytes ("..." appended, never
 * inside a UTF-8 sequence). NULL prints as "nothing". */
void loom__json_repr(const json_t *v, char *buf, size_t n) {
  if (!buf || n == 0) return;
  if (!v) {
    snprintf(buf, n, "nothing");
    return;
  }
  char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(15));
  if (!s) { /* defensive: out of memory */
    snprintf(buf, n, "?");
    return;
  }
  size_t len = strlen(s);
  if (len > REPR_MAX) {
    size_t cut = REPR_MAX - 3;
    while (cut > 0 && ((unsigned char)s[cut] & 0xC0) == 0x80) cut--; /* UTF-8 continuation */
    memcpy(s + cut, "...", 4);
  }
  snprintf(buf, n, "%s", s);
  free(s);
}

/* A bound or a setting in a message: %.15g written like jansson writes numbers ("1e-8", not
 * "1e-08"), so both sides of "expected ..., got ..." read the same. */
void loom__fmt_double(double x, char *buf, size_t n) {
  char tmp[64];
  snprintf(tmp, sizeof tmp, "%.15g", x);
  char *e = strchr(tmp, 'e');
  if (e) {
    char *d = e + 1 + (e[1] == '-' || e[1] == '+');
    char *z = d;
    while (*z == '0' && z[1]) z++;
    memmove(d, z, strlen(z) + 1);
    if (e[1] == '+') memmove(e + 1, e + 2, strlen(e + 2) + 1);
  }
  snprintf(buf, n, "%s", tmp);
}

/* Format "FILE: WHERE.KEY: <fmt...>" into err (parts that are NULL or "" are left out) and return
 * -1, so callers can `return loom__opt_error(...)`. */
int loom__opt_error(const loom_options *o, const char *key, char *err, size_t errlen,
                    const char *fmt, ...) {
  if (!err || errlen == 0) return -1;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const char *file = o && o->file && *o->file ? o->file : NULL;
  const char *where = o && o->where && *o->where ? o->where : NULL;
  const char *k = key && *key ? key : NULL;
  char path[512];
  if (where && k)
    snprintf(path, sizeof path, "%s.%s", where, k);
  else
    snprintf(path, sizeof path, "%s", where ? where : k ? k : "");
  if (file && *path)
    snprintf(err, errlen, "%s: %s: %s", file, path, msg);
  else if (file || *path)
    snprintf(err, errlen, "%s: %s", file ? file : path, msg);
  else
    snprintf(err, errlen, "%s", msg);
  for (char *c = err; *c; c++)
    if ((unsigned char)*c < 0x20) *c = '?'; /* keys and file names: keep the message one line */
  return -1;
}

/* Look up `key`; *v = NULL when absent (or when there is no object). */
static int lookup(const loom_options *o, const char *key, json_t **v, char *err, size_t errlen) {
  *v = NULL;
  if (!o || !o->obj) return 0;
  if (!json_is_object(o->obj)) {
    char got[96];
    loom__json_repr(o->obj, got, sizeof got);
    return loom__opt_error(o, NULL, err, errlen, "expected an object, got %s", got);
  }
  *v = json_object_get(o->obj, key);
  return 0;
}

/* "an integer >= 1", "an integer in [2, 65536]", ...; a bound at the type's limit (INT64_MAX,
 * or INT32_MAX unless the value went past it) is left out. */
static void int_desc(char *buf, size_t n, int64_t lo, int64_t hi, int over_hi) {
  int open_hi = hi == INT64_MAX || (hi == INT32_MAX && !over_hi);
  int open_lo = lo == INT64_MIN;
  if (open_lo && open_hi)
    snprintf(buf, n, "an integer");
  else if (open_hi)
    snprintf(buf, n, "an integer >= %" PRId64, lo);
  else if (open_lo)
    snprintf(buf, n, "an integer <= %" PRId64, hi);
  else
    snprintf(buf, n, "an integer in [%" PRId64 ", %" PRId64 "]", lo, hi);
}

int loom_opt_int(const loom_options *o, const char *key, int64_t dflt, int64_t min, int64_t max,
                 int64_t *out, char *err, size_t errlen) {
  json_t *v;
  if (lookup(o, key, &v, err, errlen)) return -1;
  if (!v) {
    *out = dflt;
    return 0;
  }
  int64_t x = json_is_integer(v) ? (int64_t)json_integer_value(v) : 0;
  if (!json_is_integer(v) || x < min || x > max) {
    char desc[96], got[96];
    int_desc(desc, sizeof desc, min, max, json_is_integer(v) && x > max);
    loom__json_repr(v, got, sizeof got);
    return loom__opt_error(o, key, err, errlen, "expected %s, got %s", desc, got);
  }
  *out = x;
  return 0;
}

/* Check that `v` (not NULL) is a JSON number in the range given by lo/hi (open when *_open;
 * +-INFINITY for no bound) and store it in *out; else the usual error at WHERE.KEY. */
int loom__opt_number(const loom_options *o, const char *key, const json_t *v, double lo,
                     int lo_open, double hi, int hi_open, double *out, char *err,
                     size_t errlen) {
  double x = json_is_number(v) ? json_number_value(v) : NAN;
  int ok = json_is_number(v) && (lo_open ? x > lo : x >= lo) && (hi_open ? x < hi : x <= hi);
  if (ok) {
    *out = x;
    return 0;
  }
  char desc[160], got[96], l[64], h[64];
  int has_lo = !isinf(lo), has_hi = !isinf(hi);
  loom__fmt_double(lo, l, sizeof l);
  loom__fmt_double(hi, h, sizeof h);
  if (has_lo && has_hi)
    snprintf(desc, sizeof desc, "a number in %c%s, %s%c", lo_open ? '(' : '[', l, h,
             hi_open ? ')' : ']');
  else if (has_lo)
    snprintf(desc, sizeof desc, "a number %s %s", lo_open ? ">" : ">=", l);
  else if (has_hi)
    snprintf(desc, sizeof desc, "a number %s %s", hi_open ? "<" : "<=", h);
  else
    snprintf(desc, sizeof desc, "a number");
  loom__json_repr(v, got, sizeof got);
  return loom__opt_error(o, key, err, errlen, "expected %s, got %s", desc, got);
}

int loom_opt_double(const loom_options *o, const char *key, double dflt, double min, double max,
                    double *out, char *err, size_t errlen) {
  json_t *v;
  if (lookup(o, key, &v, err, errlen)) return -1;
  if (!v) {
    *out = dflt;
    return 0;
  }
  return loom__opt_number(o, key, v, min, 0, max, 0, out, err, errlen);
}

int loom_opt_bool(const loom_options *o, const char *key, int dflt, int *out, char *err,
                  size_t errlen) {
  json_t *v;
  if (lookup(o, key, &v, err, errlen)) return -1;
  if (!v) {
    *out = dflt;
    return 0;
  }
  if (!json_is_boolean(v)) {
    char got[96];
    loom__json_repr(v, got, sizeof got);
    return loom__opt_error(o, key, err, errlen, "expected true or false, got %s", got);
  }
  *out = json_is_true(v);
  return 0;
}

int loom_opt_string(const loom_options *o, const char *key, const char *dflt, const char **out,
                    char *err, size_t errlen) {
  json_t *v;
  if (lookup(o, key, &v, err, errlen)) return -1;
  if (!v) {
    *out = dflt;
    return 0;
  }
  if (!json_is_string(v)) {
    char got[96];
    loom__json_repr(v, got, sizeof got);
    return loom__opt_error(o, key, err, errlen, "expected a string, got %s", got);
  }
  *out = json_string_value(v);
  return 0;
}

int loom_opt_check_keys(const loom_options *o, const char *const *allowed, char *err,
                        size_t errlen) {
  if (!o || !o->obj) return 0;
  json_t *unused;
  if (lookup(o, "", &unused, err, errlen)) return -1; /* not an object */
  const char *key;
  json_t *v;
  json_object_foreach(o->obj, key, v) {
    if (key[0] == '_') continue; /* comment */
    int found = 0;
    for (const char *const *a = allowed; a && *a && !found; a++) found = strcmp(*a, key) == 0;
    if (found) continue;
    if (!allowed || !*allowed)
      return loom__opt_error(o, key, err, errlen, "unknown key (this object takes no keys)");
    char list[768];
    size_t n = 0;
    list[0] = '\0';
    for (const char *const *a = allowed; *a; a++) {
      int w = snprintf(list + n, sizeof list - n, "%s%s", a == allowed ? "" : ", ", *a);
      if (w < 0 || (size_t)w >= sizeof list - n) break; /* defensive: very long list, cut */
      n += (size_t)w;
    }
    return loom__opt_error(o, key, err, errlen, "unknown key (expected one of: %s)", list);
  }
  return 0;
}
