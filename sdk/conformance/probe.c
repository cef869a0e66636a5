/* conformance_probe.so — the instrument `loom conformance` puts next to the plugin under test.
 *
 * A parallel plugin with no role (AXIS_DP, like the SDK template), so it composes with any
 * strategy. Each instance does one of three jobs, chosen by its options:
 *   "record": DIR     after every step, append this rank's view to DIR/rank<W>.jsonl: the mesh
 *                     coordinates, the gradient norm the host computed (sqrt of grad_norm_sq's
 *                     value, read last in config order) and an FNV-1a hash of the flat parameter
 *                     buffer — the suite compares them across ranks (replicas must agree
 *                     bitwise) — one JSON object per line.
 *   "fail_hook": NAME, "fail_rank": R, "fail_step": S
 *                     world rank R returns an error from hook NAME at step S (forward/backward
 *                     hooks: on their first call in that step; create and setup: whatever S). Listed before the plugin under
 *                     test, the other ranks then enter that plugin's hook — and its collective —
 *                     while rank R is failing: the job must still end promptly, everywhere.
 *   "comm_selftest": true
 *                     in setup, run every host collective (which forwards to the job's comm
 *                     plugin) on the world and data-parallel communicators against results
 *                     computed here: even and uneven (reduce_scatter_v, all_gather_v, zero
 *                     counts), zero-length buffers, in-place all-gather, non-blocking requests
 *                     completed out of order, point-to-point in a ring. The first mismatch
 *                     fails setup with the collective, size, rank and element.
 *   "comm_p2p": true  in setup, the point-to-point semantics of comm_v1.h on the world
 *                     communicator with messages of 16 MB (beyond any eager or staging limit,
 *                     so a send completes only once its receive is matched): a ring posted
 *                     recv, recv, send, send and waited sends first; two tags between a pair
 *                     posted and waited in swapped order; pipeline 1F1B's non-blocking send
 *                     then blocking receive, in both directions along the chain of ranks. A
 *                     plugin that blocks in a non-blocking send, or orders messages by posting
 *                     instead of by tag, deadlocks or fails here; each case is logged as it
 *                     starts, so a hang names its case.
 * Values are small integers in fp32, so every reduction is exact whatever the order. */
#include <loom/loom.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Slices of the flat gradient hashed for the replicas check (buffer_hash). */
#define PROBE_PARTS 16

typedef struct probe {
  const loom_host_api_v1 *api;
  loom_host *host;
  const char *record_dir; /* NULL: not recording */
  const char *fail_hook;  /* NULL: no fault */
  int64_t fail_rank, fail_step;
  int selftest, corrupt, p2p;
  int step, fired;
  double grad_norm;
  uint64_t grad_parts[PROBE_PARTS]; /* the synchronised gradient's slice hashes (record) */
  size_t numel;                     /* the flat buffers' elements, for the record */
} probe;

/* ---------------------------------------------------------------- fault injection */

/* LOOM_OK, or the injected error when this is the configured hook, rank and step. */
static int maybe_fail(probe *p, const char *hook) {
  if (!p->fail_hook || p->fired || strcmp(hook, p->fail_hook) != 0) return LOOM_OK;
  int before_steps = !strcmp(hook, "create") || !strcmp(hook, "setup"); /* no step yet */
  if (p->api->rank(p->host, LOOM_AXIS_WORLD) != p->fail_rank ||
      (!before_steps && p->step != p->fail_step))
    return LOOM_OK;
  p->fired = 1;
  p->api->set_error(p->host, "conformance fault injected in %s at step %d", hook, p->step);
  return LOOM_REMOTE;
}

/* ---------------------------------------------------------------- comm self-test */

typedef struct st {
  probe *p;
  const loom_device_v1 *dev;
  void *dctx;
  loom_comm *c;
  const char *axis;
  int rank, n, checks;
  void *devmem[8], *hostmem[8]; /* this test's buffers, released by release() whatever happened */
  int n_dev, n_host;
} st;

/* n floats of device memory (at least one), owned by the current test. */
static float *dev_alloc(st *s, size_t n) {
  float *p = s->p->api->alloc(s->p->host, (n ? n : 1) * sizeof(float), LOOM_MEM_COMM);
  if (p && s->n_dev < 8) s->devmem[s->n_dev++] = p;
  return p;
}

/* n floats of host memory (at least one), owned by the current test. */
static float *host_alloc(st *s, size_t n) {
  float *p = malloc((n ? n : 1) * sizeof(float));
  if (p && s->n_host < 8) s->hostmem[s->n_host++] = p;
  return p;
}

static void release(st *s) {
  for (int i = 0; i < s->n_dev; i++) s->p->api->free(s->p->host, s->devmem[i]);
  for (int i = 0; i < s->n_host; i++) free(s->hostmem[i]);
  s->n_dev = s->n_host = 0;
}

