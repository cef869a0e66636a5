/* Loading the config's plugins, checking that their roles compose, and creating them. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device_open.h"
#include "plugins.h"
#include "storage_plan.h"

/* Roles this host version can run (ABI 1.2: pipeline parallel, schedule and axis pp, too);
 * anything else is refused clearly instead of run wrong. */
#define HOST_PARALLEL_CAPS                                                                  \
  (LOOM_PAR_CAP_GRAD_SYNC | LOOM_PAR_CAP_OPTIMIZER | LOOM_PAR_CAP_SHARD_PARAMS |           \
   LOOM_PAR_CAP_SHARD_GRADS | LOOM_PAR_CAP_SHARD_OPTIM | LOOM_PAR_CAP_AXIS_DP |            \
   LOOM_PAR_CAP_SPLIT_LAYERS | LOOM_PAR_CAP_AXIS_TP | LOOM_PAR_CAP_SCHEDULE |              \
   LOOM_PAR_CAP_AXIS_PP | LOOM_PAR_CAP_AXIS_CP)

static const struct { uint64_t bit; const char *role; } roles[] = {
  {LOOM_PAR_CAP_GRAD_SYNC, "data-parallel gradient sync"},
  {LOOM_PAR_CAP_OPTIMIZER, "the optimizer step"},
  {LOOM_PAR_CAP_SCHEDULE, "the micro-batch schedule"},
  {LOOM_PAR_CAP_SHARD_PARAMS, "parameter storage"},
  {LOOM_PAR_CAP_SHARD_GRADS, "gradient storage"},
  {LOOM_PAR_CAP_SPLIT_LAYERS, "the layer split (tensor parallel)"},
  {LOOM_PAR_CAP_AXIS_TP, "the tensor-parallel axis"},
  {LOOM_PAR_CAP_AXIS_PP, "the pipeline-parallel axis"},
  {LOOM_PAR_CAP_AXIS_CP, "the context-parallel axis"},
};

/* The pipeline entry's host-level keys: "size" (the number of stages, pp) and optionally
 * "stages" (units per stage, summing to n_layer + 2; default: balanced by parameter count, see
 * loom__pp_split). Both are taken out of the options the plugin sees. */
