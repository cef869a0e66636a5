#include "compare_table.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

loom_divergence loom_divergence_of(const loom_run_metrics *a, const loom_run_metrics *b,
                                   int which, double tol) {
  loom_divergence d = {0, 0, 0, 0};
  const double *va = which ? a->grad_norm : a->loss, *vb = which ? b->grad_norm : b->loss;
  int i = 0;
  for (int j = 0; j < b->n; j++) { /* both files are in step order */
    while (i < a->n && a->step[i] < b->step[j]) i++;
    if (i == a->n) break;
    if (a->step[i] != b->step[j]) continue;
    double ref = va[i], x = vb[j];
    /* both missing (a null grad norm: a step the precision plugin skipped in both runs) is
     * agreement, not a difference */
    if (isnan(ref) && isnan(x)) continue;
    double rel = ref != 0 ? fabs(x - ref) / fabs(ref) : (x == ref ? 0 : INFINITY);
    if (isnan(rel)) rel = INFINITY; /* a NaN loss is as different as it gets */
    d.steps_compared++;
    if (rel > d.max_rel || d.steps_compared == 1) {
      d.max_rel = rel;
      d.max_step = b->step[j];
    }
    if (rel > tol && !d.first_over) d.first_over = b->step[j];
  }
  return d;
}

static void row(loom_table *t, const char *label) {
  if (t->n_rows < LOOM_TABLE_MAX_ROWS)
    snprintf(t->label[t->n_rows++], sizeof t->label[0], "%s", label);
}

static void cell(loom_table *t, int run, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(t->cell[t->n_rows - 1][run], LOOM_TABLE_CELL, fmt, ap);
  va_end(ap);
}

static void bytes_cell(loom_table *t, int run, double b) {
  if (isnan(b)) cell(t, run, "-");
  else if (b >= 1e6) cell(t, run, "%.2f MB", b / 1e6);
  else if (b >= 1e3) cell(t, run, "%.1f kB", b / 1e3);
  else cell(t, run, "%.0f B", b);
}

void loom_table_build(loom_table *t, const loom_run_metrics *runs, int n, double tol) {
  memset(t, 0, sizeof *t);
  t->n_runs = n > LOOM_TABLE_MAX_RUNS ? LOOM_TABLE_MAX_RUNS : n;
  n = t->n_runs;
  for (int r = 0; r < n; r++) snprintf(t->head[r], sizeof t->head[0], "%s", runs[r].name);
  row(t, "steps");
  for (int r = 0; r < n; r++) cell(t, r, "%d..%d", runs[r].step[0], runs[r].step[runs[r].n - 1]);
  row(t, "tokens per step");
  for (int r = 0; r < n; r++) cell(t, r, "%.0f", runs[r].tokens_per_step);
  static const char *const what[2] = {"loss", "grad norm"};
  for (int w = 0; w < 2 && n > 1; w++) {
    char lab[48];
    snprintf(lab, sizeof lab, "%s: max rel diff", what[w]);
    row(t, lab);
    loom_divergence d[LOOM_TABLE_MAX_RUNS];
    for (int r = 0; r < n; r++) {
      if (r == 0) {
        cell(t, r, "(reference)");
        continue;
      }
      d[r] = loom_divergence_of(&runs[0], &runs[r], w, tol);
      if (!d[r].steps_compared) cell(t, r, "no common step");
      else cell(t, r, "%.2e (step %d)", d[r].max_rel, d[r].max_step);
    }
    snprintf(lab, sizeof lab, "%s: first step > %.0e", what[w], tol);
    row(t, lab);
    for (int r = 1; r < n; r++) {
      if (d[r].first_over) cell(t, r, "%d", d[r].first_over);
      else cell(t, r, "none");
    }
    cell(t, 0, "-");
  }
  row(t, "final train loss");
  for (int r = 0; r < n; r++) cell(t, r, "%.4f", runs[r].loss[runs[r].n - 1]);
  row(t, "final val loss");
  for (int r = 0; r < n; r++) {
    if (runs[r].n_val) cell(t, r, "%.4f (step %d)", runs[r].val_loss[runs[r].n_val - 1],
                            runs[r].val_step[runs[r].n_val - 1]);
    else cell(t, r, "-");
  }
  row(t, "tokens/s (median)");
  for (int r = 0; r < n; r++) cell(t, r, "%.0f", loom_median(runs[r].tokens_per_s, runs[r].n));
  row(t, "MFU (median)");
  for (int r = 0; r < n; r++) {
    double m = loom_median(runs[r].mfu, runs[r].n);
    if (isnan(m)) cell(t, r, "- (logging.peak_gflops unset)");
    else cell(t, r, "%.1f %%", 100 * m);
  }
  /* memory rows: the union of the runs' categories, in the first run's order */
  char names[LOOM_RUN_MAX_MEM * LOOM_TABLE_MAX_RUNS][32];
  int n_names = 0;
  for (int r = 0; r < n; r++)
    for (int k = 0; k < runs[r].n_mem; k++) {
      int seen = 0;
      for (int j = 0; j < n_names; j++) seen |= !strcmp(names[j], runs[r].mem_name[k]);
      if (!seen) snprintf(names[n_names++], sizeof names[0], "%s", runs[r].mem_name[k]);
    }
  for (int j = 0; j < n_names; j++) {
    double any = 0;
    for (int r = 0; r < n; r++)
      for (int k = 0; k < runs[r].n_mem; k++)
        if (!strcmp(runs[r].mem_name[k], names[j])) any += runs[r].mem_peak_max[k];
    if (any == 0) continue; /* a category no run used */
    char lab[48];
    snprintf(lab, sizeof lab, "peak mem %s (max rank)", names[j]);
    row(t, lab);
    for (int r = 0; r < n; r++) {
      double v = NAN;
      for (int k = 0; k < runs[r].n_mem; k++)
        if (!strcmp(runs[r].mem_name[k], names[j])) v = runs[r].mem_peak_max[k];
      if (isnan(v)) cell(t, r, "-");
      else cell(t, r, "%.2f MiB", v / 1048576.0);
    }
  }
  row(t, "comm bytes/step (rank 0)");
  for (int r = 0; r < n; r++) bytes_cell(t, r, loom_median(runs[r].comm_bytes, runs[r].n));
  row(t, "train time (sum of steps)");
  for (int r = 0; r < n; r++) cell(t, r, "%.1f s", runs[r].train_s);
  row(t, "wall time (launch)");
  for (int r = 0; r < n; r++) {
    if (runs[r].wall_s >= 0) cell(t, r, "%.1f s", runs[r].wall_s);
    else cell(t, r, "-");
  }
}

