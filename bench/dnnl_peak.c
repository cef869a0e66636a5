/* loom-dnnl-peak — the per-dtype MFU ceiling of the CPU device: what oneDNN's matmul (the
 * primitive core/device/cpu_gemm.c runs every GEMM on) reaches on this machine, right now, in
 * fp32 and in bf16 x bf16 -> fp32 (the operands of loom's linear layers under precision bf16).
 *
 * Cases (M x N x K, 2*M*N*K flops per call), each in both dtypes:
 *   - square sizes (default 1024, 2048), C = A B;
 *   - the linear GEMMs of GPT-2 124M and of the main job's model at M = 1024 rows, in the form
 *     of loom's forward, out = inp W^T (W stored OC x IC as loom stores it): 1024x768x768
 *     (attention projection), 1024x3072x768 (MLP up), 1024x768x3072 (MLP down), 1024x50304x768
 *     (LM head, padded vocabulary), 1024x256x256 and 1024x1024x256 (the byte model's C->C and
 *     C->4C).
 * Each primitive is built as cpu_gemm.c builds one (strided memory descriptors, user
 * scratchpad), warmed up, then timed as the best of 5 repetitions of >= 30 ms each: the machine
 * is shared and the least disturbed repetition is the closest to what the core can do.
 *
 * Prints per case the GFLOP/s and the implementation oneDNN chose (dnnl_query_impl_info_str,
 * e.g. "brg:avx512_core_bf16"), then
 *   dnnl_isa NAME                  (dnnl_get_effective_cpu_isa)
 *   dnnl_peak_gflops_fp32 X        (max over the fp32 cases)
 *   dnnl_peak_gflops_bf16 Y        (max over the bf16 cases; only when the CPU has bf16 units)
 * The bf16 cases run only where the effective ISA holds avx512_core_bf16's bits (AMX does too),
 * the same test cpu_gemm.c makes: elsewhere oneDNN would emulate bf16 through fp32, which is not
 * the path loom takes (it stays fp32 there), so that ceiling would mean nothing.
 *
 *   loom-dnnl-peak [-t threads] [-s 1024,2048] [-r reps] [-m min_ms] [-q]
 * -t: OpenMP threads for oneDNN (default 1, as each of loom's ranks runs); -q: square sizes only.
 */
#define _POSIX_C_SOURCE 200809L
#include <dnnl.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "device/cpu_gemm.h" /* the ISA's name and bf16 test, as the CPU device has them */

static int reps = 5;
static double min_ms = 30.0;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *what, dnnl_status_t st) {
  fprintf(stderr, "loom-dnnl-peak: %s failed (dnnl status %d)\n", what, (int)st);
  exit(2);
}
#define CHECK(call)                           \
  do {                                        \
    dnnl_status_t st_ = (call);               \
    if (st_ != dnnl_success) die(#call, st_); \
  } while (0)

static void *alloc64(size_t bytes) {
  void *p = NULL;
  if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) {
    fprintf(stderr, "loom-dnnl-peak: out of memory (%zu bytes)\n", bytes);
    exit(2);
  }
  return p;
}

/* n values in [-0.5, 0.5): fp32, or their bf16 truncations (the values only need to be finite
 * and non-trivial: a GEMM's time does not depend on them) */
static void *alloc_rand(size_t n, int bf16, unsigned *seed) {
  void *p = alloc64(n * (bf16 ? 2 : 4));
  for (size_t i = 0; i < n; i++) {
    *seed = *seed * 1664525u + 1013904223u;
    float f = (float)((*seed >> 8) & 0xffff) / 65536.0f - 0.5f;
    if (bf16) {
      uint32_t u;
      memcpy(&u, &f, sizeof u);
      ((uint16_t *)p)[i] = (uint16_t)(u >> 16);
    } else {
      ((float *)p)[i] = f;
    }
  }
  return p;
}

typedef struct peak_case {
  const char *name;
  int m, n, k;
  int tb; /* B stored N x K (loom's weights, out = inp W^T), else K x N */
} peak_case;

