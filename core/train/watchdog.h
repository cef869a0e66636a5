/* A watchdog thread per rank: when the training loop makes no progress (a step, an eval, a
 * checkpoint) for timeout_s seconds — a stalled peer, a hung collective, a deadlock — it prints
 * why and ends the process, and mpirun then ends the whole job. The analogue of NCCL's
 * collective timeout (PyTorch's `timeout` of init_process_group). */
#ifndef LOOM_CORE_WATCHDOG_H
#define LOOM_CORE_WATCHDOG_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

typedef struct loom_watchdog {
  pthread_t thread;
  int started;
  int timeout_s;
  int rank;
  atomic_int stop;          /* set by loom_watchdog_stop */
  _Atomic int64_t last_ms;  /* monotonic time of the last beat, milliseconds */
  atomic_int step;          /* the step of the last beat, for the message */
} loom_watchdog;

/* Start watching (timeout_s <= 0: do nothing). Returns 0 or -1 if the thread cannot start. */
int loom_watchdog_start(loom_watchdog *w, int timeout_s, int rank);
/* Progress was made at `step`. Cheap; call from the training thread. */
void loom_watchdog_beat(loom_watchdog *w, int step);
void loom_watchdog_stop(loom_watchdog *w);

#endif
