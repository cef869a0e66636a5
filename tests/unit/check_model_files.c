/* Model files (core/formats/model_files.h): a model written as safetensors or llm.c and read
 * back into every layout a rank can hold — whole, tensor-parallel slices, pipeline stages (the
 * last stage's tied wte copy included), arbitrary flat ranges (ZeRO-3 partitions) — must give
 * bitwise the values gpt_init_weights_range puts there for that layout (the seed's GPT-2
 * initialisation, itself defined as the single-rank values sliced). Then damaged files: every
 * one is refused with a message, never a crash or an out-of-range read. */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "formats/gpt2_layout.h"
#include "formats/model_files.h"
#include "model/gpt.h"
#include "support/check_suite.h"
#include "support/test_dir.h"

/* V 200 pads to 256 in llm.c's file; C 32, 4 heads so tp 2 and tp 4 split them */
static const gpt_config base = {.vocab_size = 200, .max_seq_len = 16, .n_layer = 3,
                                .n_head = 4, .n_embd = 32};
enum { SEED = 4242 };
static char dir[256], path_st[300], path_bin[300], err[1024];
static loom_dev dev;
static gpt_model whole, table;

static int read_whole(void *ctx, const gpt_param *p, float *dst, char *e, size_t n) {
  (void)ctx, (void)e, (void)n;
  for (int i = 0; i < whole.n_params; i++)
    if (!strcmp(whole.params[i].name, p->name)) {
      dev.ops->to_host(dev.ctx, dst, whole.params[i].data, p->numel * sizeof(float));
      return 0;
    }
  return -1;
}

static void setup(void) {
  test_dir_make(dir, sizeof dir, "check_model_files");
  snprintf(path_st, sizeof path_st, "%s/m.safetensors", dir);
  snprintf(path_bin, sizeof path_bin, "%s/m.bin", dir);
  ck_assert_int_eq(loom__dev_open(&dev, loom__cpu_device(), "{}", 0, err, sizeof err), LOOM_OK);
  ck_assert_int_eq(gpt_init(&whole, &base, &dev, err, sizeof err), LOOM_OK);
  gpt_init_weights(&whole, SEED);
  ck_assert_int_eq(loom__gpt2_table(&table, base.vocab_size, base.max_seq_len, base.n_layer,
                                    base.n_head, base.n_embd, err, sizeof err), 0);
  ck_assert_msg(loom__model_file_write(path_st, LOOM_FORMAT_SAFETENSORS, &table, read_whole,
                                       NULL, "{\"k\": \"v\"}", err, sizeof err) == 0, "%s", err);
  ck_assert_msg(loom__model_file_write(path_bin, LOOM_FORMAT_LLMC, &table, read_whole, NULL,
                                       NULL, err, sizeof err) == 0, "%s", err);
}

static void teardown(void) {
  gpt_free(&table);
  gpt_free(&whole);
  loom__dev_close(&dev);
  test_dir_remove(dir);
}

/* Fill model `cfg`'s flat range [begin, begin+n) from `path` and compare with the seed's
 * values for the same range, bitwise. */
static void check_fill(const char *path, loom_model_format fmt, gpt_config cfg, size_t begin,
                       size_t n) {
  gpt_model m;
  ck_assert_int_eq(gpt_init(&m, &cfg, &dev, err, sizeof err), LOOM_OK);
  if (n == 0) n = m.num_parameters - begin;
  float *want = loom__dev_alloc(&dev, n * sizeof(float), LOOM_MEM_OTHER);
  float *got = loom__dev_alloc(&dev, n * sizeof(float), LOOM_MEM_OTHER);
  gpt_init_weights_range(&m, SEED, begin, n, want);
  loom_model_file *f = loom__model_file_open(path, fmt, &table, err, sizeof err);
  ck_assert_msg(f != NULL, "%s", err);
  ck_assert_msg(loom__model_file_fill(f, &m, begin, n, got, err, sizeof err) == 0, "%s", err);
  loom__model_file_close(f);
  float *hw = malloc(n * sizeof(float)), *hg = malloc(n * sizeof(float));
  dev.ops->to_host(dev.ctx, hw, want, n * sizeof(float));
  dev.ops->to_host(dev.ctx, hg, got, n * sizeof(float));
  size_t bad = n;
  for (size_t i = 0; i < n && bad == n; i++)
    if (memcmp(&hw[i], &hg[i], sizeof(float)) != 0) bad = i;
  ck_assert_msg(bad == n, "%s tp %d/%d pp [%d,%d) range [%zu,+%zu): element %zu is %g, the "
                "seed's is %g", path, cfg.tp_rank, cfg.tp_size, cfg.pp_first, cfg.pp_end, begin,
                n, begin + bad, bad < n ? hg[bad] : 0.0, bad < n ? hw[bad] : 0.0);
  free(hw);
  free(hg);
  loom__dev_free(&dev, want);
  loom__dev_free(&dev, got);
  gpt_free(&m);
}

