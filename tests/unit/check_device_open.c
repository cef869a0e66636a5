/* Check suite for the device side of the runtime (core/runtime/device_open.c, core/device):
 *  - the rank's place on its node: Open MPI's variables win over Slurm's, Slurm's are read
 *    (with its "2(x3)" form of SLURM_NTASKS_PER_NODE), a size missing or smaller than the rank
 *    is raised to rank + 1, and with neither (and no comm plugin) a rank is alone: 0 of 1;
 *  - loom__dev_owns knows device memory from host memory (what the host API's bounce of a
 *    plugin's host-memory control traffic relies on), inner pointers and the end included;
 *  - loom__dev_open_ex on a 1.4 table calls create_ex and reports its reason. */
#include <check.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "runtime/device_open.h"
#include "support/check_suite.h"

static void clear_env(void) {
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  unsetenv("SLURM_LOCALID");
  unsetenv("SLURM_NTASKS_PER_NODE");
}

START_TEST(test_local_rank) {
  int r, n;
  const char *src;
  clear_env();
  loom__local_rank(NULL, &r, &n, &src);
  ck_assert_int_eq(r, 0);
  ck_assert_int_eq(n, 1);
  ck_assert_str_eq(src, "no launcher");
  setenv("SLURM_LOCALID", "3", 1);
  setenv("SLURM_NTASKS_PER_NODE", "4(x2)", 1);
  loom__local_rank(NULL, &r, &n, &src);
  ck_assert_int_eq(r, 3);
  ck_assert_int_eq(n, 4);
  ck_assert_str_eq(src, "Slurm");
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
  loom__local_rank(NULL, &r, &n, &src);
  ck_assert_int_eq(r, 1);
  ck_assert_int_eq(n, 2);
  ck_assert_str_eq(src, "Open MPI");
  unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE"); /* size unknown: at least rank + 1 */
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "5", 1);
  loom__local_rank(NULL, &r, &n, &src);
  ck_assert_int_eq(r, 5);
  ck_assert_int_eq(n, 6);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "x", 1); /* malformed: the next launcher's */
  loom__local_rank(NULL, &r, &n, &src);
  ck_assert_str_eq(src, "Slurm");
  clear_env();
}
END_TEST

START_TEST(test_dev_owns) {
  loom_dev dev;
  char err[256];
  ck_assert_int_eq(loom__dev_open(&dev, loom__cpu_device(), "{}", 0, err, sizeof err), LOOM_OK);
  char *a = loom__dev_alloc(&dev, 100, LOOM_MEM_OTHER);
  char *b = loom__dev_alloc(&dev, 8, LOOM_MEM_COMM);
  int host = 0;
  ck_assert(loom__dev_owns(&dev, a));
  ck_assert(loom__dev_owns(&dev, a + 99));
  ck_assert(!loom__dev_owns(&dev, a + 100) || a + 100 == b); /* one past the end: not a's */
  ck_assert(loom__dev_owns(&dev, b + 4));
  ck_assert(!loom__dev_owns(&dev, &host));
  loom__dev_free(&dev, a);
  ck_assert(!loom__dev_owns(&dev, a) || (a >= b && a < b + 8));
  loom__dev_close(&dev);
}
END_TEST

/* A 1.4 table whose create_ex refuses with a reason, and whose create must not be called. */
static int create_called;
static int plain_create(const char *o, int r, void **ctx) {
  (void)o, (void)r, (void)ctx;
  create_called = 1;
  return LOOM_OK;
}
static int refusing_create_ex(const char *o, int r, int n, void **ctx, char *err, size_t len) {
  (void)o, (void)ctx;
  snprintf(err, len, "no GPU for local rank %d of %d", r, n);
  return LOOM_UNSUPPORTED;
}

START_TEST(test_create_ex_reason) {
  loom_device_v1 t = *loom__cpu_device();
  t.hdr.name = "refuser";
  t.create = plain_create;
  t.create_ex = refusing_create_ex;
  loom_dev dev;
  char err[256];
  ck_assert_int_eq(loom__dev_open_ex(&dev, &t, "{}", 2, 4, err, sizeof err), LOOM_UNSUPPORTED);
  ck_assert_str_eq(err, "create failed: no GPU for local rank 2 of 4");
  ck_assert_int_eq(create_called, 0);
  /* a table built against 1.3 (struct_size before create_ex): create, the status text */
  t.hdr.struct_size = (uint32_t)offsetof(loom_device_v1, create_ex);
  ck_assert_int_eq(loom__dev_open_ex(&dev, &t, "{}", 0, 1, err, sizeof err), LOOM_OK);
  ck_assert_int_eq(create_called, 1);
  loom__dev_close(&dev);
}
END_TEST

static Suite *device_open_suite(void) {
  Suite *s = suite_create("device_open");
  check_add_tcase(s, "core", CHECK_TESTS(test_local_rank, test_dev_owns, test_create_ex_reason),
                  NULL, NULL, 0);
  return s;
}

int main(void) {
  return check_run_suite(device_open_suite(), CK_FORK_GETENV);
}
