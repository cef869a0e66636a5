/* Check suite for 16-bit parameter and gradient storage in the GPT model (core/model/gpt.c,
 * gpt_config.param_dtype / grad_dtype, ABI 1.4):
 *  - one forward and backward with bf16 (fp16) storage gives the bitwise loss of the ABI 1.3
 *    layout (fp32 buffers holding the same 16-bit values) and, for every parameter, the 16-bit
 *    gradient that is exactly that layout's fp32 gradient rounded once to nearest even — for
 *    the whole model (the tied wte: head and embedding contributions summed in fp32 before the
 *    one rounding), a first pipeline stage (units 0..1: wte from the embedding alone) and a last
 *    stage (units 2..L+1 with the tied wte copy);
 *  - the flat buffers really are 2 bytes per parameter (the device's per-category counters),
 *    and the fp32 unit buffers are temporary ones (LOOM_MEM_OTHER, gpt_grad_work_bytes);
 *  - the same with the device's 16-bit GEMMs on (set_compute_dtype): the 16-bit storage hands
 *    them the weights in place (device ABI 1.7), the 1.3 layout its widened copy, same bits;
 *  - gpt_init_weights under 16-bit storage writes the fp32 initial values rounded.
 *
 * Legend: B = batch, T = time, C = n_embd, L = layers, V = vocab. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "model/gpt.h"
#include "util/rng.h"
#include "support/check_suite.h"

static const gpt_config base = {
    .vocab_size = 29, .max_seq_len = 8, .n_layer = 3, .n_head = 4, .n_embd = 16};
enum { B = 3, T = 7 };

static loom_dev dev;

static void setup(void) {
  char err[256];
  ck_assert_int_eq(loom__dev_open(&dev, loom__cpu_device(), "{}", 0, err, sizeof err), LOOM_OK);
}
static void teardown(void) { loom__dev_close(&dev); }

static float *host_floats(size_t n) {
  float *h = malloc(n * sizeof(float));
  ck_assert_ptr_nonnull(h);
  return h;
}

/* n elements of dtype at device d, widened to fp32 on the host. */
static float *widen(const void *d, loom_dtype dt, size_t n) {
  float *h = host_floats(n);
  if (dt == LOOM_F32) {
    dev.ops->to_host(dev.ctx, h, d, n * sizeof(float));
    return h;
  }
  float *tmp = dev.ops->alloc(dev.ctx, n * sizeof(float));
  ck_assert_ptr_nonnull(tmp);
  ck_assert_int_eq(dev.ops->convert(dev.ctx, tmp, LOOM_F32, d, dt, n), LOOM_OK);
  dev.ops->to_host(dev.ctx, h, tmp, n * sizeof(float));
  dev.ops->free(dev.ctx, tmp);
  return h;
}

/* Host fp32 values rounded to dt (the device's round_to: the reference rounding). */
static void round_host(float *h, loom_dtype dt, size_t n) {
  float *tmp = dev.ops->alloc(dev.ctx, n * sizeof(float));
  ck_assert_ptr_nonnull(tmp);
  dev.ops->from_host(dev.ctx, tmp, h, n * sizeof(float));
  dev.ops->round_to(dev.ctx, tmp, dt, n);
  dev.ops->to_host(dev.ctx, h, tmp, n * sizeof(float));
  dev.ops->free(dev.ctx, tmp);
}

/* Host fp32 values into the model's flat parameter buffer (its param_dtype). */
static void set_params(gpt_model *m, const float *h) {
  size_t n = m->num_parameters;
  loom_dtype dt = (loom_dtype)m->cfg.param_dtype;
  if (dt == LOOM_F32) {
    dev.ops->from_host(dev.ctx, m->params_memory, h, n * sizeof(float));
    return;
  }
  float *tmp = dev.ops->alloc(dev.ctx, n * sizeof(float));
  ck_assert_ptr_nonnull(tmp);
  dev.ops->from_host(dev.ctx, tmp, h, n * sizeof(float));
  ck_assert_int_eq(dev.ops->convert(dev.ctx, m->params_memory, dt, tmp, LOOM_F32, n), LOOM_OK);
  dev.ops->free(dev.ctx, tmp);
}

