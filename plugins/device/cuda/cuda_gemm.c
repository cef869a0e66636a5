/* cuda.so's GEMMs on cuBLAS. The device table and the CPU device speak row-major cblas; cuBLAS
 * is column-major. A row-major (r x c) matrix with leading dimension ld is the column-major
 * (c x r) matrix with the same ld, its transpose, so row-major C = op(A) op(B) is column-major
 * C^T = op(B)^T op(A)^T: the same call with A and B swapped and M and N swapped, the transpose
 * flags unchanged. cuda_gemm_f32 does that once, so the kernels read like the CPU's cblas calls.
 *
 * Math modes: fp32 (CUBLAS_COMPUTE_32F: IEEE fp32 products and sums, no tensor-core shortcuts),
 * TF32 when the "tf32" option is on (CUBLAS_COMPUTE_32F_FAST_TF32: operands rounded to 10
 * mantissa bits, fp32 accumulation), and after set_compute_dtype(BF16 / F16) the model's GEMMs
 * (cuda_gemm_compute) on 16-bit operands with fp32 accumulation and fp32 output. */
#include "cuda_alloc.h"
#include "cuda_check.h"
#include "cuda_gemm.h"
#include "cuda_kernels.h"

static cublasOperation_t op(int trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }

void cuda_gemm_f32(cuda_ctx *c, int trans_a, int trans_b, int M, int N, int K, float alpha,
                   const float *A, int lda, long long stride_a, const float *B, int ldb,
                   long long stride_b, float beta, float *C, int ldc, long long stride_c,
                   int batch) {
  if (c->failed || M <= 0 || N <= 0 || batch <= 0) return;
  cublasComputeType_t compute = c->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  cublasStatus_t rc;
  if (batch == 1)
    rc = cublasGemmEx(c->blas, op(trans_b), op(trans_a), N, M, K, &alpha, B, CUDA_R_32F, ldb, A,
                      CUDA_R_32F, lda, &beta, C, CUDA_R_32F, ldc, compute, CUBLAS_GEMM_DEFAULT);
  else
    rc = cublasGemmStridedBatchedEx(c->blas, op(trans_b), op(trans_a), N, M, K, &alpha, B,
                                    CUDA_R_32F, ldb, stride_b, A, CUDA_R_32F, lda, stride_a,
                                    &beta, C, CUDA_R_32F, ldc, stride_c, batch, compute,
                                    CUBLAS_GEMM_DEFAULT);
  cuda_check_blas(c, rc, "cublasGemmEx (fp32)");
}

/* Elements a row-major operand spans: `rows` rows of `cols`, leading dimension ld. */
static size_t span(int rows, int cols, int ld) {
  return rows > 0 ? (size_t)(rows - 1) * (size_t)ld + (size_t)cols : 0;
}

void cuda_gemm_compute(cuda_ctx *c, int trans_a, int trans_b, int M, int N, int K, float alpha,
                       const float *A, int lda, const float *B, int ldb, float beta, float *C,
                       int ldc) {
  loom_dtype dt = c->compute_dtype;
  if (dt != LOOM_BF16 && dt != LOOM_F16) {
    cuda_gemm_f32(c, trans_a, trans_b, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
    return;
  }
  if (c->failed || M <= 0 || N <= 0) return;
  /* the stored shapes: A is (M,K) or, transposed, (K,M); B is (K,N) or (N,K) */
  size_t na = trans_a ? span(K, M, lda) : span(M, K, lda);
  size_t nb = trans_b ? span(N, K, ldb) : span(K, N, ldb);
  uint16_t *a16 = cuda_scratch_get(c, SCRATCH_GEMM_A, na * 2 + 2);
  uint16_t *b16 = cuda_scratch_get(c, SCRATCH_GEMM_B, nb * 2 + 2);
  if (!a16 || !b16) {
    cuda_check(c, cudaErrorMemoryAllocation, "16-bit GEMM operand scratch");
    return;
  }
  /* exact: the host promised every operand is representable in dt (set_compute_dtype) */
  cuda_launch_begin(); /* the error read below must be these two launches' own */
  cuda_launch_pack16(c->stream, a16, A, dt, na);
  cuda_launch_pack16(c->stream, b16, B, dt, nb);
  if (cuda_launched(c, "16-bit GEMM operand conversion")) return;
  cudaDataType_t t16 = dt == LOOM_BF16 ? CUDA_R_16BF : CUDA_R_16F;
  cublasStatus_t rc =
      cublasGemmEx(c->blas, op(trans_b), op(trans_a), N, M, K, &alpha, b16, t16, ldb, a16, t16,
                   lda, &beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  cuda_check_blas(c, rc, dt == LOOM_BF16 ? "cublasGemmEx (bf16)" : "cublasGemmEx (fp16)");
}
