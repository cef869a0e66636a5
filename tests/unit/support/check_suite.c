/* The unit suites' Check scaffolding (check_suite.h). */
#include "check_suite.h"

#include <stdlib.h>

TCase *check_add_tcase(Suite *s, const char *name, const TTest *const *tests, SFun setup,
                       SFun teardown, double timeout_s) {
  TCase *tc = tcase_create(name);
  if (setup || teardown) tcase_add_checked_fixture(tc, setup, teardown);
  if (timeout_s > 0) tcase_set_timeout(tc, timeout_s);
  for (; *tests; tests++) tcase_add_test(tc, *tests);
  suite_add_tcase(s, tc);
  return tc;
}

Suite *check_case_suite(const char *name, const check_case *cases, size_t n, SFun setup,
                        SFun teardown, double timeout_s) {
  Suite *s = suite_create(name);
  for (size_t i = 0; i < n; i++)
    check_add_tcase(s, cases[i].name, CHECK_TESTS(cases[i].fn), setup, teardown, timeout_s);
  return s;
}

int check_run_suite(Suite *s, enum fork_status fork) {
  SRunner *sr = srunner_create(s);
  srunner_set_fork_status(sr, fork);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
