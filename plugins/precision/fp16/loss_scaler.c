/* DeepSpeed's DynamicLossScaler.update_scale, line for line (see loss_scaler.h). */
#include "loss_scaler.h"

#include <math.h>

void loom_loss_scaler_init(loom_loss_scaler *s, double loss_scale, int initial_scale_power,
                           int64_t window, int hysteresis, double min_scale,
                           int consecutive_hysteresis) {
  s->dynamic = loss_scale == 0.0;
  s->scale = s->dynamic ? ldexp(1.0, initial_scale_power) : loss_scale;
  s->window = window;
  s->hysteresis = hysteresis;
  s->min_scale = min_scale;
  s->consecutive_hysteresis = consecutive_hysteresis;
  s->iter = 0;
  s->last_overflow_iter = -1;
  s->cur_hysteresis = hysteresis;
}

int loom_loss_scaler_update(loom_loss_scaler *s, int overflow, int *skip) {
  *skip = overflow != 0;
  if (!s->dynamic) { /* a fixed scale: overflowing steps are skipped, nothing adapts */
    s->iter++;
    return 0;
  }
  if (overflow) {
    if (s->hysteresis == 1 || s->cur_hysteresis == 1) {
      if (s->scale <= s->min_scale) return -1; /* stuck: nothing left to cut */
      s->scale = fmax(s->scale / 2.0, s->min_scale);
    } else {
      s->cur_hysteresis--;
    }
    s->last_overflow_iter = s->iter;
  } else {
    if (s->consecutive_hysteresis) s->cur_hysteresis = s->hysteresis;
    if ((s->iter - s->last_overflow_iter) % s->window == 0) {
      if (!s->consecutive_hysteresis) s->cur_hysteresis = s->hysteresis;
      s->scale *= 2.0;
    }
  }
  s->iter++;
  return 0;
}
