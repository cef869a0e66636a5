/* Check suite for the GPT-2 model (core/model/gpt.c) on the CPU device.
 *
 * - finite differences of the whole model's mean loss w.r.t. a sample of every parameter tensor
 *   (fp32, eps 1e-2, per-tensor relative tolerance 2e-2: a coarse check; the strict one is the
 *   float64 PyTorch reference test in tests/reference/)
 * - gradient accumulation: two backwards with dloss/2 == one with dloss; a batch of 4 in one
 *   pass == two halves of 2 accumulated
 * - the parameter table (names, order, shapes, offsets, units), init statistics, hook order,
 *   causality, logits without targets, argument validation and memory accounting.
 *
 * Legend: B = batch, T = time, C = n_embd, NH = heads, L = layers, V = vocab. */
#include <check.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "fp_tolerance.h"
#include "gpt_path.h"
#include "model/gpt.h"
#include "util/rng.h"
#include "support/check_suite.h"
#include "support/host_scratch.h"

static const gpt_config tiny = {
    .vocab_size = 17, .max_seq_len = 8, .n_layer = 2, .n_head = 2, .n_embd = 8};

/* ---- fixture (checked: runs in the forked child) ---- */

static loom_dev dev;
static gpt_model model;
static loom_rng rng;

static void setup(void) {
  char err[256];
  ck_assert_int_eq(loom__dev_open(&dev, loom__cpu_device(), "{}", 0, err, sizeof err), LOOM_OK);
  memset(&model, 0, sizeof model);
  loom__rng_seed(&rng, 2024);
}

static void teardown(void) {
  if (model.params) gpt_free(&model);
  host_scratch_free_all();
  loom__dev_close(&dev);
}

static void *hmem(size_t bytes) { return host_scratch(bytes); }

static void init_model(const gpt_config *cfg) {
  char err[256];
  int rc = gpt_init(&model, cfg, &dev, err, sizeof err);
  ck_assert_msg(rc == LOOM_OK, "gpt_init: %s", err);
}

static int32_t *rand_tokens(size_t n, int V) {
  int32_t *t = hmem(n * sizeof(int32_t));
  for (size_t i = 0; i < n; i++) t[i] = (int32_t)(loom__rng_u64(&rng) % (uint64_t)V);
  return t;
}

static int is_ln_weight(gpt_param_role r) {
  return r == GPT_LN1_W || r == GPT_LN2_W || r == GPT_LNF_W;
}

/* Random parameters with O(1) effects (init's 0.02 and zero biases would hide bugs). */
static void randomize_params(float scale) {
  for (int i = 0; i < model.n_params; i++) {
    gpt_param *p = &model.params[i];
    float *h = malloc(p->numel * sizeof(float));
    ck_assert_ptr_nonnull(h);
    for (size_t j = 0; j < p->numel; j++)
      h[j] = (is_ln_weight(p->role) ? 1.0f : 0.0f) + scale * loom__rng_normal(&rng);
    dev.ops->from_host(dev.ctx, p->data, h, p->numel * sizeof(float));
    free(h);
  }
}

static float *download(const float *d, size_t n) {
  float *h = hmem(n * sizeof(float));
  dev.ops->to_host(dev.ctx, h, d, n * sizeof(float));
  return h;
}

static float *grads_host(void) { return download(model.grads_memory, model.num_parameters); }
static float *params_host(void) { return download(model.params_memory, model.num_parameters); }

/* Per tensor: the norm-wise relative difference ||a - b||_2 / ||b||_2 <= tol (max|a - b| /
 * max|b| is printed too). Prints the worst tensor, so docs/tolerances.md can be refreshed. */
static void compare_grads(const char *what, const float *a, const float *b, double tol) {
  double worst2 = 0, worst_inf = 0;
  const char *worst_name = "";
  for (int i = 0; i < model.n_params; i++) {
    const gpt_param *p = &model.params[i];
    double maxdiff = 0, maxref = 0, d2 = 0, r2 = 0;
    size_t worst = 0;
    for (size_t j = 0; j < p->numel; j++) {
      double d = fabs((double)a[p->offset + j] - b[p->offset + j]);
      if (d > maxdiff) maxdiff = d, worst = j;
      maxref = fmax(maxref, fabs(b[p->offset + j]));
      d2 += d * d;
      r2 += (double)b[p->offset + j] * b[p->offset + j];
    }
    double e_inf = maxdiff == 0 ? 0 : maxdiff / fmax(maxref, 1e-30);
    double e2 = d2 == 0 ? 0 : sqrt(d2 / fmax(r2, 1e-60));
    if (e2 > worst2) worst2 = e2, worst_name = p->name;
    worst_inf = fmax(worst_inf, e_inf);
    ck_assert_msg(e2 <= tol,
                  "%s: %s ||a-b||/||b|| %.3e > %.1e (max|a-b|/max|b| %.3e, worst [%zu]: %.9g vs "
                  "%.9g)",
                  what, p->name, e2, tol, e_inf, worst, (double)a[p->offset + worst],
                  (double)b[p->offset + worst]);
  }
  printf("%s: worst ||a-b||/||b|| %.2e (%s), worst max|a-b|/max|b| %.2e; tol %.1e (%.0f u)\n",
         what, worst2, worst_name, worst_inf, tol, tol / FP32_U);
}

/* The smallest per-tensor ||a - b||_2 / ||b||_2 over the model's tensors whose b is non-zero:
 * how far a wrong gradient is from the tolerance on every tensor. */
static double min_tensor_rel(const float *a, const float *b) {
  double best = INFINITY;
  for (int i = 0; i < model.n_params; i++) {
    const gpt_param *p = &model.params[i];
    double d2 = 0, r2 = 0;
    for (size_t j = 0; j < p->numel; j++) {
      double d = (double)a[p->offset + j] - b[p->offset + j];
      d2 += d * d;
      r2 += (double)b[p->offset + j] * b[p->offset + j];
    }
    if (r2 > 0) best = fmin(best, sqrt(d2 / r2));
  }
  return best;
}

