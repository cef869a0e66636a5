/* The built-in CPU device backend: its loom_device_v1 table, options, memory and the vector
 * kernels (scale, axpy, reductions). AdamW lives in cpu_adamw.c, the GPT kernels in
 * cpu_layers.c, cpu_attention.c, cpu_flash.c, cpu_gelu.c and cpu_crossentropy.c, the GEMMs they
 * call in cpu_gemm.c (oneDNN). Device pointers are host pointers
 * (LOOM_DEVICE_CAP_HOST_ADDRESSABLE).
 *
 * Options (the config's "device" object): {"type": "cpu", "threads": N}. threads 0 or absent
 * keeps OpenMP's default; otherwise OpenMP, which threads oneDNN as well as loom's kernels, is
 * set to N, process-wide (it has no per-instance thread count). Keys starting with '_' are
 * comments; other unknown keys are LOOM_INVALID_CONFIG, a type other than "cpu" is
 * LOOM_UNSUPPORTED.
 *
 * Reductions (sum_squares) split the vector into a fixed number of chunks whatever the thread
 * count and add the partials in chunk order, so results are bitwise identical for any number of
 * threads. */
#include <float.h>
#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "device.h"

#define CPU_ALIGN 64

static int cpu_parse_options(const char *options_json, int *threads) {
  json_error_t jerr;
  json_t *root = json_loads(options_json, 0, &jerr);
  if (!root) return LOOM_INVALID_CONFIG;
  int rc = json_is_object(root) ? LOOM_OK : LOOM_INVALID_CONFIG;
  const char *key;
  json_t *val;
  *threads = 0;
  if (rc == LOOM_OK) {
    json_object_foreach(root, key, val) {
      if (key[0] == '_') continue; /* a comment, as everywhere in the config */
      if (strcmp(key, "type") == 0) {
        if (!json_is_string(val)) rc = LOOM_INVALID_CONFIG;
        else if (strcmp(json_string_value(val), "cpu") != 0) rc = LOOM_UNSUPPORTED;
      } else if (strcmp(key, "threads") == 0) {
        if (!json_is_integer(val) || json_integer_value(val) < 0 ||
            json_integer_value(val) > 4096)
          rc = LOOM_INVALID_CONFIG;
        else
          *threads = (int)json_integer_value(val);
      } else {
        rc = LOOM_INVALID_CONFIG; /* unknown key: a typo must not pass silently */
      }
      if (rc != LOOM_OK) break;
    }
  }
  json_decref(root);
  return rc;
}

static int cpu_create(const char *options_json, int local_rank, void **ctx) {
  (void)local_rank;
  *ctx = NULL;
  int threads = 0;
  int rc = cpu_parse_options(options_json ? options_json : "{}", &threads);
  if (rc != LOOM_OK) return rc;
  loom_cpu_ctx *c = calloc(1, sizeof *c);
  if (!c) return LOOM_NOMEM;
  char err[128];
  c->threads = threads;
  c->gemm = loom__cpu_gemm_open(err, sizeof err);
  if (!c->gemm) {
    free(c);
    return LOOM_UNSUPPORTED;
  }
  if (threads > 0) {
    omp_set_num_threads(threads);
  }
  *ctx = c;
  return LOOM_OK;
}

static void cpu_destroy(void *ctx) {
  loom_cpu_ctx *c = ctx;
  if (c) loom__cpu_gemm_close(c->gemm);
  if (c) loom__cpu16_free(c);
  if (c) loom__cpu_flash_free(c);
  free(c);
}

/* bf16 operands for the linear layers' GEMMs where the CPU has the units (cpu_gemm.h). */
static void cpu_set_compute_dtype(void *ctx, loom_dtype dt) {
  loom__cpu_gemm_set_dtype(((loom_cpu_ctx *)ctx)->gemm, dt);
}

/* ---- memory ---- */

