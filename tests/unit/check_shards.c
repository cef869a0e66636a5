/* Unit tests for core/data/shards.{h,c} and core/data/tokenizer.{h,c}.
 *
 * Shards are written with loom_shard_write into a fresh temporary directory per test (a checked
 * fixture, so it runs inside Check's forked child). Most shards hold "position" tokens: token i of
 * a shard whose first global position is p is (p + i) mod 65536, so every sequence is
 * recognisable by its first token and expectations are arithmetic. */
#define _GNU_SOURCE
#include <check.h>
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/shards.h"
#include "data/tokenizer.h"
#include "support/check_suite.h"
#include "support/test_dir.h"

static char g_dir[256];
static char g_err[1024];

static void dir_setup(void) {
  test_dir_make(g_dir, sizeof g_dir, "check_shards");
  g_err[0] = '\0';
}

static void dir_teardown(void) { test_dir_remove(g_dir); }

static char *path_in(const char *name) { return test_dir_path(g_dir, name); }

/* Write shard `name` of n tokens holding positions first, first+1, ... (mod 65536). */
static void write_pos_shard(const char *name, size_t n, size_t first) {
  uint16_t *t = malloc((n ? n : 1) * sizeof(uint16_t));
  for (size_t i = 0; i < n; i++) t[i] = (uint16_t)((first + i) & 0xffff);
  int rc = loom_shard_write(path_in(name), t, n, g_err, sizeof(g_err));
  ck_assert_msg(rc == 0, "loom_shard_write: %s", g_err);
  free(t);
}

