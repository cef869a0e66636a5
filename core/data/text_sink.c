/* UTF-8 with replacement, streamed (see text_sink.h). The rules are the WHATWG / Unicode
 * "maximal subpart" ones that Python's and tiktoken's decoders follow. */
#include "data/text_sink.h"

static const char replacement[] = "\xEF\xBF\xBD"; /* U+FFFD */

void loom_text_sink_init(loom_text_sink *s, FILE *out) {
  s->out = out;
  s->npend = 0;
  s->need = 0;
}

/* One complete, valid character: shown unless it is a control character. */
static void emit(loom_text_sink *s, const unsigned char *c, int n) {
  unsigned cp = n == 1 ? c[0] : n == 2 ? ((c[0] & 0x1Fu) << 6 | (c[1] & 0x3Fu)) : 0x100;
  if (n == 1 && ((cp < 0x20 && cp != '\n' && cp != '\t') || cp == 0x7f))
    fprintf(s->out, "\\x%02x", cp);
  else if (n == 2 && cp >= 0x80 && cp <= 0x9f)
    fprintf(s->out, "\\u%04x", cp);
  else
    fwrite(c, 1, (size_t)n, s->out);
}

/* The range the second byte of a sequence led by `lead` must lie in (the first continuation
 * byte is where overlong forms, surrogates and code points above U+10FFFF are ruled out). */
static int second_ok(unsigned lead, unsigned b) {
  if (lead == 0xE0) return b >= 0xA0 && b <= 0xBF;
  if (lead == 0xED) return b >= 0x80 && b <= 0x9F;
  if (lead == 0xF0) return b >= 0x90 && b <= 0xBF;
  if (lead == 0xF4) return b >= 0x80 && b <= 0x8F;
  return b >= 0x80 && b <= 0xBF;
}

void loom_text_sink_put(loom_text_sink *s, const unsigned char *bytes, size_t n) {
  for (size_t i = 0; i < n; i++) {
    unsigned b = bytes[i];
    if (s->npend > 0) {
      int ok = s->npend == 1 ? second_ok(s->pend[0], b) : (b & 0xC0) == 0x80;
      if (ok) {
        s->pend[s->npend++] = (unsigned char)b;
        if (s->npend == s->need) {
          emit(s, s->pend, s->need);
          s->npend = 0;
        }
        continue;
      }
      /* the character broke off: one U+FFFD for what was held, then b starts afresh */
      fputs(replacement, s->out);
      s->npend = 0;
    }
    if (b < 0x80) {
      unsigned char c = (unsigned char)b;
      emit(s, &c, 1);
    } else if (b >= 0xC2 && b <= 0xDF) {
      s->pend[0] = (unsigned char)b; s->npend = 1; s->need = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
      s->pend[0] = (unsigned char)b; s->npend = 1; s->need = 3;
    } else if (b >= 0xF0 && b <= 0xF4) {
      s->pend[0] = (unsigned char)b; s->npend = 1; s->need = 4;
    } else {
      fputs(replacement, s->out); /* a stray continuation byte, C0, C1, F5..FF */
    }
  }
}

void loom_text_sink_flush(loom_text_sink *s) {
  if (s->npend > 0) fputs(replacement, s->out);
  s->npend = 0;
}