static void fill_normal(float *h, size_t n, float std, uint64_t seed) {
  loom_rng rng;
  loom__rng_seed(&rng, seed);
  for (size_t j = 0; j < n; j++) h[j] = std * loom__rng_normal(&rng);
}

typedef struct result {
  float loss;
  float *grads; /* fp32 on the host (16-bit storage widened) */
  size_t n;
  size_t params_bytes, grads_bytes, other_bytes, act_bytes;
} result;

/* One forward and backward of stage [first, end) (0, 0: the whole model) from zeroed
 * gradients, parameters = `values` (already 16-bit values), the stage's input activation and
 * output gradient (when the stage lacks the embedding / head) from fixed seeds. */
static result run(gpt_config c, const float *values) {
  char err[256];
  gpt_model m;
  ck_assert_msg(gpt_init(&m, &c, &dev, err, sizeof err) == LOOM_OK, "gpt_init: %s", err);
  set_params(&m, values);
  gpt_zero_grad(&m);
  int32_t in[B * T], tg[B * T];
  loom_rng rng;
  loom__rng_seed(&rng, 5);
  for (int i = 0; i < B * T; i++) in[i] = (int32_t)(loom__rng_u64(&rng) % (uint64_t)c.vocab_size);
  for (int i = 0; i < B * T; i++) tg[i] = (int32_t)(loom__rng_u64(&rng) % (uint64_t)c.vocab_size);
  const size_t NC = (size_t)B * T * c.n_embd;
  float *act = host_floats(NC);
  ck_assert_int_eq(gpt_slot_ensure(&m, 0, B, T), LOOM_OK);
  if (m.first_unit > 0) { /* 16-bit values, as a real boundary activation */
    fill_normal(act, NC, 1.0f, 11);
    round_host(act, (loom_dtype)c.dtype, NC);
    dev.ops->from_host(dev.ctx, gpt_stage_buffer(&m, 0, GPT_BUF_INPUT), act, NC * sizeof(float));
  }
  result r = {0};
  ck_assert_int_eq(gpt_stage_forward(&m, 0, in, tg, B, T, NULL, &r.loss), LOOM_OK);
  if (m.last_unit < m.n_units - 1) {
    fill_normal(act, NC, 0.01f, 12);
    round_host(act, (loom_dtype)c.dtype, NC);
    dev.ops->from_host(dev.ctx, gpt_stage_buffer(&m, 0, GPT_BUF_GRAD_OUTPUT), act,
                       NC * sizeof(float));
  }
  free(act);
  ck_assert_int_eq(gpt_stage_backward(&m, 0, 1.0f / (B * T), NULL), LOOM_OK);
  r.n = m.num_parameters;
  r.grads = widen(m.grads_memory, (loom_dtype)c.grad_dtype, r.n);
  r.params_bytes = dev.bytes_now[LOOM_MEM_PARAMS];
  r.grads_bytes = dev.bytes_now[LOOM_MEM_GRADS];
  r.other_bytes = dev.bytes_now[LOOM_MEM_OTHER];
  r.act_bytes = dev.bytes_now[LOOM_MEM_ACTIVATIONS];
  gpt_free(&m);
  return r;
}

/* Parameter values for config c's stage (its count from a table-only model, *n): O(1) normal
 * values (init's zero biases would hide terms) rounded to dt. The caller frees them. */
static float *stage_values(const gpt_config *c, loom_dtype dt, size_t *n) {
  gpt_model t;
  char err[256];
  ck_assert_int_eq(gpt_init_ex(&t, c, NULL, GPT_NO_PARAM_STORAGE | GPT_NO_GRAD_STORAGE, err,
                               sizeof err), LOOM_OK);
  *n = t.num_parameters;
  gpt_free(&t);
  float *values = host_floats(*n);
  fill_normal(values, *n, 0.3f, 7);
  round_host(values, dt, *n);
  return values;
}

