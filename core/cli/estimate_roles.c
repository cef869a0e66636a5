/* Role defaults for `loom estimate` (see estimate_roles.h): a plugin that does not describe
 * itself is accounted as the reference implementation of its role with default options:
 *   LOOM_PAR_CAP_SCHEDULE       a 1F1B schedule: min(p - s, m) micro-batches in flight; the
 *                               boundaries sent in the compute dtype (16-bit packed buffers)
 *   LOOM_PAR_CAP_SPLIT_LAYERS   Megatron's f/g all-reduces (16-bit region under bf16/fp16)
 *   LOOM_PAR_CAP_SHARD_*        ZeRO stage 1/2/3 by the highest sharding role: partition
 *                               ceil(Psi/N), gradient buckets of whole units up to 2^20
 *                               elements with one reduce-scatter in flight, no gather ahead
 *   LOOM_PAR_CAP_GRAD_SYNC      an all-reduce of the gradients in the compute dtype, in place
 *                               (no split of the tied embedding)
 *   LOOM_PAR_CAP_OPTIMIZER only the optimizer state in host memory (an offload) */
#include "estimate_roles.h"

#include <stdio.h>
#include <string.h>

static uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

static void add_text(char *buf, size_t n, const char *s) {
  size_t k = strlen(buf);
  if (k < n) snprintf(buf + k, n - k, "%s", s);
}

/* Gradient buckets of whole units as a ZeRO-2/3 plugin hands them out: unit 0 alone (held
 * through the whole backward: the head adds into the tied wte's gradient), the other units
 * merged from the head down while within `cap` elements; one reduce-scatter in flight while
 * the next bucket fills (`one_in_flight`, N > 1); with accumulation (`scratch`) each reduced into a
 * received block (rank [lo, hi)'s part; lo = hi = 0: any rank). Peak elements. */
static uint64_t bucket_set(const loom_estimate_plan_v1 *pl, uint64_t cap, uint64_t N,
                           uint64_t lo_r, uint64_t hi_r, uint64_t shard, int one_in_flight,
                           int scratch) {
  const uint64_t *off = pl->unit_offset;
  const uint64_t b0 = off[1] - off[0];
  uint64_t peak = 0, inflight = 0;
  for (int u = pl->n_units - 1; u >= 0;) {
    int lo = u;
    while (lo > 1 && off[u + 1] - off[lo - 1] <= cap) lo--;
    uint64_t a = off[lo], b = off[u + 1], n = b - a;
    uint64_t hi = b < hi_r ? b : hi_r, lw = a > lo_r ? a : lo_r;
    uint64_t recv = N == 1 ? n : hi_r == 0 ? (n < shard ? n : shard) : hi > lw ? hi - lw : 0;
    if (recv == 0) recv = 1;
    if (!scratch) recv = 0;
    uint64_t held = lo == 0 ? 0 : b0;
    if (held + n + inflight > peak) peak = held + n + inflight;
    if (held + n + recv > peak) peak = held + n + recv;
    inflight = one_in_flight && N > 1 ? n + recv : 0;
    u = lo - 1;
  }
  return peak;
}

static uint64_t bucket_set_max(const loom_estimate_plan_v1 *pl, uint64_t cap, uint64_t N,
                               uint64_t psi, uint64_t shard, int one_in_flight, int scratch) {
  if (N <= 1) return bucket_set(pl, cap, N, 0, psi, shard, one_in_flight, scratch);
  if (N * (uint64_t)pl->n_units > (1u << 24))
    return bucket_set(pl, cap, N, 0, 0, shard, one_in_flight, scratch);
  uint64_t peak = 0;
  for (uint64_t r = 0; r < N; r++) {
    uint64_t lo = r * shard < psi ? r * shard : psi, hi = lo + shard < psi ? lo + shard : psi;
    uint64_t p = hi > lo ? bucket_set(pl, cap, N, lo, hi, shard, one_in_flight, scratch)
                         : bucket_set(pl, cap, N, psi, psi + 1, shard, one_in_flight, scratch);
    if (p > peak) peak = p;
  }
  return peak;
}

