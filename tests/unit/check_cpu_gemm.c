/* Check suite for the CPU device's GEMMs on oneDNN (core/device/cpu_gemm.c).
 *
 * Every form the kernels issue — op(A) and op(B) transposed or not, padded leading dimensions,
 * alpha, beta 0 (C's old contents ignored, NaN included) and 1 (accumulate), a bias row — at odd
 * sizes against a float64 reference, elementwise within Higham's deterministic bound
 * gamma_{K+2} * (|alpha| sum_k |a_ik b_kj| + |beta c_ij| + |bias_j|) (fp_tolerance.h: any
 * summation order, so it holds for every oneDNN kernel and thread split, and a wrong operand or
 * layout is off by O(1)). The bf16 path: with bf16-representable operands the products are exact
 * and only the fp32 accumulation rounds, so the same bound holds; other operands are rounded to
 * nearest even first (the reference then uses the rounded values); lowp = 0 calls stay fp32,
 * bitwise those of a context that never heard of bf16. Where oneDNN reports no bf16 units
 * (ctest unit.check_cpu_gemm_no_bf16 pins ONEDNN_MAX_CPU_ISA=AVX512_CORE) the operands stay
 * fp32 and lowp calls are bitwise the fp32 ones. loom__cpu_gemm_w's bf16 / fp16 B (padded) on
 * every path; loom__cpu_gemm_t's 16-bit A, B and C bitwise against the widened fp32 call rounded.
 * Also the dnnl_sgemm fallback on every form,
 * K = 0, more distinct shapes than the primitive cache holds, and the start-up line. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/cpu_kernels.h"
#include "device/device.h"
#include "fp_tolerance.h"
#include "support/check_suite.h"

static loom_dev dev;
static uint64_t rng_state = 88172645463325252ull;

static float urand(void) { /* xorshift64: [-1, 1) */
  rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
  return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void open_cpu(void) {
  char err[256];
  ck_assert_int_eq(loom__dev_open(&dev, loom__cpu_device(), "{}", 0, err, sizeof err), LOOM_OK);
}
static void close_cpu(void) { loom__dev_close(&dev); }
static cpu_gemm *gemm(void) { return loom__cpu_gemm_of(dev.ctx); }

static float *rand_floats(size_t n, int bf16) {
  float *x = malloc(n * sizeof *x);
  for (size_t i = 0; i < n; i++)
    x[i] = bf16 ? loom__bf16_to_f32(loom__f32_to_bf16(urand())) : urand();
  return x;
}

/* Element (r, c) of op(X) for X stored with leading dimension ld, transposed or not. */
static double at(const float *x, int t, int ld, int r, int c) {
  return t ? x[(size_t)c * ld + r] : x[(size_t)r * ld + c];
}

typedef struct form {
  int ta, tb, M, N, K;
  float alpha, beta;
  int bias;
} form;

/* Run one form through loom__cpu_gemm and check it against float64; `round_ops`: the
 * reference rounds A and B to bf16 (what the bf16 path computes on). Returns the worst
 * error / bound ratio. */
