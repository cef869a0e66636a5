/* GPT-2: parameter table, activations, forward and backward over units (see gpt.h).
 *
 * Legend: B = micro-batch, T = time, C = channels (n_embd), NH = heads, HS = C/NH, L = layers,
 * V = vocab, maxT = max_seq_len, N = B*T rows.
 *
 * Units: 0 = embedding, 1..L = block l = u-1, L+1 = head (ln_f, tied logits, cross-entropy).
 * gpt_forward / gpt_backward are loops over unit_forward / unit_backward with the hooks around
 * each call, so a pipeline plugin can later run any unit range. Layer code reaches parameters
 * only through m->params[i].data / .grad (the current views, which ZeRO-3 may redirect) and
 * tensor memory only through the device's table: nothing here dereferences device memory.
 *
 * Gradient contract (device_v1.h): parameter gradients accumulate (+=); the activation-gradient
 * scratch buffers are zeroed here before each kernel that accumulates into them. */
#include "gpt.h"
#include "gpt_cp.h"

#include <assert.h>
#include <limits.h>
#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loom/half_v1.h>
#include <loom/host_v1.h>

#include "../util/rng.h"
#include "gpt_sp.h"

/* ---- the parameter table: the one list of (role, name, shape, init) ---- */

typedef enum gpt_dim { D_NONE, D_C, D_3C, D_4C, D_V, D_MAXT } gpt_dim;
typedef enum gpt_init_kind {
  INIT_NORMAL, /* N(0, 0.02) */
  INIT_RESID,  /* N(0, 0.02/sqrt(2L)): projections into the residual stream */
  INIT_ZERO,
  INIT_ONE,
} gpt_init_kind;

/* X(role, name within the unit, rows, cols (D_NONE: 1-D), init). Order = flat-buffer order:
 * unit 0 is GPT_WTE..GPT_WPE, each block GPT_LN1_W..GPT_FCPROJ_B ("h.<l>." prefixed), the head
 * GPT_LNF_W..GPT_LNF_B. Weights are (out, in) like torch.nn.Linear. */
#define GPT_PARAM_TABLE(X)                                      \
  X(GPT_WTE, "wte", D_V, D_C, INIT_NORMAL)                      \
  X(GPT_WPE, "wpe", D_MAXT, D_C, INIT_NORMAL)                   \
  X(GPT_LN1_W, "ln_1.weight", D_C, D_NONE, INIT_ONE)            \
  X(GPT_LN1_B, "ln_1.bias", D_C, D_NONE, INIT_ZERO)             \
  X(GPT_QKV_W, "attn.qkv.weight", D_3C, D_C, INIT_NORMAL)       \
  X(GPT_QKV_B, "attn.qkv.bias", D_3C, D_NONE, INIT_ZERO)        \
  X(GPT_ATTPROJ_W, "attn.proj.weight", D_C, D_C, INIT_RESID)    \
  X(GPT_ATTPROJ_B, "attn.proj.bias", D_C, D_NONE, INIT_ZERO)    \
  X(GPT_LN2_W, "ln_2.weight", D_C, D_NONE, INIT_ONE)            \
  X(GPT_LN2_B, "ln_2.bias", D_C, D_NONE, INIT_ZERO)             \
  X(GPT_FC_W, "mlp.fc.weight", D_4C, D_C, INIT_NORMAL)          \
  X(GPT_FC_B, "mlp.fc.bias", D_4C, D_NONE, INIT_ZERO)           \
  X(GPT_FCPROJ_W, "mlp.proj.weight", D_C, D_4C, INIT_RESID)     \
  X(GPT_FCPROJ_B, "mlp.proj.bias", D_C, D_NONE, INIT_ZERO)      \
  X(GPT_LNF_W, "ln_f.weight", D_C, D_NONE, INIT_ONE)            \
  X(GPT_LNF_B, "ln_f.bias", D_C, D_NONE, INIT_ZERO)

typedef struct gpt_param_spec {
  const char *name;
  gpt_dim rows, cols;
  gpt_init_kind init;
} gpt_param_spec;

static const gpt_param_spec param_spec[] = {
#define GPT__SPEC(role, name, rows, cols, init) [role] = {name, rows, cols, init},
    GPT_PARAM_TABLE(GPT__SPEC)
#undef GPT__SPEC
};

/* Megatron's placement per role: column-parallel qkv and mlp.fc split their output rows (qkv as
 * three blocks q, k, v, so a rank holds its heads' rows of each), row-parallel attn.proj and
 * mlp.proj split their input columns; everything else (embeddings, LayerNorms, the row-parallel
 * biases) is replicated. */
static void role_split(gpt_param_role role, int *dim, int *parts) {
  *parts = 1;
  switch (role) {
    case GPT_QKV_W: case GPT_QKV_B: *dim = 0; *parts = 3; break;
    case GPT_FC_W: case GPT_FC_B: *dim = 0; break;
    case GPT_ATTPROJ_W: case GPT_FCPROJ_W: *dim = 1; break;
    default: *dim = -1; break;
  }
}

static int cfg_tp(const gpt_config *c) { return c->tp_size > 1 ? c->tp_size : 1; }
/* 1 under vocabulary parallel (gpt_config.vocab_parallel with tp > 1) */
static int cfg_vp(const gpt_config *c) { return c->vocab_parallel && cfg_tp(c) > 1; }

/* The pipeline stage of a config: units [first, last], and how many blocks it holds. */
static int cfg_last(const gpt_config *c) { return c->pp_end > 0 ? c->pp_end - 1 : c->n_layer + 1; }
static int cfg_block0(const gpt_config *c) { return c->pp_first >= 1 ? c->pp_first - 1 : 0; }
static int cfg_blocks(const gpt_config *c) {
  int lo = c->pp_first > 1 ? c->pp_first : 1, hi = cfg_last(c) < c->n_layer ? cfg_last(c)
                                                                             : c->n_layer;
  return hi >= lo ? hi - lo + 1 : 0;
}
static int cfg_has_head(const gpt_config *c) { return cfg_last(c) == c->n_layer + 1; }
/* 1 if the rank holds unit u: in [pp_first, last], and in one of its chunks when it has
 * several (gpt_config.pp_chunks). */
static int cfg_holds(const gpt_config *c, int u) {
  if (u < c->pp_first || u > cfg_last(c)) return 0;
  if (c->pp_chunks <= 1) return 1;
  for (int k = 0; k < c->pp_chunks; k++)
    if (u >= c->pp_chunk_first[k] && u < c->pp_chunk_end[k]) return 1;
  return 0;
}

enum {
  N_EMB_PARAMS = GPT_WPE - GPT_WTE + 1,
  N_BLOCK_PARAMS = GPT_FCPROJ_B - GPT_LN1_W + 1,
  N_HEAD_PARAMS = GPT_LNF_B - GPT_LNF_W + 1,
};

static int64_t dim_value(const gpt_config *c, gpt_dim d) {
  switch (d) {
    case D_NONE: return 1;
    case D_C: return c->n_embd;
    case D_3C: return 3 * (int64_t)c->n_embd;
    case D_4C: return 4 * (int64_t)c->n_embd;
    case D_V: return gpt_vocab_rows(c);
    case D_MAXT: return c->max_seq_len;
  }
  return 0;
}

/* First role of unit u and the index of its first tensor in m->params. */
static gpt_param_role unit_first_role(const gpt_model *m, int u) {
  if (u == 0) return GPT_WTE;
  return u <= m->cfg.n_layer ? GPT_LN1_W : GPT_LNF_W;
}

static int unit_first_param(const gpt_model *m, int u) {
  if (u == 0) return 0;
  if (u <= m->cfg.n_layer) return N_EMB_PARAMS + (u - 1) * N_BLOCK_PARAMS;
  return N_EMB_PARAMS + m->cfg.n_layer * N_BLOCK_PARAMS;
}

static int unit_param_count(const gpt_model *m, int u) {
  if (u == 0) return N_EMB_PARAMS;
  return u <= m->cfg.n_layer ? N_BLOCK_PARAMS : N_HEAD_PARAMS;
}

/* The tensor of `role` in unit u (its current data/grad views). */
static gpt_param *param(const gpt_model *m, int u, gpt_param_role role) {
  gpt_param *p = &m->params[unit_first_param(m, u) + (int)(role - unit_first_role(m, u))];
  assert(p->role == role && p->unit == u);
  return p;
}

/* ---- activations ---- */

/* Everything a forward saves for backward plus backward's scratch: one device allocation
 * (LOOM_MEM_ACTIVATIONS) carved into the tensors below, each 64-byte aligned. Under activation
 * checkpointing the per-block arrays hold only the blocks that keep them (Lf = blocks not under
 * GPT_CKPT_FULL, La = blocks not checkpointed at all, for att); a checkpointed block's other
 * tensors live in the model's shared recompute scratch (see block_acts_at). Under bf16/fp16
 * (acts16) ln1, qkv, atty, residual2, ln2, fch and fch_gelu hold 2-byte elements (uint16_t
 * behind the float pointer; see "16-bit saved values"); under acts_typed every tensor does but
 * the means, rstds, att and losses (and the recompute scratch alike; offsets through act_at). */
struct gpt_acts {
  float *pool;
  float *encoded;                     /* (B,T,C) wte[inp] + wpe */
  float *ln1, *ln1_mean, *ln1_rstd;   /* (Lf,B,T,C), (Lf,B,T), (Lf,B,T) */
  float *qkv;                         /* (Lf,B,T,3C/tp) this rank's heads' q, k, v */
  float *atty;                        /* (Lf,B,T,C/tp) attention output before the projection */
  float *att;                         /* (La,B,NH/tp,T,T) softmax probabilities, or under
                                         attn_lse (La,B,NH/tp,T) their row log-sum-exp */
  float *residual2;                   /* (Lf,B,T,C) residual + attention branch */
  float *ln2, *ln2_mean, *ln2_rstd;   /* (Lf,B,T,C), (Lf,B,T), (Lf,B,T) */
  float *fch, *fch_gelu;              /* (Lf,B,T,4C/tp) */
  float *residual3;                   /* (L,B,T,C) residual2 + MLP branch: the block's output,
                                         kept under every policy (the next block's input) */
  float *lnf, *lnf_mean, *lnf_rstd;   /* (B,T,C), (B,T), (B,T) */
  float *logits;                      /* (B,T,V) logits; dlogits after a training forward
                                         or any backward (written in place) */
  float *losses;                      /* (B,T) only with targets */
  /* backward scratch, reused by every unit */
  float *dres;     /* (B,T,C) gradient of the residual stream at the current unit */
  float *dln;      /* (B,T,C) gradient of a layernorm output (ln_1, ln_2, ln_f) */
  float *dscratch; /* block: dfch_gelu, dfch (B,T,4C), dqkv (B,T,3C), datty (B,T,C), datt
                      (B,NH,T,T) but for attn_lse -- see block_scratch(); head without the
                      fused classifier: a chunk of probs rows (head_crossentropy_chunked) */
  size_t dscratch_floats; /* capacity of dscratch */
  /* sequence parallel (gpt_sp_on; NULL otherwise): sp_x (B,T,C) the gathered LayerNorm output
   * / a row-parallel matmul's partial output / a gathered gradient, sp_dln (B,T/tp,C) a
   * LayerNorm output gradient's shard, sp_lng 4C the LayerNorms' partial weight gradients */
  float *sp_x, *sp_dln, *sp_lng;
  float *losses_host; /* host (B,T): losses copied back for the mean */
  size_t pool_floats; /* capacity of pool */
  size_t tokens_cap;  /* capacity of m->inputs, m->targets, losses_host (B*T entries) */
  int forward_done;   /* the last forward ran every unit */
  int dlogits_ready;  /* logits holds dlogits for dloss = dlogits_dloss (fused forward) */
  float dlogits_dloss;
};

/* The activations of one block, wherever they live (the slot's pool or the recompute
 * scratch). Shapes as in gpt_acts without the leading L. */
typedef struct block_acts {
  float *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att, *res2, *ln2, *ln2_mean, *ln2_rstd,
      *fch, *fch_gelu;
} block_acts;

/* ---- activation checkpointing: which block keeps what ---- */

/* 1 if block l (global, 0-based) is checkpointed (full or selective) under the config. */
static int block_checkpointed(const gpt_config *c, int l) {
  if (c->ckpt_policy == GPT_CKPT_NONE) return 0;
  int k = c->ckpt_every > 1 ? c->ckpt_every : 1;
  return l % k == 0;
}

/* 1 if block l keeps only its input (full recompute). */
static int block_full_ckpt(const gpt_config *c, int l) {
  return c->ckpt_policy == GPT_CKPT_FULL && block_checkpointed(c, l);
}

/* Among the stage's blocks before local block la: how many keep all their tensors (*full)
 * and how many keep their attention probabilities (*att). With la = the stage's block count,
 * the sizes of the per-block arrays. */
static void kept_before(const gpt_config *c, int block0, int la, size_t *full, size_t *att) {
  *full = *att = 0;
  for (int i = 0; i < la; i++) {
    *full += !block_full_ckpt(c, block0 + i);
    *att += !block_checkpointed(c, block0 + i);
  }
}

static size_t round16(size_t n) { return (n + 15) & ~(size_t)15; } /* 16 floats = 64 bytes */

/* Floats attention saves per (sequence, head) for backward: the (T,T) probabilities, or under
 * attn_lse (flash attention) the T row log-sum-exps. */
static size_t att_per_head(const gpt_config *c, int T) {
  return c->attn_lse ? (size_t)T : (size_t)T * T;
}

/* 1 if the kernels read and write 16-bit activation buffers (gpt_config.acts_typed, device ABI
 * 1.8): the whole model (no pipeline stage) without tensor parallel. */
static int acts_typed(const gpt_config *c) {
  return c->acts_typed && c->dtype != LOOM_F32 && !c->acts_f32 && cfg_tp(c) == 1 &&
         c->pp_first <= 0 && cfg_has_head(c);
}

/* 1 if the blocks' saved values are kept as 16-bit copies of fp32 buffers, widened for the
 * kernels (acts_f32 0 without acts_typed). */
static int acts16(const gpt_config *c) {
  return c->dtype != LOOM_F32 && !c->acts_f32 && !acts_typed(c);
}

/* Floats of pool space for n saved values: n fp32, or n 16-bit elements (n/2 floats) when
 * the config stores them in 16 bits (either way). */
static size_t saved_floats(const gpt_config *c, size_t n) {
  return acts16(c) || acts_typed(c) ? (n + 1) / 2 : n;
}

/* Floats of pool space for n elements of any other activation: 16-bit ones under acts_typed. */
static size_t act_floats(const gpt_config *c, size_t n) { return acts_typed(c) ? (n + 1) / 2 : n; }

typedef struct block_scratch {
  float *dfch_gelu, *dfch, *dqkv, *datty, *datt;
} block_scratch;