static float forward_loss(const int32_t *inp, const int32_t *tgt, int B, int T) {
  float loss = 0;
  ck_assert_int_eq(gpt_forward(&model, inp, tgt, B, T, NULL, &loss), LOOM_OK);
  return loss;
}

/* ---- finite differences over the whole model ---- */

static void fd_model(const gpt_config *cfg) {
  const int B = 2, T = 5, SAMPLES = 24;
  /* fd error: rounding of the two fp32 losses, ~6 sqrt(n) u * loss / (2 eps) ~ 1e-3 of the
   * gradient (n ~ 250 along the forward path, loss ~ 3), plus truncation eps^2 / 6 times the
   * third derivative ~ 2e-5; measured worst 2.3e-3 on every kernel family (docs/tolerances.md).
   * A coarse check: the strict one is the float64 PyTorch reference (tests/reference/). */
  const float eps = 1e-2f;
  const double tol = 2e-2;
  init_model(cfg);
  randomize_params(0.3f);
  int32_t *inp = rand_tokens((size_t)B * T, tiny.vocab_size);
  int32_t *tgt = rand_tokens((size_t)B * T, tiny.vocab_size);
  forward_loss(inp, tgt, B, T);
  gpt_zero_grad(&model);
  ck_assert_int_eq(gpt_backward(&model, 1.0f / (B * T), NULL), LOOM_OK);
  float *grads = grads_host();
  double worst_all = 0;
  const char *worst_name = "";
  for (int i = 0; i < model.n_params; i++) {
    gpt_param *p = &model.params[i];
    int n = p->numel < (size_t)SAMPLES ? (int)p->numel : SAMPLES;
    double maxdiff = 0, maxfd = 0, w_an = 0, w_fd = 0;
    size_t w_idx = 0;
    for (int k = 0; k < n; k++) {
      /* spread the samples over the tensor, with a random offset inside each stride */
      size_t stride = p->numel / (size_t)n;
      size_t idx = (size_t)k * stride + (size_t)(loom__rng_u64(&rng) % stride);
      float x0;
      dev.ops->to_host(dev.ctx, &x0, p->data + idx, sizeof x0);
      float xp = x0 + eps, xm = x0 - eps;
      dev.ops->from_host(dev.ctx, p->data + idx, &xp, sizeof xp);
      double lp = forward_loss(inp, tgt, B, T);
      dev.ops->from_host(dev.ctx, p->data + idx, &xm, sizeof xm);
      double lm = forward_loss(inp, tgt, B, T);
      dev.ops->from_host(dev.ctx, p->data + idx, &x0, sizeof x0);
      double fd = (lp - lm) / ((double)xp - (double)xm);
      double an = grads[p->offset + idx];
      if (fabs(an - fd) > maxdiff) maxdiff = fabs(an - fd), w_idx = idx, w_an = an, w_fd = fd;
      maxfd = fmax(maxfd, fabs(fd));
    }
    double e = maxdiff == 0 ? 0 : maxdiff / fmax(maxfd, 1e-30);
    printf("fd %-22s %2d samples  max|fd| %.2e  rel err %.2e\n", p->name, n, maxfd, e);
    if (e > worst_all) worst_all = e, worst_name = p->name;
    ck_assert_msg(e <= tol, "%s: relative error %.3e > %.1e (worst [%zu]: analytic %.8g, fd %.8g)",
                  p->name, e, tol, w_idx, w_an, w_fd);
    ck_assert_msg(maxfd > 0 || p->role == GPT_WPE, "%s: no sampled gradient is non-zero", p->name);
  }
  printf("fd model%s: worst relative error %.2e (%s)\n", cfg->attn_lse ? " (flash attention)" : "",
         worst_all, worst_name);
}

START_TEST(test_fd_model) { fd_model(&tiny); }
END_TEST

/* The same through flash attention (the rows' log-sum-exp saved, probabilities recomputed) */
START_TEST(test_fd_model_flash) {
  gpt_config c = tiny;
  c.attn_lse = 1;
  fd_model(&c);
}
END_TEST

/* ---- gradient accumulation ---- */

START_TEST(test_accum_half_dloss) {
  const int B = 2, T = 5;
  init_model(&tiny);
  randomize_params(0.3f);
  int32_t *inp = rand_tokens((size_t)B * T, tiny.vocab_size);
  int32_t *tgt = rand_tokens((size_t)B * T, tiny.vocab_size);
  forward_loss(inp, tgt, B, T);
  const float dloss = 1.0f / (B * T);
  gpt_zero_grad(&model);
  ck_assert_int_eq(gpt_backward(&model, dloss, NULL), LOOM_OK);
  float *once = grads_host();
  gpt_zero_grad(&model);
  ck_assert_int_eq(gpt_backward(&model, dloss / 2, NULL), LOOM_OK);
  ck_assert_int_eq(gpt_backward(&model, dloss / 2, NULL), LOOM_OK);
  /* dloss/2 scales every backward value by a power of two, which commutes with rounding: both
   * halves are exactly half of `once`; only the sums down the N rows (biases, layernorm weights,
   * embeddings) then add 2N terms in one pass where `once` doubles an N-term sum. */
  compare_grads("2 x dloss/2 vs dloss", grads_host(), once, fp32_tol(2, 2.0 * B * T));
  /* zero_grad really zeroes */
  gpt_zero_grad(&model);
  float *z = grads_host();
  for (size_t i = 0; i < model.num_parameters; i++) ck_assert_float_eq(z[i], 0.0f);
}
END_TEST

