/* `loom estimate`: the ZeRO paper's memory accounting and communication volume for a config,
 * decided by the roles of its parallel plugins (see estimate.h for the formulas). */
#include "estimate.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "../device/device.h"
#include "../model/gpt.h"
#include "../runtime/plugins.h"

static uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

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
           e->stage == 0 && e->world == 1 ? "single rank (no sharding)" : names[e->stage],
           e->offload ? " + optimizer offload to host" : "");
}

/* The option `key` of the first plugin that has `role` (borrowed), or NULL when absent. */
static json_t *role_option(const loom_config *cfg, const loom_estimate *e, uint64_t role,
                           const char *key) {
  for (int i = 0; i < e->n_plugins; i++)
    if ((e->plugins[i].caps & role) && cfg->parallel[i].options)
      return json_object_get(cfg->parallel[i].options, key);
  return NULL;
}

/* ZeRO-2/3 gradient buckets (LOOM_MEM_COMM), as zero_common.c hands them out: unit 0 alone
 * (the head adds into the tied wte's gradient, so unit 0's bucket is held through the whole
 * backward), the other units merged from the head down while a bucket stays within
 * reduce_bucket_size elements. A bucket is filled by its units' backward, then reduce-scattered
 * into a received block (rank 0's part of it, at least one element); both are freed when that
 * completes. With overlap (N > 1 and overlap_comm) one reduce-scatter stays in flight while
 * the next bucket fills (double buffering; launching the next completes it first): the bound
 * assumes it is still in flight then. Returns the peak, in elements. */
static uint64_t grad_bucket_set(const gpt_model *m, uint64_t cap, uint64_t N, uint64_t shard,
                                int overlap) {
  const size_t *off = m->unit_offset;
  const uint64_t b0 = off[1] - off[0];
  uint64_t peak = 0, inflight = 0;
  for (int u = m->n_units - 1; u >= 0;) {
    int lo = u;
    while (lo > 1 && off[u + 1] - off[lo - 1] <= cap) lo--;
    uint64_t a = off[lo], b = off[u + 1], n = b - a;
    uint64_t recv = N == 1 ? n : (a < shard ? (b < shard ? b : shard) - a : 0);
    if (recv == 0) recv = 1;
    uint64_t held = lo == 0 ? 0 : b0; /* unit 0's bucket, besides this one */
    uint64_t filling = held + n + inflight, launched = held + n + recv;
    if (filling > peak) peak = filling;
    if (launched > peak) peak = launched;
    inflight = overlap && N > 1 ? n + recv : 0;
    u = lo - 1;
  }
  return peak;
}

