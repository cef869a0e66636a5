/* nccl.so: send/recv on device memory with comm_v1.h's point-to-point semantics (non-blocking
 * operations progress independently of each other and of their posting order, matched by
 * (peer, tag)), on NCCL, which has no tags and runs each ncclSend/ncclRecv issued on its own
 * as a kernel that waits for its peer: issued one by one on one stream, a ring's recv, recv,
 * send, send is a circular wait, and so is 1F1B's activation send followed by a blocking
 * gradient receive once the message outgrows NCCL's buffers (the send waits for a receive the
 * peer posts only after its own send).
 *
 * The design, as simple as that allows:
 *  - Posting queues the operation (ctx->queue); nothing is issued yet.
 *  - The queue is issued as one ncclGroupStart/End, so all of it is in flight at once and no
 *    operation of it waits on another, at the next call of the plugin that is not itself a
 *    non-blocking send/recv post: a wait or test, a blocking send/recv (post, issue, wait), a
 *    collective, a barrier. A rank blocks only inside such a call, so nothing it posted is
 *    held back while it waits for a peer.
 *  - Tags: NCCL matches a peer's sends and receives in issue order. Inside a group the
 *    operations are issued sorted by (peer, tag, posting order), so both sides issue a group's
 *    messages in the same order whatever order they were posted in (the ring posts receives of
 *    tags 8, 7 against sends of 7, 8).
 *  - Each communicator's second NCCL communicator (`p2p`) and the plugin's own stream: NCCL runs
 *    one communicator's kernels in issue order, and ranks interleave collectives and p2p groups
 *    differently (a stage sends while its neighbour reduces), so sharing would serialise them
 *    into a deadlock. The p2p stream first waits on an event recorded on the device's stream,
 *    so the kernels that wrote a send buffer (or still read a receive buffer) come first; each
 *    request's event is recorded after the group, and wait() blocks the host on it, so what the
 *    caller enqueues after wait() sees the data. Collectives never wait for p2p.
 *
 * What this guarantees (docs/abi.md, "Point to point"): a request completes with its whole
 * group, and groups run in issue order. So operations that need each other must be posted back
 * to back — no other call of the plugin between them — as the conformance cases (comm.p2p) and
 * pipeline.so do, and per peer the messages of corresponding groups must carry the same tags;
 * two dependent operations issued in different groups can deadlock once their messages exceed
 * NCCL's buffering (NCCL_BUFFSIZE, 4 MiB by default). */
#include <stdint.h>
#include <stdlib.h>

#include "nccl_internal.h"

struct nccl_p2p_op {
  int send; /* 1: ncclSend, 0: ncclRecv */
  void *buf;
  size_t count;
  ncclDataType_t type;
  int peer, tag;
  unsigned long seq; /* posting order: the sort's tie-break (qsort is not stable) */
  loom_comm *comm;
  loom_request *req;
};

/* Issue order inside a group: only the relative order of one communicator's operations with
 * one peer matters to NCCL (so the pointer comparison of comms, which differs across ranks, is
 * harmless); by tag, then posting order, which per (peer, tag) is the matching order. */
static int cmp_op(const void *pa, const void *pb) {
  const nccl_p2p_op *a = pa, *b = pb;
  uintptr_t ca = (uintptr_t)a->comm, cb = (uintptr_t)b->comm;
  if (ca != cb) return ca < cb ? -1 : 1;
  if (a->peer != b->peer) return a->peer < b->peer ? -1 : 1;
  if (a->tag != b->tag) return a->tag < b->tag ? -1 : 1;
  return a->seq < b->seq ? -1 : a->seq > b->seq;
}

int nccl_p2p_post(nccl_ctx *c, loom_comm *comm, int send, void *buf, size_t count,
                  ncclDataType_t t, int peer, int tag, loom_request **req) {
  if (c->n_queue == c->cap_queue) {
    size_t cap = c->cap_queue ? 2 * c->cap_queue : 16;
    nccl_p2p_op *q = realloc(c->queue, cap * sizeof *q);
    if (!q) return LOOM_NOMEM;
    c->queue = q;
    c->cap_queue = cap;
  }
  loom_request *r = nccl_request_new(comm);
  if (!r) return LOOM_NOMEM;
  r->queued = 1;
  c->queue[c->n_queue++] = (nccl_p2p_op){.send = send, .buf = buf, .count = count, .type = t,
                                         .peer = peer, .tag = tag, .seq = c->posted++,
                                         .comm = comm, .req = r};
  if (req) {
    *req = r;
    return LOOM_OK;
  }
  return nccl_wait(c, r); /* blocking = post + wait (which issues the queue) */
}

