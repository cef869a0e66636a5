/* cuda.so's caching allocator and scratch buffers (cuda_alloc.c). */
#ifndef LOOM_CUDA_ALLOC_H
#define LOOM_CUDA_ALLOC_H

#include <stddef.h>

#include "cuda_internal.h"

/* Round a request up to the size the pool reserves: 512 B granules below 1 MiB, 2 MiB above
 * (PyTorch's caching allocator's classes), so recurring sizes reuse the same blocks. */
size_t cuda_pool_round(size_t bytes);
/* A block of at least `bytes` from the cache (best fit within 2x) or cudaMalloc; NULL when the
 * GPU is out of memory even after the cache was released. Not zeroed. */
void *cuda_pool_alloc(cuda_ctx *c, size_t bytes);
/* Return a live block to the cache. Safe without a stream sync: every use of the block was
 * enqueued on ctx->stream, and so is every later use by whoever gets it next. */
void cuda_pool_free(cuda_ctx *c, void *ptr);
/* cudaFree every cached block (after synchronising the stream). */
void cuda_pool_release_cached(cuda_ctx *c);
/* cudaFree everything, live blocks too (destroy). */
void cuda_pool_destroy(cuda_ctx *c);

/* Scratch buffer `which` of at least `bytes`, grown through the pool when too small (the old
 * contents are not kept). NULL when out of memory. */
void *cuda_scratch_get(cuda_ctx *c, int which, size_t bytes);
#endif