/* Copy n device floats to a host array and compare with want; the first mismatch is the error. */
static int expect(st *s, const char *what, size_t size, const float *dbuf, const float *want,
                  size_t n) {
  float *got = malloc((n ? n : 1) * sizeof *got);
  if (!got) {
    s->p->api->set_error(s->p->host, "comm self-test: out of host memory");
    return LOOM_NOMEM;
  }
  if (n) s->dev->to_host(s->dctx, got, dbuf, n * sizeof(float));
  /* "comm_selftest_corrupt" (the suite's own test): one wrong element in the first non-empty
   * result, as a broken comm plugin would deliver it, to prove the comparison catches it */
  if (s->p->corrupt == 1 && n > 0) {
    got[n / 2] += 1.0f;
    s->p->corrupt = 2;
  }
  for (size_t i = 0; i < n; i++) {
    if (got[i] != want[i]) {
      s->p->api->set_error(s->p->host,
                           "comm self-test: %s (%zu elements, %s communicator of %d ranks) on "
                           "rank %d: element %zu is %g, expected %g",
                           what, size, s->axis, s->n, s->rank, i, got[i], want[i]);
      free(got);
      return LOOM_INVALID_USAGE;
    }
  }
  free(got);
  s->checks++;
  return LOOM_OK;
}

static int failed_call(st *s, const char *what, size_t size, int rc) {
  s->p->api->set_error(s->p->host, "comm self-test: %s (%zu elements, %s communicator) failed "
                       "on rank %d with status %d", what, size, s->axis, s->rank, rc);
  return rc;
}

/* Element i of rank r's input: small integers, exact under any summation order. */
static float val(int r, size_t i) { return (float)((r + 1) * 3 + (int)(i % 97)); }

/* all_reduce SUM/MAX/MIN of count elements; blocking, or two requests waited in reverse. */
static int t_all_reduce(st *s, size_t count) {
  const loom_host_api_v1 *a = s->p->api;
  static const char *names[] = {"all_reduce(sum)", "all_reduce(max)", "all_reduce(min)"};
  float *h = host_alloc(s, count), *w = host_alloc(s, count);
  float *d = dev_alloc(s, count), *d2 = dev_alloc(s, count);
  int rc = (h && w && d && d2) ? LOOM_OK : LOOM_NOMEM;
  for (int op = 0; op < 3 && rc == LOOM_OK; op++) {
    for (size_t i = 0; i < count; i++) h[i] = val(s->rank, i);
    if (count) s->dev->from_host(s->dctx, d, h, count * sizeof(float));
    rc = a->all_reduce(s->p->host, s->c, d, count, LOOM_F32, (loom_red_op)op, NULL);
    if (rc != LOOM_OK) return failed_call(s, names[op], count, rc);
    for (size_t i = 0; i < count; i++) {
      float sum = 0, mx = val(0, i), mn = val(0, i);
      for (int r = 0; r < s->n; r++) {
        sum += val(r, i);
        mx = fmaxf(mx, val(r, i));
        mn = fminf(mn, val(r, i));
      }
      w[i] = op == 0 ? sum : op == 1 ? mx : mn;
    }
    rc = expect(s, names[op], count, d, w, count);
  }
  if (rc == LOOM_OK) { /* non-blocking: start two, complete them in reverse order */
    loom_request *r1 = NULL, *r2 = NULL;
    for (size_t i = 0; i < count; i++) h[i] = val(s->rank, i);
    if (count) s->dev->from_host(s->dctx, d, h, count * sizeof(float));
    if (count) s->dev->from_host(s->dctx, d2, h, count * sizeof(float));
    rc = a->all_reduce(s->p->host, s->c, d, count, LOOM_F32, LOOM_OP_SUM, &r1);
    if (rc == LOOM_OK) rc = a->all_reduce(s->p->host, s->c, d2, count, LOOM_F32, LOOM_OP_MAX, &r2);
    if (rc != LOOM_OK) return failed_call(s, "all_reduce (non-blocking start)", count, rc);
    int done = 0;
    rc = a->test(s->p->host, r2, &done);
    if (rc == LOOM_OK) rc = a->wait(s->p->host, r2);
    if (rc == LOOM_OK) rc = a->wait(s->p->host, r1);
    if (rc != LOOM_OK) return failed_call(s, "test/wait of two all_reduces in reverse order", count, rc);
    for (size_t i = 0; i < count; i++) {
      float sum = 0;
      for (int r = 0; r < s->n; r++) sum += val(r, i);
      w[i] = sum;
    }
    rc = expect(s, "non-blocking all_reduce(sum) waited after a later one", count, d, w, count);
    for (size_t i = 0; i < count && rc == LOOM_OK; i++) w[i] = val(s->n - 1, i);
    if (rc == LOOM_OK) rc = expect(s, "non-blocking all_reduce(max) waited first", count, d2, w, count);
  }
  if (rc == LOOM_NOMEM) a->set_error(s->p->host, "comm self-test: out of memory");
  return rc;
}

