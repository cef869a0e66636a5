/* `loom estimate`: the ZeRO paper's memory accounting and communication volume for a config,
 * decided by the roles of its parallel plugins (see estimate.h for the formulas). */
#include "estimate.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "model/gpt.h"
#include "model/gpt_sp.h"
#include "runtime/plugins.h"
#include "runtime/pp_split.h"
#include "estimate_axes.h"
#include "estimate_roles.h"


/* Byte counts saturate at UINT64_MAX instead of wrapping: an absurd config (a 2^54-byte
 * activation pool, gpt_activation_bytes' SIZE_MAX, held by 2^30 micro-batches in flight) must
 * not print a small number. */
static uint64_t sat_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }
static uint64_t sat_mul(uint64_t a, uint64_t b) {
  return b && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

static void roles_text(uint64_t caps, char *buf, size_t n) {
  static const struct { uint64_t bit; const char *name; } r[] = {
    {LOOM_PAR_CAP_GRAD_SYNC, "grad-sync"},       {LOOM_PAR_CAP_OPTIMIZER, "optimizer"},
    {LOOM_PAR_CAP_SHARD_OPTIM, "shard-optim"},   {LOOM_PAR_CAP_SHARD_GRADS, "shard-grads"},
    {LOOM_PAR_CAP_SHARD_PARAMS, "shard-params"}, {LOOM_PAR_CAP_SCHEDULE, "schedule"},
    {LOOM_PAR_CAP_SPLIT_LAYERS, "split-layers"},
  };
  size_t k = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < sizeof r / sizeof r[0]; i++)
    if (caps & r[i].bit)
      k += (size_t)snprintf(buf + k, k < n ? n - k : 0, "%s%s", k ? "," : "", r[i].name);
  if (!k) snprintf(buf, n, "no role");
}

/* Roles -> what is sharded and who steps the optimizer. */
static void decide_roles(loom_estimate *e) {
  for (int i = 0; i < e->n_plugins; i++) {
    uint64_t c = e->plugins[i].caps;
    if (c & LOOM_PAR_CAP_GRAD_SYNC) e->grad_sync = 1;
    if (c & LOOM_PAR_CAP_SHARD_OPTIM) e->shard_optim = 1;
    if (c & LOOM_PAR_CAP_SHARD_GRADS) e->shard_grads = 1;
    if (c & LOOM_PAR_CAP_SHARD_PARAMS) e->shard_params = 1;
    /* an optimizer owner that neither syncs nor shards anything only moves the step: offload */
    uint64_t other = LOOM_PAR_CAP_GRAD_SYNC | LOOM_PAR_CAP_SHARD_OPTIM |
                     LOOM_PAR_CAP_SHARD_GRADS | LOOM_PAR_CAP_SHARD_PARAMS;
    if ((c & LOOM_PAR_CAP_OPTIMIZER) && !(c & other)) e->offload = 1;
  }
  e->stage = e->shard_params ? 3 : e->shard_grads ? 2 : e->shard_optim ? 1 : 0;
  static const char *const names[] = {"DDP (no sharding)", "ZeRO-1 (P_os)", "ZeRO-2 (P_os+g)",
                                      "ZeRO-3 (P_os+g+p)"};
  snprintf(e->strategy, sizeof e->strategy, "%s%s",
           e->stage == 0 && e->world == 1
               ? (e->tp > 1 || e->pp > 1 ? "one data-parallel rank (no sharding)"
                                         : "single rank (no sharding)")
               : names[e->stage],
           e->offload ? " + optimizer offload to host" : "");
}

static void append(char *buf, size_t n, const char *s) {
  size_t k = strlen(buf);
  if (k < n) snprintf(buf + k, n - k, "%s", s);
}

/* The order the plugins describe themselves in (loom__plugins_setup's): config order, the
 * optimizer owner last, so it sees the partition the others publish. */
static int call_order(const loom_runtime *rt, int k) {
  int last = rt->optimizer_owner >= 0 ? rt->optimizer_owner : rt->n_parallel - 1;
  return k < last ? k : (k == rt->n_parallel - 1 ? last : k + 1);
}

static uint64_t axis_of(uint64_t caps) {
  return caps & (LOOM_PAR_CAP_AXIS_DP | LOOM_PAR_CAP_AXIS_TP | LOOM_PAR_CAP_AXIS_PP |
                 LOOM_PAR_CAP_AXIS_CP);
}

/* The plan of stage `s` (its parameter table m) as plugins see it (parallel_v1.h). */
static void fill_plan(const loom_estimate *e, const gpt_model *m, int s, const uint64_t *offs,
                      loom_estimate_plan_v1 *pl) {
  memset(pl, 0, sizeof *pl);
  pl->struct_size = sizeof *pl;
  pl->n_layer = e->n_layer;
  pl->n_head = e->n_head;
  pl->n_embd = e->n_embd;
  pl->vocab_size = e->vocab_size;
  pl->max_seq_len = e->context_length;
  pl->vocab_rows = gpt_vocab_rows(&m->cfg);
  /* the tied embedding: the table's first tensor where the stage holds unit 0 */
  pl->wte_numel = m->first_unit == 0 ? (uint64_t)m->params[0].numel
                                     : (uint64_t)pl->vocab_rows * (uint64_t)e->n_embd;
  pl->n_units = m->n_units;
  pl->unit_offset = offs;
  pl->numel = e->psi;
  pl->first_unit = m->first_unit;
  pl->last_unit = m->last_unit;
  for (int u = m->first_unit; u <= m->last_unit; u++)
    if (u >= 1 && u <= e->n_layer && m->unit_offset[u + 1] > m->unit_offset[u]) { /* held */
      pl->n_blocks++;
      /* a fully recomputed block runs its forward (and its attention's g) again in backward */
      pl->n_recomputed += e->ckpt_policy == GPT_CKPT_FULL &&
                          (u - 1) % (e->ckpt_every > 1 ? e->ckpt_every : 1) == 0;
    }
  pl->dp = e->world;
  pl->dp_shard = e->dp_shard ? e->dp_shard : e->world;
  pl->dp_replica = e->dp_replica ? e->dp_replica : 1;
  pl->tp = e->tp;
  pl->pp = e->pp;
  pl->stage = s;
  pl->micro_batch = e->micro_batch;
  pl->seq_len = e->seq_len;
  pl->n_micro = e->accum;
  pl->compute_dtype = e->dtype;
  pl->param_dtype = e->param_dtype;
  pl->grad_dtype = e->grad_dtype;
  pl->grads_predivided = e->predivide && e->world > 1;
  pl->cp = e->cp; /* world and seq_len above are already dp x cp and the local T / cp */
}

/* A plugin's strings end within their arrays, whatever it wrote. */
static void terminate_strings(loom_estimate_v1 *r) {
  for (int c = 0; c < LOOM_ESTIMATE_CATEGORIES; c++) r->formula[c][sizeof r->formula[c] - 1] = 0;
  r->comm_formula[sizeof r->comm_formula - 1] = '\0';
  r->schedule[sizeof r->schedule - 1] = '\0';
  r->note[sizeof r->note - 1] = '\0';
  r->detail_name[sizeof r->detail_name - 1] = '\0';
}

/* Every plugin's report for stage s (rep, by plugin index): its estimate slot, or the host's
 * accounting by its caps (estimate_roles.c) when it has none. Called in setup's order, the
 * plan's partition handed on from the publisher to the plugins after it. */
