/* CPU AdamW: one streaming pass over (param, grad, m, v) per element range.
 *
 *   g = grad * grad_scale;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g g;
 *   param -= lr * ((m / bc1) / (sqrt(v / bc2) + eps) + wd * param)
 *
 * Each element costs three divisions and a square root, so the step is bound by the divider as
 * much as by memory (3,257,856 parameters: 91 MB of traffic, ~3.4 ms on one core at 4 lanes).
 * A plain loop does not vectorise (sqrtf sets errno, and GCC's builtin attributes ignore
 * optimize("no-math-errno")), so the loop is written three times with intrinsics: 16 lanes
 * (AVX-512F), 8 (AVX) and 4 (SSE2, the x86-64 baseline), picked at run time; a scalar loop does
 * the tail (and everything off x86-64). All of them perform the same float operations in the
 * same order per element (the divisions and square roots are IEEE, correctly rounded), so the
 * result is bitwise the scalar loop's on every machine.
 *
 * Floating-point contraction must stay off: an FMA (AVX-512F has them, and GCC contracts
 * intrinsics' products and sums under -ffp-contract=fast) would round differently. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <math.h>
#include <stddef.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define ADAMW_X86 1
#endif

#include "cpu_kernels.h"

typedef struct adamw_coef {
  float lr, beta1, beta2, eps, weight_decay, grad_scale, bc1, bc2;
} adamw_coef;

/* elements [i, n): the reference loop */
static void adamw_scalar(float *restrict param, const float *restrict grad, float *restrict m,
                         float *restrict v, size_t i, size_t n, const adamw_coef *k) {
  for (; i < n; i++) {
    float g = grad[i] * k->grad_scale;
    float mi = k->beta1 * m[i] + (1.0f - k->beta1) * g;
    float vi = k->beta2 * v[i] + (1.0f - k->beta2) * g * g;
    float mhat = mi / k->bc1, vhat = vi / k->bc2;
    param[i] -= k->lr * (mhat / (sqrtf(vhat) + k->eps) + k->weight_decay * param[i]);
    m[i] = mi;
    v[i] = vi;
  }
}

#ifdef ADAMW_X86
/* The vector loops: W lanes of type VT with the ISA's load/store/arith/sqrt; the same
 * expression tree as adamw_scalar. Returns the number of elements done (a multiple of W). */
#define ADAMW_VECTOR_LOOP(W, VT, SET1, LOADU, STOREU, ADD, SUB, MUL, DIV, SQRT)              \
  const VT vb1 = SET1(k->beta1), vb2 = SET1(k->beta2), v1b1 = SET1(1.0f - k->beta1),         \
           v1b2 = SET1(1.0f - k->beta2), vgs = SET1(k->grad_scale), vbc1 = SET1(k->bc1),     \
           vbc2 = SET1(k->bc2), vlr = SET1(k->lr), veps = SET1(k->eps),                      \
           vwd = SET1(k->weight_decay);                                                      \
  size_t i = 0;                                                                              \
  for (; i + (W) <= n; i += (W)) {                                                           \
    VT g = MUL(LOADU(grad + i), vgs);                                                        \
    VT mi = ADD(MUL(vb1, LOADU(m + i)), MUL(v1b1, g));                                       \
    VT vi = ADD(MUL(vb2, LOADU(v + i)), MUL(MUL(v1b2, g), g));                               \
    VT mhat = DIV(mi, vbc1), vhat = DIV(vi, vbc2);                                           \
    VT p = LOADU(param + i);                                                                 \
    p = SUB(p, MUL(vlr, ADD(DIV(mhat, ADD(SQRT(vhat), veps)), MUL(vwd, p))));                \
    STOREU(param + i, p);                                                                    \
    STOREU(m + i, mi);                                                                       \
    STOREU(v + i, vi);                                                                       \
  }                                                                                          \
  return i;

__attribute__((target("avx512f"))) static size_t adamw_avx512(float *restrict param,
                                                              const float *restrict grad,
                                                              float *restrict m,
                                                              float *restrict v, size_t n,
                                                              const adamw_coef *k) {
  ADAMW_VECTOR_LOOP(16, __m512, _mm512_set1_ps, _mm512_loadu_ps, _mm512_storeu_ps,
                    _mm512_add_ps, _mm512_sub_ps, _mm512_mul_ps, _mm512_div_ps, _mm512_sqrt_ps)
}

__attribute__((target("avx"))) static size_t adamw_avx(float *restrict param,
                                                       const float *restrict grad,
                                                       float *restrict m, float *restrict v,
                                                       size_t n, const adamw_coef *k) {
  ADAMW_VECTOR_LOOP(8, __m256, _mm256_set1_ps, _mm256_loadu_ps, _mm256_storeu_ps,
                    _mm256_add_ps, _mm256_sub_ps, _mm256_mul_ps, _mm256_div_ps, _mm256_sqrt_ps)
}

static size_t adamw_sse2(float *restrict param, const float *restrict grad, float *restrict m,
                         float *restrict v, size_t n, const adamw_coef *k) {
  ADAMW_VECTOR_LOOP(4, __m128, _mm_set1_ps, _mm_loadu_ps, _mm_storeu_ps, _mm_add_ps, _mm_sub_ps,
                    _mm_mul_ps, _mm_div_ps, _mm_sqrt_ps)
}

typedef size_t (*adamw_vector_fn)(float *restrict, const float *restrict, float *restrict,
                                  float *restrict, size_t, const adamw_coef *);

/* The widest loop this CPU runs. */
static adamw_vector_fn adamw_pick(void) {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return adamw_avx512;
  if (__builtin_cpu_supports("avx")) return adamw_avx;
  return adamw_sse2;
}
#endif

static void adamw_range(float *param, const float *grad, float *m, float *v, size_t n,
                        const adamw_coef *k) {
  size_t i = 0;
#ifdef ADAMW_X86
  static adamw_vector_fn fn; /* set once; a racing second store writes the same value */
  adamw_vector_fn f = __atomic_load_n(&fn, __ATOMIC_RELAXED);
  if (!f) {
    f = adamw_pick();
    __atomic_store_n(&fn, f, __ATOMIC_RELAXED);
  }
  i = f(param, grad, m, v, n, k);
#endif
  adamw_scalar(param, grad, m, v, i, n, k);
}

/* Elements per OpenMP task: a multiple of every vector width, so only the last has a tail. */
#define ADAMW_BLOCK 8192

void loom__cpu_adamw(void *ctx, float *param, const float *grad, float *m, float *v, size_t n,
                     float lr, float beta1, float beta2, float eps, float weight_decay,
                     float grad_scale, int t) {
  (void)ctx;
  const adamw_coef k = {
      .lr = lr,
      .beta1 = beta1,
      .beta2 = beta2,
      .eps = eps,
      .weight_decay = weight_decay,
      .grad_scale = grad_scale,
      .bc1 = (float)(1.0 - pow((double)beta1, t)), /* bias corrections */
      .bc2 = (float)(1.0 - pow((double)beta2, t)),
  };
  ptrdiff_t nblk = (ptrdiff_t)((n + ADAMW_BLOCK - 1) / ADAMW_BLOCK);
#pragma omp parallel for schedule(static) if (n > LOOM_CPU_PAR_MIN)
  for (ptrdiff_t b = 0; b < nblk; b++) {
    size_t lo = (size_t)b * ADAMW_BLOCK, len = n - lo < ADAMW_BLOCK ? n - lo : ADAMW_BLOCK;
    adamw_range(param + lo, grad + lo, m + lo, v + lo, len, &k);
  }
}
