/* ABI compatibility in one place (ABI 1.6): the SDK's LOOM_HAS / LOOM_COVERS and compat.h
 * accessors, the host's full-size zero-filled table copies (abi_compat.c, device included),
 * and the storage plan (storage_plan.c) as the host decides it and a plugin reads it from any
 * host (loom_storage_plan_of). */
#include <loom/loom.h>

#include "device/device.h"
#include "abi/abi_compat.h"
#include "runtime/loader.h"
#include "runtime/plugins.h"
#include "runtime/storage_plan.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "support/check_suite.h"

#define FIXTURES LOOM_TEST_BUILD_DIR "/tests/fixtures"
#define PLUGINS LOOM_TEST_BUILD_DIR "/lib/loom/plugins"

/* Fill the bytes of a table past its declared struct_size with non-NULL garbage. */
static void poison_tail(loom_device_v1 *t) {
  memset((char *)t + t->hdr.struct_size, 0xAB, sizeof *t - t->hdr.struct_size);
}

/* ---- LOOM_HAS / LOOM_COVERS ---------------------------------------------------------------- */

START_TEST(test_has_reads_struct_size) {
  loom_host_api_v1 api = *loom__host_api();
  ck_assert(LOOM_HAS(&api, grads_predivided));
  ck_assert(LOOM_HOST_HAS(&api, micro_tokens));
  /* a 1.4 host's table: the 1.5 slot lies past its end, whatever the bytes there */
  api.struct_size = (uint32_t)offsetof(loom_host_api_v1, grads_predivided);
  ck_assert_ptr_nonnull(api.grads_predivided);
  ck_assert(!LOOM_HAS(&api, grads_predivided));
  ck_assert(LOOM_HAS(&api, micro_tokens));
  /* a slot inside the struct but NULL */
  api.micro_tokens = NULL;
  ck_assert(LOOM_COVERS(&api, micro_tokens));
  ck_assert(!LOOM_HAS(&api, micro_tokens));
  /* a plugin table: the header's struct_size is the same first four bytes */
  loom_device_v1 dev = *loom__cpu_device();
  ck_assert(LOOM_HAS(&dev, convert));
  dev.hdr.struct_size = (uint32_t)offsetof(loom_device_v1, round_to);
  ck_assert(!LOOM_HAS(&dev, convert));
  ck_assert(LOOM_HAS(&dev, adamw));
}
END_TEST

/* compat.h's value accessors: the default an older host means where the field is missing. */
START_TEST(test_value_accessors) {
  loom_model_v1 m = {.struct_size = sizeof m, .compute_dtype = LOOM_BF16,
                     .param_dtype = LOOM_BF16, .grad_dtype = LOOM_BF16};
  ck_assert_int_eq(LOOM_MODEL_PARAM_DTYPE(&m), LOOM_BF16);
  m.struct_size = (uint32_t)offsetof(loom_model_v1, param_dtype); /* a 1.3 host */
  ck_assert_int_eq(LOOM_MODEL_COMPUTE_DTYPE(&m), LOOM_BF16);
  ck_assert_int_eq(LOOM_MODEL_PARAM_DTYPE(&m), LOOM_F32);
  ck_assert_int_eq(LOOM_MODEL_GRAD_DTYPE(&m), LOOM_F32);
  float x;
  loom_partition_v1 p = {.struct_size = sizeof p, .master = &x};
  ck_assert_ptr_eq(LOOM_PARTITION_MASTER(&p), &x);
  p.struct_size = (uint32_t)offsetof(loom_partition_v1, master);
  ck_assert_ptr_null(LOOM_PARTITION_MASTER(&p));
  loom_step_args_v1 a = {.struct_size = sizeof a, .grad_scale = 0.25f};
  ck_assert_float_eq(LOOM_STEP_GRAD_SCALE(&a), 0.25f);
  a.struct_size = (uint32_t)offsetof(loom_step_args_v1, grad_scale);
  ck_assert_float_eq(LOOM_STEP_GRAD_SCALE(&a), 1.0f);
}
END_TEST

/* ---- the host's copies --------------------------------------------------------------------- */

/* A device table handed to loom__dev_open directly (not through the loader) is copied into the
 * loom_dev full size and zero-filled: what lies past its struct_size is never seen, so every
 * consumer (gpt.c, the host API's device(), plugins) can test a slot for NULL. */