/* reduce_scatter (even blocks of `block`) and reduce_scatter_v with counts[r] (zeros allowed). */
static int t_reduce_scatter(st *s, const size_t *counts, int uneven) {
  const loom_host_api_v1 *a = s->p->api;
  size_t total = 0, off = 0, mine = counts[s->rank];
  for (int r = 0; r < s->n; r++) {
    if (r < s->rank) off += counts[r];
    total += counts[r];
  }
  float *h = host_alloc(s, total), *w = host_alloc(s, mine);
  float *ds = dev_alloc(s, total), *dr = dev_alloc(s, mine);
  if (!h || !w || !ds || !dr) {
    a->set_error(s->p->host, "comm self-test: out of memory");
    return LOOM_NOMEM;
  }
  for (size_t i = 0; i < total; i++) h[i] = val(s->rank, i);
  if (total) s->dev->from_host(s->dctx, ds, h, total * sizeof(float));
  const char *what = uneven ? "reduce_scatter_v(sum)" : "reduce_scatter(sum)";
  int rc = uneven ? a->reduce_scatter_v(s->p->host, s->c, ds, dr, counts, LOOM_F32, LOOM_OP_SUM, NULL)
                  : a->reduce_scatter(s->p->host, s->c, ds, dr, mine, LOOM_F32, LOOM_OP_SUM, NULL);
  if (rc != LOOM_OK) return failed_call(s, what, total, rc);
  for (size_t i = 0; i < mine; i++) {
    float sum = 0;
    for (int r = 0; r < s->n; r++) sum += val(r, off + i);
    w[i] = sum;
  }
  rc = expect(s, what, total, dr, w, mine);
  return rc;
}

/* all_gather / all_gather_v, out of place and in place (send = this rank's block inside recv). */
static int t_all_gather(st *s, const size_t *counts, int uneven, int in_place) {
  const loom_host_api_v1 *a = s->p->api;
  size_t total = 0, off = 0, mine = counts[s->rank];
  for (int r = 0; r < s->n; r++) {
    if (r < s->rank) off += counts[r];
    total += counts[r];
  }
  float *h = host_alloc(s, total), *w = host_alloc(s, total);
  float *ds = dev_alloc(s, mine), *dr = dev_alloc(s, total);
  if (!h || !w || !ds || !dr) {
    a->set_error(s->p->host, "comm self-test: out of memory");
    return LOOM_NOMEM;
  }
  for (size_t i = 0; i < mine; i++) h[i] = val(s->rank, i);
  const float *send = ds;
  if (in_place) {
    if (mine) s->dev->from_host(s->dctx, dr + off, h, mine * sizeof(float));
    send = dr + off;
  } else if (mine) {
    s->dev->from_host(s->dctx, ds, h, mine * sizeof(float));
  }
  char what[64];
  snprintf(what, sizeof what, "%s%s", uneven ? "all_gather_v" : "all_gather",
           in_place ? " (in place)" : "");
  int rc = uneven ? a->all_gather_v(s->p->host, s->c, send, dr, counts, LOOM_F32, NULL)
                  : a->all_gather(s->p->host, s->c, send, dr, mine, LOOM_F32, NULL);
  if (rc != LOOM_OK) return failed_call(s, what, total, rc);
  size_t k = 0;
  for (int r = 0; r < s->n; r++)
    for (size_t i = 0; i < counts[r]; i++) w[k++] = val(r, i);
  rc = expect(s, what, total, dr, w, total);
  return rc;
}

/* broadcast from every root in turn. */
static int t_broadcast(st *s, size_t count) {
  const loom_host_api_v1 *a = s->p->api;
  float *h = host_alloc(s, count), *w = host_alloc(s, count);
  float *d = dev_alloc(s, count);
  int rc = (h && w && d) ? LOOM_OK : LOOM_NOMEM;
  for (int root = 0; root < s->n && rc == LOOM_OK; root++) {
    for (size_t i = 0; i < count; i++) h[i] = val(s->rank, i);
    if (count) s->dev->from_host(s->dctx, d, h, count * sizeof(float));
    rc = a->broadcast(s->p->host, s->c, d, count, LOOM_F32, root, NULL);
    if (rc != LOOM_OK) return failed_call(s, "broadcast", count, rc);
    for (size_t i = 0; i < count; i++) w[i] = val(root, i);
    rc = expect(s, "broadcast", count, d, w, count);
  }
  if (rc == LOOM_NOMEM) a->set_error(s->p->host, "comm self-test: out of memory");
  return rc;
}

