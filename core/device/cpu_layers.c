/* CPU kernels of the GPT layers other than attention, GELU and the cross-entropy
 * (cpu_attention.c, cpu_gelu.c, cpu_crossentropy.c): encoder, layernorm, matmul (oneDNN,
 * cpu_gemm.h: bf16 operands under a bf16 compute dtype where the CPU has the units), residual.
 * Argument order and semantics are those of loom/device_v1.h (llm.c's): outputs, saved stats,
 * inputs, weights, dims.
 *
 * Legend: B = batch, T = time, C = channels, N = B*T rows, OC = output channels, V = vocab.
 *
 * Gradient contract: parameter gradients (dwte, dwpe, dweight, dbias) and activation gradients
 * (dinp) ACCUMULATE (+=); forward outputs and dlogits are assigned (=).
 *
 * Determinism: every reduction runs in a fixed order whatever the thread count. Row-wise work
 * (layernorm stats, softmax) is parallel over rows; sums down the rows (bias / layernorm weight
 * gradients, the embedding scatter) split the columns into one contiguous range per thread
 * (col_range), each thread walking the rows in order over its range, so no two threads ever add
 * into the same element and every element sums its rows in row order, whatever the split. A
 * thread reads its range of each row contiguously and keeps its slice of the sums in L1 (the
 * earlier 32-column blocks read 128 bytes per row, a stride of up to 4 KiB apart, and walked
 * the rows once per block: 2-3x slower at OC = 3C and 4C). The GEMMs are oneDNN's, which
 * may split a long reduction between threads (cpu_gemm.h): the matmul gradients match bitwise
 * across thread counts only when the counts are equal. */
#include <math.h>
#include <omp.h>
#include <stddef.h>
#include <string.h>

#include <loom/half_v1.h>

#include "cpu_kernels.h"
#include "cpu_rows.h"

/* This thread's share [*c0, *c1) of C columns inside an OpenMP parallel region (all of them
 * outside one): contiguous, a multiple of 16 columns (a cache line) except the last. */
static void col_range(int C, int *c0, int *c1) {
  const int nt = omp_get_num_threads(), id = omp_get_thread_num();
  const int per = ((C + nt - 1) / nt + 15) / 16 * 16;
  *c0 = id * per < C ? id * per : C;
  *c1 = *c0 + per < C ? *c0 + per : C;
}

/* ---- encoder ---- */

void loom__cpu_encoder_forward(void *ctx, float *out, const int32_t *inp, const float *wte,
                               const float *wpe, int B, int T, int C) {
  (void)ctx;
#pragma omp parallel for collapse(2) if ((size_t)B * T * C > LOOM_CPU_PAR_MIN)
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < T; t++) {
      size_t bt = (size_t)b * T + t;
      float *o = out + bt * C;
      const float *we = wte + (size_t)inp[bt] * C;
      const float *pe = wpe + (size_t)t * C;
      loom__cpu_encoder_row(o, we, pe, C);
    }
  }
}

void loom__cpu_encoder_backward(void *ctx, float *dwte, float *dwpe, const float *dout,
                                const int32_t *inp, int B, int T, int C) {
  (void)ctx;
  const size_t BT = (size_t)B * T;
  /* dwte: a token may repeat, so split by columns and walk positions in order */
#pragma omp parallel if (BT * C > LOOM_CPU_PAR_MIN)
  {
    int c0, c1;
    col_range(C, &c0, &c1);
    for (size_t bt = 0; bt < BT; bt++) {
      float *restrict dw = dwte + (size_t)inp[bt] * C;
      const float *restrict d = dout + bt * C;
#pragma omp simd
      for (int c = c0; c < c1; c++) dw[c] += d[c];
    }
  }
  /* dwpe: each position t is its own row; sum over the batch in order */
#pragma omp parallel for schedule(static) if (BT * C > LOOM_CPU_PAR_MIN)
  for (int t = 0; t < T; t++) {
    float *dp = dwpe + (size_t)t * C;
    for (int b = 0; b < B; b++) {
      const float *d = dout + ((size_t)b * T + t) * C;
#pragma omp simd
      for (int c = 0; c < C; c++) dp[c] += d[c];
    }
  }
}