START_TEST(test_device_copy_zero_fills) {
  loom_device_v1 old = *loom__cpu_device();
  old.hdr.struct_size = (uint32_t)offsetof(loom_device_v1, round_to); /* ABI 1.2 */
  old.hdr.abi_minor = 2;
  /* poison past the end: a table copied past struct_size would expose it */
  poison_tail(&old);
  ck_assert_ptr_nonnull(old.round_to);
  loom_dev d;
  char err[256] = "";
  ck_assert_int_eq(loom__dev_open(&d, &old, "{}", 0, err, sizeof err), LOOM_OK);
  ck_assert_ptr_ne(d.ops, &old);
  ck_assert_ptr_null(d.ops->round_to);
  ck_assert_ptr_null(d.ops->convert);
  ck_assert_ptr_null(d.ops->crossentropy_fused);
  ck_assert_ptr_null(d.ops->native_stream);
  ck_assert_ptr_nonnull(d.ops->adamw);
  ck_assert_uint_eq(d.ops->hdr.struct_size, old.hdr.struct_size);
  ck_assert_uint_eq(d.ops->hdr.abi_minor, 2);
  loom__dev_close(&d);
  /* a 1.7 table ends before acts16: the host sees none (fp32 activation buffers) */
  loom_device_v1 v17 = *loom__cpu_device();
  v17.hdr.struct_size = (uint32_t)offsetof(loom_device_v1, acts16);
  v17.hdr.abi_minor = 7;
  poison_tail(&v17);
  ck_assert_ptr_nonnull(v17.acts16);
  ck_assert_int_eq(loom__dev_open(&d, &v17, "{}", 0, err, sizeof err), LOOM_OK);
  ck_assert_ptr_null(d.ops->acts16);
  ck_assert_ptr_nonnull(d.ops->matmul_forward_w);
  loom__dev_close(&d);
  /* a 1.8 table ends before the lse attention: the host keeps the probabilities */
  loom_device_v1 v18 = *loom__cpu_device();
  v18.hdr.struct_size = (uint32_t)offsetof(loom_device_v1, attention_forward_lse);
  v18.hdr.abi_minor = 8;
  poison_tail(&v18);
  ck_assert_ptr_nonnull(v18.attention_forward_lse);
  ck_assert_int_eq(loom__dev_open(&d, &v18, "{}", 0, err, sizeof err), LOOM_OK);
  ck_assert_ptr_null(d.ops->attention_forward_lse);
  ck_assert_ptr_null(d.ops->attention_backward_lse);
  ck_assert_ptr_nonnull(d.ops->acts16);
  gpt_config whole = {.vocab_size = 17, .max_seq_len = 8, .n_layer = 1, .n_head = 2,
                      .n_embd = 8};
  ck_assert_int_eq(gpt_device_has_attn_lse(&whole, &d), 0);
  loom__dev_close(&d);
  /* a newer backend's table: the copy says how much of it this host holds, so a plugin's
   * LOOM_HAS on api->device() never reads past the host's struct */
  loom_device_v1 newer = *loom__cpu_device();
  newer.hdr.struct_size = (uint32_t)sizeof newer + 64;
  loom_device_v1 c;
  loom__abi_copy_device(&c, &newer);
  ck_assert_uint_eq(c.hdr.struct_size, sizeof c);
}
END_TEST

/* A 1.9 device whose acts16 table is a 1.8 one (struct_size ends before its lse fields): flash
 * attention is there for fp32 activations and not for 16-bit ones end to end. */
static loom_device_acts16_v1 table_v18;
static const loom_device_acts16_v1 *acts16_v18(void *ctx, loom_dtype dt) {
  const loom_device_acts16_v1 *t = loom__cpu_device()->acts16(ctx, dt);
  if (!t) return NULL;
  memset(&table_v18, 0xA5, sizeof table_v18); /* poison: the host must not read past the size */
  memcpy(&table_v18, t, offsetof(loom_device_acts16_v1, attention_forward_lse));
  table_v18.struct_size = (uint32_t)offsetof(loom_device_acts16_v1, attention_forward_lse);
  return &table_v18;
}