static int read_pp(loom_runtime *rt, int i, json_t *v, char *err, size_t errlen) {
  loom_config *cfg = rt->cfg;
  loom_plugin_cfg *pc = &cfg->parallel[i];
  int units = cfg->model.n_layer + 2;
  if (!v) {
    snprintf(err, errlen, "%s: %s.size: plugin '%s' works on the pipeline axis and needs its "
             "number of stages, e.g. {\"plugin\": \"%s\", \"size\": 2}", cfg->path,
             pc->json_path, pc->name, pc->name);
    return -1;
  }
  int maxpp = units < LOOM_MAX_STAGES ? units : LOOM_MAX_STAGES;
  if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > maxpp) {
    char *got = json_dumps(v, JSON_ENCODE_ANY);
    snprintf(err, errlen, "%s: %s.size: expected an integer in [1, %d] (the model has n_layer "
             "+ 2 = %d units: embedding, blocks, head; each stage holds at least one), got %s",
             cfg->path, pc->json_path, maxpp, units, got ? got : "?");
    free(got);
    return -1;
  }
  int pp = (int)json_integer_value(v);
  /* "chunks" (interleaved 1F1B's model chunks per stage): a host key like "size", since the
   * placement is the host's; the schedule owner asks api->n_chunks (ABI 1.12) */
  json_t *ch = json_object_get(pc->options, "chunks");
  rt->pp_chunks = 1;
  if (ch) {
    int maxv = LOOM_MAX_STAGES / pp;
    if (!json_is_integer(ch) || json_integer_value(ch) < 1 || json_integer_value(ch) > maxv ||
        json_integer_value(ch) > GPT_MAX_CHUNKS) {
      char *got = json_dumps(ch, JSON_ENCODE_ANY);
      snprintf(err, errlen, "%s: %s.chunks: expected an integer in [1, %d] (model chunks per "
               "stage; pp x chunks <= %d virtual stages), got %s", cfg->path, pc->json_path,
               maxv < GPT_MAX_CHUNKS ? maxv : GPT_MAX_CHUNKS, LOOM_MAX_STAGES, got ? got : "?");
      free(got);
      return -1;
    }
    rt->pp_chunks = (int)json_integer_value(ch);
    const loom_plugin_header *h = &rt->parallel[i].u.hdr;
    if (rt->pp_chunks > 1 && h->abi_major == 1 && h->abi_minor < 12) {
      snprintf(err, errlen, "%s: %s.chunks: %d model chunks need a schedule built against ABI "
               ">= 1.12 (the chunked entry points); plugin '%s' is %d.%d", cfg->path,
               pc->json_path, rt->pp_chunks, pc->name, h->abi_major, h->abi_minor);
      return -1;
    }
  }
  const int nv = pp * rt->pp_chunks; /* (virtual) stages "stages" counts units for */
  json_t *st = json_object_get(pc->options, "stages");
  rt->pp_explicit = 0;
  if (st) {
    int sum = 0, ok = json_is_array(st) && (int)json_array_size(st) == nv;
    for (int s = 0; ok && s < nv; s++) {
      json_t *x = json_array_get(st, (size_t)s);
      ok = json_is_integer(x) && json_integer_value(x) >= 1 && json_integer_value(x) <= units;
      if (ok) rt->pp_units[s] = (int)json_integer_value(x), sum += rt->pp_units[s];
    }
    if (!ok || sum != units) {
      char *got = json_dumps(st, JSON_ENCODE_ANY);
      snprintf(err, errlen, "%s: %s.stages: expected %d unit counts >= 1 (one per %s) "
               "summing to n_layer + 2 = %d (embedding, %d blocks, head), got %s", cfg->path,
               pc->json_path, nv, rt->pp_chunks > 1 ? "virtual stage: size x chunks" : "stage",
               units, cfg->model.n_layer, got ? got : "?");
      free(got);
      return -1;
    }
    rt->pp_explicit = 1;
    json_object_del(pc->options, "stages");
  }
  rt->pp_size = pp;
  json_object_del(pc->options, "size");
  json_object_del(pc->options, "chunks");
  return 0;
}

/* *size = the entry's "size" v for the `axis` ("tensor-parallel", "context-parallel"): required,
 * an integer in [1, 4096]. */
static int axis_size(loom_runtime *rt, int i, json_t *v, const char *axis, int *size, char *err,
                     size_t errlen) {
  const loom_config *cfg = rt->cfg;
  const loom_plugin_cfg *pc = &cfg->parallel[i];
  if (!v) {
    snprintf(err, errlen, "%s: %s.size: plugin '%s' works on the %s axis and needs its size, "
             "e.g. {\"plugin\": \"%s\", \"size\": 2}", cfg->path, pc->json_path, pc->name,
             axis, pc->name);
    return -1;
  }
  if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 4096) {
    char *got = json_dumps(v, JSON_ENCODE_ANY);
    snprintf(err, errlen, "%s: %s.size: expected an integer in [1, 4096], got %s", cfg->path,
             pc->json_path, got ? got : "?");
    free(got);
    return -1;
  }
  *size = (int)json_integer_value(v);
  return 0;
}

/* The context-parallel entry's host-level "size" (cp, ABI 1.13): every sequence is cut into
 * 2*cp chunks (two per rank, the load-balanced causal split), so train.seq_len must be a
 * multiple of 2*cp. Taken out of the options the plugin sees. */
