/* GPT-2's pre-tokenising regex through PCRE2 (see gpt2_pretok.h). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/gpt2_pretok.h"
#include "util/fs_util.h"

#include <pcre2.h>
#include <stdlib.h>

#ifndef PCRE2_MATCH_INVALID_UTF
#error "PCRE2 10.34 or newer is needed (PCRE2_MATCH_INVALID_UTF): Debian's libpcre2-dev"
#endif

/* Unicode's White_Space property (PropList.txt; unchanged since Unicode 6.3), inside a class:
 * what `\s` means to Python's `regex` module, which GPT-2's encoder.py runs the pattern with,
 * and to tiktoken and Hugging Face's tokenizers. Not PCRE2's `\s` (under UCP: the Z categories
 * and \t\n\v\f\r, without U+0085) nor JavaScript's (no U+0085, but U+FEFF): gpt-3-encoder
 * cuts "a \ufeffb" apart where GPT-2 does not. */
#define WHITE_SPACE "\\t\\n\\x{0b}\\f\\r \\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}" \
                    "\\x{2029}\\x{202f}\\x{205f}\\x{3000}"

static const char gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WHITE_SPACE "\\p{L}\\p{N}]+"
    "|[" WHITE_SPACE "]+(?![^" WHITE_SPACE "])|[" WHITE_SPACE "]+";

struct loom_gpt2_pretok {
  pcre2_code *code;
  pcre2_match_data *md;
};

loom_gpt2_pretok *loom_gpt2_pretok_create(char *err, size_t errlen) {
  loom_gpt2_pretok *p = calloc(1, sizeof *p);
  if (!p) {
    loom__set_err(err, errlen, "GPT-2 pre-tokeniser: out of memory");
    return NULL;
  }
  int ec;
  PCRE2_SIZE eo;
  p->code = pcre2_compile((PCRE2_SPTR)gpt2_pattern, PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &ec, &eo, NULL);
  if (!p->code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(ec, msg, sizeof msg);
    loom__set_err(err, errlen, "GPT-2 pre-tokeniser: PCRE2 cannot compile the regex at offset "
                  "%zu: %s", (size_t)eo, (const char *)msg);
    free(p);
    return NULL;
  }
  /* the JIT is several times faster; a PCRE2 built without it still matches, interpreted */
  (void)pcre2_jit_compile(p->code, PCRE2_JIT_COMPLETE);
  p->md = pcre2_match_data_create_from_pattern(p->code, NULL);
  if (!p->md) {
    pcre2_code_free(p->code);
    free(p);
    loom__set_err(err, errlen, "GPT-2 pre-tokeniser: out of memory");
    return NULL;
  }
  return p;
}

void loom_gpt2_pretok_free(loom_gpt2_pretok *p) {
  if (!p) return;
  pcre2_match_data_free(p->md);
  pcre2_code_free(p->code);
  free(p);
}

int loom_gpt2_pretok_next(loom_gpt2_pretok *p, const char *text, size_t len, size_t *pos,
                          size_t *start, size_t *plen) {
  size_t at = *pos;
  if (at >= len) return 0;
  int rc = pcre2_match(p->code, (PCRE2_SPTR)text, len, at, 0, p->md, NULL);
  size_t ms = len, me = len;
  if (rc > 0) {
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(p->md);
    ms = ov[0];
    me = ov[1];
  }
  /* every valid character matches one of the alternatives, so what lies before the next match
   * (or after the last) is invalid UTF-8: one piece of raw bytes */
  if (ms > at) {
    *start = at;
    *plen = ms - at;
    *pos = ms;
    return 1;
  }
  if (me == ms) me = ms + 1; /* no alternative matches empty; never loop on one */
  *start = ms;
  *plen = me - ms;
  *pos = me;
  return 1;
}
