/* cuda.so's caching allocator (plugins/device/cuda/cuda_alloc.c), its policy tested on the host:
 * its objects are linked in unchanged and the few CUDA runtime calls it makes (cudaMalloc,
 * cudaFree, cudaStreamSynchronize, cudaGetLastError) are defined below on host memory, with a
 * capacity so out-of-memory can be provoked. What is proved: a steady state of allocations
 * (the same sizes freed and allocated again, step after step) calls cudaMalloc only in the first
 * step; a request reuses the smallest cached block that fits and never one more than twice its
 * size; sizes are rounded to the documented classes; an out-of-memory cudaMalloc releases the
 * cache and retries; scratch buffers only grow; destroy gives every byte back.
 *
 * Built without a CUDA toolkit there are no CUDA headers: the test exits 77 (skipped). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef LOOM_TEST_HAVE_CUDA
#include <string.h>

#include "cuda_alloc.h" /* linked: cuda.so's objects (cuda_alloc_obj) */
#include "cuda_check.h"

/* ---- the CUDA runtime, on host memory ---- */
static size_t fake_capacity = (size_t)1 << 40; /* bytes cudaMalloc may hand out in total */
static size_t fake_in_use, fake_mallocs, fake_frees, fake_syncs;

cudaError_t cudaMalloc(void **ptr, size_t bytes) {
  if (fake_in_use + bytes > fake_capacity) return cudaErrorMemoryAllocation;
  /* a real allocation of 1 byte stands for the block: the test never touches the memory */
  size_t *p = malloc(sizeof(size_t));
  if (!p) return cudaErrorMemoryAllocation;
  *p = bytes;
  fake_in_use += bytes;
  fake_mallocs++;
  *ptr = p;
  return cudaSuccess;
}
cudaError_t cudaFree(void *ptr) {
  if (!ptr) return cudaSuccess;
  fake_in_use -= *(size_t *)ptr;
  fake_frees++;
  free(ptr);
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  (void)s;
  fake_syncs++;
  return cudaSuccess;
}
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
int cuda_check(cuda_ctx *c, cudaError_t rc, const char *what) {
  ck_assert_msg(rc == cudaSuccess, "%s failed (%d)", what, (int)rc);
  (void)c;
  return 0;
}

#include "support/check_suite.h"

static cuda_ctx ctx;

static void reset(void) {
  memset(&ctx, 0, sizeof ctx);
  fake_capacity = (size_t)1 << 40;
  fake_in_use = fake_mallocs = fake_frees = fake_syncs = 0;
}

START_TEST(size_classes) {
  ck_assert_uint_eq(cuda_pool_round(0), 512);
  ck_assert_uint_eq(cuda_pool_round(1), 512);
  ck_assert_uint_eq(cuda_pool_round(512), 512);
  ck_assert_uint_eq(cuda_pool_round(513), 1024);
  ck_assert_uint_eq(cuda_pool_round((1 << 20) - 1), 1 << 20);
  ck_assert_uint_eq(cuda_pool_round(1 << 20), 2 << 20);
  ck_assert_uint_eq(cuda_pool_round((2 << 20) + 1), 4 << 20);
  ck_assert_uint_eq(cuda_pool_round((size_t)-1), 0); /* overflow: refused */
}
END_TEST

/* One "training step": the activation-like buffers of a small GPT, allocated then freed. */
static void one_step(void *ptrs[], const size_t sizes[], int n) {
  for (int i = 0; i < n; i++) {
    ptrs[i] = cuda_pool_alloc(&ctx, sizes[i]);
    ck_assert_ptr_nonnull(ptrs[i]);
  }
  for (int i = n - 1; i >= 0; i -= 2) cuda_pool_free(&ctx, ptrs[i]); /* some order... */
  for (int i = n - 2; i >= 0; i -= 2) cuda_pool_free(&ctx, ptrs[i]); /* ...not LIFO */
}

START_TEST(steady_state_never_mallocs) {
  reset();
  const size_t sizes[] = {3 << 20, 4096, 12 << 20, 100, 3 << 20, 777777, 50 << 20, 4096, 1 << 20};
  enum { N = sizeof sizes / sizeof sizes[0] };
  void *ptrs[N];
  one_step(ptrs, sizes, N);
  size_t after_first = ctx.pool.n_device_mallocs;
  ck_assert_uint_eq(after_first, N); /* nothing cached yet: one cudaMalloc each */
  size_t reserved = ctx.pool.bytes_reserved;
  for (int step = 0; step < 20; step++) one_step(ptrs, sizes, N);
  ck_assert_uint_eq(ctx.pool.n_device_mallocs, after_first);
  ck_assert_uint_eq(fake_mallocs, after_first);
  ck_assert_uint_eq(fake_frees, 0);
  ck_assert_uint_eq(fake_syncs, 0); /* reuse needs no synchronisation */
  ck_assert_uint_eq(ctx.pool.bytes_reserved, reserved);
  ck_assert_uint_eq(ctx.pool.bytes_cached, reserved); /* all free again */
  cuda_pool_destroy(&ctx);
  ck_assert_uint_eq(fake_in_use, 0);
}
END_TEST