START_TEST(test_accum_batch_split) {
  const int T = 5;
  init_model(&tiny);
  randomize_params(0.3f);
  int32_t *inp = rand_tokens(4 * T, tiny.vocab_size);
  int32_t *tgt = rand_tokens(4 * T, tiny.vocab_size);
  const float dloss = 1.0f / (4 * T);
  float loss4 = forward_loss(inp, tgt, 4, T);
  gpt_zero_grad(&model);
  ck_assert_int_eq(gpt_backward(&model, dloss, NULL), LOOM_OK);
  float *full = grads_host();
  gpt_zero_grad(&model);
  float la = forward_loss(inp, tgt, 2, T);
  ck_assert_int_eq(gpt_backward(&model, dloss, NULL), LOOM_OK);
  float lb = forward_loss(inp + 2 * T, tgt + 2 * T, 2, T);
  ck_assert_int_eq(gpt_backward(&model, dloss, NULL), LOOM_OK);
  /* The GEMMs see 10 rows instead of 20: OpenBLAS kernels block and vectorize the rows
   * differently (Haswell and Zen kernels differ from SkylakeX here), so every value of the forward
   * and backward may round differently: the bound is two fp32 computations over the whole path. */
  const double path = gpt_forward_reductions(&tiny, T) + gpt_backward_reductions(&tiny, 4, T);
  compare_grads("B=4 vs 2 x B=2", grads_host(), full, fp32_tol(2, path));
  /* the mean loss: the forward path, then the mean over the 4T rows */
  const double loss_tol = fp32_tol(2, gpt_forward_reductions(&tiny, T) + 4 * T);
  double loss_err = fabs(0.5 * ((double)la + lb) - loss4) / loss4;
  printf("B=4 vs 2 x B=2: loss rel err %.2e; tol %.1e\n", loss_err, loss_tol);
  ck_assert_msg(loss_err <= loss_tol, "B=4 vs 2 x B=2: loss %.9g vs %.9g, rel err %.3e > %.1e",
                0.5 * ((double)la + lb), (double)loss4, loss_err, loss_tol);
  /* The tolerance still catches a dropped micro-batch: with only the first half's backward,
   * every gradient tensor with a non-zero reference is far outside it. */
  gpt_zero_grad(&model);
  forward_loss(inp, tgt, 2, T);
  ck_assert_int_eq(gpt_backward(&model, dloss, NULL), LOOM_OK);
  double dropped = min_tensor_rel(grads_host(), full);
  printf("B=4 vs 2 x B=2 with the second half dropped: smallest tensor error %.2e = %.0f x tol\n",
         dropped, dropped / fp32_tol(2, path));
  ck_assert_msg(dropped > 100 * fp32_tol(2, path),
                "a dropped micro-batch moves some tensor by only %.3e (tolerance %.1e)", dropped,
                fp32_tol(2, path));
}
END_TEST

/* ---- parameter table ---- */

START_TEST(test_param_table) {
  init_model(&tiny);
  const int L = tiny.n_layer, C = tiny.n_embd;
  ck_assert_int_eq(model.n_units, L + 2);
  ck_assert_int_eq(model.n_params, 2 + 12 * L + 2);
  size_t expect = (size_t)tiny.vocab_size * C + (size_t)tiny.max_seq_len * C +
                  (size_t)L * (12 * C * C + 13 * C) + 2 * C;
  ck_assert_uint_eq(model.num_parameters, expect);
  static const char *block[] = {"ln_1.weight", "ln_1.bias", "attn.qkv.weight", "attn.qkv.bias",
                                "attn.proj.weight", "attn.proj.bias", "ln_2.weight", "ln_2.bias",
                                "mlp.fc.weight", "mlp.fc.bias", "mlp.proj.weight",
                                "mlp.proj.bias"};
  const int64_t block_shape[][2] = {{C, 0}, {C, 0}, {3 * C, C}, {3 * C, 0}, {C, C}, {C, 0},
                                           {C, 0}, {C, 0}, {4 * C, C}, {4 * C, 0}, {C, 4 * C},
                                           {C, 0}};
  ck_assert_str_eq(model.params[0].name, "wte");
  ck_assert_int_eq(model.params[0].shape[0], tiny.vocab_size);
  ck_assert_int_eq(model.params[0].shape[1], C);
  ck_assert_str_eq(model.params[1].name, "wpe");
  ck_assert_int_eq(model.params[1].shape[0], tiny.max_seq_len);
  for (int l = 0; l < L; l++)
    for (int j = 0; j < 12; j++) {
      const gpt_param *p = &model.params[2 + 12 * l + j];
      char name[48];
      snprintf(name, sizeof name, "h.%d.%s", l, block[j]);
      ck_assert_str_eq(p->name, name);
      ck_assert_int_eq(p->unit, 1 + l);
      ck_assert_int_eq(p->role, GPT_LN1_W + j);
      ck_assert_int_eq(p->ndim, block_shape[j][1] ? 2 : 1);
      ck_assert_int_eq(p->shape[0], block_shape[j][0]);
      if (p->ndim == 2) ck_assert_int_eq(p->shape[1], block_shape[j][1]);
    }
  ck_assert_str_eq(model.params[model.n_params - 2].name, "ln_f.weight");
  ck_assert_str_eq(model.params[model.n_params - 1].name, "ln_f.bias");
  ck_assert_int_eq(model.params[model.n_params - 1].unit, L + 1);
  /* contiguous, unit by unit; views point into the flat buffers */
  size_t off = 0;
  for (int i = 0; i < model.n_params; i++) {
    const gpt_param *p = &model.params[i];
    ck_assert_uint_eq(p->offset, off);
    ck_assert_uint_eq(p->numel, (size_t)p->shape[0] * (p->ndim == 2 ? (size_t)p->shape[1] : 1));
    ck_assert_ptr_eq(p->data, model.params_memory + off);
    ck_assert_ptr_eq(p->grad, model.grads_memory + off);
    ck_assert(p->offset >= model.unit_offset[p->unit]);
    ck_assert(p->offset + p->numel <= model.unit_offset[p->unit + 1]);
    off += p->numel;
  }
  ck_assert_uint_eq(model.unit_offset[0], 0);
  ck_assert_uint_eq(model.unit_offset[model.n_units], model.num_parameters);
  ck_assert_uint_eq(dev.bytes_now[LOOM_MEM_PARAMS], model.num_parameters * sizeof(float));
  ck_assert_uint_eq(dev.bytes_now[LOOM_MEM_GRADS], model.num_parameters * sizeof(float));
  ck_assert_float_eq(model.mean_loss, -1.0f);
}
END_TEST

