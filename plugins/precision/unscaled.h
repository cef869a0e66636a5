/* What the precisions without loss scaling share (fp32.so, bf16.so; header-only, as each is its
 * own .so built from the SDK alone, with plugins/precision/ on its include path): no options,
 * a loss scale of 1, and a non-finite gradient is divergence, an error naming the step. */
#ifndef LOOM_PRECISION_UNSCALED_H
#define LOOM_PRECISION_UNSCALED_H

#include <loom/loom.h>
#include <stdlib.h>

typedef struct unscaled {
  const loom_host_api_v1 *api;
  loom_host *host;
} unscaled;

/* create: refuses any option; *out is freed by unscaled_destroy. */
static inline int unscaled_create(const loom_host_api_v1 *api, loom_host *host,
                                  const loom_options *opts, void **out) {
  static const char *const keys[] = {NULL};
  if (api->opt_check_keys(host, opts, keys)) return LOOM_INVALID_CONFIG;
  unscaled *p = calloc(1, sizeof *p);
  if (!p) return LOOM_NOMEM;
  p->api = api;
  p->host = host;
  *out = p;
  return LOOM_OK;
}

static inline void unscaled_destroy(void *ctx) { free(ctx); }
static inline float unscaled_loss_scale(void *ctx) { (void)ctx; return 1.0f; }

/* after_backward: nothing is ever skipped; a non-finite gradient is LOOM_INVALID_USAGE with
 * "non-finite gradients at step N: training diverged (HINT)", HINT saying what to change. */
static inline int unscaled_after_backward(void *ctx, int step, int finite, int *skip,
                                          const char *hint) {
  unscaled *p = ctx;
  *skip = 0;
  if (finite) return LOOM_OK;
  p->api->set_error(p->host, "non-finite gradients at step %d: training diverged (%s)", step,
                    hint);
  return LOOM_INVALID_USAGE;
}

#endif
