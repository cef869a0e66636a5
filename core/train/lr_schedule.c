#include "lr_schedule.h"

#include <math.h>

double loom_lr_at(int step, int steps, int warmup, double lr, double min_lr, int cosine) {
  if (warmup > 0 && step <= warmup) return lr * (double)step / (double)warmup;
  if (!cosine) return lr;
  /* the first step after warm-up runs at the peak, the last one at min_lr */
  int span = steps - warmup - 1;
  /* no cosine phase (steps <= warmup + 1): its one step, if any, runs at lr; every step past
   * the horizon runs at min_lr, as for any horizon, so an extended run stays at the floor */
  double p = span > 0 ? (double)(step - warmup - 1) / (double)span : step > steps ? 1.0 : 0.0;
  if (p < 0) p = 0;
  if (p > 1) p = 1;
  return min_lr + 0.5 * (1.0 + cos(M_PI * p)) * (lr - min_lr);
}