START_TEST(test_config_validation) {
  static const struct { gpt_config cfg; const char *needle; } bad[] = {
#define DIMS(V, T, L, NH, C) \
  .vocab_size = V, .max_seq_len = T, .n_layer = L, .n_head = NH, .n_embd = C
      {{DIMS(0, 8, 2, 2, 8)}, "vocab_size"},
      {{DIMS(17, 0, 2, 2, 8)}, "max_seq_len"},
      {{DIMS(17, 8, 0, 2, 8)}, "n_layer"},
      {{DIMS(17, 8, 2, -1, 8)}, "n_head"},
      {{DIMS(17, 8, 2, 2, 0)}, "n_embd"},
      {{DIMS(17, 8, 2, 3, 8)}, "divisible"},
      {{DIMS(17, 8, 2, 2, 8), .dtype = 7}, "dtype"},
      /* 16-bit storage in another dtype than the compute dtype would round twice */
      {{DIMS(17, 8, 2, 2, 8), .dtype = LOOM_BF16, .param_dtype = LOOM_F16}, "storage"},
#undef DIMS
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char err[256] = "";
    gpt_model m;
    ck_assert_int_eq(gpt_init(&m, &bad[i].cfg, &dev, err, sizeof err), LOOM_INVALID_CONFIG);
    ck_assert_msg(strstr(err, bad[i].needle) != NULL, "message '%s' lacks '%s'", err,
                  bad[i].needle);
  }
  for (int c = 0; c < LOOM_MEM__COUNT; c++) ck_assert_uint_eq(dev.bytes_now[c], 0);
}
END_TEST

/* A device backend built against device ABI 1.2 (its table ends before round_to; the loader
 * zero-fills the rest) still runs fp32, and a 16-bit model on it is refused with the reason. */
START_TEST(test_old_device_abi) {
  loom_device_v1 old = *loom__cpu_device();
  old.hdr.struct_size = (uint32_t)offsetof(loom_device_v1, round_to);
  old.hdr.abi_minor = 2;
  old.round_to = NULL;
  old.convert = NULL;
  loom_dev d2;
  char err[256] = "";
  ck_assert_int_eq(loom__dev_open(&d2, &old, "{}", 0, err, sizeof err), LOOM_OK);
  gpt_config cfg = {.vocab_size = 17, .max_seq_len = 8, .n_layer = 1, .n_head = 2, .n_embd = 8};
  gpt_model m;
  ck_assert_int_eq(gpt_init(&m, &cfg, &d2, err, sizeof err), LOOM_OK);
  gpt_free(&m);
  cfg.dtype = LOOM_BF16;
  ck_assert_int_eq(gpt_init(&m, &cfg, &d2, err, sizeof err), LOOM_UNSUPPORTED);
  ck_assert_msg(strstr(err, "(ABI 1.2) has no round_to") != NULL, "message: %s", err);
  loom__dev_close(&d2);
}
END_TEST

/* The fused classifier (device ABI 1.4 crossentropy_fused) runs the separate kernels'
 * operations in the same order, so every path must give the same bits: the training forward
 * (gpt_set_train_dloss: dlogits written in place during the forward), a loss-only forward
 * followed by backward (dlogits computed in backward), and a device without the slot (the
 * separate kernels a chunk of rows at a time). A backward with another dloss than the
 * forward's rescales (x2: exact). A loss-only forward keeps the logits readable; the backward
 * after it writes dlogits over them (no second (B,T,V) buffer), the training forward's bits. */