START_TEST(test_layouts) {
  const char *paths[2] = {path_st, path_bin};
  for (int k = 0; k < 2; k++) {
    loom_model_format fmt = k ? LOOM_FORMAT_LLMC : LOOM_FORMAT_SAFETENSORS;
    check_fill(paths[k], fmt, base, 0, 0); /* whole */
    for (int tp = 2; tp <= 4; tp += 2)
      for (int r = 0; r < tp; r++) {
        gpt_config c = base;
        c.tp_size = tp;
        c.tp_rank = r;
        check_fill(paths[k], fmt, c, 0, 0);
      }
    /* pipeline stages: embedding + block 0 | blocks 1-2 + head (with the tied wte copy) */
    gpt_config s0 = base, s1 = base;
    s0.pp_first = 0, s0.pp_end = 2;
    s1.pp_first = 2, s1.pp_end = base.n_layer + 2;
    check_fill(paths[k], fmt, s0, 0, 0);
    check_fill(paths[k], fmt, s1, 0, 0);
    s1.tp_size = 2, s1.tp_rank = 1;
    check_fill(paths[k], fmt, s1, 0, 0);
    /* ZeRO-3 partitions: ranges cutting through tensors and rows */
    check_fill(paths[k], fmt, base, 1, 777);
    check_fill(paths[k], fmt, base, 6399, 9001);
    gpt_config t2 = base;
    t2.tp_size = 2, t2.tp_rank = 1;
    check_fill(paths[k], fmt, t2, 7000, 5000);
  }
}
END_TEST

/* The flat parameters of model `cfg` filled from `path` over [begin, begin + n) (n 0: to the
 * end), on the host (free it); *m is the model (free with gpt_free). */
static float *fill_host(const char *path, loom_model_format fmt, gpt_config cfg, size_t begin,
                        size_t n, gpt_model *m) {
  ck_assert_int_eq(gpt_init(m, &cfg, &dev, err, sizeof err), LOOM_OK);
  if (n == 0) n = m->num_parameters - begin;
  float *d = loom__dev_alloc(&dev, n * sizeof(float), LOOM_MEM_OTHER);
  float *h = malloc(n * sizeof(float));
  loom_model_file *f = loom__model_file_open(path, fmt, &table, err, sizeof err);
  ck_assert_msg(f != NULL, "%s", err);
  ck_assert_msg(loom__model_file_fill(f, m, begin, n, d, err, sizeof err) == 0, "%s", err);
  loom__model_file_close(f);
  dev.ops->to_host(dev.ctx, h, d, n * sizeof(float));
  loom__dev_free(&dev, d);
  return h;
}

/* A model with a padded vocabulary (Vp 320 > V 200; llm.c's file has 256 rows, safetensors
 * 200) filled from either file: wte's first V rows, and every other tensor, bitwise what the
 * unpadded model gets; the padded rows V..Vp-1 zero. Whole, tp 2 (wte replicated), the last
 * pipeline stage (its tied wte copy), and a ZeRO-3-like range ending inside the padded rows. */
START_TEST(test_padded_vocab) {
  const char *paths[2] = {path_st, path_bin};
  for (int k = 0; k < 2; k++) {
    loom_model_format fmt = k ? LOOM_FORMAT_LLMC : LOOM_FORMAT_SAFETENSORS;
    gpt_config plain[3] = {base, base, base};
    plain[1].tp_size = 2, plain[1].tp_rank = 1;
    plain[2].pp_first = 2, plain[2].pp_end = base.n_layer + 2;
    for (int c = 0; c < 3; c++) {
      gpt_config padded = plain[c];
      padded.padded_vocab_size = 320;
      gpt_model m0, m1;
      float *want = fill_host(paths[k], fmt, plain[c], 0, 0, &m0);
      float *got = fill_host(paths[k], fmt, padded, 0, 0, &m1);
      ck_assert_int_eq(m0.n_params, m1.n_params);
      int zero_rows = 0;
      for (int i = 0; i < m1.n_params; i++) {
        const gpt_param *a = &m0.params[i], *b = &m1.params[i];
        if (!b->present) continue;
        ck_assert_str_eq(a->name, b->name);
        ck_assert_msg(memcmp(want + a->offset, got + b->offset, a->numel * sizeof(float)) == 0,
                      "%s (file %d, layout %d): the real rows differ", b->name, k, c);
        for (size_t e = a->numel; e < b->numel; e++)
          ck_assert_msg(got[b->offset + e] == 0.0f, "%s element %zu: %g, want 0 (padded row)",
                        b->name, e, got[b->offset + e]);
        zero_rows += (int)((b->numel - a->numel) / (size_t)base.n_embd);
      }
      ck_assert_int_eq(zero_rows, 120); /* one wte (or its tied copy) per layout */
      /* a ZeRO-3 partition: the flat range [wte's row 150, row 300) (the tied copy's on the
       * last stage) */
      const gpt_param *wte = NULL;
      for (int i = 0; i < m1.n_params && !wte; i++)
        if (m1.params[i].present && m1.params[i].role == GPT_WTE) wte = &m1.params[i];
      ck_assert_ptr_nonnull(wte);
      size_t lo = wte->offset + 150 * (size_t)base.n_embd, n = 150 * (size_t)base.n_embd;
      gpt_model m2;
      float *part = fill_host(paths[k], fmt, padded, lo, n, &m2);
      ck_assert_msg(memcmp(part, got + lo, n * sizeof(float)) == 0, "range of wte differs");
      free(part);
      gpt_free(&m2);
      free(want);
      free(got);
      gpt_free(&m0);
      gpt_free(&m1);
    }
  }
}
END_TEST