START_TEST(best_fit_within_twice) {
  reset();
  void *small = cuda_pool_alloc(&ctx, 4 << 20), *big = cuda_pool_alloc(&ctx, 16 << 20);
  cuda_pool_free(&ctx, big);
  cuda_pool_free(&ctx, small);
  /* 3 MiB -> 4 MiB class: takes the 4 MiB block, not the 16 MiB one */
  void *p = cuda_pool_alloc(&ctx, 3 << 20);
  ck_assert_ptr_eq(p, small);
  /* 6 MiB: the 16 MiB block is more than twice that, so a new block */
  size_t before = ctx.pool.n_device_mallocs;
  void *q = cuda_pool_alloc(&ctx, 6 << 20);
  ck_assert_ptr_ne(q, big);
  ck_assert_uint_eq(ctx.pool.n_device_mallocs, before + 1);
  /* 10 MiB: the 16 MiB block fits within twice */
  void *r = cuda_pool_alloc(&ctx, 10 << 20);
  ck_assert_ptr_eq(r, big);
  ck_assert_uint_eq(ctx.pool.n_cached, 0);
  cuda_pool_destroy(&ctx);
  ck_assert_uint_eq(fake_in_use, 0);
}
END_TEST

START_TEST(out_of_memory_releases_the_cache) {
  reset();
  fake_capacity = 64 << 20;
  void *a = cuda_pool_alloc(&ctx, 40 << 20);
  ck_assert_ptr_nonnull(a);
  cuda_pool_free(&ctx, a); /* cached: 40 MiB still reserved */
  /* 18 MiB: the cached 40 MiB block is more than twice that, and 18 + 40 fit the 64 MiB: a
   * second cudaMalloc, the cache untouched */
  void *b = cuda_pool_alloc(&ctx, 18 << 20);
  ck_assert_ptr_nonnull(b);
  ck_assert_uint_eq(ctx.pool.n_cached, 1);
  cuda_pool_free(&ctx, b);
  /* 50 MiB: no cached block fits, cudaMalloc fails (58 MiB in use), the cache is released
   * (after a sync) and the retry succeeds */
  size_t syncs = fake_syncs;
  void *c = cuda_pool_alloc(&ctx, 50 << 20);
  ck_assert_ptr_nonnull(c);
  ck_assert_uint_gt(fake_syncs, syncs);
  ck_assert_uint_eq(ctx.pool.n_cached, 0);
  ck_assert_uint_eq(ctx.pool.bytes_reserved, 50 << 20);
  /* and a request that cannot fit at all is NULL, not a crash */
  ck_assert_ptr_null(cuda_pool_alloc(&ctx, 100 << 20));
  cuda_pool_destroy(&ctx);
  ck_assert_uint_eq(fake_in_use, 0);
}
END_TEST

START_TEST(scratch_only_grows) {
  reset();
  void *s1 = cuda_scratch_get(&ctx, SCRATCH_GEMM_A, 1000);
  ck_assert_ptr_eq(cuda_scratch_get(&ctx, SCRATCH_GEMM_A, 512), s1);
  ck_assert_ptr_eq(cuda_scratch_get(&ctx, SCRATCH_GEMM_A, 1024), s1); /* same class */
  void *s2 = cuda_scratch_get(&ctx, SCRATCH_GEMM_A, 5 << 20);
  ck_assert_ptr_nonnull(s2);
  ck_assert_uint_ge(ctx.scratch[SCRATCH_GEMM_A].bytes, 5 << 20);
  ck_assert_ptr_eq(cuda_scratch_get(&ctx, SCRATCH_GEMM_A, 1000), s2);
  ck_assert_uint_eq(ctx.pool.n_live, 1); /* the small one went back to the cache */
  cuda_pool_destroy(&ctx);
  ck_assert_uint_eq(fake_in_use, 0);
}
END_TEST
#endif /* LOOM_TEST_HAVE_CUDA */

int main(void) {
#ifndef LOOM_TEST_HAVE_CUDA
  printf("check_cuda_pool: skipped: built without a CUDA toolkit (no CUDA headers)\n");
  return 77;
#else
  Suite *s = suite_create("cuda_pool");
  TCase *tc = tcase_create("pool");
  tcase_add_test(tc, size_classes);
  tcase_add_test(tc, steady_state_never_mallocs);
  tcase_add_test(tc, best_fit_within_twice);
  tcase_add_test(tc, out_of_memory_releases_the_cache);
  tcase_add_test(tc, scratch_only_grows);
  suite_add_tcase(s, tc);
  return check_run_suite(s, CK_FORK_GETENV);
#endif
}
