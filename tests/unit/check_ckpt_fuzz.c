/* Fuzz tests for everything loom reads back from a checkpoint: the manifest (its JSON and its
 * checksum file), the shard files, `latest`, and the core's metadata document. Each is
 * untrusted input: a mutation must give a clear message (or, where it is harmless, a good
 * load), never a crash, a hang or a sanitizer report; a changed byte anywhere must be reported
 * as corruption.
 *
 * The checkpoint plugin's objects are linked into this test with a small fake host
 * (support/ckpt_fake_host.h: one rank, host memory as "device" memory), so thousands of mutations run in-process in seconds. The
 * generator is seeded with a fixed value: every run tries the same inputs. */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "checkpoint.h"
#include "slice.h"
#include "train/ckpt/ckpt_meta.h"
#include "support/check_suite.h"
#include "support/ckpt_fake_host.h"
#include "support/test_dir.h"

/* ---- a checkpoint to mutate ---- */
enum { N_PARAMS = 1000, N_HALF = 500, BLOB = 64, STEP = 5 };
static char g_dir[256];
static loom_host g_host;
static float g_params[N_PARAMS], g_m[N_PARAMS], g_v[N_PARAMS];
static unsigned char g_blob[BLOB];
static uint64_t g_rng = 0x10adc0ffee;

static uint64_t rnd(void) { /* xorshift64: deterministic */
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return g_rng;
}

static char *path_of(const char *name) {
  static char buf[4][512];
  static int k;
  char *p = buf[k++ & 3];
  snprintf(p, 512, "%s/%s", g_dir, name);
  return p;
}

static void *create_ckpt(void) { return ckpt_fake_create(&loom_plugin_v1, &g_host, g_dir); }

/* items: the whole params, and optim.m/v each as two chunks (what a 2-way ZeRO shard has) */
static int make_items(loom_ckpt_item_v1 *it, float *p, float *m, float *v) {
  it[0] = (loom_ckpt_item_v1){sizeof *it, "params", LOOM_F32, N_PARAMS, 0, N_PARAMS, p, 1};
  it[1] = (loom_ckpt_item_v1){sizeof *it, "optim.m", LOOM_F32, N_PARAMS, 0, N_HALF, m, 1};
  it[2] = (loom_ckpt_item_v1){sizeof *it, "optim.m", LOOM_F32, N_PARAMS, N_HALF,
                              N_PARAMS - N_HALF, m + N_HALF, 1};
  it[3] = (loom_ckpt_item_v1){sizeof *it, "optim.v", LOOM_F32, N_PARAMS, 0, N_PARAMS, v, 1};
  return 4;
}

static void save_step(int step) {
  for (int i = 0; i < N_PARAMS; i++) {
    g_params[i] = (float)i * 0.5f;
    g_m[i] = (float)i * -0.25f;
    g_v[i] = (float)i * 2.0f;
  }
  for (int i = 0; i < BLOB; i++) g_blob[i] = (unsigned char)(i * 7 + 1);
  loom_ckpt_item_v1 it[4];
  int n = make_items(it, g_params, g_m, g_v);
  loom_ckpt_state_v1 st = {sizeof st, step, n, it, "{\"note\":\"meta\"}", g_blob, BLOB, NULL};
  void *ctx = create_ckpt();
  ck_assert_msg(loom_plugin_v1.save(ctx, &st) == LOOM_OK, "save: %s", g_host.error);
  loom_plugin_v1.destroy(ctx);
}

/* Resume + load everything. Returns the plugin's result; on LOOM_OK the data must be the
 * saved data, on an error the message must say something. */
static int try_resume(int *step_out) {
  float p[N_PARAMS], m[N_PARAMS], v[N_PARAMS];
  unsigned char blob[BLOB];
  loom_ckpt_item_v1 it[4];
  int n = make_items(it, p, m, v);
  loom_ckpt_state_v1 st = {sizeof st, 0, n, it, NULL, blob, BLOB, NULL};
  g_host.error[0] = '\0';
  void *ctx = create_ckpt();
  int step = 0, rc = loom_plugin_v1.resume_step(ctx, &step);
  const char *meta = NULL;
  if (rc == LOOM_OK && step > 0) {
    st.step = step;
    rc = loom_plugin_v1.load(ctx, step, &st, &meta);
  }
  if (rc == LOOM_OK && step > 0) {
    ck_assert_ptr_nonnull(meta);
    ck_assert_msg(memcmp(p, g_params, sizeof p) == 0 && memcmp(m, g_m, sizeof m) == 0 &&
                  memcmp(v, g_v, sizeof v) == 0 && memcmp(blob, g_blob, BLOB) == 0,
                  "a load that succeeded returned other data than was saved");
  }
  if (rc != LOOM_OK) ck_assert_msg(g_host.error[0], "an error without a message (rc %d)", rc);
  loom_plugin_v1.destroy(ctx);
  if (step_out) *step_out = step;
  return rc;
}

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  ck_assert_ptr_nonnull(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
  buf[n] = '\0';
  fclose(f);
  *len = (size_t)n;
  return buf;
}

