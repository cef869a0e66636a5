/* Unit tests for the learning-rate schedule (core/train/lr_schedule.c) at its edges: the
 * horizon a finished run is extended with (lr_schedule.decay_steps = its train.steps) must keep
 * every later step at min_lr, also when that run had no cosine phase (train.steps <=
 * warmup_steps + 1), and the config must accept the decay_steps the resume message advises. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "config/config.h"
#include "train/lr_schedule.h"
#include "support/check_suite.h"

static const double LR = 1e-3, MIN_LR = 1e-4;

/* Exact comparisons: past the horizon the value is min_lr + 0.5 * (1 + cos(pi)) * (lr - min_lr)
 * = min_lr + 0 * (...), computed exactly in double. */
START_TEST(past_the_horizon_is_min_lr) {
  /* horizon, warmup: a cosine of several steps, of one step, and none at all */
  static const int cases[][2] = {{20, 2}, {10, 0}, {3, 2}, {2, 2}, {1, 1}, {5, 5}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int horizon = cases[i][0], warmup = cases[i][1];
    for (int step = horizon + 1; step <= 3 * horizon + 2; step++) {
      double lr = loom_lr_at(step, horizon, warmup, LR, MIN_LR, 1);
      ck_assert_msg(lr == MIN_LR, "horizon %d warmup %d: step %d runs at %.9g, expected min_lr %g",
                    horizon, warmup, step, lr, MIN_LR);
    }
  }
}
END_TEST

START_TEST(warmup_and_cosine_ends) {
  /* the warm-up's last step reaches lr; the cosine's first step runs at lr, its last at min_lr */
  ck_assert(loom_lr_at(2, 20, 2, LR, MIN_LR, 1) == LR);
  ck_assert(loom_lr_at(3, 20, 2, LR, MIN_LR, 1) == LR);
  ck_assert(loom_lr_at(20, 20, 2, LR, MIN_LR, 1) == MIN_LR);
  ck_assert(loom_lr_at(1, 20, 2, LR, MIN_LR, 1) == LR / 2);
  /* a one-step cosine (steps = warmup + 1) runs that step at lr */
  ck_assert(loom_lr_at(3, 3, 2, LR, MIN_LR, 1) == LR);
  /* constant: lr after the warm-up, whatever the horizon */
  ck_assert(loom_lr_at(50, 20, 2, LR, MIN_LR, 0) == LR);
}
END_TEST

/* A run of train.steps == warmup_steps is extended with decay_steps = its steps: accepted. */
START_TEST(decay_steps_equal_to_warmup_is_accepted) {
  static const char *json =
      "{\"train\": {\"steps\": 2}, \"lr_schedule\": {\"warmup_steps\": 2, \"decay_steps\": 2}}";
  loom_config cfg;
  char err[1024] = "";
  ck_assert_msg(loom_config_load_string(&cfg, "c.json", json, NULL, 0, err, sizeof err) == 0,
                "%s", err);
  ck_assert_int_eq(cfg.lr_schedule.decay_steps, 2);
  loom_config_free(&cfg);
  static const char *below =
      "{\"train\": {\"steps\": 4}, \"lr_schedule\": {\"warmup_steps\": 3, \"decay_steps\": 2}}";
  ck_assert(loom_config_load_string(&cfg, "c.json", below, NULL, 0, err, sizeof err) != 0);
  ck_assert_msg(strstr(err, "c.json: lr_schedule.decay_steps: expected 0 (= train.steps) or >= "
                            "warmup_steps (3), got 2") != NULL, "%s", err);
}
END_TEST

/* DeepSpeed's schedulers at their ends (lr_schedule.type): step 1 runs at iteration -1, step k
 * at k - 2; the warm-up's last iteration W - 1, the peak from W; WarmupDecayLR at 0 from
 * total_num_steps on; WarmupCosineLR at 0 on step 1 and at cos_min_ratio x lr at its end. */
START_TEST(deepspeed_schedulers) {
  loom_lr_ds w = {.type = LOOM_LR_WARMUP, .log_warmup = 0, .warmup_num_steps = 4,
                  .warmup_min_lr = 1e-5, .warmup_max_lr = 1e-3};
  ck_assert(loom_lr_ds_at(&w, LR, 1) == 1e-5);           /* it -1: min */
  ck_assert(loom_lr_ds_at(&w, LR, 2) == 1e-5);           /* it 0: gamma 0 */
  ck_assert(loom_lr_ds_at(&w, LR, 4) == 1e-5 + (1e-3 - 1e-5) * 0.5);
  ck_assert(loom_lr_ds_at(&w, LR, 6) == 1e-3);           /* it 4 = W: the peak */
  ck_assert(loom_lr_ds_at(&w, LR, 1000) == 1e-3);
  w.log_warmup = 1; /* log(it + 1) / log(W): log(2)/log(4) = 0.5 at it 1 */
  ck_assert(fabs(loom_lr_ds_at(&w, LR, 3) - (1e-5 + (1e-3 - 1e-5) * 0.5)) < 1e-18);
  loom_lr_ds d = w;
  d.type = LOOM_LR_WARMUP_DECAY, d.total_num_steps = 10, d.warmup_min_lr = 0;
  ck_assert(loom_lr_ds_at(&d, LR, 6) == 1e-3);           /* it 4: (10 - 4) / (10 - 4) */
  ck_assert(loom_lr_ds_at(&d, LR, 9) == 1e-3 * 3 / 6);   /* it 7 */
  ck_assert(loom_lr_ds_at(&d, LR, 12) == 0);             /* it 10 = total */
  ck_assert(loom_lr_ds_at(&d, LR, 50) == 0);             /* never below 0 */
  loom_lr_ds c = {.type = LOOM_LR_WARMUP_COSINE, .log_warmup = 0, .warmup_num_steps = 2,
                  .total_num_steps = 6, .warmup_min_ratio = 0.1, .cos_min_ratio = 0.01};
  ck_assert(loom_lr_ds_at(&c, LR, 1) == 0);              /* DeepSpeed's get_lr before start */
  ck_assert(loom_lr_ds_at(&c, LR, 2) == LR * 0.1);       /* it 0: warmup_min_ratio */
  /* it 5: real_last 4 of real_total 4, cos(pi) = -1: the floor */
  ck_assert(fabs(loom_lr_ds_at(&c, LR, 7) - LR * 0.01) < 1e-18);
}
END_TEST

int main(void) {
  Suite *s = suite_create("lr_schedule");
  check_add_tcase(s, "edges",
                  CHECK_TESTS(past_the_horizon_is_min_lr, warmup_and_cosine_ends,
                              decay_steps_equal_to_warmup_is_accepted, deepspeed_schedulers),
                  NULL, NULL, 0);
  return check_run_suite(s, CK_FORK_GETENV);
}
