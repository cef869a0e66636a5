/* CPU kernels of the GPT layers on 16-bit activations (device_v1.h ABI 1.8, acts16): bf16 or
 * fp16 elements in every activation buffer, fp32 for the rest (cpu_kernels.h's last section).
 *
 * Why: with fp32 activation buffers a 16-bit run rounds (round_to) or packs every activation
 * after every kernel, full-memory passes that made bf16 training on the CPU slower than fp32.
 * Here each kernel widens a tile of a few rows (TILE_FLOATS per stream: it stays in L1) into
 * the calling thread's fp32 scratch, runs the fp32 kernel's own row code on it (cpu_rows.h,
 * cpu_gelu.c's spans) and narrows the result tile into the 16-bit output; `+=` outputs are
 * widened with the tile and narrowed once. Parallel over tiles (single-threaded below
 * LOOM_CPU_PAR_MIN elements, as the fp32 kernels).
 *
 * Same bits: widening is exact and every float operation is the fp32 kernel's, in its order,
 * so each result is bitwise the fp32 kernel's on the widened inputs with every 16-bit output
 * rounded once (check_acts16 compares them). Row-local reductions stay within a row; sums down
 * the rows (dweight, dbias, dwte, dwpe) add each column's rows in row order in every path, as
 * the fp32 kernels do, so the split of the columns between threads changes nothing. Attention
 * runs the fp32 kernel (oneDNN GEMMs, its (b,h) loop serial) on one batch row at a time, widened
 * whole into ctx's attn16 scratch.
 *
 * Legend: B = batch, T = time, C = channels, N = rows, NH = heads, HS = head size, V = vocab. */
#include <omp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "cpu_rows.h"

/* fp32 elements per stream in one tile (rows of C: as many as fit, at least one): 4 KiB, so a
 * kernel's two to four streams of a tile stay in L1 (16 KiB tiles, in L2, made the 16-bit
 * residual and LayerNorm 1.3-1.8x slower at C = 768). A multiple of 16 (GELU's vector width). */
#define TILE_FLOATS 1024

/* s grown to at least n floats (old contents dropped); out of memory: a message and abort (the
 * kernels have no error return, and a result silently missing would be worse). */
static float *grow(loom_cpu_scratch *s, size_t n, const char *kernel) {
  if (s->n >= n) return s->p;
  const size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
  free(s->p);
  s->p = aligned_alloc(64, bytes);
  s->n = s->p ? bytes / sizeof(float) : 0;
  if (!s->p) {
    fprintf(stderr, "loom: cpu: out of memory for %zu bytes of %s scratch\n", bytes, kernel);
    abort();
  }
  return s->p;
}

void loom__cpu16_free(loom_cpu_ctx *c) {
  free(c->tiles16.p);
  free(c->attn16.p);
  c->tiles16 = (loom_cpu_scratch){0};
  c->attn16 = (loom_cpu_scratch){0};
}

/* Per-thread scratch of `per` floats for the parallel region about to start (called outside
 * it): thread i's at base + i * *stride, a cache line apart at least. */
static float *thread_tiles(void *ctx, size_t per, size_t *stride, const char *kernel) {
  loom__cpu_half_init(); /* F16C cached before any thread converts */
  *stride = (per + 15) / 16 * 16;
  return grow(&((loom_cpu_ctx *)ctx)->tiles16, *stride * (size_t)omp_get_max_threads(), kernel);
}
#define MY_TILE(base, stride) ((base) + (size_t)omp_get_thread_num() * (stride))

/* Rows of C per tile (at least 1). */
static int tile_rows(int C) { return C > 0 && C < TILE_FLOATS ? TILE_FLOATS / C : 1; }

/* Element i of a 16-bit buffer. */
static inline uint16_t *h16(const void *p, size_t i) { return (uint16_t *)p + i; }

/* This thread's contiguous share [*c0, *c1) of C columns (all of them outside a parallel
 * region). Any split gives the same bits: each column sums its rows in order. */
static void my_cols(int C, int *c0, int *c1) {
  const int nt = omp_get_num_threads(), id = omp_get_thread_num();
  const int per = ((C + nt - 1) / nt + 15) / 16 * 16;
  *c0 = id * per < C ? id * per : C;
  *c1 = *c0 + per < C ? *c0 + per : C;
}

/* ---- encoder ---- */

