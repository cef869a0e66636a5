/* CPU causal attention without the (T,T) probabilities: FlashAttention-2 (Dao 2023, "Faster
 * Attention with Better Parallelism and Work Partitioning"), device_v1.h ABI 1.9's
 * attention_forward_lse / attention_backward_lse, on fp32 and on 16-bit (bf16, fp16) activations.
 *
 * Legend: B = batch, T = time, NH = heads, HS = head size, C = NH*HS; qkv (B,T,3C) [q | k | v],
 * head h at channels h*HS.. of each third; out (B,T,C); lse (B,NH,T). HSP = HS rounded up to 16
 * (the micro-kernel's vector), TP = T rounded up to 16; a tile is BR query rows x BCF (forward)
 * or BCB (backward) key columns.
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
 * Each head's Q, K, V and dout are packed (widened, for 16-bit inputs: exact) into contiguous
 * fp32 scratch with zero padding columns, K^T and V^T transposed from them, so the fp32 and
 * 16-bit kernels share every operation after the packing and the 16-bit outputs are the fp32
 * ones rounded once (`+=`: widened, added, rounded once). The whole per-head computation is
 * compiled three times (AVX-512, AVX2+FMA, baseline: a block shape per register file) and the
 * variant chosen once per process from the CPU, so one machine always gives the same bits; the
 * variants differ from each other in the last bits (FMA contraction), as oneDNN's ISAs do.
 * Softmax exponentials use this file's exp8 (at least as accurate as cpu_exp.c's, cheaper).
 *
 * Scratch: one grow-only block of the context (ctx->flash), per thread of the team: the
 * backward's 5 T HSP + 2 HS TP + 2 TP + 2 BCB HSP + 2 BR BCB + HSP floats (the forward's
 * 3 T HSP + HS TP + BR (HSP + BCF + 2) fit in it): 14.1 MiB per thread at T = 8192, HS = 64
 * (3.6 MiB at T = 2048), so 28 MiB on two threads. It is outside loom's memory accounting; out
 * of memory: a message and abort, as the 16-bit kernels. */
#include <math.h>
#include <omp.h>
#include <stdatomic.h>
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

/* Tiles, by measurement at HS = 64 (bench/attention.c, 2 threads): query rows, and key columns
 * (multiples of 16, the vector width) of the forward's and the backward's tiles. The forward
 * gained 10% from 64 to 256 columns (fewer passes over O per row); the backward, whose five
 * products share each tile, is fastest at 64 x 64 (32 x 64 and 128 x 128 were 5-10% slower). */
#define BR 64
#define BCF 256
#define BCB 64

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

/* C (M x N) = A B, or C += A B when acc, N a multiple of 16: blocks of RMAX rows, then the
 * remainder. Each element of C adds its K products in k order whatever the blocking, so any M,
 * N or variant of the same ISA gives the same bits. */
