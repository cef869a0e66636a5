/* The restart record: `loom launch` restarts a failed job with `loom train CONFIG --restart
 * JSON`, and rank 0 of the restarted run writes the facts once, at start-up, to the metrics
 * (docs/monitoring.md#restart-records):
 *
 *   {"step":S,"restart":{"attempt":1,"resumed_from_step":S,"world_size_before":4,
 *    "world_size":2,"grad_accum_steps_before":1,"grad_accum_steps":2,"reason":"..."}}
 *
 * S is the checkpoint step the run resumed from (0: it started over). The same record goes to
 * TensorBoard: its numbers as scalars restart/... at step S, its reason as text under "restart".
 * The record survives later resumes (metrics.c keeps records with step <= the resume step, and a
 * restart from scratch keeps the earlier restart records). */
#ifndef LOOM_CORE_RESTART_RECORD_H
#define LOOM_CORE_RESTART_RECORD_H

#include <stddef.h>

typedef struct loom_trainer loom_trainer;

/* What the supervisor knows (the trainer adds the step, world size and accumulation). */
typedef struct loom_restart_info {
  int present;                /* 0: not a restart (plain `loom train`) */
  int attempt;                /* restarts so far, this one included: 1, 2, ... */
  int world_size_before;      /* ranks of the attempt that failed */
  int grad_accum_steps_before;/* its train.grad_accum_steps */
  char reason[1024];          /* why it failed, one line (control characters replaced) */
} loom_restart_info;

/* Parse --restart's JSON object {"attempt": N >= 1, "world_size_before": N >= 1,
 * "grad_accum_steps_before": N >= 1, "reason": STRING}; every key required, no other key.
 * 0, or -1 with "--restart: ..." in err. */
int loom_restart_info_parse(const char *json, loom_restart_info *out, char *err, size_t errlen);

/* The JSON text --restart takes for `info` (malloc'd, the caller frees; NULL: out of memory). */
char *loom_restart_info_json(const loom_restart_info *info);

/* Rank 0, once before the first step of a restarted run: print the restart line and write the
 * record to the metrics file and TensorBoard. Nothing when tr->restart.present is 0. 0, or -1
 * with tr->err. */
int loom_metrics_restart(loom_trainer *tr);

#endif
