/* loom-bench-attention: one GPT-2 124M attention layer (B=2, NH=12, HS=64) on the CPU device,
 * forward + backward, the materialised kernels (attention_forward / _backward: the (B,NH,T,T)
 * probabilities and their gradient in memory) against the FlashAttention-2 ones
 * (attention_forward_lse / _backward_lse, cpu_flash.c), at T = 256, 1024 and 4096, in fp32 and
 * in bf16 through the acts16 table. Each time is the best of `reps` runs of the wall clock.
 * A benchmark, not a test: it checks nothing.
 *
 *   loom-bench-attention [threads=2] [reps=3] [Tmax=4096]
 *
 * The materialised kernels need 2 B NH T^2 floats of att and datt: 3.2 GB at T = 4096. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <loom/half_v1.h>

#include "device/device.h"

enum { B = 2, NH = 12, HS = 64, C = NH * HS };

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static void *mem(loom_dev *dev, size_t bytes) {
  void *p = loom__dev_alloc(dev, bytes, LOOM_MEM_ACTIVATIONS);
  if (!p) {
    fprintf(stderr, "loom-bench-attention: out of memory for %zu bytes\n", bytes);
    exit(1);
  }
  return p;
}

/* n uniform values in [-scale/2, scale/2), fp32 or (wide16) bf16 */
static void fill(void *p, size_t n, unsigned seed, float scale, int wide16) {
  uint32_t s = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; i++) {
    s = s * 1664525u + 1013904223u;
    const float x = scale * ((float)(s >> 8) / 16777216.0f - 0.5f);
    if (wide16) ((uint16_t *)p)[i] = loom_f32_to_bf16(x);
    else ((float *)p)[i] = x;
  }
}

typedef struct bufs {
  void *qkv, *out, *dout, *dqkv;
  float *att, *datt, *lse;
  size_t nq, no;
  int es; /* bytes per activation element */
} bufs;

/* one fwd+bwd (flash: the lse pair) with the table's dtype: t NULL is fp32 */
static void layer(const loom_device_v1 *o, const loom_device_acts16_v1 *t, void *ctx,
                  const bufs *b, int T, int flash) {
  memset(b->dqkv, 0, b->nq * b->es); /* the host zeroes dqkv before the backward */
  if (!t && !flash) {
    o->attention_forward(ctx, b->out, b->att, b->qkv, B, T, NH, HS);
    o->attention_backward(ctx, b->dqkv, b->datt, b->dout, b->qkv, b->att, B, T, NH, HS);
  } else if (!t) {
    o->attention_forward_lse(ctx, b->out, b->lse, b->qkv, B, T, NH, HS);
    o->attention_backward_lse(ctx, b->dqkv, b->dout, b->qkv, b->out, b->lse, B, T, NH, HS);
  } else if (!flash) {
    t->attention_forward(ctx, b->out, b->att, b->qkv, B, T, NH, HS);
    t->attention_backward(ctx, b->dqkv, b->datt, b->dout, b->qkv, b->att, B, T, NH, HS);
  } else {
    t->attention_forward_lse(ctx, b->out, b->lse, b->qkv, B, T, NH, HS);
    t->attention_backward_lse(ctx, b->dqkv, b->dout, b->qkv, b->out, b->lse, B, T, NH, HS);
  }
}

static double best_of(const loom_device_v1 *o, const loom_device_acts16_v1 *t, void *ctx,
                      const bufs *b, int T, int flash, int reps) {
  layer(o, t, ctx, b, T, flash); /* warm-up: scratch grown, pages touched */
  double best = 1e30;
  for (int r = 0; r < reps; r++) {
    const double t0 = now();
    layer(o, t, ctx, b, T, flash);
    const double dt = now() - t0;
    best = dt < best ? dt : best;
  }
  return best;
}

int main(int argc, char **argv) {
  const int threads = argc > 1 ? atoi(argv[1]) : 2, reps = argc > 2 ? atoi(argv[2]) : 3;
  const int tmax = argc > 3 ? atoi(argv[3]) : 4096;
  char opts[64], err[256];
  snprintf(opts, sizeof opts, "{\"threads\": %d}", threads);
  loom_dev dev;
  if (loom__dev_open(&dev, loom__cpu_device(), opts, 0, err, sizeof err) != LOOM_OK) {
    fprintf(stderr, "loom-bench-attention: %s\n", err);
    return 1;
  }
  const loom_device_v1 *o = dev.ops;
  const loom_device_acts16_v1 *t16 = o->acts16 ? o->acts16(dev.ctx, LOOM_BF16) : NULL;
  printf("loom-bench-attention: B=%d NH=%d HS=%d, threads=%d, best of %d; fwd+bwd per layer\n",
         B, NH, HS, threads, reps);
  printf("%-6s %6s %14s %12s %8s\n", "dtype", "T", "materialised", "flash", "ratio");
  const int Ts[] = {256, 1024, 4096};
  for (int k = 0; k < 2; k++) {
    const loom_device_acts16_v1 *t = k ? t16 : NULL;
    if (k && (!t || !t->attention_forward_lse)) continue;
    for (size_t i = 0; i < sizeof Ts / sizeof Ts[0]; i++) {
      const int T = Ts[i];
      if (T > tmax) continue;
      bufs b = {.nq = (size_t)B * T * 3 * C, .no = (size_t)B * T * C, .es = k ? 2 : 4};
      const size_t na = (size_t)B * NH * T * T;
      b.qkv = mem(&dev, b.nq * b.es), b.dqkv = mem(&dev, b.nq * b.es);
      b.out = mem(&dev, b.no * b.es), b.dout = mem(&dev, b.no * b.es);
      b.att = mem(&dev, na * 4), b.datt = mem(&dev, na * 4);
      b.lse = mem(&dev, (size_t)B * NH * T * 4);
      fill(b.qkv, b.nq, 1, 2.0f, k), fill(b.dout, b.no, 2, 0.1f, k);
      const double tm = best_of(o, t, dev.ctx, &b, T, 0, reps);
      const double tf = best_of(o, t, dev.ctx, &b, T, 1, reps);
      printf("%-6s %6d %11.2f ms %9.2f ms %7.2fx\n", k ? "bf16" : "fp32", T, tm * 1e3, tf * 1e3,
             tm / tf);
      fflush(stdout);
      void *all[] = {b.qkv, b.dqkv, b.out, b.dout, b.att, b.datt, b.lse};
      for (size_t j = 0; j < sizeof all / sizeof all[0]; j++) loom__dev_free(&dev, all[j]);
    }
  }
  loom__dev_close(&dev);
  return 0;
}