static void spit(const char *path, const void *data, size_t len) {
  unlink(path); /* also replaces a FIFO left by an earlier case */
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(data, 1, len, f), len);
  fclose(f);
}

/* CRC-32 of a test-sized buffer, as the plugin writes it (zlib's, computed here on its own). */
static uint32_t crc_of(const void *buf, size_t bytes) {
  return (uint32_t)crc32(crc32(0L, Z_NULL, 0), (const Bytef *)buf, (uInt)bytes);
}

/* Write a manifest text and a checksum file that matches it (so the parser sees it). */
static void put_manifest(const char *sd, const char *text, size_t len) {
  char p[600], crc[16];
  snprintf(p, sizeof p, "%s/manifest.json", sd);
  spit(p, text, len);
  snprintf(crc, sizeof crc, "%08x\n", crc_of(text, len));
  snprintf(p, sizeof p, "%s/manifest.crc32", sd);
  spit(p, crc, strlen(crc));
}

static void setup(void) {
  test_dir_make(g_dir, sizeof g_dir, "check_ckpt_fuzz");
  memset(&g_host, 0, sizeof g_host);
  g_rng = 0x10adc0ffee;
  save_step(STEP);
}
static void teardown(void) { test_dir_remove(g_dir); }

/* ---- structural mutations of a JSON document ---- */
/* A random node of the tree (objects and arrays are entered with probability 3/4). */
static json_t *random_container(json_t *root) {
  json_t *cur = root;
  for (int depth = 0; depth < 8; depth++) {
    size_t n = json_is_object(cur) ? json_object_size(cur) : json_array_size(cur);
    if (n == 0 || rnd() % 4 == 0) break;
    size_t k = rnd() % n;
    json_t *child;
    if (json_is_object(cur)) {
      void *iter = json_object_iter(cur);
      while (k-- && iter) iter = json_object_iter_next(cur, iter);
      child = iter ? json_object_iter_value(iter) : NULL;
    } else {
      child = json_array_get(cur, k);
    }
    if (!child || !(json_is_object(child) || json_is_array(child))) break;
    cur = child;
  }
  return cur;
}

static json_t *random_value(void) {
  switch (rnd() % 10) {
    case 0: return json_null();
    case 1: return json_string("params");
    case 2: return json_integer(-1);
    case 3: return json_integer((json_int_t)(INT64_MAX - (int64_t)(rnd() % 3)));
    case 4: return json_real(1e300);
    case 5: return json_array();
    case 6: return json_object();
    case 7: return json_true();
    case 8: return json_integer((json_int_t)(rnd() % 5000));
    default: return json_string("../../../etc/passwd");
  }
}

/* Rename, remove or retype one key, or retype one array element. */
static void mutate_tree(json_t *root) {
  json_t *c = random_container(root);
  if (json_is_object(c) && json_object_size(c) > 0) {
    size_t k = rnd() % json_object_size(c);
    void *iter = json_object_iter(c);
    while (k-- && iter) iter = json_object_iter_next(c, iter);
    char key[128];
    snprintf(key, sizeof key, "%s", json_object_iter_key(iter));
    json_t *val = json_incref(json_object_iter_value(iter));
    switch (rnd() % 3) {
      case 0: { /* "name" -> "nbme" */
        char renamed[128];
        snprintf(renamed, sizeof renamed, "%s", key);
        renamed[rnd() % (strlen(renamed) ? strlen(renamed) : 1)] ^= 0x3;
        json_object_del(c, key);
        json_object_set(c, renamed, val);
        break;
      }
      case 1: json_object_del(c, key); break;
      default: json_object_set_new(c, key, random_value()); break;
    }
    json_decref(val);
  } else if (json_is_array(c) && json_array_size(c) > 0) {
    size_t k = rnd() % json_array_size(c);
    if (rnd() % 2) json_array_set_new(c, k, random_value());
    else json_array_remove(c, k);
  }
}

