/* CPU causal attention without the (T,T) probabilities: FlashAttention-2 (Dao 2023, "Faster
 * Attention with Better Parallelism and Work Partitioning"), device_v1.h ABI 1.9's
 * attention_forward_lse / attention_backward_lse, on fp32 and on 16-bit (bf16, fp16) activations.
 *
 * Legend: B = batch, T = time, NH = heads, HS = head size, C = NH*HS; qkv (B,T,3C) [q | k | v],
 * head h at channels h*HS.. of each third; out (B,T,C); lse (B,NH,T). HSP = HS rounded up to 16
 * (the micro-kernel's vector), TP = T rounded up to 16; BR x BC = query rows x key columns of a
 * tile.
 *
 * Per (b,h), with S = Q K^T * scale (scale = 1/sqrt(HS)), s <= t only:
 *   forward (Alg. 1): for each query tile, over its causal key tiles, the online softmax
 *     (Milakov & Gimelshein 2018): m' = max(m, rowmax S), P = exp(S - m'), l = l e^(m-m') +
 *     rowsum P, O = O e^(m-m') + P V; then out = O / l and lse = m + log l.
 *   backward (Alg. 2): D = rowsum(dout * out); for each key tile j, over the query tiles at or
 *     below it: P = exp(S - lse), dV_j += P^T dO, dP = dO V^T, dS = P (dP - D) * scale,
 *     dQ_i += dS K_j, dK_j += dS^T Q_i. Tiles above the diagonal are skipped, the diagonal one
 *     is masked (P = 0 above it).
 *
 * Threads: one (b,h) pair per unit, computed start to end by one thread in a fixed order, with
 * that thread's scratch; units write disjoint parts of out, lse and dqkv, and nothing is reduced
 * across threads, so every result is bitwise independent of the thread count. dQ of the head and
 * dK/dV of a key tile accumulate in fp32 scratch and are added into dqkv once.
 *
 * Products: a register-blocked micro-kernel C (M x N) (+)= A (M x K) B (K x N), A at any row and
 * column stride (so P^T and dS^T are read in place), B's rows contiguous, N a multiple of 16.
 * Each head's Q, K, V, K^T, V^T and dout are packed (widened, for 16-bit inputs: exact) into
 * contiguous fp32 scratch with zero padding columns, so the fp32 and 16-bit kernels share every
 * operation after the packing and the 16-bit outputs are the fp32 ones rounded once (`+=`:
 * widened, added, rounded once). The kernel's variant (AVX-512, AVX2+FMA or baseline) is chosen
 * once per process from the CPU: the same machine always runs the same one.
 *
 * Scratch: one grow-only block of the context (ctx->flash), per thread of the team
 * (4 T HSP + 2 HS TP + 2 TP + 4 BC HSP + 2 BR BC + HSP floats for the backward, less for the
 * forward): about 12.1 MiB per thread at T = 8192, HS = 64 (3.1 MiB at T = 2048). It is outside
 * loom's memory accounting; out of memory: a message and abort, as the 16-bit kernels. */
#include <math.h>
#include <omp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"

#if defined(__GNUC__) && !defined(__clang__)
/* 64-byte vectors passed between inlined helpers of the baseline variant */
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#define BR 64 /* query rows per tile */
#define BC 64 /* key columns per tile: a multiple of 16 (the vector width) */

typedef float v16f __attribute__((vector_size(64)));
#define INL static inline __attribute__((always_inline))

static inline int round16(int n) { return (n + 15) / 16 * 16; }
static inline int imin(int a, int b) { return a < b ? a : b; }

/* ---- the micro-kernel ---- */

INL v16f vload(const float *p) {
  v16f v;
  memcpy(&v, p, sizeof v);
  return v;
}
INL void vstore(float *p, v16f v) { memcpy(p, &v, sizeof v); }

/* One R x (16 NV) block of C: rows of A at a + r*rsa, column k at + k*csa; B row k at b + k*ldb.
 * R and NV are constants at every call, so the accumulators live in registers. */