static void account(loom_estimate *e, const loom_config *cfg, const gpt_model *m) {
  const uint64_t N = (uint64_t)e->world, psi = e->psi;
  const char *p = N > 1 ? "/N" : "";
  /* the optimizer partition: a shard of ceil(Psi/N) (rank 0's) when some plugin shards it */
  e->part = e->shard_optim ? ceil_div(psi, N) : psi;
  uint64_t shard = ceil_div(psi, N);

  /* parameters */
  const uint64_t wte = m->params[0].numel, head = m->unit_offset[m->n_units] -
                                                 m->unit_offset[m->n_units - 1];
  if (e->shard_params) {
    /* the largest set of parameters gathered at once: a unit, the head with the tied wte it
     * reads (gpt.h: the head uses unit 0's wte); with prefetch (the sharding plugin's
     * "prefetch" option, off unless true) the next unit's gather is in flight as well */
    json_t *pf = role_option(cfg, e, LOOM_PAR_CAP_SHARD_PARAMS, "prefetch");
    int prefetch = json_is_true(pf);
    uint64_t g = 0, prev = 0;
    for (int u = 0; u < m->n_units; u++) {
      uint64_t n = m->unit_offset[u + 1] - m->unit_offset[u];
      if (u == m->n_units - 1) n += wte;
      uint64_t set = prefetch ? n + prev : n;
      if (set > g) g = set;
      prev = n;
    }
    e->gathered = g;
    e->bytes[LOOM_MEM_PARAMS] = 4 * (shard + g);
    snprintf(e->formula[LOOM_MEM_PARAMS], 64, "4Psi%s + 4*%llu (gathered%s)", p,
             (unsigned long long)g, prefetch ? ", 2 units" : "");
  } else {
    e->bytes[LOOM_MEM_PARAMS] = 4 * psi;
    snprintf(e->formula[LOOM_MEM_PARAMS], 64, "4Psi");
  }
  /* gradients */
  e->bytes[LOOM_MEM_GRADS] = 4 * (e->shard_grads ? shard : psi);
  snprintf(e->formula[LOOM_MEM_GRADS], 64, "4Psi%s", e->shard_grads ? p : "");
  /* optimizer state: K = 8 (m, v) on the device, or 16 per element on the host when offloaded
   * (m, v, the fp32 master copy and the gradient staging buffer) */
  const char *pp = e->shard_optim ? p : "";
  if (e->offload) {
    e->bytes[LOOM_MEM_OPTIM] = 0;
    snprintf(e->formula[LOOM_MEM_OPTIM], 64, "0 (offloaded)");
    e->bytes[LOOM_MEM_HOST] = 16 * e->part;
    snprintf(e->formula[LOOM_MEM_HOST], 64, "(8+4+4)Psi%s m,v+master+grad stage", pp);
  } else {
    e->bytes[LOOM_MEM_OPTIM] = 8 * e->part;
    snprintf(e->formula[LOOM_MEM_OPTIM], 64, "K*Psi%s, K=8 (m, v)", pp);
    snprintf(e->formula[LOOM_MEM_HOST], 64, "0");
  }
  /* activations: exactly gpt.c's pool; other: the (B,T) input and target token buffers */
  e->bytes[LOOM_MEM_ACTIVATIONS] = gpt_activation_bytes(&m->cfg, e->micro_batch, e->seq_len);
  snprintf(e->formula[LOOM_MEM_ACTIVATIONS], 64, "gpt pool at B=%d, T=%d", e->micro_batch,
           e->seq_len);
  e->bytes[LOOM_MEM_OTHER] = 2 * (uint64_t)e->micro_batch * e->seq_len * sizeof(int32_t);
  snprintf(e->formula[LOOM_MEM_OTHER], 64, "tokens 2*4*B*T");
  /* communication buffers: DDP reduces in place; ZeRO-1 receives its reduce-scatter blocks
   * (together its partition) in scratch until the end of backward; ZeRO-2/3 hand out gradient
   * buckets of whole units (see grad_bucket_set) */
  if (e->shard_grads) {
    json_t *rb = role_option(cfg, e, LOOM_PAR_CAP_SHARD_GRADS, "reduce_bucket_size");
    double cap = json_is_number(rb) ? json_number_value(rb) : (double)(1u << 20);
    int overlap = !json_is_false(role_option(cfg, e, LOOM_PAR_CAP_SHARD_GRADS, "overlap_comm"));
    e->bytes[LOOM_MEM_COMM] =
        4 * grad_bucket_set(m, cap >= 1 ? (uint64_t)cap : 1, N, shard, overlap);
    snprintf(e->formula[LOOM_MEM_COMM], 64, overlap && N > 1
                 ? "<= unit 0's + 2 grad buckets + blocks"
                 : "grad buckets: unit 0's + largest + block");
  } else if (e->shard_optim && N > 1) {
    e->bytes[LOOM_MEM_COMM] = 4 * shard;
    snprintf(e->formula[LOOM_MEM_COMM], 64, "4Psi/N reduce-scatter scratch");
  } else {
    e->bytes[LOOM_MEM_COMM] = 0;
    snprintf(e->formula[LOOM_MEM_COMM], 64, "0 (in place)");
  }

  e->total = 0;
  for (int k = 0; k < LOOM_MEM__COUNT; k++) e->total += e->bytes[k];
  e->model_states = e->bytes[LOOM_MEM_PARAMS] + e->bytes[LOOM_MEM_GRADS] +
                    e->bytes[LOOM_MEM_OPTIM] + e->bytes[LOOM_MEM_HOST];

  /* communication per optimizer step per rank, S = 4 Psi bytes; the paper's value too */
  const uint64_t S = 4 * psi, A = (uint64_t)e->accum;
  e->comm_bytes_paper = N <= 1 ? 0 : e->stage == 3 ? 3 * A * (N - 1) * S / N
                                   : e->stage == 2 ? (A + 1) * (N - 1) * S / N
                                                   : 2 * (N - 1) * S / N;
  if (N <= 1) {
    e->comm_bytes = 0;
    snprintf(e->comm_formula, sizeof e->comm_formula, "0 (one rank)");
  } else if (e->stage == 3) {
    /* per micro-step: every unit gathered for forward (the head with the tied wte again);
     * for backward every unit but the head (its gather is kept from its forward) and unit 0
     * (the embedding's backward reads no parameter); every gradient reduce-scattered:
     * 3Psi + wte - unit 0 - head = 3Psi - wpe - head elements */
    const uint64_t unit0 = m->unit_offset[1] - m->unit_offset[0];
    e->comm_bytes = A * (N - 1) * 4 * (3 * psi + wte - unit0 - head) / N;
    snprintf(e->comm_formula, sizeof e->comm_formula, "%s(N-1)/N*4(3Psi - wpe - head)",
             A > 1 ? "A" : "");
  } else if (e->stage == 2) {
    e->comm_bytes = (A + 1) * (N - 1) * S / N;
    snprintf(e->comm_formula, sizeof e->comm_formula, "%s(N-1)/N*4Psi", A > 1 ? "(A+1)" : "2");
  } else {
    e->comm_bytes = 2 * (N - 1) * S / N;
    snprintf(e->comm_formula, sizeof e->comm_formula, "2(N-1)/N*4Psi");
  }
}