static double check_form(const form *f, int operand_bf16, int lowp, int round_ops) {
  const int ar = f->ta ? f->K : f->M, ac = f->ta ? f->M : f->K, lda = ac + 3;
  const int br = f->tb ? f->N : f->K, bc = f->tb ? f->K : f->N, ldb = bc + 5, ldc = f->N + 2;
  float *A = rand_floats((size_t)ar * lda, operand_bf16);
  float *B = rand_floats((size_t)br * ldb, operand_bf16);
  float *C = rand_floats((size_t)f->M * ldc, 0), *C0 = malloc((size_t)f->M * ldc * sizeof *C0);
  float *bias = f->bias ? rand_floats((size_t)f->N, 0) : NULL;
  if (f->beta == 0.0f)
    for (size_t i = 0; i < (size_t)f->M * ldc; i++) C[i] = NAN; /* must be ignored */
  memcpy(C0, C, (size_t)f->M * ldc * sizeof *C0);
  loom__cpu_gemm(gemm(), f->ta, f->tb, f->M, f->N, f->K, f->alpha, A, lda, B, ldb, f->beta, C,
                 ldc, bias, lowp);
  double worst = 0.0;
  for (int i = 0; i < f->M; i++)
    for (int j = 0; j < f->N; j++) {
      double sum = 0.0, mag = 0.0;
      for (int k = 0; k < f->K; k++) {
        double a = at(A, f->ta, lda, i, k), b = at(B, f->tb, ldb, k, j);
        if (round_ops) {
          a = loom__bf16_to_f32(loom__f32_to_bf16((float)a));
          b = loom__bf16_to_f32(loom__f32_to_bf16((float)b));
        }
        sum += a * b;
        mag += fabs(a * b);
      }
      double ref = f->alpha * sum, bound_mag = fabs(f->alpha) * mag;
      if (f->beta != 0.0f) {
        ref += f->beta * (double)C0[(size_t)i * ldc + j];
        bound_mag += fabs(f->beta * (double)C0[(size_t)i * ldc + j]);
      }
      if (bias) ref += bias[j], bound_mag += fabs((double)bias[j]);
      double err = fabs((double)C[(size_t)i * ldc + j] - ref);
      double bound = fp32_gamma(f->K + 2) * bound_mag + 1e-30;
      ck_assert_msg(err <= bound, "GEMM ta %d tb %d %dx%dx%d alpha %g beta %g bias %d: C[%d][%d] "
                    "= %.9g, float64 %.9g (error %.3g > bound %.3g)", f->ta, f->tb, f->M, f->N,
                    f->K, f->alpha, f->beta, f->bias, i, j, C[(size_t)i * ldc + j], ref, err,
                    bound);
      if (err / bound > worst) worst = err / bound;
    }
  /* the padding columns of C are never written */
  for (int i = 0; i < f->M; i++)
    for (int j = f->N; j < ldc; j++)
      ck_assert_int_eq(memcmp(&C[(size_t)i * ldc + j], &C0[(size_t)i * ldc + j], sizeof *C), 0);
  free(A), free(B), free(C), free(C0), free(bias);
  return worst;
}

static const form forms[] = {
    {0, 1, 37, 29, 53, 1.0f, 0.0f, 1}, /* matmul_forward: inp @ W^T + bias */
    {0, 0, 37, 29, 53, 1.0f, 1.0f, 0}, /* matmul_backward dinp += dout @ W */
    {1, 0, 29, 31, 64, 1.0f, 1.0f, 0}, /* matmul_backward dweight += dout^T @ inp */
    {0, 1, 16, 16, 8, 0.35355339f, 0.0f, 0}, /* attention scores, scaled */
    {1, 1, 7, 9, 11, 1.0f, 1.0f, 0},
    {0, 0, 1, 1, 1, 1.0f, 0.0f, 1},
    {0, 1, 130, 257, 96, 1.0f, 0.0f, 1}, /* above the threading threshold */
};

START_TEST(fp32_forms) {
  for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
    double w = check_form(&forms[i], 0, 1, 0);
    printf("fp32 ta %d tb %d %dx%dx%d: worst error / bound %.3g\n", forms[i].ta, forms[i].tb,
           forms[i].M, forms[i].N, forms[i].K, w);
  }
}
END_TEST

START_TEST(bf16_operands) {
  dev.ops->set_compute_dtype(dev.ctx, LOOM_BF16);
  const int units = loom__cpu_gemm_has_bf16();
  ck_assert_int_eq(loom__cpu_gemm_operand_dtype(gemm()), units ? LOOM_BF16 : LOOM_F32);
  printf("oneDNN ISA %s: bf16 units %s\n", loom__cpu_gemm_isa(), units ? "yes" : "no");
  for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
    check_form(&forms[i], 1, 1, 0); /* representable: exact products */
    check_form(&forms[i], 0, 1, units); /* not: rounded to nearest even first where bf16 runs */
  }
  dev.ops->set_compute_dtype(dev.ctx, LOOM_F32);
  ck_assert_int_eq(loom__cpu_gemm_operand_dtype(gemm()), LOOM_F32);
}
END_TEST

/* The same call in two contexts, one told bf16: bitwise equal unless both lowp and bf16 units. */
static int same_bits(int lowp) {
  loom_dev other;
  char err[256];
  ck_assert_int_eq(loom__dev_open(&other, loom__cpu_device(), "{}", 0, err, sizeof err), LOOM_OK);
  other.ops->set_compute_dtype(other.ctx, LOOM_BF16);
  const int M = 33, N = 40, K = 77;
  float *A = rand_floats((size_t)M * K, 1), *B = rand_floats((size_t)N * K, 1);
  float *c1 = calloc((size_t)M * N, sizeof *c1), *c2 = calloc((size_t)M * N, sizeof *c2);
  loom__cpu_gemm(gemm(), 0, 1, M, N, K, 1.0f, A, K, B, K, 0.0f, c1, N, NULL, lowp);
  loom__cpu_gemm(loom__cpu_gemm_of(other.ctx), 0, 1, M, N, K, 1.0f, A, K, B, K, 0.0f, c2, N, NULL,
                 lowp);
  int same = memcmp(c1, c2, (size_t)M * N * sizeof *c1) == 0;
  free(A), free(B), free(c1), free(c2);
  loom__dev_close(&other);
  return same;
}

