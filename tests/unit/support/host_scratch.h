/* Host scratch memory per test: zeroed blocks that the fixture's teardown frees all at once, so
 * a test allocates without freeing. Linked into every unit test (tests/CMakeLists.txt). */
#ifndef LOOM_TEST_HOST_SCRATCH_H
#define LOOM_TEST_HOST_SCRATCH_H

#include <stddef.h>

/* A zeroed block of `bytes` (at least 1), live until host_scratch_free_all; fails the running
 * Check test when out of memory or when 128 blocks are already live. */
void *host_scratch(size_t bytes);

/* Frees every block host_scratch handed out (a teardown's job; also fine when there are none). */
void host_scratch_free_all(void);

#endif
