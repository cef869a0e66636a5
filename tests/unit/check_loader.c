/* Unit tests for core/runtime/loader.c and the role checks of core/runtime/plugins.c, through
 * the real loader (dlopen) only: the fixture plugins of tests/fixtures/ (each wrong in one way)
 * and the real plugins of the build tree. Every failure must come back as -1 with ONE line that
 * names the plugin, the file and the specific reason — never a crash.
 *
 * Check's fork mode is kept on purpose: a fixture that crashed the loader fails only its test,
 * and setenv/chdir in a test do not leak into the next one. */
#include "runtime/loader.h"
#include "runtime/plugins.h"

#include <check.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "support/check_suite.h"

#define FIXTURES LOOM_TEST_BUILD_DIR "/tests/fixtures"
#define PLUGINS LOOM_TEST_BUILD_DIR "/lib/loom/plugins"

static loom_plugin plug;
static char err[2048];

static void setup(void) {
  memset(&plug, 0, sizeof plug);
  err[0] = '\0';
  unsetenv("LOOM_PLUGIN_PATH");
}

static void teardown(void) { loom__plugin_close(&plug); }

/* err must be a single line holding every needle. */
static void assert_one_line(const char *const *needles) {
  ck_assert_msg(err[0] != '\0', "empty error message");
  ck_assert_msg(strchr(err, '\n') == NULL, "error spans several lines: %s", err);
  for (; *needles; needles++)
    ck_assert_msg(strstr(err, *needles) != NULL, "'%s' not in: %s", *needles, err);
}

/* ---- failures: each fixture by path and by bare name ---------------------------------------- */

typedef struct fail_case {
  const char *fixture;    /* file name without .so */
  loom_plugin_kind kind;  /* kind asked for */
  const char *reason;     /* substring the message must hold */
} fail_case;

static const fail_case FAIL_CASES[] = {
  {"not_a_plugin", LOOM_KIND_PARALLEL, "cannot load"},
  {"no_symbol", LOOM_KIND_PARALLEL, "entry symbol 'loom_plugin_v1' not found"},
  {"v2_only", LOOM_KIND_PARALLEL, "newer loom ABI"},
  {"bad_abi", LOOM_KIND_PARALLEL, "built against loom ABI 2."},
  {"bad_abi", 0, "built against loom ABI 2."},
  {"wrong_kind", LOOM_KIND_PARALLEL, "is a precision plugin"},
  {"missing_callback", LOOM_KIND_CHECKPOINT, "required callback 'save'"},
  {"missing_callback", 0, "required callback 'save'"},
};

START_TEST(test_fail_by_path) {
  const fail_case *c = &FAIL_CASES[_i];
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s.so", FIXTURES, c->fixture);
  ck_assert_int_eq(loom__plugin_open(&plug, path, c->kind, err, sizeof err), -1);
  assert_one_line((const char *const[]){"plugin '", path, c->reason, NULL});
  ck_assert_ptr_null(plug.handle);
}
END_TEST

START_TEST(test_fail_by_name) {
  const fail_case *c = &FAIL_CASES[_i];
  setenv("LOOM_PLUGIN_PATH", FIXTURES, 1);
  char quoted[128], file[PATH_MAX];
  snprintf(quoted, sizeof quoted, "plugin '%s'", c->fixture);
  snprintf(file, sizeof file, "/%s.so", c->fixture);
  ck_assert_int_eq(loom__plugin_open(&plug, c->fixture, c->kind, err, sizeof err), -1);
  assert_one_line((const char *const[]){quoted, "tests/fixtures", file, c->reason, NULL});
  ck_assert_ptr_null(plug.handle);
}
END_TEST

START_TEST(test_not_found_by_name) {
  setenv("LOOM_PLUGIN_PATH", FIXTURES ":/nonexistent/dir", 1);
  ck_assert_int_eq(loom__plugin_open(&plug, "zero7", LOOM_KIND_PARALLEL, err, sizeof err), -1);
  /* the message lists where it looked, starting with LOOM_PLUGIN_PATH */
  assert_one_line((const char *const[]){"plugin 'zero7'", "not found", "zero7.so",
                                        "(" FIXTURES ":/nonexistent/dir:", "LOOM_PLUGIN_PATH",
                                        NULL});
}
END_TEST

