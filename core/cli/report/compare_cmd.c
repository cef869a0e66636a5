/* loom compare: A/B runs of strategies as one command. Runs each CONFIG (or each --variant of
 * one) under the launcher with the same ranks, steps and data, each in its own run directory
 * with no checkpoint (so nothing is shared or resumed), or reads finished run directories;
 * then prints the side-by-side table, draws the plots and writes the HTML page. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>

#include <jansson.h>

#include "commands.h"
#include "compare_table.h"
#include "config/config.h"
#include "html_page.h"
#include "plots.h"
#include "run_metrics.h"
#include "util/fs_util.h"

enum { MAX_SETS = 64, MAX_VARIANT_SETS = 16 };

typedef struct run_spec {
  const char *config;  /* NULL: a finished run directory */
  char dir[4096];
  char name[64];
  char *sets[MAX_VARIANT_SETS]; /* the variant's own overrides (owned) */
  int n_sets;
} run_spec;

void loom_compare_help(FILE *out) {
  fprintf(out,
          "usage: loom compare [OPTIONS] CONFIG_OR_RUN_DIR...\n"
          "Run two or more configs with the same ranks, steps, data and seed, each in its own\n"
          "run directory (OUT/NAME: metrics.jsonl, tb/, train.log; no checkpoint, so nothing\n"
          "is resumed or shared), or read finished run directories (DIR/metrics.jsonl); print\n"
          "one table side by side (per-step loss and grad norm divergence from the first run,\n"
          "final train and validation loss, median tokens/s and MFU, peak memory per category\n"
          "over ranks, bytes sent per step, time); draw loss, tokens/s, memory and traffic as\n"
          "PNG and SVG (OUT/plots/, gnuplot) and write one HTML page (OUT/compare.html).\n"
          "  --np N              ranks of every run (default 1), under mpirun (LOOM_MPIRUN)\n"
          "  --steps S           train.steps of every run (default: the configs' own, equal)\n"
          "  --set KEY=VALUE     an override for every run (repeatable)\n"
          "  --variant 'K=V;K=V' with one CONFIG: one more run of it with these overrides\n"
          "                      (repeatable; the config as it is runs first, the reference)\n"
          "  --out DIR           where the runs, plots and page go (default runs/compare)\n"
          "  --tol TOL           the 'first step over' tolerance in the table (default 1e-5)\n"
          "  --expect-equal TOL  exit 1 unless every run's per-step loss is within TOL\n"
          "                      (relative) of the first run's on the same steps\n"
          "Example: loom compare configs/fortunes_ddp.json configs/fortunes_zero3.json \\\n"
          "           --np 2 --steps 100 --expect-equal 1e-5\n");
}

/* Keep [A-Za-z0-9._-] of s; the rest becomes '_'. */
static void sanitize(char *out, size_t n, const char *s) {
  size_t j = 0;
  for (; *s && j + 1 < n; s++) {
    char c = *s;
    int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '.' || c == '-' || c == '_';
    out[j++] = ok ? c : '_';
  }
  out[j] = '\0';
}

static void base_name(char *out, size_t n, const char *path) {
  char buf[4096];
  snprintf(buf, sizeof buf, "%s", path);
  size_t len = strlen(buf);
  while (len > 1 && buf[len - 1] == '/') buf[--len] = '\0';
  const char *b = strrchr(buf, '/');
  b = b ? b + 1 : buf;
  char tmp[256];
  snprintf(tmp, sizeof tmp, "%s", b);
  char *dot = strrchr(tmp, '.');
  if (dot && !strcmp(dot, ".json")) *dot = '\0';
  sanitize(out, n, tmp);
}

static int is_dir(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Remove the event files a previous compare left in DIR/tb (a fresh run starts a new file;
 * TensorBoard would show the old curves next to the new ones). */
static void clear_events(const char *dir) {
  char tb[4200];
  snprintf(tb, sizeof tb, "%s/tb", dir);
  DIR *d = opendir(tb);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d)))
    if (!strncmp(e->d_name, "events.out.tfevents.", 20)) {
      char p[4500];
      snprintf(p, sizeof p, "%s/%s", tb, e->d_name);
      unlink(p);
    }
  closedir(d);
}

/* The overrides of run s, in order: the common ones, the variant's, then what compare owns
 * (steps, outputs, no checkpoint). Strings in `store` (freed by the caller). */
