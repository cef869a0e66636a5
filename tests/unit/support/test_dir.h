/* A scratch directory per test: made fresh under /tmp, removed with everything in it. Linked
 * into every unit test (tests/CMakeLists.txt). */
#ifndef LOOM_TEST_DIR_H
#define LOOM_TEST_DIR_H

#include <stddef.h>

/* mkdtemp("/tmp/PREFIX.XXXXXX") into dir (size bytes); fails the running Check test if it
 * cannot be made. */
void test_dir_make(char *dir, size_t size, const char *prefix);

/* rm -rf dir (links are removed, never followed). */
void test_dir_remove(const char *dir);

#endif
