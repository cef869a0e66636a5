/* Check suite for reading a checkpoint through its plugin (runtime/ckpt_reader.h, the ABI 1.6
 * reader slots): checkpoint.so loaded through the real loader reads a format-3 step written
 * here by hand — a 4 x 6 tensor saved as two column slices (tp 2) by two ranks, and a 1-D
 * tensor saved once — as global row-major tensors, whole or any element range; and refuses a
 * flipped byte, a missing tensor, a range past the end and a directory with no checkpoint,
 * naming them. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/ckpt_reader.h"
#include "support/check_suite.h"
#include "support/test_dir.h"

#define CKPT_SO LOOM_TEST_BUILD_DIR "/lib/loom/plugins/checkpoint.so"

static char g_dir[256];

/* CRC-32 (zlib's polynomial), bit by bit: the test needs no zlib of its own. */
static unsigned crc32_of(const void *buf, size_t n) {
  const unsigned char *p = buf;
  unsigned c = 0xffffffffu;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0xedb88320u : c >> 1;
  }
  return c ^ 0xffffffffu;
}

static void put(const char *path, const void *buf, size_t n) {
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(buf, 1, n, f), n);
  fclose(f);
}

/* w (4 x 6): w[i][j] = 10 i + j; rank r holds columns [3r, 3r + 3) (its slice, row-major
 * 4 x 3). b (6): b[j] = 100 + j, rank 0 only. */
static void setup(void) {
  test_dir_make(g_dir, sizeof g_dir, "loom_ckpt_reader");
  char step[300], p[400];
  snprintf(step, sizeof step, "%s/step-00000007", g_dir);
  ck_assert_int_eq(mkdir(step, 0755), 0);
  char shards[2][1024];
  for (int r = 0; r < 2; r++) {
    float data[12 + 6];
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 3; j++) data[i * 3 + j] = (float)(10 * i + 3 * r + j);
    for (int j = 0; j < 6; j++) data[12 + j] = (float)(100 + j);
    size_t n = r == 0 ? 18 : 12;
    snprintf(p, sizeof p, "%s/rank-%05d.bin", step, r);
    put(p, data, n * sizeof(float));
    int len = snprintf(shards[r], sizeof shards[r],
                       "{\"rank\": %d, \"blob_at\": %zu, \"blob_bytes\": 0, \"blob_crc32\": 0, "
                       "\"chunks\": [{\"name\": \"params/w\", \"dtype\": 0, \"global_numel\": "
                       "24, \"shape\": [4, 6], \"split_dim\": 1, \"split_parts\": 1, "
                       "\"split_index\": %d, \"split_size\": 2, \"offset\": 0, \"count\": 12, "
                       "\"rank\": %d, \"file\": \"rank-%05d.bin\", \"at\": 0, \"crc32\": %u}",
                       r, n * sizeof(float), r, r, r, crc32_of(data, 48));
    if (r == 0)
      len += snprintf(shards[r] + len, sizeof shards[r] - (size_t)len,
                      ", {\"name\": \"params/b\", \"dtype\": 0, \"global_numel\": 6, \"shape\": "
                      "[6], \"split_dim\": -1, \"split_parts\": 1, \"split_index\": 0, "
                      "\"split_size\": 1, \"offset\": 0, \"count\": 6, \"rank\": 0, \"file\": "
                      "\"rank-00000.bin\", \"at\": 48, \"crc32\": %u}", crc32_of(data + 12, 24));
    snprintf(shards[r] + len, sizeof shards[r] - (size_t)len, "]}");
  }
  char man[4096];
  int n = snprintf(man, sizeof man, "{\"format\": \"loom-checkpoint-3\", \"step\": 7, "
                   "\"world_size\": 2, \"meta\": {\"step\": 7, \"tp\": 2}, \"shards\": [%s, %s]}",
                   shards[0], shards[1]);
  snprintf(p, sizeof p, "%s/manifest.json", step);
  put(p, man, (size_t)n);
  char crc[16];
  snprintf(crc, sizeof crc, "%08x\n", crc32_of(man, (size_t)n));
  snprintf(p, sizeof p, "%s/manifest.crc32", step);
  put(p, crc, strlen(crc));
}

static void teardown(void) { test_dir_remove(g_dir); }

static void open_ok(loom_ckpt_reader *rd, const char *path) {
  char err[2048];
  ck_assert_msg(loom__ckpt_reader_open(rd, CKPT_SO, NULL, NULL, NULL, path, 0, err,
                                       sizeof err) == 0, "%s", err);
}

