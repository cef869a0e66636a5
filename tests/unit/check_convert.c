/* Check suite for the CPU device's 16-bit conversions (cpu_convert.c, device_v1 round_to and
 * convert, ABI 1.3).
 *
 * bf16: every 61st fp32 bit pattern (70 million values, all exponents, both signs, NaN and inf)
 * against an independent reference that picks the nearer of the two bf16 neighbours in double
 * arithmetic, ties to the even one. fp16: the scalar routine against the CPU's own F16C
 * instruction (vcvtps2ph, the hardware's IEEE rounding) over the same sweep, and every one of the
 * 65536 halves widened; where the CPU lacks F16C the sweep is against a double-arithmetic
 * reference instead. Then the device table: round_to = pack + unpack, convert round-trips, odd
 * lengths (the vector loops' tails) and the threaded path. */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "device/cpu_kernels.h"
#include "device/device.h"
#include "support/check_suite.h"

#define SWEEP_STRIDE 61u

static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* The bf16 value nearest to f (ties to even mantissa), from the two candidates around it. */
static uint16_t bf16_reference(float f) {
  uint32_t u = f32_bits(f);
  if (isnan(f)) return (uint16_t)((u | 0x00400000u) >> 16);
  uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u; /* |lo| <= |f| < |hi| */
  double d = fabs((double)f), dlo = fabs((double)bits_f32(lo));
  double dhi = ((hi & 0x7f800000u) == 0x7f800000u) ? ldexp(1.0, 128) /* the next is inf */
                                                    : fabs((double)bits_f32(hi));
  if (d - dlo < dhi - d) return (uint16_t)(lo >> 16);
  if (d - dlo > dhi - d) return (uint16_t)(hi >> 16);
  return (uint16_t)((((lo >> 16) & 1u) ? hi : lo) >> 16);
}

START_TEST(bf16_round_to_nearest_even) {
  /* the rule on hand-picked values: ties go to the even neighbour, NaN stays NaN */
  ck_assert_uint_eq(loom__f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);         /* tie -> 1.0 (even) */
  ck_assert_uint_eq(loom__f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);     /* tie -> up (even) */
  ck_assert_uint_eq(loom__f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81); /* above the tie */
  ck_assert(isnan(loom__bf16_to_f32(loom__f32_to_bf16(NAN))));
  ck_assert(isinf(loom__bf16_to_f32(loom__f32_to_bf16(INFINITY))));
  ck_assert(isinf(loom__bf16_to_f32(loom__f32_to_bf16(FLT_MAX)))); /* rounds past the max */
  uint64_t bad = 0;
  uint32_t first_bad = 0;
  for (uint64_t k = 0; k < (1ull << 32); k += SWEEP_STRIDE) {
    float f = bits_f32((uint32_t)k);
    if (loom__f32_to_bf16(f) != bf16_reference(f) && !bad++) first_bad = (uint32_t)k;
  }
  ck_assert_msg(bad == 0, "%llu patterns differ from the reference, first 0x%08x",
                (unsigned long long)bad, first_bad);
}
END_TEST

/* The binary16 value nearest to f in double arithmetic (used where F16C is missing). */
static uint16_t f16_reference(float f) {
  if (isnan(f)) return loom__f32_to_f16(f);
  double d = fabs((double)f);
  uint16_t sign = signbit(f) ? 0x8000 : 0;
  if (d >= 65520.0) return sign | 0x7c00;
  /* binary16 values are multiples of 2^(e-10), e >= -14 */
  int e = d > 0 ? ilogb(d) : -14;
  if (e < -14) e = -14;
  double q = ldexp(d, 10 - e), r = nearbyint(q); /* FE_TONEAREST: ties to even */
  double v = ldexp(r, e - 10);
  /* re-encode v */
  if (v == 0) return sign;
  int ve = ilogb(v);
  if (ve < -14) return sign | (uint16_t)ldexp(v, 24);
  uint16_t mant = (uint16_t)(ldexp(v, 10 - ve) - 1024.0);
  return sign | (uint16_t)((ve + 15) << 10) | mant;
}

#if defined(__x86_64__)
__attribute__((target("f16c"))) static uint16_t f16_hw(float f) {
  return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}
__attribute__((target("f16c"))) static float f16_hw_widen(uint16_t h) { return _cvtsh_ss(h); }
static int have_f16c(void) { return __builtin_cpu_supports("f16c"); }
#else
static uint16_t f16_hw(float f) { return f16_reference(f); }
static float f16_hw_widen(uint16_t h) { return loom__f16_to_f32(h); }
static int have_f16c(void) { return 0; }
#endif

