/* Learning-rate schedule: linear warm-up, then cosine decay to a floor (or constant). */
#ifndef LOOM_CORE_LR_SCHEDULE_H
#define LOOM_CORE_LR_SCHEDULE_H

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

/* The horizon the schedule of `cfg`-like values uses: decay_steps when set, else steps. */
static inline int loom_lr_horizon(int steps, int decay_steps) {
  return decay_steps > 0 ? decay_steps : steps;
}

#endif
