/* loom-bench-kernels: the CPU device's non-GEMM kernels at the main job's shapes
 * (configs/fortunes_ddp.json: B=8, T=128, C=256, NH=8, L=4, V=256, 3,257,856 parameters), each
 * timed as the best of R repetitions, and the per-step total from the number of calls one
 * training step makes (core/model/gpt.c). GEMMs are loom-sgemm-peak's; the attention rows
 * include their per-(b,h) GEMMs. A benchmark, not a test: it checks nothing.
 *
 *   loom-bench-kernels [threads=1] [reps=20]
 *
 * Each row also gives the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID) and user-space
 * instructions (perf_event_open) of the repetition with the least CPU time: unlike wall time
 * they do not count the time another process holds the core, so two builds compare on a shared
 * machine. Without a hardware PMU (most VMs) or with perf_event_paranoid > 2 the instructions
 * column reads - (valgrind --tool=callgrind counts them instead). Both see the calling thread
 * only: compare them at threads=1. */
#define _GNU_SOURCE
#include <linux/perf_event.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "device/device.h"

enum { B = 8, T = 128, C = 256, NH = 8, L = 4, V = 256 };
#define NPARAM 3257856u

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static float *buf(loom_dev *dev, size_t n, unsigned seed, float scale) {
  float *p = loom__dev_alloc(dev, n * sizeof(float), LOOM_MEM_ACTIVATIONS);
  if (!p) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  uint32_t s = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; i++) {
    s = s * 1664525u + 1013904223u;
    p[i] = scale * ((float)(s >> 8) / 16777216.0f - 0.5f);
  }
  return p;
}

/* user-space instructions of this thread (perf_event_open); -1 without a hardware PMU */
static int perf_fd = -1;

static void perf_open(void) {
  struct perf_event_attr a;
  memset(&a, 0, sizeof a);
  a.size = sizeof a;
  a.type = PERF_TYPE_HARDWARE;
  a.config = PERF_COUNT_HW_INSTRUCTIONS;
  a.disabled = 1;
  a.exclude_kernel = 1;
  a.exclude_hv = 1;
  perf_fd = (int)syscall(SYS_perf_event_open, &a, 0, -1, -1, 0);
}

static uint64_t thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* counts[0] = thread CPU ns, counts[1] = instructions (0 without a PMU) since perf_reset */
static void perf_reset(uint64_t counts[2]) {
  if (perf_fd >= 0) {
    ioctl(perf_fd, PERF_EVENT_IOC_RESET, 0);
    ioctl(perf_fd, PERF_EVENT_IOC_ENABLE, 0);
  }
  counts[0] = thread_cpu_ns();
}
static void perf_read(uint64_t counts[2]) {
  counts[0] = thread_cpu_ns() - counts[0];
  counts[1] = 0;
  if (perf_fd < 0) return;
  ioctl(perf_fd, PERF_EVENT_IOC_DISABLE, 0);
  uint64_t n;
  if (read(perf_fd, &n, sizeof n) == (ssize_t)sizeof n) counts[1] = n;
}

static void print_counts(const uint64_t c[2]) {
  if (perf_fd < 0) printf(" %10.1f %10s\n", c[0] * 1e-3, "-");
  else printf(" %10.1f %10.3f\n", c[0] * 1e-3, c[1] * 1e-6);
}

