/* Unit tests for the monitoring outputs: core/monitor (TensorBoard records: CRC-32C, framing,
 * the JSONL record -> scalars sink) and core/cli/report (reading a run's JSONL, the divergence
 * loom compare reports). The event files are decoded here with a small protobuf walker written
 * from the wire format, independent of the protobuf-c code that wrote them (the integration test
 * tensorboard.sh reads them with python3-protobuf as well). */
#define _GNU_SOURCE
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "monitor/tb_sink.h"
#include "monitor/tb_writer.h"
#include "cli/report/compare_table.h"
#include "cli/report/run_metrics.h"
#include "support/check_suite.h"
#include "support/test_dir.h"

static char g_dir[256];

static void dir_setup(void) {
  test_dir_make(g_dir, sizeof g_dir, "check_monitor");
}

static void dir_teardown(void) { test_dir_remove(g_dir); }

START_TEST(crc32c_check_values) {
  /* CRC-32C's published check value (RFC 3720 B.4 family; "123456789" -> 0xe3069283) and
   * TensorBoard's mask of it and of nothing (python3-crc32c gives the same) */
  ck_assert_uint_eq(loom_tb_crc32c("123456789", 9), 0xe3069283u);
  ck_assert_uint_eq(loom_tb_masked_crc("123456789", 9), 0xc78ab0e5u);
  ck_assert_uint_eq(loom_tb_masked_crc("", 0), 0xa282ead8u);
  unsigned char zeros[32] = {0}; /* RFC 3720 B.4: 32 bytes of zeros -> 0x8a9136aa */
  ck_assert_uint_eq(loom_tb_crc32c(zeros, 32), 0x8a9136aau);
}
END_TEST

/* ---- a minimal protobuf wire-format walker ---- */
typedef struct span {
  const unsigned char *p, *end;
} span;

static uint64_t varint(span *s) {
  uint64_t v = 0;
  for (int shift = 0; s->p < s->end; shift += 7) {
    unsigned char b = *s->p++;
    v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) break;
  }
  return v;
}

/* Next field of s: number, wire type, and its payload (varint value or bytes span). */
static int next_field(span *s, int *num, int *wt, uint64_t *v, span *bytes) {
  if (s->p >= s->end) return 0;
  uint64_t key = varint(s);
  *num = (int)(key >> 3);
  *wt = (int)(key & 7);
  if (*wt == 0) *v = varint(s);
  else if (*wt == 1) { memcpy(v, s->p, 8); s->p += 8; }
  else if (*wt == 5) { uint32_t x; memcpy(&x, s->p, 4); *v = x; s->p += 4; }
  else if (*wt == 2) {
    uint64_t n = varint(s);
    bytes->p = s->p;
    bytes->end = s->p + n;
    s->p += n;
  } else ck_abort_msg("unexpected wire type %d", *wt);
  return 1;
}

typedef struct event {
  int64_t step;
  int has_version, n;
  char tags[16][64];
  float values[16];
} event;

static void decode_event(const unsigned char *data, size_t n, event *ev) {
  memset(ev, 0, sizeof *ev);
  span s = {data, data + n}, b;
  int num, wt;
  uint64_t v;
  while (next_field(&s, &num, &wt, &v, &b)) {
    if (num == 2 && wt == 0) ev->step = (int64_t)v;
    if (num == 3 && wt == 2) ev->has_version = 1;
    if (num == 5 && wt == 2) { /* Summary: repeated Value value = 1 */
      span sum = b, val;
      while (next_field(&sum, &num, &wt, &v, &val)) {
        ck_assert_int_eq(num, 1);
        span f = val, str;
        while (next_field(&f, &num, &wt, &v, &str)) {
          if (num == 1) snprintf(ev->tags[ev->n], 64, "%.*s", (int)(str.end - str.p), str.p);
          if (num == 2 && wt == 5) {
            uint32_t bits = (uint32_t)v;
            memcpy(&ev->values[ev->n], &bits, 4);
          }
        }
        ev->n++;
      }
    }
  }
}