/* A 2-D descriptor of rows x cols (logical) whose element (r, c) is at r*rs + c*cs. */
static void md2(dnnl_memory_desc_t *md, int rows, int cols, dnnl_data_type_t dt, int64_t rs,
                int64_t cs) {
  dnnl_dims_t dims = {rows, cols}, strides = {rs, cs};
  CHECK(dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides));
}

/* One case in one dtype: its best GFLOP/s; the implementation's name into impl. */
static double measure(dnnl_engine_t eng, dnnl_stream_t strm, const peak_case *c, int bf16,
                      char *impl, size_t impl_len, unsigned *seed) {
  const dnnl_data_type_t in = bf16 ? dnnl_bf16 : dnnl_f32;
  dnnl_memory_desc_t a_md, b_md, c_md;
  md2(&a_md, c->m, c->k, in, c->k, 1);
  if (c->tb)
    md2(&b_md, c->k, c->n, in, 1, c->k);
  else
    md2(&b_md, c->k, c->n, in, c->n, 1);
  md2(&c_md, c->m, c->n, dnnl_f32, c->n, 1);
  dnnl_matmul_desc_t desc;
  CHECK(dnnl_matmul_desc_init(&desc, &a_md, &b_md, NULL, &c_md));
  dnnl_primitive_attr_t attr;
  CHECK(dnnl_primitive_attr_create(&attr));
  CHECK(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
  dnnl_primitive_desc_t pd;
  CHECK(dnnl_primitive_desc_create(&pd, &desc, attr, eng, NULL));
  const char *info = NULL;
  if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &info) != dnnl_success || !info)
    info = "?";
  snprintf(impl, impl_len, "%s", info);
  dnnl_primitive_t prim;
  CHECK(dnnl_primitive_create(&prim, pd));
  const dnnl_memory_desc_t *sp_md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  size_t sp_bytes = sp_md ? dnnl_memory_desc_get_size(sp_md) : 0;

  void *a = alloc_rand((size_t)c->m * c->k, bf16, seed);
  void *b = alloc_rand((size_t)c->k * c->n, bf16, seed);
  void *cc = alloc_rand((size_t)c->m * c->n, 0, seed);
  void *sp = sp_bytes ? alloc64(sp_bytes) : NULL;
  dnnl_memory_t am, bm, cm, spm = NULL;
  CHECK(dnnl_memory_create(&am, &a_md, eng, a));
  CHECK(dnnl_memory_create(&bm, &b_md, eng, b));
  CHECK(dnnl_memory_create(&cm, &c_md, eng, cc));
  if (sp_bytes) CHECK(dnnl_memory_create(&spm, sp_md, eng, sp));
  dnnl_exec_arg_t args[4] = {
      {DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}, {DNNL_ARG_SCRATCHPAD, spm}};
  int nargs = sp_bytes ? 4 : 3;
#define CALL()                                              \
  do {                                                      \
    CHECK(dnnl_primitive_execute(prim, strm, nargs, args)); \
    CHECK(dnnl_stream_wait(strm));                          \
  } while (0)
  /* warm-up (first touch, the kernel's caches), and an estimate of how many calls make one
   * repetition last min_ms */
  CALL();
  double t = now_s();
  CALL();
  double one = now_s() - t;
  int iters = one > 0 ? (int)(min_ms * 1e-3 / one) + 1 : 1000;
  double flop = 2.0 * c->m * c->n * c->k, best = 0;
  for (int r = 0; r < reps; r++) {
    t = now_s();
    for (int i = 0; i < iters; i++) CALL();
    double dt = now_s() - t;
    double rate = dt > 0 ? flop * iters / dt / 1e9 : 0;
    if (rate > best) best = rate;
  }
#undef CALL
  dnnl_memory_destroy(am), dnnl_memory_destroy(bm), dnnl_memory_destroy(cm);
  if (spm) dnnl_memory_destroy(spm);
  dnnl_primitive_destroy(prim);
  dnnl_primitive_desc_destroy(pd);
  dnnl_primitive_attr_destroy(attr);
  free(a), free(b), free(cc), free(sp);
  return best;
}

static void usage(void) {
  fprintf(stderr, "usage: loom-dnnl-peak [-t threads] [-s SIZES] [-r reps] [-m min_ms] [-q]\n");
  exit(2);
}

