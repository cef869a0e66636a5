/* CPU device: fp32 <-> bf16 / fp16 conversion and in-place rounding (device_v1.h, ABI 1.3).
 *
 * The CPU computes in fp32 and keeps 16-bit values by rounding at every store (round_to) or by
 * packing real 16-bit buffers (convert, for communication). Both round to nearest, ties to even:
 *   bf16: the upper 16 bits of the fp32 pattern after adding 0x7fff + (bit 16), the rounding
 *         torch and the hardware (AVX512-BF16 vcvtneps2bf16) use; NaN is kept quiet, never
 *         rounded into infinity.
 *   fp16: IEEE binary16 with subnormals and overflow to infinity above 65504 (65520 and up round
 *         to inf); F16C's vcvtps2ph where the CPU has it, else a scalar routine with the same
 *         results (check_convert compares the two over millions of patterns).
 * The bf16 loops are plain integer arithmetic that the compiler vectorises; target_clones builds
 * AVX-512 and AVX2 variants next to the baseline one and the loader picks one at run time. */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define LOOM_HAVE_X86 1
#endif

#include <loom/half_v1.h>

#include "cpu_kernels.h"

#if defined(LOOM_HAVE_X86) && !defined(__SANITIZE_ADDRESS__)
#define VEC_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define VEC_CLONES
#endif

/* The scalar conversions are the SDK's (loom/half_v1.h), shared with plugins. */
static inline uint32_t bf16_round_bits(uint32_t u) { return loom_bf16_round_bits(u); }
uint16_t loom__f32_to_bf16(float f) { return loom_f32_to_bf16(f); }
float loom__bf16_to_f32(uint16_t h) { return loom_bf16_to_f32(h); }
uint16_t loom__f32_to_f16(float f) { return loom_f32_to_f16(f); }
float loom__f16_to_f32(uint16_t h) { return loom_f16_to_f32(h); }

#if defined(LOOM_HAVE_X86)
/* The CPU's conversion units, cached: bit 0 F16C (with AVX), bit 1 AVX-512F. LOOM_NO_F16C=1 /
 * LOOM_NO_AVX512=1 (tests) turn them off, so the scalar fp16 routines and the compiler's bf16
 * loops are exercised on a machine that has them. The cache is atomic: threads of a parallel
 * loop may be the first to ask (they all find the same value). */
static int cpu_caps(void) {
  static _Atomic int cached = -1;
  int caps = atomic_load_explicit(&cached, memory_order_relaxed);
  if (caps < 0) {
    __builtin_cpu_init();
    const char *no_f16c = getenv("LOOM_NO_F16C"), *no_512 = getenv("LOOM_NO_AVX512");
    caps = (__builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx") &&
            !(no_f16c && no_f16c[0] == '1')) |
           (__builtin_cpu_supports("avx512f") && !(no_512 && no_512[0] == '1')) << 1;
    atomic_store_explicit(&cached, caps, memory_order_relaxed);
  }
  return caps;
}
static int have_f16c(void) { return cpu_caps() & 1; }
static int have_avx512(void) { return cpu_caps() >> 1 & 1; }

/* bf16 on AVX-512F, 16 lanes an instruction where GCC's clones stop at 256-bit vectors (its
 * preferred width): loom_bf16_round_bits' integer operations, so the same bits. */
#define BF16_AVX512_ROUND(u)                                                                     \
  _mm512_mask_mov_epi32(                                                                         \
      _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)),                           \
                       _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1))),        \
      _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),               \
                              _mm512_set1_epi32(0x7f800000)),                                    \
      _mm512_or_si512(u, _mm512_set1_epi32(0x00400000)))
