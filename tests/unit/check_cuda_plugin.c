/* cuda.so, the CUDA device plugin, through the real loader: it loads as a device of this ABI with
 * every slot set and nothing but loom_plugin_v1 exported; its options are checked before any GPU
 * is touched (unknown keys named); and create_ex either refuses with one line naming the missing
 * GPU / driver (no GPU: this machine) or, on a GPU, gives a context whose memory, copies and
 * reductions work, and whose kernels documented as bitwise the CPU device's (AdamW, encoder
 * forward and backward, residual, axpy, scale, cross-entropy backward, round_to, convert) are
 * (the comparison harness runs here with the CPU device standing in). Tolerance comparisons of
 * every kernel are the device conformance suite's (loom conformance --device cuda).
 *
 * Built without a CUDA toolkit there is no cuda.so: the test exits 77 (ctest: skipped). */
#include <check.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "runtime/loader.h"
#include "support/check_suite.h"

#define CUDA_SO LOOM_TEST_BUILD_DIR "/lib/loom/plugins/cuda.so"

static loom_plugin plug;
static const loom_device_v1 *dev;

static void open_plugin(void) {
  char err[1024];
  memset(&plug, 0, sizeof plug);
  int rc = loom__plugin_open(&plug, CUDA_SO, LOOM_KIND_DEVICE, err, sizeof err);
  ck_assert_msg(rc == 0, "loading %s: %s", CUDA_SO, err);
  dev = &plug.u.device;
}
/* No dlclose: the CUDA runtime registers exit handlers inside the module. */
static void keep_plugin(void) {}

START_TEST(identity) {
  ck_assert_str_eq(dev->hdr.name, "cuda");
  ck_assert_uint_eq(dev->hdr.kind, LOOM_KIND_DEVICE);
  ck_assert_uint_eq(dev->hdr.abi_major, LOOM_ABI_MAJOR);
  ck_assert_uint_eq(dev->hdr.abi_minor, LOOM_ABI_MINOR);
  ck_assert_uint_eq(dev->hdr.struct_size, sizeof(loom_device_v1));
  /* not host-addressable: the host must copy through to_host / from_host */
  ck_assert_uint_eq(dev->hdr.caps & LOOM_DEVICE_CAP_HOST_ADDRESSABLE, 0);
}
END_TEST

START_TEST(every_slot_set) {
#define SLOT(name) {#name, (const void *)dev->name}
  const struct {
    const char *name;
    const void *fn;
  } slots[] = {
      SLOT(create), SLOT(destroy), SLOT(alloc), SLOT(free), SLOT(memset_zero), SLOT(copy),
      SLOT(to_host), SLOT(from_host), SLOT(synchronize), SLOT(scale), SLOT(axpy),
      SLOT(sum_squares), SLOT(all_finite), SLOT(adamw), SLOT(encoder_forward),
      SLOT(encoder_backward), SLOT(layernorm_forward), SLOT(layernorm_backward),
      SLOT(matmul_forward), SLOT(matmul_backward), SLOT(attention_forward),
      SLOT(attention_backward), SLOT(gelu_forward), SLOT(gelu_backward), SLOT(residual_forward),
      SLOT(crossentropy_forward), SLOT(crossentropy_backward), SLOT(round_to), SLOT(convert),
      SLOT(create_ex), SLOT(native_stream), SLOT(set_compute_dtype), SLOT(crossentropy_fused),
      SLOT(error),
  };
  /* ABI 1.7's 16-bit-weight GEMMs are left NULL on purpose: the host then widens the weights
   * as before (the same bits); cuda.so takes them up with 16-bit activations, on a GPU
   * (issue 19's notes). Likewise ABI 1.8's acts16 (NULL: the host keeps fp32 activation
   * buffers) until cuda.so has 16-bit activation kernels, and ABI 1.9's flash attention (NULL:
   * the host keeps the materialised probabilities) until a GPU has run and measured a tiled
   * kernel (issue 20's notes); and ABI 1.13's ring-attention blocks (NULL: the host refuses
   * context parallel on cuda.so, naming the slots) until a GPU has run them (issue 24). */
  const void *left_null[] = {(const void *)dev->matmul_forward_w,
                             (const void *)dev->matmul_backward_w, (const void *)dev->acts16,
                             (const void *)dev->attention_forward_lse,
                             (const void *)dev->attention_backward_lse,
                             (const void *)dev->attention_block_forward,
                             (const void *)dev->attention_block_backward};
#undef SLOT
  /* the lists cover the whole table: one pointer per slot after the header */
  ck_assert_uint_eq(sizeof slots / sizeof slots[0] + sizeof left_null / sizeof left_null[0],
                    (sizeof(loom_device_v1) - sizeof(loom_plugin_header)) / sizeof(void *));
  for (size_t i = 0; i < sizeof left_null / sizeof left_null[0]; i++)
    ck_assert_ptr_null(left_null[i]);
  for (size_t i = 0; i < sizeof slots / sizeof slots[0]; i++)
    ck_assert_msg(slots[i].fn != NULL, "cuda.so leaves slot %s NULL", slots[i].name);
}
END_TEST

