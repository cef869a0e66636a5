/* Check suite for the CPU device's ring-attention block kernels (core/device/cpu_ring_attention.c,
 * device ABI 1.13's attention_block_forward / attention_block_backward).
 *
 * Context parallel's ring simulated in one process: a (B, T, 3C) qkv is split into cp ranks'
 * local buffers of the load-balanced chunks (rank r: chunks r and 2cp-1-r of 2cp), each rank's
 * forward merges its own block and then every other rank's K/V (strided inside that rank's qkv,
 * as the ring's packed buffer is read), and the backward adds each block's dK/dV into the K/V
 * owner's dqkv; the reassembled out, lse and dqkv must equal the flash kernels'
 * (attention_forward_lse / _backward_lse) on the whole sequence within fp32 rounding of the
 * different summation orders (bounds about 10x the measured 1.5e-7 .. 6.4e-7). Shapes: cp 2
 * and 3, B = 2 and 1, chunks of 160 tokens (a 128-row block and a 32-row one, the kernels'
 * partial block), 130, 40 and 5, NH = 3 and 1, HS = 8 and 24.
 *
 * Legend: B = batch, T = time, NH = heads, HS = head size, C = NH*HS, L = chunk length. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/cpu_kernels.h"
#include "device/device.h"
#include "support/check_suite.h"
#include "support/host_scratch.h"

static loom_dev dev;
static void *ctx;
static uint64_t rng_state;

static void setup(void) {
  char err[256];
  ck_assert_int_eq(loom__dev_open(&dev, loom__cpu_device(), "{}", 0, err, sizeof err), LOOM_OK);
  ctx = dev.ctx;
  rng_state = 0x9e3779b97f4a7c15ull;
}
static void teardown(void) {
  host_scratch_free_all();
  loom__dev_close(&dev);
}

static float *randf(size_t n, double scale) { return host_scratch_uniform(&rng_state, n, scale); }
static float *zerof(size_t n) { return host_scratch(n * sizeof(float)); } /* zeroed */

/* Global chunk j (0, 1) of cp rank r (gpt_cp.c's placement). */
static int chunk_of(int cp, int r, int j) { return j == 0 ? r : 2 * cp - 1 - r; }

/* The global token of rank r's local token t. */
static int global_t(int cp, int r, int L, int t) { return chunk_of(cp, r, t / L) * L + t % L; }

/* max|got - ref| / max|ref| <= tol */
static void close_to(const char *what, const float *got, const float *ref, size_t n, double tol) {
  double md = 0.0, mr = 0.0;
  size_t w = 0;
  for (size_t i = 0; i < n; i++) {
    const double d = fabs((double)got[i] - ref[i]);
    if (d > md) md = d, w = i;
    if (fabs(ref[i]) > mr) mr = fabs(ref[i]);
  }
  const double e = mr > 0.0 ? md / mr : md;
  printf("close %-28s n=%-7zu rel err %.2e (tol %.1e)\n", what, n, e, tol);
  ck_assert_msg(e <= tol, "%s: relative error %.3e > %.1e, worst [%zu]: got %.8g, want %.8g",
                what, e, tol, w, (double)got[w], (double)ref[w]);
}

