/* cuda.so's GEMMs on cuBLAS (cuda_gemm.c). */
#ifndef LOOM_CUDA_GEMM_H
#define LOOM_CUDA_GEMM_H

#include "cuda_internal.h"

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
#endif