START_TEST(exports_only_the_entry_symbol) {
  /* the kernels' launchers are extern "C" in a .cu file: hidden like the rest */
  void *h = dlopen(CUDA_SO, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  ck_assert_ptr_nonnull(h);
  ck_assert_ptr_nonnull(dlsym(h, "loom_plugin_v1"));
  ck_assert_ptr_null(dlsym(h, "cuda_launch_adamw"));
  ck_assert_ptr_null(dlsym(h, "cuda_pool_alloc"));
  dlclose(h); /* drops only the reference RTLD_NOLOAD took */
}
END_TEST

/* ---- the kernels documented as bitwise the CPU device's (docs/devices.md, "The CUDA
 * device and NCCL": the CPU's expressions in its order, no FMA contraction) ---- */

typedef struct bench {
  const loom_device_v1 *dut; /* device under test */
  void *dut_ctx;
  const loom_device_v1 *cpu;
  void *cpu_ctx;
  uint64_t rng;
} bench;

static float frand(bench *b) { /* [-1, 1), splitmix64 */
  uint64_t z = (b->rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (float)((double)(z >> 11) * 0x1p-52 - 1.0);
}

/* A device copy of `bytes` of host data on the device under test. */
static void *up(bench *b, const void *host, size_t bytes) {
  void *d = b->dut->alloc(b->dut_ctx, bytes);
  ck_assert_ptr_nonnull(d);
  b->dut->from_host(b->dut_ctx, d, host, bytes);
  return d;
}
/* The device buffer's bytes equal `want`'s, reported by element (4-byte words). */
static void same_bits(bench *b, const char *what, const void *dev_ptr, const void *want,
                      size_t bytes) {
  unsigned char *got = malloc(bytes);
  b->dut->to_host(b->dut_ctx, got, dev_ptr, bytes);
  for (size_t i = 0; i < bytes; i++)
    ck_assert_msg(got[i] == ((const unsigned char *)want)[i],
                  "%s differs from the cpu device at byte %zu (element %zu)", what, i, i / 4);
  free(got);
  b->dut->free(b->dut_ctx, (void *)dev_ptr);
}

static void bitwise_adamw(bench *b) {
  enum { N = 10007 };
  static float p[N], g[N], m[N], v[N];
  for (int i = 0; i < N; i++) {
    p[i] = frand(b);
    g[i] = frand(b) * 1e-2f;
    m[i] = frand(b) * 1e-3f;
    v[i] = fabsf(frand(b)) * 1e-5f;
  }
  float *dp = up(b, p, sizeof p), *dg = up(b, g, sizeof g), *dm = up(b, m, sizeof m),
        *dv = up(b, v, sizeof v);
  for (int t = 1; t <= 3; t++) {
    b->cpu->adamw(b->cpu_ctx, p, g, m, v, N, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, t);
    b->dut->adamw(b->dut_ctx, dp, dg, dm, dv, N, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, t);
  }
  same_bits(b, "adamw param", dp, p, sizeof p);
  same_bits(b, "adamw m", dm, m, sizeof m);
  same_bits(b, "adamw v", dv, v, sizeof v);
  b->dut->free(b->dut_ctx, dg);
}

static void bitwise_encoder(bench *b) {
  enum { B = 3, T = 17, C = 45, V = 11 }; /* 51 positions, 11 tokens: many repeats */
  static int32_t inp[B * T];
  static float wte[V * C], wpe[T * C], out[B * T * C], dout[B * T * C], dwte[V * C], dwpe[T * C];
  for (int i = 0; i < B * T; i++) inp[i] = (int32_t)((i * 7 + i / 5) % V);
  inp[4] = inp[40] = inp[41] = 3; /* and a token seen at distant positions */
  for (int i = 0; i < V * C; i++) wte[i] = frand(b), dwte[i] = frand(b);
  for (int i = 0; i < T * C; i++) wpe[i] = frand(b), dwpe[i] = frand(b);
  for (int i = 0; i < B * T * C; i++) dout[i] = frand(b);
  int32_t *dinp = up(b, inp, sizeof inp);
  float *dwte_w = up(b, wte, sizeof wte), *dwpe_w = up(b, wpe, sizeof wpe);
  float *dout_d = up(b, dout, sizeof dout), *dwte_g = up(b, dwte, sizeof dwte),
        *dwpe_g = up(b, dwpe, sizeof dwpe);
  float *out_d = b->dut->alloc(b->dut_ctx, sizeof out);
  b->cpu->encoder_forward(b->cpu_ctx, out, inp, wte, wpe, B, T, C);
  b->dut->encoder_forward(b->dut_ctx, out_d, dinp, dwte_w, dwpe_w, B, T, C);
  same_bits(b, "encoder_forward out", out_d, out, sizeof out);
  b->cpu->encoder_backward(b->cpu_ctx, dwte, dwpe, dout, inp, B, T, C);
  b->dut->encoder_backward(b->dut_ctx, dwte_g, dwpe_g, dout_d, dinp, B, T, C);
  same_bits(b, "encoder_backward dwte", dwte_g, dwte, sizeof dwte);
  same_bits(b, "encoder_backward dwpe", dwpe_g, dwpe, sizeof dwpe);
  b->dut->free(b->dut_ctx, dinp);
  b->dut->free(b->dut_ctx, dwte_w);
  b->dut->free(b->dut_ctx, dwpe_w);
  b->dut->free(b->dut_ctx, dout_d);
}

static void bitwise_vectors(bench *b) {
  enum { N = 3001, ROWS = 7, V = 29 };
  static float x[N], y[N], r[N], probs[ROWS * V], dl[ROWS * V];
  for (int i = 0; i < N; i++) x[i] = frand(b) * 3.0f, y[i] = frand(b);
  for (int i = 0; i < ROWS * V; i++) probs[i] = fabsf(frand(b));
  int32_t tg[ROWS] = {3, -1, 0, 28, 5, 5, 17};
  float *dx = up(b, x, sizeof x), *dy = up(b, y, sizeof y);
  float *dr = b->dut->alloc(b->dut_ctx, sizeof r);
  b->cpu->residual_forward(b->cpu_ctx, r, x, y, N);
  b->dut->residual_forward(b->dut_ctx, dr, dx, dy, N);
  same_bits(b, "residual_forward", dr, r, sizeof r);
  b->cpu->axpy(b->cpu_ctx, y, -0.37f, x, N);
  b->dut->axpy(b->dut_ctx, dy, -0.37f, dx, N);
  b->cpu->scale(b->cpu_ctx, x, 1.7f, N);
  b->dut->scale(b->dut_ctx, dx, 1.7f, N);
  same_bits(b, "axpy", dy, y, sizeof y);
  same_bits(b, "scale", dx, x, sizeof x);
  float *dp = up(b, probs, sizeof probs);
  int32_t *dt = up(b, tg, sizeof tg);
  float *dd = b->dut->alloc(b->dut_ctx, sizeof dl);
  b->cpu->crossentropy_backward(b->cpu_ctx, dl, probs, tg, 1.0f / 3.0f, ROWS, V);
  b->dut->crossentropy_backward(b->dut_ctx, dd, dp, dt, 1.0f / 3.0f, ROWS, V);
  same_bits(b, "crossentropy_backward", dd, dl, sizeof dl);
  b->dut->free(b->dut_ctx, dp);
  b->dut->free(b->dut_ctx, dt);
}

static void bitwise_16bit(bench *b) {
  /* the hard cases: ties to even, the fp16 overflow and subnormal edges, NaN payloads, signed
   * zeros and infinities, then random patterns of every exponent */
  static const uint32_t special[] = {
      0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u,
      0x7f800001u, 0x7fa5a5a5u, 0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x477fe000u,
      0x477ff000u, 0x477fefffu, 0x33000000u, 0x33000001u, 0x387fc000u, 0x38800000u,
      0x00000001u, 0x807fffffu, 0x7f7fffffu, 0xff7f8000u, 0x3effffffu, 0x3a800800u};
  enum { NS = sizeof special / sizeof special[0], N = 4096 + NS };
  static float x[N], r[N];
  static uint16_t h[N];
  for (int i = 0; i < N; i++) {
    uint32_t u;
    if (i < NS) u = special[i];
    else u = (uint32_t)((frand(b) + 1.0f) * 2147483647.0f) ^ ((uint32_t)i << 20);
    memcpy(&x[i], &u, 4);
  }
  const loom_dtype dts[2] = {LOOM_BF16, LOOM_F16};
  for (int k = 0; k < 2; k++) {
    const char *name = dts[k] == LOOM_BF16 ? "bf16" : "fp16";
    char what[64];
    float *dx = up(b, x, sizeof x);
    memcpy(r, x, sizeof x);
    b->cpu->round_to(b->cpu_ctx, r, dts[k], N);
    b->dut->round_to(b->dut_ctx, dx, dts[k], N);
    snprintf(what, sizeof what, "round_to %s", name);
    same_bits(b, what, dx, r, sizeof r);
    dx = up(b, x, sizeof x);
    uint16_t *dh = b->dut->alloc(b->dut_ctx, sizeof h);
    ck_assert_int_eq(b->cpu->convert(b->cpu_ctx, h, dts[k], x, LOOM_F32, N), LOOM_OK);
    ck_assert_int_eq(b->dut->convert(b->dut_ctx, dh, dts[k], dx, LOOM_F32, N), LOOM_OK);
    b->dut->free(b->dut_ctx, dx);
    /* widen what the cpu packed, on both */
    b->dut->from_host(b->dut_ctx, dh, h, sizeof h);
    float *dw = b->dut->alloc(b->dut_ctx, sizeof r);
    ck_assert_int_eq(b->cpu->convert(b->cpu_ctx, r, LOOM_F32, h, dts[k], N), LOOM_OK);
    ck_assert_int_eq(b->dut->convert(b->dut_ctx, dw, LOOM_F32, dh, dts[k], N), LOOM_OK);
    snprintf(what, sizeof what, "convert %s -> f32", name);
    same_bits(b, what, dw, r, sizeof r);
    /* and pack again: the narrowing itself, compared */
    dx = up(b, x, sizeof x);
    ck_assert_int_eq(b->dut->convert(b->dut_ctx, dh, dts[k], dx, LOOM_F32, N), LOOM_OK);
    snprintf(what, sizeof what, "convert f32 -> %s", name);
    same_bits(b, what, dh, h, sizeof h);
    b->dut->free(b->dut_ctx, dx);
  }
}

/* Every comparison above with `dut` as the device under test. */
static void bitwise_suite(const loom_device_v1 *dut, void *dut_ctx) {
  bench b = {.dut = dut, .dut_ctx = dut_ctx, .cpu = loom__cpu_device(), .rng = 42};
  ck_assert_int_eq(b.cpu->create("{\"type\": \"cpu\", \"threads\": 1}", 0, &b.cpu_ctx), LOOM_OK);
  bitwise_adamw(&b);
  bitwise_encoder(&b);
  bitwise_vectors(&b);
  bitwise_16bit(&b);
  b.cpu->destroy(b.cpu_ctx);
}

/* create_ex with `json`: expect `rc` and a one-line message containing `needle`. */
static void expect_refusal(const char *json, int local_size, int rc, const char *needle) {
  char err[512];
  memset(err, 'x', sizeof err);
  void *ctx = (void *)&err;
  int got = dev->create_ex(json, 0, local_size, &ctx, err, sizeof err);
  ck_assert_msg(got == rc, "%s: rc %d, expected %d (%s)", json, got, rc, err);
  ck_assert_ptr_null(ctx);
  ck_assert_msg(memchr(err, '\0', sizeof err) != NULL, "%s: message not terminated", json);
  ck_assert_msg(strstr(err, "device 'cuda'") != NULL, "%s: message does not name the device: %s",
                json, err);
  ck_assert_msg(strstr(err, needle) != NULL, "%s: message lacks \"%s\": %s", json, needle, err);
  ck_assert_msg(strchr(err, '\n') == NULL, "%s: not one line: %s", json, err);
}

START_TEST(options_checked_before_the_gpu) {
  expect_refusal("{\"type\": \"cuda\", \"tf33\": true}", 1, LOOM_INVALID_CONFIG, "\"tf33\"");
  expect_refusal("{\"type\": \"cuda\", \"tf32\": 1}", 1, LOOM_INVALID_CONFIG, "\"tf32\"");
  expect_refusal("{\"type\": \"cuda\", \"share_gpus\": \"yes\"}", 1, LOOM_INVALID_CONFIG,
                 "\"share_gpus\"");
  expect_refusal("{\"type\": \"cuda\", \"device_id\": -1}", 1, LOOM_INVALID_CONFIG,
                 "\"device_id\"");
  expect_refusal("{\"type\": \"cuda\", \"threads\": -2}", 1, LOOM_INVALID_CONFIG,
                 "\"threads\"");
  expect_refusal("{\"type\": \"cpu\"}", 1, LOOM_UNSUPPORTED, "expected \"cuda\"");
  expect_refusal("[1, 2]", 1, LOOM_INVALID_CONFIG, "not a JSON object");
  expect_refusal("{\"type\": ", 1, LOOM_INVALID_CONFIG, "not a JSON object");
}
END_TEST

/* 1 when this machine has a usable GPU (then the GPU cases run instead of the refusal). */
static int have_gpu(void) {
  char err[512];
  void *ctx = NULL;
  int rc = dev->create_ex("{\"type\": \"cuda\"}", 0, 1, &ctx, err, sizeof err);
  if (rc == LOOM_OK) dev->destroy(ctx);
  return rc == LOOM_OK;
}

START_TEST(refuses_without_a_gpu) {
  if (have_gpu()) return; /* covered by gpu_smoke */
  char err[512] = "";
  void *ctx = NULL;
  int rc = dev->create_ex("{\"type\": \"cuda\", \"_note\": \"a comment\", \"tf32\": true, "
                          "\"threads\": 1}",
                          0, 1,
                          &ctx, err, sizeof err);
  ck_assert_int_eq(rc, LOOM_UNSUPPORTED);
  ck_assert_ptr_null(ctx);
  ck_assert_msg(strstr(err, "device 'cuda': no usable GPU") != NULL ||
                    strstr(err, "device 'cuda': no GPU visible") != NULL,
                "unexpected reason: %s", err);
  ck_assert_msg(strstr(err, "driver") != NULL || strstr(err, "CUDA_VISIBLE_DEVICES") != NULL,
                "the reason names neither the driver nor the visible GPUs: %s", err);
  fprintf(stderr, "check_cuda_plugin: create_ex without a GPU: %s\n", err);
  /* the ABI 1.0 slot gives the same status, without the message */
  ctx = NULL;
  ck_assert_int_eq(dev->create("{\"type\": \"cuda\"}", 0, &ctx), LOOM_UNSUPPORTED);
  ck_assert_ptr_null(ctx);
}
END_TEST

/* The harness itself, with the cpu device standing in for the device under test: this runs
 * everywhere, so the comparisons that run on a GPU (gpu_bitwise_vs_cpu) are known to work. */
START_TEST(bitwise_harness_on_cpu) {
  const loom_device_v1 *cpu = loom__cpu_device();
  void *ctx = NULL;
  ck_assert_int_eq(cpu->create("{\"type\": \"cpu\", \"threads\": 1}", 0, &ctx), LOOM_OK);
  bitwise_suite(cpu, ctx);
  cpu->destroy(ctx);
}
END_TEST

START_TEST(gpu_bitwise_vs_cpu) {
  if (!have_gpu()) return; /* bitwise_harness_on_cpu runs the harness here */
  char err[512];
  void *ctx = NULL;
  ck_assert_int_eq(dev->create_ex("{\"type\": \"cuda\"}", 0, 1, &ctx, err, sizeof err), LOOM_OK);
  bitwise_suite(dev, ctx);
  dev->destroy(ctx);
}
END_TEST

START_TEST(gpu_smoke) {
  if (!have_gpu()) return; /* nothing to run here: refuses_without_a_gpu covers it */
  expect_refusal("{\"type\": \"cuda\"}", 100000, LOOM_UNSUPPORTED, "100000 local ranks");
  char err[512];
  void *ctx = NULL;
  ck_assert_int_eq(dev->create_ex("{\"type\": \"cuda\"}", 0, 1, &ctx, err, sizeof err), LOOM_OK);
  ck_assert_ptr_nonnull(dev->native_stream(ctx));
  enum { N = 1000 };
  float host[N], back[N];
  float *x = dev->alloc(ctx, N * sizeof(float));
  ck_assert_ptr_nonnull(x);
  dev->to_host(ctx, back, x, sizeof back);
  for (int i = 0; i < N; i++) ck_assert_msg(back[i] == 0.0f, "alloc not zeroed at %d", i);
  double want = 0.0;
  for (int i = 0; i < N; i++) {
    host[i] = (float)(i % 7) - 3.0f;
    want += (double)host[i] * host[i];
  }
  dev->from_host(ctx, x, host, sizeof host);
  ck_assert(dev->sum_squares(ctx, x, N) == want); /* small integers: exact */
  ck_assert_int_eq(dev->all_finite(ctx, x, N), 1);
  dev->scale(ctx, x, 2.0f, N);
  dev->to_host(ctx, back, x, sizeof back);
  for (int i = 0; i < N; i++) ck_assert(back[i] == 2.0f * host[i]);
  host[N / 2] = INFINITY;
  dev->from_host(ctx, x, host, sizeof host);
  ck_assert_int_eq(dev->all_finite(ctx, x, N), 0);
  /* freed and re-allocated: the same block from the cache, zeroed again */
  dev->free(ctx, x);
  float *y = dev->alloc(ctx, N * sizeof(float));
  dev->to_host(ctx, back, y, sizeof back);
  for (int i = 0; i < N; i++) ck_assert(back[i] == 0.0f);
  dev->free(ctx, y);
  dev->destroy(ctx);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("cuda_plugin");
  check_add_tcase(s, "load",
                  CHECK_TESTS(identity, every_slot_set, exports_only_the_entry_symbol,
                              options_checked_before_the_gpu, refuses_without_a_gpu, gpu_smoke,
                              bitwise_harness_on_cpu, gpu_bitwise_vs_cpu),
                  open_plugin, keep_plugin, 120);
  return s;
}

int main(void) {
#ifndef LOOM_TEST_HAVE_CUDA
  (void)suite;
  printf("check_cuda_plugin: skipped: built without a CUDA toolkit, so there is no cuda.so\n");
  return 77;
#else
  return check_run_suite(suite(), CK_FORK_GETENV);
#endif
}