static int describe(loom_runtime *rt, const loom_estimate *e, const gpt_model *m, int s,
                    loom_estimate_v1 *rep, char *err, size_t errlen) {
  uint64_t *offs = malloc(((size_t)m->n_units + 1) * sizeof *offs); /* gpt's are size_t */
  if (!offs) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  for (int u = 0; u <= m->n_units; u++) offs[u] = m->unit_offset[u];
  loom_estimate_plan_v1 pl;
  fill_plan(e, m, s, offs, &pl);
  rt->mesh.pp_rank = s;
  int rc = 0;
  for (int k = 0; k < rt->n_parallel && rc == 0; k++) {
    int i = call_order(rt, k);
    const loom_parallel_v1 *p = &rt->parallel[i].u.parallel;
    loom_estimate_v1 *r = &rep[i];
    memset(r, 0, sizeof *r);
    r->struct_size = sizeof *r;
    if (p->estimate) { /* the loader's full-size copy: NULL when the plugin predates the slot */
      loom_host *h = &rt->parallel_host[i];
      h->error[0] = '\0';
      int prc = p->estimate(loom__host_api(), h, &h->opts, &pl, r);
      if (prc != LOOM_OK && prc == LOOM_INVALID_CONFIG && loom__error_names_config(rt, h->error))
        snprintf(err, errlen, "%s (plugin %s)", h->error, rt->parallel[i].path);
      else if (prc != LOOM_OK)
        snprintf(err, errlen, "%s: plugin %s [%s]: estimate failed (%s): %s", rt->cfg->path,
                 h->label, rt->parallel[i].path, loom__status_text(prc),
                 h->error[0] ? h->error : "no message");
      if (prc != LOOM_OK) rc = -1;
      terminate_strings(r);
    } else {
      loom__estimate_by_role(rt->parallel[i].u.hdr.caps, &pl, r);
    }
    if (m->cfg.sequence_parallel && pl.tp > 1 &&
        axis_of(rt->parallel[i].u.hdr.caps) == LOOM_PAR_CAP_AXIS_TP) {
      /* sequence parallel: the host runs the collectives (gpt_sp.c) and never calls the
       * plugin's region, so neither its f/g traffic nor its 16-bit region buffer exists */
      r->bytes[LOOM_MEM_COMM] = 0;
      r->formula[LOOM_MEM_COMM][0] = '\0';
      r->replaces &= ~(1u << LOOM_MEM_COMM);
    }
    if (r->partition) {
      pl.partition = r->partition;
      pl.partition_sharded = r->partition_sharded;
    }
  }
  free(offs);
  return rc;
}

/* Fold plugin i's report into the figures: a category it replaces takes its bytes and text,
 * one it adds to grows by them (" + TEXT"). */
static void apply(loom_estimate *e, const loom_estimate_v1 *r) {
  for (int c = 0; c < LOOM_MEM__COUNT; c++) {
    const char *f = r->formula[c];
    if (r->replaces & (1u << c)) {
      e->bytes[c] = r->bytes[c];
      snprintf(e->formula[c], 64, "%s", f);
    } else if (r->bytes[c] || f[0]) {
      e->bytes[c] = sat_add(e->bytes[c], r->bytes[c]);
      if (f[0]) {
        append(e->formula[c], 64, " + ");
        append(e->formula[c], 64, f);
      }
    }
  }
  if (r->partition) e->part = r->partition;
  if (r->gathered) e->gathered = r->gathered;
  if (r->flags & LOOM_ESTIMATE_GRAD_COMM_16BIT) e->sync16 = 1;
  if (r->note[0]) snprintf(e->note, sizeof e->note, "%s", r->note);
  if (r->detail_name[0]) {
    snprintf(e->detail_name, sizeof e->detail_name, "%s", r->detail_name);
    e->detail_on = r->detail_on;
    e->detail_rows = r->detail_rows;
    e->detail_bytes = r->detail_bytes;
    e->detail_comm_bytes = r->detail_comm_bytes;
  }
}

/* The plugins' traffic on `axis` (their comm_bytes summed, texts joined by " + "). */
static uint64_t axis_comm(const loom_runtime *rt, const loom_estimate_v1 *rep, uint64_t axis,
                          char *f, size_t n) {
  uint64_t sum = 0;
  f[0] = '\0';
  for (int k = 0; k < rt->n_parallel; k++) {
    int i = call_order(rt, k);
    if (axis_of(rt->parallel[i].u.hdr.caps) != axis) continue;
    sum = sat_add(sum, rep[i].comm_bytes);
    if (rep[i].comm_formula[0]) {
      if (f[0]) append(f, n, " + ");
      append(f, n, rep[i].comm_formula);
    }
  }
  return sum;
}

static void account(loom_estimate *e, const loom_runtime *rt, const gpt_model *m,
                    const loom_estimate_v1 *rep) {
  /* N: the ranks the model states are sharded over (hybrid sharding: the shard group's K) */
  const uint64_t N = (uint64_t)(e->dp_shard ? e->dp_shard : e->world), psi = e->psi;
  /* the host's own figures, what a run without parallel plugins holds: the whole model's
   * parameters, gradients and optimizer state on every rank; the plugins' reports then
   * replace what they own and add what they hold besides */
  e->part = psi;
  /* storage (ABI 1.4, docs/mixed_precision.md "Storage"): bytes per element of the flat
   * parameter and gradient buffers and of the optimizer state. fp32: the parameters are their
   * own master, K = 8 (m, v). 16-bit storage: 2-byte parameters, K = 12 (fp32 master, m, v),
   * gradients 2 bytes with one micro-batch, 4 with accumulation (grad_accum_dtype fp32). */
  const uint64_t P = e->storage16 ? 2 : 4, G = e->grad16 ? 2 : 4, K = e->storage16 ? 12 : 8;
  e->param_elem = (int)P;
  e->grad_elem = (int)G;
  e->optim_k = (int)K;
  e->bytes[LOOM_MEM_PARAMS] = P * psi;
  snprintf(e->formula[LOOM_MEM_PARAMS], 64, "%lluPsi", (unsigned long long)P);
  e->bytes[LOOM_MEM_GRADS] = G * psi;
  snprintf(e->formula[LOOM_MEM_GRADS], 64, "%lluPsi", (unsigned long long)G);
  e->bytes[LOOM_MEM_OPTIM] = K * psi;
  snprintf(e->formula[LOOM_MEM_OPTIM], 64, "K*Psi, K=%llu (%s)", (unsigned long long)K,
           e->storage16 ? "master, m, v" : "m, v");
  e->bytes[LOOM_MEM_HOST] = 0;
  snprintf(e->formula[LOOM_MEM_HOST], 64, "0");
  /* activations: exactly gpt.c's pool; other: the (B,T) input and target token buffers */
  e->bytes[LOOM_MEM_ACTIVATIONS] = gpt_activation_bytes(&m->cfg, e->micro_batch, e->seq_len);
  /* activation checkpointing's recompute scratch: once per rank, not per micro-batch */
  e->act_recompute = gpt_recompute_bytes(&m->cfg, e->micro_batch, e->seq_len);
  snprintf(e->formula[LOOM_MEM_ACTIVATIONS], 64, "gpt pool at B=%d, T=%d%s", e->micro_batch,
           e->seq_len, e->act_recompute ? " + recompute" : "");
  e->bytes[LOOM_MEM_OTHER] = 2 * (uint64_t)e->micro_batch * e->seq_len * sizeof(int32_t);
  snprintf(e->formula[LOOM_MEM_OTHER], 64, "tokens 2*4*B*T");
  uint64_t work = gpt_weight_work_bytes(m);
  if (e->storage16) {
    /* temporary buffers of 16-bit storage (ZeRO paper §3.2's residual states): the fp32
     * working weights and gradient accumulators of one unit (gpt.h), the host's stage */
    e->bytes[LOOM_MEM_OTHER] += work + gpt_grad_work_bytes(m) + LOOM_STAGE_FLOATS * sizeof(float);
    append(e->formula[LOOM_MEM_OTHER], 64, " + fp32 unit work + stage");
  }
  e->bytes[LOOM_MEM_COMM] = 0;
  snprintf(e->formula[LOOM_MEM_COMM], 64, "0 (in place)");
  /* the data-parallel, tensor-parallel and context-parallel plugins' reports (the
   * pipeline's: account_stage) */
  static const uint64_t passes[] = {LOOM_PAR_CAP_AXIS_DP, LOOM_PAR_CAP_AXIS_TP,
                                    LOOM_PAR_CAP_AXIS_CP};
  for (int pass = 0; pass < 3; pass++)
    for (int k = 0; k < rt->n_parallel; k++) {
      int i = call_order(rt, k);
      if (axis_of(rt->parallel[i].u.hdr.caps) == passes[pass]) apply(e, &rep[i]);
    }
  /* mixed precision in the 1.3 layout (16-bit values in fp32 buffers): the fp32 working copy
   * of the largest unit's weights is a parameter (gpt.h) */
  e->working = 0;
  if (work && gpt_work_category(m) == LOOM_MEM_PARAMS) {
    e->bytes[LOOM_MEM_PARAMS] += work;
    e->working += work;
    append(e->formula[LOOM_MEM_PARAMS], 64, " + fp32 unit");
  }
  /* the ZeRO paper's model states (Rajbhandari et al. 2020, sec. 3, Fig. 1) by the roles: P Psi
   * params, G Psi grads, K Psi optimizer, each divided by N from its stage on; the offloaded
   * optimizer moves K to the host (fp32's host master copy and staging included) */
  {
    uint64_t cf = 0, cn = 0; /* coefficients of Psi and Psi/N */
    const uint64_t kk = e->offload ? (e->storage16 ? K + G : K + 8) : K;
    *(e->shard_params ? &cn : &cf) += P;
    *(e->shard_grads ? &cn : &cf) += G;
    *(e->shard_optim ? &cn : &cf) += kk;
    if (N <= 1) cf += cn, cn = 0;
    e->paper_states = cf * psi + cn * psi / (N ? N : 1);
    if (e->shard_params) e->paper_states += P * e->gathered;
    char f[96] = "";
    if (cf) snprintf(f, sizeof f, "%lluPsi", (unsigned long long)cf);
    if (cn)
      snprintf(f + strlen(f), sizeof f - strlen(f), "%s%lluPsi/N", cf ? " + " : "",
               (unsigned long long)cn);
    if (e->shard_params)
      snprintf(f + strlen(f), sizeof f - strlen(f), " + %llu*gathered", (unsigned long long)P);
    snprintf(e->paper_formula, sizeof e->paper_formula, "%s", f);
  }
  e->total = 0;
  for (int k = 0; k < LOOM_MEM__COUNT; k++) e->total = sat_add(e->total, e->bytes[k]);
  e->model_states = e->bytes[LOOM_MEM_PARAMS] + e->bytes[LOOM_MEM_GRADS] +
                    e->bytes[LOOM_MEM_OPTIM] + e->bytes[LOOM_MEM_HOST];
  /* communication per optimizer step per rank over the data-parallel axis: the plugins'; the
   * paper's value by the roles, in the storage dtype */
  const uint64_t A = (uint64_t)e->accum, Sp = P * psi;
  e->comm_bytes_paper = N <= 1 ? 0 : e->stage == 3 ? 3 * A * (N - 1) * Sp / N
                                   : e->stage == 2 ? (A + 1) * (N - 1) * Sp / N
                                                   : 2 * (N - 1) * Sp / N;
  e->comm_bytes = axis_comm(rt, rep, LOOM_PAR_CAP_AXIS_DP, e->comm_formula,
                            sizeof e->comm_formula);
  if (N <= 1) {
    e->comm_bytes = 0;
    snprintf(e->comm_formula, sizeof e->comm_formula, "0 (one rank)");
  } else if (!e->comm_formula[0]) {
    snprintf(e->comm_formula, sizeof e->comm_formula, "0");
  }
  /* per communicator; hybrid sharding adds the host's sum over the replicas */
  uint64_t replica = loom__estimate_axes(e, e->comm_bytes, e->comm_formula, G, e->part);
  if (replica) {
    e->comm_bytes += replica;
    e->comm_bytes_paper += replica;
    char f[sizeof e->comm_formula];
    snprintf(f, sizeof f, "%s + %s over the replicas", N > 1 ? e->comm_formula : "0",
             e->axis_formula[1]);
    snprintf(e->comm_formula, sizeof e->comm_formula, "%s", f);
  }
}