/* Carve a block's gradient scratch from `base` (NULL: just count); returns floats used. */
static size_t block_scratch_layout(block_scratch *s, float *base, const gpt_config *c, int B,
                                   int T) {
  /* local widths under tensor parallel: Cl = C/tp attention channels, NH/tp heads */
  size_t N = (size_t)B * T, Cl = (size_t)c->n_embd / cfg_tp(c), off = 0;
#define CARVE(field, count)                   \
  do {                                        \
    s->field = base ? base + off : NULL;      \
    off += round16(count);                    \
  } while (0)
  CARVE(dfch_gelu, act_floats(c, N * 4 * Cl));
  CARVE(dfch, act_floats(c, N * 4 * Cl));
  CARVE(dqkv, act_floats(c, N * 3 * Cl));
  CARVE(datty, act_floats(c, N * Cl));
  if (!c->attn_lse) CARVE(datt, (size_t)B * (c->n_head / cfg_tp(c)) * T * T);
  else s->datt = NULL; /* flash attention: no (B,NH,T,T) scratch */
#undef CARVE
  return off;
}

/* Carve the activations from `base` (NULL: just count); returns floats needed. */
static size_t acts_layout(gpt_acts *a, float *base, const gpt_config *c, int B, int T) {
  /* a pipeline stage holds its blocks' activations only, the head's only on the last stage */
  size_t N = (size_t)B * T, C = (size_t)c->n_embd, L = (size_t)cfg_blocks(c);
  size_t V = cfg_has_head(c) ? (size_t)gpt_vocab_local(c) : 0, off = 0; /* logit columns */
  /* tensor parallel: qkv, attention and the MLP hidden layer hold this rank's part only */
  size_t Cl = C / (size_t)cfg_tp(c), NHl = (size_t)(c->n_head / cfg_tp(c));
  size_t Lf, La; /* blocks that keep their tensors, their attention probabilities (or lse) */
  kept_before(c, cfg_block0(c), (int)L, &Lf, &La);
  /* sequence parallel: the residual region's rows per rank, B*T/tp (gpt_sp.h) */
  const size_t Nr = gpt_sp_rows(c, B, T), sp = gpt_sp_on(c, T);
  block_scratch bs;
  size_t scratch = L ? block_scratch_layout(&bs, NULL, c, B, T) : 0;
  /* the head's: dlogits always overwrite the logits (head_backward), so it needs only one
   * fp32 row of probs (a device without the fused classifier computes them a chunk of rows at
   * a time, head_crossentropy_chunked) -- no (B,T,V) buffer besides the logits */
  if (V && round16(V) > scratch) scratch = round16(V);
  /* vocabulary parallel: the embedding's backward masks a copy of dres here (N*C) */
  if (V && cfg_vp(c) && round16(N * C) > scratch) scratch = round16(N * C);
  /* 16-bit saved values: a block's forward computes in fp32 in this (then free) scratch,
   * block_forward16_views: ln1 / atty / ln2, qkv / fch, fch_gelu, residual2 */
  size_t fwd16 = 2 * round16(N * C) + 2 * round16(N * 4 * Cl);
  if (acts16(c) && L && fwd16 > scratch) scratch = fwd16;
#define CARVE(field, count)                   \
  do {                                        \
    a->field = base ? base + off : NULL;      \
    off += round16(count);                    \
  } while (0)
  CARVE(encoded, act_floats(c, Nr * C));
  CARVE(ln1, saved_floats(c, Lf * Nr * C));
  CARVE(ln1_mean, Lf * Nr);
  CARVE(ln1_rstd, Lf * Nr);
  CARVE(qkv, saved_floats(c, Lf * N * 3 * Cl));
  CARVE(atty, saved_floats(c, Lf * N * Cl));
  CARVE(att, La * B * NHl * att_per_head(c, (int)T));
  CARVE(residual2, saved_floats(c, Lf * Nr * C));
  CARVE(ln2, saved_floats(c, Lf * Nr * C));
  CARVE(ln2_mean, Lf * Nr);
  CARVE(ln2_rstd, Lf * Nr);
  CARVE(fch, saved_floats(c, Lf * N * 4 * Cl));
  CARVE(fch_gelu, saved_floats(c, Lf * N * 4 * Cl));
  CARVE(residual3, act_floats(c, L * Nr * C));
  size_t H = V ? 1 : 0;
  CARVE(lnf, act_floats(c, H * N * C)); /* gathered under sp: the head's GEMMs read all rows */
  CARVE(lnf_mean, H * Nr);
  CARVE(lnf_rstd, H * Nr);
  CARVE(logits, act_floats(c, N * V)); /* no probs buffer: dlogits are written in place */
  CARVE(losses, H * N);
  CARVE(dres, act_floats(c, Nr * C));
  CARVE(dln, act_floats(c, N * C));
  CARVE(dscratch, scratch);
  a->dscratch_floats = scratch;
  CARVE(sp_x, sp * N * C);
  CARVE(sp_dln, sp * Nr * C);
  CARVE(sp_lng, sp * 4 * C);
  if (!sp) a->sp_x = a->sp_dln = a->sp_lng = NULL;
#undef CARVE
  return off;
}

/* acts_layout's sizes are size_t products of config values (L*B*NH*T*T can exceed 2^64 for
 * absurd configs and would wrap to a small pool). An upper bound of the layout's total, in
 * double: per block row 16C + NH*T + 8 floats (ln, qkv, attention, MLP, residuals, stats), two
 * more blocks' worth for the embedding, head and scratch, 3 N*V (more than logits and scratch),
 * 64 per tensor for alignment. Below 2^52 floats every product in acts_layout is exact. */
static int acts_size_fits(const gpt_config *c, int B, int T) {
  double N = (double)B * T, C = c->n_embd, NH = c->n_head, L = cfg_blocks(c);
  double bound = (L + 2) * N * (16.0 * C + NH * T + 8) + 3.0 * N * gpt_vocab_rows(c) + 64.0 * 32;
  return B > 0 && T > 0 && bound < 4503599627370496.0; /* 2^52 */
}

/* The one size of the activation pool: acts_layout's count, which acts_ensure allocates;
 * SIZE_MAX when it does not fit 64-bit arithmetic (no allocation can succeed). */
size_t gpt_activation_bytes(const gpt_config *cfg, int B, int T) {
  if (!acts_size_fits(cfg, B, T)) return SIZE_MAX;
  gpt_acts probe;
  return acts_layout(&probe, NULL, cfg, B, T) * sizeof(float);
}

/* Carve the recompute scratch from `base` (NULL: just count); returns floats needed. Under
 * GPT_CKPT_FULL one whole block (a checkpointed block's tensors between its recompute and its
 * backward), under GPT_CKPT_SELECTIVE one block's attention probabilities; the fields it does not
 * carve are left NULL. */
static size_t recompute_layout(block_acts *b, float *base, const gpt_config *c, int B, int T) {
  memset(b, 0, sizeof *b);
  size_t nb = (size_t)cfg_blocks(c), any = 0;
  for (size_t i = 0; i < nb; i++) any |= (size_t)block_checkpointed(c, cfg_block0(c) + (int)i);
  if (!any && !(acts16(c) && nb)) return 0; /* acts16: the widening buffer below */
  size_t N = (size_t)B * T, C = (size_t)c->n_embd, Cl = C / (size_t)cfg_tp(c), off = 0;
  size_t NHl = (size_t)(c->n_head / cfg_tp(c)), Nr = gpt_sp_rows(c, B, T);
  int full = c->ckpt_policy == GPT_CKPT_FULL && any;
#define CARVE(field, count)                   \
  do {                                        \
    b->field = base ? base + off : NULL;      \
    off += round16(count);                    \
  } while (0)
  if (any) CARVE(att, (size_t)B * NHl * att_per_head(c, T));
  if (full) {
    CARVE(ln1, act_floats(c, Nr * C));
    CARVE(ln1_mean, Nr);
    CARVE(ln1_rstd, Nr);
    CARVE(qkv, act_floats(c, N * 3 * Cl));
    CARVE(atty, act_floats(c, N * Cl));
    CARVE(res2, act_floats(c, Nr * C));
    CARVE(ln2, act_floats(c, Nr * C));
    CARVE(ln2_mean, Nr);
    CARVE(ln2_rstd, Nr);
    CARVE(fch, act_floats(c, N * 4 * Cl));
    CARVE(fch_gelu, act_floats(c, N * 4 * Cl));
  } else if (acts16(c)) {
    /* 16-bit saved values: backward widens each one here just before the kernel that reads
     * it (the largest is (B,T,4C/tp)); under full checkpointing the block's fch serves */
    CARVE(fch, N * 4 * Cl);
  }
#undef CARVE
  return off;
}

size_t gpt_recompute_bytes(const gpt_config *cfg, int B, int T) {
  if (!acts_size_fits(cfg, B, T)) return SIZE_MAX;
  block_acts probe;
  return recompute_layout(&probe, NULL, cfg, B, T) * sizeof(float);
}

/* Grow the model's recompute scratch to fit (B,T); it is never shrunk (like the pools). */
static int recompute_ensure(gpt_model *m, int B, int T) {
  size_t bytes = gpt_recompute_bytes(&m->cfg, B, T);
  if (bytes == SIZE_MAX) return LOOM_NOMEM;
  size_t floats = bytes / sizeof(float);
  if (floats <= m->recompute_floats) return LOOM_OK;
  loom__dev_free(m->dev, m->recompute);
  m->recompute_floats = 0;
  m->recompute = loom__dev_alloc(m->dev, bytes, LOOM_MEM_ACTIVATIONS);
  if (!m->recompute) return LOOM_NOMEM;
  m->recompute_floats = floats;
  return LOOM_OK;
}

static void acts_free(gpt_model *m) {
  if (m->acts) {
    loom__dev_free(m->dev, m->acts->pool);
    free(m->acts->losses_host);
    free(m->acts);
    m->acts = NULL;
  }
  loom__dev_free(m->dev, m->inputs);
  loom__dev_free(m->dev, m->targets);
  m->inputs = m->targets = NULL;
  m->B = m->T = 0;
}

/* Make the activations fit (B,T). The pool is only reallocated when it is too small, so
 * alternating shapes (training micro-batches, then sampling with B=1) do not thrash. */
static int acts_ensure(gpt_model *m, int B, int T) {
  if (m->acts && m->B == B && m->T == T) return LOOM_OK;
  size_t N = (size_t)B * T;
  size_t bytes = gpt_activation_bytes(&m->cfg, B, T);
  if (bytes == SIZE_MAX) return LOOM_NOMEM; /* beyond any memory (see acts_size_fits) */
  if (recompute_ensure(m, B, T) != LOOM_OK) return LOOM_NOMEM;
  size_t floats = bytes / sizeof(float);
  if (!m->acts || floats > m->acts->pool_floats || N > m->acts->tokens_cap) {
    acts_free(m);
    gpt_acts *a = calloc(1, sizeof *a);
    if (!a) return LOOM_NOMEM;
    m->acts = a;
    a->pool = loom__dev_alloc(m->dev, floats * sizeof(float), LOOM_MEM_ACTIVATIONS);
    a->losses_host = malloc(N * sizeof(float));
    m->inputs = loom__dev_alloc(m->dev, N * sizeof(int32_t), LOOM_MEM_OTHER);
    m->targets = loom__dev_alloc(m->dev, N * sizeof(int32_t), LOOM_MEM_OTHER);
    if (!a->pool || !a->losses_host || !m->inputs || !m->targets) {
      acts_free(m);
      return LOOM_NOMEM;
    }
    a->pool_floats = floats;
    a->tokens_cap = N;
  }
  acts_layout(m->acts, m->acts->pool, &m->cfg, B, T);
  m->acts->forward_done = 0;
  m->B = B;
  m->T = T;
  return LOOM_OK;
}

/* ---- units ---- */

#define OPS (m->dev->ops)
#define CTX (m->dev->ctx)
#define W(role) (param(m, u, (role))->work)
#define G(role) (param(m, u, (role))->gacc)
#define P(role) (param(m, u, (role)))

/* Mixed precision: x (n floats) now holds what a 16-bit store would keep (no-op in fp32, and
 * under acts_typed, whose kernels store 16-bit elements themselves). */
static void store16(gpt_model *m, float *x, size_t n) {
  if (m->cfg.dtype != LOOM_F32 && !m->a16) OPS->round_to(CTX, x, (loom_dtype)m->cfg.dtype, n);
}

/* ---- the activations' element type ----
 * Activation pointers are float * throughout; under acts_typed (m->a16) they address 2-byte
 * elements, so every offset into one and every size of one goes through these. */
static size_t act_size(const gpt_model *m) { return m->a16 ? 2 : sizeof(float); }
/* Element i of the activation tensor at base. */
static float *act_at(const gpt_model *m, float *base, size_t i) {
  return (float *)((char *)base + i * act_size(m));
}
/* Zero n activation elements at x. */
static void act_zero(gpt_model *m, float *x, size_t n) {
  OPS->memset_zero(CTX, x, n * act_size(m));
}

/* ---- the GPT kernels: the device's acts16 table under acts_typed, its fp32 slots otherwise
 * (same arguments: an activation pointer addresses 16-bit elements with the former) ---- */
