/* loom's own sum collectives (schedule, association and progress: mpi_owner.h).
 *
 * One owner_op per collective (all_gather: the gather phase alone). Its messages, all MPI_BYTE
 * on comm->p2p:
 *   reduce:  rs_send  my copy of chunk k's segments to owner k (all posted at the start);
 *            slots    OWNER_SLOTS receives of the segments of my chunk, in the order they are
 *                     added: segment by segment, contributors in rank order
 *   gather:  ag_send  my reduced chunk to every other rank in units of OWNER_GATHER_SEGS
 *                     segments, each posted once reduced (all_gather: the block, at once);
 *            ag_recv  owner k's units into my buffer (all_reduce: posted once my rs_send of the
 *                     same bytes completed, since the buffer is in place)
 * Reduce and gather messages have their own tags (2 per collective: comm->seq), so neither
 * matches the other; within a tag MPI's non-overtaking order pairs segment s with segment s. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_owner.h"

/* Receive slots of the reduce phase: one being added, the next ones arriving. */
#define OWNER_SLOTS 3
/* all_reduce's gather moves units of this many reduce segments (4 MiB by default): each message
 * costs a handshake and a system call, and the gather has no addition to keep in cache. */
#define OWNER_GATHER_SEGS 8
/* all_gather alone: one message per block, up to MPI's int count of bytes. */
#define OWNER_GATHER_BYTES (1u << 30)

struct owner_op {
  owner_op *next; /* in mpi_ctx.active while incomplete */
  MPI_Comm comm;
  int n, me, tag_rs, tag_ag;
  int reduce;       /* 1: reduce phase (all_reduce, reduce_scatter) */
  loom_dtype dt;
  size_t esz, seg; /* element bytes; elements per segment */
  size_t gsegs;     /* gather unit: this many segments (ag_* requests at each unit's first) */
  const char *send; /* reduce: every rank's chunks, chunk k at off[k] */
  char *mine;       /* my reduced chunk */
  char *all;        /* gather: chunk k lands at off[k]; NULL: reduce_scatter (no gather) */
  size_t *cnt, *off, *nseg, *base; /* per rank: elements, offset, segments, request index */
  size_t total_seg;
  MPI_Request *rs_send, *ag_recv; /* [base[k] + s], k != me */
  MPI_Request *ag_send;           /* [k * nseg[me] + s], k != me */
  size_t *rs_done, *agr_posted, *agr_done, *ags_done; /* per peer: segments, in order */
  /* the reduction of my chunk: pieces p = (segment p / (n-1), the (p % (n-1))-th other rank) */
  MPI_Request slot_req[OWNER_SLOTS];
  char *slots, *acc; /* OWNER_SLOTS segments; one segment for partial sums (n >= 3) */
  size_t slot_bytes; /* a segment of my chunk, at most */
  size_t pieces, posted, freed, next_piece;
  size_t cur_s;         /* segment being reduced */
  int cur_r;            /* next rank whose value it adds */
  const char *partial;  /* the sum so far of segment cur_s (NULL: none yet) */
  size_t ready;         /* segments of my chunk reduced (their ag_send posted) */
  int done, err;
  char msg[256];
  /* a hierarchical all_reduce (mpi_hier.h): three phases, each an own collective `sub`
   * (reduce_scatter in the node, all_reduce across, all_gather in the node); in
   * mpi_ctx.hier_active while incomplete, advanced by mpi_owner_progress after the others */
  int hier, phase;
  owner_op *sub;
  loom_comm *hnode, *hcross;
  char *hbuf;
  unsigned long hseq[4]; /* the tag numbers of phases 1-3 on their communicators */
};

int mpi_owner_eligible(const mpi_ctx *c, loom_red_op op, loom_dtype dt) {
  return c->own && op == LOOM_OP_SUM && (dt == LOOM_F32 || dt == LOOM_BF16 || dt == LOOM_F16);
}

/* ---- bookkeeping ---- */

