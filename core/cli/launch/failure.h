/* Why a job failed, read from its launcher's output: loom launch feeds every line mpirun and
 * the ranks print to a classifier and, when the job has ended, asks it for one line naming the
 * rank, its node, its exit status or signal and the rank's own error line. The launcher's
 * messages it knows are Open MPI 4's (mpirun's "Process name: [[J,1],R] / Exit code: N", "process
 * rank R with PID P on node H exited on signal S (NAME)", "MPI_ABORT was invoked on rank R ...
 * with errorcode N", a lost daemon "on node H" or one that could not be started, a peer that
 * "unexpectedly disconnected" with its "Peer host: H") and the ranks' "loom[R]: error: ..."
 * lines; anything else leaves the launcher's exit status as the reason. When several are seen,
 * a lost node outranks a rank's failure (which it causes), which outranks a disconnected peer
 * (what the other ranks see of a rank's death). */
#ifndef LOOM_CLI_LAUNCH_FAILURE_H
#define LOOM_CLI_LAUNCH_FAILURE_H

#include <stddef.h>

typedef enum loom_failure_kind {
  LOOM_FAILURE_UNKNOWN = 0, /* only the launcher's exit status is known */
  LOOM_FAILURE_EXIT,        /* a rank exited with a non-zero status (code) */
  LOOM_FAILURE_SIGNAL,      /* a rank was killed by a signal (code = the signal) */
  LOOM_FAILURE_ABORT,       /* a rank called MPI_Abort (code = its error code) */
  LOOM_FAILURE_NODE,        /* the launcher lost a node's daemon (node, when it says) */
  LOOM_FAILURE_PEER,        /* only that an MPI peer on `node` disconnected (its process died) */
} loom_failure_kind;

typedef struct loom_failure {
  loom_failure_kind kind;
  int rank;                 /* world rank of the first rank that failed; -1: unknown */
  int code;                 /* exit status, signal number or MPI_Abort error code */
  char node[128];           /* the node it ran on, or the lost node; "" when not said */
  /* parser state */
  int pending_exit_rank;    /* "Process name: [[J,1],R]" seen: R, its "Exit code:" to come */
  int pending_abort_rank;   /* "MPI_ABORT was invoked on rank R": its "with errorcode" to come */
  int pending_peer;         /* "peer process has unexpectedly disconnected": "Peer host:" next */
  int n_errors;             /* the first "loom[R]: error: ..." line of each of the first 16 */
  struct {                  /* ranks that printed one */
    int rank;
    char line[512];
  } errors[16];
} loom_failure;

void loom__failure_init(loom_failure *f);

/* One line of output (without its newline; stdout and stderr alike). */
void loom__failure_line(loom_failure *f, const char *line);

/* One line describing the failure (rank, node, status or signal, the rank's error line), for
 * the log and the restart record; `launcher_status` is the launcher's wait status. */
void loom__failure_describe(const loom_failure *f, int launcher_status, char *out, size_t outlen);

/* Two failures that look the same (kind, rank and code): a deterministic fault repeats. */
int loom__failure_same(const loom_failure *a, const loom_failure *b);

#endif
