/* The elastic restart's arithmetic: the global batch G (sequences per optimizer step) stays
 * the same when the world changes, through gradient accumulation:
 *   G = micro_batch_size x grad_accum_steps x dp,   dp = world / (tp x pp),
 * so on a new world W' the accumulation is G / (micro x W' / (tp x pp)), which must be an
 * integer; tp x pp must divide W'. (torchrun leaves this to the script; DeepSpeed's elasticity
 * picks the micro-batch from a list; loom keeps the micro-batch, and with it the activation
 * memory per rank, and changes the accumulation only.) */
#ifndef LOOM_CLI_LAUNCH_ELASTIC_H
#define LOOM_CLI_LAUNCH_ELASTIC_H

#include <stddef.h>

typedef struct loom_batch_plan {
  int global_batch_size; /* G, sequences per optimizer step: kept */
  int micro_batch_size;  /* per rank per micro-batch: kept */
  int tp, pp;            /* the model-parallel sizes: kept */
} loom_batch_plan;

/* The grad_accum_steps that keeps plan->global_batch_size on `world` ranks, or -1 with err
 * naming the numbers: tp x pp does not divide the world, or G is not a multiple of
 * micro x dp. */
int loom__elastic_accum(const loom_batch_plan *plan, int world, char *err, size_t errlen);

#endif