static int run_overrides(const run_spec *s, const char *const *common, int n_common, int steps,
                         const char **out, char store[4][4200]) {
  int n = 0;
  for (int i = 0; i < n_common; i++) out[n++] = common[i];
  for (int i = 0; i < s->n_sets; i++) out[n++] = s->sets[i];
  if (steps > 0) {
    snprintf(store[0], sizeof store[0], "train.steps=%d", steps);
    out[n++] = store[0];
  }
  snprintf(store[1], sizeof store[1], "logging.metrics=%s/metrics.jsonl", s->dir);
  out[n++] = store[1];
  snprintf(store[2], sizeof store[2], "logging.tensorboard=%s/tb", s->dir);
  out[n++] = store[2];
  snprintf(store[3], sizeof store[3], "checkpoint=null");
  out[n++] = store[3];
  return n;
}

/* Launch one run: LOOM_MPIRUN (default mpirun) -np N loom train CONFIG --set ...; output to
 * DIR/train.log. 0 or -1 (the message printed). */
static int launch(const run_spec *s, const char *const *ov, int n_ov, int np, double *wall) {
  char self[4096];
  ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
  if (k <= 0) {
    fprintf(stderr, "loom compare: cannot find the loom binary (/proc/self/exe): %s\n",
            strerror(errno));
    return -1;
  }
  self[k] = '\0';
  const char *mpirun = getenv("LOOM_MPIRUN");
  if (!mpirun || !mpirun[0]) mpirun = "mpirun";
  char npbuf[16];
  snprintf(npbuf, sizeof npbuf, "%d", np);
  const char *argv[MAX_SETS * 2 + MAX_VARIANT_SETS * 2 + 32];
  int a = 0;
  argv[a++] = mpirun;
  argv[a++] = "-np";
  argv[a++] = npbuf;
  argv[a++] = "--oversubscribe"; /* the runs are measured, not raced: more ranks than cores ok */
  argv[a++] = "--bind-to";
  argv[a++] = "none";
  argv[a++] = self;
  argv[a++] = "train";
  argv[a++] = s->config;
  for (int i = 0; i < n_ov; i++) {
    argv[a++] = "--set";
    argv[a++] = ov[i];
  }
  argv[a] = NULL;
  char log[4200];
  snprintf(log, sizeof log, "%s/train.log", s->dir);
  printf("loom compare: %s: %s -np %d loom train %s (log: %s)\n", s->name, mpirun, np, s->config,
         log);
  fflush(stdout);
  double t0 = now_s();
  pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, "loom compare: cannot start %s: %s\n", mpirun, strerror(errno));
    return -1;
  }
  if (pid == 0) {
    if (!freopen(log, "w", stdout)) _exit(126);
    dup2(STDOUT_FILENO, STDERR_FILENO);
    execvp(mpirun, (char *const *)argv);
    fprintf(stderr, "loom compare: cannot run %s: %s\n", mpirun, strerror(errno));
    _exit(127);
  }
  int st;
  if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    fprintf(stderr, "loom compare: run %s failed (%s %d); the end of %s:\n", s->name,
            WIFEXITED(st) ? "exit status" : "signal",
            WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st), log);
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "tail -n 15 '%s' >&2", log);
    if (system(cmd) != 0) fprintf(stderr, "(cannot show it)\n");
    return -1;
  }
  *wall = now_s() - t0;
  printf("loom compare: %s finished in %.1f s\n", s->name, *wall);
  fflush(stdout);
  return 0;
}

/* Every config run must train the same data with the same seed and steps (else the divergence
 * rows compare different experiments): checked before anything runs. */
