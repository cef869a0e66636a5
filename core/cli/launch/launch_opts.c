/* loom launch's command line (launch_opts.h). */
#include "launch_opts.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void loom_launch_help(FILE *out) {
  fprintf(out,
          "usage: loom launch [--np N | --hostfile FILE] [--max-restarts N] [--backoff SECONDS]\n"
          "                   [--min-nodes M] [--rsh AGENT] [--probe-timeout SECONDS]\n"
          "                   [--stop-timeout SECONDS] [--mpirun-arg ARG]...\n"
          "                   CONFIG [--set KEY=VALUE]...\n"
          "Run 'loom train CONFIG' on N ranks under mpirun ($LOOM_MPIRUN, default mpirun) and\n"
          "supervise it, as torchrun --max-restarts does: when a rank or a node fails, say why\n"
          "(rank, node, exit status or signal, the rank's error line), wait, and start the job\n"
          "again; it resumes from its newest complete checkpoint (from step 0 without one).\n"
          "  --np N               ranks (default: the hostfile's slots, or $SLURM_NTASKS\n"
          "                       inside a Slurm allocation)\n"
          "  --hostfile FILE      Open MPI's format, 'NAME [slots=N]' a line (slots default 1);\n"
          "                       every node must answer before the first start\n"
          "  --max-restarts N     restarts before giving up (default 3); the exit status is\n"
          "                       then the last attempt's\n"
          "  --backoff SECONDS    wait before the first restart (default 1), doubled after\n"
          "                       each, at most %.0f\n"
          "  --min-nodes M        elastic: before a restart, probe every node of the hostfile\n"
          "                       and restart on those that answer while at least M do; the\n"
          "                       global batch is kept by scaling train.grad_accum_steps, the\n"
          "                       checkpoint is resharded onto the new mesh\n"
          "  --rsh AGENT          the remote shell (default ssh), for mpirun's daemons\n"
          "                       (plm_rsh_agent) and the probe 'AGENT NODE true'\n"
          "  --probe-timeout S    a node that has not answered in S seconds is gone (default 10)\n"
          "  --stop-timeout S     Ctrl-C / SIGTERM: the ranks get SIGUSR1 (save a checkpoint,\n"
          "                       exit), and are killed after S seconds (default 120)\n"
          "  --mpirun-arg ARG     one more argument for mpirun (repeatable), before the program\n"
          "Every restart is a 'restart' record in the metrics and TensorBoard\n"
          "(docs/monitoring.md).\n"
          "Exit status: 0 when the job finishes; the job's own status when restarts run out or\n"
          "it cannot restart; 128 + the signal when stopped. Docs: docs/multinode.md\n",
          LOOM_LAUNCH_MAX_BACKOFF_S);
}

static int bad(const char *opt, const char *v, const char *expected) {
  fprintf(stderr, "loom launch: %s: expected %s, got '%s'\n", opt, expected, v);
  return -1;
}

static int parse_int(const char *opt, const char *v, int lo, int hi, int *out) {
  char *end;
  long x = strtol(v, &end, 10);
  if (!*v || *end || x < lo || x > hi) {
    char what[96];
    snprintf(what, sizeof what, "an integer in [%d, %d]", lo, hi);
    return bad(opt, v, what);
  }
  *out = (int)x;
  return 0;
}

static int parse_seconds(const char *opt, const char *v, double lo, double *out) {
  char *end;
  double x = strtod(v, &end);
  if (!*v || *end || !isfinite(x) || x < lo || x > 86400) {
    char what[96];
    snprintf(what, sizeof what, "seconds in [%g, 86400]", lo);
    return bad(opt, v, what);
  }
  *out = x;
  return 0;
}

/* Train's arguments after CONFIG: --set KEY=VALUE (or --set=KEY=VALUE), nothing else. */
static int parse_sets(int argc, char **argv, int i, loom_launch_opts *o) {
  for (; i < argc; i++) {
    const char *v = NULL;
    if (!strcmp(argv[i], "--set") && i + 1 < argc) v = argv[++i];
    else if (!strncmp(argv[i], "--set=", 6)) v = argv[i] + 6;
    if (!v) {
      fprintf(stderr, "loom launch: after CONFIG only train's --set KEY=VALUE may follow, got "
              "'%s' (the supervisor's options go before CONFIG)\n", argv[i]);
      return -1;
    }
    if (o->n_sets == LOOM_LAUNCH_MAX_SETS) {
      fprintf(stderr, "loom launch: too many --set overrides (max %d)\n", LOOM_LAUNCH_MAX_SETS);
      return -1;
    }
    o->sets[o->n_sets++] = v;
  }
  return 0;
}

int loom__launch_parse(int argc, char **argv, loom_launch_opts *o) {
  memset(o, 0, sizeof *o);
  o->max_restarts = 3;
  o->backoff_s = 1;
  o->probe_timeout_s = 10;
  o->stop_timeout_s = 120;
  int i = 2;
  for (; i < argc && argv[i][0] == '-'; i++) {
    const char *opt = argv[i];
    if (i + 1 == argc) {
      fprintf(stderr, "loom launch: %s needs a value after it (see 'loom help launch')\n", opt);
      return -1;
    }
    const char *v = argv[++i];
    int rc = 0;
    if (!strcmp(opt, "--np") || !strcmp(opt, "-np")) rc = parse_int(opt, v, 1, 1 << 20, &o->np);
    else if (!strcmp(opt, "--hostfile")) o->hostfile = v;
    else if (!strcmp(opt, "--max-restarts"))
      rc = parse_int(opt, v, 0, 1000, &o->max_restarts);
    else if (!strcmp(opt, "--backoff")) rc = parse_seconds(opt, v, 0, &o->backoff_s);
    else if (!strcmp(opt, "--min-nodes"))
      rc = parse_int(opt, v, 1, 1 << 16, &o->min_nodes);
    else if (!strcmp(opt, "--rsh")) o->rsh = v;
    else if (!strcmp(opt, "--probe-timeout"))
      rc = parse_seconds(opt, v, 0.1, &o->probe_timeout_s);
    else if (!strcmp(opt, "--stop-timeout"))
      rc = parse_seconds(opt, v, 0, &o->stop_timeout_s);
    else if (!strcmp(opt, "--mpirun-arg")) {
      if (o->n_mpirun_args == LOOM_LAUNCH_MAX_MPIRUN_ARGS) {
        fprintf(stderr, "loom launch: too many --mpirun-arg (max %d)\n",
                LOOM_LAUNCH_MAX_MPIRUN_ARGS);
        return -1;
      }
      o->mpirun_args[o->n_mpirun_args++] = v;
    } else {
      fprintf(stderr, "loom launch: unknown option '%s' (see 'loom help launch')\n", opt);
      return -1;
    }
    if (rc != 0) return -1;
  }
  if (i == argc) {
    fprintf(stderr, "loom launch: missing CONFIG (see 'loom help launch')\n");
    return -1;
  }
  o->config = argv[i];
  if (o->min_nodes && !o->hostfile) {
    fprintf(stderr, "loom launch: --min-nodes needs --hostfile (the nodes to probe and drop)\n");
    return -1;
  }
  if (o->np && o->hostfile) {
    fprintf(stderr, "loom launch: --np and --hostfile: the world is the hostfile's slots; give "
            "one of them\n");
    return -1;
  }
  return parse_sets(argc, argv, i + 1, o);
}