#define A16 (m->a16)
static void k_layernorm_forward(gpt_model *m, float *out, float *mean, float *rstd,
                                const float *inp, const float *w, const float *b, int N, int C) {
  if (A16) A16->layernorm_forward(CTX, out, mean, rstd, inp, w, b, N, C);
  else OPS->layernorm_forward(CTX, out, mean, rstd, inp, w, b, N, C);
}
static void k_layernorm_backward(gpt_model *m, float *dinp, float *dw, float *db, const float *dout,
                                 const float *inp, const float *w, const float *mean,
                                 const float *rstd, int N, int C) {
  if (A16) A16->layernorm_backward(CTX, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
  else OPS->layernorm_backward(CTX, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}
/* att: the probabilities, or under attn_lse the row log-sum-exps (flash attention) */
static void k_attention_forward(gpt_model *m, float *out, float *att, const float *qkv, int B,
                                int T, int NH, int HS) {
  if (m->cfg.attn_lse && A16) A16->attention_forward_lse(CTX, out, att, qkv, B, T, NH, HS);
  else if (m->cfg.attn_lse) OPS->attention_forward_lse(CTX, out, att, qkv, B, T, NH, HS);
  else if (A16) A16->attention_forward(CTX, out, att, qkv, B, T, NH, HS);
  else OPS->attention_forward(CTX, out, att, qkv, B, T, NH, HS);
}
/* out: the forward's output (read by the lse backward only); datt: scratch (materialised) */
static void k_attention_backward(gpt_model *m, float *dqkv, float *datt, const float *dout,
                                 const float *qkv, const float *out, const float *att, int B,
                                 int T, int NH, int HS) {
  if (m->cfg.attn_lse && A16)
    A16->attention_backward_lse(CTX, dqkv, dout, qkv, out, att, B, T, NH, HS);
  else if (m->cfg.attn_lse)
    OPS->attention_backward_lse(CTX, dqkv, dout, qkv, out, att, B, T, NH, HS);
  else if (A16) A16->attention_backward(CTX, dqkv, datt, dout, qkv, att, B, T, NH, HS);
  else OPS->attention_backward(CTX, dqkv, datt, dout, qkv, att, B, T, NH, HS);
}

/* Attention, or under context parallel its ring over the cp ranks (gpt_cp.c). */
static int attn_forward(gpt_model *m, const gpt_hooks *h, float *out, float *att,
                        const float *qkv, int B, int T, int NH, int HS) {
  if (m->cfg.cp_size > 1) return gpt_cp_attention_forward(m, h, out, att, qkv, B, T, NH, HS);
  k_attention_forward(m, out, att, qkv, B, T, NH, HS);
  return LOOM_OK;
}
static void k_gelu_forward(gpt_model *m, float *out, const float *inp, size_t n) {
  if (A16) A16->gelu_forward(CTX, out, inp, n);
  else OPS->gelu_forward(CTX, out, inp, n);
}
static void k_gelu_backward(gpt_model *m, float *dinp, const float *inp, const float *dout,
                            size_t n) {
  if (A16) A16->gelu_backward(CTX, dinp, inp, dout, n);
  else OPS->gelu_backward(CTX, dinp, inp, dout, n);
}
static void k_residual_forward(gpt_model *m, float *out, const float *a, const float *b,
                               size_t n) {
  if (A16) A16->residual_forward(CTX, out, a, b, n);
  else OPS->residual_forward(CTX, out, a, b, n);
}
static void k_crossentropy_fused(gpt_model *m, float *losses, float *dlogits, const float *logits,
                                 float dloss, int N, int V) {
  if (A16) A16->crossentropy_fused(CTX, losses, dlogits, logits, m->targets, dloss, N, V);
  else OPS->crossentropy_fused(CTX, losses, dlogits, logits, m->targets, dloss, N, V);
}

/* Device ABI 1.7: the block's and the head's GEMM weights are read in their 16-bit storage
 * (matmul_forward_w / matmul_backward_w): no fp32 working copy of them is made. */
static int gemm_weights16(const gpt_model *m) {
  return m->cfg.dtype != LOOM_F32 && m->cfg.param_dtype != LOOM_F32 && OPS->matmul_forward_w &&
         OPS->matmul_backward_w;
}
static int is_gemm_weight(gpt_param_role r) {
  return r == GPT_QKV_W || r == GPT_ATTPROJ_W || r == GPT_FC_W || r == GPT_FCPROJ_W;
}

/* out (N,OC) = inp @ w^T + bias with the weight tensor w: its 16-bit storage as is
 * (gemm_weights16) or its fp32 working copy (w->work). */
static void mm_forward(gpt_model *m, float *out, const float *inp, const gpt_param *w,
                       const float *bias, int N, int C, int OC) {
  if (A16)
    A16->matmul_forward(CTX, out, inp, gemm_weights16(m) ? w->data : w->work,
                        gemm_weights16(m) ? (loom_dtype)m->cfg.param_dtype : LOOM_F32, bias, N, C,
                        OC);
  else if (gemm_weights16(m))
    OPS->matmul_forward_w(CTX, out, inp, w->data, (loom_dtype)m->cfg.param_dtype, bias, N, C, OC);
  else
    OPS->matmul_forward(CTX, out, inp, w->work, bias, N, C, OC);
}
/* matmul_backward with the weight tensor w, as mm_forward. */
static void mm_backward(gpt_model *m, float *dinp, float *dweight, float *dbias, const float *dout,
                        const float *inp, const gpt_param *w, int N, int C, int OC) {
  if (A16)
    A16->matmul_backward(CTX, dinp, dweight, dbias, dout, inp,
                         gemm_weights16(m) ? w->data : w->work,
                         gemm_weights16(m) ? (loom_dtype)m->cfg.param_dtype : LOOM_F32, N, C, OC);
  else if (gemm_weights16(m))
    OPS->matmul_backward_w(CTX, dinp, dweight, dbias, dout, inp, w->data,
                           (loom_dtype)m->cfg.param_dtype, N, C, OC);
  else
    OPS->matmul_backward(CTX, dinp, dweight, dbias, dout, inp, w->work, N, C, OC);
}

/* Point p->work at what the kernels read: p->data in fp32; else the tensor's 16-bit values as
 * fp32, at *off floats into the shared working buffer — widened from 16-bit storage (exact),
 * or rounded from the fp32 master under the ABI 1.3 layout (param_dtype F32). */
static void weight_work(gpt_model *m, gpt_param *p, size_t *off) {
  if (m->cfg.dtype == LOOM_F32 || !p->data) {
    p->work = p->data;
    return;
  }
  if (is_gemm_weight(p->role) && gemm_weights16(m)) {
    p->work = NULL; /* read in place by mm_forward / mm_backward */
    return;
  }
  assert(*off + p->numel <= m->wwork_floats);
  p->work = m->wwork + *off;
  if (m->cfg.param_dtype != LOOM_F32) {
    OPS->convert(CTX, p->work, LOOM_F32, p->data, (loom_dtype)m->cfg.param_dtype, p->numel);
  } else {
    OPS->copy(CTX, p->work, p->data, p->numel * sizeof(float));
    OPS->round_to(CTX, p->work, (loom_dtype)m->cfg.dtype, p->numel);
  }
  *off += round16(p->numel);
}

/* The working weights of unit u (and, for the head, the tied wte it reads), after the unit's
 * pre-hooks have made its data views current (ZeRO-3 gathers them there). */
static void unit_weights(gpt_model *m, int u) {
  size_t off = 0;
  int first = unit_first_param(m, u), n = unit_param_count(m, u);
  for (int i = first; i < first + n; i++) weight_work(m, &m->params[i], &off);
  /* the head reads the tied wte only in its GEMMs (unit 0's encoder widens its own copy) */
  if (u == m->cfg.n_layer + 1) {
    if (!gemm_weights16(m)) weight_work(m, gpt_head_wte(m), &off);
    else gpt_head_wte(m)->work = NULL; /* not unit 0's stale copy: the head reads ->data */
  }
}

/* Floats of the working buffer: the largest unit's tensors (the head's with the tied wte). */
static size_t wwork_size(const gpt_model *m) {
  size_t best = 0;
  for (int u = m->first_unit; u <= m->last_unit; u++) {
    if (!cfg_holds(&m->cfg, u)) continue; /* between two chunks */
    size_t sum = 0;
    int first = unit_first_param(m, u), n = unit_param_count(m, u);
    for (int i = first; i < first + n; i++) sum += round16(m->params[i].numel);
    if (u == m->cfg.n_layer + 1) sum += round16(m->params[0].numel);
    if (sum > best) best = sum;
  }
  return best;
}

/* ---- 16-bit gradient storage ----
 * The tied wte's gradient has two contributors on a stage holding both the head and unit 0
 * (head first in backward): its fp32 accumulator is the first gwork_wte_floats of gwork,
 * zeroed when the first contributor's backward starts and added into the 16-bit buffer when
 * the last one's ends, so the two contributions are summed in fp32 and rounded once. */

static int grads16(const gpt_model *m) { return m->cfg.grad_dtype != LOOM_F32; }
static int has_head(const gpt_model *m) { return m->last_unit == m->cfg.n_layer + 1; }

/* The stage's tied-wte tensor with a gradient (unit 0's wte, or the head's copy). */
static gpt_param *stage_wte(gpt_model *m) {
  return m->first_unit == 0 ? param(m, 0, GPT_WTE) : gpt_head_wte(m);
}

/* Point each gacc of unit u at what its kernels accumulate into (after the pre_backward hooks
 * made the grad views current): grad itself, or a zeroed fp32 slot of gwork. */
static void unit_grads(gpt_model *m, int u) {
  int first = unit_first_param(m, u), n = unit_param_count(m, u);
  if (!grads16(m)) {
    for (int i = first; i < first + n; i++) m->params[i].gacc = m->params[i].grad;
    if (u == m->cfg.n_layer + 1) gpt_head_wte(m)->gacc = gpt_head_wte(m)->grad;
    return;
  }
  size_t off = m->gwork_wte_floats;
  for (int i = first; i < first + n; i++) {
    gpt_param *p = &m->params[i];
    if (u == 0 && p->role == GPT_WTE) continue;
    assert(off + p->numel <= m->gwork_floats);
    p->gacc = m->gwork + off;
    off += round16(p->numel);
  }
  OPS->memset_zero(CTX, m->gwork + m->gwork_wte_floats,
                   (off - m->gwork_wte_floats) * sizeof(float));
  gpt_param *w = u == 0 ? param(m, 0, GPT_WTE) : u == m->cfg.n_layer + 1 ? gpt_head_wte(m) : NULL;
  if (!w) return;
  w->gacc = m->gwork;
  /* the first contributor in backward order: the head when the stage has it */
  if (u == m->last_unit || (u == 0 && !has_head(m)))
    OPS->memset_zero(CTX, m->gwork, m->gwork_wte_floats * sizeof(float));
}

enum { GSTAGE_FLOATS = 16384 }; /* grad_flush's staging buffer (gpt_model.gstage): 64 KiB */

/* p->grad (16-bit) += p->gacc (fp32), rounded once to nearest even. */
static void grad_flush(gpt_model *m, gpt_param *p) {
  const loom_dtype dt = (loom_dtype)m->cfg.grad_dtype;
  const size_t es = loom_dtype_size(dt);
  for (size_t k = 0; k < p->numel; k += GSTAGE_FLOATS) {
    size_t c = p->numel - k < GSTAGE_FLOATS ? p->numel - k : GSTAGE_FLOATS;
    char *g16 = (char *)p->grad + k * es;
    OPS->convert(CTX, m->gstage, LOOM_F32, g16, dt, c);
    OPS->axpy(CTX, m->gstage, 1.0f, p->gacc + k, c);
    OPS->convert(CTX, g16, dt, m->gstage, LOOM_F32, c);
  }
}

/* After unit u's backward: its gradients into the 16-bit buffer (before post_backward, so a
 * data-parallel plugin sees final values); the tied wte's when u is its last contributor. */
static void unit_grads_done(gpt_model *m, int u) {
  if (!grads16(m)) return;
  int first = unit_first_param(m, u), n = unit_param_count(m, u);
  for (int i = first; i < first + n; i++)
    if (!(u == 0 && m->params[i].role == GPT_WTE) && m->params[i].grad)
      grad_flush(m, &m->params[i]);
  gpt_param *w = stage_wte(m);
  if ((u == 0 || (u == m->cfg.n_layer + 1 && m->first_unit > 0)) && w->grad) {
    w->gacc = m->gwork;
    grad_flush(m, w);
  }
}

/* Floats of the gradient scratch: the wte accumulator + the largest unit's other tensors. */
static void gwork_size(const gpt_model *m, size_t *total, size_t *wte) {
  *wte = m->first_unit == 0 || has_head(m) ? round16(m->params[0].numel) : 0;
  size_t best = 0;
  for (int u = m->first_unit; u <= m->last_unit; u++) {
    if (!cfg_holds(&m->cfg, u)) continue; /* between two chunks */
    size_t sum = 0;
    int first = unit_first_param(m, u), n = unit_param_count(m, u);
    for (int i = first; i < first + n; i++)
      if (!(u == 0 && m->params[i].role == GPT_WTE)) sum += round16(m->params[i].numel);
    if (sum > best) best = sum;
  }
  *total = *wte + best;
}

/* The residual stream entering block l (0-based), and the last block's output. */
static float *block_input(const gpt_model *m, int l) {
  size_t NC = gpt_sp_rows(&m->cfg, m->B, m->T) * m->cfg.n_embd; /* the residual's rows */
  int la = l - cfg_block0(&m->cfg); /* the stage's local block index */
  return la == 0 ? m->acts->encoded : act_at(m, m->acts->residual3, (size_t)(la - 1) * NC);
}

/* Call the tensor-parallel region hook (Megatron's f / g) when the model is split. */
static int region(gpt_model *m, const gpt_hooks *h, int which, int backward, float *buf,
                  size_t n) {
  if (cfg_tp(&m->cfg) == 1 || !h || !h->region) return LOOM_OK;
  return h->region(h->ud, which, backward, buf, n);
}

/* Where block l's (global, 0-based) activations live for the current slot and shape: its
 * place in the slot's per-block arrays (the index counts only the blocks that keep that
 * tensor), or the shared recompute scratch when the policy drops them. */
static void block_acts_at(const gpt_model *m, int l, block_acts *b) {
  const gpt_config *c = &m->cfg;
  gpt_acts *a = m->acts;
  const int B = m->B, T = m->T, la = l - cfg_block0(c);
  const size_t N = (size_t)B * T, NCl = N * c->n_embd / cfg_tp(c);
  const size_t Nr = gpt_sp_rows(c, B, T), NC = Nr * c->n_embd; /* the LayerNorms' rows */
  const size_t NHTT = (size_t)B * (c->n_head / cfg_tp(c)) * att_per_head(c, T);
  block_acts scratch;
  recompute_layout(&scratch, m->recompute, c, B, T);
  if (block_full_ckpt(c, l)) {
    *b = scratch;
    return;
  }
  size_t kf, ka;
  kept_before(c, cfg_block0(c), la, &kf, &ka);
  if (acts16(c)) { /* the values are widened one at a time into one buffer (load16) */
    *b = scratch;
    b->ln1 = b->qkv = b->atty = b->res2 = b->ln2 = b->fch_gelu = scratch.fch;
    b->ln1_mean = a->ln1_mean + kf * Nr;
    b->ln1_rstd = a->ln1_rstd + kf * Nr;
    b->att = block_checkpointed(c, l) ? scratch.att : a->att + ka * NHTT;
    b->ln2_mean = a->ln2_mean + kf * Nr;
    b->ln2_rstd = a->ln2_rstd + kf * Nr;
    return;
  }
  /* fp32, or 16-bit elements under acts_typed (act_at) */
  b->ln1 = act_at(m, a->ln1, kf * NC);
  b->ln1_mean = a->ln1_mean + kf * Nr;
  b->ln1_rstd = a->ln1_rstd + kf * Nr;
  b->qkv = act_at(m, a->qkv, kf * NCl * 3);
  b->atty = act_at(m, a->atty, kf * NCl);
  b->att = block_checkpointed(c, l) ? scratch.att : a->att + ka * NHTT;
  b->res2 = act_at(m, a->residual2, kf * NC);
  b->ln2 = act_at(m, a->ln2, kf * NC);
  b->ln2_mean = a->ln2_mean + kf * Nr;
  b->ln2_rstd = a->ln2_rstd + kf * Nr;
  b->fch = act_at(m, a->fch, kf * NCl * 4);
  b->fch_gelu = act_at(m, a->fch_gelu, kf * NCl * 4);
}

/* ---- 16-bit saved values (acts16) ----
 * A block that keeps its tensors stores its seven saved values in 2 bytes per element in the
 * slot's pool. Its forward computes them in fp32 in the slot's backward scratch (free during
 * the forward: block_forward16_views) and packs each one right after its 16-bit rounding
 * (save16: exact, the value is already representable); its backward widens each one (exact)
 * into the model's shared buffer just before the kernel that reads it (load16). A fully
 * checkpointed block keeps none of them (its recompute scratch is fp32). */
enum { SAVED_LN1, SAVED_QKV, SAVED_ATTY, SAVED_RES2, SAVED_LN2, SAVED_FCH, SAVED_FCH_GELU };

static int keeps16(const gpt_model *m, int l) {
  return acts16(&m->cfg) && !block_full_ckpt(&m->cfg, l);
}

/* Block l's 16-bit copy of saved tensor `which`, and its element count. */
static uint16_t *saved16_at(const gpt_model *m, int l, int which, size_t *n) {
  const gpt_config *c = &m->cfg;
  const size_t NC = (size_t)m->B * m->T * c->n_embd, NCl = NC / cfg_tp(c);
  const size_t NCr = gpt_sp_rows(c, m->B, m->T) * c->n_embd; /* sequence parallel: a shard */
  gpt_acts *a = m->acts;
  float *base = NULL;
  switch (which) {
    case SAVED_LN1: base = a->ln1, *n = NCr; break;
    case SAVED_QKV: base = a->qkv, *n = NCl * 3; break;
    case SAVED_ATTY: base = a->atty, *n = NCl; break;
    case SAVED_RES2: base = a->residual2, *n = NCr; break;
    case SAVED_LN2: base = a->ln2, *n = NCr; break;
    case SAVED_FCH: base = a->fch, *n = NCl * 4; break;
    default: base = a->fch_gelu, *n = NCl * 4; break;
  }
  size_t kf, ka;
  kept_before(c, cfg_block0(c), l - cfg_block0(c), &kf, &ka);
  return (uint16_t *)base + kf * *n; /* block kf of the (Lf, n) 16-bit array */
}

/* After store16 rounded x: keep it in 16 bits (no-op unless block l keeps 16-bit values). */
static void save16(gpt_model *m, int l, int which, const float *x) {
  if (!keeps16(m, l)) return;
  size_t n;
  uint16_t *h = saved16_at(m, l, which, &n);
  OPS->convert(CTX, h, (loom_dtype)m->cfg.dtype, x, LOOM_F32, n);
}

/* Before a backward kernel reads saved tensor `which` at x: widen it there from its 16-bit
 * copy (no-op unless block l keeps 16-bit values). Returns x. */
static const float *load16(gpt_model *m, int l, int which, float *x) {
  if (!keeps16(m, l)) return x;
  size_t n;
  const uint16_t *h = saved16_at(m, l, which, &n);
  OPS->convert(CTX, x, LOOM_F32, h, (loom_dtype)m->cfg.dtype, n);
  return x;
}

/* The fp32 places a 16-bit-keeping block's forward computes in, carved from the slot's
 * backward scratch (acts_layout sizes it): ln1, atty and ln2 share one (B,T,C) buffer, qkv
 * and fch one (B,T,4C/tp), fch_gelu its own, residual2 its own — each value is packed before
 * its buffer is written again. */
static void block_forward16_views(const gpt_model *m, block_acts *b) {
  const size_t N = (size_t)m->B * m->T, C = (size_t)m->cfg.n_embd;
  const size_t Cl = C / (size_t)cfg_tp(&m->cfg);
  float *x = m->acts->dscratch;
  b->ln1 = b->atty = b->ln2 = x;
  x += round16(N * C);
  b->qkv = b->fch = x;
  x += round16(N * 4 * Cl);
  b->fch_gelu = x;
  x += round16(N * 4 * Cl);
  b->res2 = x;
}

/* One block. Under tensor parallel (tp > 1) this rank computes NH/tp heads and 4C/tp hidden
 * units: qkv and mlp.fc are column-parallel (f before them), attn.proj and mlp.proj are
 * row-parallel (g after them, which sums the ranks' partial outputs); the row-parallel biases
 * are added by tp rank 0 only, so the sum holds them once.
 * recompute = 1 (full activation checkpointing, from block_backward): rebuild what backward
 * reads and stop before mlp.proj, whose output (the block's output, kept) backward does not
 * need; the attention's g region runs again (Megatron recomputes its all-reduce too). */
static int block_forward(gpt_model *m, int u, const gpt_hooks *h, int recompute) {
  const int tp = cfg_tp(&m->cfg), rank0 = m->cfg.tp_rank == 0;
  const int l = u - 1, la = l - cfg_block0(&m->cfg), B = m->B, T = m->T, C = m->cfg.n_embd, NH = m->cfg.n_head / tp;
  const int Cl = C / tp; /* this rank's attention channels (NH/tp heads x HS) */
  const int HS = m->cfg.n_embd / m->cfg.n_head;
  const int N = B * T;
  const size_t NC = (size_t)N * C, NCl = (size_t)N * Cl;
  const float *res_in = block_input(m, l);
  block_acts b;
  block_acts_at(m, l, &b);
  if (keeps16(m, l)) block_forward16_views(m, &b);
  /* sequence parallel (gpt_sp.h): the LayerNorms and residuals run on the rank's Nr = N/tp
   * rows; ḡ gathers the LayerNorm output into sp_x (staged in dln, free in forward), g
   * reduce-scatters a row-parallel output computed in sp_x */
  const int sp = gpt_sp_on(&m->cfg, T), Nr = sp ? N / tp : N;
  const size_t NCr = (size_t)Nr * C;
  float *spx = m->acts->sp_x, *stage = m->acts->dln;
  float *res3 = act_at(m, m->acts->residual3, (size_t)la * NCr);
  int rc;

  /* store16: the 16-bit stores of mixed precision (no-ops in fp32); LayerNorm's mean and rstd
   * stay fp32, as in every mixed-precision LayerNorm */
  k_layernorm_forward(m, b.ln1, b.ln1_mean, b.ln1_rstd, res_in, W(GPT_LN1_W), W(GPT_LN1_B),
                      Nr, C);
  store16(m, b.ln1, NCr);
  save16(m, l, SAVED_LN1, b.ln1);
  const float *x1 = sp ? spx : b.ln1;
  rc = sp ? gpt_sp_all_gather(m, h, b.ln1, spx, stage)
          : region(m, h, GPT_REGION_F, 0, b.ln1, NC);
  if (rc != LOOM_OK) return rc;
  mm_forward(m, b.qkv, x1, P(GPT_QKV_W), W(GPT_QKV_B), N, C, 3 * Cl);
  store16(m, b.qkv, NCl * 3);
  save16(m, l, SAVED_QKV, b.qkv);
  if ((rc = attn_forward(m, h, b.atty, b.att, b.qkv, B, T, NH, HS)) != LOOM_OK) return rc;
  store16(m, b.atty, NCl);
  save16(m, l, SAVED_ATTY, b.atty);
  float *o2 = sp ? spx : b.res2; /* the partial output, whole (B,T,C) */
  mm_forward(m, o2, b.atty, P(GPT_ATTPROJ_W), rank0 ? W(GPT_ATTPROJ_B) : NULL, N, Cl, C);
  store16(m, o2, NC);
  rc = sp ? gpt_sp_reduce_scatter(m, h, spx, b.res2, stage)
          : region(m, h, GPT_REGION_G, 0, b.res2, NC);
  if (rc != LOOM_OK) return rc;
  k_residual_forward(m, b.res2, b.res2, res_in, NCr);
  store16(m, b.res2, NCr);
  save16(m, l, SAVED_RES2, b.res2);
  k_layernorm_forward(m, b.ln2, b.ln2_mean, b.ln2_rstd, b.res2, W(GPT_LN2_W), W(GPT_LN2_B),
                      Nr, C);
  store16(m, b.ln2, NCr);
  save16(m, l, SAVED_LN2, b.ln2);
  const float *x2 = sp ? spx : b.ln2;
  rc = sp ? gpt_sp_all_gather(m, h, b.ln2, spx, stage)
          : region(m, h, GPT_REGION_F, 0, b.ln2, NC);
  if (rc != LOOM_OK) return rc;
  mm_forward(m, b.fch, x2, P(GPT_FC_W), W(GPT_FC_B), N, C, 4 * Cl);
  store16(m, b.fch, NCl * 4);
  save16(m, l, SAVED_FCH, b.fch);
  k_gelu_forward(m, b.fch_gelu, b.fch, NCl * 4);
  store16(m, b.fch_gelu, NCl * 4);
  save16(m, l, SAVED_FCH_GELU, b.fch_gelu);
  if (recompute) return LOOM_OK;
  float *o3 = sp ? spx : res3;
  mm_forward(m, o3, b.fch_gelu, P(GPT_FCPROJ_W), rank0 ? W(GPT_FCPROJ_B) : NULL, N, 4 * Cl,
             C);
  store16(m, o3, NC);
  rc = sp ? gpt_sp_reduce_scatter(m, h, spx, res3, stage)
          : region(m, h, GPT_REGION_G, 0, res3, NC);
  if (rc != LOOM_OK) return rc;
  k_residual_forward(m, res3, res3, b.res2, NCr);
  store16(m, res3, NCr);
  return LOOM_OK;
}

/* Entry: a->dres = d(block output). Exit: a->dres = d(block input). Under tensor parallel the
 * row-parallel biases' gradients are computed (identically) on every rank, and the input
 * gradient of each column-parallel matmul is summed over tp at f before its LayerNorm.
 * A checkpointed block first recomputes what it dropped: the whole forward (full, into the
 * recompute scratch) or, just before attention's backward, the attention probabilities
 * (selective). */
static int block_backward(gpt_model *m, int u, const gpt_hooks *h) {
  gpt_acts *a = m->acts;
  const int tp = cfg_tp(&m->cfg);
  const int l = u - 1, B = m->B, T = m->T, C = m->cfg.n_embd, NH = m->cfg.n_head / tp;
  const int Cl = C / tp, HS = m->cfg.n_embd / m->cfg.n_head;
  const int N = B * T;
  const size_t NC = (size_t)N * C, NCl = (size_t)N * Cl;
  const float *res_in = block_input(m, l);
  float *dres = a->dres, *dln = a->dln;
  block_scratch s;
  block_scratch_layout(&s, a->dscratch, &m->cfg, B, T);
  block_acts b;
  block_acts_at(m, l, &b);
  int rc;
  if (block_full_ckpt(&m->cfg, l) && (rc = block_forward(m, u, h, 1)) != LOOM_OK) return rc;
  /* sequence parallel: dres is the rank's (B,T/tp,C) shard; g's backward gathers it into sp_x,
   * the saved LayerNorm output is gathered again for the weight gradient (Megatron keeps the
   * shard only), ḡ's backward reduce-scatters the partial d(LayerNorm output) into sp_dln;
   * the LayerNorms' weight gradients (from N/tp rows) are summed over tp at the end */
  const int sp = gpt_sp_on(&m->cfg, T), Nr = sp ? N / tp : N;
  float *spx = a->sp_x;
  gpt_sp_grads lng;
  gpt_param *lnp[4] = {P(GPT_LN1_W), P(GPT_LN1_B), P(GPT_LN2_W), P(GPT_LN2_B)};
  if (sp) gpt_sp_grads_begin(m, &lng, lnp, 4, a->sp_lng);

  /* MLP branch: res3 = res2 + fcproj(gelu(fc(ln2(res2)))); d(fcproj out) = dres */
  const float *dout = sp ? spx : dres;
  rc = sp ? gpt_sp_all_gather(m, h, dres, spx, dln) : region(m, h, GPT_REGION_G, 1, dres, NC);
  if (rc != LOOM_OK) return rc;
  act_zero(m, s.dfch_gelu, NCl * 4);
  mm_backward(m, s.dfch_gelu, G(GPT_FCPROJ_W), G(GPT_FCPROJ_B), dout,
              load16(m, l, SAVED_FCH_GELU, b.fch_gelu), P(GPT_FCPROJ_W), N, 4 * Cl, C);
  store16(m, s.dfch_gelu, NCl * 4);
  act_zero(m, s.dfch, NCl * 4);
  k_gelu_backward(m, s.dfch, load16(m, l, SAVED_FCH, b.fch), s.dfch_gelu, NCl * 4);
  store16(m, s.dfch, NCl * 4);
  const float *x2 = load16(m, l, SAVED_LN2, b.ln2);
  if (sp && (rc = gpt_sp_all_gather(m, h, b.ln2, spx, dln)) != LOOM_OK) return rc;
  act_zero(m, dln, NC);
  mm_backward(m, dln, G(GPT_FC_W), G(GPT_FC_B), s.dfch, sp ? spx : x2, P(GPT_FC_W), N, C,
              4 * Cl);
  store16(m, dln, NC);
  const float *dl = sp ? a->sp_dln : dln;
  rc = sp ? gpt_sp_reduce_scatter(m, h, dln, a->sp_dln, spx)
          : region(m, h, GPT_REGION_F, 1, dln, NC);
  if (rc != LOOM_OK) return rc;
  store16(m, (float *)dl, (size_t)Nr * C); /* the tp sum of 16-bit partials, in 16 bits again */
  /* dres becomes d(res2): the skip path (already in dres) plus the branch */
  k_layernorm_backward(m, dres, G(GPT_LN2_W), G(GPT_LN2_B), dl,
                       load16(m, l, SAVED_RES2, b.res2), W(GPT_LN2_W),
                       b.ln2_mean, b.ln2_rstd, Nr, C);
  store16(m, dres, (size_t)Nr * C);
  /* attention branch: res2 = res_in + proj(attn(qkv(ln1(res_in)))) */
  rc = sp ? gpt_sp_all_gather(m, h, dres, spx, dln) : region(m, h, GPT_REGION_G, 1, dres, NC);
  if (rc != LOOM_OK) return rc;
  act_zero(m, s.datty, NCl);
  mm_backward(m, s.datty, G(GPT_ATTPROJ_W), G(GPT_ATTPROJ_B), dout,
              load16(m, l, SAVED_ATTY, b.atty), P(GPT_ATTPROJ_W), N, Cl, C);
  store16(m, s.datty, NCl);
  /* selective: the probabilities (or lse) again from the saved q, k (the attention output it
   * also writes goes to dfch_gelu, free by now: the saved atty stays untouched) */
  load16(m, l, SAVED_QKV, b.qkv); /* read by the selective recompute and attention_backward */
  if (block_checkpointed(&m->cfg, l) && !block_full_ckpt(&m->cfg, l) &&
      (rc = attn_forward(m, h, s.dfch_gelu, b.att, b.qkv, B, T, NH, HS)) != LOOM_OK)
    return rc;
  /* the lse backward reads the saved output as well; 16-bit saved copies widen it into
   * dfch_gelu (b.atty shares qkv's widening buffer), after the recompute that used it */
  const float *atty = b.atty;
  if (m->cfg.attn_lse && keeps16(m, l)) atty = load16(m, l, SAVED_ATTY, s.dfch_gelu);
  act_zero(m, s.dqkv, NCl * 3);
  if (m->cfg.cp_size > 1)
    rc = gpt_cp_attention_backward(m, h, s.dqkv, s.datty, b.qkv, atty, b.att, B, T, NH, HS);
  else
    k_attention_backward(m, s.dqkv, s.datt, s.datty, b.qkv, atty, b.att, B, T, NH, HS);
  if (rc != LOOM_OK) return rc;
  store16(m, s.dqkv, NCl * 3);
  const float *x1 = load16(m, l, SAVED_LN1, b.ln1);
  if (sp && (rc = gpt_sp_all_gather(m, h, b.ln1, spx, dln)) != LOOM_OK) return rc;
  act_zero(m, dln, NC);
  mm_backward(m, dln, G(GPT_QKV_W), G(GPT_QKV_B), s.dqkv, sp ? spx : x1, P(GPT_QKV_W), N, C,
              3 * Cl);
  store16(m, dln, NC);
  rc = sp ? gpt_sp_reduce_scatter(m, h, dln, a->sp_dln, spx)
          : region(m, h, GPT_REGION_F, 1, dln, NC);
  if (rc != LOOM_OK) return rc;
  store16(m, (float *)dl, (size_t)Nr * C);
  k_layernorm_backward(m, dres, G(GPT_LN1_W), G(GPT_LN1_B), dl, res_in, W(GPT_LN1_W),
                       b.ln1_mean, b.ln1_rstd, Nr, C);
  store16(m, dres, (size_t)Nr * C);
  return sp ? gpt_sp_grads_end(m, h, &lng) : LOOM_OK;
}

/* 1 if the device has the fused classifier (NULL: the separate crossentropy_forward /
 * crossentropy_backward kernels, head_crossentropy_chunked). */
static int has_fused_classifier(const gpt_model *m) {
  return m->a16 || OPS->crossentropy_fused != NULL;
}

/* Without the fused classifier (a device built before ABI 1.4): the separate kernels a chunk of
 * rows at a time, each chunk's probs in the backward scratch (acts_layout keeps no (B,T,V) probs
 * buffer, one row at least); losses for every row and, when `dlogits`, dlogits over the logits
 * in place. Per row the same operations as one call over all N rows, so the same bits (a
 * backward after a loss-only forward computes the probs a second time). */
static void head_crossentropy_chunked(gpt_model *m, int dlogits, float dloss, int N, int V) {
  gpt_acts *a = m->acts;
  size_t fit = a->dscratch_floats / (size_t)V; /* >= 1 (acts_layout) */
  const int rows = fit < (size_t)N ? (int)fit : N;
  for (int r = 0; r < N; r += rows) {
    const int n = N - r < rows ? N - r : rows;
    float *logits = a->logits + (size_t)r * V;
    OPS->crossentropy_forward(CTX, a->losses + r, a->dscratch, logits, m->targets + r, n, V);
    if (dlogits)
      OPS->crossentropy_backward(CTX, logits, a->dscratch, m->targets + r, dloss, n, V);
  }
}

/* ---- vocabulary parallel (gpt_config.vocab_parallel, Megatron-LM §3) ---- */

/* The tp all-reduce the vocabulary-parallel parts need (gpt_hooks.tp_reduce). */
static int vp_reduce(const gpt_hooks *h, void *buf, size_t n, loom_dtype dt, loom_red_op op) {
  if (!h || !h->tp_reduce) return LOOM_INVALID_USAGE; /* a caller without the tp comm */
  return h->tp_reduce(h->ud, buf, n, (int)dt, (int)op);
}

/* First global vocabulary row this rank holds. */
static int vp_first(const gpt_model *m) { return m->cfg.tp_rank * gpt_vocab_local(&m->cfg); }

/* Buffers for N = B*T rows (gpt_model.vp_*), grown when N grows. */
static int vp_ensure(gpt_model *m, size_t N) {
  if (N <= m->vp_rows && m->vp_ids) return LOOM_OK;
  const size_t TC = (size_t)m->cfg.max_seq_len * m->cfg.n_embd;
  const size_t zn = TC > N ? TC : N; /* a zero wpe, and N zero ids */
  loom__dev_free(m->dev, m->vp_ids);
  loom__dev_free(m->dev, m->vp_zero);
  loom__dev_free(m->dev, m->vp_junk);
  loom__dev_free(m->dev, m->vp_red);
  free(m->vp_host);
  free(m->vp_in_host);
  free(m->vp_tg_host);
  free(m->vp_stats);
  free(m->vp_host_mx);
  m->vp_rows = 0;
  m->vp_ids = loom__dev_alloc(m->dev, 2 * N * sizeof(int32_t), LOOM_MEM_OTHER); /* + targets */
  m->vp_zero = loom__dev_alloc(m->dev, zn * sizeof(float), LOOM_MEM_OTHER);
  m->vp_junk = loom__dev_alloc(m->dev, TC * sizeof(float), LOOM_MEM_OTHER);
  m->vp_red = loom__dev_alloc(m->dev, 2 * N * sizeof(double), LOOM_MEM_OTHER);
  m->vp_host_floats = N; /* a value per row */
  m->vp_host = malloc(m->vp_host_floats * sizeof(float));
  m->vp_in_host = malloc(N * sizeof(int32_t));
  m->vp_tg_host = malloc(N * sizeof(int32_t));
  m->vp_stats = malloc(3 * N * sizeof(double));
  m->vp_host_mx = malloc(N * sizeof(double));
  if (!m->vp_host_mx || !m->vp_ids || !m->vp_zero || !m->vp_junk || !m->vp_red ||
      !m->vp_host || !m->vp_in_host || !m->vp_tg_host || !m->vp_stats)
    return LOOM_NOMEM;
  OPS->memset_zero(CTX, m->vp_zero, zn * sizeof(float));
  m->vp_rows = N;
  return LOOM_OK;
}

/* The forward's ids as the split lookup needs them: local ids (clamped to 0 outside the rank's
 * rows, which vp_zero_rows then clears) on the device, the global ids and the targets' local
 * columns (-1: another rank's) on the host. */
static void vp_set_ids(gpt_model *m, const int32_t *in, const int32_t *tg, size_t N) {
  const int v0 = vp_first(m), Vl = gpt_vocab_local(&m->cfg);
  int32_t *loc = m->vp_tg_host; /* staging for the device ids, then the targets */
  for (size_t i = 0; i < N; i++) {
    m->vp_in_host[i] = in[i];
    loc[i] = in[i] >= v0 && in[i] < v0 + Vl ? in[i] - v0 : 0;
  }
  OPS->from_host(CTX, m->vp_ids, loc, N * sizeof(int32_t));
  for (size_t i = 0; i < N; i++)
    loc[i] = tg && tg[i] >= v0 && tg[i] < v0 + Vl ? tg[i] - v0 : -1;
  int32_t *col = (int32_t *)m->vp_host; /* the fused classifier's targets: column 0 if not ours */
  for (size_t i = 0; i < N; i++) col[i] = loc[i] >= 0 ? loc[i] : 0;
  OPS->from_host(CTX, m->vp_ids + N, col, N * sizeof(int32_t));
}

/* Zero the rows (C floats each) of x whose input id another rank holds. */
static void vp_zero_rows(gpt_model *m, float *x, int C) {
  const int v0 = vp_first(m), Vl = gpt_vocab_local(&m->cfg);
  const size_t N = (size_t)m->B * m->T;
  for (size_t i = 0; i < N;) {
    if (m->vp_in_host[i] >= v0 && m->vp_in_host[i] < v0 + Vl) { i++; continue; }
    size_t j = i;
    while (j < N && !(m->vp_in_host[j] >= v0 && m->vp_in_host[j] < v0 + Vl)) j++;
    OPS->memset_zero(CTX, x + i * C, (j - i) * C * sizeof(float));
    i = j;
  }
}

/* VocabParallelEmbedding: encoded = sum over tp of (wte slice's row or 0) + wpe[t], the same
 * value as the whole table's lookup (x + 0 is exact, wpe added after the sum). */
static int vp_embed_forward(gpt_model *m, int u, const gpt_hooks *h) {
  const int B = m->B, T = m->T, C = m->cfg.n_embd;
  const size_t N = (size_t)B * T, TC = (size_t)T * C;
  const int sp = gpt_sp_on(&m->cfg, T); /* the sum reduce-scattered along T, Megatron's */
  float *enc = sp ? m->acts->sp_x : m->acts->encoded;
  OPS->encoder_forward(CTX, enc, m->vp_ids, W(GPT_WTE), m->vp_zero, B, T, C);
  vp_zero_rows(m, enc, C);
  int rc = sp ? gpt_sp_reduce_scatter(m, h, enc, m->acts->encoded, m->acts->dln)
              : vp_reduce(h, enc, N * C, LOOM_F32, LOOM_OP_SUM);
  if (rc != LOOM_OK) return rc;
  if (sp) gpt_sp_add_positions(m, m->acts->encoded, W(GPT_WPE));
  else for (int b = 0; b < B; b++)
    OPS->residual_forward(CTX, enc + b * TC, enc + b * TC, W(GPT_WPE), TC);
  return LOOM_OK;
}

/* Its backward: dres is whole on every rank; the slice's rows get the rows of their ids
 * (the others' zeroed, added to local row 0 as 0), wpe the whole dres. Two calls of the
 * encoder's backward, each one's other output going to vp_junk. */
static void vp_embed_backward(gpt_model *m, int u, const float *dres) {
  const int B = m->B, T = m->T, C = m->cfg.n_embd;
  const size_t NC = (size_t)B * T * C, TC = (size_t)m->cfg.max_seq_len * C;
  float *d = m->acts->dscratch; /* >= N*C floats (acts_layout's block scratch) */
  OPS->copy(CTX, d, dres, NC * sizeof(float));
  vp_zero_rows(m, d, C);
  OPS->memset_zero(CTX, m->vp_junk, TC * sizeof(float));
  OPS->encoder_backward(CTX, G(GPT_WTE), m->vp_junk, d, m->vp_ids, B, T, C);
  OPS->memset_zero(CTX, m->vp_junk, TC * sizeof(float));
  OPS->encoder_backward(CTX, m->vp_junk, G(GPT_WPE), dres, (const int32_t *)m->vp_zero, B, T,
                        C);
}

/* The vocabulary-parallel cross-entropy with the device's fused classifier over the slice (one
 * pass, its exp): run on the slice with column c_r (the target if this rank owns it, else 0) it
 * gives the slice's log-sum-exp lse_r = loss_r + l[r, c_r] and, in place, the slice's softmax
 * p_l (minus 1 at c_r). The global LSE_r = logsumexp over the ranks of lse_r (max all-reduced,
 * then sum of exp(lse_r - M)); loss = LSE_r - l_t (l_t from its owner, all-reduced with the
 * sum); dlogits = p_l * exp(lse_r - LSE_r) * dloss per row (OPS->scale), the c_r element set
 * to that product minus dloss on the owner. Rows whose slice is all padding cannot occur
 * (check_config: Vp - V < Vp/tp). */
static int vp_crossentropy_fused(gpt_model *m, const gpt_hooks *h, int write_d, float dloss) {
  gpt_acts *a = m->acts;
  const int N = m->B * m->T, V = gpt_vocab_local(&m->cfg);
  double *lse = m->vp_host_mx, *mx = m->vp_stats, *sum = mx + N, *lt = sum + N;
  const int32_t *tl = m->vp_tg_host;
  float *xc = m->vp_host; /* l[r, c_r] before the in-place kernel */
  for (int r = 0; r < N; r++)
    OPS->to_host(CTX, xc + r, a->logits + (size_t)r * V + (tl[r] >= 0 ? tl[r] : 0),
                 sizeof(float));
  /* fp32 buffers under tp (no acts16 table): the device's fp32 kernel */
  OPS->crossentropy_fused(CTX, a->losses, write_d ? a->logits : NULL, a->logits, m->vp_ids + N,
                          1.0f, N, V);
  OPS->to_host(CTX, a->losses_host, a->losses, (size_t)N * sizeof(float));
  for (int r = 0; r < N; r++) {
    lse[r] = (double)a->losses_host[r] + xc[r];
    lt[r] = tl[r] >= 0 ? xc[r] : 0.0;
  }
  OPS->from_host(CTX, m->vp_red, lse, (size_t)N * sizeof(double));
  int rc = vp_reduce(h, m->vp_red, (size_t)N, LOOM_F64, LOOM_OP_MAX);
  if (rc != LOOM_OK) return rc;
  OPS->to_host(CTX, mx, m->vp_red, (size_t)N * sizeof(double));
  for (int r = 0; r < N; r++) sum[r] = exp(lse[r] - mx[r]);
  OPS->from_host(CTX, m->vp_red, sum, 2 * (size_t)N * sizeof(double)); /* sum, lt adjacent */
  if ((rc = vp_reduce(h, m->vp_red, 2 * (size_t)N, LOOM_F64, LOOM_OP_SUM)) != LOOM_OK) return rc;
  OPS->to_host(CTX, sum, m->vp_red, 2 * (size_t)N * sizeof(double));
  for (int r = 0; r < N; r++) {
    const double LSE = mx[r] + log(sum[r]);
    a->losses_host[r] = (float)(LSE - lt[r]);
    sum[r] = LSE; /* kept for the scale below */
  }
  OPS->from_host(CTX, a->losses, a->losses_host, (size_t)N * sizeof(float));
  if (!write_d) return LOOM_OK;
  for (int r = 0; r < N; r++) {
    const float alpha = (float)exp(lse[r] - sum[r]) * dloss;
    float *row = a->logits + (size_t)r * V, *dc = row + (tl[r] >= 0 ? tl[r] : 0), v;
    OPS->scale(CTX, row, alpha, (size_t)V);
    OPS->to_host(CTX, &v, dc, sizeof v); /* (p_l - 1) * alpha */
    v = (v + alpha) - (tl[r] >= 0 ? dloss : 0.0f);
    OPS->from_host(CTX, dc, &v, sizeof v);
  }
  return LOOM_OK;
}

/* ln_f, the tied logits and the loss. A training forward (gpt_set_train_dloss: dloss known
 * before the forward) also writes dlogits in place over the logits, so the (B,T,V) buffer is
 * written once by the GEMM and read once by backward's two GEMMs, and no probs buffer exists
 * (llm.c's fused_classifier). */
static int head_forward(gpt_model *m, int u, const gpt_hooks *h) {
  gpt_acts *a = m->acts;
  const int N = m->B * m->T, C = m->cfg.n_embd, V = gpt_vocab_local(&m->cfg);
  const size_t NV = (size_t)N * V;
  const gpt_param *wte = gpt_head_wte(m); /* tied: the head reads unit 0's wte (or its copy) */
  /* sequence parallel: ln_f on the rank's rows into sp_dln, gathered into lnf (ḡ before the
   * head, whose GEMMs read every row) */
  const int sp = gpt_sp_on(&m->cfg, m->T);
  k_layernorm_forward(m, sp ? a->sp_dln : a->lnf, a->lnf_mean, a->lnf_rstd,
                      block_input(m, m->cfg.n_layer), W(GPT_LNF_W), W(GPT_LNF_B),
                      (int)gpt_sp_rows(&m->cfg, m->B, m->T), C);
  if (sp) {
    int rc = gpt_sp_all_gather(m, h, a->sp_dln, a->lnf, a->dln);
    if (rc != LOOM_OK) return rc;
  }
  store16(m, a->lnf, (size_t)N * C);
  /* a padded vocabulary's extra columns get -inf (logits_mask): probability 0, so the loss,
   * dlogits (probs - one-hot: 0 there) and every gradient are the unpadded model's */
  mm_forward(m, a->logits, a->lnf, wte, m->logits_mask, N, C, V);
  store16(m, a->logits, NV); /* the loss is then computed in fp32 from these */
  a->dlogits_ready = 0;
  if (!m->has_targets) return LOOM_OK;
  const int train = m->train_dloss != 0.0f;
  int rc = LOOM_OK;
  if (cfg_vp(&m->cfg))
    rc = vp_crossentropy_fused(m, h, train, m->train_dloss); /* losses_host set */
  else if (has_fused_classifier(m))
    k_crossentropy_fused(m, a->losses, train ? a->logits : NULL, a->logits, m->train_dloss, N,
                         V); /* NULL: the loss only */
  else
    head_crossentropy_chunked(m, train, m->train_dloss, N, V);
  if (train) {
    store16(m, a->logits, NV); /* dlogits, rounded as every stored activation */
    a->dlogits_ready = 1;
    a->dlogits_dloss = m->train_dloss;
  }
  if (rc != LOOM_OK) return rc;
  if (!cfg_vp(&m->cfg)) OPS->to_host(CTX, a->losses_host, a->losses, (size_t)N * sizeof(float));
  double sum = 0.0;
  for (int i = 0; i < N; i++) sum += a->losses_host[i];
  m->mean_loss = (float)(sum / N);
  return LOOM_OK;
}

/* x (n activation elements) *= alpha: in place in fp32; 16-bit ones (acts_typed) widened a
 * chunk at a time into the backward scratch (free here: dlogits live in the logits buffer),
 * scaled and rounded once, as the fp32 buffer's scale + store16. */
static void dlogits_rescale(gpt_model *m, float *x, float alpha, size_t n) {
  if (!m->a16) {
    OPS->scale(CTX, x, alpha, n);
    return;
  }
  const loom_dtype dt = (loom_dtype)m->cfg.dtype;
  const size_t chunk = (size_t)m->B * m->T * m->cfg.n_embd; /* dscratch holds more floats */
  float *w = m->acts->dscratch;
  for (size_t k = 0; k < n; k += chunk) {
    size_t c = n - k < chunk ? n - k : chunk;
    void *x16 = act_at(m, x, k);
    OPS->convert(CTX, w, LOOM_F32, x16, dt, c);
    OPS->scale(CTX, w, alpha, c);
    OPS->convert(CTX, x16, dt, w, LOOM_F32, c);
  }
}

/* dlogits (unless the training forward left them in the logits buffer), then the two GEMMs of
 * the tied head and ln_f's backward. After a loss-only forward they overwrite the logits here
 * (gpt_logits_row then returns dlogits, as after a training forward): no (B,T,V) buffer besides
 * the logits, the head's share of the activations (issue 20's 55 % target). */
static int head_backward(gpt_model *m, int u, float dloss, const gpt_hooks *h) {
  gpt_acts *a = m->acts;
  const int N = m->B * m->T, C = m->cfg.n_embd, V = gpt_vocab_local(&m->cfg);
  const size_t NC = (size_t)N * C, NV = (size_t)N * V;
  const gpt_param *wte = gpt_head_wte(m);
  float *dlogits = a->logits; /* (B,T,V) */
  if (a->dlogits_ready) {
    /* a caller that changed its mind about dloss since the forward: dlogits are linear in it
     * (rounds once more; the trainer passes the forward's dloss, so this does not run) */
    if (dloss != a->dlogits_dloss) {
      dlogits_rescale(m, dlogits, dloss / a->dlogits_dloss, NV);
      store16(m, dlogits, NV);
      a->dlogits_dloss = dloss;
    }
  } else {
    if (cfg_vp(&m->cfg)) {
      int rc = vp_crossentropy_fused(m, h, 1, dloss);
      if (rc != LOOM_OK) return rc;
    } else if (has_fused_classifier(m))
      k_crossentropy_fused(m, a->losses, dlogits, a->logits, dloss, N, V); /* in place */
    else
      head_crossentropy_chunked(m, 1, dloss, N, V);
    store16(m, dlogits, NV);
    a->dlogits_ready = 1; /* a second backward of this forward reads them from here */
    a->dlogits_dloss = dloss;
  }
  act_zero(m, a->dln, NC);
  mm_backward(m, a->dln, wte->gacc, NULL, dlogits, a->lnf, wte, N, C, V);
  /* sequence parallel: the rank's rows of d(ln_f output), reduce-scattered from the slices'
   * partials (vocab_parallel) or taken from the replicated head's whole one; ln_f's weight
   * gradients (from N/tp rows) summed over tp */
  const int sp = gpt_sp_on(&m->cfg, m->T);
  const size_t Nr = gpt_sp_rows(&m->cfg, m->B, m->T);
  float *dl = sp ? a->sp_dln : a->dln;
  int rc = LOOM_OK;
  if (sp && cfg_vp(&m->cfg)) rc = gpt_sp_reduce_scatter(m, h, a->dln, dl, a->sp_x);
  else if (sp) gpt_sp_take(m, a->dln, dl);
  else if (cfg_vp(&m->cfg)) /* the slices' partial d(ln_f output): Megatron's f before the head */
    rc = vp_reduce(h, a->dln, NC, LOOM_F32, LOOM_OP_SUM);
  if (rc != LOOM_OK) return rc;
  store16(m, dl, Nr * C);
  gpt_sp_grads lng;
  gpt_param *lnp[2] = {P(GPT_LNF_W), P(GPT_LNF_B)};
  if (sp) gpt_sp_grads_begin(m, &lng, lnp, 2, a->sp_lng);
  act_zero(m, a->dres, Nr * C);
  k_layernorm_backward(m, a->dres, G(GPT_LNF_W), G(GPT_LNF_B), dl,
                       block_input(m, m->cfg.n_layer), W(GPT_LNF_W), a->lnf_mean, a->lnf_rstd,
                       (int)Nr, C);
  store16(m, a->dres, Nr * C);
  return sp ? gpt_sp_grads_end(m, h, &lng) : LOOM_OK;
}

static int unit_forward(gpt_model *m, int u, const gpt_hooks *h) {
  unit_weights(m, u);
  if (u == 0 && cfg_vp(&m->cfg)) {
    int rc = vp_embed_forward(m, u, h);
    if (rc != LOOM_OK) return rc;
    store16(m, m->acts->encoded, gpt_sp_rows(&m->cfg, m->B, m->T) * m->cfg.n_embd);
    return LOOM_OK;
  }
  if (u == 0 && gpt_sp_on(&m->cfg, m->T)) { /* the rank's positions only */
    gpt_sp_embed_forward(m, m->acts->encoded, W(GPT_WTE), W(GPT_WPE));
    store16(m, m->acts->encoded, gpt_sp_rows(&m->cfg, m->B, m->T) * m->cfg.n_embd);
    return LOOM_OK;
  }
  if (u == 0 && m->cfg.cp_size > 1)
    return gpt_cp_embed_forward(m, m->acts->encoded, m->inputs, W(GPT_WTE), W(GPT_WPE), m->B,
                                m->T, m->cfg.n_embd);
  if (u == 0) {
    if (A16)
      A16->encoder_forward(CTX, m->acts->encoded, m->inputs, W(GPT_WTE), W(GPT_WPE), m->B, m->T,
                           m->cfg.n_embd);
    else
      OPS->encoder_forward(CTX, m->acts->encoded, m->inputs, W(GPT_WTE), W(GPT_WPE), m->B, m->T,
                           m->cfg.n_embd);
    store16(m, m->acts->encoded, (size_t)m->B * m->T * m->cfg.n_embd);
    return LOOM_OK;
  }
  if (u <= m->cfg.n_layer) return block_forward(m, u, h, 0);
  return head_forward(m, u, h);
}

static int unit_backward(gpt_model *m, int u, float dloss, const gpt_hooks *h) {
  unit_weights(m, u);
  unit_grads(m, u);
  /* sequence parallel: the embedding's output was the rank's rows; its backward gathers the
   * gradient along T (sp_x), so wte and wpe get the whole sum on every rank */
  const float *dres = m->acts->dres;
  if (u == 0 && gpt_sp_on(&m->cfg, m->T)) {
    int rc = gpt_sp_all_gather(m, h, dres, m->acts->sp_x, m->acts->dln);
    if (rc != LOOM_OK) return rc;
    dres = m->acts->sp_x;
  }
  if (u == 0 && cfg_vp(&m->cfg)) {
    vp_embed_backward(m, u, dres);
  } else if (u == 0 && m->cfg.cp_size > 1) {
    int rc = gpt_cp_embed_backward(m, G(GPT_WTE), G(GPT_WPE), m->acts->dres, m->inputs, m->B,
                                   m->T, m->cfg.n_embd);
    if (rc != LOOM_OK) return rc;
  } else if (u == 0) {
    if (A16)
      A16->encoder_backward(CTX, G(GPT_WTE), G(GPT_WPE), dres, m->inputs, m->B, m->T,
                            m->cfg.n_embd);
    else
      OPS->encoder_backward(CTX, G(GPT_WTE), G(GPT_WPE), dres, m->inputs, m->B, m->T,
                            m->cfg.n_embd);
  } else if (u <= m->cfg.n_layer) {
    int rc = block_backward(m, u, h);
    if (rc != LOOM_OK) return rc;
  } else {
    int rc = head_backward(m, u, dloss, h);
    if (rc != LOOM_OK) return rc;
  }
  unit_grads_done(m, u);
  return LOOM_OK;
}

#undef W
#undef G
#undef P
#undef A16

/* ---- public API ---- */

/* *out = a zero-filled host copy of dev's acts16 table for dt (the part its struct_size covers:
 * a newer minor's table may be longer), every kernel this host calls present; free()d by
 * gpt_free. LOOM_UNSUPPORTED with err naming the device when it has none or an incomplete one. */
static int acts16_table(const loom_dev *dev, loom_dtype dt, loom_device_acts16_v1 **out,
                        char *err, size_t errlen) {
  const loom_device_v1 *d = dev->ops;
  const loom_device_acts16_v1 *t = d->acts16 ? d->acts16(dev->ctx, dt) : NULL;
  loom_device_acts16_v1 *c = t ? calloc(1, sizeof *c) : NULL;
  if (c) memcpy(c, t, t->struct_size < sizeof *c ? t->struct_size : sizeof *c);
  const char *dn = dt == LOOM_BF16 ? "bf16" : "fp16";
  if (c && (c->dtype != dt || !c->encoder_forward || !c->encoder_backward ||
            !c->layernorm_forward || !c->layernorm_backward || !c->matmul_forward ||
            !c->matmul_backward || !c->attention_forward || !c->attention_backward ||
            !c->gelu_forward || !c->gelu_backward || !c->residual_forward ||
            !c->crossentropy_fused)) {
    if (err)
      snprintf(err, errlen, "device '%s': its acts16 table for %s is not of that dtype or lacks a "
               "kernel (struct_size %u)", d->hdr.name, dn, (unsigned)t->struct_size);
    free(c);
    return LOOM_UNSUPPORTED;
  }
  if (!c) {
    if (err)
      snprintf(err, errlen, t ? "out of memory" : "device '%s' (ABI %d.%d) has no 16-bit "
               "activation kernels (acts16, ABI 1.8) for %s", d->hdr.name, d->hdr.abi_major,
               d->hdr.abi_minor, dn);
    return t ? LOOM_NOMEM : LOOM_UNSUPPORTED;
  }
  *out = c;
  return LOOM_OK;
}

int gpt_device_has_attn_lse(const gpt_config *cfg, const loom_dev *dev) {
  const loom_device_v1 *d = dev->ops;
  if (!d->attention_forward_lse || !d->attention_backward_lse) return 0;
  if (!acts_typed(cfg)) return 1;
  const loom_device_acts16_v1 *t = d->acts16 ? d->acts16(dev->ctx, (loom_dtype)cfg->dtype) : NULL;
  /* a table of an older minor ends before the 1.9 fields: they are not there */
  size_t need = offsetof(loom_device_acts16_v1, attention_backward_lse) +
                sizeof t->attention_backward_lse;
  return t && t->struct_size >= need && t->attention_forward_lse && t->attention_backward_lse;
}

size_t gpt_weight_work_bytes(const gpt_model *m) {
  return m->cfg.dtype == LOOM_F32 ? 0 : wwork_size(m) * sizeof(float);
}

size_t gpt_grad_work_bytes(const gpt_model *m) {
  if (!grads16(m)) return 0;
  size_t total, wte;
  gwork_size(m, &total, &wte);
  return (total + GSTAGE_FLOATS) * sizeof(float);
}

int gpt_work_category(const gpt_model *m) {
  return m->cfg.param_dtype != LOOM_F32 ? LOOM_MEM_OTHER : LOOM_MEM_PARAMS;
}

size_t gpt_param_elem_bytes(const gpt_model *m) {
  return loom_dtype_size((loom_dtype)m->cfg.param_dtype);
}
size_t gpt_grad_elem_bytes(const gpt_model *m) {
  return loom_dtype_size((loom_dtype)m->cfg.grad_dtype);
}

double gpt_param_count_estimate(int vocab_size, int max_seq_len, int n_layer, int n_embd) {
  double V = vocab_size, T = max_seq_len, L = n_layer, C = n_embd;
  return V * C + T * C + L * (12.0 * C * C + 13.0 * C) + 2.0 * C;
}

static int check_config(const gpt_config *c, char *err, size_t errlen) {
  const struct { const char *name; int value; } dims[] = {
      {"vocab_size", c->vocab_size}, {"max_seq_len", c->max_seq_len},
      {"n_layer", c->n_layer},       {"n_head", c->n_head},
      {"n_embd", c->n_embd},
  };
  for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
    if (dims[i].value <= 0) {
      if (err)
        snprintf(err, errlen, "model: %s must be >= 1, got %d", dims[i].name, dims[i].value);
      return LOOM_INVALID_CONFIG;
    }
  }
  if (c->n_embd % c->n_head != 0) {
    if (err)
      snprintf(err, errlen, "model: n_embd (%d) must be divisible by n_head (%d)", c->n_embd,
               c->n_head);
    return LOOM_INVALID_CONFIG;
  }
  if (c->tp_size < 0 || c->tp_rank < 0 || c->tp_rank >= cfg_tp(c)) {
    if (err)
      snprintf(err, errlen, "model: tensor-parallel rank %d is outside [0, %d)", c->tp_rank,
               cfg_tp(c));
    return LOOM_INVALID_CONFIG;
  }
  if (c->n_head % cfg_tp(c) != 0) {
    if (err)
      snprintf(err, errlen, "model: n_head (%d) must be divisible by the tensor-parallel size "
               "(%d): each rank computes n_head/tp heads", c->n_head, cfg_tp(c));
    return LOOM_INVALID_CONFIG;
  }
  if (c->vocab_parallel && cfg_tp(c) > 1 && gpt_vocab_rows(c) % cfg_tp(c) != 0) {
    if (err)
      snprintf(err, errlen, "model: vocab_parallel: the padded vocabulary (%d rows, "
               "vocab_size %d, padded_vocab_size %d) must be divisible by the tensor-parallel "
               "size (%d): each rank holds Vp/tp rows of wte; pad it to a multiple of %d",
               gpt_vocab_rows(c), c->vocab_size, c->padded_vocab_size, cfg_tp(c), cfg_tp(c));
    return LOOM_INVALID_CONFIG;
  }
  if (c->vocab_parallel && cfg_tp(c) > 1 &&
      gpt_vocab_rows(c) - c->vocab_size >= gpt_vocab_rows(c) / cfg_tp(c)) {
    if (err)
      snprintf(err, errlen, "model: vocab_parallel: tp rank %d's %d rows of wte would all be "
               "padding (vocab_size %d padded to %d over %d ranks): pad less",
               cfg_tp(c) - 1, gpt_vocab_rows(c) / cfg_tp(c), c->vocab_size, gpt_vocab_rows(c),
               cfg_tp(c));
    return LOOM_INVALID_CONFIG;
  }
  if (c->vocab_parallel && cfg_tp(c) > 1 && (c->pp_first > 0 || c->pp_end > 0)) {
    if (err)
      snprintf(err, errlen, "model: vocab_parallel with pipeline stages (units [%d, %d]) is not "
               "supported: the split wte would need its tied copy split on the last stage too",
               c->pp_first, cfg_last(c));
    return LOOM_INVALID_CONFIG;
  }
  if (c->sequence_parallel && cfg_tp(c) > 1 && (c->pp_first > 0 || c->pp_end > 0)) {
    if (err)
      snprintf(err, errlen, "model: sequence_parallel with pipeline stages (units [%d, %d]) is "
               "not supported: the stage boundaries carry whole (B, T, C) activations",
               c->pp_first, cfg_last(c));
    return LOOM_INVALID_CONFIG;
  }
  if (c->pp_first < 0 || c->pp_first > cfg_last(c) || cfg_last(c) > c->n_layer + 1) {
    if (err)
      snprintf(err, errlen, "model: pipeline stage units [%d, %d] are outside [0, %d]",
               c->pp_first, cfg_last(c), c->n_layer + 1);
    return LOOM_INVALID_CONFIG;
  }
  if (c->pp_chunks > 1 && gpt_chunks_check(c, err, errlen) != LOOM_OK) return LOOM_INVALID_CONFIG;
  if (c->ckpt_policy < GPT_CKPT_NONE || c->ckpt_policy > GPT_CKPT_SELECTIVE ||
      c->ckpt_every < 0) {
    if (err)
      snprintf(err, errlen, "model: activation checkpointing policy %d every %d: expected a "
               "policy in [%d, %d] and every >= 0", c->ckpt_policy, c->ckpt_every,
               GPT_CKPT_NONE, GPT_CKPT_SELECTIVE);
    return LOOM_INVALID_CONFIG;
  }
  const struct { const char *name; int value, max; } limits[] = {
      {"n_layer", c->n_layer, GPT_MAX_N_LAYER}, {"n_embd", c->n_embd, GPT_MAX_N_EMBD},
      {"max_seq_len", c->max_seq_len, GPT_MAX_SEQ_LEN}, {"vocab_size", c->vocab_size, 65536},
      {"padded_vocab_size", gpt_vocab_rows(c), 65536}};
  for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) {
    if (limits[i].value > limits[i].max) {
      if (err)
        snprintf(err, errlen, "model: %s %d is too large (max %d)", limits[i].name,
                 limits[i].value, limits[i].max);
      return LOOM_INVALID_CONFIG;
    }
  }
  double n = gpt_param_count_estimate(gpt_vocab_rows(c), c->max_seq_len, c->n_layer, c->n_embd);
  if (n > (double)GPT_MAX_PARAMS) {
    if (err)
      snprintf(err, errlen, "model: %.3g parameters (n_layer %d, n_embd %d) is more than the "
               "2^40 this loom can size", n, c->n_layer, c->n_embd);
    return LOOM_INVALID_CONFIG;
  }
  return LOOM_OK;
}