/* 16-bit storage vs the ABI 1.3 layout with the same 16-bit values, for stage [first, end). */
static void storage_vs_fp32_buffers(loom_dtype dt, int first, int end, const char *what) {
  gpt_config c = base;
  c.dtype = dt;
  c.pp_first = first;
  c.pp_end = end;
  size_t n;
  float *values = stage_values(&c, dt, &n);

  result ref = run(c, values); /* fp32 buffers, 16-bit values (the 1.3 layout) */
  c.param_dtype = c.grad_dtype = dt;
  result got = run(c, values);
  ck_assert_uint_eq(got.n, ref.n);
  ck_assert_msg(memcmp(&got.loss, &ref.loss, sizeof(float)) == 0, "%s: loss %.9g vs %.9g", what,
                got.loss, ref.loss);
  round_host(ref.grads, dt, ref.n); /* the fp32 gradient rounded once */
  size_t nonzero = 0;
  for (size_t j = 0; j < n; j++) {
    nonzero += got.grads[j] != 0.0f;
    ck_assert_msg(memcmp(&got.grads[j], &ref.grads[j], sizeof(float)) == 0,
                  "%s: gradient element %zu: %.9g, the fp32 gradient rounded is %.9g", what, j,
                  got.grads[j], ref.grads[j]);
  }
  ck_assert_msg(nonzero > n / 2, "%s: only %zu of %zu gradient elements are non-zero", what,
                nonzero, n);
  /* 2 bytes per parameter for parameters and gradients; the 1.3 layout's 4 + the working
   * copy; the fp32 unit buffers are temporary ones */
  ck_assert_uint_eq(got.params_bytes, 2 * n);
  ck_assert_uint_eq(got.grads_bytes, 2 * n);
  ck_assert_uint_gt(ref.params_bytes, 4 * n);
  ck_assert_uint_eq(ref.grads_bytes, 4 * n);
  ck_assert_uint_gt(got.other_bytes, 0);
  free(values);
  free(got.grads);
  free(ref.grads);
}

START_TEST(test_whole_model) {
  storage_vs_fp32_buffers(LOOM_BF16, 0, 0, "bf16 whole model");
  storage_vs_fp32_buffers(LOOM_F16, 0, 0, "fp16 whole model");
}
END_TEST

/* The same with the device told the compute dtype: under bf16 the CPU runs its bf16 GEMMs
 * (where it has the units), the 16-bit storage handing them the bf16 weights in place (device
 * ABI 1.7 matmul_*_w) and the 1.3 layout its widened working copy: the same bits. */
START_TEST(test_whole_model_16bit_gemms) {
  dev.ops->set_compute_dtype(dev.ctx, LOOM_BF16);
  storage_vs_fp32_buffers(LOOM_BF16, 0, 0, "bf16 whole model, bf16 GEMMs");
  storage_vs_fp32_buffers(LOOM_BF16, 2, base.n_layer + 2, "bf16 units 2..4, bf16 GEMMs");
  dev.ops->set_compute_dtype(dev.ctx, LOOM_F16);
  storage_vs_fp32_buffers(LOOM_F16, 0, 0, "fp16 whole model, fp16 compute dtype");
}
END_TEST

/* 16-bit activations end to end (gpt_config.acts_typed, device ABI 1.8 acts16) vs fp32
 * activation buffers holding the same 16-bit values (acts_f32): the same loss and gradients,
 * bit for bit, under each checkpointing policy, with fp32 or 16-bit parameter storage; and the
 * activation pool about half the size. */
static int flash; /* the typed_vs_fp32_acts runs use flash attention (gpt_config.attn_lse) */