static int check_same_experiment(run_spec *specs, int n, const char *const *common, int n_common,
                                 int steps) {
  loom_config ref, c;
  int have_ref = 0, rc = 0;
  const char *ref_name = NULL;
  for (int i = 0; i < n && rc == 0; i++) {
    if (!specs[i].config) continue;
    const char *ov[MAX_SETS + MAX_VARIANT_SETS + 8];
    char store[4][4200];
    int n_ov = run_overrides(&specs[i], common, n_common, steps, ov, store);
    char err[2048];
    loom_config *dst = have_ref ? &c : &ref;
    if (loom_config_load(dst, specs[i].config, ov, n_ov, err, sizeof err) != 0) {
      fprintf(stderr, "loom compare: %s: %s\n", specs[i].name, err);
      rc = -1;
      break;
    }
    if (!have_ref) {
      have_ref = 1;
      ref_name = specs[i].name;
      continue;
    }
    const char *what = NULL;
    char a[128] = "", b[128] = "";
    if (strcmp(c.data.train, ref.data.train)) {
      what = "data.train";
      snprintf(a, sizeof a, "%s", ref.data.train);
      snprintf(b, sizeof b, "%s", c.data.train);
    } else if (strcmp(c.data.val, ref.data.val)) {
      what = "data.val";
      snprintf(a, sizeof a, "%s", ref.data.val);
      snprintf(b, sizeof b, "%s", c.data.val);
    } else if (c.train.seed != ref.train.seed) {
      what = "train.seed";
      snprintf(a, sizeof a, "%llu", (unsigned long long)ref.train.seed);
      snprintf(b, sizeof b, "%llu", (unsigned long long)c.train.seed);
    } else if (c.train.steps != ref.train.steps) {
      what = "train.steps";
      snprintf(a, sizeof a, "%d", ref.train.steps);
      snprintf(b, sizeof b, "%d", c.train.steps);
    }
    if (what) {
      fprintf(stderr,
              "loom compare: %s and %s differ in %s (%s vs %s): compare runs of the same data, "
              "seed and steps (--set %s=... or --steps applies to every run)\n",
              ref_name, specs[i].name, what, a, b, what);
      rc = -1;
    }
    loom_config_free(&c);
  }
  if (have_ref) loom_config_free(&ref);
  return rc;
}

/* Split "K=V;K=V" into spec->sets. */
static int add_variant_sets(run_spec *s, const char *v) {
  char *copy = strdup(v);
  if (!copy) return -1;
  char *save = NULL;
  for (char *tok = strtok_r(copy, ";", &save); tok; tok = strtok_r(NULL, ";", &save)) {
    while (*tok == ' ') tok++;
    if (!*tok) continue;
    if (s->n_sets == MAX_VARIANT_SETS || !strchr(tok, '=')) {
      free(copy);
      return -1;
    }
    s->sets[s->n_sets++] = strdup(tok);
  }
  free(copy);
  return s->n_sets > 0 ? 0 : -1;
}

/* The leaf values of a JSON value joined by '_' ([{"plugin":"tensor_parallel","size":2}] ->
 * "tensor_parallel_2"); keys are left out, they are the same in every variant. */
static void json_leaves(char *buf, size_t n, json_t *v) {
  size_t len = strlen(buf);
  const char *sep = len ? "_" : "";
  if (json_is_object(v)) {
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x) json_leaves(buf, n, x);
  } else if (json_is_array(v)) {
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x) json_leaves(buf, n, x);
  } else if (json_is_string(v)) {
    snprintf(buf + len, n - len, "%s%s", sep, json_string_value(v));
  } else if (json_is_integer(v)) {
    snprintf(buf + len, n - len, "%s%lld", sep, (long long)json_integer_value(v));
  } else if (json_is_real(v)) {
    snprintf(buf + len, n - len, "%s%g", sep, json_real_value(v));
  } else if (json_is_boolean(v)) {
    snprintf(buf + len, n - len, "%s%s", sep, json_is_true(v) ? "true" : "false");
  }
}

/* A variant's name: the values of its overrides ("parallel[0].plugin=zero3" -> "zero3"). */
static void variant_name(char *out, size_t n, const run_spec *s) {
  char buf[256] = "";
  for (int i = 0; i < s->n_sets; i++) {
    const char *v = strchr(s->sets[i], '=') + 1;
    json_t *j = json_loads(v, JSON_DECODE_ANY, NULL);
    size_t len = strlen(buf);
    if (j) json_leaves(buf, sizeof buf, j);
    else snprintf(buf + len, sizeof buf - len, "%s%s", len ? "_" : "", v);
    json_decref(j);
  }
  sanitize(out, n, buf);
}

