/* template.so — a copy-me parallel plugin for loom (ABI v1).
 *
 * What it does (real, harmless): it follows the hook sequence the host drives (docs/abi.md,
 * "The step"), checks it is the documented one, counts the calls, and logs a one-line summary
 * when destroyed. It owns no role — no gradient sync, no optimizer step — so it composes with
 * any strategy: add {"plugin": "template"} to the "parallel" list of a config.
 *
 * Make it yours (numbered steps, as in SQLite's ext/misc/templatevtab.c):
 *   1. Copy this directory out of the loom tree.
 *   2. Pick a name, e.g. "zero1": replace "template" in PLUGIN_NAME below and in CMakeLists.txt
 *      (project() and loom_add_plugin()). Configs find a plugin by its file name, zero1.so.
 *   3. Rename the context struct `tpl` and the `tpl_` prefix of every function.
 *   4. Declare what you own in PLUGIN_CAPS (LOOM_PAR_CAP_* in loom/parallel_v1.h): roles such as
 *      GRAD_SYNC or OPTIMIZER, and exactly one axis. The host refuses two owners of a role.
 *      GRAD_SYNC averages the gradients over the data-parallel ranks — or only sums them when
 *      the table sets .grad_sync = LOOM_PAR_GRAD_PREDIVIDED and the storage plan says
 *      grads_predivided (the host then puts 1/dp into the loss gradient). Read the plan in
 *      setup with loom_storage_plan_of(api, host, api->model(host)) (compat.h: it answers for
 *      a host of any minor); it also gives the dtypes of the buffers you touch.
 *   5. List your option keys in tpl_create's `keys` and read each with api->opt_*(); an error
 *      there already names the config file and the JSON path for you.
 *   6. Write the hooks you need. Remove the slots you don't from the table at the bottom: a NULL
 *      slot is the host's default (single-device) behaviour, not an error.
 *   7. Own state that must survive a restart (optimizer shards)? Fill state_items.
 *   7b. Allocate memory or communicate? Say how much in tpl_estimate (ABI 1.6), so that
 *      `loom estimate` and `loom conformance` (parallel.estimate) count it.
 *   8. Build against an installed loom and check that it loads:
 *        cmake -S . -B build -DCMAKE_PREFIX_PATH=<loom prefix> && cmake --build build
 *        LOOM_PLUGIN_PATH=$PWD/build loom plugins
 *
 * Rules that keep a plugin loadable (docs/abi.md): include only <loom/loom.h>, link nothing of
 * loom, keep every function static (only loom_plugin_v1 is exported), no global state (all of it
 * hangs off the ctx create() returns), return a loom_status and call api->set_error() first. */
#include <loom/loom.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define PLUGIN_NAME "template"                /* step 2 */
#define PLUGIN_CAPS (LOOM_PAR_CAP_AXIS_DP)    /* step 4: no role, the data-parallel axis */

/* One instance per config entry (step 3). */
typedef struct tpl {
  const loom_host_api_v1 *api; /* the host's table: everything a plugin may call */
  loom_host *host;             /* our handle: pass it back on every call */
  int64_t log_every;           /* option: log the counters every N steps (0 = only at the end) */
  int strict;                  /* option: 1 = an out-of-order hook is an error, 0 = a warning */
  int n_units;                 /* model units: 0 embedding, 1..L blocks, L+1 head */
  int in_step, step, micro;    /* where the host is in the step */
  int next_fwd, next_bwd;      /* unit the next pre_forward / pre_backward must name */
  long steps, micros, fwd_passes, fwd_outside, bwd_passes, hook_calls;
  double last_norm;            /* sqrt of grad_norm_sq's value at the last step */
  int64_t scratch_bytes;       /* option: device scratch held from setup to destroy (LOOM_MEM_COMM),
                                  an example of memory a plugin reports in tpl_estimate */
  void *scratch;
} tpl;

/* An out-of-order hook: the host broke the documented sequence (or we misread it). */
static int tpl_order(tpl *t, const char *hook, int got, int want) {
  if (!t->strict) {
    t->api->log(t->host, LOOM_LOG_WARN, "%s(%d) out of order (expected %d)", hook, got, want);
    return LOOM_OK;
  }
  t->api->set_error(t->host, "%s(%d) out of order: expected %d (step %d, micro %d)", hook, got,
                    want, t->step, t->micro);
  return LOOM_INVALID_USAGE;
}