__attribute__((target("avx512f"))) static size_t avx512_bf16_pack(uint16_t *dst, const float *src,
                                                                  size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i u = _mm512_loadu_si512(src + i);
    const __m512i r = _mm512_srli_epi32(BF16_AVX512_ROUND(u), 16);
    _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtepi32_epi16(r));
  }
  return i; /* elements done; the caller converts the tail */
}
__attribute__((target("avx512f"))) static size_t avx512_bf16_unpack(float *dst,
                                                                    const uint16_t *src,
                                                                    size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src + i)));
    _mm512_storeu_si512(dst + i, _mm512_slli_epi32(h, 16));
  }
  return i;
}
__attribute__((target("avx512f"))) static size_t avx512_bf16_round(float *x, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i u = _mm512_loadu_si512(x + i);
    const __m512i r = _mm512_and_si512(BF16_AVX512_ROUND(u), _mm512_set1_epi32((int)0xffff0000));
    _mm512_storeu_si512(x + i, r);
  }
  return i;
}
#endif

#if defined(LOOM_HAVE_X86)
__attribute__((target("avx,f16c"))) static void f16c_to_f16(uint16_t *dst, const float *src,
                                                             size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128((__m128i *)(dst + i), h);
  }
  for (; i < n; i++) dst[i] = loom__f32_to_f16(src[i]);
}
__attribute__((target("avx,f16c"))) static void f16c_from_f16(float *dst, const uint16_t *src,
                                                               size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
  for (; i < n; i++) dst[i] = loom__f16_to_f32(src[i]);
}
__attribute__((target("avx,f16c"))) static void f16c_round(float *x, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_ps(x + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; i++) x[i] = loom__f16_to_f32(loom__f32_to_f16(x[i]));
}
#endif

/* Element access through memcpy (loom_f32_bits / loom_bits_f32): no type punning through
 * pointers, and GCC still vectorises the loops: `omp simd` makes it do so at -O2 too (whose
 * very-cheap cost model left them scalar: 3-4x slower), integer operations, so no bit changes. */
VEC_CLONES static void bf16_round_loop(float *x, size_t n) {
#pragma omp simd
  for (size_t i = 0; i < n; i++) x[i] = loom_bits_f32(bf16_round_bits(loom_f32_bits(x[i])));
}
VEC_CLONES static void bf16_pack_loop(uint16_t *dst, const float *src, size_t n) {
#pragma omp simd
  for (size_t i = 0; i < n; i++)
    dst[i] = (uint16_t)(bf16_round_bits(loom_f32_bits(src[i])) >> 16);
}
VEC_CLONES static void bf16_unpack_loop(float *dst, const uint16_t *src, size_t n) {
#pragma omp simd
  for (size_t i = 0; i < n; i++) dst[i] = loom_bits_f32((uint32_t)src[i] << 16);
}
/* The spans: AVX-512F where present (then the loops above for the tail), else the loops. */
static void bf16_round_span(float *x, size_t n) {
  size_t i = 0;
#if defined(LOOM_HAVE_X86)
  if (have_avx512()) i = avx512_bf16_round(x, n);
#endif
  bf16_round_loop(x + i, n - i);
}
static void bf16_pack_span(uint16_t *dst, const float *src, size_t n) {
  size_t i = 0;
#if defined(LOOM_HAVE_X86)
  if (have_avx512()) i = avx512_bf16_pack(dst, src, n);
#endif
  bf16_pack_loop(dst + i, src + i, n - i);
}
static void bf16_unpack_span(float *dst, const uint16_t *src, size_t n) {
  size_t i = 0;
#if defined(LOOM_HAVE_X86)
  if (have_avx512()) i = avx512_bf16_unpack(dst, src, n);
#endif
  bf16_unpack_loop(dst + i, src + i, n - i);
}
void loom__cpu_bf16_pack(uint16_t *dst, const float *src, size_t n) { bf16_pack_span(dst, src, n); }

static void f16_round_span(float *x, size_t n) {
#if defined(LOOM_HAVE_X86)
  if (have_f16c()) {
    f16c_round(x, n);
    return;
  }
#endif
  for (size_t i = 0; i < n; i++) x[i] = loom__f16_to_f32(loom__f32_to_f16(x[i]));
}
static void f16_pack_span(uint16_t *dst, const float *src, size_t n) {
#if defined(LOOM_HAVE_X86)
  if (have_f16c()) {
    f16c_to_f16(dst, src, n);
    return;
  }
#endif
  for (size_t i = 0; i < n; i++) dst[i] = loom__f32_to_f16(src[i]);
}
static void f16_unpack_span(float *dst, const uint16_t *src, size_t n) {
#if defined(LOOM_HAVE_X86)
  if (have_f16c()) {
    f16c_from_f16(dst, src, n);
    return;
  }
#endif
  for (size_t i = 0; i < n; i++) dst[i] = loom__f16_to_f32(src[i]);
}