START_TEST(test_acts16_table_without_lse) {
  loom_device_v1 ops = *loom__cpu_device();
  ck_assert_ptr_nonnull(ops.attention_forward_lse);
  loom_dev d;
  char err[256] = "";
  ck_assert_int_eq(loom__dev_open(&d, &ops, "{}", 0, err, sizeof err), LOOM_OK);
  gpt_config c = {.vocab_size = 17, .max_seq_len = 8, .n_layer = 1, .n_head = 2, .n_embd = 8,
                  .dtype = LOOM_BF16, .acts_typed = 1};
  ck_assert_int_eq(gpt_device_has_attn_lse(&c, &d), 1); /* the CPU's own 1.9 tables */
  gpt_config f32 = c;
  f32.dtype = LOOM_F32, f32.acts_typed = 0;
  ck_assert_int_eq(gpt_device_has_attn_lse(&f32, &d), 1);
  loom__dev_close(&d);
  ops.acts16 = acts16_v18;
  ck_assert_int_eq(loom__dev_open(&d, &ops, "{}", 0, err, sizeof err), LOOM_OK);
  ck_assert_int_eq(gpt_device_has_attn_lse(&c, &d), 0);
  ck_assert_int_eq(gpt_device_has_attn_lse(&f32, &d), 1);
  /* asked anyway (a caller's error): refused, naming the device and the slot */
  gpt_model m;
  c.attn_lse = 1;
  ck_assert_int_eq(gpt_init(&m, &c, &d, err, sizeof err), LOOM_UNSUPPORTED);
  ck_assert_msg(strstr(err, "attention_forward_lse") && strstr(err, "acts16") &&
                strstr(err, "cpu"), "%s", err);
  loom__dev_close(&d);
}
END_TEST

/* The loader's copy of a 1.0-era table (old_minor.so): the 1.4 / 1.5 fields are 0, which is
 * what the storage plan reads as "not written for 16-bit buffers" and "averages itself". */
START_TEST(test_loader_defaults_old_fields) {
  loom_plugin p;
  char err[1024];
  ck_assert_msg(loom__plugin_open(&p, FIXTURES "/old_minor.so", LOOM_KIND_PARALLEL, err,
                                  sizeof err) == 0, "%s", err);
  ck_assert_uint_eq(p.u.parallel.storage, 0);
  ck_assert_uint_eq(p.u.parallel.grad_sync, 0);
  ck_assert_ptr_null(p.u.parallel.region);
  ck_assert_ptr_null(p.u.parallel.run_step);
  loom__plugin_close(&p);
}
END_TEST

/* ---- the storage plan ---------------------------------------------------------------------- */

static loom_config cfg;
static loom_runtime rt;

static void open_config(const char *const *parallel, int n, int accum) {
  memset(&cfg, 0, sizeof cfg);
  memset(&rt, 0, sizeof rt);
  rt.cfg = &cfg;
  snprintf(cfg.path, sizeof cfg.path, "plan.json");
  cfg.n_parallel = n;
  cfg.train.grad_accum_steps = accum;
  for (int i = 0; i < n; i++) {
    snprintf(cfg.parallel[i].name, sizeof cfg.parallel[i].name, "%s", parallel[i]);
    snprintf(cfg.parallel[i].json_path, sizeof cfg.parallel[i].json_path, "parallel[%d]", i);
  }
  snprintf(cfg.precision.name, sizeof cfg.precision.name, "fp32");
  snprintf(cfg.precision.json_path, sizeof cfg.precision.json_path, "precision");
  snprintf(cfg.comm.name, sizeof cfg.comm.name, "mpi");
  snprintf(cfg.comm.json_path, sizeof cfg.comm.json_path, "comm");
  setenv("LOOM_PLUGIN_PATH", PLUGINS ":" FIXTURES, 1);
  char err[2048];
  ck_assert_msg(loom__plugins_open(&rt, err, sizeof err) == 0, "%s", err);
}

static void plan_teardown(void) { loom__plugins_destroy(&rt); }

