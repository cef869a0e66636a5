/* Check suite for activation checkpointing in the GPT model (core/model/gpt.c, ckpt_policy):
 *  - recompute is exact: full, selective, every 2nd / 3rd block, with tensor-parallel local
 *    shapes too, give the bitwise loss and every bitwise gradient of no checkpointing over two
 *    accumulated micro-steps of different batches (so a stale scratch would show);
 *  - two micro-batches in flight (pipeline slots), backward in reverse order, for the whole
 *    model and for a last pipeline stage (blocks 1, 2 and the head): bitwise again;
 *  - memory really drops: the device's activation peak equals the slots' pools plus ONE
 *    recompute scratch (gpt_activation_bytes x slots + gpt_recompute_bytes, what `loom
 *    estimate` adds up) and orders none > selective > full;
 *  - flash attention (attn_lse) under every policy and shape, fp32 and bf16: bitwise again, and
 *    its pools without the (B,NH,T,T) probabilities;
 *  - an unknown policy is refused by gpt_init with a message.
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

/* 3 blocks so that "every 2" checkpoints blocks 0 and 2 and keeps block 1 whole; T = 8 makes
 * the attention probabilities (B,NH,T,T) larger than a (B,T,C) tensor, as in real models. */
static const gpt_config base = {
    .vocab_size = 23, .max_seq_len = 8, .n_layer = 3, .n_head = 4, .n_embd = 16};
enum { B = 3, T = 8 };

/* Each run opens its own device, so its peaks are the run's alone. */
static loom_dev dev;

static void dev_open(void) {
  char err[256];
  ck_assert_int_eq(loom__dev_open(&dev, loom__cpu_device(), "{}", 0, err, sizeof err), LOOM_OK);
}

static void setup(void) { dev_open(); }
static void teardown(void) { loom__dev_close(&dev); }

/* A run's results on the host: the losses of each micro-step and the gradients. */
typedef struct run_result {
  float loss[2];
  float *grads;
  size_t n;
  size_t act_peak_bytes, act_bytes, recompute_bytes;
} run_result;

static gpt_config with_policy(gpt_config c, int policy, int every) {
  c.ckpt_policy = policy;
  c.ckpt_every = every;
  return c;
}

/* Random O(1) parameters (init's zero biases would hide a missing recompute of a bias add). */
static void randomize(gpt_model *m, uint64_t seed) {
  loom_rng rng;
  loom__rng_seed(&rng, seed);
  float *h = malloc(m->num_parameters * sizeof(float));
  ck_assert_ptr_nonnull(h);
  for (size_t j = 0; j < m->num_parameters; j++) h[j] = 0.3f * loom__rng_normal(&rng);
  dev.ops->from_host(dev.ctx, m->params_memory, h, m->num_parameters * sizeof(float));
  free(h);
}

static void tokens(int32_t *t, size_t n, int V, uint64_t seed) {
  loom_rng rng;
  loom__rng_seed(&rng, seed);
  for (size_t i = 0; i < n; i++) t[i] = (int32_t)(loom__rng_u64(&rng) % (uint64_t)V);
}

/* Build the model under `cfg`, then either two accumulated micro-steps one after the other
 * (slots = 1) or two micro-batches in flight on slots 0 and 1, both forwards first, backwards
 * in reverse order (slots = 2, a pipeline schedule's pattern). */
static void fill_stage_input(gpt_model *m, int slot, uint64_t seed) {
  size_t n = (size_t)B * T * m->cfg.n_embd;
  float *h = malloc(n * sizeof(float));
  ck_assert_ptr_nonnull(h);
  loom_rng rng;
  loom__rng_seed(&rng, seed);
  for (size_t j = 0; j < n; j++) h[j] = loom__rng_normal(&rng);
  dev.ops->from_host(dev.ctx, gpt_stage_buffer(m, slot, GPT_BUF_INPUT), h, n * sizeof(float));
  free(h);
}