/* Row helpers for the 16-bit activation kernels (cpu_acts16.c): one span on the calling thread,
 * the same conversions as loom__cpu_convert. */
void loom__cpu_half_init(void) {
#if defined(LOOM_HAVE_X86)
  (void)have_f16c();
#endif
}
void loom__cpu_widen(float *dst, const void *src, loom_dtype dt, size_t n) {
  if (dt == LOOM_BF16) bf16_unpack_span(dst, src, n);
  else f16_unpack_span(dst, src, n);
}
void loom__cpu_narrow(void *dst, loom_dtype dt, const float *src, size_t n) {
  if (dt == LOOM_BF16) bf16_pack_span(dst, src, n);
  else f16_pack_span(dst, src, n);
}

/* Chunks of this many elements go to one OpenMP thread (conversion is memory bound). */
#define CONVERT_BLOCK 65536

void loom__cpu_round_to(void *ctx, float *x, loom_dtype dtype, size_t n) {
  (void)ctx;
  if (dtype != LOOM_BF16 && dtype != LOOM_F16) return;
#if defined(LOOM_HAVE_X86)
  (void)have_f16c();
#endif
  ptrdiff_t nblk = (ptrdiff_t)((n + CONVERT_BLOCK - 1) / CONVERT_BLOCK);
#pragma omp parallel for schedule(static) if (n > LOOM_CPU_PAR_MIN)
  for (ptrdiff_t b = 0; b < nblk; b++) {
    size_t lo = (size_t)b * CONVERT_BLOCK, len = n - lo < CONVERT_BLOCK ? n - lo : CONVERT_BLOCK;
    if (dtype == LOOM_BF16) bf16_round_span(x + lo, len);
    else f16_round_span(x + lo, len);
  }
}

int loom__cpu_convert(void *ctx, void *dst, loom_dtype dst_dtype, const void *src,
                      loom_dtype src_dtype, size_t n) {
  (void)ctx;
  int narrow = src_dtype == LOOM_F32 && (dst_dtype == LOOM_BF16 || dst_dtype == LOOM_F16);
  int widen = dst_dtype == LOOM_F32 && (src_dtype == LOOM_BF16 || src_dtype == LOOM_F16);
  if (src_dtype == LOOM_F32 && dst_dtype == LOOM_F32) {
    memmove(dst, src, n * sizeof(float));
    return LOOM_OK;
  }
  if (!narrow && !widen) return LOOM_UNSUPPORTED;
  loom_dtype half = narrow ? dst_dtype : src_dtype;
#if defined(LOOM_HAVE_X86)
  (void)have_f16c();
#endif
  ptrdiff_t nblk = (ptrdiff_t)((n + CONVERT_BLOCK - 1) / CONVERT_BLOCK);
#pragma omp parallel for schedule(static) if (n > LOOM_CPU_PAR_MIN)
  for (ptrdiff_t b = 0; b < nblk; b++) {
    size_t lo = (size_t)b * CONVERT_BLOCK, len = n - lo < CONVERT_BLOCK ? n - lo : CONVERT_BLOCK;
    if (narrow) {
      uint16_t *d = (uint16_t *)dst + lo;
      const float *s = (const float *)src + lo;
      if (half == LOOM_BF16) bf16_pack_span(d, s, len);
      else f16_pack_span(d, s, len);
    } else {
      float *d = (float *)dst + lo;
      const uint16_t *s = (const uint16_t *)src + lo;
      if (half == LOOM_BF16) bf16_unpack_span(d, s, len);
      else f16_unpack_span(d, s, len);
    }
  }
  return LOOM_OK;
}