/* What a pipeline stage adds to account()'s figures for its table (e->psi = the stage's
 * parameters): the activation pools of the micro-batches the schedule owner holds in flight,
 * the tied wte's gradient buffer and sum (the host's), the schedule owner's boundary buffers
 * and sends, and tensor parallel's traffic. Fills `st` with the stage's figures. */
static void account_stage(loom_estimate *e, const loom_runtime *rt, const gpt_model *m, int s,
                          const loom_estimate_v1 *rep, loom_estimate_stage *st) {
  const int P = e->pp, last = P - 1;
  const uint64_t C = (uint64_t)e->n_embd, N = (uint64_t)e->world,
                 VC = (uint64_t)gpt_vocab_rows(&m->cfg) * C; /* wte rows: padded */
  memset(st, 0, sizeof *st);
  st->first_unit = m->first_unit;
  st->last_unit = m->last_unit;
  for (int u = m->first_unit; u <= m->last_unit; u++) /* the units held (chunks: not between) */
    st->n_blocks += u >= 1 && u <= e->n_layer && m->unit_offset[u + 1] > m->unit_offset[u];
  st->psi = e->psi;
  st->act_per_micro = e->bytes[LOOM_MEM_ACTIVATIONS];
  /* micro-batches in flight (the schedule owner's report): each holds its own pool and token
   * buffers (gpt.c's slots) */
  int k = 1;
  const loom_estimate_v1 *sched = rt->schedule_owner >= 0 ? &rep[rt->schedule_owner] : NULL;
  if (sched) snprintf(e->schedule, sizeof e->schedule, "%s", P > 1 ? sched->schedule : "");
  if (P > 1 && sched && sched->in_flight > 0) k = sched->in_flight;
  else if (P > 1 && sched) k = e->accum; /* not reported: every micro-batch */
  st->in_flight = k;
  const int v = gpt_n_chunks(&m->cfg);
  if (P > 1 && v > 1) {
    /* interleaved: one slot pool per chunk (gpt_chunks.c), chunk c's pool as many slots as
     * the schedule holds chunk-c micro-batches at once (its per-chunk report; else the
     * whole in-flight count), each laid out for that chunk alone */
    uint64_t acts = 0, rec = 0, big = 0;
    int slots = 0;
    for (int c = 0; c < v; c++) {
      gpt_config cc = gpt_chunk_config(&m->cfg, c);
      int kc = sched && sched->n_chunks == v && c < LOOM_ESTIMATE_MAX_CHUNKS
                   ? sched->in_flight_chunk[c] : k;
      uint64_t r = gpt_recompute_bytes(&cc, e->micro_batch, e->seq_len);
      acts = sat_add(acts, sat_mul(gpt_activation_bytes(&cc, e->micro_batch, e->seq_len),
                                   (uint64_t)kc));
      if (r > rec) rec = r; /* the recompute scratch is the model's: the largest chunk's */
      uint64_t pool = gpt_activation_bytes(&cc, e->micro_batch, e->seq_len);
      if (pool > big) big = pool;
      slots += kc;
    }
    e->act_recompute = rec;
    e->bytes[LOOM_MEM_ACTIVATIONS] = sat_add(acts, rec);
    st->act_per_micro = big; /* the largest chunk's pool */
    k = slots; /* token buffers: one pair per slot */
  } else {
    e->bytes[LOOM_MEM_ACTIVATIONS] =
        sat_add(sat_mul(e->bytes[LOOM_MEM_ACTIVATIONS], (uint64_t)k), e->act_recompute);
  }
  /* only the token buffers are per micro-batch; 16-bit storage's fp32 unit work and stage are
   * the model's, once per rank */
  const uint64_t tokens = 2 * (uint64_t)e->micro_batch * e->seq_len * sizeof(int32_t);
  e->bytes[LOOM_MEM_OTHER] = sat_add(e->bytes[LOOM_MEM_OTHER], sat_mul(tokens, (uint64_t)(k - 1)));
  if (P > 1) {
    snprintf(e->formula[LOOM_MEM_ACTIVATIONS], 64, "%d %s pool at B=%d, T=%d%s", k,
             v > 1 ? "chunk slots x" : "in flight x stage", e->micro_batch,
             e->seq_len, e->act_recompute ? " + recompute" : "");
    const char *after = strstr(e->formula[LOOM_MEM_OTHER], "tokens 2*4*B*T");
    char rest[64];
    snprintf(rest, sizeof rest, "%s", after ? after + strlen("tokens 2*4*B*T") : "");
    snprintf(e->formula[LOOM_MEM_OTHER], 64, "%d x tokens 2*4*B*T%s", k, rest);
  }
  /* a padded vocabulary's logits mask (gpt.c: Vp floats, -inf on the padded columns), once,
   * on the stage that holds the head */
  const uint64_t Vp = (uint64_t)gpt_vocab_rows(&m->cfg), Vl = (uint64_t)gpt_vocab_local(&m->cfg);
  if (Vp > (uint64_t)m->cfg.vocab_size && m->last_unit == e->n_layer + 1) {
    e->bytes[LOOM_MEM_OTHER] += 4 * Vl; /* the rank's columns under vocab_parallel */
    append(e->formula[LOOM_MEM_OTHER], 64,
           Vl < Vp ? " + 4Vp/tp logits mask" : " + 4Vp logits mask");
  }
  /* vocabulary parallel (gpt.c vp_ensure): local ids and target columns 8BT, a zero wpe /
   * zero ids 4max(TmaxC, BT),
   * the split embedding backward's junk 4TmaxC, the row statistics' all-reduce buffer 2*8BT */
  const int vp = m->cfg.vocab_parallel && e->tp > 1;
  const uint64_t BT = (uint64_t)e->micro_batch * e->seq_len,
                 TC = (uint64_t)m->cfg.max_seq_len * C;
  if (vp) {
    e->bytes[LOOM_MEM_OTHER] += 8 * BT + 4 * (TC > BT ? TC : BT) + 4 * TC + 16 * BT;
    append(e->formula[LOOM_MEM_OTHER], 64, " + vp 24BT+4TC+4max(TC,BT)");
  }
  const int tied = P > 1 && (s == 0 || s == last);
  if (tied) { /* the tied wte's gradient buffer of the sum (trainer.c: emb_buf) */
    e->bytes[LOOM_MEM_COMM] += 4 * VC;
    if (e->bytes[LOOM_MEM_COMM] == 4 * VC)
      snprintf(e->formula[LOOM_MEM_COMM], 64, "4VC tied wte grad sum");
    else
      append(e->formula[LOOM_MEM_COMM], 64, " + 4VC tied");
  }
  /* the pipeline plugins' own buffers (after the host's: the tied buffer is the stage's) */
  for (int j = 0; j < rt->n_parallel; j++) {
    int i = call_order(rt, j);
    if (axis_of(rt->parallel[i].u.hdr.caps) == LOOM_PAR_CAP_AXIS_PP) apply(e, &rep[i]);
  }
  /* traffic per step per rank */
  char ftp[sizeof e->comm_formula], fpp[sizeof e->comm_formula], fcp[sizeof e->comm_formula];
  st->dp_comm_bytes = e->axis_dp;
  st->replica_comm_bytes = e->axis_replica;
  st->node_comm_bytes = e->axis_node;
  st->cross_comm_bytes = e->axis_cross;
  if (tied) st->tied_comm_bytes = 2 * (2 * N - 1) * 4 * VC / (2 * N);
  st->p2p_comm_bytes = axis_comm(rt, rep, LOOM_PAR_CAP_AXIS_PP, fpp, sizeof fpp);
  st->tp_comm_bytes = axis_comm(rt, rep, LOOM_PAR_CAP_AXIS_TP, ftp, sizeof ftp);
  if (m->cfg.sequence_parallel && e->tp > 1) {
    /* sequence parallel: the host's all-gathers / reduce-scatters (gpt_sp.c) replace the
     * plugin's f/g all-reduces (its region hook is not called) and vocab_parallel's sums */
    int recomputed = 0; /* fully recomputed blocks gather and scatter again */
    for (int u = m->first_unit; u <= m->last_unit; u++)
      recomputed += u >= 1 && u <= e->n_layer && e->ckpt_policy == GPT_CKPT_FULL &&
                    (u - 1) % (e->ckpt_every > 1 ? e->ckpt_every : 1) == 0;
    /* under bf16/fp16 the shards travel in 16 bits through a staging buffer of (tp + 1)
     * shards (trainer.c sp_stage16, LOOM_MEM_COMM) */
    const int elem = e->dtype != LOOM_F32 ? 2 : 4;
    st->tp_comm_bytes = (uint64_t)e->accum * gpt_sp_comm_bytes(&m->cfg, e->micro_batch,
                                                               e->seq_len, st->n_blocks,
                                                               recomputed, elem);
    if (elem == 2) {
      e->bytes[LOOM_MEM_COMM] += ((uint64_t)e->tp + 1) * BT / (uint64_t)e->tp * C * 2;
      append(e->formula[LOOM_MEM_COMM], 64, " + sp 16-bit staging 2(t+1)BTC/t");
    }
    snprintf(ftp, sizeof ftp, "sp (10L+3R+2+2vp)(t-1)/t 4BTC + LN grads");
  } else if (vp) { /* per micro-step: the embedding's sum and d(ln_f)'s (B*T*C fp32 each), the row
             * max (B*T fp64) and the row sum and target logit (2*B*T fp64), ring 2(tp-1)/tp */
    const uint64_t T = (uint64_t)e->tp, A = (uint64_t)e->accum;
    st->tp_comm_bytes += A * 2 * (T - 1) * (2 * 4 * BT * C + 3 * 8 * BT) / T;
    append(ftp, sizeof ftp, ftp[0] ? " + vp 2(t-1)/t(8BTC+24BT)" : "vp 2(t-1)/t(8BTC+24BT)");
  }
  e->tp_comm_bytes = st->tp_comm_bytes;
  st->cp_comm_bytes = axis_comm(rt, rep, LOOM_PAR_CAP_AXIS_CP, fcp, sizeof fcp);
  e->cp_comm_bytes = st->cp_comm_bytes;
  uint64_t extra = st->tied_comm_bytes + st->p2p_comm_bytes + st->tp_comm_bytes +
                   st->cp_comm_bytes;
  e->comm_bytes += extra;
  e->comm_bytes_paper += extra;
  if (e->tp > 1 || P > 1 || fcp[0]) {
    char f[sizeof e->comm_formula];
    snprintf(f, sizeof f, "%s", e->world > 1 ? e->comm_formula : "0 over dp");
    if (ftp[0]) append(f, sizeof f, " + "), append(f, sizeof f, ftp);
    if (fcp[0]) append(f, sizeof f, " + "), append(f, sizeof f, fcp);
    if (tied) append(f, sizeof f, " + 2(2N-1)/2N*4VC tied wte");
    if (fpp[0]) append(f, sizeof f, " + "), append(f, sizeof f, fpp);
    snprintf(e->comm_formula, sizeof e->comm_formula, "%s", f);
  }
  st->comm_bytes = e->comm_bytes;
  e->total = 0;
  for (int c = 0; c < LOOM_MEM__COUNT; c++) e->total = sat_add(e->total, e->bytes[c]);
  e->model_states = e->bytes[LOOM_MEM_PARAMS] + e->bytes[LOOM_MEM_GRADS] +
                    e->bytes[LOOM_MEM_OPTIM] + e->bytes[LOOM_MEM_HOST];
  memcpy(st->bytes, e->bytes, sizeof st->bytes);
  st->total = e->total;
  st->model_states = e->model_states;
}
/* The storage dtypes of the run: the host's storage plan (runtime/storage_plan.c, computed in
 * loom_estimate_compute for the planned world), never decided here. */