/* Rewrite m.safetensors with its header passed through `edit` (a sed-like replace). */
static void write_edited(const char *from, const char *to, const char *out) {
  FILE *f = fopen(path_st, "rb");
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *d = malloc((size_t)size + 64);
  ck_assert_int_eq(fread(d, 1, (size_t)size, f), (size_t)size);
  fclose(f);
  char *at = strstr(d + 8, from);
  ck_assert_ptr_nonnull(at);
  ck_assert_uint_eq(strlen(from), strlen(to)); /* same length: offsets stay valid */
  memcpy(at, to, strlen(to));
  f = fopen(out, "wb");
  fwrite(d, 1, (size_t)size, f);
  fclose(f);
  free(d);
}

static void expect_refused(const char *path, loom_model_format fmt, const char *needle) {
  loom_model_file *f = loom__model_file_open(path, fmt, &table, err, sizeof err);
  ck_assert_msg(f == NULL, "%s opened", path);
  ck_assert_msg(strstr(err, needle) != NULL, "message '%s' lacks '%s'", err, needle);
}

START_TEST(test_refusals) {
  char p[300];
  snprintf(p, sizeof p, "%s/bad.safetensors", dir);
  write_edited("\"F32\"", "\"I32\"", p);
  expect_refused(p, LOOM_FORMAT_SAFETENSORS, "has dtype I32, loom reads F32, BF16 or F16");
  write_edited("\"h.2.mlp.c_fc.bias\"", "\"h.2.mlp.c_fx.bias\"", p);
  expect_refused(p, LOOM_FORMAT_SAFETENSORS, "tensor 'h.2.mlp.c_fx.bias' is not part of");
  write_edited("\"ln_f.weight\"", "\"ln_g.weight\"", p);
  expect_refused(p, LOOM_FORMAT_SAFETENSORS, "is not part of a GPT-2");
  /* a header length beyond the file */
  FILE *f = fopen(p, "r+b");
  unsigned char big[8] = {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0};
  fwrite(big, 1, 8, f);
  fclose(f);
  expect_refused(p, LOOM_FORMAT_SAFETENSORS, "not a safetensors file");
  /* a truncated file: data_offsets beyond its end */
  snprintf(p, sizeof p, "cp %s %s/t.safetensors && truncate -s -4 %s/t.safetensors", path_st,
           dir, dir);
  ck_assert_int_eq(system(p), 0);
  snprintf(p, sizeof p, "%s/t.safetensors", dir);
  expect_refused(p, LOOM_FORMAT_SAFETENSORS, "data_offsets do not hold");
  /* the llm.c file read as safetensors and the other way round, and a truncated llm.c file */
  expect_refused(path_bin, LOOM_FORMAT_SAFETENSORS, "not a safetensors file");
  expect_refused(path_st, LOOM_FORMAT_LLMC, "expected 20240326: not an llm.c model file");
  snprintf(p, sizeof p, "cp %s %s/t.bin && truncate -s -4 %s/t.bin", path_bin, dir, dir);
  ck_assert_int_eq(system(p), 0);
  snprintf(p, sizeof p, "%s/t.bin", dir);
  expect_refused(p, LOOM_FORMAT_LLMC, "the file is truncated or not llm.c's fp32 GPT-2");
  snprintf(p, sizeof p, "%s/none.bin", dir);
  expect_refused(p, LOOM_FORMAT_LLMC, "cannot open");
}
END_TEST

START_TEST(test_llmc_header) {
  FILE *f = fopen(path_bin, "rb");
  int32_t h[256];
  ck_assert_int_eq(fread(h, sizeof h[0], 256, f), 256);
  fclose(f);
  const int32_t want[8] = {20240326, 3, 16, 200, 3, 4, 32, 256};
  for (int i = 0; i < 8; i++) ck_assert_int_eq(h[i], want[i]);
  for (int i = 8; i < 256; i++) ck_assert_int_eq(h[i], 0);
}
END_TEST