INL void block(const int R, const int NV, int K, const float *a, size_t rsa, size_t csa,
               const float *b, size_t ldb, float *c, size_t ldc, int acc) {
  v16f s[6][4];
#pragma GCC unroll 6
  for (int r = 0; r < R; r++)
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) s[r][v] = acc ? vload(c + r * ldc + 16 * v) : (v16f){0};
  for (int k = 0; k < K; k++) {
    v16f bv[4];
    const float *bk = b + (size_t)k * ldb;
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) bv[v] = vload(bk + 16 * v);
    const float *ak = a + (size_t)k * csa;
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) {
      const float x = ak[r * rsa];
#pragma GCC unroll 4
      for (int v = 0; v < NV; v++) s[r][v] += x * bv[v];
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; r++)
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) vstore(c + r * ldc + 16 * v, s[r][v]);
}

/* The R-row blocks of every width below NVMAX vectors, dispatched on the remainder. */
INL void row_block(const int R, const int NVMAX, int N, int K, const float *a, size_t rsa,
                   size_t csa, const float *b, size_t ldb, float *c, size_t ldc, int acc) {
  int n = 0;
  for (; n + 16 * NVMAX <= N; n += 16 * NVMAX)
    block(R, NVMAX, K, a, rsa, csa, b + n, ldb, c + n, ldc, acc);
  const int rest = (N - n) / 16;
  if (rest == 1) block(R, 1, K, a, rsa, csa, b + n, ldb, c + n, ldc, acc);
  if (NVMAX > 2 && rest == 2) block(R, 2, K, a, rsa, csa, b + n, ldb, c + n, ldc, acc);
  if (NVMAX > 3 && rest == 3) block(R, 3, K, a, rsa, csa, b + n, ldb, c + n, ldc, acc);
}

/* C (M x N) = A B, or C += A B when acc: the blocks of RMAX rows, then the remainder rows. */
INL void gemm_body(const int RMAX, const int NVMAX, int M, int N, int K, const float *a,
                   size_t rsa, size_t csa, const float *b, size_t ldb, float *c, size_t ldc,
                   int acc) {
  int m = 0;
  for (; m + RMAX <= M; m += RMAX)
    row_block(RMAX, NVMAX, N, K, a + m * rsa, rsa, csa, b, ldb, c + m * ldc, ldc, acc);
  const int rest = M - m;
  const float *am = a + m * rsa;
  float *cm = c + m * ldc;
  if (rest == 1) row_block(1, NVMAX, N, K, am, rsa, csa, b, ldb, cm, ldc, acc);
  if (RMAX > 2 && rest == 2) row_block(2, NVMAX, N, K, am, rsa, csa, b, ldb, cm, ldc, acc);
  if (RMAX > 3 && rest == 3) row_block(3, NVMAX, N, K, am, rsa, csa, b, ldb, cm, ldc, acc);
  if (RMAX > 4 && rest == 4) row_block(4, NVMAX, N, K, am, rsa, csa, b, ldb, cm, ldc, acc);
  if (RMAX > 5 && rest == 5) row_block(5, NVMAX, N, K, am, rsa, csa, b, ldb, cm, ldc, acc);
}

typedef void gemm_fn(int M, int N, int K, const float *a, size_t rsa, size_t csa,
                     const float *b, size_t ldb, float *c, size_t ldc, int acc);

/* Block shapes by register file: 32 zmm hold 6 x 4 accumulators, 16 ymm 6 x 1 (two ymm per
 * v16f), 16 xmm 2 x 1 (four xmm per v16f). */
static void gemm_base(int M, int N, int K, const float *a, size_t rsa, size_t csa,
                      const float *b, size_t ldb, float *c, size_t ldc, int acc) {
  gemm_body(2, 1, M, N, K, a, rsa, csa, b, ldb, c, ldc, acc);
}
#if defined(__GNUC__) && defined(__x86_64__)
#define FLASH_X86 1
__attribute__((target("avx2,fma"))) static void gemm_avx2(int M, int N, int K, const float *a,
                                                          size_t rsa, size_t csa, const float *b,
                                                          size_t ldb, float *c, size_t ldc,
                                                          int acc) {
  gemm_body(6, 1, M, N, K, a, rsa, csa, b, ldb, c, ldc, acc);
}
__attribute__((target("avx512f,fma"))) static void gemm_avx512(int M, int N, int K,
                                                               const float *a, size_t rsa,
                                                               size_t csa, const float *b,
                                                               size_t ldb, float *c, size_t ldc,
                                                               int acc) {
  gemm_body(6, 4, M, N, K, a, rsa, csa, b, ldb, c, ldc, acc);
}
#endif

