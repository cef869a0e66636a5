/* Hostile input never crashes or hangs loom (issue 7, section 5): every file loom reads at
 * start-up is untrusted.
 *
 *   sizes     counts computed from model dimensions cannot overflow (gpt_init, activations)
 *   fifo      a FIFO named as a shard, vocabulary or config is refused, not waited on
 *   missing   a missing data directory is named, with what creates it
 *   elf       a truncated or foreign plugin file is refused before dlopen (no SIGBUS)
 *   fuzz      mutated token shards and vocabulary files: an error or a valid load, never a crash
 *
 * The fuzz cases use a fixed seed (reproducible) and a fixed number of mutations (bounded run
 * time, also under ASan + UBSan, where tools/test.sh runs every unit test). */
#define _GNU_SOURCE
#include <check.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/config.h"
#include "data/shards.h"
#include "data/tokenizer.h"
#include "model/gpt.h"
#include "runtime/elf_check.h"
#include "runtime/loader.h"
#include "support/check_suite.h"
#include "support/test_dir.h"

#define PLUGINS LOOM_TEST_BUILD_DIR "/lib/loom/plugins"

static char g_dir[256];
static char g_err[2048];

static void dir_setup(void) {
  test_dir_make(g_dir, sizeof g_dir, "check_hostile");
  g_err[0] = '\0';
}

static void dir_teardown(void) { test_dir_remove(g_dir); }

static char *path_in(const char *name) { return test_dir_path(g_dir, name); }

static void write_bytes(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(data, 1, n, f), n);
  ck_assert_int_eq(fclose(f), 0);
}

/* xorshift64*: the fuzz cases' deterministic generator */
static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return g_rng * 2685821657736338717ull;
}
static size_t rnd_below(size_t n) { return n ? (size_t)(rnd() % n) : 0; }

/* ---- sizes ---- */

START_TEST(test_gpt_refuses_huge_dims) {
  /* the case: n_layer = 2e9 overflowed the int tensor count (UBSan in gpt.c) */
  const gpt_config cases[] = {
      {.vocab_size = 256, .max_seq_len = 16, .n_layer = 2000000000, .n_head = 2, .n_embd = 16},
      {.vocab_size = 256, .max_seq_len = 16, .n_layer = 1, .n_head = 1, .n_embd = INT_MAX},
      {.vocab_size = 256, .max_seq_len = INT_MAX, .n_layer = 1, .n_head = 2, .n_embd = 16},
      {.vocab_size = INT_MAX, .max_seq_len = 16, .n_layer = 1, .n_head = 2, .n_embd = 16},
      {.vocab_size = 256, .max_seq_len = 16, .n_layer = 65536, .n_head = 1, .n_embd = 1 << 20},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    gpt_model m;
    g_err[0] = '\0';
    ck_assert_int_eq(gpt_init_ex(&m, &cases[i], NULL, 0, g_err, sizeof g_err),
                     LOOM_INVALID_CONFIG);
    ck_assert_msg(strstr(g_err, "too large") || strstr(g_err, "2^40"), "case %zu: %s", i,
                  g_err);
  }
}
END_TEST

START_TEST(test_activation_bytes_saturate) {
  /* the largest dims the config accepts, with a micro-batch whose attention alone is
   * L*B*NH*T*T = 2^16 * 2^11 * 2^20 * 2^40 floats: the size must not wrap to a small pool */
  gpt_config c = {.vocab_size = 65536, .max_seq_len = 1 << 20, .n_layer = 65536,
                  .n_head = 1 << 20, .n_embd = 1 << 20};
  ck_assert_uint_eq(gpt_activation_bytes(&c, 2048, 1 << 20), SIZE_MAX);
  ck_assert_uint_eq(gpt_activation_bytes(&c, INT_MAX, 1), SIZE_MAX);
  /* an ordinary size is exact and positive */
  gpt_config small = {.vocab_size = 256, .max_seq_len = 16, .n_layer = 1, .n_head = 2,
                      .n_embd = 16};
  size_t b = gpt_activation_bytes(&small, 2, 16);
  ck_assert_uint_gt(b, 0);
  ck_assert_uint_lt(b, 1u << 20);
}
END_TEST