START_TEST(test_not_found_by_path) {
  ck_assert_int_eq(loom__plugin_open(&plug, "/nonexistent/dir/ddp.so", LOOM_KIND_PARALLEL, err,
                                     sizeof err), -1);
  assert_one_line((const char *const[]){"plugin '/nonexistent/dir/ddp.so'",
                                        "No such file or directory", NULL});
  ck_assert_int_eq(loom__plugin_open(&plug, "", LOOM_KIND_PARALLEL, err, sizeof err), -1);
  assert_one_line((const char *const[]){"empty plugin name", NULL});
}
END_TEST

/* A failed open leaves nothing behind: the message is cut, not overflowed, and close is safe. */
START_TEST(test_fail_small_buffer) {
  char small[24];
  memset(small, 'x', sizeof small);
  ck_assert_int_eq(loom__plugin_open(&plug, FIXTURES "/bad_abi.so", 0, small, sizeof small),
                   -1);
  ck_assert_uint_eq(strlen(small), sizeof small - 1);
  loom__plugin_close(&plug);
  loom__plugin_close(&plug);
}
END_TEST

/* ---- the real plugins, by name from the build tree ------------------------------------------ */

typedef struct real_case {
  const char *name;
  loom_plugin_kind kind;
  uint64_t caps_all;   /* bits that must be set */
  uint64_t caps_none;  /* bits that must be clear */
  const char *static_fn; /* a function of the plugin that must NOT be exported */
} real_case;

static const real_case REAL_CASES[] = {
  {"ddp", LOOM_KIND_PARALLEL, LOOM_PAR_CAP_GRAD_SYNC | LOOM_PAR_CAP_AXIS_DP,
   LOOM_PAR_CAP_OPTIMIZER | LOOM_PAR_CAP_SCHEDULE | LOOM_PAR_CAP_AXIS_TP | LOOM_PAR_CAP_AXIS_PP,
   "ddp_create"},
  {"fp32", LOOM_KIND_PRECISION, 0, ~(uint64_t)0, "fp32_create"},
  {"checkpoint", LOOM_KIND_CHECKPOINT, LOOM_CKPT_CAP_RESHARD, 0, "ckpt_create"},
  {"mpi", LOOM_KIND_COMM, LOOM_COMM_CAP_HOST_MEMORY, 0, NULL},
};

