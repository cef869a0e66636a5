/* cuda.so's caching allocator: cudaMalloc'd blocks are never given back to the driver while the
 * context lives (unless cudaMalloc fails: then the cache is released and the call retried), so
 * a training step that frees and re-allocates the same sizes as the step before calls cudaMalloc
 * zero times. cudaMalloc and cudaFree synchronise the whole device; a step must not pay that.
 *
 * Sizes are rounded to classes (cuda_pool_round) and a request takes the smallest cached block
 * that fits and is at most twice its size (no splitting: the waste is bounded by 2x and blocks
 * stay whole, so there is no fragmentation bookkeeping). Reuse without a stream sync is safe
 * because a context has one stream: the previous owner's kernels are ordered before the new
 * owner's. The host's accounting (core/device/device.c) counts the bytes asked for per
 * category; what sits in this cache on top of it is pool.bytes_cached (documented in
 * docs/devices.md, "The CUDA device and NCCL"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_alloc.h"
#include "cuda_check.h"

#define SMALL_GRANULE ((size_t)512)
#define LARGE_GRANULE ((size_t)2 << 20)
#define SMALL_LIMIT ((size_t)1 << 20)

size_t cuda_pool_round(size_t bytes) {
  if (bytes == 0) bytes = 1;
  size_t g = bytes < SMALL_LIMIT ? SMALL_GRANULE : LARGE_GRANULE;
  size_t r = (bytes + g - 1) / g * g;
  return r < bytes ? 0 : r; /* 0: overflow */
}

static int push_block(cuda_block **arr, size_t *n, size_t *cap, cuda_block b) {
  if (*n == *cap) {
    size_t ncap = *cap ? *cap * 2 : 64;
    cuda_block *na = realloc(*arr, ncap * sizeof *na);
    if (!na) return -1;
    *arr = na;
    *cap = ncap;
  }
  (*arr)[(*n)++] = b;
  return 0;
}

/* insert keeping `cached` sorted by size, ascending */
static int cache_insert(cuda_pool *p, cuda_block b) {
  if (push_block(&p->cached, &p->n_cached, &p->cap_cached, b) != 0) return -1;
  size_t i = p->n_cached - 1;
  while (i > 0 && p->cached[i - 1].size > b.size) {
    p->cached[i] = p->cached[i - 1];
    i--;
  }
  p->cached[i] = b;
  p->bytes_cached += b.size;
  return 0;
}

void *cuda_pool_alloc(cuda_ctx *c, size_t bytes) {
  cuda_pool *p = &c->pool;
  size_t want = cuda_pool_round(bytes);
  if (!want) return NULL;
  /* make room in `live` first, so a failed realloc cannot lose a block */
  if (p->n_live == p->cap_live) {
    size_t ncap = p->cap_live ? p->cap_live * 2 : 64;
    cuda_block *na = realloc(p->live, ncap * sizeof *na);
    if (!na) return NULL;
    p->live = na;
    p->cap_live = ncap;
  }
  for (size_t i = 0; i < p->n_cached; i++) {
    cuda_block b = p->cached[i];
    if (b.size < want) continue;
    if (b.size / 2 > want) break; /* sorted: every later block is bigger still */
    memmove(p->cached + i, p->cached + i + 1, (p->n_cached - i - 1) * sizeof *p->cached);
    p->n_cached--;
    p->bytes_cached -= b.size;
    p->live[p->n_live++] = b;
    return b.ptr;
  }
  void *ptr = NULL;
  cudaError_t rc = cudaMalloc(&ptr, want);
  if (rc == cudaErrorMemoryAllocation && p->n_cached) {
    (void)cudaGetLastError(); /* clear the sticky-free OOM before retrying */
    cuda_pool_release_cached(c);
    rc = cudaMalloc(&ptr, want);
  }
  if (rc != cudaSuccess) {
    if (rc == cudaErrorMemoryAllocation) (void)cudaGetLastError(); /* OOM: report NULL only */
    else cuda_check(c, rc, "cudaMalloc");
    return NULL;
  }
  p->n_device_mallocs++;
  p->bytes_reserved += want;
  p->live[p->n_live++] = (cuda_block){ptr, want};
  return ptr;
}

void cuda_pool_free(cuda_ctx *c, void *ptr) {
  cuda_pool *p = &c->pool;
  if (!ptr) return;
  for (size_t i = 0; i < p->n_live; i++) {
    if (p->live[i].ptr != ptr) continue;
    cuda_block b = p->live[i];
    p->live[i] = p->live[--p->n_live];
    if (cache_insert(p, b) != 0) { /* no host memory for the cache entry: give it back */
      cuda_check(c, cudaStreamSynchronize(c->stream), "cudaStreamSynchronize");
      cuda_check(c, cudaFree(b.ptr), "cudaFree");
      p->bytes_reserved -= b.size;
    }
    return;
  }
  fprintf(stderr, "cuda.so: free of a pointer this device did not allocate (%p)\n", ptr);
}

void cuda_pool_release_cached(cuda_ctx *c) {
  cuda_pool *p = &c->pool;
  if (!p->n_cached) return;
  /* a cached block may still be read by work enqueued before it was freed */
  cuda_check(c, cudaStreamSynchronize(c->stream), "cudaStreamSynchronize");
  for (size_t i = 0; i < p->n_cached; i++) {
    cuda_check(c, cudaFree(p->cached[i].ptr), "cudaFree");
    p->bytes_reserved -= p->cached[i].size;
  }
  p->n_cached = 0;
  p->bytes_cached = 0;
}

void cuda_pool_destroy(cuda_ctx *c) {
  cuda_pool *p = &c->pool;
  cuda_pool_release_cached(c);
  for (size_t i = 0; i < p->n_live; i++) cuda_check(c, cudaFree(p->live[i].ptr), "cudaFree");
  free(p->live);
  free(p->cached);
  memset(p, 0, sizeof *p);
}

void *cuda_scratch_get(cuda_ctx *c, int which, size_t bytes) {
  cuda_scratch *s = &c->scratch[which];
  if (s->ptr && s->bytes >= bytes) return s->ptr;
  cuda_pool_free(c, s->ptr);
  s->ptr = NULL;
  s->bytes = 0;
  size_t want = cuda_pool_round(bytes);
  if (!want) return NULL;
  void *p = cuda_pool_alloc(c, want);
  if (!p) return NULL;
  s->ptr = p;
  s->bytes = want;
  return p;
}
