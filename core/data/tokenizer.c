/* The byte-level tokenizer (see tokenizer.h): token = byte, vocab 256. */
#define _GNU_SOURCE
#include "data/tokenizer.h"
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


void loom_tokenizer_init_bytes(loom_tokenizer *tok) {
  tok->type = LOOM_TOKENIZER_BYTE;
  tok->vocab_size = LOOM_TOKENIZER_BYTE_VOCAB;
}

int loom_tokenizer_load(loom_tokenizer *tok, const char *path, char *err, size_t errlen) {
  loom_tokenizer_init_bytes(tok);
  if (!path || !*path) return 0;

  /* untrusted input: read without blocking (a FIFO is refused), bounded in size, then every
   * field type-checked before use */
  size_t len;
  char *text = loom__read_regular(path, VOCAB_MAX_BYTES, &len, err, errlen);
  if (!text) return -1;
  json_error_t jerr;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
  free(text);
  if (!root) {
    loom__set_err(err, errlen, "%s: not a vocabulary file: line %d: %s", path, jerr.line, jerr.text);
    return -1;
  }
  int rc = -1;
  json_t *tv = json_object_get(root, "type"); /* NULL when root is not an object */
  const char *type = json_string_value(tv);
  json_t *vs = json_object_get(root, "vocab_size");
  if (!json_is_object(root)) {
    loom__set_err(err, errlen, "%s: not a vocabulary file: expected a JSON object", path);
  } else if (!tv) {
    loom__set_err(err, errlen, "%s: missing \"type\" (a string such as \"byte\")", path);
  } else if (!type) {
    loom__set_err(err, errlen, "%s: \"type\" must be a string such as \"byte\"", path);
  } else if (strcmp(type, "byte") != 0) {
    loom__set_err(err, errlen, "%s: unsupported tokenizer type \"%s\" (this build knows \"byte\")",
            path, type);
  } else if (vs && !json_is_integer(vs)) {
    loom__set_err(err, errlen, "%s: \"vocab_size\" must be an integer", path);
  } else if (vs && json_integer_value(vs) != LOOM_TOKENIZER_BYTE_VOCAB) {
    loom__set_err(err, errlen, "%s: vocab_size %lld does not match type \"byte\" (%d)", path,
            (long long)json_integer_value(vs), LOOM_TOKENIZER_BYTE_VOCAB);
  } else {
    rc = 0;
    /* a mistyped key ("vocab_sz") must not be ignored: the byte vocabulary has these two;
     * keys starting with '_' are comments, as in a config (they count in the fingerprint) */
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
      if (key[0] == '_' || !strcmp(key, "type") || !strcmp(key, "vocab_size")) continue;
      loom__set_err(err, errlen, "%s: unknown key \"%.64s\" (a \"byte\" vocabulary has \"type\" and "
              "\"vocab_size\"; keys starting with '_' are comments)", path, key);
      rc = -1;
      break;
    }
  }
  json_decref(root);
  return rc;
}

int loom_tokenizer_save(const loom_tokenizer *tok, const char *path, char *err, size_t errlen) {
  char text[128];
  int n = snprintf(text, sizeof(text), "{\"type\": \"byte\", \"vocab_size\": %d}\n",
                   tok->vocab_size);
  const void *parts[1] = {text};
  size_t lens[1] = {(size_t)n};
  return loom__write_file_atomic(path, parts, lens, 1, err, errlen);
}

size_t loom_tokenizer_encode(const loom_tokenizer *tok, const char *text, size_t len,
                             int32_t *out_tokens, size_t max) {
  (void)tok; /* only the byte tokenizer exists */
  const unsigned char *p = (const unsigned char *)text;
  size_t n = len < max ? len : max;
  for (size_t i = 0; i < n; i++) out_tokens[i] = p[i];
  return len;
}

int loom_tokenizer_decode(const loom_tokenizer *tok, int32_t token, char *buf, size_t bufsize) {
  char piece[8];
  int n;
  if (token < 0 || token >= tok->vocab_size || token > 255) {
    n = snprintf(piece, sizeof(piece), "?");
  } else if ((token >= 0x20 && token < 0x7f) || token == '\n' || token == '\t' || token >= 0x80) {
    piece[0] = (char)token;
    piece[1] = '\0';
    n = 1;
  } else {
    n = snprintf(piece, sizeof(piece), "\\x%02x", (unsigned)token);
  }
  if (bufsize > 0) {
    size_t k = (size_t)n < bufsize - 1 ? (size_t)n : bufsize - 1;
    memcpy(buf, piece, k);
    buf[k] = '\0';
  }
  return n;
}
