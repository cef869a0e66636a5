/* The device conformance suite's memory, vector, AdamW and 16-bit storage checks at one
 * length (device_suite.h). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device_reference.h"
#include "device_suite.h"
#include "device/device.h"

void dc_check_vectors(dc_suite *s, size_t n) {
  const loom_device_v1 *o = s->ops;
  char nm[96];
#define VNAME(k) (snprintf(nm, sizeof nm, "%s.n%zu", k, n), nm)
  float *x = dc_rand_f(s, n, 3), *y = dc_rand_f(s, n, 3);
  void *dx = dc_up(s, x, n * 4), *dy = dc_up(s, y, n * 4);
  /* memory: alloc is zero-filled; copy, to_host / from_host are exact */
  void *dz = dc_up(s, NULL, n * 4);
  float *got = dc_down(s, dz, n);
  int zero = 1;
  for (size_t i = 0; i < n; i++) zero &= got[i] == 0.0f;
  free(got);
  o->copy(s->ctx, dz, dx, n * 4);
  got = dc_down(s, dz, n);
  int same = memcmp(got, x, n * 4) == 0;
  free(got);
  int cleared = 1;
  if (o->memset_zero) {
    o->memset_zero(s->ctx, dz, n * 4);
    got = dc_down(s, dz, n);
    for (size_t i = 0; i < n; i++) cleared &= got[i] == 0.0f;
    free(got);
  }
  dc_line(zero && same && cleared ? "PASS" : "FAIL", VNAME("memory"),
       zero ? (same ? (cleared ? "alloc zero-filled, copy/to_host/from_host/memset_zero exact"
                               : "memset_zero left non-zero values")
                    : "copy or to_host/from_host changed bits")
            : "alloc is not zero-filled");
  (zero && same && cleared) ? s->passed++ : s->failed++;
  dc_dfree(s, dz);

  double *ref = malloc(n * sizeof *ref);
  if (dc_have(s, "scale", (void *)o->scale) && dc_have(s, "axpy", (void *)o->axpy)) {
    o->scale(s->ctx, dx, 0.37f, n);
    for (size_t i = 0; i < n; i++) ref[i] = (double)x[i] * (double)0.37f;
    got = dc_down(s, dx, n);
    dc_compare(s, VNAME("scale"), got, ref, n, 1, U32);
    free(got);
    s->ops->from_host(s->ctx, dx, x, n * 4);
    o->axpy(s->ctx, dy, -1.25f, dx, n);
    for (size_t i = 0; i < n; i++) ref[i] = (double)y[i] - 1.25 * x[i];
    got = dc_down(s, dy, n);
    dc_compare(s, VNAME("axpy"), got, ref, n, 2, U32);
    free(got);
    s->ops->from_host(s->ctx, dy, y, n * 4);
  }
  if (dc_have(s, "sum_squares", (void *)o->sum_squares)) {
    double r = 0;
    for (size_t i = 0; i < n; i++) r += (double)x[i] * x[i];
    float g = (float)o->sum_squares(s->ctx, dx, n);
    dc_compare(s, VNAME("sum_squares"), &g, &r, 1, (double)n, U32);
  }
  if (dc_have(s, "all_finite", (void *)o->all_finite)) {
    int a = o->all_finite(s->ctx, dx, n);
    float bad[2] = {INFINITY, NAN};
    int b[2];
    for (int k = 0; k < 2; k++) {
      s->ops->from_host(s->ctx, (char *)dx + (n / 2) * 4, &bad[k], 4);
      b[k] = o->all_finite(s->ctx, dx, n);
    }
    s->ops->from_host(s->ctx, dx, x, n * 4);
    int ok = a == 1 && b[0] == 0 && b[1] == 0;
    dc_line(ok ? "PASS" : "FAIL", VNAME("all_finite"),
         ok ? "1 on finite data, 0 with one +inf, 0 with one NaN" : "wrong answer");
    ok ? s->passed++ : s->failed++;
  }
  if (dc_have(s, "adamw", (void *)o->adamw)) {
    /* two steps from m = v = 0 (bias correction at t = 1, 2), weight decay and a grad scale:
     * ~16 roundings per element per step */
    float *g = dc_rand_f(s, n, 1);
    void *dg = dc_up(s, g, n * 4), *dm = dc_up(s, NULL, n * 4), *dv = dc_up(s, NULL, n * 4);
    double *rp = dc_to_d(x, n), *rm = calloc(n, 8), *rv = calloc(n, 8);
    for (int t = 1; t <= 2; t++) {
      o->adamw(s->ctx, dx, dg, dm, dv, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, t);
      ref_adamw(rp, rm, rv, g, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, t);
    }
    got = dc_down(s, dx, n);
    dc_compare(s, VNAME("adamw.param"), got, rp, n, 32, U32);
    free(got);
    got = dc_down(s, dv, n);
    dc_compare(s, VNAME("adamw.v"), got, rv, n, 32, U32);
    free(got);
    s->ops->from_host(s->ctx, dx, x, n * 4);
    free(g), free(rp), free(rm), free(rv);
    dc_dfree(s, dg), dc_dfree(s, dm), dc_dfree(s, dv);
  }
  /* 16-bit storage (ABI 1.3): bitwise against the reference rounding, with the values where
   * rounding is delicate (ties, overflow, subnormals, NaN) in front */
  if (o->round_to && o->convert) {
    static const float special[] = {1.0f + 0x1p-8f, 1.0f + 0x3p-8f, 1.0f + 0x1p-11f,
                                    65504.0f, 65519.0f, 65520.0f, 0x1p-24f, 0x1p-25f,
                                    0x1.8p-25f, 0x1p-130f, 3.3895e38f, INFINITY, -INFINITY,
                                    -0.0f, NAN};
    size_t ns = sizeof special / sizeof special[0];
    float *v = malloc(n * 4);
    memcpy(v, x, n * 4);
    for (size_t i = 0; i < ns && i < n; i++) v[i] = special[i];
    for (int k = 0; k < 2; k++) {
      loom_dtype dt = k ? LOOM_F16 : LOOM_BF16;
      const char *dn = k ? "fp16" : "bf16";
      void *d = dc_up(s, v, n * 4), *h = dc_up(s, NULL, n * 2), *w = dc_up(s, NULL, n * 4);
      o->round_to(s->ctx, d, dt, n);
      float *r1 = dc_down(s, d, n);
      s->ops->from_host(s->ctx, d, v, n * 4);
      int rc = o->convert(s->ctx, h, dt, d, LOOM_F32, n);
      rc |= o->convert(s->ctx, w, LOOM_F32, h, dt, n);
      float *r2 = dc_down(s, w, n);
      size_t bad1 = 0, bad2 = 0, first = n;
      for (size_t i = 0; i < n; i++) {
        float want = ref_round(v[i], dt);
        int ok1 = isnan(want) ? isnan(r1[i]) : memcmp(&want, &r1[i], 4) == 0;
        int ok2 = isnan(want) ? isnan(r2[i]) : memcmp(&want, &r2[i], 4) == 0;
        bad1 += !ok1, bad2 += !ok2;
        if ((!ok1 || !ok2) && first == n) first = i;
      }
      char detail[160];
      snprintf(nm, sizeof nm, "round_to.%s.n%zu", dn, n);
      if (!bad1) snprintf(detail, sizeof detail, "bitwise (ties to even, overflow, subnormals)");
      else snprintf(detail, sizeof detail, "%zu values differ, first %a -> %a, want %a", bad1,
                    (double)v[first], (double)r1[first], (double)ref_round(v[first], dt));
      dc_line(bad1 ? "FAIL" : "PASS", nm, detail);
      bad1 ? s->failed++ : s->passed++;
      snprintf(nm, sizeof nm, "convert.f32-%s-f32.n%zu", dn, n);
      dc_line(bad2 || rc ? "FAIL" : "PASS", nm,
           rc ? "convert returned an error" : bad2 ? "round trip differs from round_to's "
                "reference" : "bitwise: narrowing rounds as round_to, widening is exact");
      (bad2 || rc) ? s->failed++ : s->passed++;
      free(r1), free(r2);
      dc_dfree(s, d), dc_dfree(s, h), dc_dfree(s, w);
    }
    free(v);
  } else {
    dc_line("SKIP", VNAME("round_to/convert"), "slots absent (a backend built before ABI 1.3)");
    s->skipped++;
  }
  free(ref), free(x), free(y);
  dc_dfree(s, dx), dc_dfree(s, dy);
#undef VNAME
}
