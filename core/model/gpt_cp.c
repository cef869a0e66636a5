/* Context parallel: the load-balanced chunks, the position embedding of the rank's chunks and
 * ring attention (gpt_cp.h). The ring (Liu et al. 2023, §3; Megatron-LM's
 * context_parallel's AttnFuncWithCPAndKVP2P): at step s = 0..cp-1 rank r holds the K/V of rank
 * (r - s) mod cp and merges their block into its out and lse; between steps every rank sends
 * the block it holds to rank r+1 and receives the next from r-1. Backward: the same ring; the
 * gradient of a block's K/V accumulates in a buffer that travels with it and, after the last
 * step, one more hop brings each rank the dK/dV of its own tokens. Per layer and micro-step
 * each rank sends (cp-1) K/V blocks forward and (cp-1) K/V plus (cp-1) dK/dV blocks backward,
 * each B*T/cp*2C/tp floats. */
#include "gpt_cp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OPS (m->dev->ops)
#define CTX (m->dev->ctx)

struct gpt_cp_state {
  int B, T, Cl;            /* the shape the buffers are for (T local) */
  float *kv[2], *dkv[2];   /* (B,T,2*Cl) each: K | V of one rank's tokens, and their gradient */
  float *wpe, *dwpe;       /* (T,C): the rank's rows of wpe, and their gradient */
};

static size_t al64(size_t bytes) { return (bytes + 63) / 64 * 64; }

size_t gpt_cp_scratch_bytes(const gpt_config *cfg, int B, int T) {
  if (cfg->cp_size <= 1) return 0;
  const int tp = cfg->tp_size > 1 ? cfg->tp_size : 1;
  const size_t kv = (size_t)B * T * 2 * (size_t)(cfg->n_embd / tp) * sizeof(float);
  const size_t wpe = (size_t)T * cfg->n_embd * sizeof(float);
  return 4 * al64(kv) + 2 * al64(wpe);
}

int gpt_cp_check(const gpt_config *cfg, const loom_dev *dev, char *err, size_t errlen) {
  const int cp = cfg->cp_size;
  if (cp <= 1) return LOOM_OK;
  const char *why = NULL;
  if (cfg->cp_rank < 0 || cfg->cp_rank >= cp) why = "its rank is outside [0, cp)";
  else if (cfg->dtype != LOOM_F32) why = "it runs in fp32 only (its block kernels are fp32)";
  else if (cfg->vocab_parallel && cfg->tp_size > 1) why = "it does not compose with vocab_parallel";
  else if (cfg->sequence_parallel) why = "it does not compose with sequence_parallel";
  else if (cfg->pp_first > 0 || (cfg->pp_end > 0 && cfg->pp_end != cfg->n_layer + 2))
    why = "it does not compose with pipeline stages";
  else if (!cfg->attn_lse) why = "it keeps flash attention's (out, lse) state (attn_lse)";
  if (why) {
    if (err) snprintf(err, errlen, "context parallel (cp %d): %s", cp, why);
    return LOOM_INVALID_CONFIG;
  }
  if (dev && (!dev->ops->attention_block_forward || !dev->ops->attention_block_backward)) {
    if (err)
      snprintf(err, errlen, "device '%s' (ABI %d.%d) has no attention_block_forward / "
               "attention_block_backward (ABI 1.13): context parallel's ring attention needs "
               "them", dev->ops->hdr.name, dev->ops->hdr.abi_major, dev->ops->hdr.abi_minor);
    return LOOM_UNSUPPORTED;
  }
  return LOOM_OK;
}

/* Global chunk j (0 or 1) of cp rank r. */
static int chunk_of(int cp, int r, int j) { return j == 0 ? r : 2 * cp - 1 - r; }

void gpt_cp_take(int32_t *dst, const int32_t *src, int B, int T, int cp, int rank) {
  const int L = T / (2 * cp);
  for (int b = 0; b < B; b++)
    for (int j = 0; j < 2; j++)
      memcpy(dst + (size_t)b * 2 * L + (size_t)j * L,
             src + (size_t)b * T + (size_t)chunk_of(cp, rank, j) * L, (size_t)L * sizeof *dst);
}

