/* Check suite for fp16.so's loss scaler (plugins/precision/fp16/loss_scaler.c, compiled in):
 * DeepSpeed's DynamicLossScaler rules on hand-worked sequences — the hysteresis budget, the cut
 * and its floor at min_loss_scale, growth after loss_scale_window clean iterations counted from
 * the last overflow, consecutive_hysteresis, a fixed scale, and the stuck-scale error.
 * (integration.mixed_precision checks the same rules end to end against a re-implementation
 * of DeepSpeed's Python.) */
#include <check.h>
#include <stdlib.h>

#include "../../plugins/precision/fp16/loss_scaler.h"
#include "support/check_suite.h"

/* Feed `pattern` ('o' overflow, '.' clean); returns the first update's error index or -1. */
static int feed(loom_loss_scaler *s, const char *pattern, int *skips) {
  *skips = 0;
  for (int i = 0; pattern[i]; i++) {
    int skip;
    if (loom_loss_scaler_update(s, pattern[i] == 'o', &skip) != 0) return i;
    ck_assert_int_eq(skip, pattern[i] == 'o');
    *skips += skip;
  }
  return -1;
}

START_TEST(hysteresis_then_cut) {
  loom_loss_scaler s;
  loom_loss_scaler_init(&s, 0, 16, 1000, 2, 1, 0);
  int k;
  ck_assert_int_eq(feed(&s, "o", &k), -1);
  ck_assert(s.scale == 65536.0 && s.cur_hysteresis == 1); /* absorbed by the budget */
  ck_assert_int_eq(feed(&s, "..o", &k), -1);               /* clean steps do not refill it */
  ck_assert(s.scale == 32768.0);
  ck_assert_int_eq(feed(&s, "o", &k), -1);                 /* budget still 1: cut again */
  ck_assert(s.scale == 16384.0);
}
END_TEST

START_TEST(growth_after_window) {
  loom_loss_scaler s;
  loom_loss_scaler_init(&s, 0, 4, 3, 1, 1, 0);
  int k;
  ck_assert_int_eq(feed(&s, "..", &k), -1);
  ck_assert(s.scale == 16.0);
  ck_assert_int_eq(feed(&s, ".", &k), -1); /* iter 2: (2 - (-1)) % 3 == 0 */
  ck_assert(s.scale == 32.0);
  ck_assert_int_eq(feed(&s, "o", &k), -1); /* iter 3 overflows: 16 */
  ck_assert(s.scale == 16.0 && s.last_overflow_iter == 3);
  ck_assert_int_eq(feed(&s, "..", &k), -1);
  ck_assert(s.scale == 16.0);
  ck_assert_int_eq(feed(&s, ".", &k), -1); /* iter 6: 3 clean since the overflow */
  ck_assert(s.scale == 32.0);
}
END_TEST

START_TEST(floor_and_stuck) {
  loom_loss_scaler s;
  loom_loss_scaler_init(&s, 0, 1, 1000, 1, 1.5, 0);
  int k;
  ck_assert_int_eq(feed(&s, "o", &k), -1);
  ck_assert(s.scale == 1.5); /* halved to 1, floored at min_loss_scale */
  loom_loss_scaler before = s;
  ck_assert_int_eq(feed(&s, ".o", &k), 1); /* the overflow at the floor is the error */
  ck_assert(s.scale == before.scale);
}
END_TEST

START_TEST(consecutive_hysteresis) {
  loom_loss_scaler s;
  loom_loss_scaler_init(&s, 0, 10, 1000, 2, 1, 1);
  int k;
  ck_assert_int_eq(feed(&s, "o.o.o", &k), -1); /* refilled by each clean step: never cut */
  ck_assert(s.scale == 1024.0 && k == 3);
  ck_assert_int_eq(feed(&s, ".oo", &k), -1); /* refilled, then two in a row: cut once */
  ck_assert(s.scale == 512.0);
}
END_TEST

START_TEST(fixed_scale) {
  loom_loss_scaler s;
  loom_loss_scaler_init(&s, 128, 16, 2, 1, 1, 0);
  int k;
  ck_assert_int_eq(feed(&s, "oooo....o", &k), -1); /* skips, never adapts, never stuck */
  ck_assert(s.scale == 128.0 && k == 5);
}
END_TEST

int main(void) {
  Suite *su = suite_create("loss_scaler");
  check_add_tcase(su, "deepspeed_rules",
                  CHECK_TESTS(hysteresis_then_cut, growth_after_window, floor_and_stuck,
                              consecutive_hysteresis, fixed_scale),
                  NULL, NULL, 0);
  return check_run_suite(su, CK_FORK);
}
