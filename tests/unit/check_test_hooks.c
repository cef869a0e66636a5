/* Check suite for the test and fault hooks (core/util/test_hooks.h): each knob parsed once,
 * as the tests that set it expect, and the fault point the checkpoint plugin calls through the
 * host table (loom_host_api_v1.fault_point, ABI 1.6). Every case runs in its own process (fork
 * mode, forced): it sets the environment, then reads the hooks for the first time. */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/runtime.h"
#include "util/test_hooks.h"
#include "support/check_suite.h"

static void clear_env(void) {
  static const char *vars[] = {"LOOM_FAULT", "LOOM_FAULT_ONCE", "LOOM_INJECT_INF",
                               "LOOM_DATA_TRACE", "LOOM_FAULT_CKPT_BEFORE_LATEST",
                               "LOOM_TEST_HOST_MINOR"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
}

START_TEST(nothing_set_is_nothing_armed) {
  clear_env();
  const loom_test_hooks *h = loom__test_hooks();
  ck_assert_int_eq(h->fault.kind, LOOM_FAULT_NONE);
  ck_assert(!h->inject_inf.armed);
  ck_assert_ptr_null(h->data_trace);
  ck_assert(!h->ckpt_before_latest);
  ck_assert_int_eq(h->host_minor, 0);
  for (int step = 0; step < 10; step++) {
    ck_assert_int_eq(loom__hook_fault(0, step), LOOM_FAULT_NONE);
    ck_assert(!loom__hook_inject_inf(0, step));
  }
  ck_assert_int_eq(loom__fault_point("ckpt.before_latest"), 0);
  ck_assert(loom__host_api()->struct_size == sizeof(loom_host_api_v1));
}
END_TEST

/* Read once: a change of the environment after the first read changes nothing. */
START_TEST(read_once) {
  clear_env();
  setenv("LOOM_FAULT", "1:3:error", 1);
  ck_assert_int_eq(loom__hook_fault(1, 3), LOOM_FAULT_ERROR);
  setenv("LOOM_FAULT", "1:3:exit", 1);
  setenv("LOOM_INJECT_INF", "0:1", 1);
  loom__test_hooks_init();
  ck_assert_int_eq(loom__hook_fault(1, 3), LOOM_FAULT_ERROR);
  ck_assert(!loom__hook_inject_inf(0, 1));
}
END_TEST

START_TEST(fault_rank_step_kind) {
  clear_env();
  setenv("LOOM_FAULT", "1:3:exit", 1);
  loom__test_hooks_init();
  ck_assert_int_eq(loom__hook_fault(1, 3), LOOM_FAULT_EXIT);
  ck_assert_int_eq(loom__hook_fault(0, 3), LOOM_FAULT_NONE);
  ck_assert_int_eq(loom__hook_fault(1, 2), LOOM_FAULT_NONE);
  ck_assert_str_eq(loom__test_hooks()->fault.text, "1:3:exit");
}
END_TEST

START_TEST(fault_kill_kind) {
  clear_env();
  setenv("LOOM_FAULT", "2:5:kill", 1);
  ck_assert_int_eq(loom__hook_fault(2, 5), LOOM_FAULT_KILL);
  ck_assert_int_eq(loom__hook_fault(2, 4), LOOM_FAULT_NONE);
}
END_TEST

/* LOOM_FAULT_ONCE=FILE: the first query that arms the fault creates FILE and fires; every later
 * one, in this process or another (a restarted job's), finds FILE and does not. */
START_TEST(fault_once_fires_once) {
  clear_env();
  char path[] = "/tmp/loom-check-once-XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  close(fd);
  unlink(path);
  setenv("LOOM_FAULT", "1:3:exit", 1);
  setenv("LOOM_FAULT_ONCE", path, 1);
  ck_assert_int_eq(loom__hook_fault(0, 3), LOOM_FAULT_NONE); /* another rank: no file made */
  ck_assert_int_ne(access(path, F_OK), 0);
  ck_assert_int_eq(loom__hook_fault(1, 3), LOOM_FAULT_EXIT);
  ck_assert_int_eq(access(path, F_OK), 0);
  ck_assert_int_eq(loom__hook_fault(1, 3), LOOM_FAULT_NONE);
  unlink(path);
}
END_TEST

START_TEST(fault_malformed_is_unset) {
  clear_env();
  setenv("LOOM_FAULT", "1:3", 1); /* no kind */
  ck_assert_int_eq(loom__test_hooks()->fault.kind, LOOM_FAULT_NONE);
}
END_TEST

/* "RANK:STEP[,STEP...]": the list ends at the first entry that is not a number. */
START_TEST(inject_inf_steps) {
  clear_env();
  setenv("LOOM_INJECT_INF", "1:3,5,x,7", 1);
  ck_assert(loom__hook_inject_inf(1, 3));
  ck_assert(loom__hook_inject_inf(1, 5));
  ck_assert(!loom__hook_inject_inf(1, 7)); /* after the malformed entry */
  ck_assert(!loom__hook_inject_inf(1, 4));
  ck_assert(!loom__hook_inject_inf(0, 3));
}
END_TEST

START_TEST(inject_inf_rank_never_wraps) {
  clear_env();
  setenv("LOOM_INJECT_INF", "4294967296:2", 1); /* 2^32: not rank 0 */
  ck_assert(!loom__hook_inject_inf(0, 2));
}
END_TEST

START_TEST(data_trace_empty_is_off) {
  clear_env();
  setenv("LOOM_DATA_TRACE", "", 1);
  ck_assert_ptr_null(loom__test_hooks()->data_trace);
}
END_TEST

START_TEST(host_minor_4_is_a_1_4_table) {
  clear_env();
  setenv("LOOM_TEST_HOST_MINOR", "4", 1);
  const loom_host_api_v1 *api = loom__host_api();
  ck_assert_int_eq(api->abi_minor, 4);
  ck_assert(!LOOM_HOST_HAS(api, grads_predivided));
  ck_assert(!LOOM_HOST_HAS(api, fault_point)); /* a 1.4 host has no fault points */
}
END_TEST

/* The host table's slot: nothing armed returns LOOM_OK, also for a point the host does not
 * know. */
START_TEST(fault_point_slot_unarmed) {
  clear_env();
  setenv("LOOM_FAULT_CKPT_BEFORE_LATEST", "1", 1);
  const loom_host_api_v1 *api = loom__host_api();
  ck_assert(LOOM_HOST_HAS(api, fault_point));
  ck_assert_int_eq(api->fault_point(NULL, "ckpt.somewhere_else"), LOOM_OK);
  ck_assert_int_eq(api->fault_point(NULL, "other.before_latest"), LOOM_OK);
}
END_TEST

/* Armed (any value, even empty, as resume_verify.sh sets it): the process ends with status 3
 * inside the call. */
START_TEST(fault_point_slot_armed_exits_3) {
  clear_env();
  setenv("LOOM_FAULT_CKPT_BEFORE_LATEST", "", 1);
  loom__host_api()->fault_point(NULL, "ckpt.before_latest");
  ck_abort_msg("the armed fault point returned");
}
END_TEST

int main(void) {
  const check_case cases[] = {
      {"nothing_set_is_nothing_armed", nothing_set_is_nothing_armed},
      {"read_once", read_once},
      {"fault_rank_step_kind", fault_rank_step_kind},
      {"fault_kill_kind", fault_kill_kind},
      {"fault_once_fires_once", fault_once_fires_once},
      {"fault_malformed_is_unset", fault_malformed_is_unset},
      {"inject_inf_steps", inject_inf_steps},
      {"inject_inf_rank_never_wraps", inject_inf_rank_never_wraps},
      {"data_trace_empty_is_off", data_trace_empty_is_off},
      {"host_minor_4_is_a_1_4_table", host_minor_4_is_a_1_4_table},
      {"fault_point_slot_unarmed", fault_point_slot_unarmed},
  };
  Suite *s = check_case_suite("test_hooks", CHECK_CASES(cases), NULL, NULL, 0);
  TCase *tc = tcase_create("fault_point_slot_armed_exits_3");
  tcase_add_exit_test(tc, fault_point_slot_armed_exits_3, 3);
  suite_add_tcase(s, tc);
  return check_run_suite(s, CK_FORK); /* each case reads the environment afresh */
}