static void typed_vs_fp32_acts(loom_dtype dt, int storage16, int policy, const char *what) {
  gpt_config c = base;
  c.dtype = dt;
  c.attn_lse = flash;
  c.ckpt_policy = policy;
  if (storage16) c.param_dtype = c.grad_dtype = dt;
  size_t n;
  float *values = stage_values(&c, dt, &n);
  c.acts_f32 = 1;
  result ref = run(c, values);
  c.acts_f32 = 0;
  c.acts_typed = 1;
  result got = run(c, values);
  ck_assert_msg(memcmp(&got.loss, &ref.loss, sizeof(float)) == 0, "%s: loss %.9g vs %.9g", what,
                got.loss, ref.loss);
  for (size_t j = 0; j < n; j++)
    ck_assert_msg(memcmp(&got.grads[j], &ref.grads[j], sizeof(float)) == 0,
                  "%s: gradient element %zu: %.9g vs %.9g with fp32 activation buffers", what, j,
                  got.grads[j], ref.grads[j]);
  /* every activation but the fp32 statistics, probabilities and losses in 2 bytes */
  ck_assert_msg(got.act_bytes < ref.act_bytes * 6 / 10, "%s: activations %zu vs %zu bytes", what,
                got.act_bytes, ref.act_bytes);
  free(values);
  free(got.grads);
  free(ref.grads);
}

/* Under acts_typed: gpt_logits_row widens 16-bit logits (a vocabulary past its 2048-element
 * chunks, padded), and a backward whose dloss differs from the training forward's rescales the
 * 16-bit dlogits in place (dlogits_rescale) — both bitwise the fp32-buffer layout's. */
static void typed_logits_and_rescale(loom_dtype dt) {
  gpt_config c = base;
  c.vocab_size = 2500, c.padded_vocab_size = 2560, c.dtype = dt, c.ckpt_policy = GPT_CKPT_FULL;
  c.ckpt_every = 2;
  enum { ROWS = 3 };
  const int rows[ROWS] = {0, 7, B * T - 1};
  float *logits[2], *grads[2], loss[2];
  size_t n = 0;
  for (int typed = 0; typed < 2; typed++) {
    c.acts_f32 = !typed, c.acts_typed = typed;
    char err[256];
    gpt_model m;
    ck_assert_msg(gpt_init(&m, &c, &dev, err, sizeof err) == LOOM_OK, "gpt_init: %s", err);
    ck_assert(typed == (m.a16 != NULL));
    float *values = stage_values(&c, dt, &n);
    set_params(&m, values);
    free(values);
    gpt_zero_grad(&m);
    int32_t in[B * T], tg[B * T];
    for (int i = 0; i < B * T; i++)
      in[i] = (i * 37) % c.vocab_size, tg[i] = (i * 101) % c.vocab_size;
    gpt_set_train_dloss(&m, 1.0f / (B * T)); /* dlogits written in place by the forward */
    ck_assert_int_eq(gpt_forward(&m, in, tg, B, T, NULL, &loss[typed]), LOOM_OK);
    logits[typed] = host_floats((size_t)ROWS * c.vocab_size);
    for (int r = 0; r < ROWS; r++)
      gpt_logits_row(&m, rows[r], logits[typed] + (size_t)r * c.vocab_size);
    ck_assert_int_eq(gpt_backward(&m, 0.75f / (B * T), NULL), LOOM_OK); /* a different dloss */
    grads[typed] = widen(m.grads_memory, LOOM_F32, n);
    gpt_free(&m);
  }
  ck_assert(memcmp(&loss[0], &loss[1], sizeof(float)) == 0);
  ck_assert_msg(memcmp(logits[0], logits[1], (size_t)ROWS * c.vocab_size * sizeof(float)) == 0,
                "%s: logits rows differ from the fp32-buffer layout's", dt == LOOM_BF16 ? "bf16"
                                                                                        : "fp16");
  for (size_t j = 0; j < n; j++)
    ck_assert_msg(memcmp(&grads[0][j], &grads[1][j], sizeof(float)) == 0,
                  "gradient element %zu after a rescaled dlogits: %.9g vs %.9g", j, grads[1][j],
                  grads[0][j]);
  for (int t = 0; t < 2; t++) free(logits[t]), free(grads[t]);
}

