/* The restart record (restart_record.h): --restart's JSON in, one metrics record out. */
#include "restart_record.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "metrics.h"
#include "monitor/tb_writer.h"
#include "trainer.h"

static int bad(char *err, size_t errlen, const char *what) {
  snprintf(err, errlen, "--restart: %s (expected {\"attempt\": N, \"world_size_before\": N, "
           "\"grad_accum_steps_before\": N, \"reason\": \"...\"}, as loom launch writes it)",
           what);
  return -1;
}

/* One required integer key >= 1. */
static int get_count(json_t *o, const char *key, int *out, char *err, size_t errlen) {
  json_t *v = json_object_get(o, key);
  char what[160];
  if (!v) {
    snprintf(what, sizeof what, "no \"%s\"", key);
    return bad(err, errlen, what);
  }
  if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 1 << 24) {
    snprintf(what, sizeof what, "\"%s\" must be an integer in [1, %d]", key, 1 << 24);
    return bad(err, errlen, what);
  }
  *out = (int)json_integer_value(v);
  return 0;
}

/* A string cut short by snprintf may end inside a UTF-8 sequence, which jansson would refuse to
 * write back out: drop such an incomplete last character. */
static void drop_partial_utf8(char *s) {
  size_t n = strlen(s), i = n;
  while (i > 0 && ((unsigned char)s[i - 1] & 0xc0) == 0x80) i--; /* continuation bytes */
  if (i == 0) return;
  unsigned char lead = (unsigned char)s[i - 1];
  size_t len = lead < 0x80 ? 1 : lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : 2;
  if (i - 1 + len > n) s[i - 1] = '\0';
}

int loom_restart_info_parse(const char *json, loom_restart_info *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  json_error_t je;
  json_t *o = json_loads(json, JSON_REJECT_DUPLICATES, &je);
  int rc = -1;
  if (!json_is_object(o)) {
    char what[300];
    snprintf(what, sizeof what, "not a JSON object (%s)", o ? "another JSON value" : je.text);
    bad(err, errlen, what);
    goto out;
  }
  const char *key;
  json_t *v;
  json_object_foreach(o, key, v) {
    if (strcmp(key, "attempt") && strcmp(key, "world_size_before") &&
        strcmp(key, "grad_accum_steps_before") && strcmp(key, "reason")) {
      char what[160];
      snprintf(what, sizeof what, "unknown key \"%.100s\"", key);
      bad(err, errlen, what);
      goto out;
    }
  }
  if (get_count(o, "attempt", &out->attempt, err, errlen) ||
      get_count(o, "world_size_before", &out->world_size_before, err, errlen) ||
      get_count(o, "grad_accum_steps_before", &out->grad_accum_steps_before, err, errlen))
    goto out;
  json_t *reason = json_object_get(o, "reason");
  if (!json_is_string(reason)) {
    bad(err, errlen, reason ? "\"reason\" must be a string" : "no \"reason\"");
    goto out;
  }
  snprintf(out->reason, sizeof out->reason, "%s", json_string_value(reason));
  drop_partial_utf8(out->reason);
  for (char *p = out->reason; *p; p++) /* one line in logs and in the text event */
    if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
  out->present = 1;
  rc = 0;
out:
  json_decref(o);
  return rc;
}

char *loom_restart_info_json(const loom_restart_info *info) {
  json_t *o = json_pack("{s:i,s:i,s:i,s:s}", "attempt", info->attempt, "world_size_before",
                        info->world_size_before, "grad_accum_steps_before",
                        info->grad_accum_steps_before, "reason", info->reason);
  char *s = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
  json_decref(o);
  return s;
}

int loom_metrics_restart(loom_trainer *tr) {
  const loom_restart_info *ri = &tr->restart;
  if (!ri->present || tr->rt.mesh.world_rank != 0) return 0;
  int world = tr->rt.mesh.world_size;
  loom_metrics_end_line(tr);
  printf("loom: restart %d of this job (%s): %s step %d on %d ranks (was %d), "
         "grad_accum_steps %d (was %d)\n", ri->attempt, ri->reason,
         tr->step > 0 ? "resumed at" : "started over from", tr->step, world,
         ri->world_size_before, tr->accum, ri->grad_accum_steps_before);
  fflush(stdout);
  /* "step" first and compact: metrics.c's resume truncation reads each line's leading step */
  json_t *inner = json_pack("{s:i,s:i,s:i,s:i,s:i,s:i,s:s}", "attempt", ri->attempt,
                            "resumed_from_step", tr->step, "world_size_before",
                            ri->world_size_before, "world_size", world,
                            "grad_accum_steps_before", ri->grad_accum_steps_before,
                            "grad_accum_steps", tr->accum, "reason", ri->reason);
  json_t *rec = inner ? json_pack("{s:i,s:o}", "step", tr->step, "restart", inner) : NULL;
  char *line = rec ? json_dumps(rec, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
  json_decref(rec);
  if (!line) {
    snprintf(tr->err, sizeof tr->err, "out of memory for the restart record");
    return -1;
  }
  size_t n = strlen(line);
  char *withnl = realloc(line, n + 2);
  if (!withnl) {
    free(line);
    snprintf(tr->err, sizeof tr->err, "out of memory for the restart record");
    return -1;
  }
  memcpy(withnl + n, "\n", 2);
  int rc = loom__metrics_emit(tr, withnl);
  free(withnl);
  if (rc != 0 || !tr->tb) return rc;
  char text[1400], e[1024];
  snprintf(text, sizeof text, "restart %d: %s; %s step %d on %d ranks (was %d), "
           "grad_accum_steps %d (was %d)", ri->attempt, ri->reason,
           tr->step > 0 ? "resumed at" : "started over from", tr->step, world,
           ri->world_size_before, tr->accum, ri->grad_accum_steps_before);
  if (loom_tb_text(tr->tb, tr->step, "restart", text, e, sizeof e) != 0) {
    snprintf(tr->err, sizeof tr->err, "%s: logging.tensorboard: %s", tr->cfg.path, e);
    return -1;
  }
  return 0;
}