static int read_cp(loom_runtime *rt, int i, json_t *v, char *err, size_t errlen) {
  loom_config *cfg = rt->cfg;
  loom_plugin_cfg *pc = &cfg->parallel[i];
  int cp;
  if (axis_size(rt, i, v, "context-parallel", &cp, err, errlen) != 0) return -1;
  int T = cfg->train.seq_len;
  if (T % (2 * cp) != 0) {
    snprintf(err, errlen, "%s: %s.size: train.seq_len (%d) must be divisible by 2 x the "
             "context-parallel size (2 x %d = %d): each rank holds two of the 2*cp chunks of "
             "every sequence (the load-balanced causal split)", cfg->path, pc->json_path, T,
             cp, 2 * cp);
    return -1;
  }
  const char *no = NULL;
  if (cp > 1 && cfg->model.attention == LOOM_ATTN_MATERIALIZED)
    no = "model.attention \"materialized\": ring attention keeps flash attention's (out, lse) "
         "state (use \"auto\" or \"flash\")";
  else if (cp > 1 && cfg->activation_checkpointing.policy == GPT_CKPT_SELECTIVE)
    no = "activation_checkpointing \"selective\": under the ring's (out, lse) state there are "
         "no probabilities to drop, and recomputing them would run the ring again (use "
         "\"full\" or \"none\")";
  else if (cp > 1 && cfg->sample.tokens > 0)
    no = "sample.tokens > 0: sampling under context parallel is not implemented (sample from "
         "the run's checkpoint on one rank)";
  if (no) {
    snprintf(err, errlen, "%s: %s: context parallel (size %d) does not compose with %s",
             cfg->path, pc->json_path, cp, no);
    return -1;
  }
  rt->cp_size = cp;
  rt->cp_owner = i;
  json_object_del(pc->options, "size");
  return 0;
}

/* "size" is a host-level key of a parallel entry: the size of the plugin's mesh axis (tp for
 * LOOM_PAR_CAP_AXIS_TP). Read it, check it, and take it out of the options the plugin sees. */
static int read_axis_size(loom_runtime *rt, int i, uint64_t caps, char *err, size_t errlen) {
  loom_config *cfg = rt->cfg;
  loom_plugin_cfg *pc = &cfg->parallel[i];
  json_t *v = pc->options ? json_object_get(pc->options, "size") : NULL;
  if (caps & LOOM_PAR_CAP_AXIS_PP) return read_pp(rt, i, v, err, errlen);
  if (caps & LOOM_PAR_CAP_AXIS_CP) return read_cp(rt, i, v, err, errlen);
  if (!(caps & LOOM_PAR_CAP_AXIS_TP)) {
    if (!v) return 0;
    snprintf(err, errlen, "%s: %s.size: plugin '%s' (%s) does not work on the tensor-parallel, "
             "pipeline or context-parallel axis (it does not declare LOOM_PAR_CAP_AXIS_TP, _PP "
             "or _CP), so it takes "
             "no \"size\"; the data-parallel size is the rest of the world", cfg->path,
             pc->json_path, pc->name, rt->parallel[i].path);
    return -1;
  }
  int tp;
  if (axis_size(rt, i, v, "tensor-parallel", &tp, err, errlen) != 0) return -1;
  if (cfg->model.n_head % tp != 0) {
    snprintf(err, errlen, "%s: %s.size: model.n_head (%d) must be divisible by the "
             "tensor-parallel size (%d): each rank computes n_head/tp heads", cfg->path,
             pc->json_path, cfg->model.n_head, tp);
    return -1;
  }
  rt->tp_size = tp;
  json_object_del(pc->options, "size"); /* the plugin sees its own options only */
  /* "vocab_parallel" (host-level too: the model's layout, gpt_config.vocab_parallel): wte and
   * the head split over the padded vocabulary (Megatron's VocabParallelEmbedding and parallel
   * cross-entropy); gpt_init refuses a Vp not divisible by tp, naming the values */
  json_t *vp = json_object_get(pc->options, "vocab_parallel");
  if (vp) {
    if (!json_is_boolean(vp)) {
      snprintf(err, errlen, "%s: %s.vocab_parallel: expected true or false", cfg->path,
               pc->json_path);
      return -1;
    }
    rt->tp_vocab = json_is_true(vp);
    json_object_del(pc->options, "vocab_parallel");
  }
  /* "sequence_parallel" (host-level: the model's layout, gpt_config.sequence_parallel,
   * Korthikanti et al. 2022 §4.2.2): the LayerNorm / residual regions sharded along T; the
   * host runs their all-gathers and reduce-scatters itself (core/model/gpt_sp.c) */
  json_t *sp = json_object_get(pc->options, "sequence_parallel");
  if (sp) {
    if (!json_is_boolean(sp)) {
      snprintf(err, errlen, "%s: %s.sequence_parallel: expected true or false", cfg->path,
               pc->json_path);
      return -1;
    }
    if (json_is_true(sp) && tp < 2) {
      snprintf(err, errlen, "%s: %s.sequence_parallel: needs a tensor-parallel size > 1 (size "
               "is %d): with one rank there is no sequence to split", cfg->path, pc->json_path,
               tp);
      return -1;
    }
    if (json_is_true(sp) && cfg->train.seq_len % tp != 0) {
      snprintf(err, errlen, "%s: %s.sequence_parallel: train.seq_len (%d) must be divisible by "
               "the tensor-parallel size (%d): each rank holds seq_len/tp positions of every "
               "sequence", cfg->path, pc->json_path, cfg->train.seq_len, tp);
      return -1;
    }
    rt->tp_seq = json_is_true(sp);
    json_object_del(pc->options, "sequence_parallel");
  }
  return 0;
}

