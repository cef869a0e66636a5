/* context_parallel.so — context parallel: ring attention over the CP axis of the mesh (Liu et
 * al. 2023, "Ring Attention with Blockwise Transformers"; Megatron-LM's context parallel with
 * its load-balanced causal chunks; torchtitan's). Configured as
 *   "parallel": [{"plugin": "context_parallel", "size": 2}, {"plugin": "ddp"}]
 * where "size" (cp) is a host-level key, like tensor_parallel's.
 *
 * The host owns the model side (core/model/gpt_cp.c): every sequence of the micro-batch is cut
 * into 2*cp chunks and cp rank r keeps chunks r and 2*cp-1-r (so every rank does the same share
 * of the causal work), positions (wpe) are taken for those chunks, every per-token layer runs
 * on the local T/cp tokens, and attention runs as a ring: at each of the cp-1 steps a rank
 * merges the K/V block it holds into its output with the online softmax and passes the block
 * on. Backward runs the ring again, dK/dV travelling with their K/V and one last hop bringing
 * them home. This plugin's part is that hop (`ring`, ABI 1.13): send to cp rank r+1, receive
 * from r-1, non-blocking both, on the CP communicator (counted by the host).
 *
 * The gradients: each cp rank's backward gives its own tokens' part of the gradient (its loss
 * is the mean over its B*T/cp positions), so the parameters' gradient is the mean over the cp
 * ranks as over data-parallel replicas. The host therefore folds CP into the DP axis (host_v1.h,
 * LOOM_AXIS_CP): DP is the dp x cp group, and ddp / zero1..3 / cpu_offload reduce, shard and
 * average over it unchanged (Megatron-LM does the same with its dp-cp group). This plugin
 * touches no parameter, gradient or optimizer state, so it composes with all of them and with
 * tensor parallel (its ring carries the rank's C/tp attention channels). */
#include <loom/loom.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct cp_ctx {
  const loom_host_api_v1 *api;
  loom_host *host;
  int cp, rank;
  loom_comm *comm;
} cp_ctx;

#define CP_RING_TAG 0x7c00 /* one tag: a hop's send and receive pair up in posting order */

static int cp_create(const loom_host_api_v1 *api, loom_host *host, const loom_options *opts,
                     void **out) {
  static const char *const keys[] = {NULL}; /* "size" is the host's, removed before create */
  if (api->opt_check_keys(host, opts, keys)) return LOOM_INVALID_CONFIG;
  if (api->abi_minor < 13) {
    api->set_error(host, "this loom (ABI 1.%d) has no context-parallel axis (ABI 1.13)",
                   (int)api->abi_minor);
    return LOOM_UNSUPPORTED;
  }
  cp_ctx *c = calloc(1, sizeof *c);
  if (!c) return LOOM_NOMEM;
  c->api = api;
  c->host = host;
  c->cp = api->size(host, LOOM_AXIS_CP);
  c->rank = api->rank(host, LOOM_AXIS_CP);
  c->comm = api->comm(host, LOOM_AXIS_CP);
  *out = c;
  return LOOM_OK;
}

static void cp_destroy(void *ctx) { free(ctx); }

static int cp_ring(void *ctx, const float *send, float *recv, size_t n) {
  cp_ctx *c = ctx;
  if (c->cp <= 1) return LOOM_OK;
  const int next = (c->rank + 1) % c->cp, prev = (c->rank + c->cp - 1) % c->cp;
  loom_request *rs = NULL, *rr = NULL;
  int rc = c->api->recv(c->host, c->comm, recv, n, LOOM_F32, prev, CP_RING_TAG, &rr);
  if (rc == LOOM_OK)
    rc = c->api->send(c->host, c->comm, send, n, LOOM_F32, next, CP_RING_TAG, &rs);
  int rw = rr ? c->api->wait(c->host, rr) : LOOM_OK;
  int sw = rs ? c->api->wait(c->host, rs) : LOOM_OK;
  return rc != LOOM_OK ? rc : rw != LOOM_OK ? rw : sw;
}

static uint64_t al64(uint64_t bytes) { return (bytes + 63) / 64 * 64; }

/* What the ring holds and sends for `plan` (ABI 1.6 estimate; plan.cp from ABI 1.13, seq_len
 * the local T / cp): its buffers, two (B, T, 2C/tp) fp32 K/V blocks and two dK/dV, plus the
 * rank's wpe rows and their gradient (T, C) each (gpt_cp_scratch_bytes); sent per micro-step
 * and block (cp-1) K/V blocks forward, (cp-1) K/V and (cp-1) dK/dV backward, and (cp-1) more
 * K/V for a fully recomputed block's forward. */
static int cp_estimate(const loom_host_api_v1 *api, loom_host *host, const loom_options *opts,
                       const loom_estimate_plan_v1 *pl, loom_estimate_v1 *out) {
  static const char *const keys[] = {NULL};
  if (api->opt_check_keys(host, opts, keys)) return LOOM_INVALID_CONFIG;
  const uint64_t cp = LOOM_COVERS(pl, cp) && pl->cp > 1 ? (uint64_t)pl->cp : 1;
  if (cp <= 1) return LOOM_OK;
  const uint64_t B = (uint64_t)pl->micro_batch, T = (uint64_t)pl->seq_len,
                 C = (uint64_t)pl->n_embd, tp = pl->tp > 1 ? (uint64_t)pl->tp : 1;
  const uint64_t kv = B * T * 2 * (C / tp) * 4;
  out->bytes[LOOM_MEM_COMM] = 4 * al64(kv) + 2 * al64(T * C * 4);
  snprintf(out->formula[LOOM_MEM_COMM], 64, "cp K/V ring + wpe rows");
  out->comm_bytes = (uint64_t)pl->n_micro * (cp - 1) * kv *
                    (3 * (uint64_t)pl->n_blocks + (uint64_t)pl->n_recomputed);
  snprintf(out->comm_formula, sizeof out->comm_formula,
           "cp ring (3L%s) x (cp-1) x B*T/cp*2C/tp*4 x accum",
           pl->n_recomputed ? " + recomputed" : "");
  return LOOM_OK;
}

LOOM_EXPORT const loom_parallel_v1 loom_plugin_v1 = {
  .hdr = LOOM_PLUGIN_HEADER_INIT(LOOM_KIND_PARALLEL, "context_parallel", "1.0.0",
                                 "context parallel: sequences split over the cp axis in "
                                 "load-balanced causal chunks; ring attention passes K/V",
                                 LOOM_PAR_CAP_AXIS_CP, loom_parallel_v1),
  .create = cp_create,
  .destroy = cp_destroy,
  .ring = cp_ring,
  .storage = LOOM_PAR_STORAGE_16BIT,
  .estimate = cp_estimate,
};
