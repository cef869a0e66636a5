/* fp16.so — mixed precision with IEEE half (11-bit significand, max 65504) and dynamic loss
 * scaling (Micikevicius et al. 2018, §3.2), configured with DeepSpeed's keys and meaning:
 *
 *   "precision": {"plugin": "fp16", "loss_scale": 0, "initial_scale_power": 16,
 *                 "loss_scale_window": 1000, "hysteresis": 2, "min_loss_scale": 1,
 *                 "consecutive_hysteresis": false}
 *
 * loss_scale 0 = dynamic (start at 2^initial_scale_power), > 0 = that fixed scale. The host
 * multiplies the loss gradient by loss_scale() before backward, agrees on one overflow flag over
 * every rank of every mesh axis, calls after_backward, skips the optimizer step (and the lr
 * schedule's step) when told to, and divides the gradients by the scale in the optimizer.
 * The scaler's whole state is in state_json, which the checkpoint keeps: a resumed run continues
 * with the same scale and counters. The rules are in loss_scaler.h. */
#include <loom/loom.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loss_scaler.h"

typedef struct fp16 {
  const loom_host_api_v1 *api;
  loom_host *host;
  loom_loss_scaler s;
  char state[256];
} fp16;

static int fp16_create(const loom_host_api_v1 *api, loom_host *host, const loom_options *opts,
                       void **out) {
  static const char *const keys[] = {"loss_scale", "initial_scale_power", "loss_scale_window",
                                     "hysteresis", "min_loss_scale", "consecutive_hysteresis",
                                     NULL};
  if (api->opt_check_keys(host, opts, keys)) return LOOM_INVALID_CONFIG;
  double loss_scale, min_scale;
  int64_t power, window, hysteresis;
  int consecutive;
  if (api->opt_double(host, opts, "loss_scale", 0.0, 0.0, 1e30, &loss_scale) ||
      api->opt_int(host, opts, "initial_scale_power", 16, 0, 100, &power) ||
      api->opt_int(host, opts, "loss_scale_window", 1000, 1, INT64_MAX / 2, &window) ||
      api->opt_int(host, opts, "hysteresis", 2, 1, 1000000, &hysteresis) ||
      api->opt_double(host, opts, "min_loss_scale", 1.0, 0x1p-100, 1e30, &min_scale) ||
      api->opt_bool(host, opts, "consecutive_hysteresis", 0, &consecutive))
    return LOOM_INVALID_CONFIG;
  if (loss_scale == 0.0 && ldexp(1.0, (int)power) < min_scale) {
    api->set_error(host, "initial_scale_power %lld gives a scale of 2^%lld, below "
                   "min_loss_scale %g: raise initial_scale_power or lower min_loss_scale",
                   (long long)power, (long long)power, min_scale);
    return LOOM_INVALID_CONFIG;
  }
  fp16 *p = calloc(1, sizeof *p);
  if (!p) return LOOM_NOMEM;
  p->api = api;
  p->host = host;
  loom_loss_scaler_init(&p->s, loss_scale, (int)power, window, (int)hysteresis, min_scale,
                        consecutive);
  *out = p;
  return LOOM_OK;
}

static void fp16_destroy(void *ctx) { free(ctx); }
static loom_dtype fp16_compute_dtype(void *ctx) { (void)ctx; return LOOM_F16; }
static float fp16_loss_scale(void *ctx) { return (float)((fp16 *)ctx)->s.scale; }

static int fp16_after_backward(void *ctx, int step, int finite, int *skip) {
  fp16 *p = ctx;
  double before = p->s.scale;
  if (loom_loss_scaler_update(&p->s, !finite, skip) != 0) {
    p->api->set_error(p->host,
                      "the fp16 loss scale is stuck at min_loss_scale %g at step %d: the "
                      "gradients overflow fp16 (non-finite) even at the smallest scale, so no "
                      "step can be taken (lower optimizer.lr, set optimizer.grad_clip, or train "
                      "in bf16, which has fp32's range)", p->s.min_scale, step);
    return LOOM_INVALID_USAGE;
  }
  if (*skip)
    p->api->log(p->host, LOOM_LOG_INFO, "step %d: gradient overflow, step skipped; loss scale "
                "%g -> %g", step, before, p->s.scale);
  else if (p->s.scale != before)
    p->api->log(p->host, LOOM_LOG_INFO, "step %d: %lld clean steps, loss scale %g -> %g", step,
                (long long)p->s.window, before, p->s.scale);
  return LOOM_OK;
}

static const char *fp16_state_json(void *ctx) {
  fp16 *p = ctx;
  snprintf(p->state, sizeof p->state,
           "{\"scale\":%.17g,\"iter\":%lld,\"last_overflow_iter\":%lld,\"hysteresis\":%d}",
           p->s.scale, (long long)p->s.iter, (long long)p->s.last_overflow_iter,
           p->s.cur_hysteresis);
  return p->state;
}

/* The number after "KEY": in a flat JSON object text; 0 if absent or malformed. */
static int json_number(const char *json, const char *key, double *out) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *at = strstr(json, pat);
  if (!at) return 0;
  char *end;
  *out = strtod(at + strlen(pat), &end);
  return end != at + strlen(pat) && isfinite(*out);
}

static int fp16_load_state_json(void *ctx, const char *json) {
  fp16 *p = ctx;
  double scale, iter, last, hyst;
  if (!json_number(json, "scale", &scale)) {
    /* a checkpoint of another precision plugin (fp32, bf16): start the scaler afresh */
    p->api->log(p->host, LOOM_LOG_INFO, "no loss-scaler state in the checkpoint (%s): the "
                "scale starts at %g", json, p->s.scale);
    return LOOM_OK;
  }
  if (!(scale > 0) || !json_number(json, "iter", &iter) || iter < 0 ||
      !json_number(json, "last_overflow_iter", &last) || last < -1 || last >= iter ||
      !json_number(json, "hysteresis", &hyst) || hyst < 0 || hyst > p->s.hysteresis) {
    p->api->set_error(p->host, "checkpoint precision state %s: expected {\"scale\" > 0, "
                      "\"iter\" >= 0, \"last_overflow_iter\" in [-1, iter), \"hysteresis\" in "
                      "[0, %d]}", json, p->s.hysteresis);
    return LOOM_CORRUPT;
  }
  if (p->s.dynamic) p->s.scale = scale; /* a fixed scale from the config wins */
  p->s.iter = (int64_t)iter;
  p->s.last_overflow_iter = (int64_t)last;
  p->s.cur_hysteresis = (int)hyst;
  return LOOM_OK;
}

LOOM_EXPORT const loom_precision_v1 loom_plugin_v1 = {
  .hdr = LOOM_PLUGIN_HEADER_INIT(LOOM_KIND_PRECISION, "fp16", "1.0.0",
                                 "fp16 weights and activations, fp32 master weights and Adam "
                                 "state, dynamic loss scaling (DeepSpeed's keys)", 0,
                                 loom_precision_v1),
  .create = fp16_create,
  .destroy = fp16_destroy,
  .compute_dtype = fp16_compute_dtype,
  .loss_scale = fp16_loss_scale,
  .after_backward = fp16_after_backward,
  .state_json = fp16_state_json,
  .load_state_json = fp16_load_state_json,
};
