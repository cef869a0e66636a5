/* Unit tests for pipeline.so's orders (plugins/parallel/pipeline/pipeline_order.c): every
 * rank's order is expanded into the point-to-point actions pipeline.so performs for it (fwd:
 * blocking receive of the input, compute, non-blocking send of the output; bwd: blocking
 * receive of the output's gradient, compute, non-blocking send of the input's gradient, then
 * waits on both sends of that (micro, chunk)), and all p ranks are simulated together under
 * rendezvous semantics (a send completes only once its receive is posted: the strictest MPI
 * may be). Checked for every schedule, p = 2, 4, v = 1, 2, 3, m = 4..16 where the schedule
 * accepts it: no deadlock, every send received exactly once from the neighbour holding the
 * adjacent virtual stage with the tag it waits for, every (micro, chunk) forward before its
 * backward, the backwards of each chunk in micro order and (m - 1, chunk 0) last (the host's
 * data-parallel sync step), and the warm-up and in-flight counts of the paper. */
#include <check.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include "../../plugins/parallel/pipeline/pipeline_order.h"
#include "support/check_suite.h"

enum { A_RECV, A_SEND, A_WAIT, A_COMPUTE };
typedef struct act {
  int kind, peer, tag;
} act;

/* pipeline.so's fwd()/bwd() for op on rank s, appended to a. */
static int expand(int sched, int p, int v, int s, pp_op op, act *a) {
  int n = 0;
  pp_peer pr, nx;
  int has_prev = pp_prev(p, v, s, op.chunk, &pr), has_next = pp_next(p, v, s, op.chunk, &nx);
  if (op.fwd) {
    if (has_prev) a[n++] = (act){A_RECV, pr.rank, pp_tag_act(v, op.micro, op.chunk)};
    a[n++] = (act){A_COMPUTE, -1, -1};
    if (has_next) a[n++] = (act){A_SEND, nx.rank, pp_tag_act(v, op.micro, nx.chunk)};
  } else {
    if (has_next) a[n++] = (act){A_RECV, nx.rank, pp_tag_grad(v, op.micro, op.chunk)};
    a[n++] = (act){A_COMPUTE, -1, -1};
    if (has_prev) {
      a[n++] = (act){A_SEND, pr.rank, pp_tag_grad(v, op.micro, pr.chunk)};
      if (!pp_defer_grad_sends(sched))
        a[n++] = (act){A_WAIT, pr.rank, pp_tag_grad(v, op.micro, pr.chunk)};
    }
    if (has_next) a[n++] = (act){A_WAIT, nx.rank, pp_tag_act(v, op.micro, nx.chunk)};
  }
  return n;
}

enum { MAXP = 4, MAXTAG = 2 * 16 * 3 + 2 };
static int sent[MAXP][MAXP][MAXTAG], recvd[MAXP][MAXP][MAXTAG]; /* [src][dst][tag] */