START_TEST(test_real_plugins) {
  const real_case *c = &REAL_CASES[_i];
  setenv("LOOM_PLUGIN_PATH", PLUGINS, 1);
  ck_assert_msg(loom__plugin_open(&plug, c->name, c->kind, err, sizeof err) == 0, "%s", err);
  ck_assert_ptr_nonnull(plug.handle);
  ck_assert_int_eq(plug.kind, c->kind);
  ck_assert_str_eq(plug.name, c->name);
  ck_assert_str_eq(plug.u.hdr.name, c->name);
  ck_assert_int_eq(plug.u.hdr.abi_major, LOOM_ABI_MAJOR);
  ck_assert_ptr_nonnull(plug.u.hdr.version);
  ck_assert_ptr_nonnull(plug.u.hdr.description);
  ck_assert_msg((plug.u.hdr.caps & c->caps_all) == c->caps_all, "caps 0x%llx",
                (unsigned long long)plug.u.hdr.caps);
  ck_assert_msg((plug.u.hdr.caps & c->caps_none) == 0, "caps 0x%llx",
                (unsigned long long)plug.u.hdr.caps);
  char file[64];
  snprintf(file, sizeof file, "/%s.so", c->name);
  ck_assert_msg(strstr(plug.path, "lib/loom/plugins") && strstr(plug.path, file), "%s",
                plug.path);
  /* hidden visibility: the entry symbol is exported, the plugin's functions are not */
  ck_assert_ptr_nonnull(dlsym(plug.handle, "loom_plugin_v1"));
  if (c->static_fn) ck_assert_ptr_null(dlsym(plug.handle, c->static_fn));
  /* any kind (0) opens it too; the wrong kind does not */
  loom_plugin any;
  ck_assert_msg(loom__plugin_open(&any, c->name, 0, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(any.kind, c->kind);
  loom__plugin_close(&any);
  loom_plugin_kind wrong = c->kind == LOOM_KIND_PARALLEL ? LOOM_KIND_PRECISION
                                                         : LOOM_KIND_PARALLEL;
  ck_assert_int_eq(loom__plugin_open(&any, c->name, wrong, err, sizeof err), -1);
  char expect[64];
  snprintf(expect, sizeof expect, "is a %s plugin", loom__kind_name(c->kind));
  assert_one_line((const char *const[]){expect, NULL});
}
END_TEST

/* The required callbacks of a kind are exactly what the real plugins provide. */
START_TEST(test_real_parallel_slots) {
  setenv("LOOM_PLUGIN_PATH", PLUGINS, 1);
  ck_assert_msg(loom__plugin_open(&plug, "ddp", LOOM_KIND_PARALLEL, err, sizeof err) == 0, "%s",
                err);
  const loom_parallel_v1 *p = &plug.u.parallel;
  ck_assert_uint_eq(p->hdr.struct_size, sizeof(loom_parallel_v1));
  ck_assert_ptr_nonnull(p->create);
  ck_assert_ptr_nonnull(p->destroy);
  ck_assert_ptr_nonnull(p->post_backward);
  ck_assert_ptr_nonnull(p->end_backward);
  ck_assert_ptr_null(p->optimizer_step); /* ddp leaves the step to the host */
}
END_TEST

/* ---- struct_size: zero-fill of what an older plugin lacks, min copy of a newer one ---------- */

START_TEST(test_old_minor_zero_filled) {
  ck_assert_msg(loom__plugin_open(&plug, FIXTURES "/old_minor.so", LOOM_KIND_PARALLEL, err,
                                  sizeof err) == 0, "%s", err);
  size_t old = offsetof(loom_parallel_v1, end_backward) + sizeof(void *);
  ck_assert_uint_eq(plug.u.hdr.struct_size, old);
  /* the .so holds non-NULL poison right after its struct_size: the test would be vacuous if not */
  const loom_parallel_v1 *raw = dlsym(plug.handle, "loom_plugin_v1");
  ck_assert_ptr_nonnull(raw);
  ck_assert_ptr_nonnull(raw->optimizer_step);
  ck_assert_ptr_nonnull(raw->state_items);
  const loom_parallel_v1 *p = &plug.u.parallel;
  ck_assert_ptr_nonnull(p->create);
  ck_assert_ptr_nonnull(p->destroy);
  ck_assert_ptr_nonnull(p->end_backward);
  ck_assert_ptr_null(p->setup);
  ck_assert_ptr_null(p->grad_norm_sq);
  ck_assert_ptr_null(p->optimizer_step);
  ck_assert_ptr_null(p->end_step);
  ck_assert_ptr_null(p->state_items);
  const unsigned char *bytes = (const unsigned char *)&plug.u;
  for (size_t i = old; i < sizeof plug.u; i++)
    ck_assert_msg(bytes[i] == 0, "byte %zu of the host copy is not zero", i);
}
END_TEST

START_TEST(test_new_minor_min_copy) {
  ck_assert_msg(loom__plugin_open(&plug, FIXTURES "/new_minor.so", LOOM_KIND_PARALLEL, err,
                                  sizeof err) == 0, "%s", err);
  ck_assert_int_eq(plug.u.hdr.abi_major, LOOM_ABI_MAJOR);
  ck_assert_int_eq(plug.u.hdr.abi_minor, 14);
  ck_assert_int_gt(plug.u.hdr.abi_minor, LOOM_ABI_MINOR); /* newer than this host */
  ck_assert_uint_gt(plug.u.hdr.struct_size, sizeof(loom_parallel_v1));
  ck_assert_ptr_nonnull(plug.u.parallel.begin_step);
  /* nothing past the host's own struct was copied (the union is larger than the parallel
   * struct: the plugin's extra slots must not show up there) */
  const unsigned char *bytes = (const unsigned char *)&plug.u;
  for (size_t i = sizeof(loom_parallel_v1); i < sizeof plug.u; i++)
    ck_assert_msg(bytes[i] == 0, "byte %zu past the parallel struct was copied", i);
}
END_TEST

/* ---- search path --------------------------------------------------------------------------- */

START_TEST(test_search_path_env_first) {
  setenv("LOOM_PLUGIN_PATH", "/a/one:/b/two::/c/three:", 1);
  char dirs[LOOM_MAX_SEARCH_DIRS][PATH_MAX];
  int n = loom__plugin_search_path(dirs, LOOM_MAX_SEARCH_DIRS);
  ck_assert_int_eq(n, 5); /* 3 from the environment (empty entries skipped) + exe dir + install */
  ck_assert_str_eq(dirs[0], "/a/one");
  ck_assert_str_eq(dirs[1], "/b/two");
  ck_assert_str_eq(dirs[2], "/c/three");
  const char *tail = "/../lib/loom/plugins";
  ck_assert_msg(strlen(dirs[3]) > strlen(tail) &&
                    !strcmp(dirs[3] + strlen(dirs[3]) - strlen(tail), tail), "%s", dirs[3]);
  ck_assert_str_eq(dirs[4], LOOM_PLUGIN_INSTALL_DIR);

  unsetenv("LOOM_PLUGIN_PATH");
  char none[LOOM_MAX_SEARCH_DIRS][PATH_MAX];
  ck_assert_int_eq(loom__plugin_search_path(none, LOOM_MAX_SEARCH_DIRS), 2);
  ck_assert_str_eq(none[0], dirs[3]);
}
END_TEST

START_TEST(test_search_path_bounded) {
  char env[4096] = "";
  for (int i = 0; i < 3 * LOOM_MAX_SEARCH_DIRS; i++)
    snprintf(env + strlen(env), sizeof env - strlen(env), "%s/d%d", i ? ":" : "", i);
  setenv("LOOM_PLUGIN_PATH", env, 1);
  char dirs[LOOM_MAX_SEARCH_DIRS][PATH_MAX];
  ck_assert_int_eq(loom__plugin_search_path(dirs, LOOM_MAX_SEARCH_DIRS), LOOM_MAX_SEARCH_DIRS);
  ck_assert_str_eq(dirs[LOOM_MAX_SEARCH_DIRS - 1], "/d15");
  char two[2][PATH_MAX];
  ck_assert_int_eq(loom__plugin_search_path(two, 2), 2);
}
END_TEST

/* Copy src to dir/name (dir created). */
static void copy_file(const char *src, const char *dir, const char *name) {
  char cmd[3 * PATH_MAX];
  snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s' '%s/%s'", dir, src, dir, name);
  ck_assert_int_eq(system(cmd), 0);
}

/* The same bare name in two LOOM_PLUGIN_PATH dirs: the first dir wins, and the env dirs win
 * over the build tree's own plugin directory. */
START_TEST(test_search_path_order) {
  char tmp[] = "/tmp/check_loader_XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(tmp));
  char d1[PATH_MAX], d2[PATH_MAX];
  snprintf(d1, sizeof d1, "%s/first", tmp);
  snprintf(d2, sizeof d2, "%s/second", tmp);
  copy_file(FIXTURES "/failing_create.so", d1, "dup.so");
  copy_file(FIXTURES "/grad_sync_twin.so", d2, "dup.so");
  copy_file(FIXTURES "/old_minor.so", d2, "ddp.so"); /* shadows the real ddp */

  char env[3 * PATH_MAX];
  snprintf(env, sizeof env, "%s:%s:%s", d1, d2, PLUGINS);
  setenv("LOOM_PLUGIN_PATH", env, 1);
  ck_assert_msg(loom__plugin_open(&plug, "dup", LOOM_KIND_PARALLEL, err, sizeof err) == 0, "%s",
                err);
  ck_assert_str_eq(plug.u.hdr.name, "failing_create");
  loom__plugin_close(&plug);
  ck_assert_msg(loom__plugin_open(&plug, "ddp", LOOM_KIND_PARALLEL, err, sizeof err) == 0, "%s",
                err);
  ck_assert_str_eq(plug.u.hdr.name, "old_minor");
  loom__plugin_close(&plug);

  snprintf(env, sizeof env, "%s:%s", d2, d1);
  setenv("LOOM_PLUGIN_PATH", env, 1);
  ck_assert_msg(loom__plugin_open(&plug, "dup", LOOM_KIND_PARALLEL, err, sizeof err) == 0, "%s",
                err);
  ck_assert_str_eq(plug.u.hdr.name, "grad_sync_twin");
  loom__plugin_close(&plug);

  char cmd[PATH_MAX + 16];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* "x.so" without a slash is a path relative to the working directory, as for "./x.so": it must
 * reach dlopen as a path (with a '/'), or dlopen would search the system library path instead. */
START_TEST(test_relative_so_name) {
  ck_assert_int_eq(chdir(FIXTURES), 0);
  ck_assert_msg(loom__plugin_open(&plug, "grad_sync_twin.so", LOOM_KIND_PARALLEL, err,
                                  sizeof err) == 0, "%s", err);
  ck_assert_str_eq(plug.u.hdr.name, "grad_sync_twin");
  ck_assert_msg(strchr(plug.path, '/') != NULL, "dlopen got a bare file name: %s", plug.path);
  loom__plugin_close(&plug);
  ck_assert_msg(loom__plugin_open(&plug, "./grad_sync_twin.so", LOOM_KIND_PARALLEL, err,
                                  sizeof err) == 0, "%s", err);
}
END_TEST

/* ---- create(): the error a plugin sets reaches the host, and the host's one line ---------- */

START_TEST(test_create_error_via_host) {
  ck_assert_msg(loom__plugin_open(&plug, FIXTURES "/failing_create.so", LOOM_KIND_PARALLEL, err,
                                  sizeof err) == 0, "%s", err);
  loom_host h;
  loom__host_init(&h, NULL, "failing_create (parallel[0])", "t.json", "parallel[0]", NULL);
  void *ctx = (void *)&h;
  int rc = plug.u.parallel.create(loom__host_api(), &h, &h.opts, &ctx);
  ck_assert_int_eq(rc, LOOM_INVALID_CONFIG);
  ck_assert_ptr_null(ctx);
  ck_assert_str_eq(h.error, "fixture: create refuses");
}
END_TEST

/* A hand-built config (no JSON): parallel plugins by name or path, precision fp32. */
static loom_config cfg;
static loom_runtime rt;

static void config_with(const char *const *parallel, int n, const char *precision) {
  memset(&cfg, 0, sizeof cfg);
  memset(&rt, 0, sizeof rt);
  rt.cfg = &cfg;
  snprintf(cfg.path, sizeof cfg.path, "roles.json");
  cfg.n_parallel = n;
  for (int i = 0; i < n; i++) {
    snprintf(cfg.parallel[i].name, sizeof cfg.parallel[i].name, "%s", parallel[i]);
    snprintf(cfg.parallel[i].json_path, sizeof cfg.parallel[i].json_path, "parallel[%d]", i);
  }
  snprintf(cfg.precision.name, sizeof cfg.precision.name, "%s", precision);
  snprintf(cfg.precision.json_path, sizeof cfg.precision.json_path, "precision");
  snprintf(cfg.comm.name, sizeof cfg.comm.name, "mpi");
  snprintf(cfg.comm.json_path, sizeof cfg.comm.json_path, "comm");
  setenv("LOOM_PLUGIN_PATH", PLUGINS ":" FIXTURES, 1);
}

static void runtime_teardown(void) {
  loom__plugins_destroy(&rt);
  loom__plugin_close(&plug);
}

START_TEST(test_create_error_via_runtime) {
  config_with((const char *const[]){"failing_create"}, 1, "fp32");
  ck_assert_msg(loom__plugins_open(&rt, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(loom__plugins_create(&rt, err, sizeof err), -1);
  assert_one_line((const char *const[]){"plugin failing_create (parallel[0])",
                                        "/tests/fixtures/failing_create.so]", "create failed",
                                        "invalid config", "fixture: create refuses", NULL});
}
END_TEST

/* ---- roles ---------------------------------------------------------------------------------- */

START_TEST(test_roles_grad_sync_conflict) {
  config_with((const char *const[]){"ddp", "grad_sync_twin"}, 2, "fp32");
  ck_assert_int_eq(loom__plugins_open(&rt, err, sizeof err), -1);
  assert_one_line((const char *const[]){"roles.json", "parallel[1]", "'grad_sync_twin'",
                                        "owns data-parallel gradient sync", "'ddp'",
                                        "parallel[0]", NULL});
}
END_TEST

START_TEST(test_roles_conflict_either_order) {
  char twin[PATH_MAX];
  snprintf(twin, sizeof twin, "%s/grad_sync_twin.so", FIXTURES);
  config_with((const char *const[]){twin, "ddp"}, 2, "fp32");
  ck_assert_int_eq(loom__plugins_open(&rt, err, sizeof err), -1);
  assert_one_line((const char *const[]){"parallel[1]", "plugin 'ddp'",
                                        "owns data-parallel gradient sync", twin, NULL});
}
END_TEST

START_TEST(test_roles_compose) {
  config_with((const char *const[]){"ddp", "old_minor", "new_minor"}, 3, "fp32");
  ck_assert_msg(loom__plugins_open(&rt, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(rt.n_parallel, 3);
  ck_assert_int_eq(rt.grad_sync_owner, 0);
  ck_assert_int_eq(rt.optimizer_owner, -1);
  ck_assert_int_eq(rt.precision.kind, LOOM_KIND_PRECISION);
}
END_TEST

START_TEST(test_roles_unsupported_caps) {
  config_with((const char *const[]){"ddp", "future_pp"}, 2, "fp32");
  ck_assert_int_eq(loom__plugins_open(&rt, err, sizeof err), -1);
  assert_one_line((const char *const[]){"roles.json", "parallel[1]", "'future_pp'",
                                        "does not know", NULL});
}
END_TEST

START_TEST(test_roles_wrong_kind_in_slot) {
  config_with((const char *const[]){"ddp"}, 1, "ddp");
  ck_assert_int_eq(loom__plugins_open(&rt, err, sizeof err), -1);
  assert_one_line((const char *const[]){"roles.json: precision: plugin 'ddp'",
                                        "is a parallel plugin",
                                        "a precision plugin was expected", NULL});
}
END_TEST

/* ABI 1.5: the loss gradient is predivided by dp exactly when the gradient-sync owner sets
 * LOOM_PAR_GRAD_PREDIVIDED and dp > 1; a plugin without the field (zero-filled by the loader,
 * as an older minor's) keeps the old contract, and the host table offers the question. */
START_TEST(test_roles_predivide) {
  ck_assert(LOOM_HOST_HAS(loom__host_api(), grads_predivided));
  static const char *const sums_only[] = {"ddp", "zero1", "zero2", "zero3"};
  for (size_t i = 0; i < sizeof sums_only / sizeof *sums_only; i++) {
    config_with(&sums_only[i], 1, "fp32");
    ck_assert_msg(loom__plugins_open(&rt, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(rt.parallel[0].u.parallel.grad_sync & LOOM_PAR_GRAD_PREDIVIDED,
                      LOOM_PAR_GRAD_PREDIVIDED);
    rt.mesh.dp = 2;
    ck_assert_msg(loom__grads_predivided(&rt), "%s: dp 2 not predivided", sums_only[i]);
    rt.mesh.dp = 1; /* nothing to average */
    ck_assert(!loom__grads_predivided(&rt));
    runtime_teardown();
  }
  config_with((const char *const[]){"grad_sync_twin"}, 1, "fp32"); /* averages itself */
  ck_assert_msg(loom__plugins_open(&rt, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(rt.grad_sync_owner, 0);
  rt.mesh.dp = 2;
  ck_assert(!loom__grads_predivided(&rt));
}
END_TEST

static Suite *loader_suite(void) {
  Suite *s = suite_create("loader");
  TCase *tc = tcase_create("failures");
  tcase_add_checked_fixture(tc, setup, teardown);
  int n_fail = (int)(sizeof FAIL_CASES / sizeof *FAIL_CASES);
  tcase_add_loop_test(tc, test_fail_by_path, 0, n_fail);
  tcase_add_loop_test(tc, test_fail_by_name, 0, n_fail);
  tcase_add_test(tc, test_not_found_by_name);
  tcase_add_test(tc, test_not_found_by_path);
  tcase_add_test(tc, test_fail_small_buffer);
  suite_add_tcase(s, tc);

  tc = tcase_create("real_plugins");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_loop_test(tc, test_real_plugins, 0, (int)(sizeof REAL_CASES / sizeof *REAL_CASES));
  tcase_add_test(tc, test_real_parallel_slots);
  suite_add_tcase(s, tc);

  tc = tcase_create("struct_size");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_old_minor_zero_filled);
  tcase_add_test(tc, test_new_minor_min_copy);
  suite_add_tcase(s, tc);

  tc = tcase_create("search_path");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_search_path_env_first);
  tcase_add_test(tc, test_search_path_bounded);
  tcase_add_test(tc, test_search_path_order);
  tcase_add_test(tc, test_relative_so_name);
  suite_add_tcase(s, tc);

  tc = tcase_create("create");
  tcase_add_checked_fixture(tc, setup, runtime_teardown);
  tcase_add_test(tc, test_create_error_via_host);
  tcase_add_test(tc, test_create_error_via_runtime);
  suite_add_tcase(s, tc);

  tc = tcase_create("roles");
  tcase_add_checked_fixture(tc, setup, runtime_teardown);
  tcase_add_test(tc, test_roles_grad_sync_conflict);
  tcase_add_test(tc, test_roles_conflict_either_order);
  tcase_add_test(tc, test_roles_compose);
  tcase_add_test(tc, test_roles_unsupported_caps);
  tcase_add_test(tc, test_roles_wrong_kind_in_slot);
  tcase_add_test(tc, test_roles_predivide);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return check_run_suite(loader_suite(), CK_FORK_GETENV);
}