START_TEST(test_fused_classifier) {
  const int B = 2, T = 5;
  /* V = 301: the separate kernels' probs (N,V) exceed the backward scratch (~1000 floats), so
   * head_crossentropy_chunked runs 3 + 3 + 3 + 1 rows */
  const gpt_config cfg = {.vocab_size = 301, .max_seq_len = 8, .n_layer = 1, .n_head = 2,
                          .n_embd = 8};
  init_model(&cfg);
  randomize_params(0.5f);
  int32_t *inp = rand_tokens((size_t)B * T, cfg.vocab_size);
  int32_t *tgt = rand_tokens((size_t)B * T, cfg.vocab_size);
  const float dloss = 1.0f / (B * T);
  const size_t np = model.num_parameters, V = (size_t)cfg.vocab_size;
  float *w = params_host();
  float loss_train, loss_eval;
  /* 1. training forward: dlogits in place during the forward */
  gpt_set_train_dloss(&model, dloss);
  gpt_zero_grad(&model);
  ck_assert_int_eq(gpt_forward(&model, inp, tgt, B, T, NULL, &loss_train), LOOM_OK);
  ck_assert_int_eq(gpt_backward(&model, dloss, NULL), LOOM_OK);
  float *g_fused = grads_host();
  float *row_d = hmem(V * sizeof(float)), *row_t = hmem(V * sizeof(float));
  float *row_n = hmem(V * sizeof(float)), *row_b = hmem(V * sizeof(float));
  gpt_logits_row(&model, 3, row_d); /* the training forward's dlogits */
  /* 2. loss-only forward (logits kept), dlogits in backward */
  gpt_set_train_dloss(&model, 0.0f);
  ck_assert_int_eq(gpt_forward(&model, inp, tgt, B, T, NULL, &loss_eval), LOOM_OK);
  gpt_logits_row(&model, 3, row_t); /* after the loss-only forward: the logits */
  gpt_zero_grad(&model);
  ck_assert_int_eq(gpt_backward(&model, dloss, NULL), LOOM_OK);
  gpt_logits_row(&model, 3, row_b); /* after its backward: dlogits, in place */
  float *g_late = grads_host();
  ck_assert_int_eq(gpt_forward(&model, inp, NULL, B, T, NULL, NULL), LOOM_OK);
  gpt_logits_row(&model, 3, row_n);
  ck_assert_msg(memcmp(row_t, row_n, V * sizeof(float)) == 0,
                "a loss-only forward must leave the logits readable");
  ck_assert_msg(memcmp(row_b, row_d, V * sizeof(float)) == 0,
                "the backward after a loss-only forward: dlogits in place, as the training "
                "forward's");
  ck_assert_msg(loss_train == loss_eval, "loss %.9g vs %.9g", loss_train, loss_eval);
  ck_assert_msg(memcmp(g_fused, g_late, np * sizeof(float)) == 0,
                "gradients: fused forward vs dlogits in backward differ");
  /* 3. backward with twice the forward's dloss: rescaled, exactly 2x */
  gpt_set_train_dloss(&model, dloss);
  gpt_zero_grad(&model);
  ck_assert_int_eq(gpt_forward(&model, inp, tgt, B, T, NULL, NULL), LOOM_OK);
  ck_assert_int_eq(gpt_backward(&model, 2.0f * dloss, NULL), LOOM_OK);
  float *g_twice = grads_host();
  for (size_t i = 0; i < np; i++)
    ck_assert_msg(g_twice[i] == 2.0f * g_fused[i], "element %zu: %.9g vs 2 x %.9g", i,
                  g_twice[i], g_fused[i]);
  gpt_free(&model);
  /* 4. a device without the slot: the separate kernels */
  loom_device_v1 plain = *loom__cpu_device();
  plain.crossentropy_fused = NULL;
  loom_dev d2;
  char err[256] = "";
  ck_assert_int_eq(loom__dev_open(&d2, &plain, "{}", 0, err, sizeof err), LOOM_OK);
  gpt_model m2;
  ck_assert_int_eq(gpt_init(&m2, &cfg, &d2, err, sizeof err), LOOM_OK);
  d2.ops->from_host(d2.ctx, m2.params_memory, w, np * sizeof(float));
  gpt_set_train_dloss(&m2, dloss);
  float loss_plain;
  ck_assert_int_eq(gpt_forward(&m2, inp, tgt, B, T, NULL, &loss_plain), LOOM_OK);
  ck_assert_int_eq(gpt_backward(&m2, dloss, NULL), LOOM_OK);
  float *g_plain = hmem(np * sizeof(float));
  d2.ops->to_host(d2.ctx, g_plain, m2.grads_memory, np * sizeof(float));
  ck_assert_msg(loss_plain == loss_train, "loss %.9g vs %.9g", loss_plain, loss_train);
  ck_assert_msg(memcmp(g_plain, g_fused, np * sizeof(float)) == 0,
                "gradients: fused classifier vs separate kernels differ");
  /* and after a loss-only forward: the probs computed again in the backward */
  gpt_set_train_dloss(&m2, 0.0f);
  ck_assert_int_eq(gpt_forward(&m2, inp, tgt, B, T, NULL, &loss_plain), LOOM_OK);
  ck_assert_msg(loss_plain == loss_train, "loss %.9g vs %.9g", loss_plain, loss_train);
  gpt_zero_grad(&m2);
  ck_assert_int_eq(gpt_backward(&m2, dloss, NULL), LOOM_OK);
  d2.ops->to_host(d2.ctx, g_plain, m2.grads_memory, np * sizeof(float));
  ck_assert_msg(memcmp(g_plain, g_fused, np * sizeof(float)) == 0,
                "gradients: separate kernels after a loss-only forward differ");
  gpt_free(&m2);
  loom__dev_close(&d2);
}
END_TEST

/* ---- init ---- */

START_TEST(test_init_stats) {
  const gpt_config cfg = {
      .vocab_size = 512, .max_seq_len = 128, .n_layer = 2, .n_head = 4, .n_embd = 64};
  init_model(&cfg);
  gpt_init_weights(&model, 1337);
  float *w = params_host();
  const double std_resid = 0.02 / sqrt(2.0 * cfg.n_layer);
  for (int i = 0; i < model.n_params; i++) {
    const gpt_param *p = &model.params[i];
    const float *x = w + p->offset;
    double sum = 0, sq = 0;
    for (size_t j = 0; j < p->numel; j++) sum += x[j];
    double mean = sum / p->numel;
    for (size_t j = 0; j < p->numel; j++) sq += (x[j] - mean) * (x[j] - mean);
    double sd = sqrt(sq / p->numel);
    switch (p->role) {
      case GPT_WTE: case GPT_WPE: case GPT_QKV_W: case GPT_FC_W:
      case GPT_ATTPROJ_W: case GPT_FCPROJ_W: {
        int resid = p->role == GPT_ATTPROJ_W || p->role == GPT_FCPROJ_W;
        double want = resid ? std_resid : 0.02;
        ck_assert_msg(fabs(sd / want - 1.0) < 0.05, "%s: std %.5f, want %.5f", p->name, sd, want);
        ck_assert_msg(fabs(mean) < 5.0 * want / sqrt((double)p->numel), "%s: mean %.2e", p->name,
                      mean);
        break;
      }
      case GPT_LN1_W: case GPT_LN2_W: case GPT_LNF_W:
        for (size_t j = 0; j < p->numel; j++) ck_assert_float_eq(x[j], 1.0f);
        break;
      default: /* biases */
        for (size_t j = 0; j < p->numel; j++) ck_assert_float_eq(x[j], 0.0f);
    }
  }
  /* deterministic in the seed */
  gpt_init_weights(&model, 1337);
  ck_assert_int_eq(memcmp(params_host(), w, model.num_parameters * sizeof(float)), 0);
  gpt_init_weights(&model, 1338);
  ck_assert_int_ne(memcmp(params_host(), w, model.num_parameters * sizeof(float)), 0);
}
END_TEST

/* ---- hooks ---- */

typedef struct hook_log {
  int n;
  int ev[64]; /* kind * 100 + unit; kinds 1 pre_fwd, 2 post_fwd, 3 pre_bwd, 4 post_bwd */
  int fail_at; /* return -42 at this event code */
} hook_log;