static void ring_case(int cp, int B, int L, int NH, int HS) {
  const loom_device_v1 *o = dev.ops;
  const int T = 2 * cp * L, Tl = 2 * L, C = NH * HS;
  const size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
  float *qkv = randf(nq, 1.5), *dout = randf(no, 0.5);
  /* the reference: flash on the whole sequence */
  float *out = zerof(no), *lse = zerof(nl), *dqkv = zerof(nq);
  o->attention_forward_lse(ctx, out, lse, qkv, B, T, NH, HS);
  o->attention_backward_lse(ctx, dqkv, dout, qkv, out, lse, B, T, NH, HS);
  /* each rank's local qkv, dout; its out, lse, dqkv */
  float *lq[8], *ld[8], *lo[8], *ll[8], *ldq[8];
  for (int r = 0; r < cp; r++) {
    lq[r] = zerof((size_t)B * Tl * 3 * C), ld[r] = zerof((size_t)B * Tl * C);
    lo[r] = zerof((size_t)B * Tl * C), ll[r] = zerof((size_t)B * NH * Tl);
    ldq[r] = zerof((size_t)B * Tl * 3 * C);
    for (int b = 0; b < B; b++)
      for (int t = 0; t < Tl; t++) {
        const size_t g = (size_t)b * T + global_t(cp, r, L, t), l = (size_t)b * Tl + t;
        memcpy(lq[r] + l * 3 * C, qkv + g * 3 * C, 3 * (size_t)C * sizeof(float));
        memcpy(ld[r] + l * C, dout + g * C, (size_t)C * sizeof(float));
      }
  }
  loom_attn_block_v1 g = {.B = B, .NH = NH, .HS = HS, .n_chunks = 2, .chunk_len = L,
                          .q_stride = 3 * C, .kv_stride = 3 * C};
  for (int r = 0; r < cp; r++)
    for (int step = 0; step < cp; step++) { /* the ring's order: own block, then r-1, r-2.. */
      const int src = (r - step + cp) % cp;
      for (int j = 0; j < 2; j++)
        g.q_chunk[j] = chunk_of(cp, r, j), g.k_chunk[j] = chunk_of(cp, src, j);
      o->attention_block_forward(ctx, lo[r], ll[r], lq[r], lq[src] + C, lq[src] + 2 * C, &g,
                                 step > 0);
    }
  for (int r = 0; r < cp; r++)
    for (int step = 0; step < cp; step++) {
      const int src = (r - step + cp) % cp;
      for (int j = 0; j < 2; j++)
        g.q_chunk[j] = chunk_of(cp, r, j), g.k_chunk[j] = chunk_of(cp, src, j);
      o->attention_block_backward(ctx, ldq[r], ldq[src] + C, ldq[src] + 2 * C, ld[r], lq[r],
                                  lq[src] + C, lq[src] + 2 * C, lo[r], ll[r], &g);
    }
  /* reassemble in global order */
  float *go = zerof(no), *gl = zerof(nl), *gdq = zerof(nq);
  for (int r = 0; r < cp; r++)
    for (int b = 0; b < B; b++)
      for (int t = 0; t < Tl; t++) {
        const int gt = global_t(cp, r, L, t);
        const size_t gi = (size_t)b * T + gt, li = (size_t)b * Tl + t;
        memcpy(go + gi * C, lo[r] + li * C, (size_t)C * sizeof(float));
        memcpy(gdq + gi * 3 * C, ldq[r] + li * 3 * C, 3 * (size_t)C * sizeof(float));
        for (int h = 0; h < NH; h++)
          gl[((size_t)b * NH + h) * T + gt] = ll[r][((size_t)b * NH + h) * Tl + t];
      }
  char what[64];
  snprintf(what, sizeof what, "cp%d L%d HS%d out", cp, L, HS);
  close_to(what, go, out, no, 2e-6);
  snprintf(what, sizeof what, "cp%d L%d HS%d lse", cp, L, HS);
  close_to(what, gl, lse, nl, 1e-6);
  snprintf(what, sizeof what, "cp%d L%d HS%d dqkv", cp, L, HS);
  close_to(what, gdq, dqkv, nq, 5e-6);
}

START_TEST(test_ring_equals_flash) {
  ring_case(2, 2, 160, 3, 8);
  ring_case(2, 2, 5, 3, 24);
  ring_case(3, 2, 40, 3, 24);
  ring_case(3, 1, 130, 1, 8);
}
END_TEST

START_TEST(test_tables) {
  const loom_device_v1 *d = loom__cpu_device();
  ck_assert_ptr_eq(d->attention_block_forward, loom__cpu_attention_block_forward);
  ck_assert_ptr_eq(d->attention_block_backward, loom__cpu_attention_block_backward);
}
END_TEST

static Suite *ring_suite(void) {
  const check_case cases[] = {{"ring_equals_flash", test_ring_equals_flash},
                              {"tables", test_tables}};
  return check_case_suite("ring_attention", CHECK_CASES(cases), setup, teardown, 300);
}

int main(void) { return check_run_suite(ring_suite(), CK_FORK); }
