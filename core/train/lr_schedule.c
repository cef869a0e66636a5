#include "lr_schedule.h"

#include <math.h>
#include <string.h>

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

double loom_lr_ds_at(const loom_lr_ds *s, double lr, int step) {
  int it = step - 2; /* DeepSpeed's last_batch_iteration when that step runs */
  int w = s->warmup_num_steps < 2 ? 2 : s->warmup_num_steps, t = s->total_num_steps;
  double inverse_log_warm_up = 1.0 / log((double)w);
  double warm = s->log_warmup ? inverse_log_warm_up * log((double)it + 1) : (double)it / w;
  if (s->type == LOOM_LR_WARMUP_COSINE) {
    if (it < 0) return 0.0;
    if (it < w) return lr * (s->warmup_min_ratio + warm * (1.0 - s->warmup_min_ratio));
    double r = (1 + cos(M_PI * (double)(it - w + 1) / (double)(t - w))) / 2;
    r = s->cos_min_ratio + (1.0 - s->cos_min_ratio) * r;
    return lr * (r > 0.0 ? r : 0.0);
  }
  if (it < 0) return s->warmup_min_lr;
  double gamma = 1.0;
  if (it < w) {
    gamma = warm;
  } else if (s->type == LOOM_LR_WARMUP_DECAY) {
    double den = (double)(t - w) > 1.0 ? (double)(t - w) : 1.0;
    gamma = (double)(t - it) / den;
    if (gamma < 0.0) gamma = 0.0;
  }
  return s->warmup_min_lr + (s->warmup_max_lr - s->warmup_min_lr) * gamma;
}

double loom_lr_config(const loom_config *cfg, int step) {
  if (cfg->lr_schedule.ds.type != LOOM_LR_LOOM)
    return loom_lr_ds_at(&cfg->lr_schedule.ds, cfg->optimizer.lr, step);
  return loom_lr_at(step, loom_lr_horizon(cfg->train.steps, cfg->lr_schedule.decay_steps),
                    cfg->lr_schedule.warmup_steps, cfg->optimizer.lr, cfg->lr_schedule.min_lr,
                    strcmp(cfg->lr_schedule.decay, "cosine") == 0);
}
