/* loom ABI v1 — scalar fp32 <-> bf16 / fp16 conversions (header-only, ABI 1.3).
 *
 * One definition of the 16-bit formats for the core, the device backends and plugins (a comm
 * plugin summing 16-bit gradients, a checkpoint tool): every function rounds to nearest, ties
 * to even, like the hardware conversions (AVX512-BF16 vcvtneps2bf16, F16C vcvtps2ph) and torch.
 *   bf16: fp32's sign and 8-bit exponent, 7 stored mantissa bits; NaN stays a quiet NaN.
 *   fp16: IEEE binary16, 5-bit exponent, 10 stored mantissa bits, subnormals; values of
 *         magnitude >= 65520 round to infinity (65504 is the largest finite half).
 * The CPU device's vectorised versions (device_v1 round_to / convert) give the same bits. */
#ifndef LOOM_HALF_V1_H
#define LOOM_HALF_V1_H

#include <stdint.h>
#include <string.h>

static inline uint32_t loom_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static inline float loom_bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* The fp32 pattern of u rounded to bf16 (the low 16 bits cleared). */
static inline uint32_t loom_bf16_round_bits(uint32_t u) {
  uint32_t is_nan = (u & 0x7fffffffu) > 0x7f800000u;
  uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
  return (is_nan ? (u | 0x00400000u) : rounded) & 0xffff0000u;
}
static inline uint16_t loom_f32_to_bf16(float f) {
  return (uint16_t)(loom_bf16_round_bits(loom_f32_bits(f)) >> 16);
}
static inline float loom_bf16_to_f32(uint16_t h) { return loom_bits_f32((uint32_t)h << 16); }

static inline uint16_t loom_f32_to_f16(float f) {
  uint32_t u = loom_f32_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* NaN */
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 (or inf): inf */
  if (a < 0x38800000u) { /* below 2^-14: a subnormal half (or zero) */
    if (a <= 0x33000000u) return (uint16_t)sign; /* <= 2^-25: 0 (the tie 2^-25 goes to even 0) */
    uint32_t e = a >> 23;                        /* 102..112 */
    uint32_t mant = (a & 0x7fffffu) | 0x800000u; /* 24 significant bits */
    uint32_t shift = 126u - e;                   /* value = mant * 2^(e-150); half unit 2^-24 */
    uint32_t h = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (h & 1u))) h++;
    return (uint16_t)(sign | h);
  }
  /* normal: rebias the exponent 127 -> 15, keep 10 mantissa bits, round the 13 dropped (a carry
   * into the exponent is the correct result, up to 65504 -> inf handled above) */
  uint32_t h = (a - 0x38000000u) >> 13;
  uint32_t rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
  return (uint16_t)(sign | h);
}

static inline float loom_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (e == 0x1f) return loom_bits_f32(sign | 0x7f800000u | (mant << 13)); /* inf / NaN */
  if (e == 0) { /* zero or subnormal: mant * 2^-24, exact in fp32 */
    float v = (float)mant * 0x1p-24f;
    return sign ? -v : v;
  }
  return loom_bits_f32(sign | ((e + 112u) << 23) | (mant << 13));
}

#endif /* LOOM_HALF_V1_H */
