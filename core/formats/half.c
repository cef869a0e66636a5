/* 16-bit to fp32 widening (half.h). */
#include "half.h"

#include <string.h>

static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (man << 13)); /* inf, NaN */
  if (exp == 0) { /* zero or subnormal: man * 2^-24 */
    float f = (float)man * 0x1p-24f;
    return sign ? -f : f;
  }
  return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

void loom__widen_16(int bf16, const uint16_t *src, float *dst, size_t n) {
  /* with src at dst + 2n bytes, dst[i] covers src[2i - n .. 2i - n + 1]: both <= i, read */
  for (size_t i = 0; i < n; i++) {
    uint16_t h = src[i];
    dst[i] = bf16 ? bits_f32((uint32_t)h << 16) : f16_to_f32(h);
  }
}
