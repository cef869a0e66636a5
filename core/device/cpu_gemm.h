/* The CPU backend's GEMMs, on oneDNN's matmul (internal to core/device).
 *
 * One entry point in cblas_sgemm's terms (row-major, fp32 in and out, leading dimensions), run
 * by a oneDNN matmul primitive that is created once per shape and kept in a cache. oneDNN picks
 * its kernels for the widest ISA the CPU has (its own dispatch: OPENBLAS_CORETYPE does not
 * apply; ONEDNN_MAX_CPU_ISA caps it).
 *
 * 16-bit operands: after loom__cpu_gemm_set_dtype(bf16), a call that allows it (lowp = 1: the
 * linear layers, whose inputs the model keeps bf16-representable, device_v1.h's
 * set_compute_dtype) packs A and B to bf16 — exact on such values, rounding to nearest even
 * otherwise — and runs a bf16 x bf16 -> fp32 matmul: the products are exact in fp32 and are
 * accumulated in fp32 (the fp32 result on the same inputs but for the summation order). Only
 * when oneDNN reports bf16 units (avx512_core_bf16 or AMX): elsewhere 16-bit runs keep fp32
 * GEMMs on the widened values. oneDNN 2.6 has no CPU fp16 matmul ISA, so fp16 always does.
 *
 * Results are bitwise repeatable for a given thread count; across thread counts oneDNN may
 * split a long reduction (K) between threads and round differently (as OpenBLAS does). */
#ifndef LOOM_CORE_CPU_GEMM_H
#define LOOM_CORE_CPU_GEMM_H

#include <loom/common_v1.h>
#include <stddef.h>

typedef struct cpu_gemm cpu_gemm; /* engine, stream, primitive cache, packing buffers */

/* Create the oneDNN engine and stream. NULL (with err filled) when oneDNN has no CPU engine. */
cpu_gemm *loom__cpu_gemm_open(char *err, size_t errlen);
void loom__cpu_gemm_close(cpu_gemm *g);

/* The precision plugin's compute dtype (device_v1.h set_compute_dtype): bf16 turns on bf16
 * operands for lowp calls where the CPU has the units; anything else keeps fp32. */
void loom__cpu_gemm_set_dtype(cpu_gemm *g, loom_dtype dt);
/* The dtype lowp GEMMs run their operands in now (LOOM_F32 or LOOM_BF16). */
loom_dtype loom__cpu_gemm_operand_dtype(const cpu_gemm *g);
/* 1 if oneDNN reports bf16 units (avx512_core_bf16, AMX) within ONEDNN_MAX_CPU_ISA. */
int loom__cpu_gemm_has_bf16(void);
/* oneDNN's effective ISA, as ONEDNN_MAX_CPU_ISA spells it in lower case ("avx512_core_bf16"). */
const char *loom__cpu_gemm_isa(void);

/* C (M,N) = alpha * op(A) (M,K) @ op(B) (K,N) + beta * C + bias, row-major: op(A) = A (M rows
 * of lda) or, with ta, A^T for A stored (K rows of lda); op(B) likewise (tb: B stored N rows of
 * ldb). bias: NULL or N floats added to every row (not with alpha != 1). beta 0 ignores C's old
 * contents (NaN included). lowp 1: the operands may run in bf16 (see the top); 0: fp32 always
 * (the attention core, whose probabilities are fp32 values). Synchronous. */
void loom__cpu_gemm(cpu_gemm *g, int ta, int tb, int M, int N, int K, float alpha,
                    const float *A, int lda, const float *B, int ldb, float beta, float *C,
                    int ldc, const float *bias, int lowp);

/* loom__cpu_gemm with B given as `bdt` elements (LOOM_F32, LOOM_BF16 or LOOM_F16; ldb in
 * elements): a bf16 B feeds the bf16 path as is (no copy) where that path runs; otherwise a
 * 16-bit B is widened (exact) into the context's buffer and the GEMM runs in fp32. The result is
 * loom__cpu_gemm's on the widened B. */
void loom__cpu_gemm_w(cpu_gemm *g, int ta, int tb, int M, int N, int K, float alpha,
                      const float *A, int lda, const void *B, loom_dtype bdt, int ldb, float beta,
                      float *C, int ldc, const float *bias, int lowp);

/* The general form (device ABI 1.8's 16-bit activations): A, B and C each given as elements of
 * their dtype (LOOM_F32, LOOM_BF16 or LOOM_F16; leading dimensions in elements). With bf16 units
 * and lowp, bf16 and fp32 operands run as bf16 (fp32 ones packed) into an fp32 or bf16 C that
 * oneDNN writes directly (the fp32 accumulator + beta * C rounded once to nearest even). Else
 * 16-bit operands are widened (exact), the GEMM runs in fp32, and a 16-bit C is computed in an
 * fp32 copy (C widened into it first when beta != 0) and rounded once. Either way the result is
 * loom__cpu_gemm's on the widened operands followed by round_to of a 16-bit C. */
void loom__cpu_gemm_t(cpu_gemm *g, int ta, int tb, int M, int N, int K, float alpha,
                      const void *A, loom_dtype adt, int lda, const void *B, loom_dtype bdt,
                      int ldb, float beta, void *C, loom_dtype cdt, int ldc, const float *bias,
                      int lowp);

/* 1 if lowp loom__cpu_gemm_t calls read `dt` operands as they are (bf16 with bf16 units); else
 * they widen each 16-bit operand first, and a caller that passes one operand to several GEMMs
 * widens it once with loom__cpu_gemm_wide. */
int loom__cpu_gemm_reads16(const cpu_gemm *g, loom_dtype dt);
/* x (rows, cols, dense, dt elements) widened (exact) into g's own buffer, valid until the next
 * loom__cpu_gemm_wide call on g; x itself when dt is LOOM_F32. Aborts when out of memory. */
const float *loom__cpu_gemm_wide(cpu_gemm *g, const void *x, loom_dtype dt, int rows, int cols);

/* Unit tests only: with on = 1 every call of g takes the fallback that runs when oneDNN cannot
 * build a primitive (dnnl_sgemm on the fp32 operands), so that path is exercised too. */
void loom__cpu_gemm_force_fallback(cpu_gemm *g, int on);

#endif