/* "shard_size" is a host-level key of a parallel entry whose plugin sets LOOM_PAR_HYBRID_SHARD
 * (ABI 1.11): hybrid sharding, shard groups of K consecutive data-parallel ranks replicated
 * across the rest (dp = K x R). An integer K >= 1 or "node" (the ranks per node / tp, resolved
 * when the job has started: loom__mesh_init). Read, check, take out of the plugin's options. */
static int read_shard_size(loom_runtime *rt, int i, char *err, size_t errlen) {
  loom_config *cfg = rt->cfg;
  loom_plugin_cfg *pc = &cfg->parallel[i];
  json_t *v = pc->options ? json_object_get(pc->options, "shard_size") : NULL;
  if (!v) return 0;
  if (!(rt->parallel[i].u.parallel.hybrid & LOOM_PAR_HYBRID_SHARD)) {
    snprintf(err, errlen, "%s: %s.shard_size: plugin '%s' (%s) does not shard over part of the "
             "data-parallel axis (it does not set LOOM_PAR_HYBRID_SHARD, ABI 1.11), so it takes "
             "no \"shard_size\" (zero2 and zero3 do)", cfg->path, pc->json_path, pc->name,
             rt->parallel[i].path);
    return -1;
  }
  if (json_is_string(v) && !strcmp(json_string_value(v), "node")) {
    rt->shard_size = LOOM_SHARD_NODE;
  } else if (json_is_integer(v) && json_integer_value(v) >= 1 &&
             json_integer_value(v) <= 1 << 20) {
    rt->shard_size = (int)json_integer_value(v);
  } else {
    char *got = json_dumps(v, JSON_ENCODE_ANY);
    snprintf(err, errlen, "%s: %s.shard_size: expected an integer in [1, 1048576] (data-"
             "parallel ranks per shard group) or \"node\", got %s", cfg->path, pc->json_path,
             got ? got : "?");
    free(got);
    return -1;
  }
  rt->shard_owner = i;
  json_object_del(pc->options, "shard_size"); /* the plugin sees its own options only */
  return 0;
}