int gpt_init(gpt_model *m, const gpt_config *cfg, loom_dev *dev, char *err, size_t errlen) {
  return gpt_init_ex(m, cfg, dev, 0, err, errlen);
}

int gpt_init_ex(gpt_model *m, const gpt_config *cfg, loom_dev *dev, int flags, char *err,
                size_t errlen) {
  memset(m, 0, sizeof *m);
  if (err && errlen) err[0] = '\0';
  int rc = check_config(cfg, err, errlen);
  if (rc != LOOM_OK) return rc;
  if (cfg->dtype != LOOM_F32 && cfg->dtype != LOOM_BF16 && cfg->dtype != LOOM_F16) {
    if (err) snprintf(err, errlen, "model: dtype %d is not fp32, bf16 or fp16", cfg->dtype);
    return LOOM_INVALID_CONFIG;
  }
  /* storage is fp32 or the compute dtype itself (16-bit values stored in another 16-bit
   * format would round twice) */
  if ((cfg->param_dtype != LOOM_F32 && cfg->param_dtype != cfg->dtype) ||
      (cfg->grad_dtype != LOOM_F32 && cfg->grad_dtype != cfg->dtype)) {
    if (err)
      snprintf(err, errlen, "model: parameter/gradient storage dtypes %d/%d must be fp32 or "
               "the compute dtype %d", cfg->param_dtype, cfg->grad_dtype, cfg->dtype);
    return LOOM_INVALID_CONFIG;
  }
  /* a backend without 16-bit stores (dev NULL: a table only, for planning); convert packs and
   * widens the saved activations */
  if (cfg->dtype != LOOM_F32 && dev && (!dev->ops->round_to || !dev->ops->convert)) {
    if (err)
      snprintf(err, errlen, "device '%s' (ABI %d.%d) has no round_to: bf16/fp16 precision needs "
               "a device built against ABI 1.3 or newer", dev->ops->hdr.name,
               dev->ops->hdr.abi_major, dev->ops->hdr.abi_minor);
    return LOOM_UNSUPPORTED;
  }
  /* 16-bit activations end to end: the device's ABI 1.8 kernels for the dtype (the caller asks
   * only where the device offers them: a missing table here is a caller's error) */
  loom_device_acts16_v1 *a16 = NULL;
  if (acts_typed(cfg) && dev && (rc = acts16_table(dev, (loom_dtype)cfg->dtype, &a16, err,
                                                   errlen)) != LOOM_OK)
    return rc;
  /* flash attention: the caller asks only where the device has the kernels (a missing slot
   * here is a caller's error, named) */
  if (cfg->attn_lse && dev && !gpt_device_has_attn_lse(cfg, dev)) {
    if (err)
      snprintf(err, errlen, "device '%s' (ABI %d.%d) has no attention_forward_lse / "
               "attention_backward_lse (ABI 1.9)%s: flash attention needs them",
               dev->ops->hdr.name, dev->ops->hdr.abi_major, dev->ops->hdr.abi_minor,
               dev->ops->attention_forward_lse && dev->ops->attention_backward_lse
                   ? " in its acts16 table" : "");
    free(a16);
    return LOOM_UNSUPPORTED;
  }
  if ((rc = gpt_cp_check(cfg, dev, err, errlen)) != LOOM_OK) {
    free(a16);
    return rc;
  }
  /* vocabulary parallel runs the slice through the fused classifier (vp_crossentropy_fused) */
  if (cfg_vp(cfg) && dev && !dev->ops->crossentropy_fused) {
    if (err)
      snprintf(err, errlen, "device '%s' (ABI %d.%d) has no crossentropy_fused (ABI 1.4): "
               "tensor_parallel's vocab_parallel needs it", dev->ops->hdr.name,
               dev->ops->hdr.abi_major, dev->ops->hdr.abi_minor);
    free(a16);
    return LOOM_UNSUPPORTED;
  }
  m->cfg = *cfg;
  m->cfg.tp_size = cfg_tp(cfg);
  m->cfg.pp_end = cfg_last(cfg) + 1;
  m->dev = dev;
  m->a16 = a16;
  m->mean_loss = -1.0f;
  const int L = cfg->n_layer;
  m->n_units = L + 2;
  m->first_unit = m->cfg.pp_first;
  m->last_unit = m->cfg.pp_end - 1;
  /* a last stage without the embedding keeps a copy of the tied wte after its head */
  int copy = m->first_unit > 0 && m->last_unit == L + 1;
  m->n_params = N_EMB_PARAMS + L * N_BLOCK_PARAMS + N_HEAD_PARAMS + copy;
  m->tied_copy = copy ? m->n_params - 1 : -1;
  m->params = calloc((size_t)m->n_params, sizeof *m->params);
  m->unit_offset = calloc((size_t)m->n_units + 1, sizeof *m->unit_offset);
  if (!m->params || !m->unit_offset) goto nomem;

  size_t offset = 0;
  for (int u = 0; u < m->n_units; u++) {
    m->unit_offset[u] = offset;
    for (int j = 0; j < unit_param_count(m, u); j++) {
      gpt_param_role role = (gpt_param_role)(unit_first_role(m, u) + j);
      const gpt_param_spec *s = &param_spec[role];
      gpt_param *p = &m->params[unit_first_param(m, u) + j];
      if (u >= 1 && u <= L)
        snprintf(p->name, sizeof p->name, "h.%d.%s", u - 1, s->name);
      else
        snprintf(p->name, sizeof p->name, "%s", s->name);
      p->unit = u;
      p->role = role;
      p->ndim = s->cols == D_NONE ? 1 : 2;
      p->shape[0] = dim_value(cfg, s->rows);
      p->shape[1] = s->cols == D_NONE ? 0 : dim_value(cfg, s->cols);
      role_split(role, &p->split_dim, &p->split_parts);
      if (role == GPT_WTE && cfg_vp(&m->cfg)) p->split_dim = 0; /* Vp/tp rows per rank */
      p->lshape[0] = p->shape[0];
      p->lshape[1] = p->shape[1];
      if (p->split_dim >= 0) p->lshape[p->split_dim] /= m->cfg.tp_size;
      p->numel = (size_t)p->lshape[0] * (size_t)(p->ndim == 2 ? p->lshape[1] : 1);
      p->present = cfg_holds(&m->cfg, u);
      p->offset = p->present ? offset : 0;
      if (p->present) offset += p->numel;
    }
  }
  if (copy) {
    gpt_param *p = &m->params[m->tied_copy];
    *p = m->params[0]; /* wte's description */
    p->unit = L + 1;
    p->present = 1;
    p->tied_copy = 1;
    p->offset = offset;
    offset += p->numel;
  }
  for (int i = 0; i < m->n_params; i++) m->n_present += m->params[i].present;
  for (int u = m->last_unit + 1; u < m->n_units; u++) m->unit_offset[u] = offset;
  m->unit_offset[m->n_units] = offset;
  m->num_parameters = offset;

  const size_t pes = gpt_param_elem_bytes(m), ges = gpt_grad_elem_bytes(m);
  if (!(flags & GPT_NO_PARAM_STORAGE)) {
    m->params_memory = loom__dev_alloc(dev, offset * pes, LOOM_MEM_PARAMS);
    if (!m->params_memory) goto nomem;
    for (int i = 0; i < m->n_params; i++)
      if (m->params[i].present)
        m->params[i].data = (float *)((char *)m->params_memory + m->params[i].offset * pes);
  }
  if (!(flags & GPT_NO_GRAD_STORAGE)) {
    m->grads_memory = loom__dev_alloc(dev, offset * ges, LOOM_MEM_GRADS);
    if (!m->grads_memory) goto nomem;
    for (int i = 0; i < m->n_params; i++)
      if (m->params[i].present)
        m->params[i].grad = (float *)((char *)m->grads_memory + m->params[i].offset * ges);
  }
  if (m->cfg.dtype != LOOM_F32 && dev) {
    m->wwork_floats = wwork_size(m);
    m->wwork = loom__dev_alloc(dev, m->wwork_floats * sizeof(float), gpt_work_category(m));
    if (!m->wwork) goto nomem;
  }
  /* under vocabulary parallel the rank's columns [v0, v0 + Vl) of the mask */
  const int V = m->cfg.vocab_size, Vp = gpt_vocab_rows(&m->cfg), Vl = gpt_vocab_local(&m->cfg);
  if (Vp > V && dev && cfg_has_head(&m->cfg)) {
    const int v0 = cfg_vp(&m->cfg) ? m->cfg.tp_rank * Vl : 0;
    m->logits_mask = loom__dev_alloc(dev, (size_t)Vl * sizeof(float), LOOM_MEM_OTHER);
    float *mask = malloc((size_t)Vl * sizeof(float));
    if (!m->logits_mask || !mask) {
      free(mask);
      goto nomem;
    }
    for (int i = 0; i < Vl; i++) mask[i] = v0 + i < V ? 0.0f : -INFINITY;
    OPS->from_host(CTX, m->logits_mask, mask, (size_t)Vl * sizeof(float));
    free(mask);
  }
  if (grads16(m) && dev) {
    gwork_size(m, &m->gwork_floats, &m->gwork_wte_floats);
    m->gwork = loom__dev_alloc(dev, m->gwork_floats * sizeof(float), LOOM_MEM_OTHER);
    m->gstage = loom__dev_alloc(dev, GSTAGE_FLOATS * sizeof(float), LOOM_MEM_OTHER);
    if (!m->gwork || !m->gstage) goto nomem;
  }
  return LOOM_OK;

nomem:
  if (err && errlen && m->num_parameters == 0)
    snprintf(err, errlen, "model: out of host memory for the table of %d tensors (n_layer %d)",
             m->n_params, cfg->n_layer);
  else if (err && errlen)
    snprintf(err, errlen, "model: out of memory for %zu parameters (%.1f MiB for params, "
             "%.1f MiB for grads)", m->num_parameters,
             (double)m->num_parameters * (double)gpt_param_elem_bytes(m) / 1048576.0,
             (double)m->num_parameters * (double)gpt_grad_elem_bytes(m) / 1048576.0);
  gpt_free(m);
  return LOOM_NOMEM;
}