/* Read every record of the one event file in g_dir/tb, checking both checksums. */
static int read_events(event *out, int max) {
  char dir[300], path[600] = "";
  snprintf(dir, sizeof dir, "%s/tb", g_dir);
  DIR *d = opendir(dir);
  ck_assert_ptr_nonnull(d);
  struct dirent *e;
  while ((e = readdir(d)))
    if (!strncmp(e->d_name, "events.out.tfevents.", 20)) snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
  closedir(d);
  ck_assert_msg(path[0], "no event file in %s", dir);
  FILE *f = fopen(path, "rb");
  ck_assert_ptr_nonnull(f);
  static unsigned char buf[1 << 16];
  size_t len = fread(buf, 1, sizeof buf, f);
  fclose(f);
  size_t pos = 0;
  int k = 0;
  while (pos < len && k < max) {
    ck_assert_uint_ge(len - pos, 12);
    uint64_t n = 0;
    for (int i = 0; i < 8; i++) n |= (uint64_t)buf[pos + i] << (8 * i);
    uint32_t hcrc = buf[pos + 8] | buf[pos + 9] << 8 | buf[pos + 10] << 16 | (uint32_t)buf[pos + 11] << 24;
    ck_assert_uint_eq(hcrc, loom_tb_masked_crc(buf + pos, 8));
    const unsigned char *data = buf + pos + 12, *c = data + n;
    uint32_t dcrc = c[0] | c[1] << 8 | c[2] << 16 | (uint32_t)c[3] << 24;
    ck_assert_uint_eq(dcrc, loom_tb_masked_crc(data, n));
    decode_event(data, n, &out[k++]);
    pos += 16 + n;
  }
  ck_assert_uint_eq(pos, len); /* whole records only */
  return k;
}

START_TEST(record_becomes_scalars) {
  char err[512], dir[300];
  snprintf(dir, sizeof dir, "%s/tb", g_dir);
  loom_tb_writer *w = loom_tb_open(dir, err, sizeof err);
  ck_assert_msg(w != NULL, "%s", err);
  ck_assert_int_eq(loom_tb_write_record(w, "{\"step\":3,\"loss\":1.5,\"mem\":{\"a\":2,\"b\":4},"
                                           "\"name\":\"x\",\"skipped\":0}\n", err, sizeof err), 0);
  ck_assert_int_eq(loom_tb_write_record(w, "{\"step\":4,\"val_loss\":0.1}", err, sizeof err), 0);
  loom_tb_close(w);
  event ev[4];
  int n = read_events(ev, 4);
  ck_assert_int_eq(n, 3);
  ck_assert(ev[0].has_version);
  ck_assert_int_eq(ev[1].step, 3);
  ck_assert_int_eq(ev[1].n, 4); /* loss, mem/a, mem/b, skipped: the string is not a scalar */
  ck_assert_str_eq(ev[1].tags[0], "loss");
  ck_assert_float_eq(ev[1].values[0], 1.5f);
  ck_assert_str_eq(ev[1].tags[1], "mem/a");
  ck_assert_float_eq(ev[1].values[1], 2.0f);
  ck_assert_str_eq(ev[1].tags[2], "mem/b");
  ck_assert_str_eq(ev[1].tags[3], "skipped"); /* a zero is written: the oneof is set */
  ck_assert_float_eq(ev[1].values[3], 0.0f);
  ck_assert_int_eq(ev[2].step, 4);
  ck_assert_str_eq(ev[2].tags[0], "val_loss");
  ck_assert_float_eq(ev[2].values[0], 0.1f); /* float32 of the JSON value, as TensorBoard keeps */
}
END_TEST

START_TEST(bad_record_and_bad_dir) {
  char err[512], dir[300];
  snprintf(dir, sizeof dir, "%s/tb", g_dir);
  loom_tb_writer *w = loom_tb_open(dir, err, sizeof err);
  ck_assert_ptr_nonnull(w);
  ck_assert_int_eq(loom_tb_write_record(w, "{\"loss\":1}", err, sizeof err), -1);
  ck_assert_ptr_nonnull(strstr(err, "integer \"step\""));
  ck_assert_int_eq(loom_tb_write_record(w, "not json", err, sizeof err), -1);
  loom_tb_close(w);
  /* a directory that cannot be made: a regular file in the way */
  char file[300];
  snprintf(file, sizeof file, "%s/plain", g_dir);
  FILE *f = fopen(file, "w");
  fclose(f);
  snprintf(dir, sizeof dir, "%s/plain/tb", g_dir);
  ck_assert_ptr_null(loom_tb_open(dir, err, sizeof err));
  ck_assert_msg(strstr(err, "plain/tb: cannot create directory"), "%s", err);
}
END_TEST

static void write_jsonl(const char *name, const char *text) {
  char p[400];
  snprintf(p, sizeof p, "%s/%s", g_dir, name);
  FILE *f = fopen(p, "w");
  fputs(text, f);
  fclose(f);
}

