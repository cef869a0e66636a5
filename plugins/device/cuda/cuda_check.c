/* cuda.so: a failed CUDA or cuBLAS call is printed once and remembered in the context
 * (cuda_check.h); the allocator, the GEMMs and the device table all report through it. */
#include <stdio.h>

#include "cuda_check.h"

int cuda_check(cuda_ctx *c, cudaError_t rc, const char *what) {
  if (rc == cudaSuccess) return 0;
  if (!c->failed) {
    snprintf(c->last_error, sizeof c->last_error, "%s: %s (%s)", what, cudaGetErrorString(rc),
             cudaGetErrorName(rc));
    fprintf(stderr, "cuda.so: GPU %d: %s; later kernels of this device are skipped\n",
            c->device, c->last_error);
    c->failed = 1;
  }
  return 1;
}

int cuda_check_blas(cuda_ctx *c, cublasStatus_t rc, const char *what) {
  if (rc == CUBLAS_STATUS_SUCCESS) return 0;
  if (!c->failed) {
    snprintf(c->last_error, sizeof c->last_error, "%s: %s (%s)", what, cublasGetStatusString(rc),
             cublasGetStatusName(rc));
    fprintf(stderr, "cuda.so: GPU %d: %s; later kernels of this device are skipped\n",
            c->device, c->last_error);
    c->failed = 1;
  }
  return 1;
}