/* The variant: 0 baseline, 1 AVX2+FMA, 2 AVX-512; -1 until chosen (outside parallel regions). */
static int flash_isa = -1;

static int best_isa(void) {
#ifdef FLASH_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma")) return 2;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 1;
#endif
  return 0;
}

int loom__cpu_flash_set_isa(int level) {
  const int best = best_isa();
  flash_isa = level < 0 || level > best ? best : level;
  return flash_isa;
}

static gemm_fn *pick_gemm(void) {
  if (flash_isa < 0) flash_isa = best_isa();
#ifdef FLASH_X86
  if (flash_isa == 2) return gemm_avx512;
  if (flash_isa == 1) return gemm_avx2;
#endif
  return gemm_base;
}

/* ---- scratch and element access ---- */

/* Per-thread scratch of `per` floats for the team about to start: thread i's at the result +
 * i * *stride (64-byte aligned). Out of memory: a message and abort (no error return; a
 * missing result would be worse). */
static float *team_scratch(void *ctx, size_t per, size_t *stride, const char *kernel) {
  loom_cpu_scratch *s = &((loom_cpu_ctx *)ctx)->flash;
  *stride = (per + 15) / 16 * 16;
  const size_t n = *stride * (size_t)omp_get_max_threads();
  if (s->n < n) {
    free(s->p);
    s->p = aligned_alloc(64, n * sizeof(float));
    s->n = s->p ? n : 0;
    if (!s->p) {
      fprintf(stderr, "loom: cpu: out of memory for %zu bytes of %s scratch\n",
              n * sizeof(float), kernel);
      abort();
    }
  }
  return s->p;
}

void loom__cpu_flash_free(loom_cpu_ctx *c) {
  free(c->flash.p);
  c->flash = (loom_cpu_scratch){0};
}

/* dst (n fp32) = elements off.. of src, fp32 or 16-bit dt (widened: exact) */
static void load_row(float *dst, const void *src, loom_dtype dt, size_t off, int n) {
  if (dt == LOOM_F32) memcpy(dst, (const float *)src + off, (size_t)n * sizeof(float));
  else loom__cpu_widen(dst, (const uint16_t *)src + off, dt, (size_t)n);
}

/* elements off.. of dst = src (n fp32), rounded once for a 16-bit dt */
static void store_row(void *dst, loom_dtype dt, size_t off, const float *src, int n) {
  if (dt == LOOM_F32) memcpy((float *)dst + off, src, (size_t)n * sizeof(float));
  else loom__cpu_narrow((uint16_t *)dst + off, dt, src, (size_t)n);
}

/* elements off.. of dst += src (n fp32): for a 16-bit dt widened into tmp, added, rounded once */
static void add_row(void *dst, loom_dtype dt, size_t off, const float *src, int n, float *tmp) {
  float *d = dt == LOOM_F32 ? (float *)dst + off : tmp;
  if (dt != LOOM_F32) loom__cpu_widen(tmp, (const uint16_t *)dst + off, dt, (size_t)n);
  for (int i = 0; i < n; i++) d[i] += src[i];
  if (dt != LOOM_F32) loom__cpu_narrow((uint16_t *)dst + off, dt, tmp, (size_t)n);
}

/* rows (T,HSP) = the head's T rows of HS elements at src + base + t*ld, zero-padded */
static void pack_rows(float *rows, const void *src, loom_dtype dt, size_t base, size_t ld, int T,
                      int HS, int HSP) {
  for (int t = 0; t < T; t++) {
    float *r = rows + (size_t)t * HSP;
    load_row(r, src, dt, base + (size_t)t * ld, HS);
    for (int i = HS; i < HSP; i++) r[i] = 0.0f;
  }
}