static int record(hook_log *h, int code) {
  if (h->n < 64) h->ev[h->n++] = code;
  return code == h->fail_at ? -42 : 0;
}
static int h_pre_fwd(void *ud, int u) { return record(ud, 100 + u); }
static int h_post_fwd(void *ud, int u) { return record(ud, 200 + u); }
static int h_pre_bwd(void *ud, int u) { return record(ud, 300 + u); }
static int h_post_bwd(void *ud, int u) { return record(ud, 400 + u); }

START_TEST(test_hooks) {
  const int B = 2, T = 5, U = tiny.n_layer + 2;
  init_model(&tiny);
  gpt_init_weights(&model, 1);
  int32_t *inp = rand_tokens((size_t)B * T, tiny.vocab_size);
  hook_log log = {.fail_at = -1};
  gpt_hooks hooks = {&log, h_pre_fwd, h_post_fwd, h_pre_bwd, h_post_bwd, NULL, NULL, NULL, NULL,
                     NULL};
  ck_assert_int_eq(gpt_forward(&model, inp, inp, B, T, &hooks, NULL), LOOM_OK);
  ck_assert_int_eq(log.n, 2 * U);
  for (int u = 0; u < U; u++) {
    ck_assert_int_eq(log.ev[2 * u], 100 + u);
    ck_assert_int_eq(log.ev[2 * u + 1], 200 + u);
  }
  log.n = 0;
  ck_assert_int_eq(gpt_backward(&model, 0.1f, &hooks), LOOM_OK);
  ck_assert_int_eq(log.n, 2 * U);
  for (int k = 0; k < U; k++) {
    int u = U - 1 - k;
    ck_assert_int_eq(log.ev[2 * k], 300 + u);
    ck_assert_int_eq(log.ev[2 * k + 1], 400 + u);
  }
  /* a hook's error aborts the pass and is returned; an aborted forward cannot be backpropagated */
  log.n = 0;
  log.fail_at = 102;
  ck_assert_int_eq(gpt_forward(&model, inp, inp, B, T, &hooks, NULL), -42);
  ck_assert_int_eq(log.n, 5); /* pre0 post0 pre1 post1 pre2 */
  ck_assert_int_eq(gpt_backward(&model, 0.1f, NULL), LOOM_INVALID_USAGE);
  log.fail_at = 401;
  log.n = 0;
  ck_assert_int_eq(gpt_forward(&model, inp, inp, B, T, &hooks, NULL), LOOM_OK);
  ck_assert_int_eq(gpt_backward(&model, 0.1f, &hooks), -42);
  /* NULL members are skipped */
  gpt_hooks partial = {.ud = &log, .post_backward = h_post_bwd};
  log.fail_at = -1;
  log.n = 0;
  ck_assert_int_eq(gpt_backward(&model, 0.1f, &partial), LOOM_OK);
  ck_assert_int_eq(log.n, U);
}
END_TEST

/* ---- forward: logits, causality, validation ---- */

START_TEST(test_logits_and_causality) {
  const int B = 2, T = 5, V = tiny.vocab_size;
  init_model(&tiny);
  randomize_params(0.3f);
  int32_t *inp = rand_tokens((size_t)B * T, V), *tgt = rand_tokens((size_t)B * T, V);
  float loss = forward_loss(inp, tgt, B, T);
  ck_assert_float_eq(loss, model.mean_loss);
  float *rows = hmem((size_t)B * T * V * sizeof(float));
  for (int r = 0; r < B * T; r++) gpt_logits_row(&model, r, rows + (size_t)r * V);
  /* the loss is the mean cross-entropy of these logits */
  double ce = 0;
  for (int r = 0; r < B * T; r++) {
    const float *l = rows + (size_t)r * V;
    double mx = -INFINITY, s = 0;
    for (int v = 0; v < V; v++) mx = fmax(mx, l[v]);
    for (int v = 0; v < V; v++) s += exp(l[v] - mx);
    ce += log(s) + mx - l[tgt[r]];
  }
  ce /= B * T;
  /* the model's fp32 softmax cross-entropy of these logits (max, sum and log over V, mean over
   * the B T rows) against the same in double; relative to the loss, the absolute error of each
   * row's log-sum-exp (~u times max|logit| ~ 3) counts ~3 / loss ~ 1 times */
  const double ce_tol = 3 * fp32_tol(1, V + 4 + B * T);
  printf("logits: loss vs double cross-entropy rel err %.2e; tol %.1e\n", fabs(loss - ce) / ce,
         ce_tol);
  ck_assert_double_eq_tol(loss, ce, ce_tol * ce);

  /* without targets: same logits, no loss, no backward */
  float l2 = 123.0f;
  ck_assert_int_eq(gpt_forward(&model, inp, NULL, B, T, NULL, &l2), LOOM_OK);
  ck_assert_float_eq(model.mean_loss, -1.0f);
  ck_assert_int_eq(model.has_targets, 0);
  float *row = hmem((size_t)V * sizeof(float));
  for (int r = 0; r < B * T; r++) {
    gpt_logits_row(&model, r, row);
    ck_assert_int_eq(memcmp(row, rows + (size_t)r * V, (size_t)V * sizeof(float)), 0);
  }
  ck_assert_int_eq(gpt_backward(&model, 0.1f, NULL), LOOM_INVALID_USAGE);

  /* causality: a 3-token prefix (B=1, smaller shape) gives the first 3 rows' logits */
  const int P = 3;
  ck_assert_int_eq(gpt_forward(&model, inp + T, NULL, 1, P, NULL, NULL), LOOM_OK);
  /* another shape: the GEMMs may round every value differently (two fp32 forwards); per row
   * relative to max|logit|, since logits near 0 carry the rounding of their O(1) terms */
  const double causal_tol = fp32_tol(2, gpt_forward_reductions(&tiny, T));
  double causal_worst = 0;
  for (int t = 0; t < P; t++) {
    gpt_logits_row(&model, t, row);
    const float *want = rows + ((size_t)T + t) * V;
    double scale = 0;
    for (int v = 0; v < V; v++) scale = fmax(scale, fabsf(want[v]));
    for (int v = 0; v < V; v++) {
      double e = fabsf(row[v] - want[v]) / fmax(scale, 1e-30);
      causal_worst = fmax(causal_worst, e);
      ck_assert_msg(e <= causal_tol, "t=%d v=%d: %.8g vs %.8g (rel to max|row| %.3e > %.1e)", t,
                    v, (double)row[v], (double)want[v], e, causal_tol);
    }
  }
  printf("causality: prefix logits rel err %.2e; tol %.1e\n", causal_worst, causal_tol);
}
END_TEST

