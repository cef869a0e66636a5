/* Check suite for the checkpoint's global view (plugins/checkpoint/checkpoint: slice.c and the
 * load of checkpoint.c): a tensor saved under one tensor-parallel slicing and partition loads
 * under any other, element for element.
 *  - every pair of slicings tp 1, 2, 4 (save) x tp 1, 2, 3-way partitions of 1, 2, 4 (load) of
 *    four tensors shaped like GPT's: qkv.weight (rows split in 3 blocks), proj.weight (columns
 *    split), qkv.bias (1-D, 3 blocks), ln.weight (replicated); the saved slices cut further
 *    into uneven ZeRO-like pieces, the loaded ones asked for in uneven sub-ranges: each loaded
 *    element equals the global element an independent index formula names;
 *  - what cannot load is refused with a message: a range no chunk covers, chunks that
 *    overlap (a replica written twice), another global shape, a slice descriptor that does
 *    not describe its item.
 * The plugin's objects are linked in with a one-rank fake host (support/ckpt_fake_host.h):
 * one rank writes the chunks of every simulated rank. */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "slice.h"
#include "support/check_suite.h"
#include "support/ckpt_fake_host.h"
#include "support/test_dir.h"

static char g_dir[256];
static loom_host g_host;
static void setup(void) { test_dir_make(g_dir, sizeof g_dir, "loom-reshard"); }
static void teardown(void) { test_dir_remove(g_dir); }

static void *create_ckpt(void) { return ckpt_fake_create(&loom_plugin_v1, &g_host, g_dir); }

/* ---- the tensors: GPT's four kinds of placement (C = 8) ---- */
typedef struct tensor {
  const char *name;
  int ndim;
  int64_t rows, cols;
  int split_dim, parts;
} tensor;
static const tensor T[] = {
    {"params/h.0.attn.qkv.weight", 2, 24, 8, 0, 3},  /* column-parallel, q k v blocks */
    {"params/h.0.attn.proj.weight", 2, 8, 32, 1, 1}, /* row-parallel: columns split */
    {"params/h.0.attn.qkv.bias", 1, 24, 1, 0, 3},
    {"params/h.0.ln_1.weight", 1, 8, 1, -1, 1},      /* replicated */
};
enum { NT = sizeof T / sizeof T[0], MAXI = 64 };

/* Global element g of tensor t: distinct everywhere. */
static float value(int t, uint64_t g) { return (float)(t * 100000 + (int64_t)g) * 0.5f; }

/* The global index of local element l of slice `index` of `size` — written out per dimension
 * (row, column, block), independently of slice.c's runs. */
static uint64_t global_of(const tensor *t, int index, int size, uint64_t l) {
  int64_t R = t->rows, K = t->cols, P = t->parts;
  if (t->split_dim < 0 || size == 1) return l;
  if (t->split_dim == 0) {
    int64_t lrows = R / (P * size), lr = (int64_t)l / K, c = (int64_t)l % K;
    int64_t row = (lr / lrows) * (R / P) + index * lrows + lr % lrows;
    return (uint64_t)(row * K + c);
  }
  int64_t lcols = K / size, w = K / (P * size), lr = (int64_t)l / lcols, lc = (int64_t)l % lcols;
  return (uint64_t)(lr * K + (lc / w) * (K / P) + index * w + lc % w);
}

static uint64_t local_numel(const tensor *t, int size) {
  uint64_t n = (uint64_t)(t->rows * t->cols);
  return t->split_dim < 0 ? n : n / (uint64_t)size;
}

static loom_ckpt_slice_v1 slice_of(const tensor *t, int index, int size) {
  loom_ckpt_slice_v1 s = {.struct_size = sizeof s, .ndim = t->ndim, .shape = {t->rows},
                          .split_dim = -1, .split_parts = 1, .split_index = 0, .split_size = 1};
  if (t->ndim == 2) s.shape[1] = t->cols;
  if (t->split_dim >= 0 && size > 1) {
    s.split_dim = t->split_dim;
    s.split_parts = t->parts;
    s.split_index = index;
    s.split_size = size;
  }
  return s;
}

typedef struct batch {
  loom_ckpt_item_v1 items[MAXI];
  loom_ckpt_slice_v1 slices[MAXI];
  float *data[MAXI];
  int n;
} batch;

static void add(batch *b, int t, int index, int size, uint64_t lo, uint64_t hi, int fill) {
  ck_assert_int_lt(b->n, MAXI);
  int i = b->n++;
  b->data[i] = calloc(hi - lo + 1, sizeof(float));
  for (uint64_t l = lo; fill && l < hi; l++)
    b->data[i][l - lo] = value(t, global_of(&T[t], index, size, l));
  b->items[i] = (loom_ckpt_item_v1){.struct_size = sizeof(loom_ckpt_item_v1), .name = T[t].name,
                                    .dtype = LOOM_F32,
                                    .global_numel = (uint64_t)(T[t].rows * T[t].cols),
                                    .offset = lo, .count = hi - lo, .data = b->data[i],
                                    .writer = 1};
  b->slices[i] = slice_of(&T[t], index, size);
}