/* Step 5: options. The mesh exists here; the model does not yet. */
static int tpl_create(const loom_host_api_v1 *api, loom_host *host, const loom_options *opts,
                      void **ctx) {
  static const char *const keys[] = {"log_every", "strict", "comm_scratch_bytes", NULL};
  int rc = api->opt_check_keys(host, opts, keys);
  if (rc != LOOM_OK) return rc;
  tpl *t = calloc(1, sizeof *t);
  if (!t) {
    api->set_error(host, "out of memory");
    return LOOM_NOMEM;
  }
  t->api = api;
  t->host = host;
  rc = api->opt_int(host, opts, "log_every", 0, 0, 1000000000, &t->log_every);
  if (rc == LOOM_OK) rc = api->opt_bool(host, opts, "strict", 1, &t->strict);
  if (rc == LOOM_OK)
    rc = api->opt_int(host, opts, "comm_scratch_bytes", 0, 0, INT64_C(1) << 40, &t->scratch_bytes);
  if (rc != LOOM_OK) {
    free(t);
    return rc;
  }
  *ctx = t;
  return LOOM_OK;
}

static void tpl_destroy(void *ctx) {
  tpl *t = ctx;
  t->api->log(t->host, LOOM_LOG_INFO,
              "%ld steps, %ld micro-steps, %ld forward passes (%ld outside steps: eval/sample), "
              "%ld backward passes, %ld hook calls in order; last grad norm %.4g",
              t->steps, t->micros, t->fwd_passes, t->fwd_outside, t->bwd_passes, t->hook_calls,
              t->last_norm);
  if (t->scratch) t->api->free(t->host, t->scratch);
  free(t);
}

/* The model exists now: buffers, shards and buckets are allocated here (api->alloc). */
static int tpl_setup(void *ctx) {
  tpl *t = ctx;
  const loom_model_v1 *m = t->api->model(t->host);
  if (!m) {
    t->api->set_error(t->host, "setup: the host has no model yet");
    return LOOM_INVALID_USAGE;
  }
  t->n_units = m->n_units;
  if (t->scratch_bytes > 0) {
    t->scratch = t->api->alloc(t->host, (size_t)t->scratch_bytes, LOOM_MEM_COMM);
    if (!t->scratch) return LOOM_NOMEM; /* alloc set the error */
  }
  t->api->log(t->host, LOOM_LOG_DEBUG, "%d units, %llu parameters, dp rank %d of %d",
              m->n_units, (unsigned long long)m->numel, t->api->rank(t->host, LOOM_AXIS_DP),
              t->api->size(t->host, LOOM_AXIS_DP));
  return LOOM_OK;
}

static int tpl_begin_step(void *ctx, int step) {
  tpl *t = ctx;
  t->hook_calls++;
  if (t->in_step) return tpl_order(t, "begin_step", step, t->step + 1);
  t->in_step = 1;
  t->step = step;
  t->micro = -1;
  return LOOM_OK;
}

static int tpl_begin_micro(void *ctx, int micro, int n_micro) {
  tpl *t = ctx;
  t->hook_calls++;
  if (!t->in_step || micro != t->micro + 1 || micro >= n_micro)
    return tpl_order(t, "begin_micro", micro, t->micro + 1);
  t->micro = micro;
  t->micros++;
  return LOOM_OK;
}

/* Forward runs units 0..L+1 in order, inside a step (training) or outside (eval, sampling). */
static int tpl_pre_forward(void *ctx, int unit) {
  tpl *t = ctx;
  t->hook_calls++;
  if (unit == 0) t->next_fwd = 0; /* a new forward pass */
  if (unit != t->next_fwd) return tpl_order(t, "pre_forward", unit, t->next_fwd);
  return LOOM_OK;
}

static int tpl_post_forward(void *ctx, int unit) {
  tpl *t = ctx;
  t->hook_calls++;
  if (unit != t->next_fwd) return tpl_order(t, "post_forward", unit, t->next_fwd);
  t->next_fwd = unit + 1;
  if (unit == t->n_units - 1) {
    t->fwd_passes++;
    if (!t->in_step) t->fwd_outside++;
  }
  return LOOM_OK;
}