START_TEST(fp32_unless_lowp_and_units) {
  ck_assert_msg(same_bits(0), "a lowp = 0 GEMM changed under a bf16 compute dtype");
  if (!loom__cpu_gemm_has_bf16())
    ck_assert_msg(same_bits(1), "no bf16 units, yet a lowp GEMM left fp32");
}
END_TEST

START_TEST(fallback_forms) {
  loom__cpu_gemm_force_fallback(gemm(), 1); /* dnnl_sgemm, the path when oneDNN refuses */
  for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) check_form(&forms[i], 0, 1, 0);
  dev.ops->set_compute_dtype(dev.ctx, LOOM_BF16); /* the fallback is fp32 whatever the dtype */
  for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) check_form(&forms[i], 0, 1, 0);
  loom__cpu_gemm_force_fallback(gemm(), 0);
}
END_TEST

/* loom__cpu_gemm_w: B given as bf16 / fp16 elements with a padded leading dimension, on the
 * bf16 path (compute dtype bf16), the fp32 path (widened) and the fallback, against float64 on
 * the widened values. */
static void check_typed_b(loom_dtype bdt, int fallback) {
  const int M = 19, N = 23, K = 41, lda = K + 2, ldb = K + 7, ldc = N + 1; /* tb = 1: B is (N,K) */
  float *A = rand_floats((size_t)M * lda, 1), *C = calloc((size_t)M * ldc, sizeof *C);
  uint16_t *B16 = malloc((size_t)N * ldb * sizeof *B16);
  float *Bw = malloc((size_t)N * ldb * sizeof *Bw), *bias = rand_floats((size_t)N, 0);
  for (size_t i = 0; i < (size_t)N * ldb; i++) {
    float v = urand();
    B16[i] = bdt == LOOM_BF16 ? loom__f32_to_bf16(v) : loom__f32_to_f16(v);
    Bw[i] = bdt == LOOM_BF16 ? loom__bf16_to_f32(B16[i]) : loom__f16_to_f32(B16[i]);
  }
  loom__cpu_gemm_force_fallback(gemm(), fallback);
  loom__cpu_gemm_w(gemm(), 0, 1, M, N, K, 1.0f, A, lda, B16, bdt, ldb, 0.0f, C, ldc, bias, 1);
  loom__cpu_gemm_force_fallback(gemm(), 0);
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double sum = bias[j], mag = fabs((double)bias[j]);
      for (int k = 0; k < K; k++) {
        double t = (double)A[(size_t)i * lda + k] * Bw[(size_t)j * ldb + k];
        sum += t, mag += fabs(t);
      }
      double err = fabs((double)C[(size_t)i * ldc + j] - sum);
      ck_assert_msg(err <= fp32_gamma(K + 2) * mag + 1e-30,
                    "gemm_w %s B (fallback %d): C[%d][%d] = %.9g, float64 %.9g",
                    bdt == LOOM_BF16 ? "bf16" : "fp16", fallback, i, j, C[(size_t)i * ldc + j],
                    sum);
    }
  free(A), free(C), free(B16), free(Bw), free(bias);
}

START_TEST(typed_b) {
  for (int dt = 0; dt < 2; dt++) /* fp32 compute dtype, then bf16 (the bf16 path with units) */
    for (int fb = 0; fb < 2; fb++) {
      dev.ops->set_compute_dtype(dev.ctx, dt ? LOOM_BF16 : LOOM_F32);
      check_typed_b(LOOM_BF16, fb);
      check_typed_b(LOOM_F16, fb);
    }
}
END_TEST

/* loom__cpu_gemm_t (ABI 1.8's 16-bit activations): A, B and C as dt elements with padded
 * leading dimensions, every form, on the bf16 path (compute dtype bf16 with units: oneDNN
 * writes the 16-bit C itself), the fp32 path and the fallback: bitwise loom__cpu_gemm on the
 * widened (exact) operands with C's widened values, then C rounded to nearest even; C's padding
 * untouched. */