/* A mutated text of `text`: a structural change, a truncation or flipped bytes. */
static char *mutate_text(const char *text, size_t len, size_t *out_len) {
  int how = (int)(rnd() % 4);
  if (how <= 1) {
    json_t *j = json_loads(text, 0, NULL);
    ck_assert_ptr_nonnull(j);
    for (int i = 0; i <= how; i++) mutate_tree(j);
    char *s = json_dumps(j, JSON_INDENT(1));
    json_decref(j);
    *out_len = strlen(s);
    return s;
  }
  char *s = malloc(len + 1);
  memcpy(s, text, len + 1);
  *out_len = len;
  if (how == 2) {
    *out_len = rnd() % len; /* truncated JSON */
  } else {
    for (int i = 0; i < 1 + (int)(rnd() % 3); i++) s[rnd() % len] = (char)(rnd() & 0xff);
  }
  return s;
}

START_TEST(manifest_mutations_never_crash) {
  char sd[512];
  snprintf(sd, sizeof sd, "%s/step-%08d", g_dir, STEP);
  char mp[600];
  snprintf(mp, sizeof mp, "%s/manifest.json", sd);
  size_t len;
  char *pristine = slurp(mp, &len);
  int refused = 0, loaded = 0;
  for (int i = 0; i < 1500; i++) {
    size_t n;
    char *text = mutate_text(pristine, len, &n);
    put_manifest(sd, text, n);
    free(text);
    if (try_resume(NULL) == LOOM_OK) loaded++;
    else refused++;
  }
  put_manifest(sd, pristine, len);
  ck_assert_int_eq(try_resume(NULL), LOOM_OK);
  free(pristine);
  ck_assert_int_gt(refused, 1000); /* nearly every mutation touches a field the loader uses */
  fprintf(stderr, "manifest mutations: %d refused with a message, %d harmless\n", refused,
          loaded);
}
END_TEST

/* The case: "name" renamed to "nbme" in one chunk. */
START_TEST(renamed_chunk_name_is_a_message) {
  char sd[512], mp[600];
  snprintf(sd, sizeof sd, "%s/step-%08d", g_dir, STEP);
  snprintf(mp, sizeof mp, "%s/manifest.json", sd);
  size_t len;
  char *text = slurp(mp, &len);
  char *at = strstr(text, "\"name\": \"params\"");
  ck_assert_ptr_nonnull(at);
  memcpy(at, "\"nbme\"", 6);
  put_manifest(sd, text, len);
  free(text);
  ck_assert_int_eq(try_resume(NULL), LOOM_CORRUPT);
  ck_assert_msg(strstr(g_host.error, "shards[0].chunks[0].name") != NULL, "%s", g_host.error);
}
END_TEST

/* Any changed byte in any file of the checkpoint is reported as corruption. */
START_TEST(every_byte_is_checksummed) {
  const char *files[] = {"manifest.json", "manifest.crc32", "rank-00000.bin"};
  for (size_t f = 0; f < 3; f++) {
    char name[64];
    snprintf(name, sizeof name, "step-%08d/%s", STEP, files[f]);
    char *p = path_of(name);
    size_t len;
    char *pristine = slurp(p, &len);
    for (int i = 0; i < 150; i++) {
      size_t off = i < 2 ? (i == 0 ? 0 : len - 1) : rnd() % len; /* both ends, then anywhere */
      char *copy = malloc(len);
      memcpy(copy, pristine, len);
      copy[off] ^= (char)(1 + rnd() % 255);
      spit(p, copy, len);
      free(copy);
      int rc = try_resume(NULL);
      ck_assert_msg(rc == LOOM_CORRUPT, "%s: byte %zu changed: rc %d, message '%s'", files[f],
                    off, rc, g_host.error);
      ck_assert_msg(strstr(g_host.error, "corrupt") || strstr(g_host.error, "line"),
                    "%s byte %zu: '%s'", files[f], off, g_host.error);
    }
    for (int i = 0; i < 20; i++) { /* truncated (the checksum file's newline is optional) */
      spit(p, pristine, rnd() % (f == 1 ? len - 1 : len));
      ck_assert_int_ne(try_resume(NULL), LOOM_OK);
    }
    spit(p, pristine, len);
    ck_assert_int_eq(try_resume(NULL), LOOM_OK);
    free(pristine);
  }
}
END_TEST

