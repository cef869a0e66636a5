/* loom-sgemm-peak — the anchor for MFU: what single-threaded OpenBLAS SGEMM reaches on this
 * machine, right now.
 *
 * Measures cblas_sgemm GFLOP/s (2*M*N*K flops per call) with openblas_set_num_threads(1), on
 *   - square sizes (default 256, 512, 1024), and
 *   - the GEMMs of a GPT training step as loom's CPU device issues them (core/device/cpu_layers.c
 *     and cpu_attention.c), for N = B*T rows: the qkv (C->3C), attention projection (C->C),
 *     MLP up (C->4C), MLP down (4C->C) and LM head (C->V) matmuls, each in its three forms
 *     (forward out = inp W^T, backward dinp = dout W, backward dweight += dout^T inp), plus the
 *     per-(batch, head) attention GEMMs (S = Q K^T, O = P V; T x T x head_size).
 * Every case is warmed up, then timed as the best of several repetitions (each repetition runs
 * the call often enough to take at least --min-ms), because the machine is shared and noisy: the
 * best repetition is the one least disturbed.
 *
 * Prints a table, the FLOP-weighted rate of one training step's GEMM mix (the rate the model's
 * GEMMs would run at if nothing else took time), and as its last line the peak (max over all
 * cases):   sgemm_peak_gflops X
 *
 *   loom-sgemm-peak [-B micro_batch] [-T seq_len] [-C n_embd] [-H n_head] [-V vocab]
 *                   [-L n_layer] [-s 256,512,1024] [-r reps] [-m min_ms]
 * Defaults: the main job's model (configs/fortunes_ddp.json): B 8, T 128, C 256, H 8, V 256, L 4.
 */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void openblas_set_num_threads(int num_threads); /* OpenBLAS extension; not in every cblas.h */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float *alloc_rand(size_t n, unsigned *seed) {
  float *p = NULL;
  if (posix_memalign((void **)&p, 64, (n ? n : 1) * sizeof *p) != 0) {
    fprintf(stderr, "loom-sgemm-peak: out of memory (%zu floats)\n", n);
    exit(2);
  }
  for (size_t i = 0; i < n; i++) {
    *seed = *seed * 1664525u + 1013904223u;
    p[i] = (float)((*seed >> 8) & 0xffff) / 65536.0f - 0.5f;
  }
  return p;
}

typedef struct gemm_case {
  char name[48];
  char form[12];
  CBLAS_TRANSPOSE ta, tb;
  int m, n, k;
  double per_step; /* calls per training step (for the step's GEMM mix); 0: not part of it */
  double gflops;   /* measured */
} gemm_case;

static int reps = 5;
static double min_ms = 30.0;

/* Row-major C (m x n) = op(A) (m x k) op(B) (k x n), with beta 1 as the model's accumulating
 * backward GEMMs use (the same cost as beta 0 up to the read of C). */
static void measure(gemm_case *g, unsigned *seed) {
  int m = g->m, n = g->n, k = g->k;
  float *a = alloc_rand((size_t)m * k, seed), *b = alloc_rand((size_t)k * n, seed);
  float *c = alloc_rand((size_t)m * n, seed);
  int lda = g->ta == CblasNoTrans ? k : m;
  int ldb = g->tb == CblasNoTrans ? n : k;
  double flop = 2.0 * m * n * k;
#define CALL() cblas_sgemm(CblasRowMajor, g->ta, g->tb, m, n, k, 1.0f, a, lda, b, ldb, 0.5f, c, n)
  /* warm-up, and an estimate of how many calls make one repetition last min_ms */
  CALL();
  double t = now_s();
  CALL();
  double one = now_s() - t;
  int iters = one > 0 ? (int)(min_ms * 1e-3 / one) + 1 : 1000;
  if (iters < 1) iters = 1;
  double best = 0;
  for (int r = 0; r < reps; r++) {
    t = now_s();
    for (int i = 0; i < iters; i++) CALL();
    double dt = now_s() - t;
    double rate = dt > 0 ? flop * iters / dt / 1e9 : 0;
    if (rate > best) best = rate;
  }
#undef CALL
  g->gflops = best;
  free(a), free(b), free(c);
}

static int add(gemm_case *cs, int n, const char *name, const char *form, CBLAS_TRANSPOSE ta,
               CBLAS_TRANSPOSE tb, int m, int nn, int k, double per_step) {
  gemm_case *g = &cs[n];
  memset(g, 0, sizeof *g);
  snprintf(g->name, sizeof g->name, "%s", name);
  snprintf(g->form, sizeof g->form, "%s", form);
  g->ta = ta, g->tb = tb, g->m = m, g->n = nn, g->k = k, g->per_step = per_step;
  return n + 1;
}

/* The three GEMMs of one linear layer inp (N,IC) -> out (N,OC), weight (OC,IC), as in
 * core/device/cpu_layers.c. */
static int add_linear(gemm_case *cs, int n, const char *name, int N, int IC, int OC, double cnt) {
  n = add(cs, n, name, "fwd", CblasNoTrans, CblasTrans, N, OC, IC, cnt);
  n = add(cs, n, name, "bwd-dinp", CblasNoTrans, CblasNoTrans, N, IC, OC, cnt);
  n = add(cs, n, name, "bwd-dW", CblasTrans, CblasNoTrans, OC, IC, N, cnt);
  return n;
}

