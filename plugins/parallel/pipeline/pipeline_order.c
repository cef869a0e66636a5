/* Pipeline orders and neighbours (see pipeline_order.h). */
#include "pipeline_order.h"

#include <stdlib.h>

int pp_warmup(int sched, int p, int s, int m, int v) {
  int w = 0, total = m * v;
  switch (sched) {
    case PP_GPIPE: w = m; break;
    case PP_1F1B: w = p - s - 1; break;
    case PP_INTERLEAVED: w = (p - s - 1) * 2 + (v - 1) * p; break;
    default: w = 0;
  }
  return w < total ? w : total;
}

/* The micro-batch and chunk of rank s's k-th forward (fwd 1) or backward (fwd 0) under the
 * interleaved order. */
static pp_op interleaved_op(int p, int v, int k, int fwd) {
  int group = k / (p * v), chunk = (k % (p * v)) / p;
  pp_op op = {fwd, group * p + k % p, fwd ? chunk : v - 1 - chunk};
  return op;
}

int pp_order(int sched, int p, int s, int m, int v, pp_op *out) {
  int n = 0;
  if (sched != PP_INTERLEAVED) v = 1;
  if (sched == PP_SEQUENTIAL) {
    for (int i = 0; i < m; i++) {
      out[n++] = (pp_op){1, i, 0};
      out[n++] = (pp_op){0, i, 0};
    }
    return n;
  }
  const int total = m * v, warm = pp_warmup(sched, p, s, m, v);
  int f = 0, b = 0;
#define NEXT(fw, k) (sched == PP_INTERLEAVED ? interleaved_op(p, v, k, fw) : (pp_op){fw, k, 0})
  for (; f < warm; f++) out[n++] = NEXT(1, f);
  while (f < total) { /* steady state: one forward, one backward */
    out[n++] = NEXT(1, f), f++;
    out[n++] = NEXT(0, b), b++;
  }
  for (; b < total; b++) out[n++] = NEXT(0, b);
#undef NEXT
  return n;
}

const char *pp_order_check(int sched, int p, int m, int v) {
  if (v < 1) return "chunks must be >= 1";
  if (v > 1 && sched != PP_INTERLEAVED) return "chunks > 1 needs the \"interleaved\" schedule";
  if (sched == PP_1F1B && m < p) return "1f1b needs at least as many micro-batches as stages";
  if (sched == PP_INTERLEAVED && p < 2) return "interleaved needs at least 2 stages";
  if (sched == PP_INTERLEAVED && m % p) return "interleaved needs the micro-batches to be a "
                                               "multiple of the stages";
  return 0;
}

int pp_prev(int p, int v, int s, int k, pp_peer *out) {
  if (s == 0 && k == 0) return 0;
  *out = s > 0 ? (pp_peer){s - 1, k} : (pp_peer){p - 1, k - 1};
  (void)v;
  return 1;
}

int pp_next(int p, int v, int s, int k, pp_peer *out) {
  if (s == p - 1 && k == v - 1) return 0;
  *out = s < p - 1 ? (pp_peer){s + 1, k} : (pp_peer){0, k + 1};
  return 1;
}

int pp_peak_inflight(int sched, int p, int s, int m, int v) {
  return pp_peak_inflight_chunk(sched, p, s, m, v, -1);
}

int pp_peak_inflight_chunk(int sched, int p, int s, int m, int v, int chunk) {
  if (sched != PP_INTERLEAVED) v = 1;
  pp_op *ops = malloc((size_t)2 * m * v * sizeof *ops);
  if (!ops) return m * v; /* the bound: every activation set at once */
  int n = pp_order(sched, p, s, m, v, ops), cur = 0, peak = 0;
  for (int i = 0; i < n; i++) {
    if (chunk >= 0 && ops[i].chunk != chunk) continue;
    cur += ops[i].fwd ? 1 : -1;
    if (cur > peak) peak = cur;
  }
  free(ops);
  return peak;
}
