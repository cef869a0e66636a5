/* Unit tests for the loader's data position (core/data/shards.c: loom_loader_position, _seek):
 * the unit checkpoints keep, which must survive a change of sequence length. Shards hold
 * "position" tokens (token i of the stream is i mod 65536), so a sequence's first input token
 * names where it starts. */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/shards.h"
#include "support/check_suite.h"
#include "support/test_dir.h"

static char g_dir[256], g_err[1024];

/* Two shards: 1000 tokens (positions 0..999) and 500 (1000..1499). */
static void setup(void) {
  test_dir_make(g_dir, sizeof g_dir, "check_data_position");
  size_t sizes[2] = {1000, 500}, first = 0;
  for (int s = 0; s < 2; s++) {
    uint16_t *t = malloc(sizes[s] * sizeof *t);
    for (size_t i = 0; i < sizes[s]; i++) t[i] = (uint16_t)(first + i);
    char p[300];
    snprintf(p, sizeof p, "%s/train_%03d.bin", g_dir, s);
    ck_assert_msg(loom_shard_write(p, t, sizes[s], g_err, sizeof g_err) == 0, "%s", g_err);
    free(t);
    first += sizes[s];
  }
}
static void teardown(void) { test_dir_remove(g_dir); }

static void open_T(loom_loader *ld, int T) {
  char pat[300];
  snprintf(pat, sizeof pat, "%s/train_*.bin", g_dir);
  ck_assert_msg(loom_loader_open(ld, pat, T, 65536, g_err, sizeof g_err) == 0, "%s", g_err);
}

/* The first input token of the batch row at the cursor. */
static int32_t first_token(const loom_loader *ld) {
  int32_t *in = malloc((size_t)ld->T * sizeof *in), *tg = malloc((size_t)ld->T * sizeof *tg);
  loom_loader_fill(ld, 1, 1, 0, 0, in, tg);
  int32_t t = in[0];
  free(in);
  free(tg);
  return t;
}

START_TEST(same_T_round_trips_every_cursor) {
  loom_loader a, b;
  open_T(&a, 64);
  open_T(&b, 64);
  for (uint64_t k = 0; k < 3 * a.n_seqs + 5; k++) {
    a.cursor = k;
    loom_data_pos pos;
    loom_loader_position(&a, &pos);
    uint64_t skipped = 99;
    loom_loader_seek(&b, &pos, &skipped);
    ck_assert_uint_eq(b.cursor, k); /* bitwise resume: the very same sequence number */
    ck_assert_uint_eq(skipped, 0);
  }
  loom_loader_close(&a);
  loom_loader_close(&b);
}
END_TEST

/* 64 -> 32: the next sequence starts at the very token where the old one would have. */
START_TEST(halving_T_continues_at_the_same_token) {
  loom_loader a, b;
  open_T(&a, 64);
  open_T(&b, 32);
  for (uint64_t k = 0; k < 2 * a.n_seqs; k++) {
    a.cursor = k;
    loom_data_pos pos;
    loom_loader_position(&a, &pos);
    uint64_t skipped = 99;
    loom_loader_seek(&b, &pos, &skipped);
    ck_assert_uint_eq(skipped, 0);
    ck_assert_int_eq(first_token(&b), first_token(&a));
    loom_data_pos again;
    loom_loader_position(&b, &again);
    ck_assert_uint_eq(again.epoch, pos.epoch);
  }
  loom_loader_close(&a);
  loom_loader_close(&b);
}
END_TEST

/* 64 -> 48: the next start on the new grid, the gap reported; the shard's tail moves on. */
START_TEST(other_T_skips_to_the_next_start_and_says_how_far) {
  loom_loader a, b;
  open_T(&a, 64);
  open_T(&b, 48);
  a.cursor = 3; /* token 192 of shard 0 */
  loom_data_pos pos;
  loom_loader_position(&a, &pos);
  ck_assert_int_eq(pos.shard, 0);
  ck_assert_uint_eq(pos.token, 192);
  uint64_t skipped;
  loom_loader_seek(&b, &pos, &skipped);
  ck_assert_int_eq(first_token(&b), 192); /* 192 = 4 x 48: on the grid */
  ck_assert_uint_eq(skipped, 0);
  a.cursor = 5; /* token 320 = 6 x 48 + 32 */
  loom_loader_position(&a, &pos);
  loom_loader_seek(&b, &pos, &skipped);
  ck_assert_int_eq(first_token(&b), 336);
  ck_assert_uint_eq(skipped, 16);
  /* past shard 0's last 48-sequence (20 of them: tokens up to 960): shard 1's first */
  pos = (loom_data_pos){.epoch = 0, .shard = 0, .token = 980};
  loom_loader_seek(&b, &pos, &skipped);
  ck_assert_int_eq(first_token(&b), 1000);
  /* the last shard's tail: the next epoch's first sequence */
  pos = (loom_data_pos){.epoch = 2, .shard = 1, .token = 499};
  loom_loader_seek(&b, &pos, &skipped);
  ck_assert_int_eq(first_token(&b), 0);
  ck_assert_uint_eq(b.cursor, 3 * b.n_seqs);
  loom_loader_close(&a);
  loom_loader_close(&b);
}
END_TEST

int main(void) {
  Suite *s = suite_create("data_position");
  check_add_tcase(s, "position",
                  CHECK_TESTS(same_T_round_trips_every_cursor,
                              halving_T_continues_at_the_same_token,
                              other_T_skips_to_the_next_start_and_says_how_far),
                  setup, teardown, 0);
  return check_run_suite(s, CK_FORK_GETENV);
}