static run_result run(const gpt_config *cfg, int slots) {
  char err[256];
  gpt_model m;
  loom__dev_close(&dev);
  dev_open();
  ck_assert_msg(gpt_init(&m, cfg, &dev, err, sizeof err) == LOOM_OK, "gpt_init: %s", err);
  randomize(&m, 7);
  gpt_zero_grad(&m);
  int32_t in[2][B * T], tg[2][B * T];
  for (int k = 0; k < 2; k++) {
    tokens(in[k], B * T, cfg->vocab_size, 100 + (uint64_t)k);
    tokens(tg[k], B * T, cfg->vocab_size, 200 + (uint64_t)k);
  }
  run_result r = {0};
  const float dloss = 1.0f / (2 * B * T);
  if (slots == 1) {
    for (int k = 0; k < 2; k++) {
      ck_assert_int_eq(gpt_forward(&m, in[k], tg[k], B, T, NULL, &r.loss[k]), LOOM_OK);
      ck_assert_int_eq(gpt_backward(&m, dloss, NULL), LOOM_OK);
    }
  } else {
    for (int k = 0; k < 2; k++) {
      if (m.first_unit > 0) { /* a later pipeline stage: its input activation comes from before */
        ck_assert_int_eq(gpt_slot_ensure(&m, k, B, T), LOOM_OK);
        fill_stage_input(&m, k, 300 + (uint64_t)k);
      }
      ck_assert_int_eq(gpt_stage_forward(&m, k, in[k], tg[k], B, T, NULL, &r.loss[k]), LOOM_OK);
    }
    for (int k = 1; k >= 0; k--) ck_assert_int_eq(gpt_stage_backward(&m, k, dloss, NULL), LOOM_OK);
  }
  r.n = m.num_parameters;
  r.grads = malloc(r.n * sizeof(float));
  ck_assert_ptr_nonnull(r.grads);
  dev.ops->to_host(dev.ctx, r.grads, m.grads_memory, r.n * sizeof(float));
  r.act_peak_bytes = dev.bytes_peak[LOOM_MEM_ACTIVATIONS];
  r.act_bytes = gpt_activation_bytes(cfg, B, T);
  r.recompute_bytes = gpt_recompute_bytes(cfg, B, T);
  gpt_free(&m);
  return r;
}

/* Bitwise: the losses and every gradient element, naming the first difference. */
static void assert_bitwise(const char *what, const run_result *a, const run_result *ref) {
  ck_assert_uint_eq(a->n, ref->n);
  for (int k = 0; k < 2; k++)
    ck_assert_msg(memcmp(&a->loss[k], &ref->loss[k], sizeof(float)) == 0,
                  "%s: micro-step %d loss %.9g != %.9g without checkpointing", what, k,
                  (double)a->loss[k], (double)ref->loss[k]);
  for (size_t j = 0; j < a->n; j++)
    ck_assert_msg(memcmp(&a->grads[j], &ref->grads[j], sizeof(float)) == 0,
                  "%s: gradient element %zu is %.9g, %.9g without checkpointing", what, j,
                  (double)a->grads[j], (double)ref->grads[j]);
}

static const struct { const char *name; int policy, every; } variants[] = {
    {"full", GPT_CKPT_FULL, 1},           {"selective", GPT_CKPT_SELECTIVE, 1},
    {"full every 2", GPT_CKPT_FULL, 2},   {"selective every 2", GPT_CKPT_SELECTIVE, 2},
    {"full every 3", GPT_CKPT_FULL, 3},
};
#define N_VARIANTS (sizeof variants / sizeof variants[0])

