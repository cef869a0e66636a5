/* The side-by-side table of loom compare (and, for one run, loom report): one column per run,
 * one row per figure. Divergence is measured against the first run, step by step on the steps
 * both logged: relative difference |x - x_ref| / |x_ref| (compare_runs.py's rule). */
#ifndef LOOM_CORE_COMPARE_TABLE_H
#define LOOM_CORE_COMPARE_TABLE_H

#include <stdio.h>

#include "run_metrics.h"

enum { LOOM_TABLE_MAX_RUNS = 16, LOOM_TABLE_MAX_ROWS = 48, LOOM_TABLE_CELL = 40 };

typedef struct loom_divergence {
  int steps_compared;  /* steps present in both runs */
  double max_rel;      /* largest relative difference over them */
  int max_step;        /* where it is */
  int first_over;      /* first step whose difference exceeds the tolerance, 0 = none */
} loom_divergence;

typedef struct loom_table {
  int n_runs, n_rows;
  char head[LOOM_TABLE_MAX_RUNS][64];
  char label[LOOM_TABLE_MAX_ROWS][48];
  char cell[LOOM_TABLE_MAX_ROWS][LOOM_TABLE_MAX_RUNS][LOOM_TABLE_CELL];
} loom_table;

/* Run b's series (loss when which = 0, grad norm when 1) against reference a's. */
loom_divergence loom_divergence_of(const loom_run_metrics *a, const loom_run_metrics *b,
                                   int which, double tol);

/* Fill t for runs[0..n) (n <= LOOM_TABLE_MAX_RUNS; the first is the reference) with tolerance
 * tol for the "first step over" rows. */
void loom_table_build(loom_table *t, const loom_run_metrics *runs, int n, double tol);
void loom_table_print(FILE *out, const loom_table *t);
/* loom_table_print into the file `path` (replaced), beside the copy on stdout: a path that
 * cannot be opened is passed over, as the table has been printed already. */
void loom_table_save(const loom_table *t, const char *path);
/* The table as an HTML <table> (cells escaped). */
void loom_table_html(FILE *out, const loom_table *t);

#endif
