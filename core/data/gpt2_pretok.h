/* GPT-2's pre-tokeniser: the regex that cuts text into the pieces BPE encodes separately,
 *
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *
 * run through PCRE2 (UTF + UCP, JIT-compiled when the library has a JIT), with GPT-2's meaning:
 * OpenAI's encoder.py runs it with Python's `regex` module, where `\s` is Unicode's White_Space
 * (tab, LF, VT, FF, CR, space, U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F,
 * U+205F, U+3000), so `\s` is spelled out as that set. Not JavaScript's `\s` (the npm
 * gpt-3-encoder's: U+FEFF instead of U+0085) nor PCRE2's own (no U+0085). `\p{L}` and `\p{N}`
 * are PCRE2's, from its Unicode version; they differ from another library's only at code points
 * assigned in between (tests/tokenizer/gpt2_classes.py lists them).
 *
 * Bytes that are not valid UTF-8 never match (PCRE2_MATCH_INVALID_UTF); each maximal run of them
 * becomes one piece of its own, so every byte string is cut into pieces that concatenate back to
 * it and byte-level BPE encodes any input. Valid UTF-8 is cut exactly as the reference cuts the
 * same text. */
#ifndef LOOM_CORE_GPT2_PRETOK_H
#define LOOM_CORE_GPT2_PRETOK_H

#include <stddef.h>

typedef struct loom_gpt2_pretok loom_gpt2_pretok;

/* Compile the regex. Returns NULL with PCRE2's message in err when it cannot (an old PCRE2
 * without PCRE2_MATCH_INVALID_UTF, 10.34+, is refused at build time instead). */
loom_gpt2_pretok *loom_gpt2_pretok_create(char *err, size_t errlen);
void loom_gpt2_pretok_free(loom_gpt2_pretok *p);

/* The next piece of text[0..len) at or after *pos: sets *start and *plen and moves *pos past it.
 * Returns 1, or 0 at the end of the text. Pieces are contiguous and cover every byte. */
int loom_gpt2_pretok_next(loom_gpt2_pretok *p, const char *text, size_t len, size_t *pos,
                          size_t *start, size_t *plen);

#endif