#define BENCH(name, per_step, stmt)                                                         \
  do {                                                                                      \
    double best = 1e30;                                                                     \
    uint64_t best_c[2] = {UINT64_MAX, 0};                                                   \
    for (int r = 0; r < reps; r++) {                                                        \
      uint64_t c[2];                                                                        \
      double t0 = now();                                                                    \
      perf_reset(c);                                                                        \
      stmt;                                                                                 \
      perf_read(c);                                                                         \
      double dt = now() - t0;                                                               \
      if (dt < best) best = dt;                                                             \
      if (c[0] < best_c[0]) memcpy(best_c, c, sizeof c);                                    \
    }                                                                                       \
    total += best * (per_step);                                                             \
    total_c[0] += best_c[0] * (per_step);                                                   \
    total_c[1] += best_c[1] * (per_step);                                                   \
    printf("%-28s %9.1f us  x%-3d %8.2f ms/step", name, best * 1e6, (int)(per_step),        \
           best * (per_step) * 1e3);                                                        \
    print_counts(best_c);                                                                   \
  } while (0)

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 1;
  int reps = argc > 2 ? atoi(argv[2]) : 20;
  char opts[64], err[256];
  snprintf(opts, sizeof opts, "{\"threads\": %d}", threads);
  loom_dev dev;
  if (loom__dev_open(&dev, loom__cpu_device(), opts, 0, err, sizeof err) != LOOM_OK) {
    fprintf(stderr, "device: %s\n", err);
    return 1;
  }
  const loom_device_v1 *o = dev.ops;
  void *ctx = dev.ctx;
  const size_t N = (size_t)B * T;
  int32_t *tok = (int32_t *)loom__dev_alloc(&dev, N * sizeof(int32_t), LOOM_MEM_ACTIVATIONS);
  for (size_t i = 0; i < N; i++) tok[i] = (int32_t)((i * 37u + 11u) % V);
  float *wte = buf(&dev, (size_t)V * C, 1, 0.1f), *wpe = buf(&dev, (size_t)T * C, 2, 0.1f);
  float *x = buf(&dev, N * C, 3, 2.0f), *y = buf(&dev, N * C, 4, 1.0f);
  float *d = buf(&dev, N * C, 5, 1.0f), *dx = buf(&dev, N * C, 6, 1.0f);
  float *w = buf(&dev, C, 7, 1.0f), *bi = buf(&dev, C, 8, 1.0f), *dw = buf(&dev, C, 9, 1.0f),
        *db = buf(&dev, C, 10, 1.0f);
  float *mean = buf(&dev, N, 11, 1.0f), *rstd = buf(&dev, N, 12, 1.0f);
  float *h = buf(&dev, N * 4 * C, 13, 4.0f), *hg = buf(&dev, N * 4 * C, 14, 1.0f),
        *dh = buf(&dev, N * 4 * C, 15, 1.0f), *dhg = buf(&dev, N * 4 * C, 16, 1.0f);
  float *qkv = buf(&dev, N * 3 * C, 17, 2.0f), *dqkv = buf(&dev, N * 3 * C, 18, 1.0f);
  float *att = buf(&dev, (size_t)B * NH * T * T, 19, 1.0f);
  float *datt = buf(&dev, (size_t)B * NH * T * T, 20, 1.0f);
  float *logits = buf(&dev, N * V, 21, 4.0f), *probs = buf(&dev, N * V, 22, 1.0f);
  float *losses = buf(&dev, N, 23, 1.0f);
  float *p = buf(&dev, NPARAM, 24, 0.1f), *g = buf(&dev, NPARAM, 25, 0.01f);
  float *m = buf(&dev, NPARAM, 26, 0.001f), *v = buf(&dev, NPARAM, 27, 0.0f);
  float *bias4 = buf(&dev, 4 * C, 28, 1.0f);
  for (size_t i = 0; i < NPARAM; i++) v[i] = v[i] * v[i];
  double total = 0;
  uint64_t total_c[2] = {0, 0};
  perf_open();

  printf("loom-bench-kernels: B=%d T=%d C=%d NH=%d L=%d V=%d, threads=%d, best of %d\n", B, T,
         C, NH, L, V, threads, reps);
  printf("%-28s %12s  %-4s %8s %-7s %10s %10s\n", "kernel (one call)", "best", "", "per step", "",
         "cpu us", "Minstr");
  printf("(CPU time and instructions: one call, the one with the least CPU time; total: a step)\n");
  BENCH("encoder_forward", 1, o->encoder_forward(ctx, x, tok, wte, wpe, B, T, C));
  BENCH("encoder_backward", 1, o->encoder_backward(ctx, wte, wpe, d, tok, B, T, C));
  BENCH("layernorm_forward", 2 * L + 1,
        o->layernorm_forward(ctx, y, mean, rstd, x, w, bi, (int)N, C));
  BENCH("layernorm_backward", 2 * L + 1,
        o->layernorm_backward(ctx, dx, dw, db, d, x, w, mean, rstd, (int)N, C));
  BENCH("gelu_forward", L, o->gelu_forward(ctx, hg, h, N * 4 * C));
  BENCH("gelu_backward", L, o->gelu_backward(ctx, dh, h, dhg, N * 4 * C));
  BENCH("residual_forward", 2 * L, o->residual_forward(ctx, y, x, d, N * C));
  BENCH("matmul_bwd dbias C", 2 * L,
        o->matmul_backward(ctx, NULL, NULL, db, d, x, w, (int)N, C, C));
  BENCH("matmul_bwd dbias 3C", L,
        o->matmul_backward(ctx, NULL, NULL, bias4, dqkv, x, w, (int)N, C, 3 * C));
  BENCH("matmul_bwd dbias 4C", L,
        o->matmul_backward(ctx, NULL, NULL, bias4, dh, x, w, (int)N, C, 4 * C));
  BENCH("attention_forward (+gemm)", L, o->attention_forward(ctx, y, att, qkv, B, T, NH, C / NH));
  BENCH("attention_backward (+gemm)", L,
        o->attention_backward(ctx, dqkv, datt, d, qkv, att, B, T, NH, C / NH));
  BENCH("crossentropy_forward", 1,
        o->crossentropy_forward(ctx, losses, probs, logits, tok, (int)N, V));
  BENCH("crossentropy_backward", 1,
        o->crossentropy_backward(ctx, logits, probs, tok, 1.0f / N, (int)N, V));
  BENCH("adamw", 1,
        o->adamw(ctx, p, g, m, v, NPARAM, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 10));
  BENCH("sum_squares", 1, (void)o->sum_squares(ctx, g, NPARAM));
  printf("%-28s %23.2f ms/step", "total (listed kernels)", total * 1e3);
  print_counts(total_c);
  loom__dev_close(&dev);
  return 0;
}