/* Mark every queued request failed with rc (wait() returns it) and empty the queue. */
static int fail_queue(nccl_ctx *c, int rc) {
  for (size_t i = 0; i < c->n_queue; i++) {
    c->queue[i].req->queued = 0;
    c->queue[i].req->failed = rc;
  }
  c->n_queue = 0;
  return rc;
}

/* The p2p stream after everything enqueued so far on the device's stream. */
static int order_after_compute(nccl_ctx *c) {
  cudaStream_t s;
  int on_device, rc = nccl_device_stream(c, &s, &on_device);
  if (rc) return rc;
  cudaError_t e = cudaSuccess;
  if (!c->p2p_stream) e = cudaStreamCreateWithFlags(&c->p2p_stream, cudaStreamNonBlocking);
  if (e != cudaSuccess) return nccl_cuda_fail(c, e, "cudaStreamCreate (p2p stream)");
  cudaEvent_t ready;
  e = cudaEventCreateWithFlags(&ready, cudaEventDisableTiming);
  if (e != cudaSuccess) return nccl_cuda_fail(c, e, "cudaEventCreate");
  e = cudaEventRecord(ready, s);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(c->p2p_stream, ready, 0);
  cudaEventDestroy(ready); /* released once complete; the wait is already enqueued */
  return e == cudaSuccess ? LOOM_OK : nccl_cuda_fail(c, e, "cudaStreamWaitEvent (p2p stream)");
}

int nccl_p2p_flush(nccl_ctx *c) {
  if (c->n_queue == 0) return LOOM_OK;
  int rc = order_after_compute(c);
  if (rc) return fail_queue(c, rc);
  qsort(c->queue, c->n_queue, sizeof *c->queue, cmp_op);
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) return fail_queue(c, nccl_nccl_fail(c, r, "ncclGroupStart (p2p)"));
  for (size_t i = 0; i < c->n_queue && r == ncclSuccess; i++) {
    const nccl_p2p_op *o = &c->queue[i];
    r = o->send ? ncclSend(o->buf, o->count, o->type, o->peer, o->comm->p2p, c->p2p_stream)
                : ncclRecv(o->buf, o->count, o->type, o->peer, o->comm->p2p, c->p2p_stream);
  }
  ncclResult_t end = ncclGroupEnd();
  if (r != ncclSuccess) return fail_queue(c, nccl_nccl_fail(c, r, "ncclSend/ncclRecv"));
  if (end != ncclSuccess) return fail_queue(c, nccl_nccl_fail(c, end, "ncclGroupEnd (p2p)"));
  /* one event per request, all after the group: a request completes with its group */
  for (size_t i = 0; i < c->n_queue; i++) {
    loom_request *q = c->queue[i].req;
    cudaEvent_t ev;
    cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (e == cudaSuccess && (e = cudaEventRecord(ev, c->p2p_stream)) != cudaSuccess)
      cudaEventDestroy(ev);
    if (e == cudaSuccess) q->done = ev;
    else q->failed = nccl_cuda_fail(c, e, "cudaEventRecord (p2p)");
    q->queued = 0;
  }
  c->n_queue = 0;
  return LOOM_OK;
}

/* ---- test and wait, for every request (here, since a queued send/recv is issued first) ---- */

int nccl_test(void *ctx, loom_request *req, int *done) {
  nccl_ctx *c = ctx;
  int rc = req->queued ? nccl_p2p_flush(c) : LOOM_OK; /* a queued send/recv: issue it now */
  if (rc) return rc;
  if (req->failed) return req->failed;
  if (req->mpi != MPI_REQUEST_NULL) { /* a send/recv on host memory */
    rc = MPI_Test(&req->mpi, done, MPI_STATUS_IGNORE);
    return rc == MPI_SUCCESS ? LOOM_OK : nccl_mpi_fail(c, rc, "MPI_Test");
  }
  if (!req->done) {
    *done = 1;
    return LOOM_OK;
  }
  cudaError_t q = nccl_query_event(req->done);
  if (q == cudaSuccess || q == cudaErrorNotReady) {
    *done = q == cudaSuccess;
    return LOOM_OK;
  }
  return nccl_cuda_fail(c, q, "cudaEventQuery");
}

int nccl_wait(void *ctx, loom_request *req) {
  nccl_ctx *c = ctx;
  int rc = req->queued ? nccl_p2p_flush(c) : LOOM_OK; /* a queued send/recv: issue it now */
  if (!rc && req->failed) rc = req->failed;
  if (!rc && req->mpi != MPI_REQUEST_NULL) {
    int mrc = MPI_Wait(&req->mpi, MPI_STATUS_IGNORE);
    if (mrc != MPI_SUCCESS) rc = nccl_mpi_fail(c, mrc, "MPI_Wait");
  }
  if (!rc && req->done) rc = nccl_wait_event(c, req->comm, req->done);
  if (req->done) cudaEventDestroy(req->done);
  free(req);
  return rc;
}