/* A ring of non-blocking send/recv: receive from the left, send to the right, the receive
 * posted first and waited last; two tags in flight, matched by tag not by order. */
static int t_ring(st *s, size_t count) {
  const loom_host_api_v1 *a = s->p->api;
  if (s->n < 2) return LOOM_OK;
  int right = (s->rank + 1) % s->n, left = (s->rank + s->n - 1) % s->n;
  float *h = host_alloc(s, count), *w = host_alloc(s, count);
  float *sa = dev_alloc(s, count), *sb = dev_alloc(s, count);
  float *ra = dev_alloc(s, count), *rb = dev_alloc(s, count);
  if (!h || !w || !sa || !sb || !ra || !rb) {
    a->set_error(s->p->host, "comm self-test: out of memory");
    return LOOM_NOMEM;
  }
  for (size_t i = 0; i < count; i++) h[i] = val(s->rank, i);
  if (count) s->dev->from_host(s->dctx, sa, h, count * sizeof(float));
  for (size_t i = 0; i < count; i++) h[i] = -val(s->rank, i);
  if (count) s->dev->from_host(s->dctx, sb, h, count * sizeof(float));
  loom_request *q[4] = {0};
  int rc = a->recv(s->p->host, s->c, rb, count, LOOM_F32, left, 8, &q[0]);
  if (rc == LOOM_OK) rc = a->recv(s->p->host, s->c, ra, count, LOOM_F32, left, 7, &q[1]);
  if (rc == LOOM_OK) rc = a->send(s->p->host, s->c, sa, count, LOOM_F32, right, 7, &q[2]);
  if (rc == LOOM_OK) rc = a->send(s->p->host, s->c, sb, count, LOOM_F32, right, 8, &q[3]);
  for (int i = 3; i >= 0 && rc == LOOM_OK; i--) rc = a->wait(s->p->host, q[i]);
  if (rc != LOOM_OK) return failed_call(s, "send/recv ring (non-blocking, two tags)", count, rc);
  for (size_t i = 0; i < count; i++) w[i] = val(left, i);
  rc = expect(s, "recv of tag 7 from the left neighbour", count, ra, w, count);
  for (size_t i = 0; i < count && rc == LOOM_OK; i++) w[i] = -val(left, i);
  if (rc == LOOM_OK) rc = expect(s, "recv of tag 8 from the left neighbour", count, rb, w, count);
  return rc;
}

/* ---------------------------------------------------------------- point to point */

/* 4 Mi floats: 16 MB per message, far beyond Open MPI's eager limits and NCCL's buffers */
#define P2P_LARGE ((size_t)4 << 20)

/* Post (req non-NULL) or run one send or receive of n floats; a failure is the test's error. */
static int p2p_op(st *s, int send, float *buf, size_t n, int peer, int tag, loom_request **req,
                  const char *what) {
  const loom_host_api_v1 *a = s->p->api;
  int rc = send ? a->send(s->p->host, s->c, buf, n, LOOM_F32, peer, tag, req)
                : a->recv(s->p->host, s->c, buf, n, LOOM_F32, peer, tag, req);
  return rc == LOOM_OK ? rc : failed_call(s, what, n, rc);
}

/* Fill device buffer d with n values of sign * val(r, i + salt). */
static void p2p_fill(st *s, float *h, float *d, size_t n, int r, int salt, float sign) {
  for (size_t i = 0; i < n; i++) h[i] = sign * val(r, i + (size_t)salt);
  s->dev->from_host(s->dctx, d, h, n * sizeof(float));
}

/* Compare device buffer d with what p2p_fill(.., r, salt, sign) wrote on rank r. */
static int p2p_expect(st *s, const char *what, float *w, const float *d, size_t n, int r,
                      int salt, float sign) {
  for (size_t i = 0; i < n; i++) w[i] = sign * val(r, i + (size_t)salt);
  return expect(s, what, n, d, w, n);
}

static void p2p_case(st *s, const char *name) {
  if (s->rank == 0)
    s->p->api->log(s->p->host, LOOM_LOG_INFO, "comm p2p: case %s (%d ranks, %zu MB messages)",
                   name, s->n, P2P_LARGE * sizeof(float) >> 20);
}

/* Ring: receive tags 8 then 7 from the left, send 7 then 8 to the right (of different sizes),
 * the sends waited first: every receive is posted before any send is waited, so the sends
 * can complete only if posting a receive does not wait for its message and a send's matching
 * is by tag, not by order. */
