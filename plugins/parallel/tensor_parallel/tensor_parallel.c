/* tensor_parallel.so — Megatron-LM tensor parallelism (Shoeybi et al. 2019, §3).
 *
 * The host splits each block over the tensor-parallel (TP) axis of the mesh — its size is the
 * entry's host-level "size" key — because this plugin declares LOOM_PAR_CAP_SPLIT_LAYERS: a rank
 * holds n_head/tp heads of attn.qkv (column-parallel: its heads' q, k and v rows) and the
 * matching input columns of attn.proj (row-parallel), and 4C/tp hidden units of mlp.fc
 * (column-parallel) and mlp.proj (row-parallel). Embeddings, LayerNorms and the row-parallel
 * biases are replicated (the bias is added by tp rank 0 only), unless the entry's host-level
 * key "vocab_parallel" is true: then the host splits wte (tied with the head) over the padded
 * vocabulary and runs the embedding's sum and the cross-entropy's row statistics over the tp
 * communicator itself (core/model/gpt.c, docs/parallelism.md); this plugin sees only that wte
 * is one more split tensor. With the host-level key "sequence_parallel" true (Korthikanti et
 * al. 2022, §4.2.2) the host shards the LayerNorm / residual region along T and runs f and g
 * as all-gathers and reduce-scatters itself (core/model/gpt_sp.c): `region` is then called only
 * by a forward whose T is not a multiple of tp (sampling's window), the plain path.
 *
 * The plugin's part is the communication at Megatron's two conjugate operators, which the host
 * calls through `region` inside every block:
 *   f (before qkv and mlp.fc):      forward identity,   backward all-reduce of d(input)
 *   g (after attn.proj, mlp.proj):  forward all-reduce, backward identity
 * so two all-reduces of B*T*C floats per block in forward and two in backward, on the TP
 * communicator (counted by the host). Composes with any data-parallel plugin (ddp, zero1..3,
 * cpu_offload) working on the DP axis: their flat buffers are the local (split) tensors, and
 * the host's gradient norm counts the replicated tensors once.
 *
 * Mixed precision (bf16.so, fp16.so): the region's activation (gradient) holds 16-bit values
 * in an fp32 buffer; it is packed to the compute dtype (exact), all-reduced in 16 bits — half
 * the bytes — and unpacked (the sum rounded once, by the comm plugin). Option
 * "communication_data_type": "auto" (default: the compute dtype) or "fp32" (fp32 traffic, the
 * sum rounded by the model's next 16-bit store). The plugin touches no parameter or gradient
 * storage, so it works under 16-bit storage (LOOM_PAR_STORAGE_16BIT). */
#include <loom/loom.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "tp_estimate.h"

typedef struct tp_ctx {
  const loom_host_api_v1 *api;
  loom_host *host;
  int tp;
  loom_comm *comm;
  int force_fp32;     /* communication_data_type "fp32" */
  loom_dtype comm_dt; /* LOOM_F32 or the 16-bit compute dtype the regions travel in */
  void *stage;        /* the packed region (stage_n elements of comm_dt, LOOM_MEM_COMM) */
  size_t stage_n;
  const loom_device_v1 *dev;
  void *dev_ctx;
} tp_ctx;

static int tp_create(const loom_host_api_v1 *api, loom_host *host, const loom_options *opts,
                     void **out) {
  /* "size" is the host's, removed before create */
  static const char *const keys[] = {"communication_data_type", NULL};
  if (api->opt_check_keys(host, opts, keys)) return LOOM_INVALID_CONFIG;
  const char *cdt = "auto";
  if (api->opt_string(host, opts, "communication_data_type", "auto", &cdt))
    return LOOM_INVALID_CONFIG;
  if (strcmp(cdt, "auto") != 0 && strcmp(cdt, "fp32") != 0) {
    api->set_error(host, "communication_data_type: expected \"auto\" (the compute dtype) or "
                   "\"fp32\", got \"%s\"", cdt);
    return LOOM_INVALID_CONFIG;
  }
  tp_ctx *t = calloc(1, sizeof *t);
  if (!t) return LOOM_NOMEM;
  t->force_fp32 = strcmp(cdt, "fp32") == 0;
  t->api = api;
  t->host = host;
  t->tp = api->size(host, LOOM_AXIS_TP);
  t->comm = api->comm(host, LOOM_AXIS_TP);
  *out = t;
  return LOOM_OK;
}

static void tp_destroy(void *ctx) {
  tp_ctx *t = ctx;
  if (t && t->stage) t->api->free(t->host, t->stage);
  free(t);
}

