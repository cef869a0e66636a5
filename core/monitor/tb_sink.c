#include "tb_sink.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

enum { MAX_SCALARS = 256, TAG_MAX = 128 };

typedef struct scalars {
  int n;
  char tags[MAX_SCALARS][TAG_MAX];
  double values[MAX_SCALARS];
} scalars;

/* Depth-first over obj, in the record's own key order (jansson keeps insertion order). */
static void collect(scalars *s, const char *prefix, json_t *obj) {
  const char *key;
  json_t *v;
  json_object_foreach(obj, key, v) {
    if (!prefix[0] && !strcmp(key, "step")) continue; /* the event's step, not a scalar */
    char tag[TAG_MAX];
    snprintf(tag, sizeof tag, "%s%s%s", prefix, prefix[0] ? "/" : "", key);
    if (json_is_object(v)) {
      collect(s, tag, v);
    } else if (json_is_number(v) && s->n < MAX_SCALARS) {
      snprintf(s->tags[s->n], TAG_MAX, "%s", tag);
      s->values[s->n++] = json_number_value(v);
    }
  }
}

int loom_tb_write_record(loom_tb_writer *w, const char *record, char *err, size_t errlen) {
  json_error_t je;
  json_t *root = json_loads(record, 0, &je);
  json_t *step = root ? json_object_get(root, "step") : NULL;
  if (!json_is_integer(step)) {
    snprintf(err, errlen, "%s: a metrics record is not an object with an integer \"step\": %.80s",
             loom_tb_path(w), record);
    json_decref(root);
    return -1;
  }
  scalars *s = calloc(1, sizeof *s); /* 35 KB: off the stack */
  if (!s) {
    snprintf(err, errlen, "%s: out of memory", loom_tb_path(w));
    json_decref(root);
    return -1;
  }
  collect(s, "", root);
  const char *tags[MAX_SCALARS];
  for (int i = 0; i < s->n; i++) tags[i] = s->tags[i];
  int rc = loom_tb_scalars(w, json_integer_value(step), s->n, tags, s->values, err, errlen);
  free(s);
  json_decref(root);
  return rc;
}