static void storage_plan(loom_estimate *e, const loom_runtime *rt) {
  e->param_dtype = rt->plan.v.param_dtype;
  e->grad_dtype = rt->plan.v.grad_dtype;
  e->storage16 = e->param_dtype != LOOM_F32;
  e->grad16 = e->grad_dtype != LOOM_F32;
}

/* The stand-in host the plugins' estimate slots see: the planned mesh (rank 0 of every axis;
 * describe() sets the pp rank), no communicator, each plugin's options with its file and JSON
 * path, as create() would get them. Labels are freed by loom__plugins_destroy. */
static int estimate_hosts(loom_runtime *rt, int dp, int dp_shard) {
  loom_mesh *mm = &rt->mesh;
  memset(mm, 0, sizeof *mm);
  mm->dp = dp;
  mm->tp = rt->tp_size > 1 ? rt->tp_size : 1;
  mm->pp = rt->pp_size > 1 ? rt->pp_size : 1;
  mm->world_size = dp * mm->tp * mm->pp;
  mm->dp_shard = dp_shard > 0 ? dp_shard : dp; /* loom__estimate_mesh's ("node" resolved) */
  mm->dp_replica = dp / mm->dp_shard;
  mm->cp = rt->cp_size > 1 ? rt->cp_size : 1;
  mm->data_dp = dp / mm->cp;
  const loom_config *cfg = rt->cfg;
  for (int i = 0; i < rt->n_parallel; i++) {
    const loom_plugin_cfg *pc = &cfg->parallel[i];
    size_t n = strlen(pc->name) + strlen(pc->json_path) + 4;
    char *label = malloc(n);
    if (!label) return -1;
    snprintf(label, n, "%s (%s)", pc->name, pc->json_path);
    loom__host_init(&rt->parallel_host[i], rt, label, cfg->path, pc->json_path, pc->options);
  }
  return 0;
}