static void slot_save(gpt_model *m);
static void slot_load(gpt_model *m, int s);

void gpt_free(gpt_model *m) {
  if (m->dev) {
    if (m->slots) {
      slot_save(m);
      for (int s = 0; s < m->n_slots; s++) {
        slot_load(m, s);
        acts_free(m);
      }
      free(m->slots);
      m->slots = NULL;
    }
    acts_free(m);
    loom__dev_free(m->dev, m->recompute);
    loom__dev_free(m->dev, m->wwork);
    loom__dev_free(m->dev, m->logits_mask);
    loom__dev_free(m->dev, m->vp_ids);
    loom__dev_free(m->dev, m->vp_zero);
    loom__dev_free(m->dev, m->vp_junk);
    loom__dev_free(m->dev, m->vp_red);
    gpt_cp_free(m);
    loom__dev_free(m->dev, m->gwork);
    loom__dev_free(m->dev, m->gstage);
    loom__dev_free(m->dev, m->grads_memory);
    loom__dev_free(m->dev, m->params_memory);
  }
  free(m->params);
  free(m->unit_offset);
  free((void *)m->a16);
  free(m->vp_host);
  free(m->vp_in_host);
  free(m->vp_tg_host);
  free(m->vp_stats);
  free(m->vp_host_mx);
  memset(m, 0, sizeof *m);
}

