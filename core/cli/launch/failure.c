/* Why a job failed, from its launcher's output (failure.h). */
#include "failure.h"

#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

void loom__failure_init(loom_failure *f) {
  memset(f, 0, sizeof *f);
  f->rank = -1;
  f->pending_exit_rank = -1;
  f->pending_abort_rank = -1;
}

/* How much a kind of failure explains: a lost node causes its ranks' failures, a rank's
 * failure causes its peers' disconnects. */
static int weight(loom_failure_kind k) {
  switch (k) {
  case LOOM_FAILURE_NODE: return 3;
  case LOOM_FAILURE_EXIT:
  case LOOM_FAILURE_SIGNAL:
  case LOOM_FAILURE_ABORT: return 2;
  case LOOM_FAILURE_PEER: return 1;
  default: return 0;
  }
}

/* The first failure of the heaviest kind wins; a lost node's name, said on a later line,
 * completes it. */
static void set_failure(loom_failure *f, loom_failure_kind kind, int rank, int code,
                        const char *node) {
  int naming_lost_node = f->kind == LOOM_FAILURE_NODE && kind == LOOM_FAILURE_NODE &&
                         !f->node[0] && node;
  if (!naming_lost_node && weight(kind) <= weight(f->kind)) return;
  f->kind = kind;
  f->rank = rank;
  f->code = code;
  snprintf(f->node, sizeof f->node, "%s", node ? node : "");
}

/* "loom[R]: error: ...": the first such line of each rank (a rank's first error is the cause,
 * the later ones its consequences). */
static void note_error_line(loom_failure *f, const char *line) {
  int rank, at = 0;
  if (sscanf(line, "loom[%d]: error: %n", &rank, &at) != 1 || at == 0) return;
  for (int i = 0; i < f->n_errors; i++)
    if (f->errors[i].rank == rank) return;
  if (f->n_errors == (int)(sizeof f->errors / sizeof f->errors[0])) return;
  f->errors[f->n_errors].rank = rank;
  snprintf(f->errors[f->n_errors].line, sizeof f->errors[0].line, "%s", line);
  f->n_errors++;
}

void loom__failure_line(loom_failure *f, const char *line) {
  const char *p;
  int a, b, r, code;
  char node[128];
  note_error_line(f, line);
  if ((p = strstr(line, "Process name: [["))) { /* mpirun's non-zero exit summary */
    if (sscanf(p, "Process name: [[%d,%d],%d]", &a, &b, &r) == 3) f->pending_exit_rank = r;
    return;
  }
  if (f->pending_exit_rank >= 0 && (p = strstr(line, "Exit code:"))) {
    if (sscanf(p, "Exit code: %d", &code) == 1)
      set_failure(f, LOOM_FAILURE_EXIT, f->pending_exit_rank, code, NULL);
    f->pending_exit_rank = -1;
    return;
  }
  if ((p = strstr(line, "noticed that process rank "))) {
    if (sscanf(p, "noticed that process rank %d with PID %*d on node %127s exited on signal %d",
               &r, node, &code) == 3)
      set_failure(f, LOOM_FAILURE_SIGNAL, r, code, node);
    return;
  }
  if ((p = strstr(line, "MPI_ABORT was invoked on rank "))) {
    if (sscanf(p, "MPI_ABORT was invoked on rank %d", &r) == 1) f->pending_abort_rank = r;
    return;
  }
  if (f->pending_abort_rank >= 0 && (p = strstr(line, "with errorcode "))) {
    if (sscanf(p, "with errorcode %d", &code) == 1)
      set_failure(f, LOOM_FAILURE_ABORT, f->pending_abort_rank, code, NULL);
    f->pending_abort_rank = -1;
    return;
  }
  if ((p = strstr(line, "Remote daemon:"))) { /* "ORTE has lost communication with ..." */
    const char *q = strstr(p, " on node ");
    if (q && sscanf(q, " on node %127s", node) == 1)
      set_failure(f, LOOM_FAILURE_NODE, -1, 0, node);
    return;
  }
  if (strstr(line, "lost communication with a remote daemon") ||
      strstr(line, "unable to reliably start one or more daemons") ||
      strstr(line, "daemon has unexpectedly failed")) {
    set_failure(f, LOOM_FAILURE_NODE, -1, 0, NULL);
    return;
  }
  if (strstr(line, "communication peer process has unexpectedly disconnected")) {
    f->pending_peer = 1;
    return;
  }
  if (f->pending_peer && (p = strstr(line, "Peer host:"))) {
    if (sscanf(p, "Peer host: %127s", node) == 1) {
      if (f->kind == LOOM_FAILURE_NODE && !f->node[0]) /* the daemon lost there, most likely */
        snprintf(f->node, sizeof f->node, "%s", node);
      set_failure(f, LOOM_FAILURE_PEER, -1, 0, node);
    }
    f->pending_peer = 0;
  }
}