INL void gemm(const int RMAX, const int NVMAX, int M, int N, int K, const float *a, size_t rsa,
              size_t csa, const float *b, size_t ldb, float *c, size_t ldc, int acc) {
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

/* Block shapes by register file: 32 zmm hold 6 x 4 accumulators, 16 ymm 6 x 1 (two ymm per
 * v16f), 16 xmm 2 x 1 (four xmm per v16f). */
#define GEMM(isa, ...) gemm((isa) ? 6 : 2, (isa) == 2 ? 4 : 1, __VA_ARGS__)

/* ---- exp ----
 * exp(x - sub) for 8 floats, in double: x - sub = (16k + j) ln2/16 + r with |r| <= ln2/32
 * (ln2/16 in two parts: fdlibm's ln2 split, so k ln2_hi is exact), exp = 2^k 2^(j/16) e^r with
 * 2^(j/16) from a 16-entry table (one two-register permute on AVX-512) and e^r a degree-6
 * Taylor polynomial (relative error < 5e-16, r^7/7!), then rounded to float once. So the result
 * is the correctly rounded exp except within ~1e-15 (relative) of a rounding boundary: at least
 * as accurate as cpu_exp.c's loom__cpu_exp_sub (3e-13), which the unit test compares it with,
 * for fewer operations (its polynomial is degree 10 over |r| <= ln2/2), inlined into the row
 * loops. x - sub is taken in double (exact), not rounded to float first. Arguments are clamped
 * as there: below -200 the result is 0, above 89 inf; NaN stays NaN. */
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef double v8d __attribute__((vector_size(64)));
typedef int64_t v8l __attribute__((vector_size(64)));
#define D8(x) ((v8d){x, x, x, x, x, x, x, x})
#define L8(x) ((v8l){x, x, x, x, x, x, x, x})

/* 2^(j/16), j = 0..15, correctly rounded (from 60-digit decimal powers) */
static const double exp2_tab[16] = {
    0x1.0000000000000p+0, 0x1.0b5586cf9890fp+0, 0x1.172b83c7d517bp+0, 0x1.2387a6e756238p+0,
    0x1.306fe0a31b715p+0, 0x1.3dea64c123422p+0, 0x1.4bfdad5362a27p+0, 0x1.5ab07dd485429p+0,
    0x1.6a09e667f3bcdp+0, 0x1.7a11473eb0187p+0, 0x1.8ace5422aa0dbp+0, 0x1.9c49182a3f090p+0,
    0x1.ae89f995ad3adp+0, 0x1.c199bdd85529cp+0, 0x1.d5818dcfba487p+0, 0x1.ea4afa2a490dap+0,
};

INL v8d dsel(v8l m, v8d a, v8d b) { return (v8d)(((v8l)a & m) | ((v8l)b & ~m)); }

INL v8f exp8(v8f xf, float sub) {
  const v8d shift = D8(0x1.8p52); /* kd + shift rounds kd to an integer, held in the low bits */
  const v8d x0 = __builtin_convertvector(xf, v8d) - D8((double)sub);
  const v8l nan = x0 != x0;
  v8d x = x0;
  x = dsel(x < D8(-200.0), D8(-200.0), x);
  x = dsel(x > D8(89.0), D8(89.0), x);
  x = dsel(nan, D8(0.0), x);
  v8d kd = x * D8(23.083120654223414) + shift; /* 16 / ln2 */
  const v8l kj = (v8l)kd - (v8l)shift;         /* 16 k + j, exact */
  kd -= shift;
  const v8d r = (x - kd * D8(6.93147180369123816490e-01 / 16)) -
                kd * D8(1.90821492927058770002e-10 / 16);
  v8d lo, hi;
  memcpy(&lo, exp2_tab, sizeof lo);
  memcpy(&hi, exp2_tab + 8, sizeof hi);
  const v8d t = __builtin_shuffle(lo, hi, kj & L8(15));
  const v8d scale = (v8d)((v8l)t + ((kj >> 4) << 52)); /* 2^(j/16) 2^k: |k| <= 289 */
  v8d p = D8(1.0 / 720);
  p = p * r + D8(1.0 / 120);
  p = p * r + D8(1.0 / 24);
  p = p * r + D8(1.0 / 6);
  p = p * r + D8(0.5);
  p = p * r + D8(1.0);
  p = p * r + D8(1.0);
  const v8d y = dsel(nan, x0, p * scale);
  return __builtin_convertvector(y, v8f);
}

INL v8f load8(const float *p) {
  v8f v;
  memcpy(&v, p, sizeof v);
  return v;
}
INL void store8(float *p, v8f v) { memcpy(p, &v, sizeof v); }
/* lanes i with base + i < n: all ones */
INL v8i lanes_below(int base, int n) {
  const v8i idx = {0, 1, 2, 3, 4, 5, 6, 7};
  return (idx + base) < n;
}
INL v8f fzero_from(v8f v, int base, int n) { return (v8f)((v8i)v & lanes_below(base, n)); }

/* row[0..n) = exp(row - sub), row[n..round8(n)) = 0 (row has room); returns their sum, added in
 * a fixed order (8 lane sums, then the lanes in order) */
INL float exp_row(float *row, int n, float sub) {
  v8f acc = {0};
  for (int c = 0; c < n; c += 8) {
    const v8f p = fzero_from(exp8(load8(row + c), sub), c, n);
    store8(row + c, p);
    acc += p;
  }
  float sum = 0.0f;
  for (int i = 0; i < 8; i++) sum += acc[i];
  return sum;
}

/* ---- the variant (by ISA) ---- */

/* 0 baseline, 1 AVX2+FMA, 2 AVX-512; -1 until chosen. Atomic: two contexts may start kernels
 * from two threads at once (each computes the same value). */
static atomic_int flash_isa = -1;

static int best_isa(void) {
#if defined(__GNUC__) && defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma")) return 2;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 1;
#endif
  return 0;
}

static int pick_variant(void) {
  int isa = atomic_load_explicit(&flash_isa, memory_order_relaxed);
  if (isa < 0) {
    isa = best_isa();
    atomic_store_explicit(&flash_isa, isa, memory_order_relaxed);
  }
  return isa;
}

int loom__cpu_flash_set_isa(int level) {
  const int best = best_isa(), isa = level < 0 || level > best ? best : level;
  atomic_store_explicit(&flash_isa, isa, memory_order_relaxed);
  return isa;
}

/* ---- scratch and element access ---- */

/* Per-thread scratch of `per` floats for the team about to start: thread i's at the result +
 * i * *stride (64-byte aligned). Out of memory: a message and abort (no error return; a
 * missing result would be worse). */
float *loom__cpu_team_scratch(void *ctx, size_t per, size_t *stride, const char *kernel) {
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

/* dst[0..n) = elements off.. of src, fp32 or 16-bit dt (widened: exact), dst[n..np) = 0 */
INL void load_row(float *dst, const void *src, loom_dtype dt, size_t off, int n, int np) {
  if (dt == LOOM_F32) {
    const float *s = (const float *)src + off;
#pragma omp simd
    for (int i = 0; i < n; i++) dst[i] = s[i];
  } else {
    loom__cpu_widen(dst, (const uint16_t *)src + off, dt, (size_t)n);
  }
  for (int i = n; i < np; i++) dst[i] = 0.0f;
}

/* elements off.. of dst = src (n fp32), rounded once for a 16-bit dt */
INL void store_row(void *dst, loom_dtype dt, size_t off, const float *src, int n) {
  if (dt == LOOM_F32) {
    float *d = (float *)dst + off;
#pragma omp simd
    for (int i = 0; i < n; i++) d[i] = src[i];
  } else {
    loom__cpu_narrow((uint16_t *)dst + off, dt, src, (size_t)n);
  }
}

/* elements off.. of dst += src (n fp32): for a 16-bit dt widened into tmp, added, rounded once */
INL void add_row(void *dst, loom_dtype dt, size_t off, const float *src, int n, float *tmp) {
  float *d = dt == LOOM_F32 ? (float *)dst + off : tmp;
  if (dt != LOOM_F32) loom__cpu_widen(tmp, (const uint16_t *)dst + off, dt, (size_t)n);
#pragma omp simd
  for (int i = 0; i < n; i++) d[i] += src[i];
  if (dt != LOOM_F32) loom__cpu_narrow((uint16_t *)dst + off, dt, tmp, (size_t)n);
}

/* The rows a pack reads are 3C floats apart, one or two cache lines each: fetch a few rows
 * ahead, or every row is a cache miss's latency. */
#define AHEAD 6
INL void prefetch_row(const void *src, loom_dtype dt, size_t off, int HS) {
  const char *p = (const char *)src + off * (dt == LOOM_F32 ? 4 : 2);
  const int bytes = HS * (dt == LOOM_F32 ? 4 : 2);
  for (int i = 0; i < bytes; i += 64) __builtin_prefetch(p + i);
}

/* cols (HS,TP) = the transpose of rows (T,HSP) (zero beyond T) */
INL void transpose(float *cols, const float *rows, int T, int HS, int HSP, int TP) {
  for (int t0 = 0; t0 < TP; t0 += 16)
    for (int i = 0; i < HS; i++) {
      float *c = cols + (size_t)i * TP + t0;
      for (int t = t0; t < t0 + 16; t++) c[t - t0] = t < T ? rows[(size_t)t * HSP + i] : 0.0f;
    }
}

/* Worth a team: the score elements touched (the materialised kernels' row loop's measure). */
static int par_worth(int B, int T, int NH) {
  return (size_t)B * NH * T * T > LOOM_CPU_PAR_MIN;
}

/* ---- forward ---- */

/* One (b,h): its out rows and lse. w: this thread's scratch. */
INL void forward_head(const int isa, void *out, float *lse, const void *qkv, loom_dtype dt, int b,
                      int h, int T, int NH, int HS, float *w) {
  const int C = NH * HS, HSP = round16(HS), TP = round16(T);
  const size_t qbase = (size_t)b * T * 3 * C + (size_t)h * HS, ld = 3 * (size_t)C;
  const float scale = 1.0f / sqrtf((float)HS);
  float *q = w, *k = q + (size_t)T * HSP, *v = k + (size_t)T * HSP, *kt = v + (size_t)T * HSP;
  float *o = kt + (size_t)HS * TP, *s = o + BR * HSP, *m = s + BR * BCF, *l = m + BR;
  for (int t = 0; t < T; t++) { /* one pass over the head's rows of qkv */
    const size_t row = qbase + (size_t)t * ld;
    if (t + AHEAD < T)
      for (int part = 0; part < 3; part++)
        prefetch_row(qkv, dt, row + AHEAD * ld + (size_t)part * C, HS);
    load_row(q + (size_t)t * HSP, qkv, dt, row, HS, HSP);
    load_row(k + (size_t)t * HSP, qkv, dt, row + C, HS, HSP);
    load_row(v + (size_t)t * HSP, qkv, dt, row + 2 * (size_t)C, HS, HSP);
  }
  transpose(kt, k, T, HS, HSP, TP);
  for (int i0 = 0; i0 < T; i0 += BR) {
    const int nr = imin(BR, T - i0), last = i0 + nr - 1;
    memset(o, 0, (size_t)nr * HSP * sizeof(float));
    for (int r = 0; r < nr; r++) m[r] = -INFINITY, l[r] = 0.0f;
    for (int j0 = 0; j0 <= last; j0 += BCF) { /* the causal key tiles */
      const int nc = imin(BCF, last + 1 - j0);
      GEMM(isa, nr, round16(nc), HS, q + (size_t)i0 * HSP, HSP, 1, kt + j0, TP, s, BCF, 0);
      for (int r = 0; r < nr; r++) {
        float *row = s + (size_t)r * BCF;
        const int valid = imin(nc, i0 + r - j0 + 1); /* columns s <= t */
        if (valid <= 0) { /* a row entirely above the diagonal (BR > BCF): P = 0 */
          memset(row, 0, (size_t)nc * sizeof(float));
          continue;
        }
        float mx = m[r];
#pragma omp simd reduction(max : mx)
        for (int c = 0; c < valid; c++) {
          row[c] *= scale;
          mx = row[c] > mx ? row[c] : mx;
        }
        const float sum = exp_row(row, valid, mx); /* P = exp(S - m') */
        for (int c = (valid + 7) / 8 * 8; c < nc; c++) row[c] = 0.0f;
        const float alpha = expf(m[r] - mx); /* 0 on the first tile (m = -inf) */
        l[r] = l[r] * alpha + sum;
        m[r] = mx;
        if (alpha != 1.0f) {
          float *orow = o + (size_t)r * HSP;
#pragma omp simd
          for (int i = 0; i < HS; i++) orow[i] *= alpha;
        }
      }
      GEMM(isa, nr, HSP, nc, s, BCF, 1, v + (size_t)j0 * HSP, HSP, o, HSP, 1); /* O += P V */
    }
    for (int r = 0; r < nr; r++) {
      const int t = i0 + r;
      float *orow = o + (size_t)r * HSP;
      const float lr = l[r];
#pragma omp simd
      for (int i = 0; i < HS; i++) orow[i] /= lr;
      store_row(out, dt, ((size_t)b * T + t) * C + (size_t)h * HS, orow, HS);
      lse[((size_t)b * NH + h) * T + t] = m[r] + logf(lr);
    }
  }
}

/* ---- backward ---- */

/* One (b,h): dqkv's rows of the head += its gradient. w: this thread's scratch. */
INL void backward_head(const int isa, void *dqkv, const void *dout, const void *qkv,
                       const void *out, const float *lse, loom_dtype dt, int b, int h, int T,
                       int NH, int HS, float *w) {
  const int C = NH * HS, HSP = round16(HS), TP = round16(T);
  const size_t qbase = (size_t)b * T * 3 * C + (size_t)h * HS, ld = 3 * (size_t)C;
  const size_t obase = (size_t)b * T * C + (size_t)h * HS;
  const float scale = 1.0f / sqrtf((float)HS);
  const size_t TH = (size_t)T * HSP;
  float *q = w, *k = q + TH, *v = k + TH, *dO = v + TH, *dq = dO + TH, *kt = dq + TH;
  float *vt = kt + (size_t)HS * TP, *D = vt + (size_t)HS * TP, *L = D + TP;
  float *dk = L + TP, *dv = dk + BCB * HSP, *p = dv + BCB * HSP, *ds = p + BR * BCB;
  float *tmp = ds + BR * BCB; /* HSP floats */
  for (int t = 0; t < T; t++) { /* one pass over the head's rows of qkv, dout and out */
    const size_t row = qbase + (size_t)t * ld, orow = obase + (size_t)t * C;
    if (t + AHEAD < T) {
      for (int part = 0; part < 3; part++)
        prefetch_row(qkv, dt, row + AHEAD * ld + (size_t)part * C, HS);
      prefetch_row(dout, dt, orow + AHEAD * (size_t)C, HS);
      prefetch_row(out, dt, orow + AHEAD * (size_t)C, HS);
    }
    load_row(q + (size_t)t * HSP, qkv, dt, row, HS, HSP);
    load_row(k + (size_t)t * HSP, qkv, dt, row + C, HS, HSP);
    load_row(v + (size_t)t * HSP, qkv, dt, row + 2 * (size_t)C, HS, HSP);
    float *g = dO + (size_t)t * HSP;
    load_row(g, dout, dt, orow, HS, HSP);
    load_row(tmp, out, dt, orow, HS, HS);
    float d = 0.0f; /* D = rowsum(dout * out) (Alg. 2 line 4) */
#pragma omp simd reduction(+ : d)
    for (int i = 0; i < HS; i++) d += g[i] * tmp[i];
    D[t] = d;
    L[t] = lse[((size_t)b * NH + h) * T + t];
  }
  transpose(kt, k, T, HS, HSP, TP);
  transpose(vt, v, T, HS, HSP, TP);
  memset(dq, 0, TH * sizeof(float));
  for (int j0 = 0; j0 < T; j0 += BCB) {
    const int nc = imin(BCB, T - j0), ncp = round16(nc);
    memset(dk, 0, (size_t)nc * HSP * sizeof(float));
    memset(dv, 0, (size_t)nc * HSP * sizeof(float));
    for (int i0 = j0 / BR * BR; i0 < T; i0 += BR) { /* the query tiles at or below the tile */
      const int nr = imin(BR, T - i0);
      const float *qi = q + (size_t)i0 * HSP, *gi = dO + (size_t)i0 * HSP;
      GEMM(isa, nr, ncp, HS, qi, HSP, 1, kt + j0, TP, p, BCB, 0);  /* S = Q_i K_j^T */
      GEMM(isa, nr, ncp, HS, gi, HSP, 1, vt + j0, TP, ds, BCB, 0); /* dP = dO_i V_j^T */
      for (int r = 0; r < nr; r++) {
        const int t = i0 + r, valid = imin(nc, t - j0 + 1), nv = valid > 0 ? valid : 0;
        float *prow = p + (size_t)r * BCB, *drow = ds + (size_t)r * BCB;
        const float Dt = D[t];
#pragma omp simd
        for (int c = 0; c < nv; c++) prow[c] *= scale;
        exp_row(prow, nv, L[t]); /* P = exp(S - lse) */
        const int nv8 = (nv + 7) / 8 * 8;
#pragma omp simd
        for (int c = 0; c < nv8; c++) drow[c] = prow[c] * (drow[c] - Dt) * scale;
        for (int c = nv8; c < nc; c++) prow[c] = 0.0f, drow[c] = 0.0f;
      }
      GEMM(isa, nc, HSP, nr, p, 1, BCB, gi, HSP, dv, HSP, 1); /* dV_j += P^T dO_i */
      GEMM(isa, nr, HSP, nc, ds, BCB, 1, k + (size_t)j0 * HSP, HSP, dq + (size_t)i0 * HSP, HSP,
           1);                                               /* dQ_i += dS K_j */
      GEMM(isa, nc, HSP, nr, ds, 1, BCB, qi, HSP, dk, HSP, 1); /* dK_j += dS^T Q_i */
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

/* ---- the variants and their teams ---- */

typedef void fwd_fn(void *out, float *lse, const void *qkv, loom_dtype dt, int b, int h, int T,
                    int NH, int HS, float *w);
typedef void bwd_fn(void *dqkv, const void *dout, const void *qkv, const void *out,
                    const float *lse, loom_dtype dt, int b, int h, int T, int NH, int HS,
                    float *w);

#define VARIANT(name, isa, attr)                                                                \
  attr static void fwd_##name(void *out, float *lse, const void *qkv, loom_dtype dt, int b,     \
                              int h, int T, int NH, int HS, float *w) {                         \
    forward_head(isa, out, lse, qkv, dt, b, h, T, NH, HS, w);                                   \
  }                                                                                             \
  attr static void bwd_##name(void *dqkv, const void *dout, const void *qkv, const void *out,   \
                              const float *lse, loom_dtype dt, int b, int h, int T, int NH,     \
                              int HS, float *w) {                                               \
    backward_head(isa, dqkv, dout, qkv, out, lse, dt, b, h, T, NH, HS, w);                      \
  }
VARIANT(base, 0, )
#if defined(__GNUC__) && defined(__x86_64__)
VARIANT(avx2, 1, __attribute__((target("avx2,fma"))))
VARIANT(avx512, 2, __attribute__((target("avx512f,fma"))))
static fwd_fn *const fwds[3] = {fwd_base, fwd_avx2, fwd_avx512};
static bwd_fn *const bwds[3] = {bwd_base, bwd_avx2, bwd_avx512};
#else
static fwd_fn *const fwds[3] = {fwd_base, fwd_base, fwd_base};
static bwd_fn *const bwds[3] = {bwd_base, bwd_base, bwd_base};
#endif

static void flash_forward(void *ctx, loom_dtype dt, void *out, float *lse, const void *qkv,
                          int B, int T, int NH, int HS) {
  if (B <= 0 || T <= 0 || NH <= 0 || HS <= 0) return;
  const int HSP = round16(HS), TP = round16(T);
  const size_t per = 3 * (size_t)T * HSP + (size_t)HS * TP + BR * HSP + BR * BCF + 2 * BR;
  size_t stride;
  float *base = loom__cpu_team_scratch(ctx, per, &stride, "attention_forward_lse");
  fwd_fn *head = fwds[pick_variant()];
  loom__cpu_half_init(); /* the F16C probe, before any thread converts */
  const int units = B * NH;
#pragma omp parallel if (par_worth(B, T, NH))
  {
    float *w = base + (size_t)omp_get_thread_num() * stride;
#pragma omp for schedule(dynamic, 1)
    for (int u = 0; u < units; u++) head(out, lse, qkv, dt, u / NH, u % NH, T, NH, HS, w);
  }
}

static void flash_backward(void *ctx, loom_dtype dt, void *dqkv, const void *dout,
                           const void *qkv, const void *out, const float *lse, int B, int T,
                           int NH, int HS) {
  if (B <= 0 || T <= 0 || NH <= 0 || HS <= 0) return;
  const int HSP = round16(HS), TP = round16(T);
  const size_t per = 5 * (size_t)T * HSP + 2 * (size_t)HS * TP + 2 * (size_t)TP +
                     2 * BCB * HSP + 2 * BR * BCB + HSP;
  size_t stride;
  float *base = loom__cpu_team_scratch(ctx, per, &stride, "attention_backward_lse");
  bwd_fn *head = bwds[pick_variant()];
  loom__cpu_half_init();
  const int units = B * NH;
#pragma omp parallel if (par_worth(B, T, NH))
  {
    float *w = base + (size_t)omp_get_thread_num() * stride;
#pragma omp for schedule(dynamic, 1)
    for (int u = 0; u < units; u++)
      head(dqkv, dout, qkv, out, lse, dt, u / NH, u % NH, T, NH, HS, w);
  }
}

/* exp_row's arithmetic on n floats, for the unit test (the variant set by set_isa) */
#define EXP_VARIANT(name, attr)                                                                 \
  attr static void exp_##name(float *out, const float *in, size_t n, float sub) {               \
    float b[8];                                                                                 \
    for (size_t i = 0; i < n; i += 8) {                                                         \
      const int m = n - i < 8 ? (int)(n - i) : 8;                                               \
      memset(b, 0, sizeof b);                                                                   \
      memcpy(b, in + i, (size_t)m * sizeof(float));                                             \
      exp_row(b, m, sub);                                                                       \
      memcpy(out + i, b, (size_t)m * sizeof(float));                                            \
    }                                                                                           \
  }
EXP_VARIANT(base, )
#if defined(__GNUC__) && defined(__x86_64__)
EXP_VARIANT(avx2, __attribute__((target("avx2,fma"))))
EXP_VARIANT(avx512, __attribute__((target("avx512f,fma"))))
#endif

void loom__cpu_flash_exp_sub(float *out, const float *in, size_t n, float sub) {
  const int isa = pick_variant();
#if defined(__GNUC__) && defined(__x86_64__)
  if (isa == 2) return exp_avx512(out, in, n, sub);
  if (isa == 1) return exp_avx2(out, in, n, sub);
#endif
  (void)isa;
  exp_base(out, in, n, sub);
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
