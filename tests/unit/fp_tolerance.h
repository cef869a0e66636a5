/* Rounding-error bounds behind the unit tests' numerical tolerances (docs/tolerances.md has
 * every check, its bound, the derivation and the worst value measured per GEMM kernel family).
 *
 * fp32 round-to-nearest has unit roundoff u = 2^-24 (about 5.96e-8). A sum or dot product of n
 * terms computed in any order, with or without FMA, is within gamma_n * sum|terms| of the exact
 * value, gamma_n = n u / (1 - n u) (Higham, Accuracy and Stability of Numerical Algorithms,
 * 2nd ed., §3.1). This is why a bound built from gamma_n holds for every GEMM library's kernel
 * family (oneDNN's ISAs, OpenBLAS's) and thread split: they differ only in the order and blocking of the same sums. Two
 * computations in different orders differ by at most twice the bound. Typical errors grow like
 * sqrt(n) u, so a worst-case bound has a large margin on random data; each test prints what it
 * measured so the table can be refreshed. */
#ifndef LOOM_TEST_FP_TOLERANCE_H
#define LOOM_TEST_FP_TOLERANCE_H

#include <math.h>

#define FP32_U 0x1p-24 /* unit roundoff of IEEE binary32, round to nearest */
#define FP64_U 0x1p-53 /* binary64 */

/* lambda of the probabilistic bound below: each rounding-error sum stays inside it with
 * probability >= 1 - 2 exp(-lambda^2 / 2) = 1 - 3e-8 per rounding. */
#define FP_LAMBDA 6.0

/* Higham's gamma_n for fp32: the worst-case relative error of an n-term sum, any order. */
static inline double fp32_gamma(double n) { return n * FP32_U / (1.0 - n * FP32_U); }

/* The tolerance every numerical check uses: c * lambda * sqrt(n) * u, Higham & Mary's
 * probabilistic bound (SIAM J. Sci. Comput. 41(5), 2019, Thm 2.4: rounding errors of mean zero
 * that are independent add like a random walk, so an n-term computation is off by at most
 * lambda sqrt(n) u relative, except with probability n * 3e-8). n is the reduction length of the
 * computation checked: for a whole model, the sum of the reduction lengths along the
 * forward and backward path (gpt_path_reductions in check_gpt.c). c = 1 against a float64
 * reference, 2 between two fp32 computations that round differently (both err). The
 * deterministic fp32_gamma(n) is n / (lambda sqrt(n)) times larger and never exceeded. */
static inline double fp32_tol(double c, double n) { return c * FP_LAMBDA * sqrt(n) * FP32_U; }

#endif