static int p2p_ring(st *s) {
  const size_t n7 = P2P_LARGE, n8 = P2P_LARGE - P2P_LARGE / 4;
  int right = (s->rank + 1) % s->n, left = (s->rank + s->n - 1) % s->n;
  float *h = host_alloc(s, n7), *w = host_alloc(s, n7);
  float *s7 = dev_alloc(s, n7), *s8 = dev_alloc(s, n8), *r7 = dev_alloc(s, n7),
        *r8 = dev_alloc(s, n8);
  if (!h || !w || !s7 || !s8 || !r7 || !r8) return LOOM_NOMEM;
  p2p_case(s, "ring recv, recv, send, send");
  p2p_fill(s, h, s7, n7, s->rank, 7, 1.0f);
  p2p_fill(s, h, s8, n8, s->rank, 8, -1.0f);
  loom_request *q[4] = {0};
  const char *what = "ring: recv tag 8, recv tag 7, send tag 7, send tag 8 (non-blocking)";
  int rc = p2p_op(s, 0, r8, n8, left, 8, &q[0], what);
  if (!rc) rc = p2p_op(s, 0, r7, n7, left, 7, &q[1], what);
  if (!rc) rc = p2p_op(s, 1, s7, n7, right, 7, &q[2], what);
  if (!rc) rc = p2p_op(s, 1, s8, n8, right, 8, &q[3], what);
  static const int order[4] = {2, 3, 0, 1}; /* the sends first */
  for (int i = 0; i < 4 && !rc; i++) {
    rc = s->p->api->wait(s->p->host, q[order[i]]);
    q[order[i]] = NULL;
    if (rc) return failed_call(s, "ring: wait (sends first)", n7, rc);
  }
  if (!rc) rc = p2p_expect(s, "ring: recv of tag 7 from the left", w, r7, n7, left, 7, 1.0f);
  if (!rc) rc = p2p_expect(s, "ring: recv of tag 8 from the left", w, r8, n8, left, 8, -1.0f);
  return rc;
}

/* Pairs (0, 1), (2, 3), ...: each side sends tag 1 (large) then tag 2 (half), posts its
 * receives as tag 2 then tag 1 and waits them in that order before its sends: the sends are
 * in flight together in both directions, and the receive of tag 2 must not take tag 1. */
static int p2p_tags(st *s) {
  const size_t n1 = P2P_LARGE, n2 = P2P_LARGE / 2;
  int peer = s->rank ^ 1;
  if (peer >= s->n) return LOOM_OK; /* the odd rank out */
  float *h = host_alloc(s, n1), *w = host_alloc(s, n1);
  float *s1 = dev_alloc(s, n1), *s2 = dev_alloc(s, n2), *r1 = dev_alloc(s, n1),
        *r2 = dev_alloc(s, n2);
  if (!h || !w || !s1 || !s2 || !r1 || !r2) return LOOM_NOMEM;
  p2p_case(s, "two tags between a pair, swapped");
  p2p_fill(s, h, s1, n1, s->rank, 1, 1.0f);
  p2p_fill(s, h, s2, n2, s->rank, 2, -1.0f);
  loom_request *q[4] = {0};
  const char *what = "pair: send tag 1, send tag 2, recv tag 2, recv tag 1 (non-blocking)";
  int rc = p2p_op(s, 1, s1, n1, peer, 1, &q[0], what);
  if (!rc) rc = p2p_op(s, 1, s2, n2, peer, 2, &q[1], what);
  if (!rc) rc = p2p_op(s, 0, r2, n2, peer, 2, &q[2], what);
  if (!rc) rc = p2p_op(s, 0, r1, n1, peer, 1, &q[3], what);
  static const int order[4] = {2, 3, 0, 1}; /* the receives first, tag 2 before tag 1 */
  for (int i = 0; i < 4 && !rc; i++) {
    rc = s->p->api->wait(s->p->host, q[order[i]]);
    q[order[i]] = NULL;
    if (rc) return failed_call(s, "pair: wait (receives first)", n1, rc);
  }
  if (!rc) rc = p2p_expect(s, "pair: recv of tag 1", w, r1, n1, peer, 1, 1.0f);
  if (!rc) rc = p2p_expect(s, "pair: recv of tag 2", w, r2, n2, peer, 2, -1.0f);
  return rc;
}

/* 1F1B along the chain 0 - 1 - ... - n-1, two micro-batches: each rank starts its activation
 * send to the right (tag 2i) and its gradient send to the left (tag 2i+1), then receives,
 * blocking, the gradient from the right and the activation from the left, then completes its
 * sends (pipeline.so's order). Every rank sends before it receives: a send that waits for its
 * receiver deadlocks here once the message outgrows the transport's buffering. */
