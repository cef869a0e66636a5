/* Unit tests for reading a DeepSpeed config (core/config/deepspeed.c, deepspeed_keys.c):
 * DeepSpeed's batch rule in each of its cases (deepspeed/runtime/config.py,
 * _set_batch_related_parameters then _batch_assertion), the merge into a loom config (the
 * DeepSpeed file's sections, loom's keys the file does not hold kept, conflicts refused naming
 * both values, DeepSpeed's defaults where neither file says), and the report's fates. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "config/config.h"
#include "support/check_suite.h"
#include "support/test_dir.h"

static loom_config cfg;
static char dir[256];

static void setup(void) { test_dir_make(dir, sizeof dir, "loom_ds"); }
static void teardown(void) {
  loom_config_free(&cfg);
  test_dir_remove(dir);
}

/* Write the DeepSpeed file ds.json, then load `loom_json` with its "deepspeed" key pointing
 * there. Returns loom_config_load_string's status. */
static int load(const char *ds_json, const char *loom_json, char *err, size_t errlen) {
  char *p = test_dir_path(dir, "ds.json");
  FILE *f = fopen(p, "w");
  ck_assert_ptr_nonnull(f);
  fputs(ds_json, f);
  fclose(f);
  char text[4096], ov[600];
  snprintf(text, sizeof text, "%s", loom_json);
  snprintf(ov, sizeof ov, "deepspeed=\"%s\"", p);
  const char *ovs[] = {ov};
  return loom_config_load_string(&cfg, "loom.json", text, ovs, 1, err, errlen);
}

START_TEST(test_batch_rule_cases) {
  /* given bits, dp, tb mb ga in, tb mb ga out: DeepSpeed's order of cases */
  static const struct { int given, dp; long long in[3], out[3]; } cases[] = {
      {LOOM_DS_TRAIN_BATCH | LOOM_DS_MICRO_BATCH | LOOM_DS_GRAD_ACCUM, 2, {16, 4, 2}, {16, 4, 2}},
      {LOOM_DS_TRAIN_BATCH | LOOM_DS_MICRO_BATCH, 2, {16, 4, 0}, {16, 4, 2}},
      {LOOM_DS_TRAIN_BATCH | LOOM_DS_GRAD_ACCUM, 2, {128, 0, 4}, {128, 16, 4}}, /* the lesson */
      {LOOM_DS_MICRO_BATCH | LOOM_DS_GRAD_ACCUM, 3, {0, 5, 2}, {30, 5, 2}},
      {LOOM_DS_TRAIN_BATCH, 4, {32, 0, 0}, {32, 8, 1}},
      {LOOM_DS_MICRO_BATCH, 4, {0, 3, 0}, {12, 3, 1}},
  };
  char err[512];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    long long tb = cases[i].in[0], mb = cases[i].in[1], ga = cases[i].in[2];
    ck_assert_msg(loom__deepspeed_batch("ds.json", cases[i].given, cases[i].dp, &tb, &mb, &ga,
                                        err, sizeof err) == 0, "case %zu: %s", i, err);
    ck_assert_msg(tb == cases[i].out[0] && mb == cases[i].out[1] && ga == cases[i].out[2],
                  "case %zu: %lld %lld %lld", i, tb, mb, ga);
  }
}
END_TEST

START_TEST(test_batch_rule_errors) {
  char err[512];
  long long tb = 128, mb = 0, ga = 4; /* 128 / 3 / 4 = 10: 10 x 4 x 3 = 120 */
  ck_assert_int_eq(loom__deepspeed_batch("ds.json", LOOM_DS_TRAIN_BATCH | LOOM_DS_GRAD_ACCUM, 3,
                                         &tb, &mb, &ga, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "ds.json: train_batch_size 128 != train_micro_batch_size_per_gpu 10 "
                            "x gradient_accumulation_steps 4 x data-parallel size 3") != NULL,
                "%s", err);
  tb = 2, mb = 0, ga = 4; /* micro 0: DeepSpeed's "has to be greater than 0" */
  ck_assert_int_eq(loom__deepspeed_batch("ds.json", LOOM_DS_TRAIN_BATCH | LOOM_DS_GRAD_ACCUM, 1,
                                         &tb, &mb, &ga, err, sizeof err), -1);
  ck_assert_ptr_nonnull(strstr(err, "train_micro_batch_size_per_gpu 0"));
}
END_TEST

