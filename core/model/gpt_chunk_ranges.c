/* The ranges of an interleaved pipeline rank's model chunks (gpt_config.pp_chunks): their check
 * and one chunk's config alone. Plain functions of the config (gpt.c's gpt_init_ex checks the
 * ranges here; gpt_chunks.c runs the chunks). */
#include <stdio.h>

#include "gpt.h"

int gpt_chunks_check(const gpt_config *c, char *err, size_t errlen) {
  const int v = c->pp_chunks, top = c->n_layer + 1;
  if (v < 2 || v > GPT_MAX_CHUNKS) {
    if (err) snprintf(err, errlen, "model: %d pipeline chunks: expected 2..%d", v, GPT_MAX_CHUNKS);
    return LOOM_INVALID_CONFIG;
  }
  for (int k = 0; k < v; k++) {
    int f = c->pp_chunk_first[k], e = c->pp_chunk_end[k];
    if (f < 0 || e <= f || e > top + 1 || (k > 0 && f < c->pp_chunk_end[k - 1])) {
      if (err)
        snprintf(err, errlen, "model: pipeline chunk %d holds units [%d, %d): expected a "
                 "non-empty range inside [0, %d], after chunk %d's", k, f, e, top, k - 1);
      return LOOM_INVALID_CONFIG;
    }
  }
  int end = c->pp_end > 0 ? c->pp_end : top + 1;
  if (c->pp_first != c->pp_chunk_first[0] || end != c->pp_chunk_end[v - 1]) {
    if (err)
      snprintf(err, errlen, "model: pipeline stage units [%d, %d) are not the hull of its "
               "chunks [%d, %d)", c->pp_first, end, c->pp_chunk_first[0],
               c->pp_chunk_end[v - 1]);
    return LOOM_INVALID_CONFIG;
  }
  return LOOM_OK;
}

gpt_config gpt_chunk_config(const gpt_config *c, int chunk) {
  gpt_config r = *c;
  if (c->pp_chunks > 1) {
    r.pp_first = c->pp_chunk_first[chunk];
    r.pp_end = c->pp_chunk_end[chunk];
    r.pp_chunks = 0;
  }
  return r;
}
