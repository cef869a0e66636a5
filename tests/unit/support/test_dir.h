/* A scratch directory per test: made fresh under /tmp, removed with everything in it. Linked
 * into every unit test (tests/CMakeLists.txt). */
#ifndef LOOM_TEST_DIR_H
#define LOOM_TEST_DIR_H

#include <stddef.h>

/* mkdtemp("/tmp/PREFIX.XXXXXX") into dir (size bytes); fails the running Check test if it
 * cannot be made. */
void test_dir_make(char *dir, size_t size, const char *prefix);

/* "dir/name" in one of 4 static buffers used in turn (512 bytes each, cut beyond): up to 4
 * such paths can be live at once, e.g. a rename's source and target. */
char *test_dir_path(const char *dir, const char *name);

/* rm -rf dir (links are removed, never followed). */
void test_dir_remove(const char *dir);

#endif
