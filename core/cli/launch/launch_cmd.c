/* loom launch: run a training job under a supervisor that restarts it when a rank or a node
 * fails (docs/multinode.md#restarts-loom-launch). The loop:
 *
 *   check the nodes (hostfile) and the config on the world (loom check's preflight)
 *   for each attempt: mpirun ... loom train CONFIG [--restart RECORD]   (job.c)
 *     finished: exit 0; stopped by Ctrl-C/SIGTERM: exit 128 + signal, no restart
 *     failed: say why (failure.c); out of restarts: exit with the job's status
 *     back off; elastic: probe the nodes (probe.c), keep the global batch (elastic.c)
 *
 * The restarted job resumes by itself: `loom train` resumes from the newest complete checkpoint
 * (the checkpoint plugin publishes a step directory only when every rank's shard is on disk), or
 * starts over without one. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/launch/launch.h"
#include "elastic.h"
#include "hostfile.h"
#include "job.h"
#include "launch_opts.h"
#include "probe.h"
#include "proctree.h"
#include "train/preflight.h"
#include "train/restart_record.h"
#include "util/one_line.h"

static volatile sig_atomic_t g_stop; /* the first SIGINT/SIGTERM/SIGHUP the supervisor got */
static void on_stop(int sig) {
  if (!g_stop) g_stop = sig;
}

/* The supervisor's state between attempts. */
typedef struct launch_state {
  loom_launch_opts o;
  loom_host hosts[LOOM_MAX_HOSTS];
  int n_hosts;
  int alive[LOOM_MAX_HOSTS];
  char live_hostfile[512];  /* the answering nodes, for this attempt's mpirun ("" without) */
  char tmpdir[256];         /* holds live_hostfile */
  int world;                /* this attempt's ranks */
  int accum;                /* this attempt's train.grad_accum_steps */
  loom_batch_plan plan;     /* the first attempt's batch: what an elastic restart keeps */
  int scaled;               /* this attempt's world differs from the first one's */
} launch_state;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  loom__put_line(stderr, "loom launch: ", msg);
  fflush(stderr);
}

/* The exit status a shell would report for a wait status. */
static int shell_status(int st) {
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
  return 1;
}

static const char *agent(const launch_state *s) { return s->o.rsh ? s->o.rsh : "ssh"; }

/* Probe every node of the hostfile; alive[] and the answering ranks. Returns the number of
 * nodes that answered, -1 when the probe cannot run. Prints one line per silent node. */
static int probe_nodes(launch_state *s, int *slots) {
  char why[LOOM_MAX_HOSTS][128], err[512];
  int n = loom__probe_hosts(agent(s), s->hosts, s->n_hosts, s->o.probe_timeout_s, s->alive,
                            why, err, sizeof err);
  if (n < 0) {
    say("%s", err);
    return -1;
  }
  *slots = 0;
  for (int i = 0; i < s->n_hosts; i++) {
    if (s->alive[i]) *slots += s->hosts[i].slots;
    else
      say("node %s (%s line %d) does not answer '%s %s true': %s", s->hosts[i].name,
          s->o.hostfile, s->hosts[i].line, agent(s), s->hosts[i].name, why[i]);
  }
  return n;
}

/* Write the answering nodes to this attempt's hostfile. 0 or -1 (said). */
static int write_live_hostfile(launch_state *s) {
  char err[700];
  if (!s->tmpdir[0]) {
    const char *t = getenv("TMPDIR");
    snprintf(s->tmpdir, sizeof s->tmpdir, "%s/loom-launch.XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(s->tmpdir)) {
      say("cannot make a directory for the hostfile (%s): %s", s->tmpdir, strerror(errno));
      s->tmpdir[0] = '\0';
      return -1;
    }
    snprintf(s->live_hostfile, sizeof s->live_hostfile, "%s/hostfile", s->tmpdir);
  }
  if (loom__hostfile_write(s->live_hostfile, s->hosts, s->alive, s->n_hosts, err,
                           sizeof err) < 0) {
    say("%s", err);
    return -1;
  }
  return 0;
}