/* `latest` is a hint: whatever it holds, the newest verified checkpoint is used, never a hang. */
START_TEST(odd_latest_contents) {
  const char *contents[] = {"", "\n", "step-", "step-00000005x", "step-99999999",
                            "../../etc/passwd", "step-00000001", "step--0000005",
                            "step-00000005\nstep-00000005", "\xff\xfe\x00\x01"};
  for (size_t i = 0; i < sizeof contents / sizeof contents[0]; i++) {
    spit(path_of("latest"), contents[i], i == 9 ? 4 : strlen(contents[i]));
    int step = -1;
    ck_assert_int_eq(try_resume(&step), LOOM_OK);
    ck_assert_int_eq(step, STEP);
  }
  char big[4096];
  memset(big, 's', sizeof big);
  spit(path_of("latest"), big, sizeof big);
  int step = -1;
  ck_assert_int_eq(try_resume(&step), LOOM_OK);
  ck_assert_int_eq(step, STEP);
  unlink(path_of("latest"));
  ck_assert_int_eq(mkfifo(path_of("latest"), 0644), 0); /* a FIFO: must not block */
  ck_assert_int_eq(try_resume(&step), LOOM_OK);
  ck_assert_int_eq(step, STEP);
}
END_TEST

/* A FIFO in place of any file the loader opens is refused at once. */
START_TEST(fifos_never_block) {
  const char *files[] = {"manifest.json", "manifest.crc32", "rank-00000.bin"};
  for (size_t f = 0; f < 3; f++) {
    char name[64];
    snprintf(name, sizeof name, "step-%08d/%s", STEP, files[f]);
    char *p = path_of(name);
    size_t len;
    char *pristine = slurp(p, &len);
    unlink(p);
    ck_assert_int_eq(mkfifo(p, 0644), 0);
    alarm(20); /* a hang fails the test instead of stalling the suite */
    ck_assert_int_ne(try_resume(NULL), LOOM_OK);
    alarm(0);
    ck_assert_msg(strstr(g_host.error, "not a regular file"), "%s", g_host.error);
    spit(p, pristine, len);
    free(pristine);
  }
  ck_assert_int_eq(try_resume(NULL), LOOM_OK);
}
END_TEST

/* A kill after step-10 is published but before `latest` names it: step 10 is used, and said;
 * a damaged newest checkpoint stops the resume with the reason (no silent fallback that
 * would overwrite it). */
START_TEST(newest_verified_checkpoint_wins) {
  save_step(10);
  spit(path_of("latest"), "step-00000005", 13);
  int step = 0, warned = g_host.warnings;
  ck_assert_int_eq(try_resume(&step), LOOM_OK);
  ck_assert_int_eq(step, 10);
  ck_assert_int_gt(g_host.warnings, warned);
  char *p = path_of("step-00000010/manifest.json");
  size_t len;
  char *text = slurp(p, &len);
  text[len / 2] ^= 0x5;
  spit(p, text, len);
  free(text);
  ck_assert_int_eq(try_resume(&step), LOOM_CORRUPT);
  ck_assert_msg(strstr(g_host.error, "step-00000010, the newest checkpoint, fails "
                       "verification") && strstr(g_host.error, "move it away"),
                "%s", g_host.error);
  /* an unpublished save (.tmp-…) is never a candidate */
  char tmp[600];
  snprintf(tmp, sizeof tmp, "%s/.tmp-step-00000020", g_dir);
  ck_assert_int_eq(mkdir(tmp, 0755), 0);
  ck_assert_int_eq(rename(path_of("step-00000010"), path_of("damaged-step-00000010")), 0);
  ck_assert_int_eq(try_resume(&step), LOOM_OK);
  ck_assert_int_eq(step, STEP);
}
END_TEST

/* The core's metadata document: a valid one parses; mutations give a message or parse. */
static char *valid_meta(void) {
  json_t *m = json_pack(
      "{s:s, s:i, s:i, s:i, s:i, s:i, s:{s:i, s:i, s:i, s:i, s:i}, s:{s:i, s:i, s:s},"
      " s:{s:s, s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i},"
      " s:{s:i, s:i, s:i, s:s, s:f, s:f, s:f}, s:{s:f, s:f, s:f, s:f, s:f}, s:s, s:s, s:n,"
      " s:{}}",
      "format", LOOM_CKPT_META_FORMAT, "step", 5, "world_size", 2, "dp", 2, "tp", 1, "pp", 1,
      "model", "vocab_size", 256, "context_length", 64, "n_layer", 2, "n_head", 2, "n_embd", 32,
      "tokenizer", "type", 1, "vocab_size", 256, "fingerprint", "0123456789abcdef", "data",
      "units", "tokens", "pattern", "d/train_*.bin", "shard", "d/train_000.bin", "seq_len", 64,
      "micro_batch_size", 4, "grad_accum_steps", 1, "global_batch", 8, "epoch", 0,
      "shard_index", 0, "shard_tokens", 100000, "token", 2560, "schedule", "steps", 20,
      "horizon", 20, "warmup_steps", 2, "decay", "cosine", "lr", 1e-3, "min_lr", 1e-4,
      "last_lr", 5e-4, "optimizer", "beta1", 0.9, "beta2", 0.95, "eps", 1e-8, "weight_decay",
      0.0, "grad_clip", 1.0, "seed", "1337", "precision_plugin", "fp32", "precision", "config");
  char *s = json_dumps(m, JSON_INDENT(1));
  json_decref(m);
  return s;
}