/* ---- FIFOs and missing files ---- */

START_TEST(test_fifo_shard_refused) {
  ck_assert_int_eq(mkfifo(path_in("train_000.bin"), 0600), 0);
  loom_loader ld;
  /* Check's per-test timeout ends the test if the open blocks */
  ck_assert_int_eq(loom_loader_open(&ld, path_in("train_*.bin"), 8, 256, g_err, sizeof g_err),
                   -1);
  ck_assert_msg(strstr(g_err, "train_000.bin: expected a regular file, got a FIFO"), "%s", g_err);
}
END_TEST

START_TEST(test_fifo_vocab_refused) {
  ck_assert_int_eq(mkfifo(path_in("vocab.json"), 0600), 0);
  loom_tokenizer tok;
  ck_assert_int_eq(loom_tokenizer_load(&tok, path_in("vocab.json"), g_err, sizeof g_err), -1);
  ck_assert_msg(strstr(g_err, "vocab.json: expected a regular file, got a FIFO"), "%s", g_err);
}
END_TEST

START_TEST(test_fifo_config_refused) {
  ck_assert_int_eq(mkfifo(path_in("cfg.json"), 0600), 0);
  loom_config cfg;
  ck_assert_int_eq(loom_config_load(&cfg, path_in("cfg.json"), NULL, 0, g_err, sizeof g_err), -1);
  ck_assert_msg(strstr(g_err, "cfg.json: expected a regular file, got a FIFO"), "%s", g_err);
}
END_TEST

START_TEST(test_missing_data_dir_named) {
  loom_loader ld;
  ck_assert_int_eq(
      loom_loader_open(&ld, path_in("data/tiny/train_*.bin"), 8, 256, g_err, sizeof g_err), -1);
  ck_assert_msg(strstr(g_err, "data/tiny does not exist"), "%s", g_err);
  ck_assert_msg(strstr(g_err, "tools/main_job.sh") && strstr(g_err, "loom-prepare --out"), "%s",
                g_err);
  ck_assert_ptr_null(strstr(g_err, "read error"));
  /* the directory exists, the files do not: still says what makes them */
  ck_assert_int_eq(mkdir(path_in("data"), 0700), 0);
  ck_assert_int_eq(loom_loader_open(&ld, path_in("data/train_*.bin"), 8, 256, g_err,
                                    sizeof g_err), -1);
  ck_assert_msg(strstr(g_err, "no files match") && strstr(g_err, "loom-prepare"), "%s", g_err);
}
END_TEST

/* ---- plugin files ---- */

static void copy_prefix(const char *from, const char *to, size_t n) {
  FILE *f = fopen(from, "rb");
  ck_assert_msg(f != NULL, "%s missing (build the plugins first)", from);
  char *buf = malloc(n);
  ck_assert_ptr_nonnull(buf);
  size_t got = fread(buf, 1, n, f);
  fclose(f);
  write_bytes(to, buf, got);
  free(buf);
}