START_TEST(test_merge_and_defaults) {
  char err[1024];
  int rc = load("{\"train_batch_size\": 128, \"gradient_accumulation_steps\": 4, "
                "\"fp16\": {\"enabled\": true, \"hysteresis\": 3}, \"zero_optimization\": "
                "{\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\"}}}",
                "{\"precision\": {\"plugin\": \"fp16\", \"loss_scale_window\": 7}}", err,
                sizeof err);
  ck_assert_msg(rc == 0, "%s", err);
  ck_assert_int_eq(cfg.n_parallel, 2);
  ck_assert_str_eq(cfg.parallel[0].name, "zero3");
  ck_assert_str_eq(cfg.parallel[1].name, "cpu_offload");
  ck_assert_str_eq(cfg.precision.name, "fp16");
  /* the DeepSpeed file's scaler key and the loom config's own both reach the plugin */
  ck_assert_int_eq(json_integer_value(json_object_get(cfg.precision.options, "hysteresis")), 3);
  ck_assert_int_eq(json_integer_value(json_object_get(cfg.precision.options,
                                                      "loss_scale_window")), 7);
  /* DeepSpeed's defaults: no clipping, constant lr */
  ck_assert(cfg.optimizer.grad_clip == 0);
  ck_assert_str_eq(cfg.lr_schedule.decay, "constant");
  ck_assert_int_eq(cfg.deepspeed.given, LOOM_DS_TRAIN_BATCH | LOOM_DS_GRAD_ACCUM);
  ck_assert_int_eq(loom_config_check_batch(&cfg, 2, err, sizeof err), 0);
  ck_assert_int_eq(cfg.train.micro_batch_size, 16);
  ck_assert_int_eq(cfg.train.global_batch_size, 128);
  ck_assert_int_eq(cfg.deepspeed.n_mapped, 6); /* 2 batch, fp16 x 2, stage, offload */
  ck_assert_int_eq(cfg.deepspeed.n_defaults, 2);
  ck_assert_ptr_null(json_object_get(cfg.root, "deepspeed")); /* translated, then removed */
}
END_TEST

START_TEST(test_conflict_names_both) {
  char err[1024];
  ck_assert_int_eq(load("{\"train_micro_batch_size_per_gpu\": 4}",
                        "{\"train\": {\"micro_batch_size\": 8}}", err, sizeof err), -1);
  ck_assert_msg(strstr(err, "ds.json: train_micro_batch_size_per_gpu (train.micro_batch_size = 4) "
                            "conflicts with loom.json: train.micro_batch_size = 8") != NULL,
                "%s", err);
  loom_config_free(&cfg);
  /* equal values (1 and 1.0) are no conflict */
  ck_assert_int_eq(load("{\"train_micro_batch_size_per_gpu\": 4, \"gradient_clipping\": 1}",
                        "{\"optimizer\": {\"grad_clip\": 1.0}}", err, sizeof err), 0);
}
END_TEST

START_TEST(test_refusals_counted) {
  char err[1024];
  ck_assert_int_eq(load("{\"train_micro_batch_size_per_gpu\": 4, \"bogus\": 1, "
                        "\"zero_optimization\": {\"stage\": 3, \"offload_param\": {\"device\": "
                        "\"nvme\"}}}",
                        "{}", err, sizeof err), -1);
  ck_assert_msg(strstr(err, "ds.json: bogus: refused: unknown key") != NULL, "%s", err);
  ck_assert_ptr_nonnull(strstr(err, "(and 1 more refused keys"));
  /* offload_param on the CPU device: accepted; on another device: refused */
  loom_config_free(&cfg);
  const char *z3 = "{\"train_micro_batch_size_per_gpu\": 4, \"zero_optimization\": {\"stage\": "
                   "3, \"offload_param\": {\"device\": \"cpu\"}}}";
  ck_assert_int_eq(load(z3, "{}", err, sizeof err), 0);
  ck_assert_int_eq(cfg.deepspeed.n_accepted, 1);
  loom_config_free(&cfg);
  ck_assert_int_eq(load(z3, "{\"device\": {\"type\": \"cuda\"}}", err, sizeof err), -1);
  ck_assert_ptr_nonnull(strstr(err, "offload_param.device = \"cpu\": refused: on a GPU device"));
}
END_TEST

static Suite *deepspeed_suite(void) {
  Suite *s = suite_create("deepspeed");
  check_add_tcase(s, "batch", CHECK_TESTS(test_batch_rule_cases, test_batch_rule_errors), NULL,
                  NULL, 0);
  check_add_tcase(s, "merge",
                  CHECK_TESTS(test_merge_and_defaults, test_conflict_names_both,
                              test_refusals_counted),
                  setup, teardown, 0);
  return s;
}

int main(void) { return check_run_suite(deepspeed_suite(), CK_FORK_GETENV); }