static void bitwise_all(gpt_config c, int slots, const char *shape) {
  run_result ref = run(&c, slots);
  if (c.dtype != LOOM_F32) {
    /* the reference is the layout before 16-bit activation storage (fp32 buffers holding the
     * same 16-bit values, no checkpointing); 16-bit storage without checkpointing first */
    gpt_config old = c;
    old.acts_f32 = 1;
    free(ref.grads);
    ref = run(&old, slots);
    run_result r = run(&c, slots);
    char what[96];
    snprintf(what, sizeof what, "%s, 16-bit saved activations", shape);
    assert_bitwise(what, &r, &ref);
    free(r.grads);
  }
  for (size_t i = 0; i < N_VARIANTS; i++) {
    gpt_config v = with_policy(c, variants[i].policy, variants[i].every);
    run_result r = run(&v, slots);
    char what[96];
    snprintf(what, sizeof what, "%s, %s", shape, variants[i].name);
    assert_bitwise(what, &r, &ref);
    free(r.grads);
  }
  free(ref.grads);
}

START_TEST(test_bitwise_whole_model) { bitwise_all(base, 1, "whole model"); }
END_TEST

/* Tensor-parallel local shapes (rank 1 of 2: 2 heads, 32 hidden units, no bias adds of the
 * row-parallel layers). Without a region hook the ranks' partial sums are not reduced, so
 * this is not the full model's math, but it is the same computation with and without
 * checkpointing: the layout of the local tensors is what is checked. */
START_TEST(test_bitwise_tp_local_shapes) {
  gpt_config c = base;
  c.tp_size = 2;
  c.tp_rank = 1;
  bitwise_all(c, 1, "tp 2 rank 1");
}
END_TEST

START_TEST(test_bitwise_two_in_flight) { bitwise_all(base, 2, "two slots"); }
END_TEST

/* A last pipeline stage holding blocks 1 and 2 and the head (units 2..4): "every 2" counts
 * global block indices, so it checkpoints block 2 only; two micro-batches in flight. */
START_TEST(test_bitwise_pipeline_stage) {
  gpt_config c = base;
  c.pp_first = 2;
  bitwise_all(c, 2, "stage units 2..4");
}
END_TEST

/* Mixed precision composes: the 16-bit stores are deterministic roundings, so the recompute
 * rebuilds the same bf16 / fp16 values, and packing them into 2-byte storage and widening them
 * back is exact: with 16-bit saved activations, with and without every checkpointing policy, the
 * losses and gradients are bitwise those of the fp32-buffer layout without checkpointing
 * (gpt_config.acts_f32; whole model, tensor-parallel local shapes, and a pipeline stage with two
 * micro-batches in flight). */
START_TEST(test_bitwise_16bit) {
  const int dtypes[] = {LOOM_BF16, LOOM_F16};
  for (int i = 0; i < 2; i++) {
    gpt_config c = base;
    c.dtype = dtypes[i];
    bitwise_all(c, 1, dtypes[i] == LOOM_BF16 ? "bf16 whole model" : "fp16 whole model");
    gpt_config t = c;
    t.tp_size = 2;
    t.tp_rank = 1;
    bitwise_all(t, 1, dtypes[i] == LOOM_BF16 ? "bf16 tp 2 rank 1" : "fp16 tp 2 rank 1");
    c.pp_first = 2;
    bitwise_all(c, 2, dtypes[i] == LOOM_BF16 ? "bf16 stage units 2..4" : "fp16 stage units 2..4");
  }
}
END_TEST

/* 16-bit saved activations: the measured peak is still the slots' pools plus one scratch for
 * every policy (what `loom estimate` adds up), and the pool is smaller than the fp32-buffer
 * layout's by exactly half of the seven saved tensors of every block that keeps them: per block
 * N*(C + 3C + C + C + C + 4C + 4C) = 15NC values at 2 bytes instead of 4 (B*T*C = 384 is a
 * multiple of 16, so the 64-byte alignment adds nothing; the forward's fp32 values fit the
 * backward scratch). */