/* Where global element (r, c) of p lives in this rank's local tensor, or -1 when another
 * tensor-parallel rank holds it. Local indices grow with (r, c) in row-major order. */
static int64_t local_index(const gpt_param *p, int tp, int tp_rank, int64_t r, int64_t c) {
  int64_t lcols = p->ndim == 2 ? p->lshape[1] : 1;
  if (tp == 1 || p->split_dim < 0) return r * lcols + c;
  if (p->split_dim == 0) {
    int64_t per_part = p->shape[0] / p->split_parts, lrows = per_part / tp;
    int64_t part = r / per_part, rr = r % per_part;
    if (rr / lrows != tp_rank) return -1;
    return (part * lrows + rr % lrows) * lcols + c;
  }
  if (c / lcols != tp_rank) return -1;
  return r * lcols + c % lcols;
}

enum { INIT_CHUNK = 4096 };

/* Host values buf[0..count) to elements [at, at + count) of dst (dtype; 16-bit through the
 * device stage, rounded to nearest even). */
static void put(const gpt_model *m, void *dst, loom_dtype dtype, float *stage, size_t at,
                const float *buf, size_t count) {
  if (dtype == LOOM_F32) {
    OPS->from_host(CTX, (float *)dst + at, buf, count * sizeof(float));
    return;
  }
  OPS->from_host(CTX, stage, buf, count * sizeof(float));
  OPS->convert(CTX, (char *)dst + at * loom_dtype_size(dtype), dtype, stage, LOOM_F32, count);
}