START_TEST(test_invalid_usage) {
  const int B = 2, T = 5, V = tiny.vocab_size;
  init_model(&tiny);
  gpt_init_weights(&model, 3);
  int32_t *inp = rand_tokens((size_t)B * T, V), *tgt = rand_tokens((size_t)B * T, V);
  ck_assert_int_eq(gpt_backward(&model, 0.1f, NULL), LOOM_INVALID_USAGE); /* no forward yet */
  inp[7] = V;
  ck_assert_int_eq(gpt_forward(&model, inp, tgt, B, T, NULL, NULL), LOOM_INVALID_USAGE);
  inp[7] = -1;
  ck_assert_int_eq(gpt_forward(&model, inp, tgt, B, T, NULL, NULL), LOOM_INVALID_USAGE);
  inp[7] = 0;
  tgt[9] = V;
  ck_assert_int_eq(gpt_forward(&model, inp, tgt, B, T, NULL, NULL), LOOM_INVALID_USAGE);
  tgt[9] = 1;
  int32_t *longer = rand_tokens((size_t)tiny.max_seq_len + 1, V);
  ck_assert_int_eq(gpt_forward(&model, longer, NULL, 1, tiny.max_seq_len + 1, NULL, NULL),
                   LOOM_INVALID_USAGE);
  ck_assert_int_eq(gpt_forward(&model, inp, tgt, 0, T, NULL, NULL), LOOM_INVALID_USAGE);
  ck_assert_int_eq(gpt_forward(&model, inp, tgt, B, 0, NULL, NULL), LOOM_INVALID_USAGE);
  ck_assert_int_eq(gpt_forward(&model, NULL, tgt, B, T, NULL, NULL), LOOM_INVALID_USAGE);
  /* nothing was allocated by the rejected calls; a valid one still works */
  ck_assert_uint_eq(dev.bytes_now[LOOM_MEM_ACTIVATIONS], 0);
  ck_assert_int_eq(gpt_forward(&model, longer, NULL, 1, tiny.max_seq_len, NULL, NULL), LOOM_OK);
  ck_assert_int_eq(gpt_forward(&model, inp, tgt, B, T, NULL, NULL), LOOM_OK);
  ck_assert(dev.bytes_now[LOOM_MEM_ACTIVATIONS] > 0);
  ck_assert_int_eq(gpt_backward(&model, 0.1f, NULL), LOOM_OK);
  gpt_free(&model);
  for (int c = 0; c < LOOM_MEM__COUNT; c++) ck_assert_uint_eq(dev.bytes_now[c], 0);
}
END_TEST

/* ---- padded vocabulary (llm.c's 50257 -> 50304) ---- */

/* The padded tests' common step: the unpadded model's parameter values (*p0, a host copy) and
 * offsets (off0) are kept, then `model` is reopened with tiny's vocabulary padded to Vp rows.
 * Returns the unpadded model's parameter count. */
static int reopen_padded(int Vp, float **p0, size_t off0[64]) {
  *p0 = params_host();
  int n_params = model.n_params;
  for (int i = 0; i < n_params; i++) off0[i] = model.params[i].offset;
  gpt_free(&model);
  gpt_config padded = tiny;
  padded.padded_vocab_size = Vp;
  init_model(&padded);
  return n_params;
}

/* The values of q that the unpadded model has too: wte's first V rows, any other tensor whole. */
static size_t unpadded_numel(const gpt_param *q, int V, int C) {
  return q->role == GPT_WTE ? (size_t)V * C : q->numel;
}

/* V = 17 padded to 32: the same weights (the padded rows of wte random, large) give the same
 * loss, logits and gradients as the unpadded model, the padded rows' gradients are exactly 0
 * (their logits are -inf: probability 0, dlogits 0). Unmasked, those rows' N(0, 3) weights
 * would move the loss far outside the tolerance and get non-zero gradients. */
