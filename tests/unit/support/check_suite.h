/* The Check scaffolding every unit suite repeated: a suite built from a table of cases (one
 * TCase each, so a failing case is named and a crash ends only its own case), a TCase of
 * several tests in one call, and main's run of a suite. Linked into every unit test (tests/CMakeLists.txt). */
#ifndef LOOM_TEST_CHECK_SUITE_H
#define LOOM_TEST_CHECK_SUITE_H

#include <check.h>
#include <stddef.h>

typedef struct check_case {
  const char *name; /* the TCase's name, as Check reports it */
  const TTest *fn;  /* a START_TEST function */
} check_case;

/* Suite `name` with one TCase per cases[0 .. n) named after it, each with the checked fixture
 * (setup, teardown: either may be NULL) and, when timeout_s > 0, that timeout in seconds (else
 * Check's default: 4 s, or CK_DEFAULT_TIMEOUT). The suite is freed by the runner. */
Suite *check_case_suite(const char *name, const check_case *cases, size_t n, SFun setup,
                        SFun teardown, double timeout_s);
/* check_case_suite's cases and n from an array. */
#define CHECK_CASES(table) (table), sizeof(table) / sizeof((table)[0])

/* Adds to s a TCase `name` holding the tests of `tests` (a NULL-terminated list: CHECK_TESTS)
 * in order, with the checked fixture (setup, teardown: either may be NULL) and, when
 * timeout_s > 0, that timeout in seconds. Returns the TCase (for a second fixture). */
TCase *check_add_tcase(Suite *s, const char *name, const TTest *const *tests, SFun setup,
                       SFun teardown, double timeout_s);
/* check_add_tcase's list of START_TEST functions. */
#define CHECK_TESTS(...) ((const TTest *const[]){__VA_ARGS__, NULL})

/* Run `s` with CK_NORMAL output and free the runner. fork: CK_FORK (every test in its own
 * process, whatever the environment says), CK_NOFORK, or CK_FORK_GETENV (Check's default: the
 * CK_FORK environment variable decides). Returns main's exit status: EXIT_SUCCESS when no test
 * failed, else EXIT_FAILURE. */
int check_run_suite(Suite *s, enum fork_status fork);

#endif