/* ---- layernorm ---- */

void loom__cpu_layernorm_forward(void *ctx, float *out, float *mean, float *rstd,
                                 const float *inp, const float *weight, const float *bias, int N,
                                 int C) {
  (void)ctx;
#pragma omp parallel for schedule(static) if ((size_t)N * C > LOOM_CPU_PAR_MIN)
  for (int n = 0; n < N; n++)
    loom__cpu_ln_forward_row(out + (size_t)n * C, mean + n, rstd + n, inp + (size_t)n * C,
                             weight, bias, C);
}

void loom__cpu_layernorm_backward(void *ctx, float *dinp, float *dweight, float *dbias,
                                  const float *dout, const float *inp, const float *weight,
                                  const float *mean, const float *rstd, int N, int C) {
  (void)ctx;
  const int parallel = (size_t)N * C > LOOM_CPU_PAR_MIN && omp_get_max_threads() > 1;
  if (!parallel) { /* one pass: each row's dinp and its dweight/dbias terms together */
    for (int n = 0; n < N; n++)
      loom__cpu_ln_backward_row(dinp + (size_t)n * C, dweight, dbias, dout + (size_t)n * C,
                                inp + (size_t)n * C, weight, mean[n], rstd[n], C);
    return;
  }
  /* several threads: dinp row by row, then dweight, dbias as sums down the rows (the same
   * float operations in the same order per element as the one-pass loop) */
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++)
    loom__cpu_ln_backward_row(dinp + (size_t)n * C, NULL, NULL, dout + (size_t)n * C,
                              inp + (size_t)n * C, weight, mean[n], rstd[n], C);
#pragma omp parallel
  {
    int c0, c1;
    col_range(C, &c0, &c1);
    for (int n = 0; n < N; n++)
      loom__cpu_ln_dwdb_cols(dweight, dbias, inp + (size_t)n * C, dout + (size_t)n * C, mean[n],
                             rstd[n], c0, c1);
  }
}

/* ---- matmul ---- */

/* dbias (OC) += the column sums of dout (N,OC, dt elements: F32, BF16 or F16, widened exactly):
 * each thread owns a column range and walks the rows in order, so every element sums its rows
 * in row order whatever the thread count and whatever dout's dtype. */
static void bias_colsum(float *dbias, const void *dout, loom_dtype dt, int N, int OC) {
#pragma omp parallel if ((size_t)N * OC > LOOM_CPU_PAR_MIN)
  {
    int o0, o1;
    col_range(OC, &o0, &o1);
    float *restrict db = dbias;
    for (int n = 0; n < N; n++) {
      const size_t row = (size_t)n * OC;
      if (dt == LOOM_F32) {
        const float *restrict d = (const float *)dout + row;
#pragma omp simd
        for (int o = o0; o < o1; o++) db[o] += d[o];
      } else if (dt == LOOM_BF16) {
        const uint16_t *restrict d = (const uint16_t *)dout + row;
#pragma omp simd
        for (int o = o0; o < o1; o++) db[o] += loom_bf16_to_f32(d[o]);
      } else {
        const uint16_t *restrict d = (const uint16_t *)dout + row;
        for (int o = o0; o < o1; o++) db[o] += loom_f16_to_f32(d[o]);
      }
    }
  }
}

void loom__cpu_matmul_forward_w(void *ctx, float *out, const float *inp, const void *weight,
                                loom_dtype wdt, const float *bias, int N, int C, int OC) {
  /* out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias (oneDNN's bias, no extra pass) */
  loom__cpu_gemm_w(loom__cpu_gemm_of(ctx), 0, 1, N, OC, C, 1.0f, inp, C, weight, wdt, C, 0.0f,
                   out, OC, bias, 1);
}

void loom__cpu_matmul_forward(void *ctx, float *out, const float *inp, const float *weight,
                              const float *bias, int N, int C, int OC) {
  loom__cpu_matmul_forward_w(ctx, out, inp, weight, LOOM_F32, bias, N, C, OC);
}

