#define _XOPEN_SOURCE 700
#include "test_dir.h"

#include <check.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>

void test_dir_make(char *dir, size_t size, const char *prefix) {
  snprintf(dir, size, "/tmp/%s.XXXXXX", prefix);
  ck_assert_ptr_nonnull(mkdtemp(dir));
}

char *test_dir_path(const char *dir, const char *name) {
  static char buf[4][512];
  static int k;
  char *p = buf[k++ & 3];
  snprintf(p, sizeof buf[0], "%s/%s", dir, name);
  return p;
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

void test_dir_remove(const char *dir) { nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS); }
