/* loom launch's command line:
 *   loom launch [--np N | --hostfile FILE] [--max-restarts N] [--backoff SECONDS]
 *               [--min-nodes M] [--rsh AGENT] [--probe-timeout SECONDS]
 *               [--stop-timeout SECONDS] [--mpirun-arg ARG]... CONFIG [--set KEY=VALUE]...
 * The supervisor's options come before CONFIG (as torchrun's before the script); what follows
 * CONFIG is `loom train`'s. */
#ifndef LOOM_CLI_LAUNCH_OPTS_H
#define LOOM_CLI_LAUNCH_OPTS_H

#include <stdio.h>

enum { LOOM_LAUNCH_MAX_SETS = 64, LOOM_LAUNCH_MAX_MPIRUN_ARGS = 32 };

typedef struct loom_launch_opts {
  int np;                  /* --np: ranks (0: from the hostfile's slots or SLURM_NTASKS) */
  const char *hostfile;    /* --hostfile, NULL: none */
  int max_restarts;        /* --max-restarts (default 3), restarts after the first attempt */
  double backoff_s;        /* --backoff (default 1): the first restart's delay, doubled after
                              each one, at most LOOM_LAUNCH_MAX_BACKOFF_S */
  int min_nodes;           /* --min-nodes (0: not elastic): restart on the nodes that answer
                              while at least this many do */
  const char *rsh;         /* --rsh: the remote shell for mpirun and the probe (NULL: ssh) */
  double probe_timeout_s;  /* --probe-timeout (default 10) */
  double stop_timeout_s;   /* --stop-timeout (default 120): a stopped job's time to save */
  const char *mpirun_args[LOOM_LAUNCH_MAX_MPIRUN_ARGS];
  int n_mpirun_args;
  const char *config;      /* CONFIG */
  const char *sets[LOOM_LAUNCH_MAX_SETS]; /* train's --set values, in order */
  int n_sets;
} loom_launch_opts;

#define LOOM_LAUNCH_MAX_BACKOFF_S 300.0

/* Parse argv[2..argc) ("loom launch ..."). 0, or -1 after printing what is wrong to stderr. */
int loom__launch_parse(int argc, char **argv, loom_launch_opts *o);

/* `loom help launch` */
void loom_launch_help(FILE *out);

#endif