START_TEST(test_truncated_plugin_refused) {
  /* the case: the first 4096 bytes of a real plugin killed loom with SIGBUS in dlopen */
  const size_t sizes[] = {4096, 64, 63, 10, 100000};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    copy_prefix(PLUGINS "/ddp.so", path_in("cut.so"), sizes[i]);
    struct stat st;
    ck_assert_int_eq(stat(path_in("cut.so"), &st), 0);
    struct stat whole;
    ck_assert_int_eq(stat(PLUGINS "/ddp.so", &whole), 0);
    if ((off_t)sizes[i] >= whole.st_size) continue; /* not truncated: nothing to refuse */
    ck_assert_int_eq(loom__elf_check(path_in("cut.so"), g_err, sizeof g_err), -1);
    ck_assert_msg(strstr(g_err, "truncated"), "%zu bytes: %s", sizes[i], g_err);
    loom_plugin p;
    ck_assert_int_eq(loom__plugin_open(&p, path_in("cut.so"), 0, g_err, sizeof g_err), -1);
    ck_assert_msg(strstr(g_err, "cut.so") && strstr(g_err, "cannot load: truncated"), "%s",
                  g_err);
  }
  /* the whole file passes the check and loads */
  ck_assert_int_eq(loom__elf_check(PLUGINS "/ddp.so", g_err, sizeof g_err), 0);
}
END_TEST

START_TEST(test_foreign_elf_refused) {
  FILE *f = fopen(PLUGINS "/ddp.so", "rb");
  ck_assert_ptr_nonnull(f);
  unsigned char hdr[64];
  ck_assert_uint_eq(fread(hdr, 1, sizeof hdr, f), sizeof hdr);
  fclose(f);
  unsigned char h[64];
  memcpy(h, hdr, 64);
  h[4] = 1; /* EI_CLASS: 32-bit */
  write_bytes(path_in("x.so"), h, 64);
  ck_assert_int_eq(loom__elf_check(path_in("x.so"), g_err, sizeof g_err), -1);
  ck_assert_msg(strstr(g_err, "32-bit"), "%s", g_err);
  memcpy(h, hdr, 64);
  h[18] ^= 0x55; /* e_machine */
  write_bytes(path_in("x.so"), h, 64);
  ck_assert_int_eq(loom__elf_check(path_in("x.so"), g_err, sizeof g_err), -1);
  ck_assert_msg(strstr(g_err, "built for ELF machine"), "%s", g_err);
  memcpy(h, hdr, 64);
  h[16] = 2; /* e_type: ET_EXEC */
  write_bytes(path_in("x.so"), h, 64);
  ck_assert_int_eq(loom__elf_check(path_in("x.so"), g_err, sizeof g_err), -1);
  ck_assert_msg(strstr(g_err, "not a shared object"), "%s", g_err);
  ck_assert_int_eq(mkfifo(path_in("fifo.so"), 0600), 0);
  ck_assert_int_eq(loom__elf_check(path_in("fifo.so"), g_err, sizeof g_err), -1);
  ck_assert_msg(strstr(g_err, "FIFO"), "%s", g_err);
}
END_TEST

/* ---- fuzz: token shards ---- */

#define SHARD_TOKENS 300

/* A valid shard's bytes: header + SHARD_TOKENS tokens below 200. */
static unsigned char *valid_shard(size_t *n) {
  *n = LOOM_SHARD_HEADER_INTS * 4 + SHARD_TOKENS * 2;
  unsigned char *b = calloc(1, *n);
  int32_t hdr[3] = {LOOM_SHARD_MAGIC, LOOM_SHARD_VERSION, SHARD_TOKENS};
  memcpy(b, hdr, sizeof hdr);
  for (int i = 0; i < SHARD_TOKENS; i++) {
    uint16_t t = (uint16_t)(i * 7 % 200);
    memcpy(b + LOOM_SHARD_HEADER_INTS * 4 + 2 * i, &t, 2);
  }
  return b;
}

/* One random mutation of buf[*n] (capacity cap): a byte, a header field set to an edge value,
 * a truncation, or extra bytes. */