int loom_estimate_compute(const char *config_path, const char *const *overrides, int n_overrides,
                          int world, int ranks_per_node, loom_estimate *e, char *err,
                          size_t errlen) {
  memset(e, 0, sizeof *e);
  e->ranks_per_node = ranks_per_node > 0 ? ranks_per_node : 0;
  if (world < 1) {
    snprintf(err, errlen, "--world: expected an integer >= 1, got %d", world);
    return -1;
  }
  loom_config *cfg = calloc(1, sizeof *cfg);
  loom_runtime *rt = calloc(1, sizeof *rt);
  if (!cfg || !rt) {
    free(cfg);
    free(rt);
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  int rc = -1;
  gpt_model m;
  memset(&m, 0, sizeof m);
  loom_estimate *tmp = NULL, *best = NULL;
  loom_estimate_v1 *rep = NULL; /* the plugins' reports of the stage, by plugin index */
  rt->cfg = cfg;
  if (loom_config_load(cfg, config_path, overrides, n_overrides, err, errlen) != 0) goto out;
  /* the plugins are opened, never created: their caps are all the estimate needs */
  if (loom__plugins_open(rt, err, errlen) != 0) goto out;
  /* the precision plugin alone is created: its compute dtype decides the 16-bit terms */
  if (loom__precision_create(rt, err, errlen) != 0) goto out;
  e->dtype = rt->compute_dtype;
  snprintf(e->config, sizeof e->config, "%s", config_path);
  /* a device plugin is found and checked like the others, never created (no GPU needed): the
   * categories below are what the model allocates through any device's table */
  snprintf(e->device, sizeof e->device, "%s", cfg->device.type[0] ? cfg->device.type : "cpu");
  const loom_device_v1 *cpu = loom__cpu_device();
  int dev_acts16 = cpu->acts16 != NULL; /* the device has ABI 1.8's kernels */
  int dev_lse = cpu->attention_forward_lse && cpu->attention_backward_lse; /* and 1.9's */
  if (strcmp(e->device, "cpu") != 0) {
    loom_plugin dp;
    char de[1200];
    if (loom__plugin_open(&dp, cfg->device.type, LOOM_KIND_DEVICE, de, sizeof de) != 0) {
      snprintf(err, errlen, "%s: device.type: %s", cfg->path, de);
      goto out;
    }
    dev_acts16 = dp.u.device.acts16 != NULL; /* not created: its slot stands for its answer */
    /* likewise the lse slots stand for its acts16 table's (which needs a context to ask) */
    dev_lse = dp.u.device.attention_forward_lse && dp.u.device.attention_backward_lse;
    loom__plugin_close(&dp);
  }
  /* tensor parallel: the accounting below is per tp rank over the dp axis (psi = the local
   * parameters), plus Megatron's 4 all-reduces of B*T*C per layer per micro-step; pipeline
   * parallel: per stage (psi = the stage's parameters), see account_stage */
  e->tp = rt->tp_size > 1 ? rt->tp_size : 1;
  e->pp = rt->pp_size > 1 ? rt->pp_size : 1;
  if (world % (e->tp * e->pp) != 0) {
    if (e->pp > 1)
      snprintf(err, errlen, "%s: --world %d is not a multiple of tensor-parallel size %d x "
               "pipeline stages %d = %d", cfg->path, world, e->tp, e->pp, e->tp * e->pp);
    else
      snprintf(err, errlen, "%s: --world %d is not a multiple of the tensor-parallel size %d",
               cfg->path, world, e->tp);
    goto out;
  }
  world /= e->tp * e->pp;
  /* context parallel: world stays the dp x cp gradient group (mesh.c); the data-parallel
   * batch split is over world / cp, and each rank holds T / cp tokens of a sequence */
  e->cp = rt->cp_size > 1 ? rt->cp_size : 1;
  if (world % e->cp != 0) {
    snprintf(err, errlen, "%s: --world %d: context-parallel size %d does not divide the %d "
             "ranks left after tensor-parallel size %d x pipeline stages %d", cfg->path,
             world * e->tp * e->pp, e->cp, world, e->tp, e->pp);
    goto out;
  }
  e->world = world;
  if (loom__estimate_mesh(rt, e, err, errlen) != 0) goto out;
  e->n_plugins = rt->n_parallel;
  for (int i = 0; i < rt->n_parallel; i++) {
    snprintf(e->plugins[i].name, sizeof e->plugins[i].name, "%s", cfg->parallel[i].name);
    e->plugins[i].caps = rt->parallel[i].u.hdr.caps;
  }
  /* the batch before the storage plan: a DeepSpeed file's rule may derive grad_accum_steps */
  if (loom_config_check_batch(cfg, world / e->cp, err, errlen) != 0) goto out;
  /* the storage plan the host will follow (storage_plan.c), for `world` data-parallel ranks:
   * the dtypes of the flat buffers, and whether the gradient sync only sums (predivided) */
  loom__storage_plan(rt, e->dtype, world, &rt->plan);
  e->predivide = rt->plan.v.grads_predivided;
  decide_roles(e);
  storage_plan(e, rt);
  if (world > 1 && !e->grad_sync) {
    snprintf(err, errlen, "%s: parallel: %d data-parallel ranks but no plugin owns gradient "
             "sync: the replicas would drift apart (add {\"plugin\": \"ddp\"})", cfg->path,
             world);
    goto out;
  }
  e->n_layer = cfg->model.n_layer;
  e->n_head = cfg->model.n_head;
  e->n_embd = cfg->model.n_embd;
  e->vocab_size = cfg->model.vocab_size;
  e->context_length = cfg->model.context_length;
  e->micro_batch = cfg->train.micro_batch_size;
  e->seq_len = cfg->train.seq_len / e->cp; /* per rank (read_cp checked T % (2 cp)) */
  e->accum = cfg->train.grad_accum_steps;
  /* the parameter tables only: no device, no storage */
  gpt_config full = {.vocab_size = cfg->model.vocab_size,
                     .padded_vocab_size = cfg->model.padded_vocab_size,
                     .max_seq_len = cfg->model.context_length, .n_layer = cfg->model.n_layer,
                     .n_head = cfg->model.n_head, .n_embd = cfg->model.n_embd,
                     .tp_size = e->tp, .tp_rank = 0, .vocab_parallel = rt->tp_vocab,
                   .sequence_parallel = rt->tp_seq,
                     .ckpt_policy = cfg->activation_checkpointing.policy,
                     .ckpt_every = cfg->activation_checkpointing.every,
                     .dtype = (int)e->dtype, .param_dtype = (int)e->param_dtype,
                     .grad_dtype = (int)e->grad_dtype, .acts_typed = dev_acts16};
  /* flash attention as the trainer decides it (model.attention "flash" on a device without
   * the slots is the trainer's error; here it is sized as materialised) */
  full.attn_lse = dev_lse && cfg->model.attention != LOOM_ATTN_MATERIALIZED;
  if (e->cp > 1) full.attn_lse = 1, full.cp_size = e->cp; /* the ring keeps (out, lse) */
  e->attn_lse = full.attn_lse;
  /* as the trainer: the whole model without tp takes them (gpt_config.acts_typed) */
  e->acts16 = dev_acts16 && e->dtype != LOOM_F32 && e->tp == 1 && e->pp == 1;
  e->ckpt_policy = full.ckpt_policy;
  e->vocab_parallel = full.vocab_parallel && e->tp > 1;
  e->sequence_parallel = full.sequence_parallel && e->tp > 1;
  e->ckpt_every = full.ckpt_every;
  char me[512];
  if (gpt_init_ex(&m, &full, NULL, GPT_NO_PARAM_STORAGE | GPT_NO_GRAD_STORAGE, me, sizeof me) !=
      LOOM_OK) {
    snprintf(err, errlen, "%s: %s", cfg->path, me);
    goto out;
  }
  e->psi_model = m.num_parameters;
  gpt_free(&m);
  memset(&m, 0, sizeof m);
  /* the trainer's split (the same function), then every stage on its own table */
  if (loom__pp_split(rt, &full, me, sizeof me) != 0) {
    snprintf(err, errlen, "%s: %s", cfg->path, me);
    goto out;
  }
  if (gpt_activation_bytes(&full, e->micro_batch, e->seq_len) == SIZE_MAX) {
    snprintf(err, errlen, "%s: train.micro_batch_size: the activations of one micro-batch of %d "
             "x %d tokens (n_layer %d, n_embd %d, n_head %d) exceed 2^54 bytes: no machine "
             "holds them", cfg->path, e->micro_batch, e->seq_len, e->n_layer, e->n_embd,
             e->n_head);
    goto out;
  }
  tmp = malloc(sizeof *tmp);
  best = malloc(sizeof *best);
  rep = calloc(LOOM_MAX_PARALLEL, sizeof *rep);
  if (!tmp || !best || !rep || estimate_hosts(rt, world, e->dp_shard) != 0) {
    snprintf(err, errlen, "out of memory");
    goto out;
  }
  for (int s = 0; s < e->pp; s++) {
    gpt_config sc = loom__pp_stage_config(rt, &full, s);
    if (gpt_init_ex(&m, &sc, NULL, GPT_NO_PARAM_STORAGE | GPT_NO_GRAD_STORAGE, me, sizeof me) !=
        LOOM_OK) {
      snprintf(err, errlen, "%s: %s", cfg->path, me);
      goto out;
    }
    memcpy(tmp, e, sizeof *tmp);
    tmp->psi = m.num_parameters;
    if (describe(rt, tmp, &m, s, rep, err, errlen) != 0) goto out;
    account(tmp, rt, &m, rep);
    account_stage(tmp, rt, &m, s, rep, &e->stages[s]);
    if (s == 0 || tmp->total > best->total) {
      memcpy(best, tmp, sizeof *best);
      best->worst_stage = s;
    }
    gpt_free(&m);
    memset(&m, 0, sizeof m);
  }
  memcpy(best->stages, e->stages, sizeof e->stages);
  memcpy(e, best, sizeof *e);
  rc = 0;
out:
  free(rep);
  free(tmp);
  free(best);
  gpt_free(&m);
  loom__plugins_destroy(rt);
  loom_config_free(cfg);
  free(rt);
  free(cfg);
  return rc;
}

/* ---- output ---- */

static const char *policy_name(int policy) {
  return policy == GPT_CKPT_FULL ? "full" : policy == GPT_CKPT_SELECTIVE ? "selective" : "none";
}

/* The bytes one transformer block keeps for backward at (B, T), in the style of Korthikanti et
 * al. 2022, Table 2, for loom's fp32 kernels (s = T, b = B, h = C, a = NH, t = tp; gpt.c's
 * 64-byte alignment aside): LayerNorm outputs 2 x 4sbh and their mean/rstd 2 x 8sb, the residual
 * stream after attention and after the MLP 2 x 4sbh, q k v 12sbh/t, the attention output
 * 4sbh/t, fc and gelu(fc) 2 x 16sbh/t, the attention probabilities 4as^2b/t:
 *   none       sbh(16 + 48/t) + 16sb + 4as^2b/t
 *   selective  sbh(16 + 48/t) + 16sb              (the probabilities are recomputed)
 *   full       4sbh                               (the block's output, the next block's input)
 * Flash attention (attn_lse) keeps the rows' log-sum-exp instead of the probabilities: 4asb/t
 * in place of 4as^2b/t, and backward's (B,NH,T,T) datt scratch is gone.
 * Under bf16/fp16 the saved values (both LayerNorm outputs, the residual after attention, q k v,
 * the attention output, fc and gelu(fc)) are 2 bytes per element: sbh(10 + 24/t) + 16sb in
 * place of sbh(16 + 48/t) + 16sb (the block's output, the stats and the probabilities stay
 * fp32), and every rank holds one block's values in fp32 as the kernels' scratch.
 * With 16-bit activations end to end (acts16) every tensor above but the stats and the
 * probabilities is 2 bytes: none sbh(8 + 24/t) + 16sb + 4as^2b/t, selective sbh(8 + 24/t) +
 * 16sb, full 2sbh; no fp32 scratch.
 * A rank with checkpointing (or 16-bit saved values) holds one recompute scratch on top
 * (act_recompute). */
static uint64_t block_act_bytes(const loom_estimate *e, int policy) {
  const uint64_t s = (uint64_t)e->seq_len, b = (uint64_t)e->micro_batch, h = (uint64_t)e->n_embd,
                 a = (uint64_t)e->n_head, t = (uint64_t)(e->tp > 1 ? e->tp : 1);
  /* what attention keeps: the probabilities (4as^2b/t) or their rows' log-sum-exp (4asb/t) */
  const uint64_t att = e->attn_lse ? 4 * a * s * b / t : 4 * a * s * s * b / t;
  if (e->acts16) { /* every tensor above in 2 bytes but the stats and the probabilities */
    if (policy == GPT_CKPT_FULL) return 2 * s * b * h;
    uint64_t kept = s * b * h * 8 + s * b * h * 24 / t + 16 * s * b;
    return policy == GPT_CKPT_SELECTIVE ? kept : kept + att;
  }
  if (e->sequence_parallel) { /* fp32; the residual region's tensors (4sbh(4)) and stats 1/t */
    if (policy == GPT_CKPT_FULL) return 4 * s * b * h / t;
    uint64_t kept = s * b * h * 64 / t + 16 * s * b / t;
    return policy == GPT_CKPT_SELECTIVE ? kept : kept + att;
  }
  if (policy == GPT_CKPT_FULL) return 4 * s * b * h;
  uint64_t kept = e->dtype != LOOM_F32 ? s * b * h * 10 + s * b * h * 24 / t + 16 * s * b
                                       : s * b * h * 16 + s * b * h * 48 / t + 16 * s * b;
  return policy == GPT_CKPT_SELECTIVE ? kept : kept + att;
}

static const char *precision_name(loom_dtype dt) {
  return dt == LOOM_BF16 ? "bf16" : dt == LOOM_F16 ? "fp16" : "fp32";
}

static const loom_mem_category order[] = {LOOM_MEM_PARAMS, LOOM_MEM_GRADS, LOOM_MEM_OPTIM,
                                          LOOM_MEM_HOST,   LOOM_MEM_ACTIVATIONS,
                                          LOOM_MEM_COMM,   LOOM_MEM_OTHER};

static const char *row_name(loom_mem_category c) {
  switch (c) {
    case LOOM_MEM_PARAMS: return "parameters";
    case LOOM_MEM_GRADS: return "gradients";
    case LOOM_MEM_OPTIM: return "optimizer state";
    case LOOM_MEM_HOST: return "host (offload)";
    case LOOM_MEM_ACTIVATIONS: return "activations";
    case LOOM_MEM_COMM: return "comm buffers";
    case LOOM_MEM_OTHER: return "other";
    default: return "?";
  }
}

void loom_estimate_print(FILE *out, const loom_estimate *e) {
  int tp = e->tp > 1 ? e->tp : 1;
  int pp = e->pp > 1 ? e->pp : 1;
  fprintf(out, "loom estimate: %s, device %s, world %d (dp %d, tp %d, pp %d)\n", e->config,
          e->device[0] ? e->device : "cpu",
          e->world * tp * pp, e->world, tp, pp);
  if (tp > 1 && !e->sequence_parallel)
    fprintf(out, "tensor parallel: Psi below is per tp rank (heads and MLP units split %d ways; "
            "%s); f/g traffic (4 x L%s%s) x 2(tp-1)/tp x B*T*C*4 x accum%s = %llu bytes per "
            "step, included in the communication below\n", tp,
            e->vocab_parallel ? "wte and the logits split over the vocabulary (vocab_parallel), "
                                "wpe and LayerNorms replicated"
                              : "embeddings, LayerNorms replicated",
            e->pp > 1 ? " (the stage's blocks)" : "",
            e->ckpt_policy == GPT_CKPT_FULL ? " + 1 per recomputed block" : "",
            e->vocab_parallel ? " + vocab_parallel 2(tp-1)/tp x (8*B*T*C + 24*B*T) x accum" : "",
            (unsigned long long)e->tp_comm_bytes);
  if (tp > 1 && e->sequence_parallel)
    fprintf(out, "tensor parallel x sequence parallel: Psi below is per tp rank (heads and MLP "
            "units split %d ways%s); LayerNorms and the residual stream sharded along T (B x T/%d "
            "rows a rank); tp traffic: all-gathers and reduce-scatters, (10 x L + 3 x "
            "recomputed + 2 + 2 x vocab_parallel) x (tp-1)/tp x B*T*C*4 + the LayerNorm "
            "gradients' all-reduces%s, per micro-step x accum = %llu bytes per step (16-bit "
            "gathers and scatters under bf16/fp16), included "
            "in the communication below (docs/parallelism.md)\n", tp,
            e->vocab_parallel ? "; wte and the logits over the vocabulary" : "", tp,
            e->vocab_parallel ? " + the row statistics'" : "",
            (unsigned long long)e->tp_comm_bytes);
  if (e->cp > 1)
    fprintf(out, "context parallel: cp %d (dp above counts the dp x cp gradient group: %d "
            "batch groups x %d); each rank holds T/cp = %d tokens of every sequence, so the "
            "activations below are 1/cp; the K/V ring is in the communication below\n", e->cp,
            e->world / e->cp, e->cp, e->seq_len);
  if (e->note[0]) fprintf(out, "%s\n", e->note);
  fprintf(out, "model: Psi = %llu parameters (n_layer %d, n_head %d, n_embd %d, vocab %d, "
          "context %d); per rank: micro-batch %d x %d tokens, accum %d\n",
          (unsigned long long)e->psi_model, e->n_layer, e->n_head, e->n_embd, e->vocab_size,
          e->context_length, e->micro_batch, e->seq_len, e->accum);
  if (pp > 1) {
    fprintf(out, "pipeline: %d stages, schedule %s, m = %d micro-batches; per stage (Psi with "
            "the last stage's tied wte copy; comm per step per rank):\n", pp, e->schedule,
            e->accum);
    fprintf(out, "  %-5s %-7s %10s %9s %12s %12s %12s %12s %12s\n", "stage", "units", "Psi",
            "in flight", "states", "activations", "total", "comm/step", "of it p2p");
    for (int s = 0; s < pp; s++) {
      const loom_estimate_stage *st = &e->stages[s];
      char units[16];
      snprintf(units, sizeof units, "%d..%d", st->first_unit, st->last_unit);
      fprintf(out, "  %-5d %-7s %10llu %9d %12llu %12llu %12llu %12llu %12llu%s\n", s, units,
              (unsigned long long)st->psi, st->in_flight, (unsigned long long)st->model_states,
              (unsigned long long)st->bytes[LOOM_MEM_ACTIVATIONS],
              (unsigned long long)st->total, (unsigned long long)st->comm_bytes,
              (unsigned long long)st->p2p_comm_bytes, s == e->worst_stage ? "  <- below" : "");
    }
    fprintf(out, "stage %d (the largest): Psi = %llu\n", e->worst_stage,
            (unsigned long long)e->psi);
  }
  if (e->dp_replica > 1)
    fprintf(out, "hybrid sharding: shard groups of %d consecutive dp ranks x R = %d replicas (dp "
            "%d): N below is the shard group's size, %d; the host sums the partition's gradient "
            "over the R replicas\n", e->dp_shard, e->dp_replica, e->world, e->dp_shard);
  fprintf(out, "plugins:");
  if (!e->n_plugins) fprintf(out, " none");
  for (int i = 0; i < e->n_plugins; i++) {
    char r[160];
    roles_text(e->plugins[i].caps, r, sizeof r);
    fprintf(out, " %s [%s]", e->plugins[i].name, r);
  }
  if (e->dtype == LOOM_F32)
    fprintf(out, "\nstrategy by roles: %s; fp32, Adam K = 8 (ZeRO paper sec. 3: 4Psi params + "
            "4Psi grads + 8Psi optim; the parameters are their own master)\n", e->strategy);
  else if (e->storage16)
    fprintf(out, "\nstrategy by roles: %s; %s storage: %dPsi params + %dPsi grads%s + K = 12 "
            "(fp32 master, m, v) (ZeRO paper sec. 3)%s\n", e->strategy,
            precision_name(e->dtype), e->param_elem, e->grad_elem,
            e->grad16 ? "" : " (fp32: grad_accum_steps > 1 accumulates in fp32)",
            e->sync16 ? "; gradients reduced in 16 bits" : "");
  else
    fprintf(out, "\nstrategy by roles: %s; %s compute in fp32 buffers (a plugin without "
            "LOOM_PAR_STORAGE_16BIT: the fp32 master is the parameters, 4Psi + the working "
            "unit), fp32 grads 4Psi, Adam K = 8%s\n", e->strategy, precision_name(e->dtype),
            e->sync16 ? "; gradients reduced in 16 bits" : "");
  fprintf(out, "  %-16s %-40s %15s %10s\n", "category", "formula", "bytes/rank", "MiB");
  for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
    loom_mem_category c = order[i];
    fprintf(out, "  %-16s %-40s %15llu %10.2f\n", row_name(c), e->formula[c],
            (unsigned long long)e->bytes[c], (double)e->bytes[c] / 1048576.0);
  }
  fprintf(out, "  %-16s %-40s %15llu %10.2f\n", "model states", "params+grads+optim+host",
          (unsigned long long)e->model_states, (double)e->model_states / 1048576.0);
  fprintf(out, "  %-16s %-40s %15llu %10.2f\n", "ZeRO paper", e->paper_formula,
          (unsigned long long)e->paper_states, (double)e->paper_states / 1048576.0);
  if (e->working)
    fprintf(out, "  %-16s %-40s %15llu %10.2f\n", "  + working", "fp32 unit weights (1.3 layout)",
            (unsigned long long)e->working, (double)e->working / 1048576.0);
  fprintf(out, "  %-16s %-40s %15llu %10.2f\n", "total", "sum of the rows (>= every rank's peak)",
          (unsigned long long)e->total,
          (double)e->total / 1048576.0);
  /* three layouts: fp32; 16-bit saved copies (bf16/fp16 with tp or pipeline stages); 16-bit end
   * to end (acts16): every tensor but the stats and the probabilities */
  const int lay = e->dtype == LOOM_F32 ? 0 : e->acts16 ? 2 : 1;
  static const char *const lay_name[] = {"fp32", "16-bit saved values", "16-bit activations"};
  static const char *const lay_kept[] = {"16+48/t", "10+24/t", "8+24/t"};
  /* sequence parallel (fp32): the residual region's tensors and stats 1/t as well */
  const int sp = e->sequence_parallel;
  const char *sb = sp ? "16sb/t" : "16sb";
  fprintf(out, "activations per block (Korthikanti et al. 2022 Table 2 style, %s, %s attention; "
          "s=T b=B h=C a=NH t=tp): none sbh(%s)+%s+%s = %llu, selective sbh(%s)+%s = %llu, "
          "full %s = %llu; activation_checkpointing %s", lay_name[lay],
          e->attn_lse ? "flash" : "materialized", sp ? "64/t" : lay_kept[lay], sb,
          e->attn_lse ? "4asb/t (lse)" : "4as^2b/t",
          (unsigned long long)block_act_bytes(e, GPT_CKPT_NONE), sp ? "64/t" : lay_kept[lay], sb,
          (unsigned long long)block_act_bytes(e, GPT_CKPT_SELECTIVE),
          sp ? "4sbh/t" : lay == 2 ? "2sbh" : "4sbh",
          (unsigned long long)block_act_bytes(e, GPT_CKPT_FULL), policy_name(e->ckpt_policy));
  if (e->ckpt_policy != GPT_CKPT_NONE)
    fprintf(out, " every %d, recompute scratch %llu bytes once per rank", e->ckpt_every,
            (unsigned long long)e->act_recompute);
  fprintf(out, "\n");
  fprintf(out, "communication per step per rank: %s = %llu bytes (%.2f MiB)", e->comm_formula,
          (unsigned long long)e->comm_bytes, (double)e->comm_bytes / 1048576.0);
  if (e->comm_bytes_paper != e->comm_bytes)
    fprintf(out, "; the ZeRO paper's formula: %llu", (unsigned long long)e->comm_bytes_paper);
  fprintf(out, "\n");
  loom__estimate_axes_print(out, e);
}

