/* Host scratch memory per test: zeroed blocks that the fixture's teardown frees all at once, so
 * a test allocates without freeing. Linked into every unit test (tests/CMakeLists.txt). */
#ifndef LOOM_TEST_HOST_SCRATCH_H
#define LOOM_TEST_HOST_SCRATCH_H

#include <stddef.h>
#include <stdint.h>

/* A zeroed block of `bytes` (at least 1), live until host_scratch_free_all; fails the running
 * Check test when out of memory or when 128 blocks are already live. */
void *host_scratch(size_t bytes);

/* Frees every block host_scratch handed out (a teardown's job; also fine when there are none). */
void host_scratch_free_all(void);

/* The next value in [-1, 1) of the xorshift64 stream *state (nonzero), 53 random bits. */
double host_urand(uint64_t *state);
/* A host_scratch block of n floats drawn uniformly from [-scale, scale) by host_urand. */
float *host_scratch_uniform(uint64_t *state, size_t n, double scale);

#endif