int loom__plugins_open(loom_runtime *rt, char *err, size_t errlen) {
  loom_config *cfg = rt->cfg;
  rt->grad_sync_owner = rt->optimizer_owner = rt->partition_owner = rt->tp_owner = -1;
  rt->schedule_owner = -1;
  rt->tp_size = rt->pp_size = rt->pp_chunks = 1;
  rt->shard_size = 0;
  rt->shard_owner = -1;
  rt->cp_owner = -1;
  rt->cp_size = 1;
  char ce[1200];
  if (loom__plugin_open(&rt->comm_plugin, cfg->comm.name, LOOM_KIND_COMM, ce, sizeof ce) != 0) {
    snprintf(err, errlen, "%s: %s: %s", cfg->path, cfg->comm.json_path, ce);
    return -1;
  }
  for (int i = 0; i < cfg->n_parallel; i++) {
    loom_plugin_cfg *pc = &cfg->parallel[i];
    char e[1200];
    if (loom__plugin_open(&rt->parallel[i], pc->name, LOOM_KIND_PARALLEL, e, sizeof e) != 0) {
      snprintf(err, errlen, "%s: %s: %s", cfg->path, pc->json_path, e);
      return -1;
    }
    rt->n_parallel = i + 1;
    uint64_t caps = rt->parallel[i].u.hdr.caps;
    if (caps & ~(uint64_t)HOST_PARALLEL_CAPS) {
      snprintf(err, errlen,
               "%s: %s: plugin '%s' (%s) needs capabilities 0x%llx that this loom does not "
               "know (it runs data-parallel, ZeRO, offload, tensor- and pipeline-parallel "
               "roles): a newer loom is needed",
               cfg->path, pc->json_path, pc->name, rt->parallel[i].path,
               (unsigned long long)(caps & ~(uint64_t)HOST_PARALLEL_CAPS));
      return -1;
    }
    for (size_t r = 0; r < sizeof roles / sizeof roles[0]; r++) {
      if (!(caps & roles[r].bit)) continue;
      for (int j = 0; j < i; j++)
        if (rt->parallel[j].u.hdr.caps & roles[r].bit) {
          snprintf(err, errlen,
                   "%s: %s: plugin '%s' owns %s, but so does '%s' (%s): keep only one of them",
                   cfg->path, pc->json_path, pc->name, roles[r].role, cfg->parallel[j].name,
                   cfg->parallel[j].json_path);
          return -1;
        }
    }
    uint64_t axes = caps & (LOOM_PAR_CAP_AXIS_DP | LOOM_PAR_CAP_AXIS_TP |
                            LOOM_PAR_CAP_AXIS_PP | LOOM_PAR_CAP_AXIS_CP);
    if (axes == 0 || (axes & (axes - 1)) != 0) {
      snprintf(err, errlen, "%s: %s: plugin '%s' (%s) must declare exactly one mesh axis "
               "(LOOM_PAR_CAP_AXIS_DP, _TP, _PP or _CP)", cfg->path, pc->json_path, pc->name,
               rt->parallel[i].path);
      return -1;
    }
    if ((caps & LOOM_PAR_CAP_AXIS_CP) &&
        (!LOOM_COVERS(&rt->parallel[i].u.parallel, ring) || !rt->parallel[i].u.parallel.ring)) {
      snprintf(err, errlen, "%s: %s: plugin '%s' (%s) works on the context-parallel axis but "
               "its ring callback is NULL", cfg->path, pc->json_path, pc->name,
               rt->parallel[i].path);
      return -1;
    }
    /* a role is a promise to implement its hook: check it now, not with a crash mid-step */
    if ((caps & LOOM_PAR_CAP_OPTIMIZER) && !rt->parallel[i].u.parallel.optimizer_step) {
      snprintf(err, errlen, "%s: %s: plugin '%s' (%s) declares the optimizer role but its "
               "optimizer_step callback is NULL", cfg->path, pc->json_path, pc->name,
               rt->parallel[i].path);
      return -1;
    }
    if ((caps & LOOM_PAR_CAP_SPLIT_LAYERS) && !rt->parallel[i].u.parallel.region) {
      snprintf(err, errlen, "%s: %s: plugin '%s' (%s) declares the layer split (tensor "
               "parallel) but its region callback is NULL", cfg->path, pc->json_path, pc->name,
               rt->parallel[i].path);
      return -1;
    }
    if ((caps & LOOM_PAR_CAP_SPLIT_LAYERS) && !(caps & LOOM_PAR_CAP_AXIS_TP)) {
      snprintf(err, errlen, "%s: %s: plugin '%s' (%s) splits layers but does not work on the "
               "tensor-parallel axis (LOOM_PAR_CAP_AXIS_TP)", cfg->path, pc->json_path,
               pc->name, rt->parallel[i].path);
      return -1;
    }
    if ((caps & LOOM_PAR_CAP_SCHEDULE) && !rt->parallel[i].u.parallel.run_step) {
      snprintf(err, errlen, "%s: %s: plugin '%s' (%s) declares the micro-batch schedule but its "
               "run_step callback is NULL", cfg->path, pc->json_path, pc->name,
               rt->parallel[i].path);
      return -1;
    }
    if (!!(caps & LOOM_PAR_CAP_SCHEDULE) != !!(caps & LOOM_PAR_CAP_AXIS_PP)) {
      snprintf(err, errlen, "%s: %s: plugin '%s' (%s): the micro-batch schedule and the "
               "pipeline axis go together (LOOM_PAR_CAP_SCHEDULE with LOOM_PAR_CAP_AXIS_PP)",
               cfg->path, pc->json_path, pc->name, rt->parallel[i].path);
      return -1;
    }
    if (read_axis_size(rt, i, caps, err, errlen) != 0) return -1;
    if (read_shard_size(rt, i, err, errlen) != 0) return -1;
    if (caps & LOOM_PAR_CAP_SCHEDULE) rt->schedule_owner = i;
    if (caps & LOOM_PAR_CAP_AXIS_TP) rt->tp_owner = i;
    if (caps & LOOM_PAR_CAP_GRAD_SYNC) rt->grad_sync_owner = i;
    if (caps & LOOM_PAR_CAP_SHARD_PARAMS) rt->shard_params = 1;
    if (caps & LOOM_PAR_CAP_SHARD_GRADS) rt->shard_grads = 1;
    if (caps & LOOM_PAR_CAP_OPTIMIZER) rt->optimizer_owner = i;
  }
  if (rt->cp_size > 1 && (rt->pp_size > 1 || rt->tp_vocab || rt->tp_seq)) {
    snprintf(err, errlen, "%s: %s: context parallel (size %d) does not compose with %s in this "
             "loom: its ring runs on the whole model of one stage, with the embedding's "
             "positions taken per chunk", cfg->path, cfg->parallel[rt->cp_owner].json_path,
             rt->cp_size, rt->pp_size > 1 ? "pipeline parallel (size > 1)"
                          : rt->tp_vocab ? "tensor_parallel's vocab_parallel"
                                         : "tensor_parallel's sequence_parallel (both shard T)");
    return -1;
  }
  if (rt->pp_size > 1 && (rt->shard_params || rt->shard_grads)) {
    snprintf(err, errlen, "%s: parallel: pipeline parallel (%d stages) composes with ddp and "
             "zero1 on the data-parallel axis, not with a plugin that owns parameter or "
             "gradient storage (zero2, zero3): the host sums the tied embedding's gradient "
             "between the first and last stage in the flat gradient buffer", cfg->path,
             rt->pp_size);
    return -1;
  }
  char e[1200];
  if (loom__plugin_open(&rt->precision, cfg->precision.name, LOOM_KIND_PRECISION, e,
                        sizeof e) != 0) {
    snprintf(err, errlen, "%s: %s: %s", cfg->path, cfg->precision.json_path, e);
    return -1;
  }
  if (cfg->checkpoint.name[0]) {
    if (loom__plugin_open(&rt->checkpoint, cfg->checkpoint.name, LOOM_KIND_CHECKPOINT, e,
                          sizeof e) != 0) {
      snprintf(err, errlen, "%s: %s: %s", cfg->path, cfg->checkpoint.json_path, e);
      return -1;
    }
    rt->has_checkpoint = 1;
  }
  return 0;
}