int loom_cmd_compare(int argc, char **argv) {
  const char *common[MAX_SETS];
  const char *inputs[LOOM_TABLE_MAX_RUNS];
  const char *variants[LOOM_TABLE_MAX_RUNS];
  int n_common = 0, n_inputs = 0, n_variants = 0, np = 1, steps = 0;
  double tol = 1e-5, expect = -1;
  const char *out_dir = "runs/compare";
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    int has_val = i + 1 < argc;
    char *end = NULL;
    if (!strcmp(a, "--np") && has_val) {
      np = (int)strtol(argv[++i], &end, 10);
      if (*end || np < 1) goto bad_value;
    } else if (!strcmp(a, "--steps") && has_val) {
      steps = (int)strtol(argv[++i], &end, 10);
      if (*end || steps < 1) goto bad_value;
    } else if (!strcmp(a, "--tol") && has_val) {
      tol = strtod(argv[++i], &end);
      if (*end || !(tol >= 0)) goto bad_value;
    } else if (!strcmp(a, "--expect-equal") && has_val) {
      expect = strtod(argv[++i], &end);
      if (*end || !(expect >= 0)) goto bad_value;
      tol = expect;
    } else if (!strcmp(a, "--set") && has_val) {
      if (n_common == MAX_SETS || !strchr(argv[i + 1], '=')) goto bad_value_next;
      common[n_common++] = argv[++i];
    } else if (!strcmp(a, "--variant") && has_val) {
      if (n_variants == LOOM_TABLE_MAX_RUNS - 1) goto bad_value_next;
      variants[n_variants++] = argv[++i];
    } else if (!strcmp(a, "--out") && has_val) {
      out_dir = argv[++i];
    } else if (a[0] == '-') {
      fprintf(stderr, "loom compare: unknown option or missing value: '%s'\n", a);
      loom_compare_help(stderr);
      return 2;
    } else {
      if (n_inputs == LOOM_TABLE_MAX_RUNS) {
        fprintf(stderr, "loom compare: at most %d runs\n", LOOM_TABLE_MAX_RUNS);
        return 2;
      }
      inputs[n_inputs++] = a;
    }
    continue;
  bad_value_next:
    i++;
  bad_value:
    fprintf(stderr, "loom compare: %s: bad value '%s'\n", a, argv[i]);
    loom_compare_help(stderr);
    return 2;
  }
  if (n_variants && n_inputs != 1) {
    fprintf(stderr, "loom compare: --variant needs exactly one CONFIG (got %d inputs)\n",
            n_inputs);
    return 2;
  }
  if (n_inputs + n_variants < 2) {
    fprintf(stderr, "loom compare: expected two or more configs or run directories, or one "
                    "config and --variant\n");
    loom_compare_help(stderr);
    return 2;
  }
  int n = n_inputs + n_variants, rc = 1;
  run_spec *specs = calloc((size_t)n, sizeof *specs);
  loom_run_metrics *runs = calloc((size_t)n, sizeof *runs);
  loom_table *table = malloc(sizeof *table);
  int loaded = 0;
  if (!specs || !runs || !table) {
    fprintf(stderr, "loom compare: out of memory\n");
    goto done;
  }
  for (int i = 0; i < n; i++) {
    run_spec *s = &specs[i];
    const char *in = inputs[i < n_inputs ? i : 0];
    if (i >= n_inputs) {
      if (add_variant_sets(s, variants[i - n_inputs]) != 0) {
        fprintf(stderr, "loom compare: --variant '%s': expected KEY=VALUE[;KEY=VALUE...]\n",
                variants[i - n_inputs]);
        rc = 2;
        goto done;
      }
      variant_name(s->name, sizeof s->name, s);
    } else {
      base_name(s->name, sizeof s->name, in);
    }
    if (is_dir(in) && i < n_inputs) {
      if (n_variants) {
        fprintf(stderr, "loom compare: --variant needs a CONFIG, got the directory %s\n", in);
        rc = 2;
        goto done;
      }
      snprintf(s->dir, sizeof s->dir, "%s", in);
    } else {
      s->config = in;
    }
    for (int j = 0; j < i; j++) /* the same name twice: ddp, ddp-2 */
      if (!strcmp(specs[j].name, s->name)) {
        size_t len = strlen(s->name);
        snprintf(s->name + (len > 56 ? 56 : len), 8, "-%d", i + 1);
        j = -1;
      }
    if (s->config) snprintf(s->dir, sizeof s->dir, "%s/%s", out_dir, s->name);
  }
  if (check_same_experiment(specs, n, common, n_common, steps) != 0) goto done;
  char mkerr[2048];
  if (loom__mkdir_p(out_dir, mkerr, sizeof mkerr) != 0) {
    fprintf(stderr, "loom compare: %s\n", mkerr);
    goto done;
  }
  for (int i = 0; i < n; i++) {
    run_spec *s = &specs[i];
    char err[2048];
    double wall = -1;
    if (s->config) {
      if (loom__mkdir_p(s->dir, err, sizeof err) != 0) {
        fprintf(stderr, "loom compare: %s\n", err);
        goto done;
      }
      clear_events(s->dir);
      const char *ov[MAX_SETS + MAX_VARIANT_SETS + 8];
      char store[4][4200];
      int n_ov = run_overrides(s, common, n_common, steps, ov, store);
      if (launch(s, ov, n_ov, np, &wall) != 0) goto done;
    }
    char jsonl[4200];
    snprintf(jsonl, sizeof jsonl, "%s/metrics.jsonl", s->dir);
    if (loom_run_metrics_load(&runs[i], s->name, jsonl, err, sizeof err) != 0) {
      fprintf(stderr, "loom compare: %s: %s\n", s->name, err);
      goto done;
    }
    runs[i].wall_s = wall;
    loaded = i + 1;
  }
  for (int i = 1; i < n; i++)
    if (runs[i].tokens_per_step != runs[0].tokens_per_step)
      fprintf(stderr, "loom compare: note: %s trains %.0f tokens per step, %s %.0f: a different "
              "global batch (micro-batch x accumulation x data-parallel size), so their losses "
              "are not expected to match\n", runs[i].name, runs[i].tokens_per_step,
              runs[0].name, runs[0].tokens_per_step);
  loom_table_build(table, runs, n, tol);
  printf("\n");
  loom_table_print(stdout, table);
  char path[4200], plots[4200], err[2048];
  snprintf(path, sizeof path, "%s/compare.txt", out_dir);
  loom_table_save(table, path);
  snprintf(plots, sizeof plots, "%s/plots", out_dir);
  if (loom_plots_draw(plots, runs, n, err, sizeof err) != 0) {
    fprintf(stderr, "loom compare: %s\n", err);
    goto done;
  }
  snprintf(path, sizeof path, "%s/compare.html", out_dir);
  char title[512];
  int tl = snprintf(title, sizeof title, "loom compare:");
  for (int i = 0; i < n && tl < (int)sizeof title; i++)
    tl += snprintf(title + tl, sizeof title - tl, "%s %s", i ? " vs" : "", runs[i].name);
  if (loom_html_page_write(path, title, table, plots, err, sizeof err) != 0) {
    fprintf(stderr, "loom compare: %s\n", err);
    goto done;
  }
  printf("\nloom compare: table in %s/compare.txt, plots in %s/{loss,tokens_per_s,memory,comm}"
         ".{png,svg}, page %s\n", out_dir, plots, path);
  rc = 0;
  if (expect >= 0) {
    for (int i = 1; i < n; i++) {
      loom_divergence d = loom_divergence_of(&runs[0], &runs[i], 0, expect);
      int same_steps = runs[i].n == runs[0].n && d.steps_compared == runs[0].n;
      if (d.max_rel <= expect && same_steps) {
        printf("loom compare: %s equals %s within %g: loss max rel diff %.2e over %d steps\n",
               runs[i].name, runs[0].name, expect, d.max_rel, d.steps_compared);
      } else if (!same_steps) {
        printf("loom compare: %s and %s differ: %d vs %d steps logged, %d in common\n",
               runs[i].name, runs[0].name, runs[i].n, runs[0].n, d.steps_compared);
        rc = 1;
      } else {
        printf("loom compare: %s differs from %s: loss max rel diff %.2e at step %d > %g "
               "(first over at step %d)\n",
               runs[i].name, runs[0].name, d.max_rel, d.max_step, expect, d.first_over);
        rc = 1;
      }
    }
  }
done:
  for (int i = 0; i < loaded; i++) loom_run_metrics_free(&runs[i]);
  for (int i = 0; specs && i < n; i++)
    for (int k = 0; k < specs[i].n_sets; k++) free(specs[i].sets[k]);
  free(specs);
  free(runs);
  free(table);
  return rc;
}
