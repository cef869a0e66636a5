/* bf16.so — mixed precision with bfloat16 (8-bit mantissa, fp32's exponent range).
 *
 * The model's weights, activations and activation gradients are bf16 values (rounded to nearest
 * even at every store, computed in fp32: gpt.h), the optimizer keeps fp32 master weights and
 * fp32 Adam moments. bf16 has fp32's range, so no loss scaling is needed (Kalamkar et al. 2019):
 * the scale is 1 and a non-finite gradient means the run diverged, an error with the step, as
 * in fp32. Options: none. */
#include "unscaled.h"

static loom_dtype bf16_compute_dtype(void *ctx) { (void)ctx; return LOOM_BF16; }

static int bf16_after_backward(void *ctx, int step, int finite, int *skip) {
  return unscaled_after_backward(ctx, step, finite, skip,
                                 "bf16 has fp32's range, so this is not an overflow to fix by "
                                 "loss scaling: lower optimizer.lr, set optimizer.grad_clip, or "
                                 "add warm-up");
}

LOOM_EXPORT const loom_precision_v1 loom_plugin_v1 = {
  .hdr = LOOM_PLUGIN_HEADER_INIT(LOOM_KIND_PRECISION, "bf16", "1.0.0",
                                 "bf16 weights and activations, fp32 master weights and Adam "
                                 "state, no loss scaling", 0, loom_precision_v1),
  .create = unscaled_create,
  .destroy = unscaled_destroy,
  .compute_dtype = bf16_compute_dtype,
  .loss_scale = unscaled_loss_scale,
  .after_backward = bf16_after_backward,
};