static char *label_for(const loom_plugin_cfg *pc) {
  size_t n = strlen(pc->name) + strlen(pc->json_path) + 4;
  char *s = malloc(n);
  if (s) snprintf(s, n, "%s (%s)", pc->name, pc->json_path);
  return s;
}

int loom__error_names_config(const loom_runtime *rt, const char *msg) {
  size_t n = strlen(rt->cfg->path);
  return strncmp(msg, rt->cfg->path, n) == 0 && msg[n] == ':';
}

static int plugin_error(loom_runtime *rt, const loom_plugin *p, const loom_host *h, int rc,
                        const char *what, char *err, size_t errlen) {
  if (rc == LOOM_INVALID_CONFIG && loom__error_names_config(rt, h->error)) {
    /* an option getter's message already names file and JSON path */
    snprintf(err, errlen, "%s (plugin %s)", h->error, p->path);
    return -1;
  }
  snprintf(err, errlen, "%s: plugin %s [%s]: %s failed (%s): %s", rt->cfg->path, h->label,
           p->path, what,
           loom__status_text(rc),
           h->error[0] ? h->error : "no message");
  return -1;
}

int loom__precision_create(loom_runtime *rt, char *err, size_t errlen) {
  loom_config *cfg = rt->cfg;
  loom_host *h = &rt->precision_host;
  loom__host_init(h, rt, label_for(&cfg->precision), cfg->path, cfg->precision.json_path,
                  cfg->precision.options);
  int rc = rt->precision.u.precision.create(loom__host_api(), h, &h->opts, &rt->precision_ctx);
  if (rc != LOOM_OK) return plugin_error(rt, &rt->precision, h, rc, "create", err, errlen);
  rt->compute_dtype = rt->precision.u.precision.compute_dtype(rt->precision_ctx);
  return 0;
}

