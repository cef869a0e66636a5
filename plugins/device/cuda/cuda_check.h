/* cuda.so: failed CUDA and cuBLAS calls, recorded in the context (cuda_check.c). */
#ifndef LOOM_CUDA_CHECK_H
#define LOOM_CUDA_CHECK_H

#include "cuda_internal.h"

/* Record a failed CUDA runtime call (first one wins) and print it once to stderr: the kernel
 * slots return void, so a failure can only be reported and remembered (and handed to the host
 * through the device table's error slot, ABI 1.10). Returns 0 when ok. */
int cuda_check(cuda_ctx *c, cudaError_t rc, const char *what);
int cuda_check_blas(cuda_ctx *c, cublasStatus_t rc, const char *what);

/* Kernel launches report through the calling thread's last error (cudaGetLastError), which
 * any earlier runtime call on this thread may have left set without anything having failed:
 * cudaEventQuery's cudaErrorNotReady when a comm plugin polls an event (nccl.so), a cudaMalloc
 * that was retried, a library's own probing. So the last error is cleared right before a launch
 * (cuda_launch_begin) and what it holds right after (cuda_launched) is that launch's own
 * result. A sticky error (an earlier kernel faulted: cudaErrorIllegalAddress,
 * cudaErrorLaunchFailure, ...) cannot be hidden by the clear: the context is unusable, and the
 * launch itself fails with it again. cuda_launched returns 0 when the launch went through. */
void cuda_launch_begin(void);
int cuda_launched(cuda_ctx *c, const char *what);
#define CUDA_LAUNCH(c, what, launch) \
  do {                               \
    cuda_launch_begin();             \
    launch;                          \
    cuda_launched((c), (what));      \
  } while (0)

/* The device table's error slot (ABI 1.10): NULL while the context is healthy, else the first
 * failure ("GPU 0: cudaMemcpyAsync (to host): an illegal memory access was encountered
 * (cudaErrorIllegalAddress)"), owned by the context and the same until destroy. */
const char *cuda_error(void *ctx);
#endif