void loom_table_print(FILE *out, const loom_table *t) {
  int lw = 0;
  for (int i = 0; i < t->n_rows; i++)
    if ((int)strlen(t->label[i]) > lw) lw = (int)strlen(t->label[i]);
  int cw[LOOM_TABLE_MAX_RUNS];
  for (int r = 0; r < t->n_runs; r++) {
    cw[r] = (int)strlen(t->head[r]);
    for (int i = 0; i < t->n_rows; i++)
      if ((int)strlen(t->cell[i][r]) > cw[r]) cw[r] = (int)strlen(t->cell[i][r]);
  }
  fprintf(out, "%-*s", lw, "");
  for (int r = 0; r < t->n_runs; r++) fprintf(out, "  %-*s", cw[r], t->head[r]);
  fputc('\n', out);
  for (int i = 0; i < t->n_rows; i++) {
    fprintf(out, "%-*s", lw, t->label[i]);
    for (int r = 0; r < t->n_runs; r++) fprintf(out, "  %-*s", cw[r], t->cell[i][r]);
    fputc('\n', out);
  }
}

static void html_text(FILE *out, const char *s) {
  for (; *s; s++) {
    if (*s == '<') fputs("&lt;", out);
    else if (*s == '>') fputs("&gt;", out);
    else if (*s == '&') fputs("&amp;", out);
    else if (*s == '"') fputs("&quot;", out);
    else fputc(*s, out);
  }
}

void loom_table_html(FILE *out, const loom_table *t) {
  fputs("<table>\n<tr><th></th>", out);
  for (int r = 0; r < t->n_runs; r++) {
    fputs("<th>", out);
    html_text(out, t->head[r]);
    fputs("</th>", out);
  }
  fputs("</tr>\n", out);
  for (int i = 0; i < t->n_rows; i++) {
    fputs("<tr><th>", out);
    html_text(out, t->label[i]);
    fputs("</th>", out);
    for (int r = 0; r < t->n_runs; r++) {
      fputs("<td>", out);
      html_text(out, t->cell[i][r]);
      fputs("</td>", out);
    }
    fputs("</tr>\n", out);
  }
  fputs("</table>\n", out);
}

void loom_table_save(const loom_table *t, const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) return;
  loom_table_print(f, t);
  fclose(f);
}
