/* The device conformance suite's shared helpers: result lines, bounds, seeded inputs, device
 * buffers and the per-tensor comparison (device_suite.h). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device_reference.h"
#include "device_suite.h"
#include "device/device.h"

double dc_tol(double u, double n) { return LAMBDA * sqrt(n < 1 ? 1 : n) * u; }

void dc_line(const char *status, const char *name, const char *detail) {
  printf("%-4s  %-44s %s\n", status, name, detail);
  fflush(stdout);
}

/* ---- inputs ---- */
double dc_uniform(dc_suite *s) { /* [-1, 1), splitmix64 */
  uint64_t z = (s->rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (double)(z >> 11) * 0x1p-52 - 1.0;
}
float *dc_rand_f(dc_suite *s, size_t n, double scale) {
  float *x = malloc((n ? n : 1) * sizeof *x);
  for (size_t i = 0; i < n; i++) x[i] = ref_round((float)(dc_uniform(s) * scale), s->dtype);
  return x;
}
int32_t *dc_rand_tok(dc_suite *s, size_t n, int V, int ignore_every) {
  int32_t *x = malloc((n ? n : 1) * sizeof *x);
  for (size_t i = 0; i < n; i++)
    x[i] = ignore_every && i % (size_t)ignore_every == 1
               ? -1 : (int32_t)((dc_uniform(s) + 1.0) * 0.5 * V) % V;
  return x;
}
double *dc_to_d(const float *x, size_t n) {
  double *d = malloc((n ? n : 1) * sizeof *d);
  for (size_t i = 0; i < n; i++) d[i] = x[i];
  return d;
}

/* ---- device buffers ---- */
void *dc_up(dc_suite *s, const void *host, size_t bytes) {
  void *p = s->ops->alloc(s->ctx, bytes ? bytes : 4);
  if (p && host && bytes) s->ops->from_host(s->ctx, p, host, bytes);
  return p;
}
float *dc_down(dc_suite *s, const void *dev, size_t n) {
  float *h = malloc((n ? n : 1) * sizeof *h);
  if (s->ops->synchronize) s->ops->synchronize(s->ctx);
  s->ops->to_host(s->ctx, h, dev, n * sizeof *h);
  return h;
}
void dc_dfree(dc_suite *s, void *p) {
  if (p) s->ops->free(s->ctx, p);
}

/* ---- comparison ---- */
void dc_compare(dc_suite *s, const char *name, const float *got, const double *ref, size_t n,
                    double red_len, double u) {
  dc_compare16(s, name, got, ref, n, red_len, u, 0);
}

void dc_compare16(dc_suite *s, const char *name, const float *got, const double *ref, size_t n,
                  double red_len, double u, double u16) {
  double maxref = 0, maxdiff = 0;
  int nonfinite = 0;
  for (size_t i = 0; i < n; i++) {
    if (fabs(ref[i]) > maxref) maxref = fabs(ref[i]);
    if (!isfinite(got[i])) nonfinite = 1;
    double d = fabs((double)got[i] - ref[i]);
    if (d > maxdiff) maxdiff = d;
  }
  double rel = maxref > 0 ? maxdiff / maxref : maxdiff, bound = dc_tol(u, red_len);
  bound += u16 * (1 + bound);
  char detail[256];
  snprintf(detail, sizeof detail, "max rel %.2e <= %.2e (n=%.0f%s%s, %zu elements)", rel, bound,
           red_len, u == U32 ? "" : ", tf32", u16 == 0 ? "" : u16 == U_BF16 ? ", bf16 store"
           : ", fp16 store", n);
  int ok = !nonfinite && rel <= bound;
  if (nonfinite) snprintf(detail, sizeof detail, "non-finite output (%zu elements)", n);
  dc_line(ok ? "PASS" : "FAIL", name, detail);
  ok ? s->passed++ : s->failed++;
  double *worst = u16 ? &s->worst16_ratio : &s->worst_ratio;
  if (bound > 0 && rel / bound > *worst) {
    *worst = rel / bound;
    snprintf(u16 ? s->worst16_name : s->worst_name, sizeof s->worst_name, "%s", name);
  }
}

void dc_same_bits(dc_suite *s, const char *name, const float *got, const float *want, size_t n,
                  const char *what) {
  char detail[256];
  size_t bad = n;
  for (size_t i = 0; i < n && bad == n; i++)
    if (memcmp(&got[i], &want[i], sizeof(float)) != 0) bad = i;
  if (bad == n) {
    snprintf(detail, sizeof detail, "bitwise equal (%zu elements)", n);
    dc_line("PASS", name, detail);
    s->passed++;
    return;
  }
  snprintf(detail, sizeof detail, "element %zu: %a, %s %a", bad, (double)got[bad], what,
           (double)want[bad]);
  dc_line("FAIL", name, detail);
  s->failed++;
}

int dc_have(dc_suite *s, const char *name, const void *slot) {
  if (slot) return 1;
  char n[128];
  snprintf(n, sizeof n, "%s", name);
  dc_line("FAIL", n, "slot is NULL: the GPT needs it");
  s->failed++;
  return 0;
}