/* bf16 of x by truncation (exact to widen back: the test's expected values) */
static uint16_t bf16_trunc(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return (uint16_t)(u >> 16);
}

/* A BF16 safetensors file written here (names from loom__hf_name, Conv1D transposed), read
 * into a tp 2 rank and a ZeRO-like range: every element is the bf16 value widened exactly. */
START_TEST(test_bf16_file) {
  char p[300];
  snprintf(p, sizeof p, "%s/bf16.safetensors", dir);
  json_t *h = json_object();
  uint64_t off = 0;
  for (int i = 0; i < table.n_params; i++) {
    const gpt_param *t = &table.params[i];
    char name[96];
    int tr;
    loom__hf_name(t, name, sizeof name, &tr);
    json_t *shape = t->ndim == 1 ? json_pack("[I]", (json_int_t)t->shape[0])
                    : tr ? json_pack("[I,I]", (json_int_t)t->shape[1], (json_int_t)t->shape[0])
                         : json_pack("[I,I]", (json_int_t)t->shape[0], (json_int_t)t->shape[1]);
    json_object_set_new(h, name, json_pack("{s:s,s:o,s:[I,I]}", "dtype", "BF16", "shape", shape,
                                           "data_offsets", (json_int_t)off,
                                           (json_int_t)(off + 2 * t->numel)));
    off += 2 * t->numel;
  }
  char *text = json_dumps(h, JSON_COMPACT);
  json_decref(h);
  uint64_t n = strlen(text);
  FILE *f = fopen(p, "wb");
  fwrite(&n, 8, 1, f); /* little-endian host */
  fwrite(text, 1, n, f);
  free(text);
  for (int i = 0; i < table.n_params; i++) {
    const gpt_param *t = &table.params[i];
    char name[96];
    int tr;
    loom__hf_name(t, name, sizeof name, &tr);
    float *v = malloc(t->numel * sizeof(float));
    uint16_t *b = malloc(t->numel * sizeof(uint16_t));
    ck_assert_int_eq(read_whole(NULL, t, v, NULL, 0), 0);
    int64_t rows = t->shape[0], cols = t->ndim == 2 ? t->shape[1] : 1;
    for (int64_t r = 0; r < rows; r++)
      for (int64_t c = 0; c < cols; c++)
        b[tr ? c * rows + r : r * cols + c] = bf16_trunc(v[r * cols + c]);
    fwrite(b, 2, t->numel, f);
    free(v);
    free(b);
  }
  fclose(f);
  gpt_config c = base;
  c.tp_size = 2, c.tp_rank = 1;
  gpt_model m;
  ck_assert_int_eq(gpt_init(&m, &c, &dev, err, sizeof err), LOOM_OK);
  size_t begin = 1234, cnt = m.num_parameters - 2000;
  float *want = loom__dev_alloc(&dev, cnt * sizeof(float), LOOM_MEM_OTHER);
  float *got = loom__dev_alloc(&dev, cnt * sizeof(float), LOOM_MEM_OTHER);
  gpt_init_weights_range(&m, SEED, begin, cnt, want);
  loom_model_file *mf = loom__model_file_open(p, LOOM_FORMAT_SAFETENSORS, &table, err, sizeof err);
  ck_assert_msg(mf != NULL, "%s", err);
  ck_assert_msg(loom__model_file_fill(mf, &m, begin, cnt, got, err, sizeof err) == 0, "%s", err);
  loom__model_file_close(mf);
  float *hw = malloc(cnt * sizeof(float)), *hg = malloc(cnt * sizeof(float));
  dev.ops->to_host(dev.ctx, hw, want, cnt * sizeof(float));
  dev.ops->to_host(dev.ctx, hg, got, cnt * sizeof(float));
  for (size_t i = 0; i < cnt; i++) {
    uint32_t u = (uint32_t)bf16_trunc(hw[i]) << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    ck_assert_msg(memcmp(&x, &hg[i], sizeof x) == 0, "element %zu: %g, want bf16 %g",
                  begin + i, hg[i], x);
  }
  free(hw);
  free(hg);
  loom__dev_free(&dev, want);
  loom__dev_free(&dev, got);
  gpt_free(&m);
}
END_TEST

int main(void) {
  Suite *s = suite_create("model_files");
  check_add_tcase(s, "roundtrip",
                  CHECK_TESTS(test_layouts, test_refusals, test_llmc_header, test_bf16_file,
                              test_padded_vocab),
                  setup, teardown, 0);
  return check_run_suite(s, CK_FORK_GETENV);
}