static int p2p_1f1b(st *s) {
  const size_t n = P2P_LARGE;
  int right = s->rank + 1 < s->n ? s->rank + 1 : -1, left = s->rank - 1;
  float *h = host_alloc(s, n), *w = host_alloc(s, n);
  float *act = dev_alloc(s, n), *grad = dev_alloc(s, n), *ract = dev_alloc(s, n),
        *rgrad = dev_alloc(s, n);
  if (!h || !w || !act || !grad || !ract || !rgrad) return LOOM_NOMEM;
  p2p_case(s, "1F1B: non-blocking send, then blocking receive, both directions");
  const char *what = "1F1B: non-blocking send of activation / gradient, blocking receive";
  int rc = LOOM_OK;
  for (int i = 0; i < 2 && !rc; i++) {
    loom_request *qa = NULL, *qg = NULL;
    p2p_fill(s, h, act, n, s->rank, 2 * i, 1.0f);
    p2p_fill(s, h, grad, n, s->rank, 2 * i + 1, -1.0f);
    if (right >= 0) rc = p2p_op(s, 1, act, n, right, 2 * i, &qa, what);
    if (!rc && left >= 0) rc = p2p_op(s, 1, grad, n, left, 2 * i + 1, &qg, what);
    if (!rc && right >= 0) rc = p2p_op(s, 0, rgrad, n, right, 2 * i + 1, NULL, what);
    if (!rc && left >= 0) rc = p2p_op(s, 0, ract, n, left, 2 * i, NULL, what);
    /* both sends completed (released) even after a failed receive */
    int wa = qa ? s->p->api->wait(s->p->host, qa) : LOOM_OK;
    int wg = qg ? s->p->api->wait(s->p->host, qg) : LOOM_OK;
    if (!rc && (wa || wg)) rc = failed_call(s, "1F1B: wait of a send", n, wa ? wa : wg);
    if (!rc && right >= 0)
      rc = p2p_expect(s, "1F1B: gradient from the right", w, rgrad, n, right, 2 * i + 1, -1.0f);
    if (!rc && left >= 0)
      rc = p2p_expect(s, "1F1B: activation from the left", w, ract, n, left, 2 * i, 1.0f);
  }
  return rc;
}

/* The point-to-point cases on the world communicator (the pipeline's axis is one of its
 * splits; the plugin's send/recv do not depend on which communicator). */
static int p2p_on_world(probe *p) {
  st s = {.p = p, .axis = "world"};
  s.dev = p->api->device(p->host, &s.dctx);
  s.c = p->api->comm(p->host, LOOM_AXIS_WORLD);
  s.rank = p->api->rank(p->host, LOOM_AXIS_WORLD);
  s.n = p->api->size(p->host, LOOM_AXIS_WORLD);
  if (s.n < 2) return LOOM_OK;
  int (*cases[3])(st *) = {p2p_ring, p2p_tags, p2p_1f1b};
  int rc = LOOM_OK;
  for (int i = 0; i < 3 && rc == LOOM_OK; i++) {
    rc = cases[i](&s);
    /* after a failure, operations may still be outstanding on these buffers (a wait failed,
     * the others were never waited): leave them to the job's end rather than free memory the
     * plugin may still write */
    if (rc != LOOM_OK) s.n_dev = s.n_host = 0;
    release(&s);
    if (rc == LOOM_NOMEM) p->api->set_error(p->host, "comm p2p: out of memory");
  }
  if (rc == LOOM_OK && (rc = p->api->barrier(p->host, s.c)) != LOOM_OK)
    return failed_call(&s, "barrier", 0, rc);
  if (rc == LOOM_OK)
    p->api->log(p->host, LOOM_LOG_INFO, "comm p2p: %d checks passed on the world communicator "
                "(%d ranks)", s.checks, s.n);
  return rc;
}

/* The whole battery on one communicator; each test's buffers are released after it, passed
 * or failed. */
static int selftest_on(probe *p, loom_axis axis, const char *axis_name) {
  st s = {.p = p, .axis = axis_name};
  s.dev = p->api->device(p->host, &s.dctx);
  s.c = p->api->comm(p->host, axis);
  s.rank = p->api->rank(p->host, axis);
  s.n = p->api->size(p->host, axis);
  size_t even[64], uneven[64], zeros[64];
  if (s.n > 64) return LOOM_OK; /* defensive: the test vectors are sized for small worlds */
  for (int r = 0; r < s.n; r++) {
    even[r] = 1001;
    uneven[r] = (r == 1) ? 0 : (size_t)(r * 37 + 5); /* rank 1 contributes nothing */
    zeros[r] = 0;
  }
  static const size_t sizes[] = {0, 1, 1000, 100003};
  int rc = LOOM_OK;
#define RUN(call)        \
  if (rc == LOOM_OK) {   \
    rc = (call);         \
    release(&s);         \
  }
  for (int i = 0; i < 4; i++) RUN(t_all_reduce(&s, sizes[i]));
  for (int i = 0; i < 4; i++) RUN(t_broadcast(&s, sizes[i]));
  for (int i = 0; i < 4; i++) RUN(t_ring(&s, sizes[i]));
  const size_t *vecs[3] = {even, uneven, zeros};
  for (int v = 0; v < 3; v++) {
    if (v == 0) RUN(t_reduce_scatter(&s, vecs[v], 0));
    RUN(t_reduce_scatter(&s, vecs[v], 1));
    for (int ip = 0; ip < 2; ip++) {
      if (v == 0) RUN(t_all_gather(&s, vecs[v], 0, ip));
      RUN(t_all_gather(&s, vecs[v], 1, ip));
    }
  }
#undef RUN
  if (rc == LOOM_OK && (rc = p->api->barrier(p->host, s.c)) != LOOM_OK)
    return failed_call(&s, "barrier", 0, rc);
  if (rc == LOOM_OK)
    p->api->log(p->host, LOOM_LOG_INFO, "comm self-test: %d checks passed on the %s "
                "communicator (%d ranks)", s.checks, axis_name, s.n);
  return rc;
}

