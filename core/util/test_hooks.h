/* Test and fault hooks: every environment variable that makes a run misbehave on purpose for
 * the tests, read once, at start-up, into one struct that the training loop and the host table
 * query without touching the environment again. A production run sets none of them, and each
 * query is then a load and a compare.
 *
 * The knobs (name, format, the test that uses it):
 *
 *   LOOM_FAULT=RANK:STEP:KIND          world rank RANK fails at step STEP: KIND "exit" ends the
 *                                      process at once (_exit(3): no MPI shutdown, like a crash),
 *                                      "kill" sends it SIGKILL (a rank killed from outside, or
 *                                      by the OOM killer), anything else returns an error "fault
 *                                      injected by LOOM_FAULT=... at step STEP". rank_failure.sh,
 *                                      sdk/conformance/run.sh (faults.rank_error), the
 *                                      launch tests (tests/integration/launch/).
 *   LOOM_FAULT_ONCE=FILE               LOOM_FAULT fires only in the process that creates FILE
 *                                      (O_EXCL): once over all the restarts of a supervised job,
 *                                      whose later attempts pass the step. launch tests.
 *   LOOM_INJECT_INF=RANK:STEP[,STEP]   world rank RANK adds +inf to the first element of its
 *                                      gradient partition at each listed step (after backward
 *                                      and the sync; a malformed entry ends the list).
 *                                      mixed_precision.sh, cross_feature.sh, conformance
 *                                      (precision.skip_agreed, which greps the info line).
 *   LOOM_DATA_TRACE=FILE               rank 0 appends one line per sequence of every step's
 *                                      global batch (its shard, epoch and token offset).
 *                                      resume_changes.sh (no token read twice or skipped).
 *   LOOM_FAULT_CKPT_BEFORE_LATEST=ANY  set (any value): the host's fault point
 *                                      "ckpt.before_latest" ends the process with status 3; the
 *                                      checkpoint plugin reaches it between publishing a step
 *                                      and updating `latest`. resume_verify.sh.
 *   LOOM_TEST_HOST_MINOR=4             the host table offered to plugins is a 1.4 host's
 *                                      (struct_size before grads_predivided). equivalence_ddp.sh.
 *
 * Read elsewhere, on purpose: LOOM_NO_F16C=1 (check_convert: the scalar fp16 routines) stays in
 * core/device/cpu_convert.c, which is also compiled into the tagged_device test fixture, a
 * plugin that cannot link this module; it is read once there too. The genuine configuration
 * (LOOM_PLUGIN_PATH, LOOM_DEBUG, LOOM_MPIRUN, LOOM_GNUPLOT, LOOM_CONFORMANCE_DIR, the
 * launchers' rank variables, CUDA_VISIBLE_DEVICES) is read where it is used. */
#ifndef LOOM_TEST_HOOKS_H
#define LOOM_TEST_HOOKS_H

#include <stddef.h>

typedef enum loom_fault_kind {
  LOOM_FAULT_NONE = 0,
  LOOM_FAULT_ERROR, /* return an error from the step */
  LOOM_FAULT_EXIT,  /* end the process as a crash would (loom__fault_crash) */
  LOOM_FAULT_KILL,  /* SIGKILL to itself: a rank killed by a signal */
} loom_fault_kind;

typedef struct loom_test_hooks {
  struct {                 /* LOOM_FAULT */
    loom_fault_kind kind;  /* NONE: unset or malformed */
    int rank, step;
    const char *text;      /* the variable's value, for the message */
    const char *once;      /* LOOM_FAULT_ONCE: the marker file, NULL when unset or empty */
  } fault;
  struct {                 /* LOOM_INJECT_INF */
    int armed;             /* 0: unset or malformed */
    long rank;             /* as written (a long: a huge number never wraps onto a rank) */
    const long *steps;     /* n_steps steps, in the order given */
    size_t n_steps;
  } inject_inf;
  const char *data_trace;  /* LOOM_DATA_TRACE: the file, NULL when unset or empty */
  int ckpt_before_latest;  /* LOOM_FAULT_CKPT_BEFORE_LATEST is set */
  int host_minor;          /* LOOM_TEST_HOST_MINOR: 4, or 0 for the current table */
} loom_test_hooks;

/* Read every knob from the environment. main() calls it first, before any thread starts; a
 * later call does nothing (the answers must not change during a run). */
void loom__test_hooks_init(void);

/* The knobs (reading them first if loom__test_hooks_init was not called: the unit tests). */
const loom_test_hooks *loom__test_hooks(void);

/* 1 when LOOM_INJECT_INF puts +inf into world rank `rank`'s gradient at `step`. */
int loom__hook_inject_inf(int rank, int step);

/* The LOOM_FAULT armed for world rank `rank` at `step` (LOOM_FAULT_NONE almost always). With
 * LOOM_FAULT_ONCE=FILE the answer is the fault only if this call creates FILE, else NONE (the
 * fault fired in an earlier attempt of the job). */
loom_fault_kind loom__hook_fault(int rank, int step);

/* The host side of loom_host_api_v1.fault_point: a named point in a plugin's work. Ends the
 * process (loom__fault_crash) when the tests armed a crash there; otherwise returns 0, also for
 * a name the host does not know. Points: "ckpt.before_latest" (LOOM_FAULT_CKPT_BEFORE_LATEST). */
int loom__fault_point(const char *name);

/* End the process with status 3 at once: no atexit handlers, no MPI shutdown, buffers not
 * flushed, as a crashed rank would. The only way a fault hook stops a run. */
_Noreturn void loom__fault_crash(void);

/* SIGKILL to this process (LOOM_FAULT's "kill"): the launcher reports a rank killed by signal 9. */
_Noreturn void loom__fault_kill(void);

#endif
