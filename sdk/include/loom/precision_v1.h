/* loom ABI v1 — precision plugins (fp32.so; bf16.so; fp16.so with dynamic loss scaling).
 *
 * The host asks the precision plugin for the loss scale before backward (dloss is multiplied
 * by it), then reports whether the gradients are finite; the plugin updates its scaler and says
 * whether to skip the step (fp16's dynamic loss scaling, Micikevicius et al. 2018, §3.2). The
 * host divides gradients by the scale through the optimizer's grad_scale. */
#ifndef LOOM_PRECISION_V1_H
#define LOOM_PRECISION_V1_H

#include "host_v1.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loom_precision_v1 {
  loom_plugin_header hdr;

  int (*create)(const loom_host_api_v1 *api, loom_host *host, const loom_options *opts,
                void **ctx);
  void (*destroy)(void *ctx);
  /* dtype of activations and GEMMs (LOOM_F32, LOOM_BF16, LOOM_F16). */
  loom_dtype (*compute_dtype)(void *ctx);
  /* Factor applied to the loss before backward (1 when no loss scaling). */
  float (*loss_scale)(void *ctx);
  /* After backward and gradient sync: finite = 1 if every gradient element is finite.
   * Sets *skip = 1 to skip this optimizer step. May return an error (fp32: non-finite
   * gradients mean divergence, which is an error with the step number). */
  int (*after_backward)(void *ctx, int step, int finite, int *skip);
  /* Scaler state for checkpoints: a small JSON object text (owned by the plugin) / restore. */
  const char *(*state_json)(void *ctx);
  int (*load_state_json)(void *ctx, const char *json);
} loom_precision_v1;

#ifdef __cplusplus
}
#endif
#endif /* LOOM_PRECISION_V1_H */