/* ---------------------------------------------------------------- the plugin */

static int probe_create(const loom_host_api_v1 *api, loom_host *host, const loom_options *opts,
                        void **ctx) {
  static const char *const keys[] = {"record", "fail_hook", "fail_rank", "fail_step",
                                     "comm_selftest", "comm_selftest_corrupt", "comm_p2p",
                                     NULL};
  int rc = api->opt_check_keys(host, opts, keys);
  if (rc != LOOM_OK) return rc;
  probe *p = calloc(1, sizeof *p);
  if (!p) {
    api->set_error(host, "out of memory");
    return LOOM_NOMEM;
  }
  p->api = api;
  p->host = host;
  rc = api->opt_string(host, opts, "record", NULL, &p->record_dir);
  if (rc == LOOM_OK) rc = api->opt_string(host, opts, "fail_hook", NULL, &p->fail_hook);
  if (rc == LOOM_OK) rc = api->opt_int(host, opts, "fail_rank", 0, 0, 1 << 20, &p->fail_rank);
  if (rc == LOOM_OK) rc = api->opt_int(host, opts, "fail_step", 1, 1, 1 << 30, &p->fail_step);
  if (rc == LOOM_OK) rc = api->opt_bool(host, opts, "comm_selftest", 0, &p->selftest);
  if (rc == LOOM_OK) rc = api->opt_bool(host, opts, "comm_selftest_corrupt", 0, &p->corrupt);
  if (rc == LOOM_OK) rc = api->opt_bool(host, opts, "comm_p2p", 0, &p->p2p);
  if (rc != LOOM_OK) {
    free(p);
    return rc;
  }
  *ctx = p;
  return maybe_fail(p, "create");
}

static void probe_destroy(void *ctx) { free(ctx); }

static int probe_setup(void *ctx) {
  probe *p = ctx;
  int rc = maybe_fail(p, "setup");
  if (rc == LOOM_OK && p->selftest) rc = selftest_on(p, LOOM_AXIS_WORLD, "world");
  if (rc == LOOM_OK && p->selftest && p->api->size(p->host, LOOM_AXIS_DP) > 1)
    rc = selftest_on(p, LOOM_AXIS_DP, "data-parallel");
  if (rc == LOOM_OK && p->p2p) rc = p2p_on_world(p);
  return rc;
}

static int probe_begin_step(void *ctx, int step) {
  probe *p = ctx;
  p->step = step;
  return maybe_fail(p, "begin_step");
}
static int probe_begin_micro(void *ctx, int micro, int n_micro) {
  (void)micro, (void)n_micro;
  return maybe_fail(ctx, "begin_micro");
}
static int probe_pre_forward(void *ctx, int unit) {
  (void)unit;
  return maybe_fail(ctx, "pre_forward");
}
static int probe_post_forward(void *ctx, int unit) {
  (void)unit;
  return maybe_fail(ctx, "post_forward");
}
static int probe_pre_backward(void *ctx, int unit) {
  (void)unit;
  return maybe_fail(ctx, "pre_backward");
}
static int probe_post_backward(void *ctx, int unit) {
  (void)unit;
  return maybe_fail(ctx, "post_backward");
}
static int probe_end_backward(void *ctx, int micro, int n_micro) {
  (void)micro, (void)n_micro;
  return maybe_fail(ctx, "end_backward");
}
/* The flat parameter buffer is hashed whole, and the synchronised gradient (as the norm hook
 * sees it, before clipping: clipping by a norm that differs across ranks would change every
 * parameter) in PROBE_PARTS equal element slices, so the replicas check can tell a sync that
 * missed the replicas (every slice differs: wrong axis or communicator) from one that reduced
 * part of the buffer (a wrong count: the first slices agree, the rest differ) and name the
 * elements, and both from replicas whose gradients agree but whose parameters drift apart. */

