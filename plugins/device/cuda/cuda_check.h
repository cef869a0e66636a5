/* cuda.so: failed CUDA and cuBLAS calls, recorded in the context (cuda_check.c). */
#ifndef LOOM_CUDA_CHECK_H
#define LOOM_CUDA_CHECK_H

#include "cuda_internal.h"

/* Record a failed CUDA runtime call (first one wins) and print it once to stderr: the kernel
 * slots return void, so a failure can only be reported and remembered. Returns 0 when ok. */
int cuda_check(cuda_ctx *c, cudaError_t rc, const char *what);
int cuda_check_blas(cuda_ctx *c, cublasStatus_t rc, const char *what);
#endif