START_TEST(test_plan_fp32) {
  open_config((const char *const[]){"ddp"}, 1, 1);
  loom_plan p;
  loom__storage_plan(&rt, LOOM_F32, 4, &p);
  ck_assert_uint_eq(p.v.struct_size, sizeof p.v);
  ck_assert_int_eq(p.v.param_dtype, LOOM_F32);
  ck_assert_int_eq(p.v.grad_dtype, LOOM_F32);
  ck_assert_int_eq(p.v.master_dtype, LOOM_F32);
  ck_assert_int_eq(p.v.master_is_params, 1);
  ck_assert_int_eq(p.v.grad_comm_dtype, LOOM_F32);
  ck_assert_int_eq(p.v.activation_comm_dtype, LOOM_F32);
  ck_assert_int_eq(p.v.grads_predivided, 1);
  ck_assert_int_eq(p.v.dp, 4);
  ck_assert_ptr_eq(p.v.reason, p.reason);
  ck_assert_msg(strstr(p.reason, "predivided by dp 4: ddp") != NULL, "%s", p.reason);
  ck_assert_int_eq(loom__plan_grads_predivided(&rt, 1), 0);
  plan_teardown();
}
END_TEST

START_TEST(test_plan_16bit) {
  open_config((const char *const[]){"zero2"}, 1, 1);
  loom_plan p;
  loom__storage_plan(&rt, LOOM_BF16, 2, &p);
  ck_assert_int_eq(p.v.param_dtype, LOOM_BF16);
  ck_assert_int_eq(p.v.grad_dtype, LOOM_BF16);
  ck_assert_int_eq(p.v.master_is_params, 0);
  ck_assert_int_eq(p.v.grad_comm_dtype, LOOM_BF16);
  ck_assert_int_eq(p.v.param_comm_dtype, LOOM_BF16);
  ck_assert_int_eq(p.v.activation_comm_dtype, LOOM_BF16);
  ck_assert_int_eq(p.legacy, -1);
  ck_assert_msg(strstr(p.reason, "bf16 parameters and gradients") != NULL, "%s", p.reason);
  /* one rank: nothing to reduce, nothing predivided */
  loom__storage_plan(&rt, LOOM_F16, 1, &p);
  ck_assert_int_eq(p.v.grad_comm_dtype, LOOM_F32);
  ck_assert_int_eq(p.v.grads_predivided, 0);
  plan_teardown();
  /* accumulation over micro-batches: fp32 gradients, and the reason says so */
  open_config((const char *const[]){"ddp"}, 1, 4);
  loom__storage_plan(&rt, LOOM_BF16, 2, &p);
  ck_assert_int_eq(p.v.param_dtype, LOOM_BF16);
  ck_assert_int_eq(p.v.grad_dtype, LOOM_F32);
  ck_assert_int_eq(p.v.grad_comm_dtype, LOOM_BF16);
  ck_assert_msg(strstr(p.reason, "grad_accum_steps 4 > 1 (fp32 accumulation)") != NULL, "%s",
                p.reason);
  plan_teardown();
}
END_TEST

/* A plugin without LOOM_PAR_STORAGE_16BIT (an older minor's, zero-filled) keeps the whole run
 * on fp32 buffers (the 1.3 layout), and the reason names it; a gradient-sync owner without
 * LOOM_PAR_GRAD_PREDIVIDED averages itself. */
START_TEST(test_plan_legacy_plugin) {
  open_config((const char *const[]){"grad_sync_twin", "old_minor"}, 2, 1);
  loom_plan p;
  loom__storage_plan(&rt, LOOM_BF16, 2, &p);
  ck_assert_int_eq(p.v.param_dtype, LOOM_F32);
  ck_assert_int_eq(p.v.grad_dtype, LOOM_F32);
  ck_assert_int_eq(p.v.master_is_params, 1);
  ck_assert_int_eq(p.v.grad_comm_dtype, LOOM_BF16); /* 16-bit values, packed on the wire */
  ck_assert_int_eq(p.v.grads_predivided, 0);
  ck_assert_int_eq(p.legacy, 0);
  ck_assert_msg(strstr(p.reason, "bf16 values in fp32 buffers: grad_sync_twin (parallel[0]) "
                               "does not set LOOM_PAR_STORAGE_16BIT") != NULL, "%s", p.reason);
  ck_assert_msg(strstr(p.reason, "grad_sync_twin averages the gradients itself") != NULL, "%s",
                p.reason);
  plan_teardown();
}
END_TEST

/* The host publishes its plan through the model view (ABI 1.6 loom_model_v1.plan), and a
 * plugin's loom_storage_plan_of returns exactly it. */