void loom__cpu_matmul_backward_w(void *ctx, float *dinp, float *dweight, float *dbias,
                                 const float *dout, const float *inp, const void *weight,
                                 loom_dtype wdt, int N, int C, int OC) {
  cpu_gemm *g = loom__cpu_gemm_of(ctx);
  /* dinp (N,C) += dout (N,OC) @ weight (OC,C) */
  if (dinp)
    loom__cpu_gemm_w(g, 0, 0, N, C, OC, 1.0f, dout, OC, weight, wdt, C, 1.0f, dinp, C, NULL, 1);
  /* dweight (OC,C) += dout^T (OC,N) @ inp (N,C) */
  if (dweight)
    loom__cpu_gemm(g, 1, 0, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C, NULL, 1);
  if (dbias) bias_colsum(dbias, dout, LOOM_F32, N, OC);
}

void loom__cpu_matmul_backward(void *ctx, float *dinp, float *dweight, float *dbias,
                               const float *dout, const float *inp, const float *weight, int N,
                               int C, int OC) {
  loom__cpu_matmul_backward_w(ctx, dinp, dweight, dbias, dout, inp, weight, LOOM_F32, N, C, OC);
}

/* ---- matmul on 16-bit activations (device ABI 1.8, loom_device_acts16_v1) ----
 * The GEMMs read and write the 16-bit buffers directly (cpu_gemm.h loom__cpu_gemm_t): with
 * bf16 units no conversion pass at all; without them cpu_gemm widens and rounds around an fp32
 * GEMM. The bits are those of the fp32 kernels above on the widened values followed by
 * round_to of the 16-bit outputs. */

void loom__cpu16_matmul_forward(void *ctx, loom_dtype dt, void *out, const void *inp,
                                const void *weight, loom_dtype wdt, const float *bias, int N,
                                int C, int OC) {
  loom__cpu_gemm_t(loom__cpu_gemm_of(ctx), 0, 1, N, OC, C, 1.0f, inp, dt, C, weight, wdt, C,
                   0.0f, out, dt, OC, bias, 1);
}

void loom__cpu16_matmul_backward(void *ctx, loom_dtype dt, void *dinp, float *dweight,
                                 float *dbias, const void *dout, const void *inp,
                                 const void *weight, loom_dtype wdt, int N, int C, int OC) {
  cpu_gemm *g = loom__cpu_gemm_of(ctx);
  /* without 16-bit GEMMs both read dout in fp32: widen it once, not once per GEMM */
  loom_dtype ddt = dt;
  if (!loom__cpu_gemm_reads16(g, dt) && dinp && dweight)
    dout = loom__cpu_gemm_wide(g, dout, dt, N, OC), ddt = LOOM_F32;
  if (dinp) /* dinp (N,C) += dout (N,OC) @ weight (OC,C), rounded once into the 16-bit dinp */
    loom__cpu_gemm_t(g, 0, 0, N, C, OC, 1.0f, dout, ddt, OC, weight, wdt, C, 1.0f, dinp, dt, C,
                     NULL, 1);
  if (dweight) /* dweight (OC,C) += dout^T (OC,N) @ inp (N,C), fp32 */
    loom__cpu_gemm_t(g, 1, 0, OC, C, N, 1.0f, dout, ddt, OC, inp, dt, C, 1.0f, dweight, LOOM_F32,
                     C, NULL, 1);
  if (dbias) bias_colsum(dbias, dout, ddt, N, OC);
}

/* ---- GELU: cpu_gelu.c ---- */

/* ---- residual ---- */

void loom__cpu_residual_forward(void *ctx, float *out, const float *a, const float *b,
                                size_t n) {
  (void)ctx;
  ptrdiff_t len = (ptrdiff_t)n;
#pragma omp parallel for simd schedule(static) if (len > LOOM_CPU_PAR_MIN)
  for (ptrdiff_t i = 0; i < len; i++) out[i] = a[i] + b[i];
}

/* ---- softmax cross-entropy: cpu_crossentropy.c ---- */