void loom__cpu16_encoder_forward(void *ctx, loom_dtype dt, void *out, const int32_t *inp,
                                 const float *wte, const float *wpe, int B, int T, int C) {
  const size_t N = (size_t)B * T;
  const int R = tile_rows(C);
  const ptrdiff_t ntiles = (ptrdiff_t)((N + R - 1) / R);
  size_t stride;
  float *base = thread_tiles(ctx, (size_t)R * C, &stride, "encoder_forward");
#pragma omp parallel if (N * C > LOOM_CPU_PAR_MIN)
  {
    float *o = MY_TILE(base, stride);
#pragma omp for schedule(static)
    for (ptrdiff_t k = 0; k < ntiles; k++) {
      const size_t n0 = (size_t)k * R, n1 = n0 + R < N ? n0 + R : N;
      for (size_t n = n0; n < n1; n++)
        loom__cpu_encoder_row(o + (n - n0) * C, wte + (size_t)inp[n] * C,
                              wpe + (n % (size_t)T) * C, C);
      loom__cpu_narrow(h16(out, n0 * C), dt, o, (n1 - n0) * C);
    }
  }
}

/* dwte and dwpe in one pass over dout: each thread owns a range of columns and walks the rows in
 * order, so every element of dwte (a token may repeat) and of dwpe (row t sums the batch) adds
 * its rows in row order, as the fp32 kernel's two passes do. */
void loom__cpu16_encoder_backward(void *ctx, loom_dtype dt, float *dwte, float *dwpe,
                                  const void *dout, const int32_t *inp, int B, int T, int C) {
  const size_t N = (size_t)B * T;
  size_t stride;
  float *base = thread_tiles(ctx, (size_t)C, &stride, "encoder_backward");
#pragma omp parallel if (N * C > LOOM_CPU_PAR_MIN)
  {
    float *restrict d = MY_TILE(base, stride);
    int c0, c1;
    my_cols(C, &c0, &c1);
    const int w = c1 - c0;
    for (size_t n = 0; w > 0 && n < N; n++) {
      loom__cpu_widen(d, h16(dout, n * C + c0), dt, (size_t)w);
      float *restrict dw = dwte + (size_t)inp[n] * C + c0;
      float *restrict dp = dwpe + (n % (size_t)T) * C + c0;
#pragma omp simd
      for (int c = 0; c < w; c++) dw[c] += d[c];
#pragma omp simd
      for (int c = 0; c < w; c++) dp[c] += d[c];
    }
  }
}

/* ---- layernorm ---- */

void loom__cpu16_layernorm_forward(void *ctx, loom_dtype dt, void *out, float *mean, float *rstd,
                                   const void *inp, const float *weight, const float *bias, int N,
                                   int C) {
  const int R = tile_rows(C);
  const ptrdiff_t ntiles = (N + R - 1) / R;
  const size_t tile = (size_t)R * C;
  size_t stride;
  float *base = thread_tiles(ctx, 2 * tile, &stride, "layernorm_forward");
#pragma omp parallel if ((size_t)N * C > LOOM_CPU_PAR_MIN)
  {
    float *x = MY_TILE(base, stride), *o = x + tile;
#pragma omp for schedule(static)
    for (ptrdiff_t k = 0; k < ntiles; k++) {
      const int n0 = (int)k * R, n1 = n0 + R < N ? n0 + R : N;
      const size_t len = (size_t)(n1 - n0) * C;
      loom__cpu_widen(x, h16(inp, (size_t)n0 * C), dt, len);
      for (int n = n0; n < n1; n++) {
        const size_t r = (size_t)(n - n0) * C;
        loom__cpu_ln_forward_row(o + r, mean + n, rstd + n, x + r, weight, bias, C);
      }
      loom__cpu_narrow(h16(out, (size_t)n0 * C), dt, o, len);
    }
  }
}

/* Rows [n0, n1) of dinp += LayerNorm's input gradient (with their dweight/dbias terms when those
 * are not NULL), through the tiles d, x, di of this thread. */
static void ln16_backward_tile(loom_dtype dt, void *dinp, float *dweight, float *dbias,
                               const void *dout, const void *inp, const float *weight,
                               const float *mean, const float *rstd, int n0, int n1, int C,
                               float *d, float *x, float *di) {
  const size_t off = (size_t)n0 * C, len = (size_t)(n1 - n0) * C;
  loom__cpu_widen(d, h16(dout, off), dt, len);
  loom__cpu_widen(x, h16(inp, off), dt, len);
  loom__cpu_widen(di, h16(dinp, off), dt, len);
  for (int n = n0; n < n1; n++) {
    const size_t r = (size_t)(n - n0) * C;
    loom__cpu_ln_backward_row(di + r, dweight, dbias, d + r, x + r, weight, mean[n], rstd[n], C);
  }
  loom__cpu_narrow(h16(dinp, off), dt, di, len);
}

