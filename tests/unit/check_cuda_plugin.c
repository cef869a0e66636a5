/* cuda.so, the CUDA device plugin, through the real loader: it loads as a device of this ABI with
 * every slot set and nothing but loom_plugin_v1 exported; its options are checked before any GPU
 * is touched (unknown keys named); and create_ex either refuses with one line naming the missing
 * GPU / driver (no GPU: this machine) or, on a GPU, gives a context whose memory, copies and
 * reductions work. The kernels themselves are compared with the CPU device by the device
 * conformance suite on a GPU machine.
 *
 * Built without a CUDA toolkit there is no cuda.so: the test exits 77 (ctest: skipped). */
#include <check.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/loader.h"

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
      SLOT(create_ex), SLOT(native_stream), SLOT(set_compute_dtype),
  };
#undef SLOT
  /* the list covers the whole table: one pointer per slot after the header */
  ck_assert_uint_eq(sizeof slots / sizeof slots[0],
                    (sizeof(loom_device_v1) - sizeof(loom_plugin_header)) / sizeof(void *));
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
  TCase *tc = tcase_create("load");
  tcase_add_checked_fixture(tc, open_plugin, keep_plugin);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, identity);
  tcase_add_test(tc, every_slot_set);
  tcase_add_test(tc, exports_only_the_entry_symbol);
  tcase_add_test(tc, options_checked_before_the_gpu);
  tcase_add_test(tc, refuses_without_a_gpu);
  tcase_add_test(tc, gpu_smoke);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
#ifndef LOOM_TEST_HAVE_CUDA
  (void)suite;
  printf("check_cuda_plugin: skipped: built without a CUDA toolkit, so there is no cuda.so\n");
  return 77;
#else
  SRunner *sr = srunner_create(suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
#endif
}
