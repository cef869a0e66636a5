/* What zero1.so, zero2.so and zero3.so hold and move for a plan (loom_parallel_v1.estimate,
 * ABI 1.6): the accounting of the ZeRO paper (Rajbhandari et al. 2020, §3, §5, §7) as these
 * plugins implement it, with their options. Runs without create(): nothing here touches a
 * model, a device or a communicator. Storage P, G bytes per element (plan.param_dtype,
 * grad_dtype), K = 12 (fp32 master, m, v) with 16-bit parameters, else 8 (m, v). */
#include <stdio.h>
#include <string.h>

#include "zero_estimate.h"

static uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

/* ZeRO-2/3 gradient buckets (LOOM_MEM_COMM), as zc_gb_build hands them out: unit 0 alone (the
 * head adds into the tied wte's gradient, so unit 0's bucket is held through the whole
 * backward), the other units merged from the head down while a bucket stays within `cap`
 * elements. A bucket is filled by its units' backward, then reduce-scattered into a received
 * block (the rank's part of it: its shard [lo, hi) within the bucket, at least one element) —
 * on micro-steps after the first only (`scratch`): the first receives straight into the
 * partition gradient. With overlap (N > 1) one reduce-scatter stays in flight while the next
 * bucket fills: the bound assumes it still is then. One rank's peak, in elements; lo = hi = 0
 * bounds every rank (block = min(bucket, shard)). */
static uint64_t bucket_set(const loom_estimate_plan_v1 *pl, uint64_t cap, uint64_t N,
                           uint64_t lo_r, uint64_t hi_r, uint64_t shard, int overlap,
                           int scratch) {
  const uint64_t *off = pl->unit_offset;
  const uint64_t b0 = off[1] - off[0];
  uint64_t peak = 0, inflight = 0;
  for (int u = pl->n_units - 1; u >= 0;) {
    int lo = u;
    while (lo > 1 && off[u + 1] - off[lo - 1] <= cap) lo--;
    uint64_t a = off[lo], b = off[u + 1], n = b - a;
    uint64_t recv;
    if (N == 1) recv = n;
    else if (hi_r == 0) recv = n < shard ? n : shard; /* any rank */
    else recv = (b < hi_r ? b : hi_r) > (a > lo_r ? a : lo_r)
                    ? (b < hi_r ? b : hi_r) - (a > lo_r ? a : lo_r) : 0;
    if (recv == 0) recv = 1;
    if (!scratch) recv = 0;
    uint64_t held = lo == 0 ? 0 : b0; /* unit 0's bucket, besides this one */
    uint64_t filling = held + n + inflight, launched = held + n + recv;
    if (filling > peak) peak = filling;
    if (launched > peak) peak = launched;
    inflight = overlap && N > 1 ? n + recv : 0;
    u = lo - 1;
  }
  return peak;
}

/* The largest bucket_set over the N ranks (shards of ceil(psi/N), the last ones shorter or
 * empty). Exact per rank up to 2^24 rank x unit pairs; beyond that the any-rank bound. */
static uint64_t bucket_set_max(const loom_estimate_plan_v1 *pl, uint64_t cap, uint64_t N,
                               uint64_t psi, uint64_t shard, int overlap, int scratch) {
  if (N <= 1) return bucket_set(pl, cap, N, 0, psi, shard, overlap, scratch);
  if (N * (uint64_t)pl->n_units > (1u << 24))
    return bucket_set(pl, cap, N, 0, 0, shard, overlap, scratch);
  uint64_t peak = 0;
  for (uint64_t r = 0; r < N; r++) {
    uint64_t lo = r * shard < psi ? r * shard : psi, hi = lo + shard < psi ? lo + shard : psi;
    uint64_t p = hi > lo ? bucket_set(pl, cap, N, lo, hi, shard, overlap, scratch)
                         : bucket_set(pl, cap, N, psi, psi + 1, shard, overlap, scratch);
    if (p > peak) peak = p;
  }
  return peak;
}