static void batch_free(batch *b) {
  for (int i = 0; i < b->n; i++) free(b->data[i]);
  b->n = 0;
}

static loom_ckpt_state_v1 state_of(batch *b, int step) {
  static char blob[8];
  return (loom_ckpt_state_v1){.struct_size = sizeof(loom_ckpt_state_v1), .step = step,
                              .n_items = b->n, .items = b->items, .meta_json = "{}",
                              .rank_blob = blob, .rank_blob_bytes = 0, .slices = b->slices};
}

/* Save every tensor under tp `size`, each slice cut into `pieces` uneven ZeRO-like chunks. */
static void save(int step, int size, int pieces) {
  batch b = {.n = 0};
  for (int t = 0; t < NT; t++) {
    int slices = T[t].split_dim < 0 ? 1 : size; /* a replicated tensor: written once */
    for (int r = 0; r < slices; r++) {
      uint64_t n = local_numel(&T[t], size), lo = 0;
      for (int p = 0; p < pieces; p++) {
        uint64_t hi = p == pieces - 1 ? n : lo + (n * (uint64_t)(2 * p + 1)) / (uint64_t)(pieces * pieces);
        if (hi > lo) add(&b, t, r, size, lo, hi, 1);
        lo = hi;
      }
    }
  }
  loom_ckpt_state_v1 st = state_of(&b, step);
  void *ctx = create_ckpt();
  ck_assert_msg(loom_plugin_v1.save(ctx, &st) == LOOM_OK, "save: %s", g_host.error);
  loom_plugin_v1.destroy(ctx);
  batch_free(&b);
}

/* Load step under tp `size`, every slice's local range cut in `parts` uneven requests; check
 * every element against the global formula. */
static void load_and_check(int step, int size, int parts, int saved_size, int pieces) {
  batch b = {.n = 0};
  for (int t = 0; t < NT; t++)
    for (int r = 0; r < size; r++) {
      uint64_t n = local_numel(&T[t], size), lo = 0;
      for (int p = 0; p < parts; p++) {
        uint64_t hi = p == parts - 1 ? n : lo + n / (uint64_t)(parts + 1) + 1;
        if (hi > n) hi = n;
        if (hi > lo) add(&b, t, r, size, lo, hi, 0);
        lo = hi;
      }
    }
  loom_ckpt_state_v1 st = state_of(&b, step);
  void *ctx = create_ckpt();
  const char *meta = NULL;
  int rc = loom_plugin_v1.load(ctx, step, &st, &meta);
  ck_assert_msg(rc == LOOM_OK, "tp %d x %d pieces -> tp %d x %d parts: %s", saved_size, pieces,
                size, parts, g_host.error);
  for (int i = 0; i < b.n; i++) {
    const loom_ckpt_item_v1 *it = &b.items[i];
    int t = 0;
    while (strcmp(T[t].name, it->name) != 0) t++;
    for (uint64_t l = 0; l < it->count; l++) {
      float want = value(t, global_of(&T[t], b.slices[i].split_index, size, it->offset + l));
      ck_assert_msg(b.data[i][l] == want,
                    "tp %d -> tp %d: %s slice %d element %llu is %g, expected %g", saved_size,
                    size, it->name, b.slices[i].split_index,
                    (unsigned long long)(it->offset + l), (double)b.data[i][l], (double)want);
    }
  }
  loom_plugin_v1.destroy(ctx);
  batch_free(&b);
}

START_TEST(test_every_slicing_pair) {
  static const int sizes[] = {1, 2, 4};
  int step = 0;
  for (int s = 0; s < 3; s++)
    for (int pieces = 1; pieces <= 3; pieces += 2) {
      save(++step, sizes[s], pieces);
      for (int q = 0; q < 3; q++)
        for (int parts = 1; parts <= 3; parts++)
          load_and_check(step, sizes[q], parts, sizes[s], pieces);
    }
}
END_TEST

/* slice.c's runs against the formula, and a walk that covers the whole tensor exactly once */
START_TEST(test_runs_match_formula) {
  for (int t = 0; t < NT; t++)
    for (int size = 1; size <= 4; size *= 2)
      for (int index = 0; index < size; index++) {
        loom_ckpt_slice_v1 d = slice_of(&T[t], index, size);
        ckpt_slice s = {.rows = T[t].rows, .cols = T[t].cols, .split_dim = d.split_dim,
                        .parts = d.split_parts, .index = d.split_index, .size = d.split_size};
        ck_assert_int_eq(ckpt_slice_valid(&s), 0);
        uint64_t n = ckpt_slice_numel(&s), len = ckpt_slice_run_len(&s);
        ck_assert_uint_eq(n, local_numel(&T[t], size));
        for (uint64_t l = 0; l < n; l++)
          ck_assert_uint_eq(ckpt_slice_run_global(&s, l / len) + l % len,
                            global_of(&T[t], index, size, l));
      }
}
END_TEST

