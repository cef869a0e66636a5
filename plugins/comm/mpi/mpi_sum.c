/* The element sums of mpi.so's reductions: one definition for loom's own collectives (mpi_owner.c) and for the
 * MPI user ops that sum bf16 / fp16 on Open MPI's own collectives (mpi_comm.c), so both paths
 * round the same way. */
#include <loom/half_v1.h>
#include <string.h>

#include "mpi_internal.h"

/* out[i] = a[i] + b[i]. out may be a or b exactly (in place) but must not partially overlap
 * them: each group of elements is read before it is written. Eight lanes at a time through
 * GCC/Clang vector types whatever the optimisation level; lane-wise float addition, so the bits
 * are the scalar loop's. The 16-bit loops below are vectorised by the compiler (this file is
 * built with -O3: CMakeLists.txt). */
typedef float f32x8 __attribute__((vector_size(32)));
static void sum_f32(float *out, const float *a, const float *b, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    f32x8 x, y;
    memcpy(&x, a + i, sizeof x); /* unaligned loads and stores */
    memcpy(&y, b + i, sizeof y);
    x += y;
    memcpy(out + i, &x, sizeof x);
  }
  for (; i < n; i++) out[i] = a[i] + b[i];
}
static void sum_bf16(uint16_t *out, const uint16_t *a, const uint16_t *b, size_t n) {
#pragma GCC ivdep
  for (size_t i = 0; i < n; i++)
    out[i] = loom_f32_to_bf16(loom_bf16_to_f32(a[i]) + loom_bf16_to_f32(b[i]));
}
static void sum_f16(uint16_t *out, const uint16_t *a, const uint16_t *b, size_t n) {
#pragma GCC ivdep
  for (size_t i = 0; i < n; i++)
    out[i] = loom_f32_to_f16(loom_f16_to_f32(a[i]) + loom_f16_to_f32(b[i]));
}

void mpi_sum(loom_dtype dt, void *out, const void *a, const void *b, size_t n) {
  switch (dt) {
    case LOOM_F32: sum_f32(out, a, b, n); break;
    case LOOM_BF16: sum_bf16(out, a, b, n); break;
    case LOOM_F16: sum_f16(out, a, b, n); break;
    default: break; /* mpi_owner_eligible admits no other dtype */
  }
}