int loom_estimate_compute(const char *config_path, const char *const *overrides, int n_overrides,
                          int world, loom_estimate *e, char *err, size_t errlen) {
  memset(e, 0, sizeof *e);
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
  rt->cfg = cfg;
  if (loom_config_load(cfg, config_path, overrides, n_overrides, err, errlen) != 0) goto out;
  /* the plugins are opened, never created: their caps are all the estimate needs */
  if (loom__plugins_open(rt, err, errlen) != 0) goto out;
  snprintf(e->config, sizeof e->config, "%s", config_path);
  /* tensor parallel: the accounting below is per tp rank over the dp axis (psi = the local
   * parameters), plus Megatron's 4 all-reduces of B*T*C per layer per micro-step */
  e->tp = rt->tp_size > 1 ? rt->tp_size : 1;
  if (world % e->tp != 0) {
    snprintf(err, errlen, "%s: --world %d is not a multiple of the tensor-parallel size %d",
             cfg->path, world, e->tp);
    goto out;
  }
  world /= e->tp;
  e->world = world;
  e->n_plugins = rt->n_parallel;
  for (int i = 0; i < rt->n_parallel; i++) {
    snprintf(e->plugins[i].name, sizeof e->plugins[i].name, "%s", cfg->parallel[i].name);
    e->plugins[i].caps = rt->parallel[i].u.hdr.caps;
  }
  decide_roles(e);
  if (world > 1 && !e->grad_sync) {
    snprintf(err, errlen, "%s: parallel: %d data-parallel ranks but no plugin owns gradient "
             "sync: the replicas would drift apart (add {\"plugin\": \"ddp\"})", cfg->path,
             world);
    goto out;
  }
  if (loom_config_check_batch(cfg, world, err, errlen) != 0) goto out;
  e->n_layer = cfg->model.n_layer;
  e->n_head = cfg->model.n_head;
  e->n_embd = cfg->model.n_embd;
  e->vocab_size = cfg->model.vocab_size;
  e->context_length = cfg->model.context_length;
  e->micro_batch = cfg->train.micro_batch_size;
  e->seq_len = cfg->train.seq_len;
  e->accum = cfg->train.grad_accum_steps;
  /* the parameter table only: no device, no storage */
  gpt_config mc = {.vocab_size = cfg->model.vocab_size, .max_seq_len = cfg->model.context_length,
                   .n_layer = cfg->model.n_layer, .n_head = cfg->model.n_head,
                   .n_embd = cfg->model.n_embd, .tp_size = e->tp, .tp_rank = 0};
  char me[512];
  if (gpt_init_ex(&m, &mc, NULL, GPT_NO_PARAM_STORAGE | GPT_NO_GRAD_STORAGE, me, sizeof me) !=
      LOOM_OK) {
    snprintf(err, errlen, "%s: %s", cfg->path, me);
    goto out;
  }
  e->psi = m.num_parameters;
  account(e, cfg, &m);
  if (e->tp > 1) {
    e->tp_comm_bytes = (uint64_t)e->n_layer * 4 * (uint64_t)e->accum * 2 * (uint64_t)(e->tp - 1) *
                       (uint64_t)e->micro_batch * (uint64_t)e->seq_len * (uint64_t)e->n_embd * 4 /
                       (uint64_t)e->tp;
    e->comm_bytes += e->tp_comm_bytes;
    char f[sizeof e->comm_formula];
    snprintf(f, sizeof f, "%s", e->world > 1 ? e->comm_formula : "0 over dp");
    snprintf(e->comm_formula, sizeof e->comm_formula, "%s + tp f/g", f);
    e->comm_bytes_paper += e->tp_comm_bytes;
  }
  rc = 0;
out:
  gpt_free(&m);
  loom__plugins_destroy(rt);
  loom_config_free(cfg);
  free(rt);
  free(cfg);
  return rc;
}

