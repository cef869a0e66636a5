/* One attempt of a supervised job: start the launcher (mpirun ... loom train ...) in a process
 * group of its own, pass its stdout and stderr through line by line (each line also read by the
 * failure classifier, failure.h), wait for it, and leave no process of it behind.
 *
 * Stopping: when *stop becomes non-zero (the supervisor got SIGINT/SIGTERM), the launcher gets
 * SIGUSR1, which mpirun forwards to every rank, remote ones too, and the ranks finish their step,
 * save a checkpoint and exit 130 (trainer.c). A launcher still running stop_timeout_s later gets
 * SIGTERM, and 5 s after that everything of it is SIGKILLed. mpirun's own SIGTERM/SIGINT
 * handling would give the ranks only odls_base_sigkill_timeout (1 s) before SIGKILL: no time to
 * save, which is why the launcher is not in the terminal's process group (Ctrl-C reaches the
 * supervisor only). */
#ifndef LOOM_CLI_LAUNCH_JOB_H
#define LOOM_CLI_LAUNCH_JOB_H

#include <signal.h>
#include <stddef.h>

#include "failure.h"

typedef struct loom_job_result {
  int status;            /* the launcher's wait status */
  int stop_signal;       /* the *stop value that stopped it, 0 when nobody asked */
  double seconds;        /* its wall time */
  loom_failure failure;  /* what its output said */
} loom_job_result;

/* "SIGINT", "SIGTERM", "SIGHUP", else "signal N" (a static buffer for the last). */
const char *loom__signal_name(int sig);

/* Run argv (argv[0] found on PATH) to its end. 0 with *res filled, or -1 with err when it
 * cannot be started (fork, pipes, exec: the child reports exec's failure as status 127). */
int loom__job_run(char *const *argv, volatile sig_atomic_t *stop, double stop_timeout_s,
                  loom_job_result *res, char *err, size_t errlen);

#endif