void zc_estimate(int stage, uint64_t cap, int overlap, int prefetch,
                 const loom_estimate_plan_v1 *pl, loom_estimate_v1 *out) {
  /* hybrid sharding (ABI 1.11): the partition is over the shard group of K ranks (the host's
   * sum over the replicas is its own, and its own traffic) */
  const int hybrid = LOOM_COVERS(pl, dp_replica) && pl->dp_shard > 0 && pl->dp_replica > 1;
  const uint64_t dp = hybrid ? (uint64_t)pl->dp_shard : (uint64_t)pl->dp;
  const uint64_t N = dp > 1 ? dp : 1, psi = pl->numel; /* N: the shard group's size */
  const uint64_t shard = ceil_div(psi, N), A = (uint64_t)pl->n_micro;
  const int s16 = pl->param_dtype != LOOM_F32;
  const uint64_t P = loom_dtype_size(pl->param_dtype), G = loom_dtype_size(pl->grad_dtype);
  const uint64_t K = s16 ? 12 : 8;
  const char *p = N > 1 ? "/N" : "";
  /* the partition: every rank's optimizer state for its shard (the host allocates it) */
  out->partition = shard;
  out->partition_sharded = 1;
  out->replaces |= 1u << LOOM_MEM_OPTIM;
  out->bytes[LOOM_MEM_OPTIM] = K * shard;
  snprintf(out->formula[LOOM_MEM_OPTIM], 64, "K*Psi%s, K=%llu (%s)", p, (unsigned long long)K,
           s16 ? "master, m, v" : "m, v");
  /* parameters: a shard plus the largest set gathered at once — a unit, the head with the
   * tied wte it reads; with prefetch the next unit's gather is in flight as well */
  if (stage == 3) {
    const uint64_t *off = pl->unit_offset;
    uint64_t g = 0, prev = 0;
    for (int u = 0; u < pl->n_units; u++) {
      uint64_t n = off[u + 1] - off[u];
      if (u == pl->n_units - 1) n += pl->wte_numel;
      uint64_t set = prefetch ? n + prev : n;
      if (set > g) g = set;
      prev = n;
    }
    out->gathered = g;
    out->replaces |= 1u << LOOM_MEM_PARAMS;
    out->bytes[LOOM_MEM_PARAMS] = P * (shard + g);
    snprintf(out->formula[LOOM_MEM_PARAMS], 64, "%lluPsi%s + %llu*%llu (gathered%s)",
             (unsigned long long)P, p, (unsigned long long)P, (unsigned long long)g,
             prefetch ? ", 2 units" : "");
  }
  /* gradients: ZeRO-2/3 keep only the partition's */
  if (stage >= 2) {
    out->replaces |= 1u << LOOM_MEM_GRADS;
    out->bytes[LOOM_MEM_GRADS] = G * shard;
    snprintf(out->formula[LOOM_MEM_GRADS], 64, "%lluPsi%s", (unsigned long long)G, p);
  }
  /* communication buffers: ZeRO-1 receives its reduce-scatter blocks (together its partition)
   * in scratch until the end of backward; ZeRO-2/3 hand out gradient buckets of whole units */
  out->replaces |= 1u << LOOM_MEM_COMM;
  char *cf = out->formula[LOOM_MEM_COMM];
  if (stage >= 2) {
    out->bytes[LOOM_MEM_COMM] = G * bucket_set_max(pl, cap, N, psi, shard, overlap, A > 1);
    snprintf(cf, 64, "%s%s", overlap && N > 1 ? "<= unit0 + 2 buckets" : "unit0 + largest bucket",
             A > 1 ? (overlap && N > 1 ? " + blocks, max rank" : " + block") : "");
  } else if (N > 1) {
    out->bytes[LOOM_MEM_COMM] = G * shard;
    snprintf(cf, 64, "%lluPsi/N reduce-scatter scratch", (unsigned long long)G);
  } else {
    snprintf(cf, 64, "0 (in place)");
  }
  /* the fp32 scratch of 16-bit arithmetic (ZC_CVT_CHUNK: two halves, held for the run) */
  if (s16) {
    out->bytes[LOOM_MEM_COMM] += 2 * 4 * (shard < ZC_CVT_CHUNK ? (shard ? shard : 1) : ZC_CVT_CHUNK);
    size_t k = strlen(cf);
    snprintf(cf + k, 64 - k, " + fp32 scratch");
  }
  /* traffic per step: ZeRO-3 gathers every unit for forward (the head with the tied wte
   * again) and every unit but the head (kept from its forward) and unit 0 (the embedding's
   * backward reads no parameter) for backward, and reduce-scatters every gradient, on every
   * micro-step; ZeRO-1/2 reduce-scatter the gradients (every micro-step in ZeRO-2, the last in
   * ZeRO-1) and all-gather the updated parameters once */
  if (N <= 1) return;
  char *f = out->comm_formula;
  const size_t fl = sizeof out->comm_formula;
  if (stage == 3) {
    const uint64_t *off = pl->unit_offset;
    const uint64_t unit0 = off[1] - off[0], head = off[pl->n_units] - off[pl->n_units - 1];
    out->comm_bytes = A * (N - 1) * (P * (2 * psi + pl->wte_numel - unit0 - head) + G * psi) / N;
    if (P == G)
      snprintf(f, fl, "%s(N-1)/N*%llu(3Psi - wpe - head)", A > 1 ? "A" : "",
               (unsigned long long)P);
    else
      snprintf(f, fl, "%s(N-1)/N*(%llu(2Psi - wpe - head) + %lluPsi)", A > 1 ? "A" : "",
               (unsigned long long)P, (unsigned long long)G);
  } else {
    const uint64_t R = stage == 2 ? A : 1;
    out->comm_bytes = (R * G * psi + P * psi) * (N - 1) / N;
    if (P == G)
      snprintf(f, fl, "%s(N-1)/N*%lluPsi", R > 1 ? "(A+1)" : "2", (unsigned long long)P);
    else
      snprintf(f, fl, "(N-1)/N*(%s%lluPsi + %lluPsi)", R > 1 ? "A*" : "",
               (unsigned long long)G, (unsigned long long)P);
  }
}