static void usage(void) {
  fprintf(stderr,
          "usage: loom-sgemm-peak [-B micro_batch] [-T seq_len] [-C n_embd] [-H n_head] "
          "[-V vocab] [-L n_layer] [-s SIZES] [-r reps] [-m min_ms]\n");
  exit(2);
}

int main(int argc, char **argv) {
  int B = 8, T = 128, C = 256, H = 8, V = 256, L = 4;
  char sizes[256] = "256,512,1024";
  int opt;
  while ((opt = getopt(argc, argv, "B:T:C:H:V:L:s:r:m:")) != -1) {
    switch (opt) {
      case 'B': B = atoi(optarg); break;
      case 'T': T = atoi(optarg); break;
      case 'C': C = atoi(optarg); break;
      case 'H': H = atoi(optarg); break;
      case 'V': V = atoi(optarg); break;
      case 'L': L = atoi(optarg); break;
      case 's': snprintf(sizes, sizeof sizes, "%s", optarg); break;
      case 'r': reps = atoi(optarg); break;
      case 'm': min_ms = atof(optarg); break;
      default: usage();
    }
  }
  if (optind != argc || B < 1 || T < 1 || C < 1 || H < 1 || C % H || V < 1 || L < 1 || reps < 1 ||
      min_ms <= 0)
    usage();
  openblas_set_num_threads(1);

  gemm_case cs[64];
  int n = 0;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", sizes);
  for (char *tok = strtok(buf, ","); tok && n < 16; tok = strtok(NULL, ",")) {
    int s = atoi(tok);
    if (s < 1) usage();
    char name[48];
    snprintf(name, sizeof name, "square %d", s);
    n = add(cs, n, name, "NN", CblasNoTrans, CblasNoTrans, s, s, s, 0);
  }
  int N = B * T, HS = C / H;
  char name[48];
  snprintf(name, sizeof name, "qkv C->3C");
  n = add_linear(cs, n, name, N, C, 3 * C, L);
  n = add_linear(cs, n, "attn proj C->C", N, C, C, L);
  n = add_linear(cs, n, "mlp up C->4C", N, C, 4 * C, L);
  n = add_linear(cs, n, "mlp down 4C->C", N, 4 * C, C, L);
  /* the LM head (tied to the token embedding) has no bias and the same three GEMMs */
  n = add_linear(cs, n, "lm head C->V", N, C, V, 1);
  /* attention, per (b, h): forward S = Q K^T and O = P V; backward dP = dO V^T, dV += P^T dO,
   * dQ += dS K, dK += dS^T Q (cpu_attention.c) */
  double bh = (double)B * H * L;
  n = add(cs, n, "attn QK^T (per b,h)", "fwd", CblasNoTrans, CblasTrans, T, T, HS, bh);
  n = add(cs, n, "attn PV (per b,h)", "fwd", CblasNoTrans, CblasNoTrans, T, HS, T, bh);
  n = add(cs, n, "attn dP=dO V^T", "bwd", CblasNoTrans, CblasTrans, T, T, HS, bh);
  n = add(cs, n, "attn dV+=P^T dO", "bwd", CblasTrans, CblasNoTrans, T, HS, T, bh);
  n = add(cs, n, "attn dQ+=dS K", "bwd", CblasNoTrans, CblasNoTrans, T, HS, T, bh);
  n = add(cs, n, "attn dK+=dS^T Q", "bwd", CblasTrans, CblasNoTrans, T, HS, T, bh);

  printf("loom-sgemm-peak: single-thread OpenBLAS cblas_sgemm, best of %d repetitions "
         "(each >= %.0f ms) after warm-up\n",
         reps, min_ms);
  printf("model: B %d x T %d = N %d rows, C %d, heads %d (head size %d), vocab %d, layers %d\n", B,
         T, N, C, H, HS, V, L);
  printf("%-22s %-9s %6s %6s %6s %9s %8s\n", "case", "form", "M", "N", "K", "MFLOP", "GFLOP/s");
  unsigned seed = 12345;
  double peak = 0, mix_flop = 0, mix_time = 0;
  for (int i = 0; i < n; i++) {
    gemm_case *g = &cs[i];
    measure(g, &seed);
    double mflop = 2.0 * g->m * g->n * g->k / 1e6;
    printf("%-22s %-9s %6d %6d %6d %9.2f %8.2f\n", g->name, g->form, g->m, g->n, g->k, mflop,
           g->gflops);
    fflush(stdout);
    if (g->gflops > peak) peak = g->gflops;
    if (g->per_step > 0 && g->gflops > 0) {
      mix_flop += g->per_step * mflop * 1e6;
      mix_time += g->per_step * mflop * 1e6 / (g->gflops * 1e9);
    }
  }
  /* the rate of one training step's GEMMs run back to back at the measured rates: the
   * attainable ceiling for this model's GEMM shapes (a harmonic, FLOP-weighted mean) */
  printf("sgemm_step_gflop %.4f\n", mix_flop / 1e9);
  printf("sgemm_model_mix_gflops %.2f\n", mix_time > 0 ? mix_flop / mix_time / 1e9 : 0.0);
  printf("sgemm_peak_gflops %.2f\n", peak);
  return 0;
}