START_TEST(test_padded_vocab) {
  const int B = 2, T = 5, V = tiny.vocab_size, Vp = 32, C = tiny.n_embd;
  init_model(&tiny);
  randomize_params(0.3f);
  int32_t *inp = rand_tokens((size_t)B * T, V), *tgt = rand_tokens((size_t)B * T, V);
  float loss = forward_loss(inp, tgt, B, T);
  float *rows = hmem((size_t)B * T * V * sizeof(float));
  for (int r = 0; r < B * T; r++) gpt_logits_row(&model, r, rows + (size_t)r * V);
  gpt_zero_grad(&model);
  ck_assert_int_eq(gpt_backward(&model, 1.0f / (B * T), NULL), LOOM_OK);
  float *g0 = grads_host(), *p0;
  size_t off0[64];
  int n_params = reopen_padded(Vp, &p0, off0);
  ck_assert_int_eq(model.n_params, n_params);
  ck_assert_int_eq((int)model.params[0].shape[0], Vp);
  for (int i = 0; i < n_params; i++) {
    gpt_param *q = &model.params[i];
    float *h = malloc(q->numel * sizeof(float));
    ck_assert_ptr_nonnull(h);
    size_t real = unpadded_numel(q, V, C);
    memcpy(h, p0 + off0[i], real * sizeof(float));
    for (size_t j = real; j < q->numel; j++) h[j] = 3.0f * loom__rng_normal(&rng);
    dev.ops->from_host(dev.ctx, q->data, h, q->numel * sizeof(float));
    free(h);
  }
  float lossp = forward_loss(inp, tgt, B, T);
  /* the head's GEMM has 32 output columns instead of 17: OpenBLAS may block them differently,
   * so each value may round differently; the bounds are the ones of test_accum_batch_split
   * (measured here: loss bitwise equal, worst gradient tensor 3.7e-7 against 1.6e-5) */
  const double fwd_tol = fp32_tol(2, gpt_forward_reductions(&tiny, T) + B * T);
  const double path = gpt_forward_reductions(&tiny, T) + gpt_backward_reductions(&tiny, B, T);
  double loss_err = fabs((double)lossp - loss) / loss;
  printf("padded vocab: loss rel err %.2e; tol %.1e\n", loss_err, fwd_tol);
  ck_assert_msg(loss_err <= fwd_tol, "loss %.9g padded vs %.9g", (double)lossp, (double)loss);
  float *row = hmem((size_t)V * sizeof(float));
  for (int r = 0; r < B * T; r++) {
    gpt_logits_row(&model, r, row);
    for (int v = 0; v < V; v++)
      ck_assert_msg(fabsf(row[v] - rows[(size_t)r * V + v]) <= fwd_tol * 4,
                    "logit [%d][%d]: %.9g padded vs %.9g", r, v, (double)row[v],
                    (double)rows[(size_t)r * V + v]);
  }
  gpt_zero_grad(&model);
  ck_assert_int_eq(gpt_backward(&model, 1.0f / (B * T), NULL), LOOM_OK);
  float *g1 = grads_host();
  double worst = 0;
  for (int i = 0; i < n_params; i++) {
    const gpt_param *q = &model.params[i];
    size_t real = unpadded_numel(q, V, C);
    double d2 = 0, r2 = 0;
    for (size_t j = 0; j < real; j++) {
      double d = (double)g1[q->offset + j] - g0[off0[i] + j];
      d2 += d * d;
      r2 += (double)g0[off0[i] + j] * g0[off0[i] + j];
    }
    double e = d2 == 0 ? 0 : sqrt(d2 / fmax(r2, 1e-60));
    worst = fmax(worst, e);
    ck_assert_msg(e <= fp32_tol(2, path), "%s: grad rel err %.3e > %.1e", q->name, e,
                  fp32_tol(2, path));
    for (size_t j = real; j < q->numel; j++)
      ck_assert_msg(g1[q->offset + j] == 0.0f, "%s[%zu]: padded row's gradient %.9g != 0",
                    q->name, j, (double)g1[q->offset + j]);
  }
  printf("padded vocab: worst grad rel err %.2e; tol %.1e; padded rows' grads exactly 0\n",
         worst, fp32_tol(2, path));
}
END_TEST

/* The seed's initialisation of a padded model is the unpadded model's: wte's first V rows and
 * every other tensor bitwise equal (the padded rows draw nothing from the RNG), the padded rows
 * zero, as llm.c's padded files hold them. Drawing them would shift every later tensor's values
 * (a padded run would start from another model than the unpadded run with the same seed), and
 * so would a tied wte copy drawn over all Vp rows. Checked whole and over ranges that start and
 * end inside the padded rows (ZeRO-3's init_params_range). */
START_TEST(test_padded_vocab_init) {
  const int V = tiny.vocab_size, Vp = 32, C = tiny.n_embd;
  init_model(&tiny);
  ck_assert_int_eq(gpt_init_weights(&model, 11), LOOM_OK);
  float *p0;
  size_t off0[64];
  int n_params = reopen_padded(Vp, &p0, off0);
  ck_assert_int_eq(gpt_init_weights(&model, 11), LOOM_OK);
  float *p1 = params_host();
  for (int i = 0; i < n_params; i++) {
    const gpt_param *q = &model.params[i];
    size_t real = unpadded_numel(q, V, C);
    ck_assert_msg(memcmp(p1 + q->offset, p0 + off0[i], real * sizeof(float)) == 0,
                  "%s: the padded model's initial values differ from the unpadded model's",
                  q->name);
    for (size_t j = real; j < q->numel; j++)
      ck_assert_msg(p1[q->offset + j] == 0.0f, "%s[%zu]: padded row initialised to %.9g",
                    q->name, j, (double)p1[q->offset + j]);
  }
  /* ranges: [k, k + 100) for k across wte's padded rows, equal to the whole init's values */
  size_t n = 100, wte_end = (size_t)Vp * C;
  float *dst = loom__dev_alloc(&dev, n * sizeof(float), LOOM_MEM_OTHER);
  float *h = hmem(n * sizeof(float));
  ck_assert_ptr_nonnull(dst);
  for (size_t k = (size_t)V * C - 50; k + n <= wte_end + 200; k += 37) {
    gpt_init_weights_range(&model, 11, k, n, dst);
    dev.ops->to_host(dev.ctx, h, dst, n * sizeof(float));
    ck_assert_msg(memcmp(h, p1 + k, n * sizeof(float)) == 0, "range [%zu, +%zu) differs", k, n);
  }
  loom__dev_free(&dev, dst);
}
END_TEST

static Suite *gpt_suite(void) {
  const check_case cases[] = {
      {"fd_model", test_fd_model},
      {"fd_model_flash", test_fd_model_flash},
      {"accum_half_dloss", test_accum_half_dloss},
      {"accum_batch_split", test_accum_batch_split},
      {"param_table", test_param_table},
      {"config_validation", test_config_validation},
      {"old_device_abi", test_old_device_abi},
      {"fused_classifier", test_fused_classifier},
      {"init_stats", test_init_stats},
      {"hooks", test_hooks},
      {"logits_causality", test_logits_and_causality},
      {"invalid_usage", test_invalid_usage},
      {"padded_vocab", test_padded_vocab},
      {"padded_vocab_init", test_padded_vocab_init},
  };
  return check_case_suite("gpt", CHECK_CASES(cases), setup, teardown, 60);
}

int main(void) {
  return check_run_suite(gpt_suite(), CK_FORK);
}
