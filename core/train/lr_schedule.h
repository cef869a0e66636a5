/* Learning-rate schedule: linear warm-up, then cosine decay to a floor (or constant). */
#ifndef LOOM_CORE_LR_SCHEDULE_H
#define LOOM_CORE_LR_SCHEDULE_H

#include "config/config.h"

/* Learning rate of optimizer step `step` (1-based) of a schedule whose cosine ends at step
 * `steps` (the horizon: lr_schedule.decay_steps, else train.steps; later steps stay at min_lr,
 * which is how a finished run is extended without a jump):
 *   step <= warmup:   lr * step / warmup
 *   cosine:           min_lr + 0.5 (1 + cos(pi * p)) (lr - min_lr), p = (step - warmup - 1) /
 *                     (steps - warmup - 1) in [0, 1]: the first step after warm-up runs at lr,
 *                     the last at min_lr (Loshchilov & Hutter 2017, SGDR, without restarts);
 *                     steps past the horizon run at min_lr, also when the horizon leaves no
 *                     cosine phase (steps <= warmup + 1)
 *   constant:         lr */
double loom_lr_at(int step, int steps, int warmup, double lr, double min_lr, int cosine);

/* The lr of optimizer step `step` (1-based, steps taken) under DeepSpeed's scheduler s, lr =
 * optimizer.lr (WarmupCosineLR's base). DeepSpeed's engine steps its scheduler after every
 * optimizer step it takes, and the scheduler starts at last_batch_iteration -1 (WarmupLR,
 * WarmupDecayLR: warmup_min_lr; WarmupCosineLR: 0), so step k runs at iteration it = k - 2
 * (deepspeed/runtime/lr_schedules.py, _get_gamma / get_lr_ratio, W = max(2, warmup_num_steps)):
 *   it < W:  gamma = log(it + 1) / log(W) ("log") or it / W ("linear")
 *   after:   WarmupLR 1; WarmupDecayLR max(0, (T - it) / max(1, T - W));
 *   lr = warmup_min_lr + (warmup_max_lr - warmup_min_lr) gamma
 *   WarmupCosineLR: ratio = min_ratio + gamma (1 - min_ratio) in the warm-up, then
 *   max(0, cos_min + (1 - cos_min) (1 + cos(pi (it - W + 1) / (T - W))) / 2); lr x ratio. */
double loom_lr_ds_at(const loom_lr_ds *s, double lr, int step);

/* The lr of step `step` (1-based, steps taken) under cfg's lr_schedule, loom's or DeepSpeed's. */
double loom_lr_config(const loom_config *cfg, int step);

/* The horizon the schedule of `cfg`-like values uses: decay_steps when set, else steps. */
static inline int loom_lr_horizon(int steps, int decay_steps) {
  return decay_steps > 0 ? decay_steps : steps;
}

#endif