void loom__cpu16_layernorm_backward(void *ctx, loom_dtype dt, void *dinp, float *dweight,
                                    float *dbias, const void *dout, const void *inp,
                                    const float *weight, const float *mean, const float *rstd,
                                    int N, int C) {
  const int R = tile_rows(C);
  const ptrdiff_t ntiles = (N + R - 1) / R;
  const size_t tile = (size_t)R * C;
  size_t stride;
  float *base = thread_tiles(ctx, 3 * tile, &stride, "layernorm_backward");
  const int parallel = (size_t)N * C > LOOM_CPU_PAR_MIN && omp_get_max_threads() > 1;
  if (!parallel) { /* one pass: each row's dinp and its dweight/dbias terms together */
    for (ptrdiff_t k = 0; k < ntiles; k++) {
      const int n0 = (int)k * R, n1 = n0 + R < N ? n0 + R : N;
      ln16_backward_tile(dt, dinp, dweight, dbias, dout, inp, weight, mean, rstd, n0, n1, C, base,
                         base + tile, base + 2 * tile);
    }
    return;
  }
  /* several threads: dinp by tiles of rows, then dweight, dbias as sums down the rows over each
   * thread's columns (the fp32 kernel's two passes) */
#pragma omp parallel
  {
    float *d = MY_TILE(base, stride);
#pragma omp for schedule(static)
    for (ptrdiff_t k = 0; k < ntiles; k++) {
      const int n0 = (int)k * R, n1 = n0 + R < N ? n0 + R : N;
      ln16_backward_tile(dt, dinp, NULL, NULL, dout, inp, weight, mean, rstd, n0, n1, C, d,
                         d + tile, d + 2 * tile);
    }
    int c0, c1;
    my_cols(C, &c0, &c1);
    const int w = c1 - c0;
    float *x = d + tile; /* C floats each suffice: w <= C <= tile */
    for (int n = 0; w > 0 && n < N; n++) {
      loom__cpu_widen(d, h16(dout, (size_t)n * C + c0), dt, (size_t)w);
      loom__cpu_widen(x, h16(inp, (size_t)n * C + c0), dt, (size_t)w);
      loom__cpu_ln_dwdb_cols(dweight + c0, dbias + c0, x, d, mean[n], rstd[n], 0, w);
    }
  }
}

/* ---- attention: the fp32 kernel on one widened batch row at a time ---- */

void loom__cpu16_attention_forward(void *ctx, loom_dtype dt, void *out, float *att,
                                   const void *qkv, int B, int T, int NH, int HS) {
  const size_t C = (size_t)NH * HS, TC = (size_t)T * C, TT = (size_t)T * T;
  float *q = grow(&((loom_cpu_ctx *)ctx)->attn16, 4 * TC, "attention_forward"), *o = q + 3 * TC;
  for (int b = 0; b < B; b++) {
    loom__cpu_convert(ctx, q, LOOM_F32, h16(qkv, b * 3 * TC), dt, 3 * TC);
    loom__cpu_attention_forward(ctx, o, att + (size_t)b * NH * TT, q, 1, T, NH, HS);
    loom__cpu_convert(ctx, h16(out, b * TC), dt, o, LOOM_F32, TC);
  }
}

void loom__cpu16_attention_backward(void *ctx, loom_dtype dt, void *dqkv, float *datt,
                                    const void *dout, const void *qkv, const float *att, int B,
                                    int T, int NH, int HS) {
  const size_t C = (size_t)NH * HS, TC = (size_t)T * C, TT = (size_t)T * T;
  float *q = grow(&((loom_cpu_ctx *)ctx)->attn16, 7 * TC, "attention_backward");
  float *dq = q + 3 * TC, *d = dq + 3 * TC;
  for (int b = 0; b < B; b++) {
    const size_t off = (size_t)b * 3 * TC, boff = (size_t)b * NH * TT;
    loom__cpu_convert(ctx, q, LOOM_F32, h16(qkv, off), dt, 3 * TC);
    loom__cpu_convert(ctx, dq, LOOM_F32, h16(dqkv, off), dt, 3 * TC);
    loom__cpu_convert(ctx, d, LOOM_F32, h16(dout, b * TC), dt, TC);
    loom__cpu_attention_backward(ctx, dq, datt + boff, d, q, att + boff, 1, T, NH, HS);
    loom__cpu_convert(ctx, h16(dqkv, off), dt, dq, LOOM_F32, 3 * TC);
  }
}

/* ---- GELU and residual: elementwise, by tiles of TILE_FLOATS ---- */

