/* Test and fault hooks, read once (test_hooks.h lists the knobs and the tests that use them). */
#include "test_hooks.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static loom_test_hooks g_hooks;
static int g_ready;

/* A copy of a value that lives as long as the process (kept in g_hooks, so still reachable at
 * exit); only what is kept is copied. */
static const char *keep(const char *v) { return v ? strdup(v) : NULL; }

/* "RANK:STEP:KIND" */
static void parse_fault(const char *f) {
  int rank, step;
  char kind[16] = "";
  if (!f || sscanf(f, "%d:%d:%15s", &rank, &step, kind) != 3) return;
  g_hooks.fault.kind = strcmp(kind, "exit") == 0   ? LOOM_FAULT_EXIT
                       : strcmp(kind, "kill") == 0 ? LOOM_FAULT_KILL
                                                   : LOOM_FAULT_ERROR;
  g_hooks.fault.rank = rank;
  g_hooks.fault.step = step;
  g_hooks.fault.text = keep(f);
}

/* "RANK:STEP[,STEP...]": any one character separates the steps; the list ends at the first
 * entry that is not a number (so "1:3,x,5" injects at step 3 only). */
static void parse_inject_inf(const char *f) {
  char *end;
  if (!f) return;
  long rank = strtol(f, &end, 10);
  if (*end != ':') return;
  size_t cap = strlen(end) + 1, n = 0; /* at most one step per character */
  long *steps = malloc(cap * sizeof *steps);
  if (!steps) return; /* out of memory at start-up: inject nothing */
  for (const char *q = end + 1; *q; q = *end ? end + 1 : end) {
    long at = strtol(q, &end, 10);
    if (end == q) break;
    steps[n++] = at;
  }
  g_hooks.inject_inf.armed = 1;
  g_hooks.inject_inf.rank = rank;
  g_hooks.inject_inf.steps = steps;
  g_hooks.inject_inf.n_steps = n;
}

void loom__test_hooks_init(void) {
  if (g_ready) return;
  g_ready = 1;
  parse_fault(getenv("LOOM_FAULT"));
  const char *once = getenv("LOOM_FAULT_ONCE");
  g_hooks.fault.once = once && *once ? keep(once) : NULL;
  parse_inject_inf(getenv("LOOM_INJECT_INF"));
  const char *trace = getenv("LOOM_DATA_TRACE");
  g_hooks.data_trace = trace && *trace ? keep(trace) : NULL;
  g_hooks.ckpt_before_latest = getenv("LOOM_FAULT_CKPT_BEFORE_LATEST") != NULL;
  const char *minor = getenv("LOOM_TEST_HOST_MINOR");
  g_hooks.host_minor = minor && strcmp(minor, "4") == 0 ? 4 : 0;
}

const loom_test_hooks *loom__test_hooks(void) {
  loom__test_hooks_init();
  return &g_hooks;
}

int loom__hook_inject_inf(int rank, int step) {
  const loom_test_hooks *h = loom__test_hooks();
  if (!h->inject_inf.armed || h->inject_inf.rank != rank) return 0;
  for (size_t i = 0; i < h->inject_inf.n_steps; i++)
    if (h->inject_inf.steps[i] == step) return 1;
  return 0;
}

loom_fault_kind loom__hook_fault(int rank, int step) {
  const loom_test_hooks *h = loom__test_hooks();
  if (h->fault.kind == LOOM_FAULT_NONE || h->fault.rank != rank || h->fault.step != step)
    return LOOM_FAULT_NONE;
  if (h->fault.once) { /* fired already (the file exists) or cannot tell: no fault */
    int fd = open(h->fault.once, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return LOOM_FAULT_NONE;
    close(fd);
  }
  return h->fault.kind;
}

int loom__fault_point(const char *name) {
  const loom_test_hooks *h = loom__test_hooks();
  if (name && strcmp(name, "ckpt.before_latest") == 0 && h->ckpt_before_latest)
    loom__fault_crash();
  return 0;
}

_Noreturn void loom__fault_crash(void) { _exit(3); }

_Noreturn void loom__fault_kill(void) {
  fflush(NULL); /* the step lines so far reach the log, as a rank's output does until a kill */
  raise(SIGKILL);
  _exit(137); /* defensive: SIGKILL cannot be caught or blocked */
}