int loom__plugins_create(loom_runtime *rt, char *err, size_t errlen) {
  loom_config *cfg = rt->cfg;
  const loom_host_api_v1 *api = loom__host_api();
  for (int i = 0; i < rt->n_parallel; i++) {
    loom_plugin_cfg *pc = &cfg->parallel[i];
    loom_host *h = &rt->parallel_host[i];
    loom__host_init(h, rt, label_for(pc), cfg->path, pc->json_path, pc->options);
    int rc = rt->parallel[i].u.parallel.create(api, h, &h->opts, &rt->parallel_ctx[i]);
    if (rc != LOOM_OK) return plugin_error(rt, &rt->parallel[i], h, rc, "create", err, errlen);
  }
  if (loom__precision_create(rt, err, errlen) != 0) return -1;
  loom__device_hint_dtype(rt);
  const loom_device_v1 *dev = rt->dev.ops;
  loom_dtype dt = rt->compute_dtype;
  int dev_has_16 = dev->round_to && dev->convert;
  if (dt != LOOM_F32 && ((dt != LOOM_BF16 && dt != LOOM_F16) || !dev_has_16)) {
    snprintf(err, errlen, "%s: %s: plugin '%s' computes in dtype %d; the %s device (ABI %d.%d) "
             "runs %s", cfg->path, cfg->precision.json_path, cfg->precision.name, (int)dt,
             dev->hdr.name, dev->hdr.abi_major, dev->hdr.abi_minor,
             dev_has_16 ? "fp32, bf16 and fp16 only" : "fp32 only (16-bit needs ABI 1.3)");
    return -1;
  }
  /* the storage plan, once: what every plugin's setup reads through the model view */
  loom__storage_plan(rt, dt, rt->mesh.dp, &rt->plan);
  const char *legacy = rt->plan.legacy >= 0 ? rt->parallel_host[rt->plan.legacy].label : NULL;
  if (dt != LOOM_F32 && legacy && rt->mesh.world_rank == 0)
    fprintf(stderr, "loom[0] info: plugin %s does not declare 16-bit storage "
            "(LOOM_PAR_STORAGE_16BIT, ABI 1.4): parameters and gradients are kept as %s "
            "values in fp32 buffers (4+4 bytes per parameter instead of 2+2)\n", legacy,
            dt == LOOM_BF16 ? "bf16" : "fp16");
  loom_host *h;
  if (rt->has_checkpoint) {
    h = &rt->checkpoint_host;
    loom__host_init(h, rt, label_for(&cfg->checkpoint), cfg->path, cfg->checkpoint.json_path,
                    cfg->checkpoint.options);
    int rc = rt->checkpoint.u.checkpoint.create(api, h, &h->opts, &rt->checkpoint_ctx);
    if (rc != LOOM_OK) return plugin_error(rt, &rt->checkpoint, h, rc, "create", err, errlen);
  }
  return 0;
}