/* cols (HS,TP) = the transpose of the same rows, columns T..TP-1 zero; tmp holds HS floats */
static void pack_cols(float *cols, const void *src, loom_dtype dt, size_t base, size_t ld, int T,
                      int HS, int TP, float *tmp) {
  for (int t = 0; t < T; t++) {
    load_row(tmp, src, dt, base + (size_t)t * ld, HS);
    for (int i = 0; i < HS; i++) cols[(size_t)i * TP + t] = tmp[i];
  }
  for (int i = 0; i < HS; i++)
    for (int t = T; t < TP; t++) cols[(size_t)i * TP + t] = 0.0f;
}

/* Worth a team: the score elements touched (the materialised kernels' row loop's measure). */
static int par_worth(int B, int T, int NH) {
  return (size_t)B * NH * T * T > LOOM_CPU_PAR_MIN;
}

/* ---- forward ---- */

/* One (b,h): out rows and lse of the head from its packed K^T (HS,TP) and V (T,HSP). */
static void forward_head(gemm_fn *gemm, void *out, float *lse, const void *qkv, loom_dtype dt,
                         int b, int h, int T, int NH, int HS, float *w) {
  const int C = NH * HS, HSP = round16(HS), TP = round16(T);
  const size_t qbase = (size_t)b * T * 3 * C + (size_t)h * HS, ld = 3 * (size_t)C;
  const float scale = 1.0f / sqrtf((float)HS);
  float *kt = w, *v = kt + (size_t)HS * TP, *q = v + (size_t)T * HSP, *o = q + BR * HSP;
  float *s = o + BR * HSP, *m = s + BR * BC, *l = m + BR;
  pack_cols(kt, qkv, dt, qbase + C, ld, T, HS, TP, o);
  pack_rows(v, qkv, dt, qbase + 2 * (size_t)C, ld, T, HS, HSP);
  for (int i0 = 0; i0 < T; i0 += BR) {
    const int nr = imin(BR, T - i0), last = i0 + nr - 1;
    pack_rows(q, qkv, dt, qbase + (size_t)i0 * ld, ld, nr, HS, HSP);
    memset(o, 0, (size_t)nr * HSP * sizeof(float));
    for (int r = 0; r < nr; r++) m[r] = -INFINITY, l[r] = 0.0f;
    for (int j0 = 0; j0 <= last; j0 += BC) { /* the causal key tiles */
      const int nc = imin(BC, last + 1 - j0);
      gemm(nr, round16(nc), HS, q, HSP, 1, kt + j0, TP, s, BC, 0); /* S = Q K^T */
      for (int r = 0; r < nr; r++) {
        float *row = s + (size_t)r * BC;
        const int valid = imin(nc, i0 + r - j0 + 1); /* columns s <= t */
        if (valid <= 0) { /* a row entirely above the diagonal (BR > BC): P = 0 */
          memset(row, 0, (size_t)nc * sizeof(float));
          continue;
        }
        float mx = m[r];
#pragma omp simd
        for (int c = 0; c < valid; c++) row[c] *= scale;
#pragma omp simd reduction(max : mx)
        for (int c = 0; c < valid; c++) mx = row[c] > mx ? row[c] : mx;
        loom__cpu_exp_sub(row, row, (size_t)valid, mx);
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int c = 0; c < valid; c++) sum += row[c];
        for (int c = valid; c < nc; c++) row[c] = 0.0f;
        const float alpha = expf(m[r] - mx); /* 0 on the first tile (m = -inf) */
        l[r] = l[r] * alpha + sum;
        m[r] = mx;
        if (alpha != 1.0f) {
          float *orow = o + (size_t)r * HSP;
          for (int i = 0; i < HS; i++) orow[i] *= alpha;
        }
      }
      gemm(nr, HSP, nc, s, BC, 1, v + (size_t)j0 * HSP, HSP, o, HSP, 1); /* O += P V */
    }
    for (int r = 0; r < nr; r++) {
      const int t = i0 + r;
      float *orow = o + (size_t)r * HSP;
      for (int i = 0; i < HS; i++) orow[i] /= l[r];
      store_row(out, dt, ((size_t)b * T + t) * C + (size_t)h * HS, orow, HS);
      lse[((size_t)b * NH + h) * T + t] = m[r] + logf(l[r]);
    }
  }
}