static void mutate(unsigned char *buf, size_t *n, size_t cap) {
  static const int32_t edges[] = {0, 1, -1, INT32_MAX, INT32_MIN, SHARD_TOKENS - 1,
                                  SHARD_TOKENS + 1, 1 << 30, LOOM_SHARD_MAGIC, 2};
  switch (rnd_below(5)) {
    case 0:
      if (*n) buf[rnd_below(*n)] ^= (unsigned char)(1u << rnd_below(8));
      break;
    case 1: { /* a header int: magic, version or count */
      int32_t v = edges[rnd_below(sizeof edges / sizeof edges[0])];
      size_t at = 4 * rnd_below(3);
      if (at + 4 <= *n) memcpy(buf + at, &v, 4);
      break;
    }
    case 2:
      *n = rnd_below(*n + 1);
      break;
    case 3: {
      size_t extra = rnd_below(8);
      for (size_t i = 0; i < extra && *n < cap; i++) buf[(*n)++] = (unsigned char)rnd();
      break;
    }
    case 4: /* a token at the vocabulary's edge */
      if (*n > LOOM_SHARD_HEADER_INTS * 4 + 2) {
        uint16_t t = rnd_below(2) ? 0xffff : 255;
        size_t i = rnd_below((*n - LOOM_SHARD_HEADER_INTS * 4) / 2);
        memcpy(buf + LOOM_SHARD_HEADER_INTS * 4 + 2 * i, &t, 2);
      }
      break;
  }
}

START_TEST(test_fuzz_shards) {
  size_t base_n;
  unsigned char *base = valid_shard(&base_n);
  size_t cap = base_n + 64;
  unsigned char *buf = malloc(cap);
  ck_assert_ptr_nonnull(buf);
  static const int Ts[] = {1, 7, 64, 299, 300, 100000};
  static const int Vs[] = {2, 200, 256, 65536};
  int loaded = 0, refused = 0;
  for (int it = 0; it < 1500; it++) {
    size_t n = base_n;
    memcpy(buf, base, base_n);
    int muts = 1 + (int)rnd_below(3);
    for (int k = 0; k < muts; k++) mutate(buf, &n, cap);
    write_bytes(path_in("s_000.bin"), buf, n);
    int T = Ts[rnd_below(sizeof Ts / sizeof Ts[0])], V = Vs[rnd_below(sizeof Vs / sizeof Vs[0])];
    loom_loader ld;
    g_err[0] = '\0';
    if (loom_loader_open(&ld, path_in("s_*.bin"), T, V, g_err, sizeof g_err) == 0) {
      /* a load that succeeds must be readable everywhere it claims to hold data */
      ck_assert_uint_ge(ld.n_seqs, 1);
      int32_t in[4 * 300], tg[4 * 300];
      if (T <= 300)
        for (int m = 0; m < 3; m++) loom_loader_fill(&ld, 4, 1, m, 0, in, tg);
      for (int i = 0; T <= 300 && i < 4 * T; i++) ck_assert_int_lt(in[i], V);
      loom_loader_close(&ld);
      loaded++;
    } else {
      ck_assert_msg(strstr(g_err, "s_") != NULL, "iteration %d: message names no file: %s", it,
                    g_err);
      ck_assert_ptr_null(strchr(g_err, '\n'));
      refused++;
    }
  }
  ck_assert_int_gt(loaded, 0); /* the mutations are not all fatal: both paths are exercised */
  ck_assert_int_gt(refused, 0);
  free(buf);
  free(base);
}
END_TEST

/* ---- fuzz: vocabulary files ---- */