static void sharding(int stage, const loom_estimate_plan_v1 *pl, loom_estimate_v1 *out) {
  const uint64_t N = pl->dp > 1 ? (uint64_t)pl->dp : 1, psi = pl->numel, A = pl->n_micro;
  const uint64_t shard = ceil_div(psi, N);
  const int s16 = pl->param_dtype != LOOM_F32;
  const uint64_t P = loom_dtype_size(pl->param_dtype), G = loom_dtype_size(pl->grad_dtype);
  const uint64_t K = s16 ? 12 : 8;
  const char *p = N > 1 ? "/N" : "";
  out->partition = shard;
  out->partition_sharded = 1;
  out->replaces |= 1u << LOOM_MEM_OPTIM | 1u << LOOM_MEM_COMM;
  out->bytes[LOOM_MEM_OPTIM] = K * shard;
  snprintf(out->formula[LOOM_MEM_OPTIM], 64, "K*Psi%s, K=%llu (%s)", p, (unsigned long long)K,
           s16 ? "master, m, v" : "m, v");
  const uint64_t *off = pl->unit_offset;
  const uint64_t unit0 = off[1] - off[0], head = off[pl->n_units] - off[pl->n_units - 1];
  if (stage == 3) {
    uint64_t g = 0;
    for (int u = 0; u < pl->n_units; u++) {
      uint64_t n = off[u + 1] - off[u] + (u == pl->n_units - 1 ? pl->wte_numel : 0);
      if (n > g) g = n;
    }
    out->gathered = g;
    out->replaces |= 1u << LOOM_MEM_PARAMS;
    out->bytes[LOOM_MEM_PARAMS] = P * (shard + g);
    snprintf(out->formula[LOOM_MEM_PARAMS], 64, "%lluPsi%s + %llu*%llu (gathered)",
             (unsigned long long)P, p, (unsigned long long)P, (unsigned long long)g);
  }
  char *cf = out->formula[LOOM_MEM_COMM];
  if (stage >= 2) {
    out->replaces |= 1u << LOOM_MEM_GRADS;
    out->bytes[LOOM_MEM_GRADS] = G * shard;
    snprintf(out->formula[LOOM_MEM_GRADS], 64, "%lluPsi%s", (unsigned long long)G, p);
    out->bytes[LOOM_MEM_COMM] = G * bucket_set_max(pl, 1u << 20, N, psi, shard, 1, A > 1);
    snprintf(cf, 64, "%s%s", N > 1 ? "<= unit0 + 2 buckets" : "unit0 + largest bucket",
             A > 1 ? (N > 1 ? " + blocks, max rank" : " + block") : "");
  } else if (N > 1) {
    out->bytes[LOOM_MEM_COMM] = G * shard;
    snprintf(cf, 64, "%lluPsi/N reduce-scatter scratch", (unsigned long long)G);
  } else {
    snprintf(cf, 64, "0 (in place)");
  }
  if (s16) {
    out->bytes[LOOM_MEM_COMM] += 2 * 4 * (shard < 8192 ? (shard ? shard : 1) : 8192);
    add_text(cf, 64, " + fp32 scratch");
  }
  if (N <= 1) return;
  if (stage == 3) {
    out->comm_bytes = A * (N - 1) * (P * (2 * psi + pl->wte_numel - unit0 - head) + G * psi) / N;
    snprintf(out->comm_formula, sizeof out->comm_formula, "%s(N-1)/N*(%llu(2Psi - wpe - head) "
             "+ %lluPsi)", A > 1 ? "A" : "", (unsigned long long)P, (unsigned long long)G);
  } else {
    const uint64_t R = stage == 2 ? A : 1;
    out->comm_bytes = (R * G * psi + P * psi) * (N - 1) / N;
    snprintf(out->comm_formula, sizeof out->comm_formula, "(N-1)/N*(%s%lluPsi + %lluPsi)",
             R > 1 ? "A*" : "", (unsigned long long)G, (unsigned long long)P);
  }
}

static void grad_sync(const loom_estimate_plan_v1 *pl, loom_estimate_v1 *out) {
  const uint64_t N = pl->dp > 1 ? (uint64_t)pl->dp : 1, psi = pl->numel;
  const int comm16 = pl->compute_dtype != LOOM_F32, grad16 = pl->grad_dtype != LOOM_F32;
  if (comm16) out->flags |= LOOM_ESTIMATE_GRAD_COMM_16BIT;
  out->replaces |= 1u << LOOM_MEM_COMM;
  char *cf = out->formula[LOOM_MEM_COMM];
  if (grad16 && N > 1) {
    out->bytes[LOOM_MEM_COMM] = pl->grads_predivided ? 0 : 65536;
    snprintf(cf, 64, "in place%s", pl->grads_predivided ? " (predivided: no averaging)"
                                                        : " + 64 KiB averaging stage");
  } else if (comm16 && N > 1) {
    out->bytes[LOOM_MEM_COMM] = 2 * psi;
    snprintf(cf, 64, "2Psi 16-bit buckets");
  } else {
    snprintf(cf, 64, "0 (in place)");
  }
  if (N <= 1) return;
  out->comm_bytes = 2 * (N - 1) * ((comm16 ? 2 : 4) * psi) / N;
  snprintf(out->comm_formula, sizeof out->comm_formula, "%s",
           comm16 ? "2(N-1)/N*2Psi (16-bit)" : "2(N-1)/N*4Psi");
}

