/* fp32.so — full single precision: no loss scaling, nothing to skip. A non-finite gradient
 * in fp32 means the run diverged, which is reported as an error with the step. */
#include "unscaled.h"

static loom_dtype fp32_compute_dtype(void *ctx) { (void)ctx; return LOOM_F32; }

static int fp32_after_backward(void *ctx, int step, int finite, int *skip) {
  return unscaled_after_backward(ctx, step, finite, skip,
                                 "lower optimizer.lr or optimizer.weight_decay, set "
                                 "optimizer.grad_clip, or add warm-up");
}

LOOM_EXPORT const loom_precision_v1 loom_plugin_v1 = {
  .hdr = LOOM_PLUGIN_HEADER_INIT(LOOM_KIND_PRECISION, "fp32", "1.0.0",
                                 "fp32 everywhere, no loss scaling", 0, loom_precision_v1),
  .create = unscaled_create,
  .destroy = unscaled_destroy,
  .compute_dtype = fp32_compute_dtype,
  .loss_scale = unscaled_loss_scale,
  .after_backward = fp32_after_backward,
};