static void check_typed_abc(const form *f, loom_dtype dt, int fallback) {
  const int ar = f->ta ? f->K : f->M, ac = f->ta ? f->M : f->K, lda = ac + 3;
  const int br = f->tb ? f->N : f->K, bc = f->tb ? f->K : f->N, ldb = bc + 5, ldc = f->N + 2;
  const size_t na = (size_t)ar * lda, nb = (size_t)br * ldb, nc = (size_t)f->M * ldc;
  uint16_t *a16 = malloc(na * 2), *b16 = malloc(nb * 2), *c16 = malloc(nc * 2);
  float *a = malloc(na * 4), *b = malloc(nb * 4), *c = malloc(nc * 4);
  float *bias = f->bias ? rand_floats((size_t)f->N, 0) : NULL;
  uint16_t *x16[3] = {a16, b16, c16};
  float *x[3] = {a, b, c};
  const size_t n[3] = {na, nb, nc};
  for (int t = 0; t < 3; t++)
    for (size_t i = 0; i < n[t]; i++) {
      x16[t][i] = dt == LOOM_BF16 ? loom__f32_to_bf16(urand()) : loom__f32_to_f16(urand());
      x[t][i] = dt == LOOM_BF16 ? loom__bf16_to_f32(x16[t][i]) : loom__f16_to_f32(x16[t][i]);
    }
  uint16_t *c0 = malloc(nc * 2);
  memcpy(c0, c16, nc * 2);
  loom__cpu_gemm_force_fallback(gemm(), fallback);
  loom__cpu_gemm(gemm(), f->ta, f->tb, f->M, f->N, f->K, f->alpha, a, lda, b, ldb, f->beta, c,
                 ldc, bias, 1);
  loom__cpu_gemm_t(gemm(), f->ta, f->tb, f->M, f->N, f->K, f->alpha, a16, dt, lda, b16, dt, ldb,
                   f->beta, c16, dt, ldc, bias, 1);
  loom__cpu_gemm_force_fallback(gemm(), 0);
  for (int i = 0; i < f->M; i++)
    for (int j = 0; j < ldc; j++) {
      size_t e = (size_t)i * ldc + j;
      uint16_t want = j >= f->N ? c0[e] : dt == LOOM_BF16 ? loom__f32_to_bf16(c[e])
                                                           : loom__f32_to_f16(c[e]);
      ck_assert_msg(c16[e] == want, "gemm_t %s ta %d tb %d %dx%dx%d beta %g (fallback %d): "
                    "C[%d][%d] bits %04x, want %04x", dt == LOOM_BF16 ? "bf16" : "fp16", f->ta,
                    f->tb, f->M, f->N, f->K, f->beta, fallback, i, j, c16[e], want);
    }
  free(a16), free(b16), free(c16), free(c0), free(a), free(b), free(c), free(bias);
}

/* the model's long reductions, where oneDNN blocks K (and may keep a bf16 C's partial sums in
 * an fp32 buffer): the head's dinp (K = V), mlp.proj (K = 4C), a weight gradient (K = B*T) */
static const form long_k_forms[] = {
    {0, 0, 33, 40, 8192, 1.0f, 1.0f, 0},
    {0, 1, 64, 256, 1024, 1.0f, 0.0f, 1},
    {1, 0, 64, 48, 4096, 1.0f, 1.0f, 0},
};

START_TEST(typed_abc) {
  for (int cdt = 0; cdt < 2; cdt++)
    for (int fb = 0; fb < 2; fb++) {
      dev.ops->set_compute_dtype(dev.ctx, cdt ? LOOM_BF16 : LOOM_F32);
      for (size_t i = 0; i < sizeof long_k_forms / sizeof long_k_forms[0]; i++) {
        check_typed_abc(&long_k_forms[i], LOOM_BF16, fb);
        if (!cdt) check_typed_abc(&long_k_forms[i], LOOM_F16, fb);
      }
      for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        check_typed_abc(&forms[i], LOOM_BF16, fb);
        /* fp16 values under the bf16 compute dtype would be a caller's contradiction (the
         * fp32 reference would pack them to bf16); fp16 runs set the fp16 compute dtype */
        if (!cdt) check_typed_abc(&forms[i], LOOM_F16, fb);
      }
    }
}
END_TEST

/* Results below 2^-126 (fp32 subnormals) into a bf16 C on the bf16 path: round_to keeps them;
 * the bf16 hardware (VDPBF16PS, VCVTNEPS2BF16) flushes subnormal inputs and results to +-0 —
 * the fp32-C bf16 GEMM too — which device_v1.h's acts16 semantics allow. Either, and nothing
 * else; which one ran is printed. */