void gpt_cp_free(gpt_model *m) {
  struct gpt_cp_state *s = m->cp;
  if (!s) return;
  for (int i = 0; i < 2; i++) loom__dev_free(m->dev, s->kv[i]), loom__dev_free(m->dev, s->dkv[i]);
  loom__dev_free(m->dev, s->wpe);
  loom__dev_free(m->dev, s->dwpe);
  free(s);
  m->cp = NULL;
}

/* The buffers for local (B, T) (allocated once per shape; what gpt_cp_scratch_bytes counts). */
static struct gpt_cp_state *state(gpt_model *m, int B, int T) {
  const int Cl = m->cfg.n_embd / (m->cfg.tp_size > 1 ? m->cfg.tp_size : 1);
  struct gpt_cp_state *s = m->cp;
  if (s && s->B == B && s->T == T && s->Cl == Cl) return s;
  gpt_cp_free(m);
  s = m->cp = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->B = B, s->T = T, s->Cl = Cl;
  const size_t kv = (size_t)B * T * 2 * Cl * sizeof(float);
  const size_t wpe = (size_t)T * m->cfg.n_embd * sizeof(float);
  int ok = 1;
  for (int i = 0; i < 2; i++) {
    s->kv[i] = loom__dev_alloc(m->dev, kv, LOOM_MEM_COMM);
    s->dkv[i] = loom__dev_alloc(m->dev, kv, LOOM_MEM_COMM);
    ok = ok && s->kv[i] && s->dkv[i];
  }
  s->wpe = loom__dev_alloc(m->dev, wpe, LOOM_MEM_COMM);
  s->dwpe = loom__dev_alloc(m->dev, wpe, LOOM_MEM_COMM);
  if (!ok || !s->wpe || !s->dwpe) {
    gpt_cp_free(m);
    return NULL;
  }
  return s;
}

int gpt_cp_embed_forward(gpt_model *m, float *out, const int32_t *inp, const float *wte,
                         const float *wpe, int B, int T, int C) {
  struct gpt_cp_state *s = state(m, B, T);
  if (!s) return LOOM_NOMEM;
  const int L = T / 2;
  const size_t rows = (size_t)L * C;
  for (int j = 0; j < 2; j++)
    OPS->copy(CTX, s->wpe + j * rows, wpe + (size_t)chunk_of(m->cfg.cp_size, m->cfg.cp_rank, j) *
              rows, rows * sizeof(float));
  OPS->encoder_forward(CTX, out, inp, wte, s->wpe, B, T, C);
  return LOOM_OK;
}

int gpt_cp_embed_backward(gpt_model *m, float *dwte, float *dwpe, const float *dout,
                          const int32_t *inp, int B, int T, int C) {
  struct gpt_cp_state *s = state(m, B, T);
  if (!s) return LOOM_NOMEM;
  const int L = T / 2;
  const size_t rows = (size_t)L * C;
  OPS->memset_zero(CTX, s->dwpe, 2 * rows * sizeof(float));
  OPS->encoder_backward(CTX, dwte, s->dwpe, dout, inp, B, T, C);
  for (int j = 0; j < 2; j++)
    OPS->axpy(CTX, dwpe + (size_t)chunk_of(m->cfg.cp_size, m->cfg.cp_rank, j) * rows, 1.0f,
              s->dwpe + j * rows, rows);
  return LOOM_OK;
}

/* The geometry of this rank's queries against the K/V of cp rank `src`. */
static loom_attn_block_v1 block_of(const gpt_model *m, int B, int T, int NH, int HS, int src,
                                   int kv_stride) {
  const int cp = m->cfg.cp_size, r = m->cfg.cp_rank;
  loom_attn_block_v1 g = {.B = B, .NH = NH, .HS = HS, .n_chunks = 2, .chunk_len = T / 2,
                          .q_stride = 3 * NH * HS, .kv_stride = kv_stride};
  for (int j = 0; j < 2; j++) {
    g.q_chunk[j] = chunk_of(cp, r, j);
    g.k_chunk[j] = chunk_of(cp, src, j);
  }
  return g;
}

/* kv (B*T rows of 2*Cl) = the K | V columns of qkv (B*T rows of 3*Cl). */
static void pack_kv(gpt_model *m, float *kv, const float *qkv, size_t rows, int Cl) {
  for (size_t t = 0; t < rows; t++)
    OPS->copy(CTX, kv + t * 2 * Cl, qkv + t * 3 * Cl + Cl, 2 * (size_t)Cl * sizeof(float));
}