static void flash_forward(void *ctx, loom_dtype dt, void *out, float *lse, const void *qkv,
                          int B, int T, int NH, int HS) {
  if (B <= 0 || T <= 0 || NH <= 0 || HS <= 0) return;
  const int HSP = round16(HS), TP = round16(T);
  const size_t per = (size_t)HS * TP + (size_t)T * HSP + 2 * BR * HSP + BR * BC + 2 * BR;
  size_t stride;
  float *base = team_scratch(ctx, per, &stride, "attention_forward_lse");
  gemm_fn *gemm = pick_gemm();
  loom__cpu_half_init(); /* the F16C probe, before any thread converts */
  const int units = B * NH;
#pragma omp parallel if (par_worth(B, T, NH))
  {
    float *w = base + (size_t)omp_get_thread_num() * stride;
#pragma omp for schedule(dynamic, 1)
    for (int u = 0; u < units; u++) forward_head(gemm, out, lse, qkv, dt, u / NH, u % NH, T, NH,
                                                 HS, w);
  }
}

/* ---- backward ---- */

/* One (b,h): dqkv's rows of the head += the gradient, from the head's packed Q, K, dO (T,HSP),
 * K^T, V^T (HS,TP), D and lse (T). */
static void backward_head(gemm_fn *gemm, void *dqkv, const void *dout, const void *qkv,
                          const void *out, const float *lse, loom_dtype dt, int b, int h, int T,
                          int NH, int HS, float *w) {
  const int C = NH * HS, HSP = round16(HS), TP = round16(T);
  const size_t qbase = (size_t)b * T * 3 * C + (size_t)h * HS, ld = 3 * (size_t)C;
  const size_t obase = (size_t)b * T * C + (size_t)h * HS;
  const float scale = 1.0f / sqrtf((float)HS);
  const size_t TH = (size_t)T * HSP;
  float *q = w, *k = q + TH, *dO = k + TH, *dq = dO + TH, *kt = dq + TH;
  float *vt = kt + (size_t)HS * TP, *D = vt + (size_t)HS * TP, *L = D + TP;
  float *dk = L + TP, *dv = dk + BC * HSP, *p = dv + BC * HSP, *ds = p + BR * BC;
  float *tmp = ds + BR * BC; /* HSP floats */
  pack_rows(q, qkv, dt, qbase, ld, T, HS, HSP);
  pack_rows(k, qkv, dt, qbase + C, ld, T, HS, HSP);
  pack_rows(dO, dout, dt, obase, C, T, HS, HSP);
  pack_cols(kt, qkv, dt, qbase + C, ld, T, HS, TP, tmp);
  pack_cols(vt, qkv, dt, qbase + 2 * (size_t)C, ld, T, HS, TP, tmp);
  for (int t = 0; t < T; t++) { /* D = rowsum(dout * out) (Alg. 2 line 4) */
    load_row(tmp, out, dt, obase + (size_t)t * C, HS);
    const float *g = dO + (size_t)t * HSP;
    float d = 0.0f;
#pragma omp simd reduction(+ : d)
    for (int i = 0; i < HS; i++) d += g[i] * tmp[i];
    D[t] = d;
    L[t] = lse[((size_t)b * NH + h) * T + t];
  }
  memset(dq, 0, TH * sizeof(float));
  for (int j0 = 0; j0 < T; j0 += BC) {
    const int nc = imin(BC, T - j0), ncp = round16(nc);
    memset(dk, 0, (size_t)nc * HSP * sizeof(float));
    memset(dv, 0, (size_t)nc * HSP * sizeof(float));
    for (int i0 = j0 / BR * BR; i0 < T; i0 += BR) { /* the query tiles at or below the tile */
      const int nr = imin(BR, T - i0);
      const float *qi = q + (size_t)i0 * HSP, *gi = dO + (size_t)i0 * HSP;
      gemm(nr, ncp, HS, qi, HSP, 1, kt + j0, TP, p, BC, 0);  /* S = Q_i K_j^T */
      gemm(nr, ncp, HS, gi, HSP, 1, vt + j0, TP, ds, BC, 0); /* dP = dO_i V_j^T */
      for (int r = 0; r < nr; r++) {
        const int t = i0 + r, valid = imin(nc, t - j0 + 1);
        float *prow = p + (size_t)r * BC, *drow = ds + (size_t)r * BC;
        const int nv = valid > 0 ? valid : 0;
#pragma omp simd
        for (int c = 0; c < nv; c++) prow[c] *= scale;
        loom__cpu_exp_sub(prow, prow, (size_t)nv, L[t]); /* P = exp(S - lse) */
#pragma omp simd
        for (int c = 0; c < nv; c++) drow[c] = prow[c] * (drow[c] - D[t]) * scale;
        for (int c = nv; c < nc; c++) prow[c] = 0.0f, drow[c] = 0.0f;
      }
      gemm(nc, HSP, nr, p, 1, BC, gi, HSP, dv, HSP, 1);                   /* dV_j += P^T dO_i */
      gemm(nr, HSP, nc, ds, BC, 1, k + (size_t)j0 * HSP, HSP, dq + (size_t)i0 * HSP, HSP, 1);
      gemm(nc, HSP, nr, ds, 1, BC, qi, HSP, dk, HSP, 1);                  /* dK_j += dS^T Q_i */
    }
    for (int c = 0; c < nc; c++) {
      const size_t row = qbase + (size_t)(j0 + c) * ld;
      add_row(dqkv, dt, row + C, dk + (size_t)c * HSP, HS, tmp);
      add_row(dqkv, dt, row + 2 * (size_t)C, dv + (size_t)c * HSP, HS, tmp);
    }
  }
  for (int t = 0; t < T; t++)
    add_row(dqkv, dt, qbase + (size_t)t * ld, dq + (size_t)t * HSP, HS, tmp);
}