START_TEST(test_invalid_slices) {
  ckpt_slice bad[] = {
      {.rows = 24, .cols = 8, .split_dim = 0, .parts = 3, .index = 0, .size = 5}, /* 24 % 15 */
      {.rows = 8, .cols = 32, .split_dim = 1, .parts = 1, .index = 2, .size = 2}, /* index */
      {.rows = 8, .cols = 1, .split_dim = 2, .parts = 1, .index = 0, .size = 1},  /* dim */
      {.rows = 0, .cols = 1, .split_dim = -1, .parts = 1, .index = 0, .size = 1}, /* empty */
      {.rows = 8, .cols = 1, .split_dim = -1, .parts = 1, .index = 0, .size = 2}, /* whole */
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    ck_assert_msg(ckpt_slice_valid(&bad[i]) != 0, "slice %zu accepted", i);
}
END_TEST

/* Load one item of tensor t (tp size, slice index, [lo, hi)) of `step`: the result, the error. */
static int load_one(int step, int t, int index, int size, uint64_t lo, uint64_t hi) {
  batch b = {.n = 0};
  add(&b, t, index, size, lo, hi, 0);
  loom_ckpt_state_v1 st = state_of(&b, step);
  void *ctx = create_ckpt();
  const char *meta = NULL;
  g_host.error[0] = '\0';
  int rc = loom_plugin_v1.load(ctx, step, &st, &meta);
  loom_plugin_v1.destroy(ctx);
  batch_free(&b);
  return rc;
}

START_TEST(test_refusals) {
  /* step 1: qkv.weight's tp 2 slice 0 only: slice 1 and the whole tensor are not there */
  batch b = {.n = 0};
  add(&b, 0, 0, 2, 0, local_numel(&T[0], 2), 1);
  loom_ckpt_state_v1 st = state_of(&b, 1);
  void *ctx = create_ckpt();
  ck_assert_int_eq(loom_plugin_v1.save(ctx, &st), LOOM_OK);
  loom_plugin_v1.destroy(ctx);
  batch_free(&b);
  ck_assert_int_eq(load_one(1, 0, 0, 2, 0, 96), LOOM_OK);
  ck_assert_int_eq(load_one(1, 0, 1, 2, 0, 96), LOOM_CORRUPT);
  ck_assert_msg(strstr(g_host.error, "is not fully in the checkpoint (0 of 96"), "%s",
                g_host.error);
  ck_assert_int_eq(load_one(1, 0, 0, 1, 0, 192), LOOM_CORRUPT);
  ck_assert_msg(strstr(g_host.error, "(96 of 192 elements found)"), "%s", g_host.error);

  /* step 2: a replicated tensor written twice: overlapping chunks are corruption */
  add(&b, 3, 0, 1, 0, 8, 1);
  add(&b, 3, 0, 1, 4, 8, 1);
  st = state_of(&b, 2);
  ctx = create_ckpt();
  ck_assert_int_eq(loom_plugin_v1.save(ctx, &st), LOOM_OK);
  loom_plugin_v1.destroy(ctx);
  batch_free(&b);
  ck_assert_int_eq(load_one(2, 3, 0, 1, 0, 8), LOOM_CORRUPT);
  ck_assert_msg(strstr(g_host.error, "chunks overlap"), "%s", g_host.error);

  /* another shape of the same element count: refused as another model */
  add(&b, 1, 0, 1, 0, 256, 1); /* proj.weight (8, 32) */
  st = state_of(&b, 3);
  ctx = create_ckpt();
  ck_assert_int_eq(loom_plugin_v1.save(ctx, &st), LOOM_OK);
  loom_plugin_v1.destroy(ctx);
  b.slices[0].shape[0] = 32;
  b.slices[0].shape[1] = 8;
  memset(b.data[0], 0, 256 * sizeof(float));
  st = state_of(&b, 3);
  ctx = create_ckpt();
  const char *meta = NULL;
  ck_assert_int_eq(loom_plugin_v1.load(ctx, 3, &st, &meta), LOOM_CORRUPT);
  ck_assert_msg(strstr(g_host.error, "shape [8, 32]") && strstr(g_host.error, "shape [32, 8]"),
                "%s", g_host.error);
  loom_plugin_v1.destroy(ctx);

  /* a descriptor that does not describe its item: the host's bug, named, nothing written */
  b.slices[0].shape[0] = 8;
  b.slices[0].shape[1] = 33;
  st = state_of(&b, 4);
  ctx = create_ckpt();
  ck_assert_int_eq(loom_plugin_v1.save(ctx, &st), LOOM_IO);
  ck_assert_msg(strstr(g_host.error, "the host described it wrongly"), "%s", g_host.error);
  loom_plugin_v1.destroy(ctx);
  batch_free(&b);
}
END_TEST

int main(void) {
  const check_case cases[] = {
      {"every_slicing_pair", test_every_slicing_pair},
      {"runs_match_formula", test_runs_match_formula},
      {"invalid_slices", test_invalid_slices},
      {"refusals", test_refusals},
  };
  Suite *s = check_case_suite("ckpt_reshard", CHECK_CASES(cases), setup, teardown, 120);
  return check_run_suite(s, CK_FORK_GETENV);
}