START_TEST(test_whole_and_ranges) {
  loom_ckpt_reader rd;
  open_ok(&rd, g_dir); /* the checkpoint directory: its newest step */
  ck_assert_int_eq(rd.info.step, 7);
  ck_assert_ptr_nonnull(strstr(rd.info.where, "step-00000007"));
  ck_assert_ptr_nonnull(strstr(rd.info.meta_json, "\"tp\":2"));
  ck_assert_int_eq(rd.info.n_tensors, 2);
  loom_ckpt_tensor_v1 t;
  ck_assert_int_eq(loom__ckpt_reader_find(&rd, "params/w", &t), 0);
  ck_assert_int_eq(t.ndim, 2);
  ck_assert_int_eq(t.shape[0], 4);
  ck_assert_int_eq(t.shape[1], 6);
  ck_assert_uint_eq(t.numel, 24);
  ck_assert_uint_eq(loom_ckpt_kind_len(t.name), 6);
  float w[24], b[6];
  char err[2048];
  ck_assert_msg(loom__ckpt_reader_read(&rd, "params/w", 0, 24, w, err, sizeof err) == 0, "%s",
                err);
  for (int i = 0; i < 24; i++) ck_assert_float_eq(w[i], (float)(10 * (i / 6) + i % 6));
  /* a range crossing both ranks' slices and a row boundary: elements 5 .. 13 */
  float part[9];
  ck_assert_msg(loom__ckpt_reader_read(&rd, "params/w", 5, 9, part, err, sizeof err) == 0, "%s",
                err);
  for (int k = 0; k < 9; k++) ck_assert_float_eq(part[k], w[5 + k]);
  ck_assert_msg(loom__ckpt_reader_read(&rd, "params/b", 2, 3, b, err, sizeof err) == 0, "%s",
                err);
  for (int k = 0; k < 3; k++) ck_assert_float_eq(b[k], (float)(102 + k));
  int steps[4], n = 0;
  ck_assert_int_eq(rd.plugin.u.checkpoint.reader_steps(rd.r, steps, 4, &n), LOOM_OK);
  ck_assert_int_eq(n, 1);
  ck_assert_int_eq(steps[0], 7);
  loom__ckpt_reader_close(&rd);
  /* the step directory itself, and a run directory's ckpt/ */
  char p[400];
  snprintf(p, sizeof p, "%s/step-00000007", g_dir);
  open_ok(&rd, p);
  ck_assert_int_eq(rd.info.step, 7);
  loom__ckpt_reader_close(&rd);
}
END_TEST

START_TEST(test_refusals) {
  loom_ckpt_reader rd;
  char err[2048], p[400];
  float buf[24];
  open_ok(&rd, g_dir);
  ck_assert_int_ne(loom__ckpt_reader_read(&rd, "params/nope", 0, 1, buf, err, sizeof err), 0);
  ck_assert_msg(strstr(err, "no item 'params/nope'"), "%s", err);
  ck_assert_int_ne(loom__ckpt_reader_read(&rd, "params/b", 4, 3, buf, err, sizeof err), 0);
  ck_assert_msg(strstr(err, "item 'params/b' has 6 elements"), "%s", err);
  loom__ckpt_reader_close(&rd);
  /* one flipped byte in rank 1's slice of w */
  snprintf(p, sizeof p, "%s/step-00000007/rank-00001.bin", g_dir);
  FILE *f = fopen(p, "r+b");
  ck_assert_ptr_nonnull(f);
  fseek(f, 5, SEEK_SET);
  fputc(0x7f, f);
  fclose(f);
  open_ok(&rd, g_dir);
  ck_assert_int_eq(loom__ckpt_reader_read(&rd, "params/b", 0, 6, buf, err, sizeof err), 0);
  ck_assert_int_ne(loom__ckpt_reader_read(&rd, "params/w", 0, 24, buf, err, sizeof err), 0);
  ck_assert_msg(strstr(err, "checksum mismatch in item 'params/w'"), "%s", err);
  loom__ckpt_reader_close(&rd);
  /* nothing there; a plugin of another kind */
  snprintf(p, sizeof p, "%s/step-00000007", g_dir);
  char sub[400];
  snprintf(sub, sizeof sub, "%s/empty", g_dir);
  ck_assert_int_eq(mkdir(sub, 0755), 0);
  ck_assert_int_ne(loom__ckpt_reader_open(&rd, CKPT_SO, NULL, NULL, NULL, sub, 0, err,
                                          sizeof err), 0);
  ck_assert_msg(strstr(err, "checkpoint: ") == err && strstr(err, "no checkpoint there"), "%s",
                err);
  ck_assert_int_ne(loom__ckpt_reader_open(&rd, LOOM_TEST_BUILD_DIR "/lib/loom/plugins/ddp.so",
                                          NULL, NULL, NULL, p, 0, err, sizeof err), 0);
  ck_assert_msg(strstr(err, "checkpoint plugin was expected"), "%s", err);
}
END_TEST

int main(void) {
  const check_case cases[] = {
    {"whole_and_ranges", test_whole_and_ranges},
    {"refusals", test_refusals},
  };
  return check_run_suite(check_case_suite("ckpt_reader", CHECK_CASES(cases), setup, teardown, 0),
                         CK_FORK);
}
