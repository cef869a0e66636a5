/* Sequence parallel (Korthikanti et al. 2022, §4.2.2): gather / scatter along T, the
 * embedding's shard and the LayerNorms' gradient sum. See gpt_sp.h for the layout. */
#include "gpt_sp.h"

#include <loom/host_v1.h>

#define OPS (m->dev->ops)
#define CTX (m->dev->ctx)

static int cfg_tp(const gpt_config *c) { return c->tp_size > 1 ? c->tp_size : 1; }

int gpt_sp_on(const gpt_config *c, int T) {
  return c->sequence_parallel && cfg_tp(c) > 1 && T > 0 && T % cfg_tp(c) == 0;
}

size_t gpt_sp_rows(const gpt_config *c, int B, int T) {
  size_t N = (size_t)B * (size_t)T;
  return gpt_sp_on(c, T) ? N / (size_t)cfg_tp(c) : N;
}

/* Block (r, b) of the rank-major (tp, B, T/tp, C) staging <-> rows [r*Tl, (r+1)*Tl) of
 * sequence b of (B, T, C); to_full 1 copies staging -> full. */
static void permute(gpt_model *m, float *full, float *staged, int to_full) {
  const int tp = cfg_tp(&m->cfg), B = m->B, Tl = m->T / tp;
  const size_t TlC = (size_t)Tl * m->cfg.n_embd, TC = (size_t)m->T * m->cfg.n_embd;
  for (int r = 0; r < tp; r++)
    for (int b = 0; b < B; b++) {
      float *f = full + (size_t)b * TC + (size_t)r * TlC;
      float *s = staged + ((size_t)r * B + b) * TlC;
      if (to_full) OPS->copy(CTX, f, s, TlC * sizeof(float));
      else OPS->copy(CTX, s, f, TlC * sizeof(float));
    }
}

static size_t shard_floats(const gpt_model *m) {
  return gpt_sp_rows(&m->cfg, m->B, m->T) * (size_t)m->cfg.n_embd;
}

int gpt_sp_all_gather(gpt_model *m, const gpt_hooks *h, const float *shard, float *full,
                      float *stage) {
  if (!h || !h->tp_all_gather) return LOOM_INVALID_USAGE; /* a caller without the tp comm */
  if (m->B == 1) return h->tp_all_gather(h->ud, shard, full, shard_floats(m));
  int rc = h->tp_all_gather(h->ud, shard, stage, shard_floats(m));
  if (rc == LOOM_OK) permute(m, full, stage, 1);
  return rc;
}

int gpt_sp_reduce_scatter(gpt_model *m, const gpt_hooks *h, const float *full, float *shard,
                          float *stage) {
  if (!h || !h->tp_reduce_scatter) return LOOM_INVALID_USAGE;
  if (m->B == 1) return h->tp_reduce_scatter(h->ud, full, shard, shard_floats(m));
  permute(m, (float *)full, stage, 0); /* reads full only */
  return h->tp_reduce_scatter(h->ud, stage, shard, shard_floats(m));
}

void gpt_sp_take(gpt_model *m, const float *full, float *shard) {
  const int tp = cfg_tp(&m->cfg), r = m->cfg.tp_rank, Tl = m->T / tp;
  const size_t TlC = (size_t)Tl * m->cfg.n_embd, TC = (size_t)m->T * m->cfg.n_embd;
  for (int b = 0; b < m->B; b++)
    OPS->copy(CTX, shard + (size_t)b * TlC, full + (size_t)b * TC + (size_t)r * TlC,
              TlC * sizeof(float));
}

void gpt_sp_add_positions(gpt_model *m, float *x, const float *wpe) {
  const int Tl = m->T / cfg_tp(&m->cfg);
  const size_t TlC = (size_t)Tl * m->cfg.n_embd;
  const float *w = wpe + (size_t)m->cfg.tp_rank * TlC;
  for (int b = 0; b < m->B; b++)
    OPS->residual_forward(CTX, x + (size_t)b * TlC, x + (size_t)b * TlC, w, TlC);
}

void gpt_sp_embed_forward(gpt_model *m, float *out, const float *wte, const float *wpe) {
  const int Tl = m->T / cfg_tp(&m->cfg), r = m->cfg.tp_rank, C = m->cfg.n_embd;
  const size_t TlC = (size_t)Tl * C;
  /* each sequence's rows as a (1, T/tp) batch whose position 0 is r*T/tp: wpe from there */
  for (int b = 0; b < m->B; b++)
    OPS->encoder_forward(CTX, out + (size_t)b * TlC, m->inputs + (size_t)b * m->T + r * Tl, wte,
                         wpe + (size_t)r * TlC, 1, Tl, C);
}

void gpt_sp_grads_begin(gpt_model *m, gpt_sp_grads *g, gpt_param **ps, int n, float *buf) {
  g->n = n;
  g->buf = buf;
  g->floats = 0;
  for (int i = 0; i < n; i++) {
    g->p[i] = ps[i];
    g->saved[i] = ps[i]->gacc;
    ps[i]->gacc = buf + g->floats;
    g->floats += ps[i]->numel;
  }
  OPS->memset_zero(CTX, buf, g->floats * sizeof(float));
}

int gpt_sp_grads_end(gpt_model *m, const gpt_hooks *h, gpt_sp_grads *g) {
  for (int i = 0; i < g->n; i++) g->p[i]->gacc = g->saved[i];
  if (!h || !h->tp_reduce) return LOOM_INVALID_USAGE;
  int rc = h->tp_reduce(h->ud, g->buf, g->floats, LOOM_F32, LOOM_OP_SUM);
  if (rc != LOOM_OK) return rc;
  size_t off = 0;
  for (int i = 0; i < g->n; i++) {
    gpt_param *p = g->p[i];
    OPS->residual_forward(CTX, p->gacc, p->gacc, g->buf + off, p->numel);
    off += p->numel;
  }
  return LOOM_OK;
}

/* One counted collective's bytes, rounded as the host's counter rounds each call. */
static uint64_t counted(double bytes) { return (uint64_t)(bytes + 0.5); }

uint64_t gpt_sp_comm_bytes(const gpt_config *c, int B, int T, int n_blocks, int n_recomputed,
                           int elem) {
  if (!gpt_sp_on(c, T)) return 0;
  const double t = cfg_tp(c), C = c->n_embd, N = (double)B * T, ar = 2.0 * (t - 1) / t;
  const int vp = c->vocab_parallel != 0;
  const uint64_t h = counted((t - 1) * (N / t) * C * elem); /* one gather or scatter */
  uint64_t sum = (uint64_t)(10 * n_blocks + 3 * n_recomputed + 2 * (1 + vp)) * h;
  sum += (uint64_t)n_blocks * counted(ar * 4 * 4 * C) + counted(ar * 2 * 4 * C);
  if (vp) sum += counted(ar * 8 * N) + counted(ar * 2 * 8 * N); /* max, then sum + target */
  return sum;
}
