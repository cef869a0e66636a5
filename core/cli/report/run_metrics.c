#include "run_metrics.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

static int grow(loom_run_metrics *r, int *cap) {
  if (r->n < *cap) return 0;
  int c = *cap ? 2 * *cap : 256;
  void *p[6] = {realloc(r->step, c * sizeof(int)), NULL, NULL, NULL, NULL, NULL};
  if (!p[0]) return -1;
  r->step = p[0];
  double **d[5] = {&r->loss, &r->grad_norm, &r->tokens_per_s, &r->mfu, &r->comm_bytes};
  for (int i = 0; i < 5; i++) {
    double *q = realloc(*d[i], c * sizeof(double));
    if (!q) return -1;
    *d[i] = q;
  }
  *cap = c;
  return 0;
}

static double num(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  return json_is_number(v) ? json_number_value(v) : NAN;
}

static void take_memory(loom_run_metrics *r, json_t *mem) {
  const char *key;
  json_t *v;
  json_object_foreach(mem, key, v) {
    if (!json_is_number(v)) continue;
    int k = 0;
    while (k < r->n_mem && strcmp(r->mem_name[k], key)) k++;
    if (k == r->n_mem) {
      if (r->n_mem == LOOM_RUN_MAX_MEM) continue;
      snprintf(r->mem_name[r->n_mem++], sizeof r->mem_name[0], "%s", key);
    }
    if (json_number_value(v) > r->mem_peak_max[k]) r->mem_peak_max[k] = json_number_value(v);
  }
}

int loom_run_metrics_load(loom_run_metrics *r, const char *name, const char *jsonl, char *err,
                          size_t errlen) {
  memset(r, 0, sizeof *r);
  r->wall_s = -1;
  snprintf(r->name, sizeof r->name, "%s", name);
  FILE *f = fopen(jsonl, "r");
  if (!f) {
    snprintf(err, errlen, "cannot open %s: %s", jsonl, strerror(errno));
    return -1;
  }
  int cap = 0, vcap = 0, lineno = 0;
  char *line = NULL;
  size_t lcap = 0;
  while (getline(&line, &lcap, f) > 0) {
    lineno++;
    json_error_t je;
    json_t *rec = json_loads(line, 0, &je);
    json_t *step = rec ? json_object_get(rec, "step") : NULL;
    if (!json_is_integer(step)) {
      json_decref(rec);
      if (feof(f)) break; /* a record being written by a running job */
      snprintf(err, errlen, "%s:%d: expected a JSON object with an integer \"step\"", jsonl,
               lineno);
      goto fail;
    }
    int s = (int)json_integer_value(step);
    if (json_is_number(json_object_get(rec, "loss"))) {
      if (grow(r, &cap) != 0) goto oom;
      int i = r->n++;
      r->step[i] = s;
      r->loss[i] = num(rec, "loss");
      r->grad_norm[i] = num(rec, "grad_norm");
      r->tokens_per_s[i] = num(rec, "tokens_per_s");
      r->mfu[i] = num(rec, "mfu");
      r->comm_bytes[i] = num(rec, "comm_bytes");
      double tok = num(rec, "tokens");
      if (!isnan(tok) && s > 0) r->tokens_per_step = tok / s;
      double ms = num(rec, "ms_per_step");
      if (!isnan(ms)) r->train_s += ms / 1e3;
      json_t *mem = json_object_get(rec, "mem_peak_bytes_max");
      if (json_is_object(mem)) take_memory(r, mem);
    } else if (json_is_number(json_object_get(rec, "val_loss"))) {
      if (r->n_val == vcap) {
        vcap = vcap ? 2 * vcap : 64;
        int *vs = realloc(r->val_step, vcap * sizeof(int));
        if (vs) r->val_step = vs;
        double *vl = realloc(r->val_loss, vcap * sizeof(double));
        if (vl) r->val_loss = vl;
        if (!vs || !vl) {
          json_decref(rec);
          goto oom;
        }
      }
      r->val_step[r->n_val] = s;
      r->val_loss[r->n_val++] = num(rec, "val_loss");
    }
    json_decref(rec);
  }
  free(line);
  fclose(f);
  if (r->n == 0) {
    snprintf(err, errlen, "%s: no step record (a run that has not trained a step yet?)", jsonl);
    loom_run_metrics_free(r);
    return -1;
  }
  return 0;
oom:
  snprintf(err, errlen, "%s: out of memory", jsonl);
fail:
  free(line);
  fclose(f);
  loom_run_metrics_free(r);
  return -1;
}

void loom_run_metrics_free(loom_run_metrics *r) {
  free(r->step);
  free(r->loss);
  free(r->grad_norm);
  free(r->tokens_per_s);
  free(r->mfu);
  free(r->comm_bytes);
  free(r->val_step);
  free(r->val_loss);
  r->step = NULL;
  r->loss = r->grad_norm = r->tokens_per_s = r->mfu = r->comm_bytes = NULL;
  r->val_step = NULL;
  r->val_loss = NULL;
  r->n = r->n_val = 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double loom_median(const double *v, int n) {
  double *t = malloc((n > 0 ? n : 1) * sizeof *t);
  if (!t) return NAN;
  int m = 0;
  for (int i = 0; i < n; i++)
    if (!isnan(v[i])) t[m++] = v[i];
  double med = NAN;
  if (m > 0) {
    qsort(t, m, sizeof *t, cmp_double);
    med = m % 2 ? t[m / 2] : 0.5 * (t[m / 2 - 1] + t[m / 2]);
  }
  free(t);
  return med;
}