START_TEST(f16_scalar_matches_hardware) {
  ck_assert_uint_eq(loom__f32_to_f16(65504.0f), 0x7bff);   /* the largest half */
  ck_assert_uint_eq(loom__f32_to_f16(65519.99f), 0x7bff);  /* below the tie: stays finite */
  ck_assert_uint_eq(loom__f32_to_f16(65520.0f), 0x7c00);   /* the tie rounds to even = inf */
  ck_assert_uint_eq(loom__f32_to_f16(0x1p-24f), 0x0001);   /* the smallest subnormal */
  ck_assert_uint_eq(loom__f32_to_f16(0x1p-25f), 0x0000);   /* half of it: tie to even 0 */
  ck_assert_uint_eq(loom__f32_to_f16(0x1.8p-25f), 0x0001); /* above the tie */
  int hw = have_f16c();
  uint64_t bad = 0;
  uint32_t first_bad = 0;
  for (uint64_t k = 0; k < (1ull << 32); k += SWEEP_STRIDE) {
    float f = bits_f32((uint32_t)k);
    uint16_t want = hw ? f16_hw(f) : f16_reference(f);
    uint16_t got = loom__f32_to_f16(f);
    if (isnan(f)) { /* any quiet NaN will do: payloads differ between implementations */
      if ((got & 0x7c00) != 0x7c00 || !(got & 0x3ff)) bad++;
      continue;
    }
    if (got != want && !bad++) first_bad = (uint32_t)k;
  }
  ck_assert_msg(bad == 0, "%llu patterns differ from %s, first 0x%08x", (unsigned long long)bad,
                hw ? "F16C" : "the double reference", first_bad);
  for (uint32_t h = 0; h < 65536; h++) {
    float a = loom__f16_to_f32((uint16_t)h), b = f16_hw_widen((uint16_t)h);
    if (isnan(b)) ck_assert(isnan(a));
    else ck_assert_msg(f32_bits(a) == f32_bits(b), "half 0x%04x widens to %a, want %a", h, a, b);
  }
}
END_TEST

/* The device table on a buffer with every kind of value and an odd length (vector tails). */
static void check_device_paths(loom_dtype dt) {
  loom_dev dev;
  char err[256];
  ck_assert_int_eq(loom__dev_open(&dev, loom__cpu_device(), "{}", 0, err, sizeof err), LOOM_OK);
  const loom_device_v1 *ops = dev.ops;
  ck_assert_ptr_nonnull(ops->round_to);
  ck_assert_ptr_nonnull(ops->convert);
  const size_t n = 200003; /* > the threaded threshold, not a multiple of 8 */
  float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), *z = malloc(n * sizeof *z);
  uint16_t *h = malloc(n * sizeof *h);
  uint32_t s = 12345;
  for (size_t i = 0; i < n; i++) {
    s = s * 1664525u + 1013904223u;
    x[i] = bits_f32(s); /* every exponent, NaN and inf included */
  }
  memcpy(y, x, n * sizeof *y);
  ops->round_to(dev.ctx, y, dt, n);
  ck_assert_int_eq(ops->convert(dev.ctx, h, dt, x, LOOM_F32, n), LOOM_OK);
  ck_assert_int_eq(ops->convert(dev.ctx, z, LOOM_F32, h, dt, n), LOOM_OK);
  for (size_t i = 0; i < n; i++) {
    uint16_t want = dt == LOOM_BF16 ? loom__f32_to_bf16(x[i]) : loom__f32_to_f16(x[i]);
    float back = dt == LOOM_BF16 ? loom__bf16_to_f32(want) : loom__f16_to_f32(want);
    if (isnan(x[i])) {
      ck_assert(isnan(y[i]) && isnan(z[i]));
      continue;
    }
    ck_assert_msg(h[i] == want, "element %zu: packed 0x%04x, want 0x%04x", i, h[i], want);
    ck_assert_msg(f32_bits(y[i]) == f32_bits(back) && f32_bits(z[i]) == f32_bits(back),
                  "element %zu (%a): round_to %a, round trip %a, want %a", i, x[i], y[i], z[i],
                  back);
  }
  /* rounding is idempotent: a second round_to changes nothing (what makes recompute bitwise) */
  memcpy(z, y, n * sizeof *z);
  ops->round_to(dev.ctx, z, dt, n);
  ck_assert_int_eq(memcmp(y, z, n * sizeof *z), 0);
  ck_assert_int_eq(ops->convert(dev.ctx, h, LOOM_BF16, h, LOOM_F16, 4), LOOM_UNSUPPORTED);
  free(x), free(y), free(z), free(h);
  loom__dev_close(&dev);
}

START_TEST(device_bf16_paths) { check_device_paths(LOOM_BF16); }
END_TEST
START_TEST(device_f16_paths) { check_device_paths(LOOM_F16); }
END_TEST
START_TEST(device_f16_paths_without_f16c) {
  setenv("LOOM_NO_F16C", "1", 1); /* this forked test only: the scalar routines */
  check_device_paths(LOOM_F16);
}
END_TEST

static Suite *convert_suite(void) {
  Suite *s = suite_create("convert");
  check_add_tcase(s, "rounding",
                  CHECK_TESTS(bf16_round_to_nearest_even, f16_scalar_matches_hardware,
                              device_bf16_paths, device_f16_paths, device_f16_paths_without_f16c),
                  NULL, NULL, 120);
  return s;
}

int main(void) {
  return check_run_suite(convert_suite(), CK_FORK);
}
