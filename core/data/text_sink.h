/* Showing a stream of token bytes as text on a terminal (samples).
 *
 * A token's bytes may end inside a UTF-8 character that the next token completes, so bytes are
 * joined first and decoded as UTF-8 with replacement, as tiktoken's decode does
 * (bytes.decode("utf-8", errors="replace")): each maximal invalid subsequence becomes one U+FFFD,
 * and an incomplete character is held back until the next bytes complete it (or flush replaces
 * it). So that a sample never drives the terminal, control characters other than '\n' and '\t'
 * (C0, DEL and the C1 range U+0080-U+009F, which holds CSI) are shown as "\xNN" / "\u00NN". */
#ifndef LOOM_CORE_TEXT_SINK_H
#define LOOM_CORE_TEXT_SINK_H

#include <stddef.h>
#include <stdio.h>

typedef struct loom_text_sink {
  FILE *out;
  unsigned char pend[4]; /* the start of a character not yet complete */
  int npend, need;       /* bytes held, bytes the character has in all */
} loom_text_sink;

/* Start a sink writing to `out`. */
void loom_text_sink_init(loom_text_sink *s, FILE *out);
/* Decode `n` bytes and write the complete characters. */
void loom_text_sink_put(loom_text_sink *s, const unsigned char *bytes, size_t n);
/* Write a held incomplete character as U+FFFD (end of the stream). */
void loom_text_sink_flush(loom_text_sink *s);

#endif
