#include "watchdog.h"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void *watch(void *arg) {
  loom_watchdog *w = arg;
  while (!atomic_load(&w->stop)) {
    struct timespec tick = {0, 200 * 1000 * 1000};
    nanosleep(&tick, NULL);
    double idle = (double)(now_ms() - atomic_load(&w->last_ms)) / 1000.0;
    if (!atomic_load(&w->stop) && idle > w->timeout_s) {
      fprintf(stderr,
              "loom[%d]: error: no progress for %.0f s after step %d (train.timeout_s = %d): "
              "a rank is stalled or a collective hangs; ending the job\n",
              w->rank, idle, atomic_load(&w->step), w->timeout_s);
      fflush(stderr);
      _exit(124); /* the launcher sees a failed rank and ends the others */
    }
  }
  return NULL;
}

int loom_watchdog_start(loom_watchdog *w, int timeout_s, int rank) {
  w->started = 0;
  atomic_store(&w->stop, 0);
  w->timeout_s = timeout_s;
  w->rank = rank;
  atomic_store(&w->step, 0);
  atomic_store(&w->last_ms, now_ms());
  if (timeout_s <= 0) return 0;
  if (pthread_create(&w->thread, NULL, watch, w) != 0) return -1;
  w->started = 1;
  return 0;
}

void loom_watchdog_beat(loom_watchdog *w, int step) {
  atomic_store(&w->step, step);
  atomic_store(&w->last_ms, now_ms());
}

void loom_watchdog_stop(loom_watchdog *w) {
  if (!w->started) return;
  atomic_store(&w->stop, 1);
  pthread_join(w->thread, NULL);
  w->started = 0;
}
