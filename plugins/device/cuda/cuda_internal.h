/* Internal to cuda.so: the device context every slot receives (types only). Nothing here is
 * global: every piece of state lives in one cuda_ctx, so several contexts (several GPUs, or a
 * conformance suite creating and destroying them) never share anything but the CUDA runtime
 * itself. The functions live one header per file, each file including only what it uses (no
 * file needs one that needs it back: tools/include_cycles.py):
 *   cuda_check.h    failures of CUDA and cuBLAS calls     (cuda_check.c)
 *   cuda_alloc.h    the caching allocator, scratch         (cuda_alloc.c)
 *   cuda_gemm.h     GEMMs on cuBLAS                        (cuda_gemm.c)
 *   cuda_kernels.h  the kernel launchers                   (cuda_kernels.cu)
 *   cuda_embed_chunks.h  embedding backward's chunk steps   (header only: host-tested)
 *   the device table itself                                (cuda_device.c)
 *
 * Legend: B = batch, T = time, C = channels, NH = heads, HS = head size, V = vocab, N = B*T rows,
 * OC = output channels. All float tensors are fp32 device pointers, row-major.
 *
 * Stream discipline: every kernel, memset and device-to-device copy of a context is enqueued on
 * ctx->stream and returns at once; only the slots that hand a value to the host (to_host,
 * from_host, sum_squares, all_finite, synchronize) wait for the stream. */
#ifndef LOOM_CUDA_INTERNAL_H
#define LOOM_CUDA_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <loom/device_v1.h>
#include <stddef.h>

/* ---- the caching allocator's state (cuda_alloc.h) ---- */

/* One cudaMalloc'd block, either handed out (live) or cached for reuse (free). */
typedef struct cuda_block {
  void *ptr;
  size_t size; /* rounded size actually reserved (cuda_pool_round) */
} cuda_block;

typedef struct cuda_pool {
  cuda_block *live; /* handed out, unordered */
  size_t n_live, cap_live;
  cuda_block *cached; /* free for reuse, sorted by size (best fit = first that fits) */
  size_t n_cached, cap_cached;
  size_t bytes_reserved; /* everything cudaMalloc'd and not yet cudaFree'd */
  size_t bytes_cached;   /* the part of bytes_reserved that sits in `cached` */
  size_t n_device_mallocs; /* cudaMalloc calls so far (the tests watch it stay flat) */
} cuda_pool;

/* ---- the context ---- */

/* A scratch buffer that only grows (cuda_scratch_get): GEMM operand copies, reduction partials,
 * the sort buffers of encoder_backward. Kept out of the host's accounting on purpose: it is the
 * backend's working memory (reported through cuda_pool.bytes_reserved). */
typedef struct cuda_scratch {
  void *ptr;
  size_t bytes;
} cuda_scratch;

enum {
  SCRATCH_GEMM_A,     /* 16-bit copy of a GEMM's first operand */
  SCRATCH_GEMM_B,     /* 16-bit copy of its second operand */
  SCRATCH_REDUCE,     /* column-sum partials (bias / layernorm weight gradients) */
  SCRATCH_SORT,       /* encoder_backward: keys, values, sorted keys and values, cub's temp */
  SCRATCH_SORT_TEMP,
  SCRATCH_EMB_PARTIAL, /* encoder_backward: the chunks' partial sums (cuda_embed_chunks.h) */
  SCRATCH__COUNT
};

typedef struct cuda_ctx {
  int device;          /* the CUDA ordinal this context runs on */
  cudaStream_t stream; /* every kernel and copy of this context is ordered on it */
  cublasHandle_t blas; /* bound to `stream` */
  int tf32;            /* option "tf32": fp32 GEMMs on TF32 tensor cores */
  loom_dtype compute_dtype; /* set_compute_dtype: LOOM_F32, LOOM_BF16 or LOOM_F16 */
  cuda_pool pool;
  cuda_scratch scratch[SCRATCH__COUNT];
  double *d_result;    /* device scalar for sum_squares (double) / all_finite (int) */
  double *h_result;    /* pinned host copy of it */
  void *blas_workspace; /* cuBLAS workspace (cublasSetWorkspace): no allocation inside calls */
  size_t blas_workspace_bytes;
  char last_error[256]; /* the first CUDA / cuBLAS failure seen: "CALL: REASON (NAME)" */
  char report[288];     /* the same with the GPU, "GPU N: ...": the error slot's message */
  int failed;           /* set once a CUDA call failed: later kernels are skipped, and the
                           error slot (ABI 1.10) returns `report` until destroy */
} cuda_ctx;

#endif