START_TEST(test_fuzz_vocab) {
  /* structured cases: every wrong type and shape of each field */
  static const char *const cases[] = {
      "", "null", "[]", "3", "\"byte\"", "{}", "{\"type\": null}", "{\"type\": 3}",
      "{\"type\": [\"byte\"]}", "{\"type\": {\"byte\": 1}}", "{\"type\": \"bpe\"}",
      "{\"type\": \"byte\", \"vocab_size\": \"256\"}", "{\"type\": \"byte\", \"vocab_size\": 256.0}",
      "{\"type\": \"byte\", \"vocab_size\": -1}", "{\"type\": \"byte\", \"vocab_size\": 1e400}",
      "{\"type\": \"byte\", \"vocab_size\": 9223372036854775807}",
      "{\"type\": \"byte\", \"vocab_size\": 99999999999999999999999}",
      "{\"type\": \"byte\", \"vocab_size\": null}", "{\"type\": \"byte\", \"type\": \"byte\"}",
      "{\"type\": \"by\\u0000te\"}", "{\"type\": \"\xff\xfe\"}", "{\"type\": \"byte\"", "\xef\xbb\xbf{}",
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    write_bytes(path_in("vocab.json"), cases[i], strlen(cases[i]));
    loom_tokenizer tok;
    g_err[0] = '\0';
    ck_assert_msg(loom_tokenizer_load(&tok, path_in("vocab.json"), g_err, sizeof g_err) == -1,
                  "case %zu accepted: %s", i, cases[i]);
    ck_assert_msg(strstr(g_err, "vocab.json"), "case %zu: %s", i, g_err);
  }
  /* deep nesting */
  size_t deep = 100000;
  char *d = malloc(2 * deep + 1);
  ck_assert_ptr_nonnull(d);
  for (size_t i = 0; i < deep; i++) d[i] = '[', d[2 * deep - 1 - i] = ']';
  d[2 * deep] = '\0';
  write_bytes(path_in("vocab.json"), d, 2 * deep);
  free(d);
  loom_tokenizer tok;
  ck_assert_int_eq(loom_tokenizer_load(&tok, path_in("vocab.json"), g_err, sizeof g_err), -1);
  /* random byte mutations of a valid file: an error or the byte vocabulary, nothing else */
  const char *valid = "{\"type\": \"byte\", \"vocab_size\": 256}\n";
  size_t vn = strlen(valid);
  char buf[128];
  int loaded = 0;
  for (int it = 0; it < 2000; it++) {
    size_t n = vn;
    memcpy(buf, valid, vn);
    int muts = 1 + (int)rnd_below(3);
    for (int k = 0; k < muts; k++) {
      switch (rnd_below(3)) {
        case 0: buf[rnd_below(n)] = (char)rnd(); break;
        case 1: n = 1 + rnd_below(n); break;
        case 2: {
          size_t at = rnd_below(n);
          buf[at] = "\"{}[],:0123456789-.e\\ \x80\x00"[rnd_below(24)];
          break;
        }
      }
    }
    write_bytes(path_in("vocab.json"), buf, n);
    g_err[0] = '\0';
    if (loom_tokenizer_load(&tok, path_in("vocab.json"), g_err, sizeof g_err) == 0) {
      ck_assert_int_eq(tok.vocab_size, LOOM_TOKENIZER_BYTE_VOCAB);
      loaded++;
    } else {
      ck_assert_msg(strstr(g_err, "vocab.json"), "iteration %d: %s", it, g_err);
    }
  }
  ck_assert_int_gt(loaded, 0);
}
END_TEST

static Suite *hostile_suite(void) {
  Suite *s = suite_create("hostile_input");
  struct {
    const char *name;
    const TTest *const *tests;
  } cases[] = {
      {"sizes", CHECK_TESTS(test_gpt_refuses_huge_dims, test_activation_bytes_saturate)},
      {"fifo", CHECK_TESTS(test_fifo_shard_refused, test_fifo_vocab_refused,
                           test_fifo_config_refused)},
      {"missing", CHECK_TESTS(test_missing_data_dir_named)},
      {"elf", CHECK_TESTS(test_truncated_plugin_refused, test_foreign_elf_refused)},
      {"fuzz", CHECK_TESTS(test_fuzz_shards, test_fuzz_vocab)},
  };
  /* a blocking open fails the test after 10 s instead of hanging; the fuzz loops take about
   * a second (20 under ASan) */
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    check_add_tcase(s, cases[i].name, cases[i].tests, dir_setup, dir_teardown,
                    strcmp(cases[i].name, "fuzz") ? 10 : 200);
  return s;
}

int main(void) {
  return check_run_suite(hostile_suite(), CK_FORK);
}
