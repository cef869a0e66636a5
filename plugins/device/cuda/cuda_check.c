/* cuda.so: a failed CUDA or cuBLAS call is printed once and remembered in the context
 * (cuda_check.h); the allocator, the GEMMs and the device table all report through it. */
#include <stdio.h>

#include "cuda_check.h"

static void record(cuda_ctx *c, const char *what, const char *why, const char *name) {
  snprintf(c->last_error, sizeof c->last_error, "%s: %s (%s)", what, why, name);
  snprintf(c->report, sizeof c->report, "GPU %d: %s", c->device, c->last_error);
  fprintf(stderr, "cuda.so: %s; later kernels of this device are skipped\n", c->report);
  c->failed = 1;
}

int cuda_check(cuda_ctx *c, cudaError_t rc, const char *what) {
  if (rc == cudaSuccess) return 0;
  if (!c->failed) record(c, what, cudaGetErrorString(rc), cudaGetErrorName(rc));
  return 1;
}

int cuda_check_blas(cuda_ctx *c, cublasStatus_t rc, const char *what) {
  if (rc == CUBLAS_STATUS_SUCCESS) return 0;
  if (!c->failed) record(c, what, cublasGetStatusString(rc), cublasGetStatusName(rc));
  return 1;
}

void cuda_launch_begin(void) { (void)cudaGetLastError(); }

int cuda_launched(cuda_ctx *c, const char *what) {
  return cuda_check(c, cudaGetLastError(), what);
}

const char *cuda_error(void *ctx) {
  const cuda_ctx *c = ctx;
  return c && c->failed ? c->report : NULL;
}
