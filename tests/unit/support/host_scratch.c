#include "host_scratch.h"

#include <check.h>
#include <stdlib.h>

#define MAX_BLOCKS 128
static void *blocks[MAX_BLOCKS];
static int n_blocks;

void *host_scratch(size_t bytes) {
  ck_assert_int_lt(n_blocks, MAX_BLOCKS);
  void *p = calloc(1, bytes ? bytes : 1);
  ck_assert_ptr_nonnull(p);
  blocks[n_blocks++] = p;
  return p;
}

void host_scratch_free_all(void) {
  for (int i = 0; i < n_blocks; i++) free(blocks[i]);
  n_blocks = 0;
}

double host_urand(uint64_t *state) {
  uint64_t x = *state;
  x ^= x << 13, x ^= x >> 7, x ^= x << 17;
  *state = x;
  return (double)(x >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

float *host_scratch_uniform(uint64_t *state, size_t n, double scale) {
  float *x = host_scratch(n * sizeof *x);
  for (size_t i = 0; i < n; i++) x[i] = (float)(scale * host_urand(state));
  return x;
}