START_TEST(test_memory_16bit) {
  for (int slots = 1; slots <= 2; slots++) {
    for (int policy = GPT_CKPT_NONE; policy <= GPT_CKPT_SELECTIVE; policy++) {
      gpt_config c = with_policy(base, policy, 1);
      c.dtype = LOOM_BF16;
      run_result r = run(&c, slots);
      ck_assert_msg(r.act_peak_bytes == r.act_bytes * (size_t)slots + r.recompute_bytes,
                    "bf16 policy %d, %d slots: measured activation peak %zu != %zu x %d + %zu",
                    policy, slots, r.act_peak_bytes, r.act_bytes, slots, r.recompute_bytes);
      const size_t NC = (size_t)B * T * base.n_embd;
      gpt_config old = c;
      old.acts_f32 = 1;
      /* the shared scratch: the fp32 layout's plus one (B,T,4C) widening buffer, which full
       * checkpointing's recompute block already has */
      ck_assert_uint_eq(r.recompute_bytes, gpt_recompute_bytes(&old, B, T) +
                                               (policy == GPT_CKPT_FULL ? 0 : 4 * NC * 4));
      size_t kept = policy == GPT_CKPT_FULL ? 0 : (size_t)base.n_layer;
      ck_assert_uint_eq(gpt_activation_bytes(&old, B, T) - r.act_bytes, kept * 15 * NC * 2);
      free(r.grads);
    }
  }
  /* fp32 is unchanged: no scratch without checkpointing */
  ck_assert_uint_eq(gpt_recompute_bytes(&base, B, T), 0);
}
END_TEST

/* The measured activation peak is the pools of the micro-batches in flight plus one scratch,
 * and the policies order as they should. */
START_TEST(test_memory_drops) {
  for (int slots = 1; slots <= 2; slots++) {
    size_t peak[3];
    for (int policy = GPT_CKPT_NONE; policy <= GPT_CKPT_SELECTIVE; policy++) {
      gpt_config c = with_policy(base, policy, 1);
      run_result r = run(&c, slots);
      ck_assert_msg(r.act_peak_bytes == r.act_bytes * (size_t)slots + r.recompute_bytes,
                    "policy %d, %d slots: measured activation peak %zu != %zu x %d + %zu", policy,
                    slots, r.act_peak_bytes, r.act_bytes, slots, r.recompute_bytes);
      ck_assert_uint_eq(r.recompute_bytes > 0, policy != GPT_CKPT_NONE);
      peak[policy] = r.act_peak_bytes;
      free(r.grads);
    }
    ck_assert_msg(peak[GPT_CKPT_FULL] < peak[GPT_CKPT_SELECTIVE] &&
                      peak[GPT_CKPT_SELECTIVE] < peak[GPT_CKPT_NONE],
                  "%d slots: peaks none %zu, selective %zu, full %zu", slots,
                  peak[GPT_CKPT_NONE], peak[GPT_CKPT_SELECTIVE], peak[GPT_CKPT_FULL]);
  }
  /* every 2 keeps block 1 whole: between full and none */
  gpt_config c2 = with_policy(base, GPT_CKPT_FULL, 2), c1 = with_policy(base, GPT_CKPT_FULL, 1);
  ck_assert_uint_gt(gpt_activation_bytes(&c2, B, T), gpt_activation_bytes(&c1, B, T));
  ck_assert_uint_lt(gpt_activation_bytes(&c2, B, T), gpt_activation_bytes(&base, B, T));
}
END_TEST

/* Flash attention (gpt_config.attn_lse: the rows' log-sum-exp saved, each tile's probabilities
 * recomputed in backward) composes the same way: every policy bitwise its run without
 * checkpointing for every shape above, fp32 and bf16 (16-bit saved copies, whose backward widens
 * the saved attention output apart from qkv, and 16-bit activations end to end); the peak is the
 * pools plus one scratch, and the probabilities' (B,NH,T,T) per kept block and backward's datt
 * are gone. */