/* loom check's preflight on this attempt's world with its overrides; *info on success. */
static int preflight(launch_state *s, const char *const *sets, int n_sets,
                     loom_preflight_info *info) {
  char err[2048], start[1400];
  if (loom_preflight(s->o.config, sets, n_sets, s->world, info, start, sizeof start, err,
                     sizeof err) != 0) {
    say("on %d ranks: %s", s->world, err);
    return -1;
  }
  return 0;
}

/* The overrides of this attempt: the user's, then the accumulation that keeps the batch. */
static int attempt_sets(const launch_state *s, const char **sets, char (*store)[64]) {
  int n = 0;
  for (int i = 0; i < s->o.n_sets; i++) sets[n++] = s->o.sets[i];
  if (s->scaled) {
    snprintf(store[0], 64, "train.grad_accum_steps=%d", s->accum);
    snprintf(store[1], 64, "train.global_batch_size=%d", s->plan.global_batch_size);
    sets[n++] = store[0];
    sets[n++] = store[1];
  }
  return n;
}

/* mpirun -np W [--hostfile F] [--mca plm_rsh_agent A] [ARGS] loom train CONFIG --set ...
 * [--restart JSON]; argv points into s, self, store and restart_json. */
static int build_argv(const launch_state *s, const char *self, const char *const *sets,
                      int n_sets, const char *restart_json, char *np, const char **argv) {
  const char *mpirun = getenv("LOOM_MPIRUN");
  int a = 0;
  argv[a++] = mpirun && *mpirun ? mpirun : "mpirun";
  snprintf(np, 16, "%d", s->world);
  argv[a++] = "-np";
  argv[a++] = np;
  if (s->live_hostfile[0]) {
    argv[a++] = "--hostfile";
    argv[a++] = s->live_hostfile;
  }
  if (s->o.rsh) {
    argv[a++] = "--mca";
    argv[a++] = "plm_rsh_agent";
    argv[a++] = s->o.rsh;
  }
  for (int i = 0; i < s->o.n_mpirun_args; i++) argv[a++] = s->o.mpirun_args[i];
  argv[a++] = self;
  argv[a++] = "train";
  argv[a++] = s->o.config;
  for (int i = 0; i < n_sets; i++) {
    argv[a++] = "--set";
    argv[a++] = sets[i];
  }
  if (restart_json) {
    argv[a++] = "--restart";
    argv[a++] = restart_json;
  }
  argv[a] = NULL;
  return a;
}