int loom_estimate_print_json(FILE *out, const loom_estimate *e, json_t *inter_node) {
  json_t *plugins = json_array(), *bytes = json_object(), *formula = json_object();
  for (int i = 0; i < e->n_plugins; i++) {
    char r[160];
    roles_text(e->plugins[i].caps, r, sizeof r);
    json_array_append_new(plugins, json_pack("{s:s, s:I, s:s}", "name", e->plugins[i].name,
                                             "caps", (json_int_t)e->plugins[i].caps, "roles",
                                             r));
  }
  for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
    const char *k = loom__mem_category_name(order[i]);
    json_object_set_new(bytes, k, json_integer((json_int_t)e->bytes[order[i]]));
    json_object_set_new(formula, k, json_string(e->formula[order[i]]));
  }
  json_object_set_new(bytes, "total", json_integer((json_int_t)e->total));
  json_t *doc = json_pack(
      "{s:s, s:i, s:I, s:I, s:I, s:o, s:s, s:i, s:{s:b, s:b, s:b, s:b, s:b}, "
      "s:{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i}, s:o, s:o, s:I, s:I, s:s}",
      "config", e->config, "world", e->world * (e->tp > 1 ? e->tp : 1) * (e->pp > 1 ? e->pp : 1), "psi", (json_int_t)e->psi, "partition",
      (json_int_t)e->part, "gathered_unit", (json_int_t)e->gathered, "plugins", plugins,
      "strategy", e->strategy, "stage", e->stage, "roles", "grad_sync", e->grad_sync,
      "shard_optim", e->shard_optim, "shard_grads", e->shard_grads, "shard_params",
      e->shard_params, "offload", e->offload, "model", "n_layer", e->n_layer, "n_head",
      e->n_head, "n_embd", e->n_embd, "vocab_size", e->vocab_size, "context_length",
      e->context_length, "micro_batch_size", e->micro_batch, "seq_len", e->seq_len,
      "grad_accum_steps", e->accum, "bytes", bytes, "formula", formula, "model_states",
      (json_int_t)e->model_states, "comm_bytes_per_step", (json_int_t)e->comm_bytes,
      "comm_formula", e->comm_formula);
  if (doc) json_object_set_new(doc, "device", json_string(e->device[0] ? e->device : "cpu"));
  if (doc) {
    json_object_set_new(doc, "precision", json_string(precision_name(e->dtype)));
    json_object_set_new(doc, "grad_reduce_16bit", json_boolean(e->sync16));
    json_object_set_new(doc, "activations_16bit", json_boolean(e->acts16));
    json_object_set_new(doc, "attention", json_string(e->attn_lse ? "flash" : "materialized"));
    json_object_set_new(doc, "param_storage", json_string(precision_name(e->param_dtype)));
    json_object_set_new(doc, "grad_storage", json_string(precision_name(e->grad_dtype)));
    json_object_set_new(
        doc, "storage",
        json_pack("{s:b, s:b, s:i, s:i, s:i}", "params_16bit", e->storage16, "grads_16bit",
                  e->grad16, "param_bytes", e->param_elem, "grad_bytes", e->grad_elem,
                  "optim_k", e->optim_k));
    json_object_set_new(doc, "model_states_paper", json_integer((json_int_t)e->paper_states));
    json_object_set_new(doc, "paper_formula", json_string(e->paper_formula));
    json_object_set_new(doc, "working_bytes", json_integer((json_int_t)e->working));
    if (e->detail_name[0]) /* a plugin's own figure (ddp: its split of the tied embedding) */
      json_object_set_new(
          doc, e->detail_name,
          json_pack("{s:b, s:I, s:I, s:I}", "on", e->detail_on, "rows",
                    (json_int_t)e->detail_rows, "bytes", (json_int_t)e->detail_bytes,
                    "comm_bytes_per_step", (json_int_t)e->detail_comm_bytes));
    json_t *stages = json_array();
    for (int s = 0; s < (e->pp > 1 ? e->pp : 1); s++) {
      const loom_estimate_stage *st = &e->stages[s];
      json_t *b = json_object();
      for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
        json_object_set_new(b, loom__mem_category_name(order[i]),
                            json_integer((json_int_t)st->bytes[order[i]]));
      json_object_set_new(b, "total", json_integer((json_int_t)st->total));
      json_array_append_new(
          stages, json_pack("{s:i, s:i, s:i, s:i, s:I, s:i, s:I, s:o, s:I, s:I, s:{s:I, s:I, "
                            "s:I, s:I}}",
                            "stage", s, "first_unit", st->first_unit, "last_unit",
                            st->last_unit, "n_blocks", st->n_blocks, "psi",
                            (json_int_t)st->psi, "in_flight", st->in_flight,
                            "activations_per_micro_batch", (json_int_t)st->act_per_micro,
                            "bytes", b, "model_states", (json_int_t)st->model_states,
                            "comm_bytes_per_step", (json_int_t)st->comm_bytes, "comm",
                            "dp", (json_int_t)st->dp_comm_bytes, "tied_wte",
                            (json_int_t)st->tied_comm_bytes, "p2p",
                            (json_int_t)st->p2p_comm_bytes, "tp",
                            (json_int_t)st->tp_comm_bytes));
    }
    json_object_set_new(doc, "pp", json_integer(e->pp > 1 ? e->pp : 1));
    json_object_set_new(doc, "dp", json_integer(e->world));
    json_object_set_new(doc, "dp_shard", json_integer(e->dp_shard));
    json_object_set_new(doc, "dp_replica", json_integer(e->dp_replica));
    json_object_set_new(doc, "comm_axes", loom__estimate_axes_json(e));
    json_object_set_new(doc, "schedule", json_string(e->schedule));
    json_object_set_new(doc, "psi_model", json_integer((json_int_t)e->psi_model));
    json_object_set_new(doc, "worst_stage", json_integer(e->worst_stage));
    json_object_set_new(doc, "stages", stages);
    json_object_set_new(doc, "tp", json_integer(e->tp > 1 ? e->tp : 1));
    json_object_set_new(doc, "tp_comm_bytes", json_integer((json_int_t)e->tp_comm_bytes));
    json_object_set_new(doc, "cp", json_integer(e->cp > 1 ? e->cp : 1));
    json_object_set_new(doc, "cp_comm_bytes", json_integer((json_int_t)e->cp_comm_bytes));
    json_object_set_new(doc, "vocab_parallel", json_boolean(e->vocab_parallel));
    json_object_set_new(doc, "sequence_parallel", json_boolean(e->sequence_parallel));
    json_object_set_new(
        doc, "activation_checkpointing",
        json_pack("{s:s, s:i, s:I, s:{s:I, s:I, s:I}}", "policy", policy_name(e->ckpt_policy),
                  "every", e->ckpt_every, "recompute_bytes", (json_int_t)e->act_recompute,
                  "block_bytes", "none", (json_int_t)block_act_bytes(e, GPT_CKPT_NONE),
                  "selective", (json_int_t)block_act_bytes(e, GPT_CKPT_SELECTIVE), "full",
                  (json_int_t)block_act_bytes(e, GPT_CKPT_FULL)));
  }
  if (doc)
    json_object_set_new(doc, "comm_bytes_per_step_paper",
                        json_integer((json_int_t)e->comm_bytes_paper));
  if (doc && inter_node) json_object_set(doc, "inter_node", inter_node);
  json_decref(inter_node);
  if (!doc) return -1;
  char *s = json_dumps(doc, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
  json_decref(doc);
  if (!s) return -1;
  fprintf(out, "%s\n", s);
  free(s);
  return 0;
}