/* Simulate schedule sched on p ranks; fails the test with the case named. */
static void simulate(int sched, int p, int m, int v) {
  act *acts[MAXP];
  int n[MAXP], at[MAXP];
  memset(sent, 0, sizeof sent), memset(recvd, 0, sizeof recvd);
  const int V = sched == PP_INTERLEAVED ? v : 1, total = m * V;
  for (int s = 0; s < p; s++) {
    pp_op *ops = malloc((size_t)2 * total * sizeof *ops);
    int nops = pp_order(sched, p, s, m, V, ops);
    ck_assert_int_eq(nops, 2 * total);
    /* each (micro, chunk) once forward, then once backward; backwards per chunk in order */
    int *fwd_at = calloc((size_t)total, sizeof(int)), *bwd_at = calloc((size_t)total,
                                                                        sizeof(int));
    int last_b[3] = {-1, -1, -1}, warm = 0, seen_b = 0, cur = 0, peak = 0;
    for (int i = 0; i < nops; i++) {
      int id = ops[i].micro * V + ops[i].chunk;
      ck_assert(ops[i].micro >= 0 && ops[i].micro < m && ops[i].chunk >= 0 &&
                ops[i].chunk < V);
      if (ops[i].fwd) {
        ck_assert_msg(!fwd_at[id], "sched %d p %d m %d v %d rank %d: forward twice", sched, p,
                      m, v, s);
        fwd_at[id] = i + 1;
        warm += !seen_b;
      } else {
        ck_assert_msg(fwd_at[id] && !bwd_at[id], "sched %d p %d m %d v %d rank %d: backward "
                      "of micro %d chunk %d before its forward or twice", sched, p, m, v, s,
                      ops[i].micro, ops[i].chunk);
        bwd_at[id] = i + 1;
        ck_assert(ops[i].micro > last_b[ops[i].chunk]);
        last_b[ops[i].chunk] = ops[i].micro;
        seen_b = 1;
      }
      cur += ops[i].fwd ? 1 : -1;
      if (cur > peak) peak = cur;
    }
    ck_assert_msg(!ops[nops - 1].fwd && ops[nops - 1].micro == m - 1 && ops[nops - 1].chunk == 0,
                  "sched %d p %d m %d v %d rank %d: the last backward is not (m-1, chunk 0)",
                  sched, p, m, v, s);
    if (sched != PP_SEQUENTIAL) ck_assert_int_eq(warm, pp_warmup(sched, p, s, m, V) +
                                                 (pp_warmup(sched, p, s, m, V) < total));
    ck_assert_int_eq(peak, pp_peak_inflight(sched, p, s, m, V));
    acts[s] = malloc((size_t)nops * 7 * sizeof(act));
    n[s] = 0;
    for (int i = 0; i < nops; i++) n[s] += expand(sched, p, V, s, ops[i], acts[s] + n[s]);
    for (int i = 0; pp_defer_grad_sends(sched) && i < nops; i++) { /* the step's end */
      pp_peer pr;
      if (!ops[i].fwd && pp_prev(p, V, s, ops[i].chunk, &pr))
        acts[s][n[s]++] = (act){A_WAIT, pr.rank, pp_tag_grad(V, ops[i].micro, pr.chunk)};
    }
    at[s] = 0;
    free(ops), free(fwd_at), free(bwd_at);
  }
  for (int progress = 1; progress;) {
    progress = 0;
    for (int s = 0; s < p; s++)
      while (at[s] < n[s]) {
        act *a = &acts[s][at[s]];
        ck_assert(a->tag < MAXTAG);
        if (a->kind == A_RECV) {
          if (sent[a->peer][s][a->tag] == 0) break;
          recvd[a->peer][s][a->tag]++;
        } else if (a->kind == A_SEND) {
          ck_assert_msg(!sent[s][a->peer][a->tag], "sched %d p %d m %d v %d: rank %d sends "
                        "tag %d to %d twice", sched, p, m, v, s, a->tag, a->peer);
          sent[s][a->peer][a->tag] = 1;
        } else if (a->kind == A_WAIT) { /* rendezvous: the receive must be posted */
          int d = a->peer;
          const act *r = at[d] < n[d] ? &acts[d][at[d]] : NULL;
          int posted = recvd[s][d][a->tag] ||
                       (r && r->kind == A_RECV && r->peer == s && r->tag == a->tag);
          if (!posted) break;
        }
        at[s]++, progress = 1;
      }
  }
  for (int s = 0; s < p; s++)
    ck_assert_msg(at[s] == n[s], "sched %d p %d m %d v %d: deadlock, rank %d stuck at action "
                  "%d of %d (kind %d, peer %d, tag %d)", sched, p, m, v, s, at[s], n[s],
                  acts[s][at[s]].kind, acts[s][at[s]].peer, acts[s][at[s]].tag);
  for (int a = 0; a < p; a++)
    for (int b = 0; b < p; b++)
      for (int t = 0; t < MAXTAG; t++)
        ck_assert_msg(sent[a][b][t] == recvd[a][b][t] && recvd[a][b][t] <= 1,
                      "sched %d p %d m %d v %d: %d -> %d tag %d sent %d received %d", sched, p,
                      m, v, a, b, t, sent[a][b][t], recvd[a][b][t]);
  for (int s = 0; s < p; s++) free(acts[s]);
}

START_TEST(every_order_completes) {
  static const int ps[] = {2, 4};
  int runs = 0;
  for (int sched = 0; sched < PP_N_SCHEDULES; sched++)
    for (size_t i = 0; i < 2; i++)
      for (int v = 1; v <= 3; v++)
        for (int m = 4; m <= 16; m++) {
          if (sched != PP_INTERLEAVED && v > 1) continue;
          if (pp_order_check(sched, ps[i], m, v)) continue;
          simulate(sched, ps[i], m, v);
          runs++;
        }
  ck_assert_int_eq(runs, 26 + 26 + 26 + 7 * 3 + 4 * 3); /* seq, gpipe, 1f1b, interleaved */
}
END_TEST

/* The bubble of an order on an idle machine: every rank's ops timed (a chunk's forward 1/v,
 * its backward 2/v: one stage's work split over v chunks; sends instantaneous), each op
 * starting when its rank is free and its input has arrived; the idle fraction of the slowest
 * rank over the step's span. */