/* Backward runs units L+1..0, always inside a step. */
static int tpl_pre_backward(void *ctx, int unit) {
  tpl *t = ctx;
  t->hook_calls++;
  if (unit == t->n_units - 1) t->next_bwd = unit; /* a new backward pass */
  if (!t->in_step || unit != t->next_bwd) return tpl_order(t, "pre_backward", unit, t->next_bwd);
  return LOOM_OK;
}

static int tpl_post_backward(void *ctx, int unit) {
  tpl *t = ctx;
  t->hook_calls++;
  if (unit != t->next_bwd) return tpl_order(t, "post_backward", unit, t->next_bwd);
  t->next_bwd = unit - 1;
  if (unit == 0) t->bwd_passes++;
  return LOOM_OK;
}

static int tpl_end_backward(void *ctx, int micro, int n_micro) {
  tpl *t = ctx;
  t->hook_calls++;
  if (micro != t->micro || t->next_bwd != -1 || n_micro < 1)
    return tpl_order(t, "end_backward", micro, t->micro);
  return LOOM_OK;
}

/* *sq is the host's value; a plugin that shards gradients would replace it. We only read it. */
static int tpl_grad_norm_sq(void *ctx, double *sq) {
  tpl *t = ctx;
  t->hook_calls++;
  t->last_norm = sqrt(*sq);
  return LOOM_OK;
}

static int tpl_end_step(void *ctx, int step) {
  tpl *t = ctx;
  t->hook_calls++;
  if (!t->in_step || step != t->step) return tpl_order(t, "end_step", step, t->step);
  t->in_step = 0;
  t->steps++;
  if (t->log_every > 0 && step % t->log_every == 0)
    t->api->log(t->host, LOOM_LOG_INFO, "step %d: %ld micro-steps, %ld hook calls so far", step,
                t->micros, t->hook_calls);
  return LOOM_OK;
}

/* ABI 1.6: what this plugin holds and moves for a plan, for `loom estimate` (called without
 * create(): no model, device or communicator; only the options and the planned mesh). Report
 * what you allocate (bytes[category], added to the host's figures; set the category's bit in
 * `replaces` for storage you own instead of the host, e.g. a shard) and what you send per
 * optimizer step (comm_bytes, the host's algorithmic count). Leaving the slot NULL makes the
 * host account the plugin by its caps, as loom's own plugin of each role. */
static int tpl_estimate(const loom_host_api_v1 *api, loom_host *host, const loom_options *opts,
                        const loom_estimate_plan_v1 *plan, loom_estimate_v1 *out) {
  void *ctx;
  int rc = tpl_create(api, host, opts, &ctx); /* the same option checks, nothing allocated */
  if (rc != LOOM_OK) return rc;
  tpl *t = ctx;
  (void)plan; /* model dims, unit offsets, mesh, batch and dtypes: what a strategy sizes by */
  if (t->scratch_bytes > 0) {
    out->bytes[LOOM_MEM_COMM] = (uint64_t)t->scratch_bytes;
    snprintf(out->formula[LOOM_MEM_COMM], sizeof out->formula[0], "template scratch");
  }
  free(t); /* not tpl_destroy: nothing to log */
  return LOOM_OK;
}

/* The one exported symbol: identity, ABI version, roles, and the hooks (step 6). Slots left out
 * (optimizer_step, state_items) are NULL: the host runs its own AdamW and saves nothing extra. */
LOOM_EXPORT const loom_parallel_v1 loom_plugin_v1 = {
  .hdr = LOOM_PLUGIN_HEADER_INIT(LOOM_KIND_PARALLEL, PLUGIN_NAME, "1.0.0",
                                 "template: checks and counts the host's hook sequence",
                                 PLUGIN_CAPS, loom_parallel_v1),
  .create = tpl_create,
  .destroy = tpl_destroy,
  .setup = tpl_setup,
  .begin_step = tpl_begin_step,
  .begin_micro = tpl_begin_micro,
  .pre_forward = tpl_pre_forward,
  .post_forward = tpl_post_forward,
  .pre_backward = tpl_pre_backward,
  .post_backward = tpl_post_backward,
  .end_backward = tpl_end_backward,
  .grad_norm_sq = tpl_grad_norm_sq,
  .end_step = tpl_end_step,
  .estimate = tpl_estimate,
};
