/* Internal to the device conformance suite (`loom conformance --device`): the suite's state,
 * the shapes, and the helpers its checks share (device_suite.c). device_conformance.c runs
 * the suite; device_checks_gpt.c checks the GPT kernels at one shape, device_checks_classifier.c
 * the fused classifier, device_checks_vector.c the memory, vector and 16-bit slots,
 * device_checks_acts16.c the 16-bit activation kernels (ABI 1.8). */
#ifndef LOOM_CORE_DEVICE_SUITE_H
#define LOOM_CORE_DEVICE_SUITE_H

#include <loom/device_v1.h>
#include <stddef.h>
#include <stdint.h>

#define U32 0x1p-24    /* fp32 unit roundoff */
#define U_TF32 0x1p-11 /* TF32 (10 explicit mantissa bits) */
#define U_BF16 0x1p-8  /* a bf16 store's relative rounding (8 significant bits) */
#define U_F16 0x1p-11  /* an fp16 store's (11 significant bits) */
#define LAMBDA 6.0     /* the probabilistic bound's lambda (docs/tolerances.md) */

typedef struct dc_suite {
  const loom_device_v1 *ops;
  void *ctx;
  double u_gemm;      /* unit roundoff of GEMM products: fp32 or TF32 */
  int passed, failed, skipped;
  double worst_ratio; /* max over checks of measured / bound */
  char worst_name[128];
  double worst16_ratio; /* the same over checks with a 16-bit store (dc_compare16: near 1 by
                         * construction when an output's largest element rounds by a half ulp) */
  char worst16_name[128];
  uint64_t rng;
  loom_dtype dtype;   /* inputs representable in this dtype (the pass) */
} dc_suite;

/* One model shape: micro-batch B, sequence T, channels C, heads NH, vocabulary V. */
typedef struct dc_shape {
  const char *name;
  int B, T, C, NH, V;
} dc_shape;

/* lambda * sqrt(n) * u: the bound of an n-term fp32 computation (docs/tolerances.md). */
double dc_tol(double u, double n);
/* One result line: "PASS|FAIL|SKIP  NAME  detail". */
void dc_line(const char *status, const char *name, const char *detail);
/* Inputs: uniform in [-1, 1) (the suite's own generator, seeded), n floats times scale rounded
 * to the pass's dtype; n token ids < V (every ignore_every-th one -1 when non-zero); a double
 * copy. All malloc'd: the caller frees. */
double dc_uniform(dc_suite *s);
float *dc_rand_f(dc_suite *s, size_t n, double scale);
int32_t *dc_rand_tok(dc_suite *s, size_t n, int V, int ignore_every);
double *dc_to_d(const float *x, size_t n);
/* Device buffers: a copy of `host` (NULL: zero-filled) of `bytes`; n floats back to a malloc'd
 * host array (after synchronize); free (NULL is a no-op). */
void *dc_up(dc_suite *s, const void *host, size_t bytes);
float *dc_down(dc_suite *s, const void *dev, size_t n);
void dc_dfree(dc_suite *s, void *p);
/* Check one output tensor: max|got - ref| / max|ref| <= dc_tol(u, red_len); prints the line
 * and counts it. */
void dc_compare(dc_suite *s, const char *name, const float *got, const double *ref, size_t n,
                double red_len, double u);
/* The same with one 16-bit store after the fp32 arithmetic: the bound grows by u16 (1 + bound),
 * u16 = U_BF16 or U_F16 (device_checks_acts16.c); u16 = 0 is dc_compare. */
void dc_compare16(dc_suite *s, const char *name, const float *got, const double *ref, size_t n,
                  double red_len, double u, double u16);
/* Bitwise equality of n floats (-0 vs +0 and NaN payloads count); one line, whose FAIL detail
 * reads "element i: got, <what> want". */
void dc_same_bits(dc_suite *s, const char *name, const float *got, const float *want, size_t n,
                  const char *what);
/* 1 if the slot is set; else a FAIL line (the GPT needs it) and 0. */
int dc_have(dc_suite *s, const char *name, const void *slot);

/* The GPT kernels at one shape (device_checks_gpt.c). */
void dc_check_gpt(dc_suite *s, const dc_shape *sh);
/* The fused classifier (ABI 1.4 crossentropy_fused) at one shape: against the reference and
 * bitwise against the separate kernels; SKIP where the slot is NULL (device_checks_classifier.c). */
void dc_check_fused_classifier(dc_suite *s, const dc_shape *sh);
/* ABI 1.8's 16-bit activation kernels (table t, of dtype s->dtype: the inputs are rounded to it)
 * at one shape: against the reference and bitwise against the fp32 slots plus round_to
 * (device_checks_acts16.c). */
void dc_check_acts16(dc_suite *s, const loom_device_acts16_v1 *t, const dc_shape *sh);
/* Memory, vector kernels, AdamW and 16-bit storage at length n (device_checks_vector.c). */
void dc_check_vectors(dc_suite *s, size_t n);

#endif