/* Check that the host split the model as promised (a host without 1.1's local shapes would
 * run every rank on the full model and all-reduce it tp times over). */
static int tp_setup(void *ctx) {
  tp_ctx *t = ctx;
  const loom_model_v1 *m = t->api->model(t->host);
  if (!m || m->n_tensors == 0) return LOOM_OK;
  t->dev = t->api->device(t->host, &t->dev_ctx);
  /* f/g travel in the plan's activation dtype (16-bit under bf16/fp16) unless told fp32 */
  loom_dtype dt = loom_storage_plan_of(t->api, t->host, m).activation_comm_dtype;
  t->comm_dt = LOOM_F32;
  if (dt != LOOM_F32 && !t->force_fp32 && t->tp > 1 && LOOM_HAS(t->dev, convert))
    t->comm_dt = dt;
  if (!LOOM_MODEL_HAS_SPLITS(m)) {
    t->api->set_error(t->host, "this loom does not describe split tensors (ABI < 1.1)");
    return LOOM_UNSUPPORTED;
  }
  uint64_t split = 0, local = 0;
  for (int i = 0; i < m->n_tensors; i++) {
    const loom_tensor_v1 *x = LOOM_TENSOR_AT(m, i);
    if (x->split_dim < 0) continue;
    if (x->local_shape[x->split_dim] * t->tp != x->shape[x->split_dim]) {
      t->api->set_error(t->host, "tensor %s: local dim %d is %lld, expected %lld / %d", x->name,
                        x->split_dim, (long long)x->local_shape[x->split_dim],
                        (long long)x->shape[x->split_dim], t->tp);
      return LOOM_INVALID_USAGE;
    }
    split++;
    local += x->numel;
  }
  t->api->log(t->host, LOOM_LOG_DEBUG, "tp %d: %llu split tensors, %llu of %llu local "
              "parameters split", t->tp, (unsigned long long)split, (unsigned long long)local,
              (unsigned long long)m->numel);
  return LOOM_OK;
}

static int tp_region(void *ctx, int which, int backward, float *buf, size_t n) {
  tp_ctx *t = ctx;
  if (t->tp <= 1) return LOOM_OK;
  int reduce = which == LOOM_REGION_F ? backward : !backward;
  if (!reduce) return LOOM_OK; /* the identity half of f / g */
  if (t->comm_dt == LOOM_F32)
    return t->api->all_reduce(t->host, t->comm, buf, n, LOOM_F32, LOOM_OP_SUM, NULL);
  if (n > t->stage_n) { /* every region of a shape has the same size: grows once */
    if (t->stage) t->api->free(t->host, t->stage);
    t->stage_n = 0;
    t->stage = t->api->alloc(t->host, n * loom_dtype_size(t->comm_dt), LOOM_MEM_COMM);
    if (!t->stage) return LOOM_NOMEM;
    t->stage_n = n;
  }
  int rc = t->dev->convert(t->dev_ctx, t->stage, t->comm_dt, buf, LOOM_F32, n);
  if (!rc) rc = t->api->all_reduce(t->host, t->comm, t->stage, n, t->comm_dt, LOOM_OP_SUM, NULL);
  if (!rc) rc = t->dev->convert(t->dev_ctx, buf, LOOM_F32, t->stage, t->comm_dt, n);
  return rc;
}

/* ABI 1.6: what tensor parallel holds and moves for `plan` (tp_estimate.c), with the option
 * create() validates (it reads only it and the planned mesh). */
static int tp_estimate(const loom_host_api_v1 *api, loom_host *host, const loom_options *opts,
                       const loom_estimate_plan_v1 *plan, loom_estimate_v1 *out) {
  void *ctx = NULL;
  int rc = tp_create(api, host, opts, &ctx);
  if (rc) return rc;
  tp_estimate_figures(plan, ((tp_ctx *)ctx)->force_fp32, out);
  tp_destroy(ctx);
  return LOOM_OK;
}

LOOM_EXPORT const loom_parallel_v1 loom_plugin_v1 = {
  .hdr = LOOM_PLUGIN_HEADER_INIT(LOOM_KIND_PARALLEL, "tensor_parallel", "1.0.0",
                                 "Megatron tensor parallel: heads and MLP units split over the "
                                 "tp axis; f/g all-reduces around column/row-parallel matmuls",
                                 LOOM_PAR_CAP_SPLIT_LAYERS | LOOM_PAR_CAP_AXIS_TP,
                                 loom_parallel_v1),
  .create = tp_create,
  .destroy = tp_destroy,
  .setup = tp_setup,
  .region = tp_region,
  .storage = LOOM_PAR_STORAGE_16BIT,
  .estimate = tp_estimate,
};