/* ---- output ---- */

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
  fprintf(out, "loom estimate: %s, world %d (dp %d, tp %d, pp 1)\n", e->config, e->world * tp,
          e->world, tp);
  if (tp > 1)
    fprintf(out, "tensor parallel: Psi below is per tp rank (heads and MLP units split %d ways; "
            "embeddings, LayerNorms replicated); f/g traffic 4 x L x 2(tp-1)/tp x B*T*C*4 x accum "
            "= %llu bytes per step, included in the communication below\n", tp,
            (unsigned long long)e->tp_comm_bytes);
  fprintf(out, "model: Psi = %llu parameters (n_layer %d, n_head %d, n_embd %d, vocab %d, "
          "context %d); per rank: micro-batch %d x %d tokens, accum %d\n",
          (unsigned long long)e->psi, e->n_layer, e->n_head, e->n_embd, e->vocab_size,
          e->context_length, e->micro_batch, e->seq_len, e->accum);
  fprintf(out, "plugins:");
  if (!e->n_plugins) fprintf(out, " none");
  for (int i = 0; i < e->n_plugins; i++) {
    char r[160];
    roles_text(e->plugins[i].caps, r, sizeof r);
    fprintf(out, " %s [%s]", e->plugins[i].name, r);
  }
  fprintf(out, "\nstrategy by roles: %s; fp32, Adam K = 8 (ZeRO paper sec. 3: 4Psi params + "
          "4Psi grads + 8Psi optim)\n", e->strategy);
  fprintf(out, "  %-16s %-40s %15s %10s\n", "category", "formula", "bytes/rank", "MiB");
  for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
    loom_mem_category c = order[i];
    fprintf(out, "  %-16s %-40s %15llu %10.2f\n", row_name(c), e->formula[c],
            (unsigned long long)e->bytes[c], (double)e->bytes[c] / 1048576.0);
  }
  fprintf(out, "  %-16s %-40s %15llu %10.2f\n", "model states", "params+grads+optim+host",
          (unsigned long long)e->model_states, (double)e->model_states / 1048576.0);
  fprintf(out, "  %-16s %-40s %15llu %10.2f\n", "total", "sum of the rows (>= the peak total)",
          (unsigned long long)e->total,
          (double)e->total / 1048576.0);
  fprintf(out, "communication per step per rank: %s = %llu bytes (%.2f MiB)", e->comm_formula,
          (unsigned long long)e->comm_bytes, (double)e->comm_bytes / 1048576.0);
  if (e->comm_bytes_paper != e->comm_bytes)
    fprintf(out, "; the ZeRO paper's formula: %llu", (unsigned long long)e->comm_bytes_paper);
  fprintf(out, "\n");
}

int loom_estimate_print_json(FILE *out, const loom_estimate *e) {
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
      "config", e->config, "world", e->world * (e->tp > 1 ? e->tp : 1), "psi", (json_int_t)e->psi, "partition",
      (json_int_t)e->part, "gathered_unit", (json_int_t)e->gathered, "plugins", plugins,
      "strategy", e->strategy, "stage", e->stage, "roles", "grad_sync", e->grad_sync,
      "shard_optim", e->shard_optim, "shard_grads", e->shard_grads, "shard_params",
      e->shard_params, "offload", e->offload, "model", "n_layer", e->n_layer, "n_head",
      e->n_head, "n_embd", e->n_embd, "vocab_size", e->vocab_size, "context_length",
      e->context_length, "micro_batch_size", e->micro_batch, "seq_len", e->seq_len,
      "grad_accum_steps", e->accum, "bytes", bytes, "formula", formula, "model_states",
      (json_int_t)e->model_states, "comm_bytes_per_step", (json_int_t)e->comm_bytes,
      "comm_formula", e->comm_formula);
  if (doc) {
    json_object_set_new(doc, "tp", json_integer(e->tp > 1 ? e->tp : 1));
    json_object_set_new(doc, "tp_comm_bytes", json_integer((json_int_t)e->tp_comm_bytes));
  }
  if (doc)
    json_object_set_new(doc, "comm_bytes_per_step_paper",
                        json_integer((json_int_t)e->comm_bytes_paper));
  if (!doc) return -1;
  char *s = json_dumps(doc, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
  json_decref(doc);
  if (!s) return -1;
  fprintf(out, "%s\n", s);
  free(s);
  return 0;
}
