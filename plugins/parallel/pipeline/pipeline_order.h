/* The order of one pipeline rank's micro-steps, and whom each boundary tensor goes to: pure
 * functions of (schedule, p, s, m, v), shared by pipeline.so (which runs the order) and
 * tests/unit/check_pipeline_order.c (which simulates every rank's order with rendezvous
 * point-to-point semantics: no deadlock, every send matched by one receive).
 *
 * Virtual stages (Narayanan et al. 2021, §2.2.1): with v model chunks per rank the model is
 * p*v virtual stages; rank s holds chunk k = virtual stage k*p + s. Virtual stage j's output
 * goes to j + 1: rank s + 1's chunk k, or from the last rank to rank 0's chunk k + 1 (the
 * ring wrap). v = 1 is the contiguous pipeline. */
#ifndef LOOM_PIPELINE_ORDER_H
#define LOOM_PIPELINE_ORDER_H

enum { PP_SEQUENTIAL, PP_GPIPE, PP_1F1B, PP_INTERLEAVED, PP_N_SCHEDULES };

/* One micro-step: the forward (fwd 1) or backward (fwd 0) of `micro` on chunk `chunk`. */
typedef struct pp_op {
  int fwd, micro, chunk;
} pp_op;

/* A neighbour of (rank s, chunk k): the rank and its chunk that hold the adjacent virtual
 * stage. */
typedef struct pp_peer {
  int rank, chunk;
} pp_peer;

/* The warm-up forwards of rank s before its first backward:
 *   sequential 0 (it alternates by itself), gpipe m, 1f1b min(p - s - 1, m),
 *   interleaved min((p - s - 1) * 2 + (v - 1) * p, m * v) (Megatron-LM's
 *   forward_backward_pipelining_with_interleaving). */
int pp_warmup(int sched, int p, int s, int m, int v);

/* Fill out[0 .. 2*m*v) with rank s's order (every (micro, chunk) once forward, then once
 * backward); returns the count. v must be 1 but for PP_INTERLEAVED, which needs m % p == 0
 * (checked by the caller: pp_order_check). Interleaved: the k-th forward runs micro
 * (k / (p*v)) * p + k % p on chunk (k / p) % v, the k-th backward the same micro on chunk
 * v - 1 - (k / p) % v (micro-batches in groups of p, each group through all chunks). */
int pp_order(int sched, int p, int s, int m, int v, pp_op *out);

/* NULL when (sched, p, m, v) can run; else a static reason naming what is needed. */
const char *pp_order_check(int sched, int p, int m, int v);

/* The previous virtual stage of (s, k) (0: s, k is virtual stage 0, none) and the next one
 * (0: the last virtual stage, none). */
int pp_prev(int p, int v, int s, int k, pp_peer *out);
int pp_next(int p, int v, int s, int k, pp_peer *out);

/* The message tags of the activation into / the gradient into (micro, chunk k of the
 * receiving rank): 2(micro*v + k) and 2(micro*v + k) + 1 (with v = 1: 2i and 2i + 1). */
static inline int pp_tag_act(int v, int micro, int k) { return 2 * (micro * v + k); }
static inline int pp_tag_grad(int v, int micro, int k) { return 2 * (micro * v + k) + 1; }



/* 1 when rank s's gradient sends (to the previous virtual stage) are completed only at the end
 * of the step, from a copy per (micro, chunk): under the interleaved order waiting for one
 * right after the backward can deadlock where a send completes only once its receive is posted
 * (rank 0 waits for rank 1 to receive micro 0's gradient while rank 1 waits for rank 0 to
 * receive micro 1's, a p = 2, v = 2, m = 4 case the order test finds). Activation sends are
 * waited in the backward of their (micro, chunk): by then the gradient has come back, so the
 * next stage received them. */
static inline int pp_defer_grad_sends(int sched) { return sched == PP_INTERLEAVED; }

/* The most (micro, chunk) activation sets rank s holds at once under its order (forwards run
 * minus backwards run, at its peak): what its activation memory is made of. */
int pp_peak_inflight(int sched, int p, int s, int m, int v);
/* The same for chunk `chunk`'s activation sets alone (-1: every chunk's, pp_peak_inflight):
 * how many slots the host's pool for that chunk needs. */
int pp_peak_inflight_chunk(int sched, int p, int s, int m, int v, int chunk);
#endif