static uint64_t fnv1a(const unsigned char *b, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

/* FNV-1a of the whole of buf (numel fp32 of device memory) into *whole and of slice k ([k
 * numel / PARTS, (k + 1) numel / PARTS) elements) into part[k] (part may be NULL); all 0 when
 * buf is NULL (a plugin owns that storage). fp32 always: the probe does not set
 * LOOM_PAR_STORAGE_16BIT, so while it is loaded the host keeps fp32 flat buffers. */
static void buffer_hash(probe *p, const float *buf, size_t numel, uint64_t *whole,
                        uint64_t *part) {
  *whole = 0;
  for (int k = 0; part && k < PROBE_PARTS; k++) part[k] = 0;
  if (!buf || numel == 0) return;
  void *dctx;
  const loom_device_v1 *dev = p->api->device(p->host, &dctx);
  unsigned char *host = malloc(numel * sizeof(float));
  if (!host) return;
  dev->to_host(dctx, host, buf, numel * sizeof(float));
  *whole = fnv1a(host, numel * sizeof(float));
  for (int k = 0; part && k < PROBE_PARTS; k++) {
    size_t a = numel * (size_t)k / PROBE_PARTS, b = numel * (size_t)(k + 1) / PROBE_PARTS;
    part[k] = fnv1a(host + a * sizeof(float), (b - a) * sizeof(float));
  }
  free(host);
}

static int probe_grad_norm_sq(void *ctx, double *sq) {
  probe *p = ctx;
  p->grad_norm = sqrt(*sq);
  if (p->record_dir) { /* the gradient as synchronised, for the replicas check */
    const loom_model_v1 *m = p->api->model(p->host);
    uint64_t whole;
    buffer_hash(p, m ? m->grads : NULL, m ? m->numel : 0, &whole, p->grad_parts);
    p->numel = m ? m->numel : 0;
  }
  return maybe_fail(p, "grad_norm_sq");
}

static int probe_end_step(void *ctx, int step) {
  probe *p = ctx;
  int rc = maybe_fail(p, "end_step");
  if (rc != LOOM_OK || !p->record_dir) return rc;
  const loom_host_api_v1 *a = p->api;
  int w = a->rank(p->host, LOOM_AXIS_WORLD);
  char path[4096];
  snprintf(path, sizeof path, "%s/rank%d.jsonl", p->record_dir, w);
  FILE *f = fopen(path, "a");
  if (!f) {
    a->set_error(p->host, "record: cannot open %s for appending", path);
    return LOOM_IO;
  }
  char norm[40] = "null"; /* a skipped (overflowed) step has no finite norm: JSON null */
  if (isfinite(p->grad_norm)) snprintf(norm, sizeof norm, "%.17g", p->grad_norm);
  const loom_model_v1 *m = a->model(p->host);
  uint64_t whole;
  buffer_hash(p, m ? m->params : NULL, m ? m->numel : 0, &whole, NULL);
  fprintf(f, "{\"step\": %d, \"rank\": %d, \"dp\": %d, \"tp\": %d, \"pp\": %d, "
          "\"grad_norm\": %s, \"params_fnv\": \"%016llx\", \"numel\": %zu, "
          "\"grads_fnv_parts\": [", step, w, a->rank(p->host, LOOM_AXIS_DP),
          a->rank(p->host, LOOM_AXIS_TP), a->rank(p->host, LOOM_AXIS_PP), norm,
          (unsigned long long)whole, p->numel);
  for (int k = 0; k < PROBE_PARTS; k++)
    fprintf(f, "%s\"%016llx\"", k ? ", " : "", (unsigned long long)p->grad_parts[k]);
  fprintf(f, "]}\n");
  if (fclose(f) != 0) {
    a->set_error(p->host, "record: cannot write %s", path);
    return LOOM_IO;
  }
  return LOOM_OK;
}

LOOM_EXPORT const loom_parallel_v1 loom_plugin_v1 = {
  .hdr = LOOM_PLUGIN_HEADER_INIT(LOOM_KIND_PARALLEL, "conformance_probe", "1.0.0",
                                 "loom conformance: records per-rank state, injects faults, "
                                 "tests the comm plugin's collectives",
                                 LOOM_PAR_CAP_AXIS_DP, loom_parallel_v1),
  .create = probe_create,
  .destroy = probe_destroy,
  .setup = probe_setup,
  .begin_step = probe_begin_step,
  .begin_micro = probe_begin_micro,
  .pre_forward = probe_pre_forward,
  .post_forward = probe_post_forward,
  .pre_backward = probe_pre_backward,
  .post_backward = probe_post_backward,
  .end_backward = probe_end_backward,
  .grad_norm_sq = probe_grad_norm_sq,
  .end_step = probe_end_step,
};
