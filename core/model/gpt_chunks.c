/* Model chunks of an interleaved pipeline rank (gpt_config.pp_chunks; Narayanan et al. 2021,
 * §2.2.1): the rank's model holds every chunk's units in one set of flat buffers, and a chunk's
 * forward, backward and boundary buffers are the stage functions' (gpt_stage_forward ...) run
 * with the model's range narrowed to that chunk for the call. Everything those functions
 * derive from the range — which units run, whether the chunk starts from its input buffer
 * (no embedding) or ends in its output buffer (no head), how many blocks a slot's activation
 * pool holds and the local index of each — is then the chunk's, while the parameter table,
 * the flat layout and the tied wte copy stay the whole rank's (decided once in gpt_init_ex). A
 * slot's pool is carved for the chunk it was first ensured under, so callers keep each
 * chunk's slots apart (the trainer numbers them chunk * n_micro + j). */
#include <stdio.h>

#include "gpt.h"

/* The model's range, narrowed to a chunk for one call and restored after it. */
typedef struct narrowed {
  int pp_first, pp_end, first_unit, last_unit, pp_chunks;
} narrowed;

static narrowed narrow(gpt_model *m, int chunk) {
  narrowed n = {m->cfg.pp_first, m->cfg.pp_end, m->first_unit, m->last_unit, m->cfg.pp_chunks};
  if (m->cfg.pp_chunks > 1) {
    m->cfg.pp_first = m->first_unit = m->cfg.pp_chunk_first[chunk];
    m->cfg.pp_end = m->cfg.pp_chunk_end[chunk];
    m->last_unit = m->cfg.pp_end - 1;
    m->cfg.pp_chunks = 0;
  }
  return n;
}

static void widen(gpt_model *m, const narrowed *n) {
  m->cfg.pp_first = n->pp_first, m->cfg.pp_end = n->pp_end, m->cfg.pp_chunks = n->pp_chunks;
  m->first_unit = n->first_unit, m->last_unit = n->last_unit;
}

static int chunk_ok(const gpt_model *m, int chunk) {
  return chunk >= 0 && chunk < gpt_n_chunks(&m->cfg);
}

int gpt_chunk_slot_ensure(gpt_model *m, int chunk, int slot, int B, int T) {
  if (!chunk_ok(m, chunk)) return LOOM_INVALID_USAGE;
  narrowed n = narrow(m, chunk);
  int rc = gpt_slot_ensure(m, slot, B, T);
  widen(m, &n);
  return rc;
}

int gpt_chunk_forward(gpt_model *m, int chunk, int slot, const int32_t *inputs_host,
                      const int32_t *targets_host, int B, int T, const gpt_hooks *hooks,
                      float *loss) {
  if (!chunk_ok(m, chunk)) return LOOM_INVALID_USAGE;
  narrowed n = narrow(m, chunk);
  int rc = gpt_stage_forward(m, slot, inputs_host, targets_host, B, T, hooks, loss);
  widen(m, &n);
  return rc;
}

int gpt_chunk_backward(gpt_model *m, int chunk, int slot, float dloss, const gpt_hooks *hooks) {
  if (!chunk_ok(m, chunk)) return LOOM_INVALID_USAGE;
  narrowed n = narrow(m, chunk);
  int rc = gpt_stage_backward(m, slot, dloss, hooks);
  widen(m, &n);
  return rc;
}

float *gpt_chunk_buffer(gpt_model *m, int chunk, int slot, int which) {
  if (!chunk_ok(m, chunk)) return NULL;
  narrowed n = narrow(m, chunk);
  float *b = gpt_stage_buffer(m, slot, which);
  widen(m, &n);
  return b;
}