/* Sleep `seconds`, or less when a stop signal comes. 0, or the signal. */
static int back_off(double seconds) {
  struct timespec ts = {.tv_sec = (time_t)seconds,
                        .tv_nsec = (long)((seconds - (double)(time_t)seconds) * 1e9)};
  while (!g_stop && nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
  return (int)g_stop;
}

/* The first start: the nodes, the world and the config. 0, or the exit status. */
static int first_start(launch_state *s, loom_preflight_info *info) {
  if (s->o.hostfile) {
    char err[700];
    if (loom__hostfile_read(s->o.hostfile, s->hosts, &s->n_hosts, err, sizeof err) != 0) {
      say("%s", err);
      return 2;
    }
    int slots, n = probe_nodes(s, &slots);
    if (n < 0) return 1;
    if (n < s->n_hosts) {
      say("%d of the %d nodes of %s do not answer (above): not starting", s->n_hosts - n,
          s->n_hosts, s->o.hostfile);
      return 1;
    }
    if (s->o.min_nodes > s->n_hosts) {
      say("--min-nodes %d: %s has only %d nodes", s->o.min_nodes, s->o.hostfile, s->n_hosts);
      return 2;
    }
    s->world = slots;
    if (write_live_hostfile(s) != 0) return 1;
  } else if (s->o.np) {
    s->world = s->o.np;
  } else {
    const char *nt = getenv("SLURM_NTASKS"); /* inside an allocation: mpirun takes its nodes */
    s->world = nt ? atoi(nt) : 0;
    if (s->world < 1) {
      say("how many ranks? give --np N or --hostfile FILE (or run inside a Slurm allocation)");
      return 2;
    }
  }
  if (preflight(s, s->o.sets, s->o.n_sets, info) != 0) return 1;
  if (!info->has_checkpoint)
    say("warning: %s has no checkpoint plugin: a restart starts over from step 0",
        s->o.config);
  s->accum = info->grad_accum_steps;
  s->plan = (loom_batch_plan){.global_batch_size = info->global_batch_size,
                              .micro_batch_size = info->micro_batch_size,
                              .tp = info->tp,
                              .pp = info->pp};
  return 0;
}

/* Before restart `restart` (1, 2, ...): the nodes that answer and the batch on them. 0, or -1
 * after saying why the job cannot restart. */
static int plan_restart(launch_state *s, int restart, loom_preflight_info *info) {
  if (s->o.min_nodes) {
    int slots, n = probe_nodes(s, &slots);
    if (n < 0) return -1;
    if (n < s->o.min_nodes) {
      say("only %d of %d nodes answer, fewer than --min-nodes %d: not restarting", n,
          s->n_hosts, s->o.min_nodes);
      return -1;
    }
    if (slots != s->world) {
      char err[600];
      int accum = loom__elastic_accum(&s->plan, slots, err, sizeof err);
      if (accum < 0) {
        say("elastic restart %d on %d node(s): %s: not restarting", restart, n, err);
        return -1;
      }
      say("elastic restart %d: %d node(s), %d ranks (were %d): grad_accum_steps %d -> %d "
          "keeps the global batch of %d sequences (micro-batch %d x dp %d x accumulation)",
          restart, n, slots, s->world, s->accum, accum, s->plan.global_batch_size,
          s->plan.micro_batch_size, slots / (s->plan.tp * s->plan.pp));
      s->world = slots;
      s->accum = accum;
      s->scaled = 1;
    }
    if (write_live_hostfile(s) != 0) return -1;
  }
  const char *sets[LOOM_LAUNCH_MAX_SETS + 2];
  char store[2][64];
  int n_sets = attempt_sets(s, sets, store);
  return preflight(s, sets, n_sets, info);
}

/* The loop of attempts. Returns the supervisor's exit status. */
static int supervise(launch_state *s, const char *self) {
  loom_preflight_info info;
  int rc = first_start(s, &info);
  if (rc != 0) return rc;
  loom_restart_info restart = {0};
  loom_failure previous;
  int same_in_a_row = 0, previous_resume = -1;
  for (int attempt = 0;; attempt++) {
    if (g_stop) { /* came while the nodes or the config were checked: nothing to stop */
      say("stopped by %s before attempt %d started; not starting it",
          loom__signal_name((int)g_stop), attempt + 1);
      return 128 + (int)g_stop;
    }
    const char *sets[LOOM_LAUNCH_MAX_SETS + 2];
    char store[2][64], np[16];
    int n_sets = attempt_sets(s, sets, store);
    char *json = restart.present ? loom_restart_info_json(&restart) : NULL;
    const char *argv[2 * LOOM_LAUNCH_MAX_SETS + LOOM_LAUNCH_MAX_MPIRUN_ARGS + 24];
    build_argv(s, self, sets, n_sets, json, np, argv);
    int resume = info.resume_step;
    say("attempt %d of at most %d: %d ranks%s%s, %s", attempt + 1, s->o.max_restarts + 1,
        s->world, s->live_hostfile[0] ? " on the nodes of " : "",
        s->live_hostfile[0] ? s->live_hostfile : "",
        resume > 0 ? "resuming from its newest checkpoint" : "from step 0 (no checkpoint yet)");
    loom_job_result res;
    char err[600];
    int started = loom__job_run((char *const *)argv, &g_stop, s->o.stop_timeout_s, &res, err,
                                sizeof err);
    free(json);
    if (started != 0) {
      say("%s", err);
      return 1;
    }
    int status = shell_status(res.status);
    if (res.stop_signal) {
      say("stopped by %s after %.1f s (the job's exit status %d); not restarting",
          loom__signal_name(res.stop_signal), res.seconds, status);
      return 128 + res.stop_signal;
    }
    if (status == 0) {
      say("the job finished after %d restart(s)", attempt);
      return 0;
    }
    if (status == 130) { /* the ranks themselves were told to stop (preempted), and saved */
      say("the job stopped on a signal of its own (exit status 130: its ranks saved a "
          "checkpoint); not restarting");
      return 130;
    }
    char reason[1024];
    loom__failure_describe(&res.failure, res.status, reason, sizeof reason);
    say("attempt %d failed after %.1f s (exit status %d): %s", attempt + 1, res.seconds, status,
        reason);
    int same = attempt > 0 && loom__failure_same(&res.failure, &previous);
    int stuck = attempt > 0 && resume == previous_resume; /* no newer checkpoint in between */
    same_in_a_row = same ? same_in_a_row + 1 : 1;
    previous = res.failure;
    previous_resume = resume;
    if (attempt == s->o.max_restarts) {
      char where[160] = "";
      if (stuck && resume > 0)
        snprintf(where, sizeof where, ", the last two from the checkpoint of step %d, without "
                 "saving a newer one", resume);
      else if (stuck)
        snprintf(where, sizeof where, ", the last two from step 0, before any checkpoint");
      if (same_in_a_row > 1)
        say("giving up: the job failed the same way %d times in a row (--max-restarts %d)%s: "
            "%s", same_in_a_row, s->o.max_restarts, where, reason);
      else
        say("giving up after %d attempts (--max-restarts %d); the last failure: %s",
            attempt + 1, s->o.max_restarts, reason);
      return status;
    }
    double delay = s->o.backoff_s * (double)(1u << (attempt < 20 ? attempt : 20));
    if (delay > LOOM_LAUNCH_MAX_BACKOFF_S) delay = LOOM_LAUNCH_MAX_BACKOFF_S;
    say("restart %d of %d in %g s", attempt + 1, s->o.max_restarts, delay);
    int sig = back_off(delay);
    if (sig) {
      say("stopped by %s while waiting to restart; not restarting", loom__signal_name(sig));
      return 128 + sig;
    }
    int world_before = s->world, accum_before = s->accum;
    if (plan_restart(s, attempt + 1, &info) != 0) return status;
    restart = (loom_restart_info){.present = 1, .attempt = attempt + 1,
                                  .world_size_before = world_before,
                                  .grad_accum_steps_before = accum_before};
    snprintf(restart.reason, sizeof restart.reason, "%s", reason);
  }
}

int loom_cmd_launch(int argc, char **argv) {
  launch_state *s = calloc(1, sizeof *s);
  if (!s) return 1;
  if (loom__launch_parse(argc, argv, &s->o) != 0) {
    free(s);
    return 2;
  }
  char self[4096];
  ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
  if (k <= 0) {
    say("cannot find the loom binary (/proc/self/exe): %s", strerror(errno));
    free(s);
    return 1;
  }
  self[k] = '\0';
  struct sigaction sa = {.sa_handler = on_stop}; /* no SA_RESTART: waits wake up */
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  if (loom__become_subreaper() != 0)
    say("warning: cannot become the ranks' subreaper: a rank whose mpirun dies may outlive it");
  int rc = supervise(s, self);
  if (s->tmpdir[0]) {
    unlink(s->live_hostfile);
    rmdir(s->tmpdir);
  }
  free(s);
  return rc;
}