int main(int argc, char **argv) {
  int threads = 1, squares_only = 0, opt;
  char sizes[256] = "1024,2048";
  while ((opt = getopt(argc, argv, "t:s:r:m:q")) != -1) {
    switch (opt) {
      case 't': threads = atoi(optarg); break;
      case 's': snprintf(sizes, sizeof sizes, "%s", optarg); break;
      case 'r': reps = atoi(optarg); break;
      case 'm': min_ms = atof(optarg); break;
      case 'q': squares_only = 1; break;
      default: usage();
    }
  }
  if (optind != argc || threads < 1 || reps < 1 || min_ms <= 0) usage();
  /* Debian's oneDNN threads with OpenMP, whose count libgomp read from the environment when it
   * was loaded: only omp_set_num_threads changes it now */
  omp_set_num_threads(threads);

  enum { MAX_CASES = 32 };
  static char square_names[16][24];
  peak_case cs[MAX_CASES];
  int n = 0;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", sizes);
  for (char *tok = strtok(buf, ","); tok && n < 16; tok = strtok(NULL, ",")) {
    int s = atoi(tok);
    if (s < 1) usage();
    snprintf(square_names[n], sizeof square_names[n], "square %d", s);
    cs[n] = (peak_case){square_names[n], s, s, s, 0};
    n++;
  }
  if (!squares_only) {
    static const peak_case model[] = {
        {"124M attn proj C->C", 1024, 768, 768, 1},
        {"124M mlp up C->4C", 1024, 3072, 768, 1},
        {"124M mlp down 4C->C", 1024, 768, 3072, 1},
        {"124M lm head C->Vp", 1024, 50304, 768, 1},
        {"byte C->C", 1024, 256, 256, 1},
        {"byte mlp up C->4C", 1024, 1024, 256, 1},
    };
    for (size_t i = 0; i < sizeof model / sizeof model[0]; i++) cs[n++] = model[i];
  }

  dnnl_engine_t eng;
  dnnl_stream_t strm;
  CHECK(dnnl_engine_create(&eng, dnnl_cpu, 0));
  CHECK(dnnl_stream_create(&strm, eng, dnnl_stream_default_flags));
  int has_bf16 = loom__cpu_gemm_has_bf16(); /* the same test as the CPU device's */
  const dnnl_version_t *v = dnnl_version();
  printf("loom-dnnl-peak: oneDNN %d.%d.%d matmul, %d thread(s), effective ISA %s; best of %d "
         "repetitions (each >= %.0f ms) after warm-up\n",
         v->major, v->minor, v->patch, threads, loom__cpu_gemm_isa(), reps, min_ms);
  if (!has_bf16)
    printf("loom-dnnl-peak: the CPU has no bf16 units (no avx512_core_bf16 in oneDNN's ISA): "
           "the bf16 path is not available, its cases skipped (loom runs fp32 GEMMs there)\n");
  printf("%-22s %-5s %6s %6s %6s %9s %8s  %s\n", "case", "dtype", "M", "N", "K", "MFLOP",
         "GFLOP/s", "implementation");
  unsigned seed = 12345;
  double peak[2] = {0, 0};
  for (int i = 0; i < n; i++) {
    for (int bf16 = 0; bf16 <= has_bf16; bf16++) {
      char impl[128];
      double gf = measure(eng, strm, &cs[i], bf16, impl, sizeof impl, &seed);
      printf("%-22s %-5s %6d %6d %6d %9.2f %8.2f  %s\n", cs[i].name, bf16 ? "bf16" : "fp32",
             cs[i].m, cs[i].n, cs[i].k, 2.0 * cs[i].m * cs[i].n * cs[i].k / 1e6, gf, impl);
      fflush(stdout);
      if (gf > peak[bf16]) peak[bf16] = gf;
    }
  }
  printf("dnnl_threads %d\n", threads);
  printf("dnnl_isa %s\n", loom__cpu_gemm_isa());
  printf("dnnl_peak_gflops_fp32 %.2f\n", peak[0]);
  if (has_bf16) printf("dnnl_peak_gflops_bf16 %.2f\n", peak[1]);
  dnnl_stream_destroy(strm);
  dnnl_engine_destroy(eng);
  return 0;
}