START_TEST(typed_subnormal_results) {
  dev.ops->set_compute_dtype(dev.ctx, LOOM_BF16);
  enum { M = 4, N = 4, K = 8 };
  uint16_t a16[M * K], b16[K * N], c16[M * N];
  float a[M * K], b[K * N], c[M * N];
  for (int i = 0; i < M * K; i++) a[i] = ldexpf(1.0f + (float)(i % 5) / 8.0f, -70);
  for (int i = 0; i < K * N; i++) b[i] = ldexpf(1.0f + (float)(i % 3) / 4.0f, -65);
  for (int i = 0; i < M * K; i++) a16[i] = loom__f32_to_bf16(a[i]);
  for (int i = 0; i < K * N; i++) b16[i] = loom__f32_to_bf16(b[i]);
  for (int i = 0; i < M; i++) /* exact: the products and their sum are fp32 subnormals */
    for (int j = 0; j < N; j++) {
      double sum = 0.0;
      for (int k = 0; k < K; k++) sum += (double)a[i * K + k] * b[k * N + j];
      c[i * N + j] = (float)sum;
    }
  loom__cpu_gemm_t(gemm(), 0, 0, M, N, K, 1.0f, a16, LOOM_BF16, K, b16, LOOM_BF16, N, 0.0f, c16,
                   LOOM_BF16, N, NULL, 1);
  int kept = 0, flushed = 0;
  for (int i = 0; i < M * N; i++) {
    ck_assert(fabsf(c[i]) < 0x1p-126f && c[i] != 0.0f); /* the case under test */
    uint16_t want = loom__f32_to_bf16(c[i]);
    ck_assert_msg(c16[i] == want || (c16[i] & 0x7fff) == 0, "C[%d] bits %04x: neither round_to's "
                  "%04x nor a flushed zero", i, c16[i], want);
    kept += c16[i] == want, flushed += c16[i] != want;
  }
  printf("bf16 C of fp32-subnormal results (%s): %d kept as round_to does, %d flushed to zero\n",
         loom__cpu_gemm_isa(), kept, flushed);
}
END_TEST

START_TEST(k_zero) {
  float C[6] = {1, 2, 3, 4, 5, 6}, bias[3] = {10, 20, 30}, A[1] = {0}, B[1] = {0};
  loom__cpu_gemm(gemm(), 0, 1, 2, 3, 0, 1.0f, A, 1, B, 1, 1.0f, C, 3, bias, 1);
  const float want[6] = {11, 22, 33, 14, 25, 36};
  ck_assert_int_eq(memcmp(C, want, sizeof C), 0);
  loom__cpu_gemm(gemm(), 0, 1, 2, 3, 0, 1.0f, A, 1, B, 1, 0.0f, C, 3, NULL, 1);
  for (int i = 0; i < 6; i++) ck_assert(C[i] == 0.0f);
}
END_TEST

START_TEST(more_shapes_than_the_cache) {
  /* 300 distinct shapes (the cache holds 256), then the first ones again */
  for (int round = 0; round < 2; round++)
    for (int s = 0; s < (round ? 8 : 300); s++) {
      form f = {0, 1, 2 + s % 7, 3 + s / 7, 4, 1.0f, 0.0f, s & 1};
      check_form(&f, 0, 1, 0);
    }
}
END_TEST

START_TEST(describe_line) {
  char line[160];
  ck_assert_int_eq(loom__cpu_describe(&dev, line, sizeof line), 1);
  printf("loom: cpu: %s\n", line);
  ck_assert_ptr_nonnull(strstr(line, "oneDNN "));
  ck_assert_ptr_nonnull(strstr(line, loom__cpu_gemm_isa()));
  ck_assert_ptr_nonnull(strstr(line, "GEMM operands fp32"));
  loom_dev none = {0};
  ck_assert_int_eq(loom__cpu_describe(&none, line, sizeof line), 0);
}
END_TEST

int main(void) {
  const check_case cases[] = {
      {"fp32_forms", fp32_forms},
      {"bf16_operands", bf16_operands},
      {"fp32_unless_lowp_and_units", fp32_unless_lowp_and_units},
      {"fallback_forms", fallback_forms},
      {"typed_b", typed_b},
      {"typed_abc", typed_abc},
      {"typed_subnormal_results", typed_subnormal_results},
      {"k_zero", k_zero},
      {"more_shapes_than_the_cache", more_shapes_than_the_cache},
      {"describe_line", describe_line},
  };
  return check_run_suite(check_case_suite("cpu_gemm", CHECK_CASES(cases), open_cpu, close_cpu, 60),
                         CK_FORK);
}