static void offload(const loom_estimate_plan_v1 *pl, loom_estimate_v1 *out) {
  const int s16 = pl->param_dtype != LOOM_F32;
  const uint64_t G = loom_dtype_size(pl->grad_dtype), K = s16 ? 12 : 8;
  const uint64_t part = pl->partition ? pl->partition : pl->numel;
  out->replaces |= 1u << LOOM_MEM_OPTIM | 1u << LOOM_MEM_HOST;
  snprintf(out->formula[LOOM_MEM_OPTIM], 64, "0 (offloaded)");
  out->bytes[LOOM_MEM_HOST] = (K + (s16 ? 0 : 4) + G) * part;
  snprintf(out->formula[LOOM_MEM_HOST], 64, "(%llu+%llu)Psi%s optimizer state+grad stage",
           (unsigned long long)(K + (s16 ? 0 : 4)), (unsigned long long)G,
           pl->partition_sharded && pl->dp > 1 ? "/N" : "");
}

static void split_layers(const loom_estimate_plan_v1 *pl, loom_estimate_v1 *out) {
  const uint64_t tp = (uint64_t)pl->tp, BTC = (uint64_t)pl->micro_batch *
                                                  (uint64_t)pl->seq_len * (uint64_t)pl->n_embd;
  if (tp <= 1) return;
  if (pl->compute_dtype != LOOM_F32) {
    out->bytes[LOOM_MEM_COMM] = 2 * BTC;
    snprintf(out->formula[LOOM_MEM_COMM], 64, "tp 16-bit region");
  }
  out->comm_bytes = ((uint64_t)pl->n_blocks * 4 + (uint64_t)pl->n_recomputed) *
                    (uint64_t)pl->n_micro * 2 * (tp - 1) * BTC * 4 / tp;
  snprintf(out->comm_formula, sizeof out->comm_formula, "tp f/g");
}

static void pipeline_role(const loom_estimate_plan_v1 *pl, loom_estimate_v1 *out) {
  const int P = pl->pp, s = pl->stage, m = pl->n_micro;
  const uint64_t BTC = (uint64_t)pl->micro_batch * (uint64_t)pl->seq_len * (uint64_t)pl->n_embd;
  snprintf(out->schedule, sizeof out->schedule, "1f1b");
  out->in_flight = P - s < m ? P - s : m;
  if (P <= 1) return;
  const uint64_t nb = (uint64_t)((s < P - 1) + (s > 0));
  const int packed = pl->compute_dtype != LOOM_F32;
  if (packed) {
    out->bytes[LOOM_MEM_COMM] = 2 * BTC * ((uint64_t)m * nb + 1);
    snprintf(out->formula[LOOM_MEM_COMM], 64, "16-bit boundaries");
  }
  out->comm_bytes = (uint64_t)m * (packed ? 2 : 4) * BTC * nb;
  if (out->comm_bytes)
    snprintf(out->comm_formula, sizeof out->comm_formula, "%s p2p",
             nb > 1 ? "2 x A*4BTC" : "A*4BTC");
}

void loom__estimate_by_role(uint64_t caps, const loom_estimate_plan_v1 *pl,
                            loom_estimate_v1 *out) {
  const uint64_t shard_caps = LOOM_PAR_CAP_SHARD_OPTIM | LOOM_PAR_CAP_SHARD_GRADS |
                              LOOM_PAR_CAP_SHARD_PARAMS;
  if (caps & LOOM_PAR_CAP_SCHEDULE) pipeline_role(pl, out);
  if (caps & LOOM_PAR_CAP_SPLIT_LAYERS) split_layers(pl, out);
  if (caps & shard_caps)
    sharding(caps & LOOM_PAR_CAP_SHARD_PARAMS ? 3 : caps & LOOM_PAR_CAP_SHARD_GRADS ? 2 : 1, pl,
             out);
  else if (caps & LOOM_PAR_CAP_GRAD_SYNC) grad_sync(pl, out);
  else if (caps & LOOM_PAR_CAP_OPTIMIZER) offload(pl, out);
}
