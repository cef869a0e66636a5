#include "plots.h"
#include "util/fs_util.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

const char *const loom_plot_names[4] = {"loss", "tokens_per_s", "memory", "comm"};

/* A run name as a gnuplot string literal's content (no quotes or backslashes). */
static void gp_name(char *out, size_t n, const char *name) {
  size_t j = 0;
  for (const char *p = name; *p && j + 1 < n; p++) out[j++] = (*p == '"' || *p == '\\') ? '_' : *p;
  out[j] = '\0';
}

static int write_data(const char *dir, const loom_run_metrics *runs, int n, char *err,
                      size_t errlen) {
  char path[4200];
  for (int r = 0; r < n; r++) {
    snprintf(path, sizeof path, "%s/run%d.dat", dir, r);
    FILE *f = fopen(path, "w");
    if (!f) goto fail;
    fprintf(f, "# step loss grad_norm tokens_per_s\n");
    for (int i = 0; i < runs[r].n; i++)
      fprintf(f, "%d %.9g %.9g %.6g\n", runs[r].step[i], runs[r].loss[i], runs[r].grad_norm[i],
              runs[r].tokens_per_s[i]);
    fclose(f);
    snprintf(path, sizeof path, "%s/run%d_val.dat", dir, r);
    f = fopen(path, "w");
    if (!f) goto fail;
    fprintf(f, "# step val_loss\n");
    for (int i = 0; i < runs[r].n_val; i++)
      fprintf(f, "%d %.9g\n", runs[r].val_step[i], runs[r].val_loss[i]);
    if (runs[r].n_val == 0) fprintf(f, "NaN NaN\n"); /* gnuplot refuses an empty file */
    fclose(f);
  }
  /* memory: one row per category (the first run's, "total" left out: it dwarfs the rest),
   * one column per run, MiB */
  snprintf(path, sizeof path, "%s/memory.dat", dir);
  FILE *f = fopen(path, "w");
  if (!f) goto fail;
  fprintf(f, "# category");
  for (int r = 0; r < n; r++) fprintf(f, " run%d", r);
  fputc('\n', f);
  for (int k = 0; k < runs[0].n_mem; k++) {
    const char *cat = runs[0].mem_name[k];
    if (!strcmp(cat, "total")) continue;
    double any = 0;
    for (int r = 0; r < n; r++)
      for (int j = 0; j < runs[r].n_mem; j++)
        if (!strcmp(runs[r].mem_name[j], cat)) any += runs[r].mem_peak_max[j];
    if (any == 0) continue;
    fprintf(f, "%s", cat);
    for (int r = 0; r < n; r++) {
      double v = 0;
      for (int j = 0; j < runs[r].n_mem; j++)
        if (!strcmp(runs[r].mem_name[j], cat)) v = runs[r].mem_peak_max[j];
      fprintf(f, " %.4f", v / 1048576.0);
    }
    fputc('\n', f);
  }
  fclose(f);
  snprintf(path, sizeof path, "%s/comm.dat", dir);
  f = fopen(path, "w");
  if (!f) goto fail;
  fprintf(f, "# run median_comm_MB_per_step\n");
  for (int r = 0; r < n; r++) {
    char name[64];
    gp_name(name, sizeof name, runs[r].name);
    double m = loom_median(runs[r].comm_bytes, runs[r].n);
    fprintf(f, "\"%s\" %.6f\n", name, isnan(m) ? 0.0 : m / 1e6);
  }
  fclose(f);
  return 0;
fail:
  snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
  return -1;
}