static void flash_backward(void *ctx, loom_dtype dt, void *dqkv, const void *dout,
                           const void *qkv, const void *out, const float *lse, int B, int T,
                           int NH, int HS) {
  if (B <= 0 || T <= 0 || NH <= 0 || HS <= 0) return;
  const int HSP = round16(HS), TP = round16(T);
  const size_t per = 4 * (size_t)T * HSP + 2 * (size_t)HS * TP + 2 * (size_t)TP +
                     2 * BC * HSP + 2 * BR * BC + HSP;
  size_t stride;
  float *base = team_scratch(ctx, per, &stride, "attention_backward_lse");
  gemm_fn *gemm = pick_gemm();
  loom__cpu_half_init();
  const int units = B * NH;
#pragma omp parallel if (par_worth(B, T, NH))
  {
    float *w = base + (size_t)omp_get_thread_num() * stride;
#pragma omp for schedule(dynamic, 1)
    for (int u = 0; u < units; u++)
      backward_head(gemm, dqkv, dout, qkv, out, lse, dt, u / NH, u % NH, T, NH, HS, w);
  }
}

/* ---- the table's entries ---- */

void loom__cpu_attention_forward_lse(void *ctx, float *out, float *lse, const float *qkv, int B,
                                     int T, int NH, int HS) {
  flash_forward(ctx, LOOM_F32, out, lse, qkv, B, T, NH, HS);
}

void loom__cpu_attention_backward_lse(void *ctx, float *dqkv, const float *dout,
                                      const float *qkv, const float *out, const float *lse,
                                      int B, int T, int NH, int HS) {
  flash_backward(ctx, LOOM_F32, dqkv, dout, qkv, out, lse, B, T, NH, HS);
}

void loom__cpu16_attention_forward_lse(void *ctx, loom_dtype dt, void *out, float *lse,
                                       const void *qkv, int B, int T, int NH, int HS) {
  flash_forward(ctx, dt, out, lse, qkv, B, T, NH, HS);
}

void loom__cpu16_attention_backward_lse(void *ctx, loom_dtype dt, void *dqkv, const void *dout,
                                        const void *qkv, const void *out, const float *lse,
                                        int B, int T, int NH, int HS) {
  flash_backward(ctx, dt, dqkv, dout, qkv, out, lse, B, T, NH, HS);
}