START_TEST(test_model_view_publishes_plan) {
  open_config((const char *const[]){"ddp"}, 1, 2);
  loom__storage_plan(&rt, LOOM_F32, 2, &rt.plan);
  char err[256] = "";
  ck_assert_int_eq(loom__dev_open(&rt.dev, loom__cpu_device(), "{}", 0, err, sizeof err),
                   LOOM_OK);
  gpt_config gc = {.vocab_size = 17, .max_seq_len = 8, .n_layer = 1, .n_head = 2, .n_embd = 8};
  ck_assert_int_eq(gpt_init(&rt.model, &gc, &rt.dev, err, sizeof err), LOOM_OK);
  ck_assert_int_eq(loom__model_view_build(&rt), 0);
  const loom_model_v1 *m = &rt.model_view;
  ck_assert(LOOM_HAS(m, plan));
  ck_assert_ptr_eq(m->plan, &rt.plan.v);
  loom_storage_plan_v1 p = loom_storage_plan_of(loom__host_api(), NULL, m);
  ck_assert_int_eq(p.grads_predivided, 1);
  ck_assert_int_eq(p.dp, 2);
  ck_assert_ptr_eq(p.reason, rt.plan.reason);
  ck_assert_int_eq(p.param_dtype, m->param_dtype);
  loom__model_view_free(&rt);
  gpt_free(&rt.model);
  loom__dev_close(&rt.dev);
  plan_teardown();
}
END_TEST

/* ---- compat.h: the plan from any host ------------------------------------------------------ */

static int fake_dp = 2, fake_predivided = 1;
static int fake_size(loom_host *h, loom_axis a) { (void)h; return a == LOOM_AXIS_DP ? fake_dp : 1; }
static int fake_grads_predivided(loom_host *h) { (void)h; return fake_predivided; }
static const loom_device_v1 *fake_device(loom_host *h, void **ctx) {
  (void)h;
  if (ctx) *ctx = NULL;
  return loom__cpu_device();
}

START_TEST(test_plan_of_any_host) {
  loom_host_api_v1 api = {.struct_size = sizeof api, .size = fake_size, .device = fake_device,
                          .grads_predivided = fake_grads_predivided};
  /* a 1.6 host: its plan, copied */
  loom_storage_plan_v1 hp = {.struct_size = sizeof hp, .compute_dtype = LOOM_F16,
                             .param_dtype = LOOM_F16, .grad_dtype = LOOM_F32,
                             .grad_comm_dtype = LOOM_F16, .grads_predivided = 1, .dp = 8,
                             .reason = "the host's"};
  loom_model_v1 m = {.struct_size = sizeof m, .compute_dtype = LOOM_F16,
                     .param_dtype = LOOM_F16, .grad_dtype = LOOM_F32, .plan = &hp};
  loom_storage_plan_v1 p = loom_storage_plan_of(&api, NULL, &m);
  ck_assert_int_eq(p.dp, 8);
  ck_assert_str_eq(p.reason, "the host's");
  ck_assert_int_eq(p.grad_comm_dtype, LOOM_F16);
  /* a 1.5 host: rebuilt from its model view and its grads_predivided */
  m.struct_size = (uint32_t)offsetof(loom_model_v1, plan);
  p = loom_storage_plan_of(&api, NULL, &m);
  ck_assert_uint_eq(p.struct_size, sizeof p);
  ck_assert_int_eq(p.compute_dtype, LOOM_F16);
  ck_assert_int_eq(p.param_dtype, LOOM_F16);
  ck_assert_int_eq(p.grad_dtype, LOOM_F32);
  ck_assert_int_eq(p.master_is_params, 0);
  ck_assert_int_eq(p.grad_comm_dtype, LOOM_F16);
  ck_assert_int_eq(p.activation_comm_dtype, LOOM_F16);
  ck_assert_int_eq(p.grads_predivided, 1);
  ck_assert_int_eq(p.dp, 2);
  ck_assert_ptr_nonnull(strstr(p.reason, "host ABI < 1.6"));
  /* a 1.4 host: no grads_predivided slot, so never predivided; a 1.3 host: fp32 storage */
  api.struct_size = (uint32_t)offsetof(loom_host_api_v1, grads_predivided);
  m.struct_size = (uint32_t)offsetof(loom_model_v1, param_dtype);
  p = loom_storage_plan_of(&api, NULL, &m);
  ck_assert_int_eq(p.grads_predivided, 0);
  ck_assert_int_eq(p.param_dtype, LOOM_F32);
  ck_assert_int_eq(p.grad_dtype, LOOM_F32);
  ck_assert_int_eq(p.master_is_params, 1);
  ck_assert_int_eq(p.grad_comm_dtype, LOOM_F16);
}
END_TEST

