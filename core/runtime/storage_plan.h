/* The storage plan (ABI 1.6, loom_storage_plan_v1): how a run stores and moves the model's
 * numbers — the dtypes of parameters, gradients, the optimizer's master copy and the default
 * wire dtypes of gradient reductions, parameter gathers and activations; whether the loss
 * gradient is predivided by dp — and why. Decided here, once, from the ROLES and storage flags
 * of the opened parallel plugins, the compute dtype, train.grad_accum_steps and dp; the host
 * stores it (rt->plan), publishes it to plugins (loom_model_v1.plan) and every other reader
 * (the trainer, checkpoints, `loom estimate`) takes it from here. docs/mixed_precision.md
 * "Storage" and docs/abi.md "The storage plan" give the rules in prose. */
#ifndef LOOM_CORE_STORAGE_PLAN_H
#define LOOM_CORE_STORAGE_PLAN_H

#include <loom/loom.h>

#include "runtime.h" /* loom_runtime, loom_plan */

/* Decide the plan into *out for a run of `dp` data-parallel ranks computing in `compute`.
 * Reads rt->cfg (grad_accum_steps, the plugins' names and JSON paths for the reason),
 * rt->parallel[0 .. n_parallel) as loom__plugins_open left them (storage flags, caps) and
 * rt->grad_sync_owner: no plugin need be created and no device opened, which is how
 * `loom estimate` calls it. Cannot fail. */
void loom__storage_plan(const loom_runtime *rt, loom_dtype compute, int dp, loom_plan *out);

/* The predivide rule alone (what the plan's grads_predivided holds): 1 when the gradient-sync
 * owner sets LOOM_PAR_GRAD_PREDIVIDED (ABI 1.5), dp > 1, and the host table this run offers
 * has grads_predivided (not under LOOM_TEST_HOST_MINOR=4). */
int loom__plan_grads_predivided(const loom_runtime *rt, int dp);

/* loom__plan_grads_predivided at the mesh's dp: what api->grads_predivided answers from
 * create on (before the plan exists) and the trainer's dloss uses. */
int loom__grads_predivided(const loom_runtime *rt);

#endif
