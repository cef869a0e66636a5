/* A finished (or running) run as loom compare and loom report see it: the per-step series and
 * the summary figures read from its metrics JSONL (logging.metrics; in a run directory,
 * DIR/metrics.jsonl). Memory categories are read from the records' own keys, so a category the
 * core adds later shows up without code here. */
#ifndef LOOM_CORE_RUN_METRICS_H
#define LOOM_CORE_RUN_METRICS_H

#include <stddef.h>

enum { LOOM_RUN_MAX_MEM = 16 };

typedef struct loom_run_metrics {
  char name[64];          /* label in tables and plots */
  char dir[4096];         /* the run directory */
  int n;                  /* step records, in file order */
  int *step;              /* (n) */
  double *loss, *grad_norm, *tokens_per_s, *mfu, *comm_bytes; /* (n); mfu NaN when absent */
  int n_val;
  int *val_step;          /* (n_val) */
  double *val_loss;       /* (n_val) */
  int n_mem;              /* categories of mem_peak_bytes_max, "total" last */
  char mem_name[LOOM_RUN_MAX_MEM][32];
  double mem_peak_max[LOOM_RUN_MAX_MEM]; /* bytes: the largest over ranks and steps */
  double tokens_per_step; /* global batch x sequence length (the records' "tokens" / "step") */
  double train_s;         /* sum of the steps' wall times, seconds */
  double wall_s;          /* the launch's wall time when loom compare ran it, else -1 */
} loom_run_metrics;

/* Read `jsonl` into r (zeroed first; free with loom_run_metrics_free). name labels the run.
 * 0, or -1 + err (the file and line) when it cannot be read or holds no step record. */
int loom_run_metrics_load(loom_run_metrics *r, const char *name, const char *jsonl, char *err,
                          size_t errlen);
void loom_run_metrics_free(loom_run_metrics *r);

/* Median of n values (NaN ignored); NaN when none. */
double loom_median(const double *v, int n);

#endif
