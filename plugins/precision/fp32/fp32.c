/* fp32.so — full single precision: no loss scaling, nothing to skip. A non-finite gradient
 * in fp32 means the run diverged, which is reported as an error with the step. */
#include <loom/loom.h>
#include <stdlib.h>

typedef struct fp32 { const loom_host_api_v1 *api; loom_host *host; } fp32;

static int fp32_create(const loom_host_api_v1 *api, loom_host *host, const loom_options *opts,
                       void **out) {
  static const char *const keys[] = {NULL};
  if (api->opt_check_keys(host, opts, keys)) return LOOM_INVALID_CONFIG;
  fp32 *p = calloc(1, sizeof *p);
  if (!p) return LOOM_NOMEM;
  p->api = api;
  p->host = host;
  *out = p;
  return LOOM_OK;
}

static void fp32_destroy(void *ctx) { free(ctx); }
static loom_dtype fp32_compute_dtype(void *ctx) { (void)ctx; return LOOM_F32; }
static float fp32_loss_scale(void *ctx) { (void)ctx; return 1.0f; }

static int fp32_after_backward(void *ctx, int step, int finite, int *skip) {
  fp32 *p = ctx;
  *skip = 0;
  if (finite) return LOOM_OK;
  p->api->set_error(p->host,
                    "non-finite gradients at step %d: training diverged (lower optimizer.lr or "
                    "optimizer.weight_decay, set optimizer.grad_clip, or add warm-up)", step);
  return LOOM_INVALID_USAGE;
}

LOOM_EXPORT const loom_precision_v1 loom_plugin_v1 = {
  .hdr = LOOM_PLUGIN_HEADER_INIT(LOOM_KIND_PRECISION, "fp32", "1.0.0",
                                 "fp32 everywhere, no loss scaling", 0, loom_precision_v1),
  .create = fp32_create,
  .destroy = fp32_destroy,
  .compute_dtype = fp32_compute_dtype,
  .loss_scale = fp32_loss_scale,
  .after_backward = fp32_after_backward,
};