static double timed_bubble(int sched, int p, int m, int v) {
  const int V = sched == PP_INTERLEAVED ? v : 1, total = m * V;
  pp_op *ops[MAXP];
  double *done_f = calloc((size_t)p * total, sizeof(double)), /* [rank][micro*V+chunk] */
      *done_b = calloc((size_t)p * total, sizeof(double)), t[MAXP] = {0};
  int at[MAXP] = {0}, n[MAXP];
  for (int s = 0; s < p; s++) {
    ops[s] = malloc((size_t)2 * total * sizeof(pp_op));
    n[s] = pp_order(sched, p, s, m, V, ops[s]);
  }
  for (int left = 1; left;) {
    left = 0;
    for (int s = 0; s < p; s++)
      while (at[s] < n[s]) {
        pp_op o = ops[s][at[s]];
        pp_peer x;
        double ready = t[s];
        int has = o.fwd ? pp_prev(p, V, s, o.chunk, &x) : pp_next(p, V, s, o.chunk, &x);
        if (has) {
          double d = (o.fwd ? done_f : done_b)[x.rank * total + o.micro * V + x.chunk];
          if (d == 0) break; /* not produced yet */
          if (d > ready) ready = d;
        }
        t[s] = ready + (o.fwd ? 1.0 : 2.0) / V;
        (o.fwd ? done_f : done_b)[s * total + o.micro * V + o.chunk] = t[s];
        at[s]++;
      }
    for (int s = 0; s < p; s++) left |= at[s] < n[s];
  }
  double span = 0, busy = 3.0 * m;
  for (int s = 0; s < p; s++) span = t[s] > span ? t[s] : span;
  for (int s = 0; s < p; s++) free(ops[s]);
  free(done_f), free(done_b);
  return 1.0 - busy / span;
}

START_TEST(bubble_is_the_papers) {
  /* 1F1B: (p - 1)/(m + p - 1); interleaved: (p - 1)/(v*m + p - 1) (Narayanan et al. 2021,
   * §2.2.1: the bubble divided by v), exactly, on ranks of equal speed */
  static const int ps[] = {2, 4};
  for (size_t i = 0; i < 2; i++)
    for (int m = 4; m <= 16; m += 4)
      for (int v = 1; v <= 3; v++) {
        int p = ps[i], sched = v == 1 ? PP_1F1B : PP_INTERLEAVED;
        if (pp_order_check(sched, p, m, v)) continue;
        double got = timed_bubble(sched, p, m, v), want = (double)(p - 1) / (v * m + p - 1);
        ck_assert_msg(fabs(got - want) < 1e-9, "p %d m %d v %d: bubble %.6f, paper %.6f", p, m,
                      v, got, want);
      }
}
END_TEST

START_TEST(interleaved_order_is_megatrons) {
  /* p 2, v 2, m 4, rank 0: warm-up (2-0-1)*2 + (2-1)*2 = 4 forwards: micro 0, 1 on chunk 0,
   * then micro 0, 1 on chunk 1; the backwards start on chunk 1 (the later virtual stage) */
  pp_op o[16];
  ck_assert_int_eq(pp_order(PP_INTERLEAVED, 2, 0, 4, 2, o), 16);
  ck_assert_int_eq(pp_warmup(PP_INTERLEAVED, 2, 0, 4, 2), 4);
  ck_assert_int_eq(pp_warmup(PP_INTERLEAVED, 2, 1, 4, 2), 2);
  static const int want[16][3] = {{1, 0, 0}, {1, 1, 0}, {1, 0, 1}, {1, 1, 1}, {1, 2, 0},
                                  {0, 0, 1}, {1, 3, 0}, {0, 1, 1}, {1, 2, 1}, {0, 0, 0},
                                  {1, 3, 1}, {0, 1, 0}, {0, 2, 1}, {0, 3, 1}, {0, 2, 0},
                                  {0, 3, 0}};
  for (int i = 0; i < 16; i++)
    ck_assert_msg(o[i].fwd == want[i][0] && o[i].micro == want[i][1] &&
                  o[i].chunk == want[i][2], "op %d: got (%d, %d, %d)", i, o[i].fwd,
                  o[i].micro, o[i].chunk);
  /* the ring: rank 1 (last) chunk 0 sends to rank 0 chunk 1 */
  pp_peer x;
  ck_assert(pp_next(2, 2, 1, 0, &x) && x.rank == 0 && x.chunk == 1);
  ck_assert(!pp_next(2, 2, 1, 1, &x));
  ck_assert(pp_prev(2, 2, 0, 1, &x) && x.rank == 1 && x.chunk == 0);
  ck_assert(!pp_prev(2, 2, 0, 0, &x));
  /* refusals */
  ck_assert_ptr_nonnull(pp_order_check(PP_INTERLEAVED, 4, 6, 2));
  ck_assert_ptr_nonnull(pp_order_check(PP_1F1B, 2, 4, 2));
  ck_assert_ptr_null(pp_order_check(PP_INTERLEAVED, 4, 8, 2));
}
END_TEST

int main(void) {
  Suite *s = suite_create("pipeline_order");
  check_add_tcase(s, "orders", CHECK_TESTS(every_order_completes, interleaved_order_is_megatrons,
                                         bubble_is_the_papers),
                  NULL, NULL, 60);
  return check_run_suite(s, CK_FORK_GETENV);
}
