/* The byte-level tokenizer: vocab 256, token = byte value.
 *
 * Its vocabulary file (vocab.json, written by loom-prepare next to the shards) is
 *   {"type": "byte", "vocab_size": 256}
 * The struct is plain data (no allocation), so loading twice or never freeing is harmless. The
 * "type" field leaves room for other tokenizers later: a loader that meets a type it does not know
 * fails with a message instead of guessing. */
#ifndef LOOM_CORE_TOKENIZER_H
#define LOOM_CORE_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#define LOOM_TOKENIZER_BYTE_VOCAB 256

typedef enum loom_tokenizer_type {
  LOOM_TOKENIZER_BYTE = 1, /* token = byte, vocab 256 */
} loom_tokenizer_type;

typedef struct loom_tokenizer {
  loom_tokenizer_type type;
  int vocab_size; /* token ids are 0 .. vocab_size-1 */
} loom_tokenizer;

/* Set `tok` to the byte tokenizer (what loading "" gives). */
void loom_tokenizer_init_bytes(loom_tokenizer *tok);

/* Load the vocabulary file at `path`; NULL or "" means plain bytes without a file.
 * Returns 0, or -1 with a one-line message naming the path and the reason (cannot open, not
 * JSON, unknown "type", "vocab_size" that does not match the type); `tok` is then the byte
 * tokenizer, so a caller that ignores the error still holds something usable. */
int loom_tokenizer_load(loom_tokenizer *tok, const char *path, char *err, size_t errlen);

/* Write the vocabulary file for `tok` to `path` (temporary name, fsync, rename).
 * Returns 0, or -1 with a message naming the path. */
int loom_tokenizer_save(const loom_tokenizer *tok, const char *path, char *err, size_t errlen);

/* Encode `len` bytes of `text` (any bytes, NUL included) into token ids.
 * Writes at most `max` tokens to `out_tokens` (which may be NULL when max == 0) and returns the
 * number of tokens the whole text encodes to, like snprintf: a return value > max means the
 * output was cut. For the byte tokenizer this is `len`, one token per byte. */
size_t loom_tokenizer_encode(const loom_tokenizer *tok, const char *text, size_t len,
                             int32_t *out_tokens, size_t max);

/* Decode one token into printable bytes for showing samples on a terminal.
 * Writes a NUL-terminated string into `buf` (at most bufsize-1 bytes, cut if it does not fit) and
 * returns its full length, like snprintf. Printable ASCII, '\n' and '\t' come out as themselves;
 * other control bytes (0x00-0x1f, 0x7f) come out as a visible escape "\xNN" so a sample never
 * sends control characters (ESC sequences, bells, carriage returns) to a terminal; bytes
 * 0x80-0xff come out raw so UTF-8 text decoded token by token prints correctly. A token outside
 * 0..vocab_size-1 decodes to "?". */
int loom_tokenizer_decode(const loom_tokenizer *tok, int32_t token, char *buf, size_t bufsize);

#endif