/* The script draws every plot for one terminal; it is run twice (png, svg). */
static void write_script(FILE *f, const loom_run_metrics *runs, int n) {
  fprintf(f,
          "# loom's plots: gnuplot -e \"fmt='png'\" plots.gp (or fmt='svg'), in this directory\n"
          "if (!exists('fmt')) fmt = 'png'\n"
          "if (fmt eq 'png') set terminal pngcairo size 900,520 noenhanced font 'sans,11'; "
          "else set terminal svg size 900,520 noenhanced font 'sans,11' background '#ffffff'\n"
          "set grid; set key outside right top\n");
  char name[64];
  fprintf(f, "set output 'loss.'.fmt\nset title 'loss'\nset xlabel 'step'\n"
             "set ylabel 'nats/token'\nplot ");
  for (int r = 0; r < n; r++) {
    gp_name(name, sizeof name, runs[r].name);
    fprintf(f, "%s'run%d.dat' using 1:2 with lines lw 2 lc %d title '%s train', "
               "'run%d_val.dat' using 1:2 with linespoints pt 7 ps 1.2 lc %d dt 2 title '%s val'",
            r ? ", " : "", r, r + 1, name, r, r + 1, name);
  }
  fprintf(f, "\nset output 'tokens_per_s.'.fmt\nset title 'throughput'\nset ylabel 'tokens/s'\n"
             "plot ");
  for (int r = 0; r < n; r++) {
    gp_name(name, sizeof name, runs[r].name);
    fprintf(f, "%s'run%d.dat' using 1:4 with lines lw 2 lc %d title '%s'", r ? ", " : "", r,
            r + 1, name);
  }
  fprintf(f, "\nset output 'memory.'.fmt\nset title 'peak memory per rank by category "
             "(largest over ranks)'\nset xlabel ''\nset ylabel 'MiB'\n"
             "set style data histogram; set style histogram clustered gap 1\n"
             "set style fill solid 0.8 border -1; set boxwidth 0.9; set yrange [0:*]\n"
             "plot ");
  for (int r = 0; r < n; r++) {
    gp_name(name, sizeof name, runs[r].name);
    fprintf(f, "%s'memory.dat' using %d:xtic(1) lc %d title '%s'", r ? ", " : "", r + 2, r + 1,
            name);
  }
  fprintf(f, "\nset output 'comm.'.fmt\nset title 'bytes sent per step (rank 0, median)'\n"
             "set ylabel 'MB'\nset style data boxes; set key off\n"
             "plot 'comm.dat' using 0:2:($0+1):xtic(1) with boxes lc variable\n"
             "unset output\n");
}

int loom_plots_draw(const char *dir, const loom_run_metrics *runs, int n, char *err,
                    size_t errlen) {
  if (loom__mkdir_p(dir, err, errlen) != 0) return -1;
  if (write_data(dir, runs, n, err, errlen) != 0) return -1;
  char path[4200];
  snprintf(path, sizeof path, "%s/plots.gp", dir);
  FILE *f = fopen(path, "w");
  if (!f) {
    snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
    return -1;
  }
  write_script(f, runs, n);
  fclose(f);
  const char *gp = getenv("LOOM_GNUPLOT");
  if (!gp || !gp[0]) gp = "gnuplot";
  static const char *const fmts[2] = {"png", "svg"};
  for (int i = 0; i < 2; i++) {
    pid_t pid = fork();
    if (pid < 0) {
      snprintf(err, errlen, "cannot start %s: %s", gp, strerror(errno));
      return -1;
    }
    if (pid == 0) {
      if (chdir(dir) != 0) _exit(126);
      FILE *log = freopen("gnuplot.log", i ? "a" : "w", stderr);
      (void)log;
      char e[32];
      snprintf(e, sizeof e, "fmt='%s'", fmts[i]);
      execlp(gp, gp, "-e", e, "plots.gp", (char *)NULL);
      fprintf(stderr, "cannot run %s: %s\n", gp, strerror(errno));
      _exit(127);
    }
    int st;
    if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      snprintf(err, errlen,
               "%s failed drawing the %s plots in %s (see %s/gnuplot.log%s)", gp, fmts[i], dir,
               dir, WIFEXITED(st) && WEXITSTATUS(st) == 127
                        ? "; is gnuplot installed? Debian: apt-get install gnuplot-nox"
                        : "");
      return -1;
    }
  }
  for (int p = 0; p < 4; p++)
    for (int i = 0; i < 2; i++) {
      struct stat sb;
      snprintf(path, sizeof path, "%s/%s.%s", dir, loom_plot_names[p], fmts[i]);
      if (stat(path, &sb) != 0 || sb.st_size == 0) {
        snprintf(err, errlen, "gnuplot wrote no %s (see %s/gnuplot.log)", path, dir);
        return -1;
      }
    }
  return 0;
}