/* One hop of the ring: send n floats to cp rank r+1, receive n from r-1. */
static int hop(const gpt_hooks *h, const float *send, float *recv, size_t n) {
  if (!h || !h->cp_ring) return LOOM_INVALID_USAGE; /* a caller without the cp communicator */
  return h->cp_ring(h->ud, send, recv, n);
}

int gpt_cp_attention_forward(gpt_model *m, const gpt_hooks *h, float *out, float *lse,
                             const float *qkv, int B, int T, int NH, int HS) {
  const int cp = m->cfg.cp_size, r = m->cfg.cp_rank, Cl = NH * HS;
  struct gpt_cp_state *s = state(m, B, T);
  if (!s) return LOOM_NOMEM;
  const size_t n = (size_t)B * T * 2 * Cl;
  loom_attn_block_v1 g = block_of(m, B, T, NH, HS, r, 3 * Cl);
  OPS->attention_block_forward(CTX, out, lse, qkv, qkv + Cl, qkv + 2 * Cl, &g, 0);
  pack_kv(m, s->kv[0], qkv, (size_t)B * T, Cl);
  for (int step = 1, cur = 0; step < cp; step++, cur ^= 1) {
    int rc = hop(h, s->kv[cur], s->kv[cur ^ 1], n);
    if (rc != LOOM_OK) return rc;
    const float *kv = s->kv[cur ^ 1];
    g = block_of(m, B, T, NH, HS, (r - step + cp) % cp, 2 * Cl);
    OPS->attention_block_forward(CTX, out, lse, qkv, kv, kv + Cl, &g, 1);
  }
  return LOOM_OK;
}

int gpt_cp_attention_backward(gpt_model *m, const gpt_hooks *h, float *dqkv, const float *dout,
                              const float *qkv, const float *out, const float *lse, int B,
                              int T, int NH, int HS) {
  const int cp = m->cfg.cp_size, r = m->cfg.cp_rank, Cl = NH * HS;
  struct gpt_cp_state *s = state(m, B, T);
  if (!s) return LOOM_NOMEM;
  const size_t rows = (size_t)B * T, n = rows * 2 * Cl;
  loom_attn_block_v1 g = block_of(m, B, T, NH, HS, r, 3 * Cl);
  /* the rank's own block: its dK/dV go straight into dqkv */
  OPS->attention_block_backward(CTX, dqkv, dqkv + Cl, dqkv + 2 * Cl, dout, qkv, qkv + Cl,
                                qkv + 2 * Cl, out, lse, &g);
  pack_kv(m, s->kv[0], qkv, rows, Cl);
  int kc = 0, dc = 0; /* which of the two buffers holds the current K/V, dK/dV */
  int rc;
  for (int step = 1; step < cp; step++) {
    if ((rc = hop(h, s->kv[kc], s->kv[kc ^ 1], n)) != LOOM_OK) return rc;
    kc ^= 1;
    /* the block's dK/dV so far: none at its first visit (its owner wrote into its own dqkv),
     * else what the previous rank accumulated */
    if (step == 1) OPS->memset_zero(CTX, s->dkv[dc], n * sizeof(float));
    else if ((rc = hop(h, s->dkv[dc], s->dkv[dc ^ 1], n)) != LOOM_OK) return rc;
    else dc ^= 1;
    const float *kv = s->kv[kc];
    float *dkv = s->dkv[dc];
    g = block_of(m, B, T, NH, HS, (r - step + cp) % cp, 2 * Cl);
    OPS->attention_block_backward(CTX, dqkv, dkv, dkv + Cl, dout, qkv, kv, kv + Cl, out, lse,
                                  &g);
  }
  if (cp > 1) {
    /* the last hop: each block's dK/dV home to its owner, added into its dqkv */
    if ((rc = hop(h, s->dkv[dc], s->dkv[dc ^ 1], n)) != LOOM_OK) return rc;
    const float *mine = s->dkv[dc ^ 1];
    for (size_t t = 0; t < rows; t++)
      OPS->axpy(CTX, dqkv + t * 3 * Cl + Cl, 1.0f, mine + t * 2 * Cl, 2 * (size_t)Cl);
  }
  return LOOM_OK;
}