void loom__cpu16_gelu_forward(void *ctx, loom_dtype dt, void *out, const void *inp, size_t n) {
  const ptrdiff_t ntiles = (ptrdiff_t)((n + TILE_FLOATS - 1) / TILE_FLOATS);
  size_t stride;
  float *base = thread_tiles(ctx, 2 * TILE_FLOATS, &stride, "gelu_forward");
#pragma omp parallel if (n > LOOM_CPU_PAR_MIN)
  {
    float *x = MY_TILE(base, stride), *o = x + TILE_FLOATS;
#pragma omp for schedule(static)
    for (ptrdiff_t k = 0; k < ntiles; k++) {
      const size_t lo = (size_t)k * TILE_FLOATS, len = n - lo < TILE_FLOATS ? n - lo : TILE_FLOATS;
      loom__cpu_widen(x, h16(inp, lo), dt, len);
      loom__cpu_gelu_fwd_span(o, x, len);
      loom__cpu_narrow(h16(out, lo), dt, o, len);
    }
  }
}

void loom__cpu16_gelu_backward(void *ctx, loom_dtype dt, void *dinp, const void *inp,
                               const void *dout, size_t n) {
  const ptrdiff_t ntiles = (ptrdiff_t)((n + TILE_FLOATS - 1) / TILE_FLOATS);
  size_t stride;
  float *base = thread_tiles(ctx, 3 * TILE_FLOATS, &stride, "gelu_backward");
#pragma omp parallel if (n > LOOM_CPU_PAR_MIN)
  {
    float *x = MY_TILE(base, stride), *d = x + TILE_FLOATS, *di = d + TILE_FLOATS;
#pragma omp for schedule(static)
    for (ptrdiff_t k = 0; k < ntiles; k++) {
      const size_t lo = (size_t)k * TILE_FLOATS, len = n - lo < TILE_FLOATS ? n - lo : TILE_FLOATS;
      loom__cpu_widen(x, h16(inp, lo), dt, len);
      loom__cpu_widen(d, h16(dout, lo), dt, len);
      loom__cpu_widen(di, h16(dinp, lo), dt, len);
      loom__cpu_gelu_bwd_span(di, x, d, len);
      loom__cpu_narrow(h16(dinp, lo), dt, di, len);
    }
  }
}

void loom__cpu16_residual_forward(void *ctx, loom_dtype dt, void *out, const void *a,
                                  const void *b, size_t n) {
  const ptrdiff_t ntiles = (ptrdiff_t)((n + TILE_FLOATS - 1) / TILE_FLOATS);
  size_t stride;
  float *base = thread_tiles(ctx, 2 * TILE_FLOATS, &stride, "residual_forward");
#pragma omp parallel if (n > LOOM_CPU_PAR_MIN)
  {
    float *restrict x = MY_TILE(base, stride), *restrict y = x + TILE_FLOATS;
#pragma omp for schedule(static)
    for (ptrdiff_t k = 0; k < ntiles; k++) {
      const size_t lo = (size_t)k * TILE_FLOATS, len = n - lo < TILE_FLOATS ? n - lo : TILE_FLOATS;
      loom__cpu_widen(x, h16(a, lo), dt, len);
      loom__cpu_widen(y, h16(b, lo), dt, len);
#pragma omp simd
      for (size_t i = 0; i < len; i++) x[i] += y[i]; /* the tile of a is read: out may be a */
      loom__cpu_narrow(h16(out, lo), dt, x, len);
    }
  }
}

/* ---- softmax cross-entropy: the fused classifier, one widened row at a time ---- */

void loom__cpu16_crossentropy_fused(void *ctx, loom_dtype dt, float *losses, void *dlogits,
                                    const void *logits, const int32_t *targets, float dloss, int N,
                                    int V) {
  size_t stride;
  float *base = thread_tiles(ctx, (size_t)V, &stride, "crossentropy_fused");
#pragma omp parallel if ((size_t)N * V > LOOM_CPU_PAR_MIN)
  {
    float *e = MY_TILE(base, stride);
#pragma omp for schedule(static)
    for (int n = 0; n < N; n++) {
      const size_t off = (size_t)n * V;
      const int32_t t = targets[n];
      if (t < 0) { /* ignored row: loss 0, a zero dlogits row (as the fp32 kernel's) */
        losses[n] = 0.0f;
        if (dlogits) memset(h16(dlogits, off), 0, (size_t)V * sizeof(uint16_t));
        continue;
      }
      loom__cpu_widen(e, h16(logits, off), dt, (size_t)V);
      losses[n] = loom__cpu_fused_row(e, e, t, dloss, dlogits != NULL, V);
      if (dlogits) loom__cpu_narrow(h16(dlogits, off), dt, e, (size_t)V);
    }
  }
}
