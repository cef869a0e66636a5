/* GPT-2's byte-level BPE (Radford et al. 2019; OpenAI's encoder.py, the npm gpt-3-encoder).
 *
 * Encoding is two stages: the pre-tokeniser (gpt2_pretok.h) cuts the text into pieces, then each
 * piece's bytes start as one token each and the adjacent pair of lowest merge rank is merged,
 * every occurrence left to right, until no adjacent pair has a rank. Every intermediate token
 * of GPT-2's 50,000 merges is itself in the vocabulary, so the merge works on token ids: a hash
 * from (left id, right id) to (rank, merged id) replaces the reference's string pairs, and a
 * cache of recent pieces (the reference's `cache`) skips the merge for repeated words.
 *
 * Decoding is by table: token id -> its bytes (the vocabulary's strings through the inverse of
 * bytes_to_unicode). Bytes of adjacent tokens may form one UTF-8 character; showing them is the
 * text sink's job (text_sink.h).
 *
 * A loom_gpt2 is not thread-safe (the cache and the regex match data are mutated by encode). */
#ifndef LOOM_CORE_GPT2_BPE_H
#define LOOM_CORE_GPT2_BPE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define LOOM_GPT2_VOCAB 50257      /* 256 bytes + 50,000 merges + <|endoftext|> */
#define LOOM_GPT2_EOT 50256        /* <|endoftext|>, between documents */
#define LOOM_GPT2_MAX_TOKEN_BYTES 128 /* the longest GPT-2 token; checked at load */

typedef struct loom_gpt2 loom_gpt2;

/* Build the tokenizer from the vocabulary object `encoder` (token string -> id, as in
 * encoder.json: every id 0..n-1 exactly once, n <= 65536) and the merge list `merges` (array of
 * "LEFT RIGHT" strings in rank order, vocab.bpe's lines after the version line). `what` names
 * the source in messages. Returns the tokenizer, or NULL with a message naming `what` and the
 * entry at fault (a merge whose parts or result are not in the vocabulary, a token string that
 * is not made of bytes_to_unicode's characters, a duplicate id, ...). */
loom_gpt2 *loom_gpt2_create(json_t *encoder, json_t *merges, const char *what, char *err,
                            size_t errlen);
void loom_gpt2_free(loom_gpt2 *g);

/* Tokens in the vocabulary (50257 for GPT-2). */
int loom_gpt2_vocab_size(const loom_gpt2 *g);

/* The bytes token `id` stands for; *len gets their count (<= LOOM_GPT2_MAX_TOKEN_BYTES).
 * NULL with *len 0 for an id outside the vocabulary. */
const unsigned char *loom_gpt2_token_bytes(const loom_gpt2 *g, int id, size_t *len);

/* BPE-encode one pre-tokenised piece (any bytes, len >= 1) into out (room for len ids: a piece
 * never encodes to more tokens than bytes). Returns the number of ids written. */
size_t loom_gpt2_encode_piece(loom_gpt2 *g, const unsigned char *piece, size_t len,
                              int32_t *out);

/* Pre-tokenise and encode `len` bytes of `text` (any bytes; invalid UTF-8 is kept, see
 * gpt2_pretok.h). Writes at most `max` ids to out and returns how many the whole text needs,
 * like snprintf (at most len), or SIZE_MAX when out of memory. */
size_t loom_gpt2_encode(loom_gpt2 *g, const char *text, size_t len, int32_t *out, size_t max);

/* The pre-tokeniser this tokenizer uses (for callers that place pieces themselves). */
struct loom_gpt2_pretok *loom_gpt2_get_pretok(loom_gpt2 *g);

#endif