START_TEST(test_bitwise_flash) {
  gpt_config c = base;
  c.attn_lse = 1;
  bitwise_all(c, 1, "flash whole model");
  bitwise_all(c, 2, "flash two slots");
  gpt_config t = c;
  t.tp_size = 2;
  t.tp_rank = 1;
  bitwise_all(t, 1, "flash tp 2 rank 1");
  gpt_config st = c;
  st.pp_first = 2;
  bitwise_all(st, 2, "flash stage units 2..4");
  gpt_config h = c;
  h.dtype = LOOM_BF16;
  bitwise_all(h, 1, "flash bf16 whole model, saved copies");
  h.acts_typed = 1;
  bitwise_all(h, 1, "flash bf16 whole model, 16-bit end to end");
  h.acts_typed = 0;
  h.pp_first = 2;
  bitwise_all(h, 2, "flash bf16 stage units 2..4");
}
END_TEST

START_TEST(test_memory_flash) {
  const size_t NH = (size_t)base.n_head, L = (size_t)base.n_layer;
  for (int slots = 1; slots <= 2; slots++) {
    for (int policy = GPT_CKPT_NONE; policy <= GPT_CKPT_SELECTIVE; policy++) {
      gpt_config c = with_policy(base, policy, 1);
      c.attn_lse = 1;
      run_result r = run(&c, slots);
      ck_assert_msg(r.act_peak_bytes == r.act_bytes * (size_t)slots + r.recompute_bytes,
                    "flash policy %d, %d slots: measured activation peak %zu != %zu x %d + %zu",
                    policy, slots, r.act_peak_bytes, r.act_bytes, slots, r.recompute_bytes);
      gpt_config mat = c;
      mat.attn_lse = 0;
      /* exactly: the blocks that keep their attention state keep T floats a row instead of
       * T x T, and the backward scratch (the block's, larger than the head's here) loses datt
       * (every term a multiple of 16 floats: no alignment in between) */
      size_t kept = policy == GPT_CKPT_NONE ? L : 0, mat_bytes = gpt_activation_bytes(&mat, B, T);
      ck_assert_uint_gt(mat_bytes, r.act_bytes);
      ck_assert_uint_eq(mat_bytes - r.act_bytes,
                        (kept * B * NH * (T * T - T) + B * NH * T * T) * sizeof(float));
      if (policy != GPT_CKPT_NONE) /* the scratch's one block: lse instead of probabilities */
        ck_assert_uint_eq(gpt_recompute_bytes(&mat, B, T) - r.recompute_bytes,
                          B * NH * (T * T - T) * sizeof(float));
      free(r.grads);
    }
  }
}
END_TEST

START_TEST(test_bad_policy) {
  char err[256] = "";
  gpt_model m;
  gpt_config c = with_policy(base, 7, 1);
  ck_assert_int_eq(gpt_init(&m, &c, &dev, err, sizeof err), LOOM_INVALID_CONFIG);
  ck_assert_msg(strstr(err, "activation checkpointing") != NULL, "message: %s", err);
  c = with_policy(base, GPT_CKPT_FULL, -1);
  ck_assert_int_eq(gpt_init(&m, &c, &dev, err, sizeof err), LOOM_INVALID_CONFIG);
}
END_TEST

static Suite *ckpt_suite(void) {
  const check_case cases[] = {
      {"bitwise_whole_model", test_bitwise_whole_model},
      {"bitwise_tp_local_shapes", test_bitwise_tp_local_shapes},
      {"bitwise_two_in_flight", test_bitwise_two_in_flight},
      {"bitwise_pipeline_stage", test_bitwise_pipeline_stage},
      {"bitwise_16bit", test_bitwise_16bit},
      {"memory_16bit", test_memory_16bit},
      {"memory_drops", test_memory_drops},
      {"bitwise_flash", test_bitwise_flash},
      {"memory_flash", test_memory_flash},
      {"bad_policy", test_bad_policy},
  };
  /* 60 s, not Check's 4: the 16-bit cases run ~2 s alone and overran 4 s on a loaded machine */
  return check_case_suite("activation_checkpointing", CHECK_CASES(cases), setup, teardown, 60);
}

int main(void) {
  return check_run_suite(ckpt_suite(), CK_FORK);
}