START_TEST(test_acts_typed_logits_rescale) {
  dev.ops->set_compute_dtype(dev.ctx, LOOM_BF16);
  typed_logits_and_rescale(LOOM_BF16);
  dev.ops->set_compute_dtype(dev.ctx, LOOM_F16);
  typed_logits_and_rescale(LOOM_F16);
}
END_TEST

static void acts_typed_all(void) {
  for (int gemm16 = 0; gemm16 < 2; gemm16++) {
    dev.ops->set_compute_dtype(dev.ctx, gemm16 ? LOOM_BF16 : LOOM_F32);
    typed_vs_fp32_acts(LOOM_BF16, 0, GPT_CKPT_NONE, "bf16 activations");
    typed_vs_fp32_acts(LOOM_BF16, 1, GPT_CKPT_NONE, "bf16 activations, bf16 storage");
    typed_vs_fp32_acts(LOOM_BF16, 1, GPT_CKPT_FULL, "bf16 activations, full recompute");
    typed_vs_fp32_acts(LOOM_BF16, 0, GPT_CKPT_SELECTIVE, "bf16 activations, selective");
  }
  dev.ops->set_compute_dtype(dev.ctx, LOOM_F16);
  typed_vs_fp32_acts(LOOM_F16, 0, GPT_CKPT_NONE, "fp16 activations");
  typed_vs_fp32_acts(LOOM_F16, 1, GPT_CKPT_FULL, "fp16 activations, fp16 storage, recompute");
}

START_TEST(test_acts_typed) { acts_typed_all(); }
END_TEST

/* The same through flash attention: the acts16 table's lse kernels against the fp32 ones */
START_TEST(test_acts_typed_flash) {
  flash = 1;
  acts_typed_all();
}
END_TEST

START_TEST(test_first_stage) { /* units 0..1: wte's gradient from the embedding alone */
  storage_vs_fp32_buffers(LOOM_BF16, 0, 2, "bf16 units 0..1");
}
END_TEST

START_TEST(test_last_stage) { /* units 2..L+1 with the tied wte copy, flushed at the head */
  storage_vs_fp32_buffers(LOOM_BF16, 2, base.n_layer + 2, "bf16 units 2..4");
}
END_TEST

START_TEST(test_init_weights_rounded) {
  char err[256];
  gpt_model a, b;
  gpt_config c = base;
  c.dtype = LOOM_BF16;
  ck_assert_int_eq(gpt_init(&a, &c, &dev, err, sizeof err), LOOM_OK);
  c.param_dtype = LOOM_BF16;
  ck_assert_int_eq(gpt_init(&b, &c, &dev, err, sizeof err), LOOM_OK);
  ck_assert_int_eq(gpt_init_weights(&a, 42), LOOM_OK);
  ck_assert_int_eq(gpt_init_weights(&b, 42), LOOM_OK);
  size_t n = a.num_parameters;
  float *want = widen(a.params_memory, LOOM_F32, n), *got = widen(b.params_memory, LOOM_BF16, n);
  round_host(want, LOOM_BF16, n);
  ck_assert_int_eq(memcmp(got, want, n * sizeof(float)), 0);
  free(want);
  free(got);
  gpt_free(&a);
  gpt_free(&b);
}
END_TEST

static Suite *storage_suite(void) {
  const check_case cases[] = {
      {"whole_model", test_whole_model},
      {"whole_model_16bit_gemms", test_whole_model_16bit_gemms},
      {"acts_typed", test_acts_typed},
      {"acts_typed_flash", test_acts_typed_flash},
      {"acts_typed_logits_rescale", test_acts_typed_logits_rescale},
      {"first_stage", test_first_stage},
      {"last_stage", test_last_stage},
      {"init_weights_rounded", test_init_weights_rounded},
  };
  return check_case_suite("storage16", CHECK_CASES(cases), setup, teardown, 120);
}

int main(void) {
  return check_run_suite(storage_suite(), CK_FORK);
}