/* Write a raw file: a header of the given fields and `n_bytes_body` bytes of tokens. */
static void write_raw(const char *name, int32_t magic, int32_t version, int32_t count,
                      const uint16_t *body, size_t body_bytes) {
  int32_t hdr[LOOM_SHARD_HEADER_INTS] = {magic, version, count};
  FILE *f = fopen(path_in(name), "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(hdr, sizeof(hdr), 1, f), 1);
  if (body_bytes) ck_assert_uint_eq(fwrite(body, 1, body_bytes, f), body_bytes);
  fclose(f);
}

static void open_ok(loom_loader *ld, const char *pattern_name, int T, int vocab) {
  int rc = loom_loader_open(ld, path_in(pattern_name), T, vocab, g_err, sizeof(g_err));
  ck_assert_msg(rc == 0, "loom_loader_open: %s", g_err);
}

/* Open must fail and its message contain `want`; the loader is left zeroed. */
static void open_fails(const char *pattern_name, int T, int vocab, const char *want) {
  loom_loader ld;
  int rc = loom_loader_open(&ld, path_in(pattern_name), T, vocab, g_err, sizeof(g_err));
  ck_assert_int_eq(rc, -1);
  ck_assert_msg(strstr(g_err, want) != NULL, "message '%s' lacks '%s'", g_err, want);
  ck_assert_int_eq(ld.n_shards, 0);
  ck_assert_ptr_null(ld.shards);
  loom_loader_close(&ld); /* harmless after a failed open */
}

/* ---- format and layout ---- */

START_TEST(test_write_format) {
  write_pos_shard("train_000.bin", 1000, 7);
  FILE *f = fopen(path_in("train_000.bin"), "rb");
  ck_assert_ptr_nonnull(f);
  int32_t hdr[LOOM_SHARD_HEADER_INTS];
  ck_assert_uint_eq(fread(hdr, sizeof(hdr), 1, f), 1);
  ck_assert_int_eq(hdr[0], 20240520);
  ck_assert_int_eq(hdr[1], 1);
  ck_assert_int_eq(hdr[2], 1000);
  for (int i = 3; i < LOOM_SHARD_HEADER_INTS; i++) ck_assert_int_eq(hdr[i], 0);
  uint16_t tok[1001];
  ck_assert_uint_eq(fread(tok, sizeof(uint16_t), 1001, f), 1000); /* exactly 1000 follow */
  fclose(f);
  for (int i = 0; i < 1000; i++) ck_assert_uint_eq(tok[i], 7 + i);
  glob_t g; /* the temporary file was renamed, not left behind */
  ck_assert_int_eq(glob(path_in("*.tmp*"), 0, NULL, &g), GLOB_NOMATCH);
}
END_TEST

START_TEST(test_write_error) {
  uint16_t t[4] = {1, 2, 3, 4};
  int rc = loom_shard_write(path_in("no/such/dir/x.bin"), t, 4, g_err, sizeof(g_err));
  ck_assert_int_eq(rc, -1);
  ck_assert_msg(strstr(g_err, "no/such/dir/x.bin") && strstr(g_err, "cannot create"), "%s", g_err);
}
END_TEST

/* Three shards of 48, 41 and 17 tokens with T = 8: 5 + 5 + 2 = 12 sequences per epoch (48
 * tokens make 5, not 6: a sequence needs T+1 tokens). */
static void write_three(void) {
  write_pos_shard("train_002.bin", 17, 1000); /* written out of order: open sorts by name */
  write_pos_shard("train_000.bin", 48, 0);
  write_pos_shard("train_001.bin", 41, 500);
}
static const size_t three_first[12] = {0, 8, 16, 24, 32, 500, 508, 516, 524, 532, 1000, 1008};

START_TEST(test_open_layout) {
  write_three();
  loom_loader ld;
  open_ok(&ld, "train_*.bin", 8, 65536);
  ck_assert_int_eq(ld.n_shards, 3);
  ck_assert_int_eq(ld.T, 8);
  ck_assert_uint_eq(ld.n_seqs, 12);
  ck_assert_uint_eq(ld.cursor, 0);
  size_t ntok[3] = {48, 41, 17}, nseq[3] = {5, 5, 2}, first[3] = {0, 5, 10};
  for (int i = 0; i < 3; i++) {
    ck_assert_uint_eq(ld.shards[i].n_tokens, ntok[i]);
    ck_assert_uint_eq(ld.shards[i].n_seqs, nseq[i]);
    ck_assert_uint_eq(ld.shards[i].first_seq, first[i]);
    char want[32];
    snprintf(want, sizeof(want), "train_%03d.bin", i);
    ck_assert_msg(strstr(ld.shards[i].path, want), "shard %d is %s", i, ld.shards[i].path);
  }
  loom_loader_close(&ld);
  ck_assert_ptr_null(ld.shards);
  loom_loader_close(&ld); /* twice is harmless */
}
END_TEST

/* Every sequence k of an epoch: inputs = positions first[k] .. +7, targets shifted by one; a
 * sequence never straddles two shards. */
START_TEST(test_sequence_mapping) {
  write_three();
  loom_loader ld;
  open_ok(&ld, "train_*.bin", 8, 65536);
  int32_t in[8], tg[8];
  for (int k = 0; k < 12; k++) {
    ld.cursor = (uint64_t)k;
    loom_loader_fill(&ld, 1, 1, 0, 0, in, tg);
    for (int t = 0; t < 8; t++) {
      ck_assert_int_eq(in[t], (int)(three_first[k] + t));
      ck_assert_int_eq(tg[t], (int)(three_first[k] + t + 1));
    }
  }
  loom_loader_close(&ld);
}
END_TEST

/* ---- the global-batch rule ---- */

/* Rows of one global batch of G = B*accum*dp sequences, in (m, r, b) order. */
static void global_rows(const loom_loader *ld, int B, int accum, int dp, int32_t *in,
                        int32_t *tg) {
  const int T = ld->T;
  for (int m = 0; m < accum; m++)
    for (int r = 0; r < dp; r++) {
      size_t row = ((size_t)m * dp + r) * B;
      loom_loader_fill(ld, B, dp, m, r, in + row * T, tg + row * T);
    }
}

START_TEST(test_global_batch_splits) {
  /* 5 shards of uneven length, T = 4: plenty of shard boundaries inside one batch */
  size_t lens[5] = {21, 9, 30, 5, 17}, pos = 0;
  for (int i = 0; i < 5; i++) {
    char name[32];
    snprintf(name, sizeof(name), "train_%03d.bin", i);
    write_pos_shard(name, lens[i], pos);
    pos += 100;
  }
  loom_loader ld;
  open_ok(&ld, "train_*.bin", 4, 65536);
  ck_assert_uint_eq(ld.n_seqs, 5 + 2 + 7 + 1 + 4);
  enum { G = 24, T = 4 };
  static const int splits[][3] = {/* B, accum, dp */
    {24, 1, 1}, {12, 2, 1}, {12, 1, 2}, {6, 2, 2}, {6, 4, 1}, {4, 3, 2}, {2, 3, 4},
    {1, 24, 1}, {1, 1, 24}, {2, 4, 3}, {3, 8, 1}, {8, 1, 3}};
  const uint64_t cursors[] = {0, 5, 17, 18 * 7 + 11}; /* the last ones wrap inside the batch */
  int32_t ref_in[G * T], ref_tg[G * T], in[G * T], tg[G * T];
  for (size_t c = 0; c < sizeof(cursors) / sizeof(cursors[0]); c++) {
    ld.cursor = cursors[c];
    loom_loader_fill(&ld, G, 1, 0, 0, ref_in, ref_tg);
    for (size_t s = 0; s < sizeof(splits) / sizeof(splits[0]); s++) {
      int B = splits[s][0], accum = splits[s][1], dp = splits[s][2];
      ck_assert_int_eq(B * accum * dp, G);
      memset(in, 0xff, sizeof(in));
      memset(tg, 0xff, sizeof(tg));
      global_rows(&ld, B, accum, dp, in, tg);
      for (int i = 0; i < G * T; i++) {
        ck_assert_msg(in[i] == ref_in[i] && tg[i] == ref_tg[i],
                      "cursor %llu, split B=%d accum=%d dp=%d: element %d differs (%d/%d vs %d/%d)",
                      (unsigned long long)cursors[c], B, accum, dp, i, in[i], tg[i], ref_in[i],
                      ref_tg[i]);
      }
    }
  }
  ck_assert_uint_eq(ld.cursor, cursors[3]); /* fill never moves the cursor */
  loom_loader_close(&ld);
}
END_TEST

/* ---- epochs and resume ---- */

START_TEST(test_wraparound) {
  write_three();
  loom_loader ld;
  open_ok(&ld, "train_*.bin", 8, 65536);
  int32_t in[4 * 8], tg[4 * 8];
  ld.cursor = 10; /* sequences 10, 11, then the next epoch's 0, 1 */
  loom_loader_fill(&ld, 4, 1, 0, 0, in, tg);
  const int want[4] = {10, 11, 0, 1};
  for (int b = 0; b < 4; b++) ck_assert_int_eq(in[b * 8], (int)three_first[want[b]]);
  /* a cursor many epochs on is the same as its remainder */
  int32_t in2[4 * 8], tg2[4 * 8];
  ld.cursor = 12 * 1000003ull + 10;
  loom_loader_fill(&ld, 4, 1, 0, 0, in2, tg2);
  ck_assert_mem_eq(in, in2, sizeof(in));
  ck_assert_mem_eq(tg, tg2, sizeof(tg));
  /* advance: 3 batches of 4 is one epoch, so the 4th batch equals the 1st */
  int32_t first[4 * 8];
  ld.cursor = 0;
  loom_loader_fill(&ld, 4, 1, 0, 0, first, tg);
  for (int i = 0; i < 3; i++) loom_loader_advance(&ld, 4);
  ck_assert_uint_eq(ld.cursor, 12);
  loom_loader_fill(&ld, 4, 1, 0, 0, in, tg);
  ck_assert_mem_eq(in, first, sizeof(in));
  loom_loader_close(&ld);
}
END_TEST

START_TEST(test_resume) {
  write_three();
  enum { B = 3, DP = 2, ACCUM = 2, G = B * DP * ACCUM, T = 8, STEPS = 4 };
  loom_loader a, b;
  open_ok(&a, "train_*.bin", T, 65536);
  for (int s = 0; s < 7; s++) loom_loader_advance(&a, G);
  uint64_t saved = a.cursor;
  ck_assert_uint_eq(saved, 7 * G);
  int32_t ia[STEPS][G * T], ta[STEPS][G * T];
  for (int s = 0; s < STEPS; s++) {
    global_rows(&a, B, ACCUM, DP, ia[s], ta[s]);
    loom_loader_advance(&a, G);
  }
  loom_loader_close(&a);

  open_ok(&b, "train_*.bin", T, 65536);
  b.cursor = saved; /* the only state a checkpoint keeps */
  int32_t ib[G * T], tb[G * T];
  for (int s = 0; s < STEPS; s++) {
    global_rows(&b, B, ACCUM, DP, ib, tb);
    ck_assert_mem_eq(ib, ia[s], sizeof(ib));
    ck_assert_mem_eq(tb, ta[s], sizeof(tb));
    loom_loader_advance(&b, G);
  }
  loom_loader_close(&b);
}
END_TEST

/* ---- every error message ---- */

START_TEST(test_err_no_match) {
  char want[600];
  snprintf(want, sizeof(want), "no files match '%s'", path_in("nope_*.bin"));
  open_fails("nope_*.bin", 8, 256, want);
}
END_TEST

START_TEST(test_err_bad_magic) {
  uint16_t body[64] = {0};
  write_raw("train_000.bin", 12345, 1, 64, body, sizeof(body));
  open_fails("train_*.bin", 8, 256,
             "train_000.bin: bad magic 12345 (expected 20240520: an llm.c token shard)");
}
END_TEST

START_TEST(test_err_bad_version) {
  uint16_t body[64] = {0};
  write_raw("train_000.bin", LOOM_SHARD_MAGIC, 7, 64, body, sizeof(body));
  open_fails("train_*.bin", 8, 256, "train_000.bin: unsupported version 7 (expected 1)");
}
END_TEST

START_TEST(test_err_truncated) {
  static uint16_t body[998];
  write_raw("train_000.bin", LOOM_SHARD_MAGIC, 1, 1000, body, sizeof(body));
  open_fails("train_*.bin", 8, 256,
             "train_000.bin: truncated: header says 1000 tokens, file holds 998");
}
END_TEST

START_TEST(test_err_header_truncated) {
  FILE *f = fopen(path_in("train_000.bin"), "wb");
  int32_t magic = LOOM_SHARD_MAGIC;
  fwrite(&magic, sizeof(magic), 1, f);
  fclose(f);
  open_fails("train_*.bin", 8, 256, "train_000.bin: truncated: file holds 4 bytes");
}
END_TEST

START_TEST(test_err_trailing_bytes) {
  static uint16_t body[1001];
  write_raw("train_000.bin", LOOM_SHARD_MAGIC, 1, 1000, body, sizeof(body));
  open_fails("train_*.bin", 8, 256, "train_000.bin: size mismatch: header says 1000 tokens");
}
END_TEST

START_TEST(test_err_token_too_large) {
  uint16_t t[64];
  for (int i = 0; i < 64; i++) t[i] = (uint16_t)(i % 200);
  t[17] = 300;
  t[40] = 999; /* the first offender is the one reported */
  ck_assert_int_eq(loom_shard_write(path_in("train_000.bin"), t, 64, g_err, sizeof(g_err)), 0);
  open_fails("train_*.bin", 8, 256, "train_000.bin: token 300 at position 17 >= vocab_size 256");
}
END_TEST

START_TEST(test_err_short_shard) {
  write_pos_shard("train_000.bin", 100, 0);
  write_pos_shard("train_001.bin", 8, 0); /* T = 8 needs 9 */
  open_fails("train_*.bin", 8, 65536, "train_001.bin: shard holds 8 tokens, fewer than T+1 = 9");
  /* T+1 exactly is one sequence */
  write_pos_shard("train_001.bin", 9, 0);
  loom_loader ld;
  open_ok(&ld, "train_*.bin", 8, 65536);
  ck_assert_uint_eq(ld.shards[1].n_seqs, 1);
  loom_loader_close(&ld);
}
END_TEST

START_TEST(test_err_empty_shard) {
  write_pos_shard("train_000.bin", 0, 0);
  open_fails("train_*.bin", 8, 256, "train_000.bin: shard holds 0 tokens");
}
END_TEST

START_TEST(test_err_bad_args) {
  write_pos_shard("train_000.bin", 100, 0);
  open_fails("train_*.bin", 0, 256, "T = 0");
  open_fails("train_*.bin", 8, 70000, "vocab_size 70000");
}
END_TEST

/* ---- tokenizer ---- */

START_TEST(test_tok_roundtrip) {
  loom_tokenizer tok;
  ck_assert_int_eq(loom_tokenizer_load(&tok, "", g_err, sizeof(g_err)), 0);
  ck_assert_int_eq(tok.vocab_size, 256);
  const char *text =
      "Hello, world!\n\tTabs & symbols ~`{}[]|\\ and UTF-8: caf\xc3\xa9 \xe2\x82\xac\n";
  size_t len = strlen(text);
  int32_t ids[128];
  ck_assert_uint_eq(loom_tokenizer_encode(&tok, text, len, ids, 128), len);
  char out[512] = "", piece[8];
  for (size_t i = 0; i < len; i++) {
    ck_assert_int_eq(ids[i], (unsigned char)text[i]);
    int n = loom_tokenizer_decode(&tok, ids[i], piece, sizeof(piece));
    ck_assert_int_eq(n, 1);
    strcat(out, piece);
  }
  ck_assert_str_eq(out, text);
  /* every byte survives encode; NUL included */
  char all[256];
  int32_t all_ids[256];
  for (int i = 0; i < 256; i++) all[i] = (char)i;
  ck_assert_uint_eq(loom_tokenizer_encode(&tok, all, 256, all_ids, 256), 256);
  for (int i = 0; i < 256; i++) ck_assert_int_eq(all_ids[i], i);
  /* a short output buffer: returns the full count, writes only max */
  int32_t few[4] = {-1, -1, -1, -1};
  ck_assert_uint_eq(loom_tokenizer_encode(&tok, "abcdef", 6, few, 3), 6);
  ck_assert_int_eq(few[2], 'c');
  ck_assert_int_eq(few[3], -1);
  ck_assert_uint_eq(loom_tokenizer_encode(&tok, "abc", 3, NULL, 0), 3);
}
END_TEST

START_TEST(test_tok_escapes) {
  loom_tokenizer tok;
  loom_tokenizer_init_bytes(&tok);
  char buf[16];
  ck_assert_int_eq(loom_tokenizer_decode(&tok, 0x1b, buf, sizeof(buf)), 4);
  ck_assert_str_eq(buf, "\\x1b");
  loom_tokenizer_decode(&tok, 0, buf, sizeof(buf));
  ck_assert_str_eq(buf, "\\x00");
  loom_tokenizer_decode(&tok, '\r', buf, sizeof(buf));
  ck_assert_str_eq(buf, "\\x0d");
  loom_tokenizer_decode(&tok, 0x07, buf, sizeof(buf));
  ck_assert_str_eq(buf, "\\x07");
  loom_tokenizer_decode(&tok, 0x7f, buf, sizeof(buf));
  ck_assert_str_eq(buf, "\\x7f");
  loom_tokenizer_decode(&tok, '\n', buf, sizeof(buf));
  ck_assert_str_eq(buf, "\n");
  loom_tokenizer_decode(&tok, '\t', buf, sizeof(buf));
  ck_assert_str_eq(buf, "\t");
  /* no token decodes to a control character */
  for (int t = 0; t < 256; t++) {
    loom_tokenizer_decode(&tok, t, buf, sizeof(buf));
    for (const char *p = buf; *p; p++) {
      unsigned char c = (unsigned char)*p;
      ck_assert_msg(c >= 0x20 || c == '\n' || c == '\t', "token %d decodes to byte %u", t, c);
      ck_assert_msg(c != 0x7f, "token %d decodes to DEL", t);
    }
  }
  /* out of range */
  ck_assert_int_eq(loom_tokenizer_decode(&tok, 256, buf, sizeof(buf)), 1);
  ck_assert_str_eq(buf, "?");
  loom_tokenizer_decode(&tok, -5, buf, sizeof(buf));
  ck_assert_str_eq(buf, "?");
  /* a small buffer cuts but stays terminated; the return is the full length */
  char small[3];
  ck_assert_int_eq(loom_tokenizer_decode(&tok, 0x1b, small, sizeof(small)), 4);
  ck_assert_str_eq(small, "\\x");
}
END_TEST

START_TEST(test_tok_files) {
  loom_tokenizer tok, tok2;
  loom_tokenizer_init_bytes(&tok);
  ck_assert_int_eq(loom_tokenizer_load(&tok2, NULL, g_err, sizeof(g_err)), 0);
  ck_assert_int_eq(tok2.vocab_size, 256);
  ck_assert_int_eq(loom_tokenizer_save(&tok, path_in("vocab.json"), g_err, sizeof(g_err)), 0);
  memset(&tok2, 0, sizeof(tok2));
  ck_assert_msg(loom_tokenizer_load(&tok2, path_in("vocab.json"), g_err, sizeof(g_err)) == 0,
                "%s", g_err);
  ck_assert_int_eq(tok2.type, LOOM_TOKENIZER_BYTE);
  ck_assert_int_eq(tok2.vocab_size, 256);

  struct { const char *text, *want; } bad[] = {
    {"{\"type\": \"bpe\", \"vocab_size\": 50257}", "unsupported tokenizer type \"bpe\""},
    {"{\"type\": \"byte\", \"vocab_size\": 300}", "vocab_size 300 does not match type \"byte\""},
    {"{\"vocab_size\": 256}", "missing \"type\""},
    {"{\"type\": \"byte\", \"vocab_size\": \"x\"}", "\"vocab_size\" must be an integer"},
    {"[1, 2]", "expected a JSON object"},
    {"{\"type\": ", "not a vocabulary file: line 1"},
    /* a mistyped key is an error, not ignored; '_' keys are comments (accepted below) */
    {"{\"type\": \"byte\", \"vocab_sz\": 300}", "unknown key \"vocab_sz\" (a \"byte\" vocabulary"},
    {"{\"type\": \"byte\", \"merges\": []}", "unknown key \"merges\""},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    FILE *f = fopen(path_in("bad.json"), "w");
    fputs(bad[i].text, f);
    fclose(f);
    ck_assert_int_eq(loom_tokenizer_load(&tok2, path_in("bad.json"), g_err, sizeof(g_err)), -1);
    ck_assert_msg(strstr(g_err, bad[i].want) && strstr(g_err, "bad.json"),
                  "case %zu: message '%s' lacks '%s'", i, g_err, bad[i].want);
    ck_assert_int_eq(tok2.vocab_size, 256); /* still usable */
  }
  FILE *f = fopen(path_in("commented.json"), "w");
  fputs("{\"type\": \"byte\", \"_note\": \"made by hand\"}", f);
  fclose(f);
  ck_assert_msg(loom_tokenizer_load(&tok2, path_in("commented.json"), g_err, sizeof(g_err)) == 0,
                "%s", g_err);
  ck_assert_int_eq(loom_tokenizer_load(&tok2, path_in("missing.json"), g_err, sizeof(g_err)), -1);
  ck_assert_msg(strstr(g_err, "missing.json: cannot open"), "%s", g_err);
}
END_TEST

static Suite *shards_suite(void) {
  Suite *s = suite_create("shards");
  struct { const char *name; const TTest *const *tests; } cases[] = {
    {"format", CHECK_TESTS(test_write_format, test_write_error, test_open_layout)},
    {"mapping", CHECK_TESTS(test_sequence_mapping)},
    {"global_batch", CHECK_TESTS(test_global_batch_splits)},
    {"epochs_resume", CHECK_TESTS(test_wraparound, test_resume)},
    {"errors", CHECK_TESTS(test_err_no_match, test_err_bad_magic, test_err_bad_version,
                           test_err_truncated, test_err_header_truncated,
                           test_err_trailing_bytes, test_err_token_too_large,
                           test_err_short_shard)},
    {"errors_more", CHECK_TESTS(test_err_empty_shard, test_err_bad_args)},
    {"tokenizer", CHECK_TESTS(test_tok_roundtrip, test_tok_escapes, test_tok_files)},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    check_add_tcase(s, cases[i].name, cases[i].tests, dir_setup, dir_teardown, 0);
  return s;
}

int main(void) {
  return check_run_suite(shards_suite(), CK_FORK);
}
