/* Dynamic loss scaling with DeepSpeed's rules and keys (deepspeed/runtime/fp16/loss_scaler.py,
 * DynamicLossScaler; config keys of the "fp16" section). Plain state and arithmetic, no I/O, so
 * the unit test drives it directly (tests/unit/check_loss_scaler.c compiles this file in).
 *
 * An overflow (a non-finite gradient anywhere) skips the step; the scale is halved on the
 * overflow that finds the hysteresis budget at 1 (else the budget drops by one), never below
 * min_scale; after `window` iterations without an overflow since the last one the scale doubles
 * and the budget is refilled (consecutive_hysteresis: refilled by every clean step instead).
 * An overflow at min_scale with no budget left is the stuck-scale error. */
#ifndef LOOM_FP16_LOSS_SCALER_H
#define LOOM_FP16_LOSS_SCALER_H

#include <stdint.h>

typedef struct loom_loss_scaler {
  /* configuration */
  int dynamic;               /* 0: fixed scale (config loss_scale > 0) */
  double min_scale;          /* min_loss_scale */
  int64_t window;            /* loss_scale_window: clean iterations before growing */
  int hysteresis;            /* overflows tolerated before a cut (DeepSpeed's delayed_shift) */
  int consecutive_hysteresis;
  /* state (all of it goes into the checkpoint) */
  double scale;              /* current loss scale, a power of two under dynamic scaling */
  int64_t iter;              /* updates so far (DeepSpeed's cur_iter) */
  int64_t last_overflow_iter;/* iter of the last overflow, -1 before any */
  int cur_hysteresis;        /* overflows left before the next cut */
} loom_loss_scaler;

/* Dynamic (loss_scale == 0: start at 2^initial_scale_power) or fixed (loss_scale > 0). */
void loom_loss_scaler_init(loom_loss_scaler *s, double loss_scale, int initial_scale_power,
                           int64_t window, int hysteresis, double min_scale,
                           int consecutive_hysteresis);

/* Update after one step's backward. Returns 0, or -1 when an overflow finds the scale already
 * at min_scale with no hysteresis left (stuck: the state is left unchanged). *skip = overflow. */
int loom_loss_scaler_update(loom_loss_scaler *s, int overflow, int *skip);

#endif
