/* bf16.so — mixed precision with bfloat16 (8-bit mantissa, fp32's exponent range).
 *
 * The model's weights, activations and activation gradients are bf16 values (rounded to nearest
 * even at every store, computed in fp32: gpt.h), the optimizer keeps fp32 master weights and
 * fp32 Adam moments. bf16 has fp32's range, so no loss scaling is needed (Kalamkar et al. 2019):
 * the scale is 1 and a non-finite gradient means the run diverged, an error with the step, as
 * in fp32. Options: none. */
#include <loom/loom.h>
#include <stdlib.h>

typedef struct bf16 { const loom_host_api_v1 *api; loom_host *host; } bf16;

static int bf16_create(const loom_host_api_v1 *api, loom_host *host, const loom_options *opts,
                       void **out) {
  static const char *const keys[] = {NULL};
  if (api->opt_check_keys(host, opts, keys)) return LOOM_INVALID_CONFIG;
  bf16 *p = calloc(1, sizeof *p);
  if (!p) return LOOM_NOMEM;
  p->api = api;
  p->host = host;
  *out = p;
  return LOOM_OK;
}

static void bf16_destroy(void *ctx) { free(ctx); }
static loom_dtype bf16_compute_dtype(void *ctx) { (void)ctx; return LOOM_BF16; }
static float bf16_loss_scale(void *ctx) { (void)ctx; return 1.0f; }

static int bf16_after_backward(void *ctx, int step, int finite, int *skip) {
  bf16 *p = ctx;
  *skip = 0;
  if (finite) return LOOM_OK;
  p->api->set_error(p->host,
                    "non-finite gradients at step %d: training diverged (bf16 has fp32's range, "
                    "so this is not an overflow to fix by loss scaling: lower optimizer.lr, set "
                    "optimizer.grad_clip, or add warm-up)", step);
  return LOOM_INVALID_USAGE;
}

LOOM_EXPORT const loom_precision_v1 loom_plugin_v1 = {
  .hdr = LOOM_PLUGIN_HEADER_INIT(LOOM_KIND_PRECISION, "bf16", "1.0.0",
                                 "bf16 weights and activations, fp32 master weights and Adam "
                                 "state, no loss scaling", 0, loom_precision_v1),
  .create = bf16_create,
  .destroy = bf16_destroy,
  .compute_dtype = bf16_compute_dtype,
  .loss_scale = bf16_loss_scale,
  .after_backward = bf16_after_backward,
};