/* Rows of p drawn from the RNG: wte's first vocab_size rows only. A padded vocabulary's extra
 * rows are zero and draw nothing (as llm.c's padded files hold them), so a padded model starts
 * from the unpadded model's weights with the same seed: the padding changes the GEMM's shape,
 * never the model. */
static int64_t drawn_rows(const gpt_model *m, const gpt_param *p) {
  return p->role == GPT_WTE && p->shape[0] > m->cfg.vocab_size ? m->cfg.vocab_size
                                                                : p->shape[0];
}

static void init_range(const gpt_model *m, uint64_t seed, size_t begin, size_t n, void *dst,
                       loom_dtype dtype, float *stage) {
  loom_rng rng;
  loom__rng_seed(&rng, seed);
  const float std = 0.02f, std_resid = 0.02f / sqrtf(2.0f * (float)m->cfg.n_layer);
  const int tp = m->cfg.tp_size > 1 ? m->cfg.tp_size : 1, tp_rank = m->cfg.tp_rank;
  enum { CHUNK = INIT_CHUNK };
  float buf[CHUNK]; /* host staging: values are drawn in table order, kept when in range */
  size_t end = begin + n, staged = 0, staged_at = begin;
  for (int i = 0; i < m->n_params; i++) {
    const gpt_param *p = &m->params[i];
    if (p->tied_copy) continue; /* below */
    gpt_init_kind kind = param_spec[p->role].init;
    int draws = kind == INIT_NORMAL || kind == INIT_RESID;
    if (!p->present) { /* another pipeline stage's: replay its draws */
      size_t k = (size_t)drawn_rows(m, p) * (size_t)(p->ndim == 2 ? p->shape[1] : 1);
      for (size_t j = 0; draws && j < k; j++) (void)loom__rng_normal(&rng);
      continue;
    }
    if (p->offset >= end) break;
    /* constant tensors draw nothing: skip them whole when they are out of range */
    if (!draws && p->offset + p->numel <= begin) continue;
    /* every rank draws the GLOBAL tensor in the single-rank order and keeps its slice, so a
     * tensor-parallel run starts from exactly the single-rank weights */
    const int64_t rows = p->shape[0], cols = p->ndim == 2 ? p->shape[1] : 1;
    const int64_t real_rows = drawn_rows(m, p);
    int done = 0;
    for (int64_t r = 0; r < rows && !done; r++) {
      for (int64_t c = 0; c < cols; c++) {
        float x;
        switch (r < real_rows ? kind : INIT_ZERO) { /* padded rows: zero, no draw */
          case INIT_NORMAL: x = std * loom__rng_normal(&rng); break;
          case INIT_RESID: x = std_resid * loom__rng_normal(&rng); break;
          case INIT_ONE: x = 1.0f; break;
          default: x = 0.0f; break;
        }
        int64_t li = local_index(p, tp, tp_rank, r, c);
        if (li < 0) continue;
        size_t e = p->offset + (size_t)li;
        if (e < begin) continue;
        if (e >= end) {
          done = 1;
          break;
        }
        buf[staged++] = x;
        if (staged == CHUNK) {
          put(m, dst, dtype, stage, staged_at - begin, buf, staged);
          staged_at += staged;
          staged = 0;
        }
      }
    }
  }
  if (staged) put(m, dst, dtype, stage, staged_at - begin, buf, staged);
  if (m->tied_copy >= 0) { /* the tied wte copy: wte is the first tensor drawn */
    const gpt_param *p = &m->params[m->tied_copy];
    loom__rng_seed(&rng, seed);
    staged = 0;
    staged_at = p->offset > begin ? p->offset : begin;
    const size_t real = (size_t)drawn_rows(m, p) * (size_t)p->shape[1];
    for (size_t j = 0; j < p->numel; j++) {
      float x = j < real ? std * loom__rng_normal(&rng) : 0.0f; /* padded rows: zero */
      size_t e = p->offset + j;
      if (e < begin) continue;
      if (e >= end) break;
      buf[staged++] = x;
      if (staged == CHUNK) {
        put(m, dst, dtype, stage, staged_at - begin, buf, staged);
        staged_at += staged;
        staged = 0;
      }
    }
    if (staged) put(m, dst, dtype, stage, staged_at - begin, buf, staged);
  }
}