START_TEST(run_metrics_and_divergence) {
  write_jsonl("a.jsonl",
              "{\"step\":1,\"loss\":4.0,\"grad_norm\":1,\"tokens_per_s\":10,\"tokens\":8,"
              "\"comm_bytes\":100,\"ms_per_step\":500,\"mem_peak_bytes_max\":{\"params\":10,\"total\":30}}\n"
              "{\"step\":2,\"loss\":2.0,\"grad_norm\":1,\"tokens_per_s\":30,\"tokens\":16,"
              "\"comm_bytes\":100,\"ms_per_step\":500,\"mem_peak_bytes_max\":{\"params\":12,\"total\":20}}\n"
              "{\"step\":2,\"val_loss\":2.5}\n"
              "{\"step\":3,\"loss\":1.0,\"grad_norm\":1,\"tokens_per_s\":20,\"tokens\":24}\n");
  /* b: equal at step 1, 1e-4 off at step 2, no step 3 */
  write_jsonl("b.jsonl", "{\"step\":1,\"loss\":4.0,\"grad_norm\":1}\n"
                         "{\"step\":2,\"loss\":2.0002,\"grad_norm\":1.5}\n");
  char p[400], err[512];
  loom_run_metrics a, b;
  snprintf(p, sizeof p, "%s/a.jsonl", g_dir);
  ck_assert_msg(loom_run_metrics_load(&a, "a", p, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(a.n, 3);
  ck_assert_int_eq(a.n_val, 1);
  ck_assert_double_eq(a.val_loss[0], 2.5);
  ck_assert_double_eq(a.train_s, 1.0);
  ck_assert_double_eq(a.tokens_per_step, 8.0);
  ck_assert_double_eq(loom_median(a.tokens_per_s, a.n), 20.0);
  ck_assert(isnan(a.mfu[0]));
  ck_assert_int_eq(a.n_mem, 2);
  ck_assert_str_eq(a.mem_name[0], "params");
  ck_assert_double_eq(a.mem_peak_max[0], 12.0); /* the largest over the steps */
  ck_assert_double_eq(a.mem_peak_max[1], 30.0);
  snprintf(p, sizeof p, "%s/b.jsonl", g_dir);
  ck_assert(loom_run_metrics_load(&b, "b", p, err, sizeof err) == 0);
  loom_divergence d = loom_divergence_of(&a, &b, 0, 1e-5);
  ck_assert_int_eq(d.steps_compared, 2);
  ck_assert_double_eq_tol(d.max_rel, 1e-4, 1e-12);
  ck_assert_int_eq(d.max_step, 2);
  ck_assert_int_eq(d.first_over, 2);
  d = loom_divergence_of(&a, &b, 0, 1e-3);
  ck_assert_int_eq(d.first_over, 0);
  d = loom_divergence_of(&a, &b, 1, 1e-3); /* grad norm: 1.5 vs 1 */
  ck_assert_double_eq_tol(d.max_rel, 0.5, 1e-12);
  /* a null grad norm (a skipped step) in both runs agrees; in one run only it is a difference */
  a.grad_norm[1] = NAN;
  b.grad_norm[1] = NAN;
  d = loom_divergence_of(&a, &b, 1, 1e-3);
  ck_assert_int_eq(d.steps_compared, 1);
  ck_assert_double_eq(d.max_rel, 0.0);
  b.grad_norm[1] = 1.0;
  d = loom_divergence_of(&a, &b, 1, 1e-3);
  ck_assert(isinf(d.max_rel));
  ck_assert_int_eq(d.first_over, 2);
  a.grad_norm[1] = 1.0;
  loom_table t;
  loom_run_metrics both[2] = {a, b};
  loom_table_build(&t, both, 2, 1e-5);
  ck_assert_str_eq(t.head[1], "b");
  int found = 0;
  for (int i = 0; i < t.n_rows; i++)
    if (!strcmp(t.label[i], "loss: first step > 1e-05")) {
      ck_assert_str_eq(t.cell[i][1], "2");
      found = 1;
    }
  ck_assert(found);
  loom_run_metrics_free(&a);
  loom_run_metrics_free(&b);
  /* a file without a step record, and a malformed line, are errors naming the file */
  write_jsonl("c.jsonl", "{\"step\":1,\"val_loss\":1}\n");
  snprintf(p, sizeof p, "%s/c.jsonl", g_dir);
  ck_assert_int_eq(loom_run_metrics_load(&a, "c", p, err, sizeof err), -1);
  ck_assert_ptr_nonnull(strstr(err, "no step record"));
  write_jsonl("d.jsonl", "{\"step\":1,\"loss\":1}\n[1,2]\n{\"step\":2,\"loss\":1}\n");
  snprintf(p, sizeof p, "%s/d.jsonl", g_dir);
  ck_assert_int_eq(loom_run_metrics_load(&a, "d", p, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "d.jsonl:2:") != NULL, "%s", err);
}
END_TEST

static Suite *monitor_suite(void) {
  Suite *s = suite_create("monitor");
  check_add_tcase(s, "crc32c", CHECK_TESTS(crc32c_check_values), NULL, NULL, 0);
  check_add_tcase(s, "tensorboard", CHECK_TESTS(record_becomes_scalars, bad_record_and_bad_dir),
                  dir_setup, dir_teardown, 0);
  check_add_tcase(s, "run_metrics", CHECK_TESTS(run_metrics_and_divergence), dir_setup,
                  dir_teardown, 0);
  return s;
}

int main(void) {
  return check_run_suite(monitor_suite(), CK_FORK);
}