int loom__plugins_setup(loom_runtime *rt, char *err, size_t errlen) {
  /* config order, but the optimizer owner last: it steps the partition the others publish */
  for (int k = 0; k < rt->n_parallel; k++) {
    int last = rt->optimizer_owner >= 0 ? rt->optimizer_owner : rt->n_parallel - 1;
    int i = k < last ? k : (k == rt->n_parallel - 1 ? last : k + 1);
    const loom_parallel_v1 *p = &rt->parallel[i].u.parallel;
    if (!p->setup) continue;
    int rc = p->setup(rt->parallel_ctx[i]);
    if (rc != LOOM_OK)
      return plugin_error(rt, &rt->parallel[i], &rt->parallel_host[i], rc, "setup", err, errlen);
  }
  return 0;
}

void loom__plugins_destroy(loom_runtime *rt) {
  if (!rt->comm_ctx) loom__plugin_close(&rt->comm_plugin); /* opened, never joined a job */
  if (rt->has_checkpoint) {
    if (rt->checkpoint_ctx) rt->checkpoint.u.checkpoint.destroy(rt->checkpoint_ctx);
    loom__plugin_close(&rt->checkpoint);
    loom__host_release(&rt->checkpoint_host);
    free((char *)rt->checkpoint_host.label);
  }
  if (rt->precision.handle) {
    if (rt->precision_ctx) rt->precision.u.precision.destroy(rt->precision_ctx);
    loom__plugin_close(&rt->precision);
    loom__host_release(&rt->precision_host);
    free((char *)rt->precision_host.label);
  }
  for (int i = rt->n_parallel - 1; i >= 0; i--) {
    if (rt->parallel_ctx[i]) rt->parallel[i].u.parallel.destroy(rt->parallel_ctx[i]);
    loom__plugin_close(&rt->parallel[i]);
    loom__host_release(&rt->parallel_host[i]);
    free((char *)rt->parallel_host[i].label);
  }
  rt->n_parallel = 0;
}

/* ---- hooks: call every parallel plugin's hook in config order; stop at the first error ---- */
int loom__hook_error(loom_runtime *rt, int i, const char *hook, int rc, char *err,
                     size_t errlen) {
  return plugin_error(rt, &rt->parallel[i], &rt->parallel_host[i], rc, hook, err, errlen);
}

const char *loom__status_text(int rc) {
  switch (rc) {
#define LOOM__STATUS_TEXT(name, value, text) \
  case value:                               \
    return text;
    LOOM_STATUS_MAP(LOOM__STATUS_TEXT)
#undef LOOM__STATUS_TEXT
  }
  return "error";
}