void gpt_init_weights_range(const gpt_model *m, uint64_t seed, size_t begin, size_t n,
                            float *dst) {
  init_range(m, seed, begin, n, dst, LOOM_F32, NULL);
}

int gpt_init_weights_range_as(const gpt_model *m, uint64_t seed, size_t begin, size_t n,
                              void *dst, int dtype) {
  if (dtype == LOOM_F32) {
    init_range(m, seed, begin, n, dst, LOOM_F32, NULL);
    return LOOM_OK;
  }
  float *stage = loom__dev_alloc(m->dev, INIT_CHUNK * sizeof(float), LOOM_MEM_OTHER);
  if (!stage) return LOOM_NOMEM;
  init_range(m, seed, begin, n, dst, (loom_dtype)dtype, stage);
  loom__dev_free(m->dev, stage);
  return LOOM_OK;
}

int gpt_init_weights(gpt_model *m, uint64_t seed) {
  return gpt_init_weights_range_as(m, seed, 0, m->num_parameters, m->params_memory,
                                   m->cfg.param_dtype);
}


/* ---- activation slots ---- */

static void slot_save(gpt_model *m) {
  gpt_slot *sl = &m->slots[m->cur_slot];
  sl->acts = m->acts;
  sl->inputs = m->inputs;
  sl->targets = m->targets;
  sl->B = m->B;
  sl->T = m->T;
  sl->has_targets = m->has_targets;
  sl->mean_loss = m->mean_loss;
}

static void slot_load(gpt_model *m, int s) {
  gpt_slot *sl = &m->slots[s];
  m->acts = sl->acts;
  m->inputs = sl->inputs;
  m->targets = sl->targets;
  m->B = sl->B;
  m->T = sl->T;
  m->has_targets = sl->has_targets;
  m->mean_loss = sl->mean_loss;
  m->cur_slot = s;
}

static int slot_select(gpt_model *m, int s) {
  if (s < 0) return LOOM_INVALID_USAGE;
  if (!m->slots || s >= m->n_slots) {
    int n = s + 1 > 4 ? s + 1 : 4;
    if (m->slots && n < 2 * m->n_slots) n = 2 * m->n_slots;
    gpt_slot *ns = realloc(m->slots, (size_t)n * sizeof *ns);
    if (!ns) return LOOM_NOMEM;
    memset(ns + m->n_slots, 0, (size_t)(n - m->n_slots) * sizeof *ns);
    m->slots = ns;
    m->n_slots = n;
  }
  if (s == m->cur_slot) return LOOM_OK;
  slot_save(m);
  slot_load(m, s);
  return LOOM_OK;
}

int gpt_slot_ensure(gpt_model *m, int slot, int B, int T) {
  if (B <= 0 || T <= 0 || T > m->cfg.max_seq_len || (int64_t)B * T > INT_MAX)
    return LOOM_INVALID_USAGE;
  int rc = slot_select(m, slot);
  if (rc != LOOM_OK) return rc;
  return acts_ensure(m, B, T);
}

gpt_param *gpt_head_wte(gpt_model *m) {
  return m->tied_copy >= 0 ? &m->params[m->tied_copy] : param(m, 0, GPT_WTE);
}

float *gpt_stage_buffer(gpt_model *m, int slot, int which) {
  /* fp32 boundary buffers: acts_typed runs the whole model, which has no boundaries */
  assert(!m->a16);
  if (m->a16 || slot_select(m, slot) != LOOM_OK || !m->acts) return NULL;
  gpt_acts *a = m->acts;
  int nb = cfg_blocks(&m->cfg);
  switch (which) {
    case GPT_BUF_INPUT: return a->encoded;
    case GPT_BUF_OUTPUT:
      return nb ? a->residual3 + (size_t)(nb - 1) * m->B * m->T * m->cfg.n_embd : a->encoded;
    case GPT_BUF_GRAD_OUTPUT: case GPT_BUF_GRAD_INPUT: return a->dres;
  }
  return NULL;
}

/* 1 if every id is in [0, V). */
static int tokens_valid(const int32_t *ids, size_t n, int V) {
  for (size_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= V) return 0;
  return 1;
}

int gpt_stage_forward(gpt_model *m, int slot, const int32_t *inputs_host,
                      const int32_t *targets_host, int B, int T, const gpt_hooks *hooks,
                      float *loss) {
  if (!inputs_host || B <= 0 || T <= 0 || T > m->cfg.max_seq_len ||
      (int64_t)B * T > INT_MAX)
    return LOOM_INVALID_USAGE;
  const size_t N = (size_t)B * T;
  if (!tokens_valid(inputs_host, N, m->cfg.vocab_size)) return LOOM_INVALID_USAGE;
  if (targets_host && !tokens_valid(targets_host, N, m->cfg.vocab_size))
    return LOOM_INVALID_USAGE;
  int rc = gpt_slot_ensure(m, slot, B, T);
  if (rc != LOOM_OK) return rc;
  m->acts->forward_done = 0;
  m->has_targets = targets_host != NULL;
  m->mean_loss = -1.0f;
  OPS->from_host(CTX, m->inputs, inputs_host, N * sizeof(int32_t));
  if (targets_host) OPS->from_host(CTX, m->targets, targets_host, N * sizeof(int32_t));
  if (cfg_vp(&m->cfg)) {
    if ((rc = vp_ensure(m, N)) != LOOM_OK) return rc;
    vp_set_ids(m, inputs_host, targets_host, N);
  }

  for (int u = m->first_unit; u <= m->last_unit; u++) {
    if (hooks && hooks->pre_forward && (rc = hooks->pre_forward(hooks->ud, u)) != 0) return rc;
    if ((rc = unit_forward(m, u, hooks)) != LOOM_OK) return rc;
    if (hooks && hooks->post_forward && (rc = hooks->post_forward(hooks->ud, u)) != 0) return rc;
  }
  m->acts->forward_done = 1;
  if (loss) *loss = m->mean_loss;
  return LOOM_OK;
}

int gpt_stage_backward(gpt_model *m, int slot, float dloss, const gpt_hooks *hooks) {
  int rc = slot_select(m, slot);
  if (rc != LOOM_OK) return rc;
  if (!m->acts || !m->acts->forward_done ||
      (!m->has_targets && m->last_unit == m->n_units - 1))
    return LOOM_INVALID_USAGE;
  for (int u = m->last_unit; u >= m->first_unit; u--) {
    if (hooks && hooks->pre_backward && (rc = hooks->pre_backward(hooks->ud, u)) != 0) return rc;
    if ((rc = unit_backward(m, u, dloss, hooks)) != LOOM_OK) return rc;
    if (hooks && hooks->post_backward && (rc = hooks->post_backward(hooks->ud, u)) != 0)
      return rc;
  }
  return LOOM_OK;
}

int gpt_forward(gpt_model *m, const int32_t *inputs_host, const int32_t *targets_host, int B,
                int T, const gpt_hooks *hooks, float *loss) {
  return gpt_stage_forward(m, 0, inputs_host, targets_host, B, T, hooks, loss);
}

int gpt_backward(gpt_model *m, float dloss, const gpt_hooks *hooks) {
  return gpt_stage_backward(m, 0, dloss, hooks);
}

void gpt_set_train_dloss(gpt_model *m, float dloss) { m->train_dloss = dloss; }

void gpt_zero_grad(gpt_model *m) {
  if (m->grads_memory) /* else a plugin owns gradient storage and clears it */
    OPS->memset_zero(CTX, m->grads_memory, m->num_parameters * gpt_grad_elem_bytes(m));
}

void gpt_logits_row(const gpt_model *m, int row, float *host_out) {
  assert(m->acts && row >= 0 && row < m->B * m->T);
  if (!m->acts || row < 0 || row >= m->B * m->T) return; /* defensive: misuse in release */
  const size_t V = (size_t)m->cfg.vocab_size, Vp = (size_t)gpt_vocab_rows(&m->cfg);
  if (cfg_vp(&m->cfg)) { /* this rank's slice at its columns, zeros elsewhere (fp32 under tp) */
    const size_t Vl = (size_t)gpt_vocab_local(&m->cfg), v0 = (size_t)vp_first(m);
    memset(host_out, 0, V * sizeof(float));
    if (v0 < V)
      OPS->to_host(CTX, host_out + v0, m->acts->logits + (size_t)row * Vl,
                   (v0 + Vl < V ? Vl : V - v0) * sizeof(float));
    return;
  }
  if (!m->a16) {
    OPS->to_host(CTX, host_out, m->acts->logits + (size_t)row * Vp, V * sizeof(float));
    return;
  }
  /* 16-bit logits: through a small host buffer, widened (exact) */
  const char *src = (const char *)act_at(m, m->acts->logits, (size_t)row * Vp);
  uint16_t h16[2048];
  for (size_t k = 0; k < V; k += 2048) {
    size_t c = V - k < 2048 ? V - k : 2048;
    OPS->to_host(CTX, h16, src + k * 2, c * 2);
    for (size_t i = 0; i < c; i++)
      host_out[k + i] =
          m->cfg.dtype == LOOM_BF16 ? loom_bf16_to_f32(h16[i]) : loom_f16_to_f32(h16[i]);
  }
}

int gpt_logits_row_gather(gpt_model *m, int row, float *host_out, const gpt_hooks *hooks) {
  gpt_logits_row(m, row, host_out);
  if (!cfg_vp(&m->cfg)) return LOOM_OK;
  const size_t V = (size_t)m->cfg.vocab_size;
  float *d = loom__dev_alloc(m->dev, V * sizeof(float), LOOM_MEM_OTHER);
  if (!d) return LOOM_NOMEM;
  OPS->from_host(CTX, d, host_out, V * sizeof(float));
  int rc = vp_reduce(hooks, d, V, LOOM_F32, LOOM_OP_SUM); /* x + 0 exact: the gather */
  if (rc == LOOM_OK) OPS->to_host(CTX, host_out, d, V * sizeof(float));
  loom__dev_free(m->dev, d);
  return rc;
}