/* The error line to quote: the failing rank's own, else the first rank's that printed one. */
static const char *error_line(const loom_failure *f) {
  for (int i = 0; i < f->n_errors; i++)
    if (f->errors[i].rank == f->rank) return f->errors[i].line;
  return f->n_errors ? f->errors[0].line : NULL;
}

void loom__failure_describe(const loom_failure *f, int launcher_status, char *out, size_t outlen) {
  char what[256], on[160] = "";
  if (f->node[0] && f->kind != LOOM_FAILURE_NODE) snprintf(on, sizeof on, " (node %s)", f->node);
  switch (f->kind) {
  case LOOM_FAILURE_EXIT:
    snprintf(what, sizeof what, "rank %d%s exited with status %d", f->rank, on, f->code);
    break;
  case LOOM_FAILURE_SIGNAL:
    snprintf(what, sizeof what, "rank %d%s was killed by signal %d (%s)", f->rank, on, f->code,
             strsignal(f->code));
    break;
  case LOOM_FAILURE_ABORT:
    snprintf(what, sizeof what, "rank %d%s called MPI_Abort (error code %d)", f->rank, on,
             f->code);
    break;
  case LOOM_FAILURE_NODE:
    if (f->node[0]) snprintf(what, sizeof what, "node %s was lost (mpirun lost its daemon "
                             "there)", f->node);
    else snprintf(what, sizeof what, "a node was lost (mpirun lost a daemon; it names none)");
    break;
  case LOOM_FAILURE_PEER:
    snprintf(what, sizeof what, "a process on node %s disappeared (an MPI peer there "
             "disconnected)", f->node);
    break;
  default:
    if (f->n_errors) /* mpirun's own summary lost (it is not always printed): the first error */
      snprintf(what, sizeof what, "rank %d failed (the launcher exited with status %d)",
               f->errors[0].rank, WIFEXITED(launcher_status) ? WEXITSTATUS(launcher_status)
                                                             : 128 + WTERMSIG(launcher_status));
    else if (WIFSIGNALED(launcher_status))
      snprintf(what, sizeof what, "the launcher was killed by signal %d (%s)",
               WTERMSIG(launcher_status), strsignal(WTERMSIG(launcher_status)));
    else
      snprintf(what, sizeof what, "the launcher exited with status %d",
               WIFEXITED(launcher_status) ? WEXITSTATUS(launcher_status) : -1);
  }
  const char *el = error_line(f);
  if (el) snprintf(out, outlen, "%s: %s", what, el);
  else snprintf(out, outlen, "%s", what);
}

int loom__failure_same(const loom_failure *a, const loom_failure *b) {
  return a->kind == b->kind && a->rank == b->rank && a->code == b->code &&
         ((a->kind != LOOM_FAILURE_NODE && a->kind != LOOM_FAILURE_PEER) ||
          strcmp(a->node, b->node) == 0);
}