static void *cpu_alloc(void *ctx, size_t bytes) {
  (void)ctx;
  size_t rounded = bytes ? (bytes + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN : CPU_ALIGN;
  if (rounded < bytes) return NULL; /* overflow */
  void *p = aligned_alloc(CPU_ALIGN, rounded);
  if (p) memset(p, 0, rounded);
  return p;
}

static void cpu_free(void *ctx, void *ptr) {
  (void)ctx;
  free(ptr);
}

static void cpu_memset_zero(void *ctx, void *ptr, size_t bytes) {
  (void)ctx;
  if (bytes) memset(ptr, 0, bytes);
}

static void cpu_copy(void *ctx, void *dst, const void *src, size_t bytes) {
  (void)ctx;
  if (bytes && dst != src) memmove(dst, src, bytes);
}

static void cpu_synchronize(void *ctx) { (void)ctx; }

/* ---- vector kernels ---- */

static void cpu_scale(void *ctx, float *x, float alpha, size_t n) {
  (void)ctx;
  ptrdiff_t len = (ptrdiff_t)n;
#pragma omp parallel for simd if (len > LOOM_CPU_PAR_MIN)
  for (ptrdiff_t i = 0; i < len; i++) x[i] *= alpha;
}

static void cpu_axpy(void *ctx, float *y, float alpha, const float *x, size_t n) {
  (void)ctx;
  ptrdiff_t len = (ptrdiff_t)n;
#pragma omp parallel for simd if (len > LOOM_CPU_PAR_MIN)
  for (ptrdiff_t i = 0; i < len; i++) y[i] += alpha * x[i];
}

static double cpu_sum_squares(void *ctx, const float *x, size_t n) {
  (void)ctx;
  double partial[LOOM_CPU_REDUCE_CHUNKS];
  size_t chunk = (n + LOOM_CPU_REDUCE_CHUNKS - 1) / LOOM_CPU_REDUCE_CHUNKS;
#pragma omp parallel for schedule(static) if (n > LOOM_CPU_PAR_MIN)
  for (int c = 0; c < LOOM_CPU_REDUCE_CHUNKS; c++) {
    size_t lo = (size_t)c * chunk, hi = lo + chunk;
    if (lo > n) lo = n;
    if (hi > n) hi = n;
    double acc = 0.0;
#pragma omp simd reduction(+ : acc)
    for (size_t i = lo; i < hi; i++) acc += (double)x[i] * (double)x[i];
    partial[c] = acc;
  }
  double sum = 0.0;
  for (int c = 0; c < LOOM_CPU_REDUCE_CHUNKS; c++) sum += partial[c];
  return sum;
}

static int cpu_all_finite(void *ctx, const float *x, size_t n) {
  (void)ctx;
  ptrdiff_t len = (ptrdiff_t)n;
  int bad = 0;
  /* !(|x| <= FLT_MAX) is true exactly for inf and NaN, and vectorises */
#pragma omp parallel for simd reduction(| : bad) if (len > LOOM_CPU_PAR_MIN)
  for (ptrdiff_t i = 0; i < len; i++) bad |= !(fabsf(x[i]) <= FLT_MAX);
  return !bad;
}

static void cpu_to_host(void *ctx, void *host_dst, const void *src, size_t bytes) {
  cpu_copy(ctx, host_dst, src, bytes);
}

static void cpu_from_host(void *ctx, void *dst, const void *host_src, size_t bytes) {
  cpu_copy(ctx, dst, host_src, bytes);
}

static const loom_device_v1 cpu_device = {
    .hdr = LOOM_PLUGIN_HEADER_INIT(LOOM_KIND_DEVICE, "cpu", "1.0.0",
                                   "built-in CPU backend (oneDNN GEMM, OpenMP)",
                                   LOOM_DEVICE_CAP_HOST_ADDRESSABLE, loom_device_v1),
    .create = cpu_create,
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .memset_zero = cpu_memset_zero,
    .copy = cpu_copy,
    .to_host = cpu_to_host,
    .from_host = cpu_from_host,
    .synchronize = cpu_synchronize,
    .scale = cpu_scale,
    .axpy = cpu_axpy,
    .sum_squares = cpu_sum_squares,
    .all_finite = cpu_all_finite,
    .adamw = loom__cpu_adamw,
    .encoder_forward = loom__cpu_encoder_forward,
    .encoder_backward = loom__cpu_encoder_backward,
    .layernorm_forward = loom__cpu_layernorm_forward,
    .layernorm_backward = loom__cpu_layernorm_backward,
    .matmul_forward = loom__cpu_matmul_forward,
    .matmul_backward = loom__cpu_matmul_backward,
    .attention_forward = loom__cpu_attention_forward,
    .attention_backward = loom__cpu_attention_backward,
    .gelu_forward = loom__cpu_gelu_forward,
    .gelu_backward = loom__cpu_gelu_backward,
    .residual_forward = loom__cpu_residual_forward,
    .crossentropy_forward = loom__cpu_crossentropy_forward,
    .crossentropy_backward = loom__cpu_crossentropy_backward,
    .round_to = loom__cpu_round_to,
    .convert = loom__cpu_convert,
    .set_compute_dtype = cpu_set_compute_dtype,
    .crossentropy_fused = loom__cpu_crossentropy_fused,
    .matmul_forward_w = loom__cpu_matmul_forward_w,
    .matmul_backward_w = loom__cpu_matmul_backward_w,
    .acts16 = loom__cpu_acts16,
    .attention_forward_lse = loom__cpu_attention_forward_lse,
    .attention_backward_lse = loom__cpu_attention_backward_lse,
    .error = NULL, /* ABI 1.10: no fault the host could not see (a CPU kernel does not fail) */
    .attention_block_forward = loom__cpu_attention_block_forward,
    .attention_block_backward = loom__cpu_attention_block_backward,
};

const loom_device_v1 *loom__cpu_device(void) { return &cpu_device; }

int loom__cpu_describe(const loom_dev *dev, char *buf, size_t n) {
  if (!dev->ops || dev->ops->create != cpu_create || !dev->ctx) return 0;
  const loom_cpu_ctx *c = dev->ctx;
  int threads = omp_get_max_threads();
  snprintf(buf, n, "oneDNN %s, %d thread%s, GEMM operands %s", loom__cpu_gemm_isa(), threads,
           threads == 1 ? "" : "s",
           loom__cpu_gemm_operand_dtype(c->gemm) == LOOM_BF16 ? "bf16" : "fp32");
  return 1;
}