static size_t seg_len(const owner_op *o, int k, size_t s) {
  size_t left = o->cnt[k] - s * o->seg;
  return left < o->seg ? left : o->seg;
}
/* The end of the gather unit that starts at segment s of rank k's chunk (a segment index). */
static size_t unit_end(const owner_op *o, int k, size_t s) {
  return s + o->gsegs < o->nseg[k] ? s + o->gsegs : o->nseg[k];
}
/* Elements from segment s to segment e (exclusive) of rank k's chunk. */
static size_t span_len(const owner_op *o, int k, size_t s, size_t e) {
  size_t lo = s * o->seg, hi = e * o->seg < o->cnt[k] ? e * o->seg : o->cnt[k];
  return hi - lo;
}
static int piece_rank(const owner_op *o, size_t p) {
  int j = (int)(p % (size_t)(o->n - 1));
  return j < o->me ? j : j + 1;
}

/* Record the first failure of op: it is complete, with this error, from now on. Returns 0
 * (for advance_peer: not done). */
static int op_fail(owner_op *o, int mpi_err, const char *what) {
  if (o->err) return 0;
  char s[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  MPI_Error_string(mpi_err, s, &len);
  snprintf(o->msg, sizeof o->msg, "%s failed: %s", what, s);
  o->err = LOOM_REMOTE;
  o->done = 1;
  return 0;
}

static void free_requests(MPI_Request *r, size_t n, int cancel) {
  for (size_t i = 0; r && i < n; i++) {
    if (r[i] == MPI_REQUEST_NULL) continue;
    if (cancel) { /* a receive into memory about to be freed: it must not land */
      MPI_Cancel(&r[i]);
      MPI_Wait(&r[i], MPI_STATUS_IGNORE);
    } else { /* a send of the caller's buffer: let it finish on its own */
      MPI_Request_free(&r[i]);
    }
  }
}

static void op_free(owner_op *o) {
  if (!o) return;
  if (o->rs_send) { /* only a failed or abandoned collective has requests left */
    free_requests(o->rs_send, o->total_seg, 0);
    free_requests(o->ag_recv, o->total_seg, 1);
    free_requests(o->ag_send, (size_t)o->n * o->nseg[o->me], 0);
    free_requests(o->slot_req, OWNER_SLOTS, 1);
  }
  free(o->cnt);
  free(o->rs_send);
  free(o->rs_done);
  free(o->slots);
  free(o);
}

/* A new op over comm: counts per rank (NULL: `count` each), its arrays and buffers. Its tags
 * come from comm->seq, or from *seq where the caller reserved the number earlier (a phase of a
 * hierarchical all_reduce starts when the previous one completes, at a moment that differs
 * between ranks, so it cannot take the next number then). */
static owner_op *op_new(mpi_ctx *c, loom_comm *comm, const size_t *counts, size_t count,
                        loom_dtype dt, int reduce, size_t seg_bytes, size_t gather_segs,
                        const unsigned long *seq) {
  owner_op *o = calloc(1, sizeof *o);
  if (!o) return NULL;
  o->comm = comm->p2p;
  MPI_Comm_size(o->comm, &o->n);
  MPI_Comm_rank(o->comm, &o->me);
  size_t n = (size_t)o->n, tags = ((size_t)c->tag_ub + 1) / 2; /* tag pairs: 0 1, 2 3, ... */
  o->tag_rs = (int)((seq ? *seq : comm->seq++) % tags) * 2;
  o->tag_ag = o->tag_rs + 1;
  o->reduce = reduce;
  o->dt = dt;
  o->esz = loom_dtype_size(dt);
  o->seg = seg_bytes / o->esz;
  o->gsegs = gather_segs;
  for (int i = 0; i < OWNER_SLOTS; i++) o->slot_req[i] = MPI_REQUEST_NULL;
  o->cnt = calloc(5 * n + 1, sizeof(size_t));
  o->rs_done = calloc(4 * n, sizeof(size_t));
  if (!o->cnt || !o->rs_done) goto nomem;
  o->off = o->cnt + n;
  o->nseg = o->off + n;
  o->base = o->nseg + n; /* n + 1 */
  o->agr_posted = o->rs_done + n;
  o->agr_done = o->agr_posted + n;
  o->ags_done = o->agr_done + n;
  size_t at = 0;
  for (size_t k = 0; k < n; k++) {
    o->cnt[k] = counts ? counts[k] : count;
    o->off[k] = at;
    at += o->cnt[k];
    o->nseg[k] = (o->cnt[k] + o->seg - 1) / o->seg;
    o->base[k] = o->total_seg;
    o->total_seg += o->nseg[k];
  }
  o->base[n] = o->total_seg;
  size_t mine = o->nseg[o->me];
  /* rs_send, ag_recv: total_seg each; ag_send: n * mine */
  o->rs_send = malloc((2 * o->total_seg + n * mine + 1) * sizeof(MPI_Request));
  if (!o->rs_send) goto nomem;
  o->ag_recv = o->rs_send + o->total_seg;
  o->ag_send = o->ag_recv + o->total_seg;
  for (size_t i = 0; i < 2 * o->total_seg + n * mine; i++) o->rs_send[i] = MPI_REQUEST_NULL;
  if (reduce && mine) {
    size_t n_slots = OWNER_SLOTS + (o->n >= 3); /* a short chunk needs only its own length */
    o->slot_bytes = (o->cnt[o->me] < o->seg ? o->cnt[o->me] : o->seg) * o->esz;
    o->slots = malloc(n_slots * o->slot_bytes);
    if (!o->slots) goto nomem;
    if (o->n >= 3) o->acc = o->slots + OWNER_SLOTS * o->slot_bytes;
    o->pieces = mine * (n - 1);
  }
  return o;
nomem:
  c->api->set_error(c->host, "out of host memory for a collective of %zu ranks", n);
  op_free(o);
  return NULL;
}

/* ---- progress ---- */

/* Post the receives of the next pieces of my chunk into free slots. */
static void post_pieces(owner_op *o) {
  while (!o->err && o->posted < o->pieces && o->posted - o->freed < OWNER_SLOTS) {
    size_t p = o->posted, s = p / (size_t)(o->n - 1);
    int i = (int)(p % OWNER_SLOTS);
    int rc = MPI_Irecv(o->slots + (size_t)i * o->slot_bytes,
                       (int)(seg_len(o, o->me, s) * o->esz), MPI_BYTE, piece_rank(o, p),
                       o->tag_rs, o->comm, &o->slot_req[i]);
    if (rc != MPI_SUCCESS) {
      op_fail(o, rc, "MPI_Irecv");
      return;
    }
    o->posted++;
  }
}

/* Send the gather unit starting at segment s of my (reduced) chunk to rank k. */
static void unit_send(owner_op *o, int k, size_t s) {
  size_t len = span_len(o, o->me, s, unit_end(o, o->me, s));
  int rc = MPI_Isend(o->mine + s * o->seg * o->esz, (int)(len * o->esz), MPI_BYTE, k, o->tag_ag,
                     o->comm, &o->ag_send[(size_t)k * o->nseg[o->me] + s]);
  if (rc != MPI_SUCCESS) op_fail(o, rc, "MPI_Isend");
}

/* Segments of my chunk whose gather unit is complete (sent or being sent). */
static size_t units_ready(const owner_op *o) {
  size_t mine = o->nseg[o->me];
  return o->ready == mine ? mine : o->ready / o->gsegs * o->gsegs;
}

/* One more segment of my chunk is reduced: when it completes a gather unit, send that to every
 * other rank. */
static void segment_ready(owner_op *o) {
  size_t before = units_ready(o);
  o->ready++;
  for (int k = 0; k < o->n && o->all && !o->err && units_ready(o) > before; k++)
    if (k != o->me) unit_send(o, k, before);
}

/* Add the values of my chunk in rank order as they arrive (see the header's association). */
static void reduce_mine(owner_op *o) {
  size_t mine = o->nseg[o->me];
  while (!o->err && o->cur_s < mine) {
    post_pieces(o);
    size_t s = o->cur_s, len = seg_len(o, o->me, s), at = s * o->seg * o->esz;
    const char *x;
    if (o->cur_r == o->me) {
      x = o->send + o->off[o->me] * o->esz + at;
    } else {
      size_t p = o->next_piece;
      int i = (int)(p % OWNER_SLOTS), flag = 0;
      int rc = MPI_Test(&o->slot_req[i], &flag, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) {
        op_fail(o, rc, "MPI_Test");
        return;
      }
      if (!flag) return; /* not here yet */
      x = o->slots + (size_t)i * o->slot_bytes;
      o->next_piece++;
    }
    if (!o->partial) {
      o->partial = x; /* a received slot stays held until the next addition */
    } else {
      char *out = o->cur_r == o->n - 1 ? o->mine + at : o->acc;
      mpi_sum(o->dt, out, o->partial, x, len);
      o->partial = out;
      o->freed = o->next_piece; /* every slot read so far is summed in */
    }
    if (++o->cur_r == o->n) {
      if (o->partial != o->mine + at) memcpy(o->mine + at, o->partial, len * o->esz); /* n 1 */
      o->partial = NULL;
      o->cur_r = 0;
      o->cur_s++;
      segment_ready(o);
    }
  }
}

/* Advance one peer's sends and gather receives in segment order; 1 when all of them are done. */
static int advance_peer(owner_op *o, int k, int reduce) {
  size_t nk = o->nseg[k], mine = o->nseg[o->me], b = o->base[k];
  int rc, flag;
  while (reduce && o->rs_done[k] < nk) {
    rc = MPI_Test(&o->rs_send[b + o->rs_done[k]], &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return op_fail(o, rc, "MPI_Test");
    if (!flag) break;
    o->rs_done[k]++;
  }
  if (!o->all) return o->rs_done[k] == nk;
  while (o->agr_posted[k] < nk) {
    size_t s = o->agr_posted[k], e = unit_end(o, k, s);
    if (reduce && o->rs_done[k] < e) break; /* in place: only over bytes already sent */
    rc = MPI_Irecv(o->all + (o->off[k] + s * o->seg) * o->esz,
                   (int)(span_len(o, k, s, e) * o->esz), MPI_BYTE, k, o->tag_ag, o->comm,
                   &o->ag_recv[b + s]);
    if (rc != MPI_SUCCESS) return op_fail(o, rc, "MPI_Irecv");
    o->agr_posted[k] = e;
  }
  while (o->agr_done[k] < o->agr_posted[k]) {
    rc = MPI_Test(&o->ag_recv[b + o->agr_done[k]], &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return op_fail(o, rc, "MPI_Test");
    if (!flag) break;
    o->agr_done[k] = unit_end(o, k, o->agr_done[k]);
  }
  while (o->ags_done[k] < units_ready(o)) {
    rc = MPI_Test(&o->ag_send[(size_t)k * mine + o->ags_done[k]], &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return op_fail(o, rc, "MPI_Test");
    if (!flag) break;
    o->ags_done[k] = unit_end(o, o->me, o->ags_done[k]);
  }
  return (!reduce || o->rs_done[k] == nk) && o->agr_done[k] == nk && o->ags_done[k] == mine;
}

static void op_progress(owner_op *o) {
  int reduce = o->reduce;
  if (reduce) reduce_mine(o);
  int all_done = !reduce || o->cur_s == o->nseg[o->me];
  for (int k = 0; k < o->n && !o->err; k++)
    if (k != o->me && !advance_peer(o, k, reduce)) all_done = 0;
  if (all_done && !o->err) o->done = 1;
}

static void hier_progress(mpi_ctx *c, owner_op *o);

void mpi_owner_progress(mpi_ctx *c) {
  for (owner_op **at = &c->active; *at;) {
    owner_op *o = *at;
    if (!o->done) op_progress(o);
    if (o->done) *at = o->next; /* complete: only its request refers to it now */
    else at = &o->next;
  }
  /* after the loop above: a phase that completed starts the next one (onto c->active) */
  for (owner_op **at = &c->hier_active; *at;) {
    owner_op *o = *at;
    if (!o->done) hier_progress(c, o);
    if (o->done) *at = o->next;
    else at = &o->next;
  }
}

int mpi_owner_test(mpi_ctx *c, owner_op *o, int *done) {
  mpi_owner_progress(c);
  *done = o->done;
  if (o->err) c->api->set_error(c->host, "%s", o->msg);
  return o->err;
}

int mpi_owner_wait(mpi_ctx *c, owner_op *o) {
  while (!o->done) mpi_owner_progress(c);
  int rc = o->err;
  if (rc) c->api->set_error(c->host, "%s", o->msg);
  mpi_owner_abandon(c, o); /* still listed when it completed inside its own start */
  return rc;
}

void mpi_owner_abandon(mpi_ctx *c, owner_op *o) {
  for (owner_op **at = o->hier ? &c->hier_active : &c->active; *at; at = &(*at)->next)
    if (*at == o) {
      *at = o->next;
      break;
    }
  if (o->sub) mpi_owner_abandon(c, o->sub);
  op_free(o);
}

/* ---- starting ---- */

/* Post what can go at once (my copies of the other chunks) and list op as active. */
static void op_launch(mpi_ctx *c, owner_op *o) {
  for (int k = 0; k < o->n && !o->reduce && !o->err; k++) /* all_gather: my block at once */
    if (k != o->me)
      for (size_t s = 0; s < o->nseg[o->me] && !o->err; s = unit_end(o, o->me, s))
        unit_send(o, k, s);
  for (int k = 0; k < o->n && o->reduce; k++) {
    if (k == o->me) continue;
    for (size_t s = 0; s < o->nseg[k]; s++) {
      int rc = MPI_Isend(o->send + (o->off[k] + s * o->seg) * o->esz,
                         (int)(seg_len(o, k, s) * o->esz), MPI_BYTE, k, o->tag_rs, o->comm,
                         &o->rs_send[o->base[k] + s]);
      if (rc != MPI_SUCCESS) {
        op_fail(o, rc, "MPI_Isend");
        break;
      }
    }
  }
  if (!o->err) {
    o->next = c->active;
    c->active = o;
    op_progress(o); /* what is already there: pieces posted, perhaps whole segments */
  }
}

/* Hand op to the caller: a new request, or (blocking) wait for it here. */
static int op_hand_over(mpi_ctx *c, owner_op *o, loom_request **req) {
  if (!req) return mpi_owner_wait(c, o);
  loom_request *r = calloc(1, sizeof *r);
  if (!r) {
    mpi_owner_abandon(c, o);
    return LOOM_NOMEM;
  }
  r->mpi = MPI_REQUEST_NULL;
  r->own = o;
  *req = r;
  return LOOM_OK;
}

static int op_start(mpi_ctx *c, owner_op *o, loom_request **req) {
  op_launch(c, o);
  return op_hand_over(c, o, req);
}

/* Balanced chunks of count elements over n ranks, the first count % n one element longer. */
static size_t *balanced(size_t count, int n) {
  size_t *counts = malloc((size_t)n * sizeof *counts);
  for (int k = 0; counts && k < n; k++)
    counts[k] = count / (size_t)n + ((size_t)k < count % (size_t)n);
  return counts;
}

static owner_op *new_all_reduce(mpi_ctx *c, loom_comm *comm, void *buf, size_t count,
                                loom_dtype dt, const unsigned long *seq) {
  int n;
  MPI_Comm_size(comm->p2p, &n);
  size_t *counts = balanced(count, n);
  if (!counts) return NULL;
  owner_op *o = op_new(c, comm, counts, 0, dt, 1, c->segment_bytes, OWNER_GATHER_SEGS, seq);
  free(counts);
  if (!o) return NULL;
  o->send = buf;
  o->all = buf;
  o->mine = (char *)buf + o->off[o->me] * o->esz;
  return o;
}

static owner_op *new_reduce_scatter(mpi_ctx *c, loom_comm *comm, const void *send, void *recv,
                                    const size_t *counts, size_t count, loom_dtype dt,
                                    const unsigned long *seq) {
  owner_op *o = op_new(c, comm, counts, count, dt, 1, c->segment_bytes, 1, seq);
  if (!o) return NULL;
  o->send = send;
  o->mine = recv;
  return o;
}

static owner_op *new_all_gather(mpi_ctx *c, loom_comm *comm, const void *send, void *recv,
                                const size_t *counts, size_t count, loom_dtype dt,
                                const unsigned long *seq) {
  owner_op *o = op_new(c, comm, counts, count, dt, 0, OWNER_GATHER_BYTES, 1, seq);
  if (!o) return NULL;
  o->all = recv;
  o->mine = (char *)recv + o->off[o->me] * o->esz;
  if (send != o->mine) memcpy(o->mine, send, o->cnt[o->me] * o->esz);
  o->ready = o->nseg[o->me];
  return o;
}

int mpi_owner_all_reduce(mpi_ctx *c, loom_comm *comm, void *buf, size_t count, loom_dtype dt,
                         loom_request **req) {
  if (comm->cross) return mpi_owner_all_reduce_hier(c, comm, buf, count, dt, req);
  owner_op *o = new_all_reduce(c, comm, buf, count, dt, NULL);
  return o ? op_start(c, o, req) : LOOM_NOMEM;
}

int mpi_owner_reduce_scatter(mpi_ctx *c, loom_comm *comm, const void *send, void *recv,
                             const size_t *counts, size_t count, loom_dtype dt,
                             loom_request **req) {
  owner_op *o = new_reduce_scatter(c, comm, send, recv, counts, count, dt, NULL);
  return o ? op_start(c, o, req) : LOOM_NOMEM;
}

int mpi_owner_all_gather(mpi_ctx *c, loom_comm *comm, const void *send, void *recv,
                         const size_t *counts, size_t count, loom_dtype dt, loom_request **req) {
  owner_op *o = new_all_gather(c, comm, send, recv, counts, count, dt, NULL);
  return o ? op_start(c, o, req) : LOOM_NOMEM;
}

/* ---- the hierarchical all_reduce (mpi_hier.h) ----
 * Phase 1: reduce_scatter over the node (balanced chunks: local rank j owns chunk j), in place;
 * phase 2: all_reduce of my chunk over the ranks with my local index (one per node); phase 3:
 * all_gather of the chunks over the node, in place. Each element is summed in local rank order
 * within each node, then those sums in node order: ((x_0 + x_1) + (x_2 + x_3)) on 2 nodes of 2,
 * by its owners alone, so every rank gets the same bits and the result does not depend on how
 * a buffer is cut (only on the node layout). */
static owner_op *hier_phase(mpi_ctx *c, owner_op *h) {
  size_t *cnt = h->cnt; /* the node's chunks */
  char *mine = h->hbuf + h->off[h->me] * h->esz;
  switch (h->phase) {
    case 1: return new_reduce_scatter(c, h->hnode, h->hbuf, mine, cnt, 0, h->dt, &h->hseq[1]);
    case 2: return new_all_reduce(c, h->hcross, mine, cnt[h->me], h->dt, &h->hseq[2]);
    case 3: return new_all_gather(c, h->hnode, mine, h->hbuf, cnt, 0, h->dt, &h->hseq[3]);
  }
  return NULL;
}

static void hier_next(mpi_ctx *c, owner_op *h) {
  if (++h->phase > 3) {
    h->done = 1;
    return;
  }
  h->sub = hier_phase(c, h);
  if (!h->sub) {
    snprintf(h->msg, sizeof h->msg, "out of host memory for a hierarchical all_reduce");
    h->err = LOOM_NOMEM;
    h->done = 1;
    return;
  }
  op_launch(c, h->sub);
}

static void hier_progress(mpi_ctx *c, owner_op *h) {
  while (!h->done && h->sub && h->sub->done) {
    owner_op *s = h->sub;
    h->sub = NULL;
    if (s->err) {
      snprintf(h->msg, sizeof h->msg, "%s", s->msg);
      h->err = s->err;
      h->done = 1;
    }
    mpi_owner_abandon(c, s); /* complete: unlist and free it */
    if (!h->done) hier_next(c, h);
  }
}

int mpi_owner_all_reduce_hier(mpi_ctx *c, loom_comm *comm, void *buf, size_t count,
                              loom_dtype dt, loom_request **req) {
  int k;
  MPI_Comm_size(comm->node->p2p, &k);
  size_t *counts = balanced(count, k);
  if (!counts) return LOOM_NOMEM;
  /* the wrapper: no messages of its own (reduce 0, every count 0 but its chunk table) */
  owner_op *h = calloc(1, sizeof *h);
  if (!h) return free(counts), LOOM_NOMEM;
  h->hier = 1;
  h->dt = dt;
  h->esz = loom_dtype_size(dt);
  MPI_Comm_rank(comm->node->p2p, &h->me);
  h->cnt = calloc(2 * (size_t)k, sizeof(size_t));
  if (!h->cnt) return free(counts), free(h), LOOM_NOMEM;
  h->off = h->cnt + k;
  for (size_t j = 0, at = 0; j < (size_t)k; at += counts[j], j++) {
    h->cnt[j] = counts[j];
    h->off[j] = at;
  }
  free(counts);
  h->hnode = comm->node;
  h->hcross = comm->cross;
  /* the phases' tag numbers, reserved now: all_reduce calls come in the same order on every
   * rank, the phases' starts do not */
  h->hseq[1] = comm->node->seq++;
  h->hseq[2] = comm->cross->seq++;
  h->hseq[3] = comm->node->seq++;
  h->hbuf = buf;
  h->next = c->hier_active;
  c->hier_active = h;
  hier_next(c, h);
  hier_progress(c, h);
  return op_hand_over(c, h, req);
}
