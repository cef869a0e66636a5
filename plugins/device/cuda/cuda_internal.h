/* Internal to cuda.so: the device context every slot receives, the caching allocator, the
 * cuBLAS GEMM helper and the kernel launchers of cuda_kernels.cu. Nothing here is global: every
 * piece of state lives in one cuda_ctx, so several contexts (several GPUs, or a conformance
 * suite creating and destroying them) never share anything but the CUDA runtime itself.
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
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- caching allocator (cuda_alloc.c) ---- */

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
  char last_error[256]; /* the first CUDA / cuBLAS failure seen, for the logs */
  int failed;           /* set once a CUDA call failed: later kernels are skipped */
} cuda_ctx;

/* Record a failed CUDA runtime call (first one wins) and print it once to stderr: the kernel
 * slots return void, so a failure can only be reported and remembered. Returns 0 when ok. */
int cuda_check(cuda_ctx *c, cudaError_t rc, const char *what);
int cuda_check_blas(cuda_ctx *c, cublasStatus_t rc, const char *what);

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

/* ---- GEMMs (cuda_gemm.c) ---- */

/* Row-major C = alpha * op(A) @ op(B) + beta * C, as cblas_sgemm(CblasRowMajor, ...) with
 * trans_a/trans_b 0 = NoTrans, 1 = Trans, repeated `batch` times with element strides
 * stride_a/b/c between the matrices (batch 1: strides ignored). fp32 in, fp32 out; the math mode
 * follows the context (TF32 option). Enqueued on ctx->stream. */
void cuda_gemm_f32(cuda_ctx *c, int trans_a, int trans_b, int M, int N, int K, float alpha,
                   const float *A, int lda, long long stride_a, const float *B, int ldb,
                   long long stride_b, float beta, float *C, int ldc, long long stride_c,
                   int batch);
/* The same for one GEMM whose fp32 operands are all representable in ctx->compute_dtype (the
 * set_compute_dtype promise): converted exactly into 16-bit scratch and multiplied with fp32
 * accumulation and fp32 output. Falls back to cuda_gemm_f32 when the compute dtype is fp32. */
void cuda_gemm_compute(cuda_ctx *c, int trans_a, int trans_b, int M, int N, int K, float alpha,
                       const float *A, int lda, const float *B, int ldb, float beta, float *C,
                       int ldc);

/* ---- kernel launchers (cuda_kernels.cu); every one enqueues on `stream` and returns ---- */

void cuda_launch_scale(cudaStream_t s, float *x, float alpha, size_t n);
void cuda_launch_axpy(cudaStream_t s, float *y, float alpha, const float *x, size_t n);
/* Blocks of the first pass of sum_squares: its partials are reduced in this fixed order. */
#define CUDA_REDUCE_BLOCKS 256
/* out[0] (device double) = sum x_i^2, in an order fixed by n alone (deterministic);
 * out[1..CUDA_REDUCE_BLOCKS] hold the first pass's partials. */
void cuda_launch_sum_squares(cudaStream_t s, double *out, const float *x, size_t n);
/* *bad (device int, zeroed by the caller) = 1 if some element is inf or NaN */
void cuda_launch_any_nonfinite(cudaStream_t s, int *bad, const float *x, size_t n);
void cuda_launch_adamw(cudaStream_t s, float *param, const float *grad, float *m, float *v,
                       size_t n, float lr, float beta1, float beta2, float eps,
                       float weight_decay, float grad_scale, float bc1, float bc2);
void cuda_launch_encoder_forward(cudaStream_t s, float *out, const int32_t *inp,
                                 const float *wte, const float *wpe, int B, int T, int C);
/* dwpe part of encoder_backward: per (t, c), the batch summed in order */
void cuda_launch_encoder_backward_wpe(cudaStream_t s, float *dwpe, const float *dout, int B,
                                      int T, int C);
/* dwte part: stable sort of (token, position) then one owner per (token, column) walking its
 * positions in order. keys/vals/keys_sorted/vals_sorted: 4 int32 arrays of B*T in scratch;
 * temp/temp_bytes: cub's scratch (cuda_encoder_sort_temp_bytes). Returns a cudaError_t. */
size_t cuda_encoder_sort_temp_bytes(int BT);
int cuda_launch_encoder_backward_wte(cudaStream_t s, float *dwte, const float *dout,
                                     const int32_t *inp, int BT, int C, int32_t *scratch4,
                                     void *temp, size_t temp_bytes);
void cuda_launch_layernorm_forward(cudaStream_t s, float *out, float *mean, float *rstd,
                                   const float *inp, const float *weight, const float *bias,
                                   int N, int C);
void cuda_launch_layernorm_backward_dinp(cudaStream_t s, float *dinp, const float *dout,
                                         const float *inp, const float *weight,
                                         const float *mean, const float *rstd, int N, int C);
/* Rows per chunk of the two-pass column sums: partials hold ceil(N / chunk) rows of C. */
#define CUDA_COLSUM_CHUNK 64
/* out[c] += sum over rows n of f(n, c) in a fixed order, for f = dout (bias gradients) or
 * norm * dout (layernorm weight). partial: scratch of ceil(N/CUDA_COLSUM_CHUNK) * C floats. */
void cuda_launch_colsum(cudaStream_t s, float *out, const float *dout, int N, int C,
                        float *partial);
void cuda_launch_layernorm_dweight_dbias(cudaStream_t s, float *dweight, float *dbias,
                                         const float *dout, const float *inp, const float *mean,
                                         const float *rstd, int N, int C, float *partial);
/* out (N,OC) = bias broadcast over rows: the C operand of a GEMM with beta = 1 */
void cuda_launch_bias_fill(cudaStream_t s, float *out, const float *bias, int N, int OC);
/* att (rows of length T, BH*T of them): causal softmax in place of the scaled scores */
void cuda_launch_causal_softmax(cudaStream_t s, float *att, int BH, int T);
/* datt = att * (datt - rowsum(att*datt)) * scale, causal, in place */
void cuda_launch_causal_softmax_backward(cudaStream_t s, float *datt, const float *att, int BH,
                                         int T, float scale);
void cuda_launch_gelu_forward(cudaStream_t s, float *out, const float *inp, size_t n);
void cuda_launch_gelu_backward(cudaStream_t s, float *dinp, const float *inp, const float *dout,
                               size_t n);
void cuda_launch_residual(cudaStream_t s, float *out, const float *a, const float *b, size_t n);
void cuda_launch_crossentropy_forward(cudaStream_t s, float *losses, float *probs,
                                      const float *logits, const int32_t *targets, int N, int V);
void cuda_launch_crossentropy_backward(cudaStream_t s, float *dlogits, const float *probs,
                                       const int32_t *targets, float dloss, int N, int V);
void cuda_launch_crossentropy_fused(cudaStream_t s, float *losses, float *dlogits,
                                    const float *logits, const int32_t *targets, float dloss,
                                    int N, int V);
/* x = round-trip through bf16 / fp16 (round to nearest even, NaN kept quiet: loom/half_v1.h) */
void cuda_launch_round_to(cudaStream_t s, float *x, loom_dtype dtype, size_t n);
void cuda_launch_pack16(cudaStream_t s, uint16_t *dst, const float *src, loom_dtype dtype,
                        size_t n);
void cuda_launch_unpack16(cudaStream_t s, float *dst, const uint16_t *src, loom_dtype dtype,
                          size_t n);

#ifdef __cplusplus
}
#endif
#endif