START_TEST(meta_mutations_never_crash) {
  char *text = valid_meta(), err[512];
  loom_ckpt_meta m;
  ck_assert_msg(loom__ckpt_meta_parse(text, &m, err, sizeof err) == 0, "%s", err);
  ck_assert_uint_eq(m.data.token, 2560);
  ck_assert_uint_eq(m.seed, 1337);
  loom__ckpt_meta_free(&m);
  int refused = 0;
  for (int i = 0; i < 2000; i++) {
    size_t n;
    char *mut = mutate_text(text, strlen(text), &n);
    char *z = strndup(mut, n);
    err[0] = '\0';
    if (loom__ckpt_meta_parse(z, &m, err, sizeof err) != 0) {
      ck_assert_msg(err[0], "a refusal without a message");
      refused++;
    } else {
      ck_assert_uint_le(m.data.token, m.data.shard_tokens);
      ck_assert_int_eq((int64_t)m.dp * m.tp * m.pp, m.world_size);
      loom__ckpt_meta_free(&m);
    }
    free(z);
    free(mut);
  }
  /* the kind: a key renamed */
  char *at = strstr(text, "\"token\":");
  memcpy(at, "\"tokem\"", 7);
  ck_assert_int_ne(loom__ckpt_meta_parse(text, &m, err, sizeof err), 0);
  ck_assert_msg(strstr(err, "data.token"), "%s", err);
  ck_assert_int_gt(refused, 1000);
  free(text);
}
END_TEST

/* model.padded_vocab_size: recorded, or (checkpoints before it) wte's rows in the tensor
 * table, or unpadded; a value below vocab_size is refused by name. */
static int padded_of(void (*edit)(json_t *meta), char *err, size_t errlen) {
  char *text = valid_meta();
  json_t *meta = json_loads(text, 0, NULL);
  free(text);
  edit(meta);
  text = json_dumps(meta, 0);
  json_decref(meta);
  loom_ckpt_meta m;
  int rc = loom__ckpt_meta_parse(text, &m, err, errlen);
  free(text);
  if (rc != 0) return -1;
  int v = m.model.padded_vocab_size;
  loom__ckpt_meta_free(&m);
  return v;
}
static void no_edit(json_t *meta) { (void)meta; }
static void record_320(json_t *meta) {
  json_object_set_new(json_object_get(meta, "model"), "padded_vocab_size", json_integer(320));
}
static void record_100(json_t *meta) {
  json_object_set_new(json_object_get(meta, "model"), "padded_vocab_size", json_integer(100));
}
static void old_table_320(json_t *meta) { /* a checkpoint before the key: its tensor table */
  json_object_set_new(meta, "tensors",
                      json_pack("[{s:s, s:[i, i]}, {s:s, s:[i, i]}]", "name", "wpe", "shape", 64,
                                32, "name", "wte", "shape", 320, 32));
}

START_TEST(meta_padded_vocab_size) {
  char err[512] = "";
  ck_assert_int_eq(padded_of(no_edit, err, sizeof err), 256); /* absent, no table: unpadded */
  ck_assert_int_eq(padded_of(record_320, err, sizeof err), 320);
  ck_assert_int_eq(padded_of(old_table_320, err, sizeof err), 320);
  ck_assert_int_eq(padded_of(record_100, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "model.padded_vocab_size: expected an integer in [256, "), "%s", err);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("ckpt_fuzz");
  TCase *tc = tcase_create("fuzz");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 240);
  tcase_add_test(tc, manifest_mutations_never_crash);
  tcase_add_test(tc, renamed_chunk_name_is_a_message);
  tcase_add_test(tc, every_byte_is_checksummed);
  tcase_add_test(tc, odd_latest_contents);
  tcase_add_test(tc, fifos_never_block);
  tcase_add_test(tc, newest_verified_checkpoint_wins);
  tcase_add_test(tc, meta_mutations_never_crash);
  tcase_add_test(tc, meta_padded_vocab_size);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return check_run_suite(suite(), CK_FORK_GETENV);
}
