/* loom report RUN_DIR: one run's table, plots and HTML page (loom compare's, for one run). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "compare_table.h"
#include "html_page.h"
#include "plots.h"
#include "run_metrics.h"

void loom_report_help(FILE *out) {
  fprintf(out,
          "usage: loom report RUN_DIR [--out DIR]\n"
          "Read RUN_DIR/metrics.jsonl (a finished or running 'loom train'; RUN_DIR may also be\n"
          "the JSONL file itself) and write its table, plots (loss and val loss, tokens/s,\n"
          "memory by category, bytes sent per step; PNG and SVG, gnuplot) and one HTML page to\n"
          "DIR (default RUN_DIR/report): DIR/report.txt, DIR/*.png, DIR/*.svg, DIR/report.html.\n"
          "Example: loom report runs/fortunes_ddp\n");
}

int loom_cmd_report(int argc, char **argv) {
  const char *run = NULL, *out = NULL;
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--out") && i + 1 < argc) {
      out = argv[++i];
    } else if (argv[i][0] == '-' || run) {
      fprintf(stderr, "loom report: unexpected argument '%s'\n", argv[i]);
      loom_report_help(stderr);
      return 2;
    } else {
      run = argv[i];
    }
  }
  if (!run) {
    fprintf(stderr, "loom report: missing RUN_DIR\n");
    loom_report_help(stderr);
    return 2;
  }
  char jsonl[4200], dir[4200], name[64];
  size_t len = strlen(run);
  int is_file = len > 6 && !strcmp(run + len - 6, ".jsonl");
  if (is_file) {
    snprintf(jsonl, sizeof jsonl, "%s", run);
    snprintf(dir, sizeof dir, "%.*s", (int)(strrchr(run, '/') ? strrchr(run, '/') - run : 1),
             strrchr(run, '/') ? run : ".");
  } else {
    snprintf(jsonl, sizeof jsonl, "%s/metrics.jsonl", run);
    snprintf(dir, sizeof dir, "%s", run);
  }
  const char *b = strrchr(dir, '/');
  snprintf(name, sizeof name, "%s", b && b[1] ? b + 1 : dir);
  char outbuf[4200];
  if (!out) {
    snprintf(outbuf, sizeof outbuf, "%s/report", dir);
    out = outbuf;
  }
  loom_run_metrics r;
  char err[2048];
  if (loom_run_metrics_load(&r, name, jsonl, err, sizeof err) != 0) {
    fprintf(stderr, "loom report: %s\n", err);
    return 1;
  }
  int rc = 1;
  loom_table *t = malloc(sizeof *t);
  if (!t) goto done;
  loom_table_build(t, &r, 1, 0);
  loom_table_print(stdout, t);
  if (loom_plots_draw(out, &r, 1, err, sizeof err) != 0) {
    fprintf(stderr, "loom report: %s\n", err);
    goto done;
  }
  char path[4300], title[256];
  snprintf(path, sizeof path, "%s/report.txt", out);
  loom_table_save(t, path);
  snprintf(path, sizeof path, "%s/report.html", out);
  snprintf(title, sizeof title, "loom report: %s", name);
  if (loom_html_page_write(path, title, t, out, err, sizeof err) != 0) {
    fprintf(stderr, "loom report: %s\n", err);
    goto done;
  }
  printf("loom report: plots in %s/{loss,tokens_per_s,memory,comm}.{png,svg}, page %s\n", out,
         path);
  rc = 0;
done:
  free(t);
  loom_run_metrics_free(&r);
  return rc;
}