/* ABI 1.10's error slot. A 1.9 table ends before it: the host's copy has none and takes the
 * device as healthy (loom__dev_error NULL), whatever lies past its end; a plugin reading the
 * table from api->device() gets the same answer from LOOM_DEVICE_ERROR. A 1.10 table's answer
 * is passed on: NULL while healthy, the device's message once it failed. */
static const char *fault_message;
static const char *fake_error(void *ctx) {
  (void)ctx;
  return fault_message;
}
START_TEST(test_device_error_slot) {
  loom_device_v1 v19 = *loom__cpu_device();
  v19.hdr.struct_size = (uint32_t)offsetof(loom_device_v1, error);
  v19.hdr.abi_minor = 9;
  poison_tail(&v19);
  ck_assert_ptr_nonnull(v19.error);
  ck_assert_ptr_null(LOOM_DEVICE_ERROR(&v19, NULL)); /* past its end: never called */
  loom_dev d;
  char err[256] = "";
  ck_assert_int_eq(loom__dev_open(&d, &v19, "{}", 0, err, sizeof err), LOOM_OK);
  ck_assert_ptr_null(d.ops->error);
  ck_assert_ptr_null(loom__dev_error(&d));
  loom__dev_close(&d);
  /* the CPU device's own 1.10 table: no error slot, never failing */
  ck_assert_int_eq(loom__dev_open(&d, loom__cpu_device(), "{}", 0, err, sizeof err), LOOM_OK);
  ck_assert_ptr_null(loom__dev_error(&d));
  loom__dev_close(&d);
  loom_device_v1 v110 = *loom__cpu_device();
  v110.error = fake_error;
  ck_assert_uint_eq(v110.hdr.struct_size, sizeof v110);
  ck_assert_int_eq(loom__dev_open(&d, &v110, "{}", 0, err, sizeof err), LOOM_OK);
  fault_message = NULL;
  ck_assert_ptr_null(loom__dev_error(&d));
  ck_assert_ptr_null(LOOM_DEVICE_ERROR(d.ops, d.ctx));
  fault_message = "GPU 0: a kernel: an illegal memory access was encountered";
  ck_assert_str_eq(loom__dev_error(&d), fault_message);
  ck_assert_str_eq(LOOM_DEVICE_ERROR(d.ops, d.ctx), fault_message);
  fault_message = ""; /* a device that failed without a word still failed */
  ck_assert_ptr_nonnull(loom__dev_error(&d));
  ck_assert_str_ne(loom__dev_error(&d), "");
  fault_message = NULL;
  loom__dev_close(&d);
}
END_TEST

/* One TCase per side of the boundary, each a list of the tests above. */
static void add_tcase(Suite *s, const char *name, const TTest *const *tests, size_t n) {
  TCase *tc = tcase_create(name);
  for (size_t i = 0; i < n; i++) tcase_add_test(tc, tests[i]);
  suite_add_tcase(s, tc);
}

int main(void) {
  static const TTest *sdk[3], *host[8];
  sdk[0] = test_has_reads_struct_size, sdk[1] = test_value_accessors;
  sdk[2] = test_plan_of_any_host;
  host[0] = test_device_copy_zero_fills, host[1] = test_loader_defaults_old_fields;
  host[2] = test_plan_fp32, host[3] = test_plan_16bit, host[4] = test_plan_legacy_plugin;
  host[5] = test_model_view_publishes_plan, host[6] = test_acts16_table_without_lse;
  host[7] = test_device_error_slot;
  Suite *s = suite_create("abi_compat");
  add_tcase(s, "sdk", sdk, sizeof sdk / sizeof *sdk);
  add_tcase(s, "host", host, sizeof host / sizeof *host);
  return check_run_suite(s, CK_FORK_GETENV);
}
