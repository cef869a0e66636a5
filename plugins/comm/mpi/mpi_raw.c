/* mpi.so's MPI calls on host buffers (the mpi_raw_* operations, comm_v1's semantics with req
 * NULL = blocking), the requests they return (test, wait) and the barrier: one MPI call each,
 * or loom's own sum collectives (mpi_owner.h) where they are eligible. mpi_staging.c puts the
 * table's device buffers in host memory before calling these; mpi_comm.c holds the lifecycle
 * and the table. */
#include <stdlib.h>
#include <string.h>

#include "comm_mpi.h"
#include "mpi_internal.h"
#include "mpi_owner.h"

int mpi_fail(mpi_ctx *c, int mpi_err, const char *what) {
  return comm_mpi_fail(c->api, c->host, mpi_err, what);
}

/* bf16 and fp16 travel as MPI_UINT16_T: moved, and summed only by the 16-bit MPI_Ops */
static MPI_Datatype mpi_type(loom_dtype dt) { return comm_mpi_type(dt, MPI_UINT16_T); }

/* The MPI reduction for op on dt: MPI's own, or the 16-bit sums (check_args refused the rest). */
static MPI_Op reduce_op(const mpi_ctx *c, loom_red_op op, loom_dtype dt) {
  if (dt == LOOM_BF16) return c->sum_bf16;
  if (dt == LOOM_F16) return c->sum_f16;
  switch (op) {
    case LOOM_OP_SUM: return MPI_SUM;
    case LOOM_OP_MAX: return MPI_MAX;
    case LOOM_OP_MIN: return MPI_MIN;
  }
  return MPI_OP_NULL;
}

static int check_args(mpi_ctx *c, loom_dtype dt, size_t count, int reduce, loom_red_op op) {
  if (count > (size_t)INT32_MAX) {
    c->api->set_error(c->host, "message of %zu elements exceeds MPI's int count", count);
    return LOOM_UNSUPPORTED;
  }
  if (mpi_type(dt) == MPI_DATATYPE_NULL ||
      (reduce && (dt == LOOM_BF16 || dt == LOOM_F16) && op != LOOM_OP_SUM)) {
    c->api->set_error(c->host, "dtype %d is not supported by mpi.so for this operation%s", dt,
                      reduce ? " (16-bit reductions: sum only)" : "");
    return LOOM_UNSUPPORTED;
  }
  return LOOM_OK;
}

/* Either start (req != NULL) or run a call. The macro keeps each op one line. */
static loom_request *new_request(void) { return calloc(1, sizeof(loom_request)); }

/* Run `blocking` or start `nonblocking` into a fresh request. With loom's own collectives
 * ("collectives": "loom") a blocking call is the non-blocking one waited here, which drives the
 * own collectives meanwhile: a peer may need this rank's part of one before it can reach this
 * call. (Always, not only while one is outstanding: MPI does not match a blocking collective on
 * one rank with a non-blocking one on another.) */
#define RUN_OR_START(c, req, blocking, nonblocking, what)                        \
  do {                                                                           \
    if (!(req) && !(c)->own) {                                                   \
      CHECK_MPI((c), (blocking), what);                                          \
      return LOOM_OK;                                                            \
    }                                                                            \
    loom_request *r_ = new_request();                                            \
    if (!r_) return LOOM_NOMEM;                                                  \
    MPI_Request *request = &r_->mpi;                                             \
    int rc_ = (nonblocking);                                                     \
    if (rc_ != MPI_SUCCESS) {                                                    \
      free(r_);                                                                  \
      return mpi_fail((c), rc_, what);                                           \
    }                                                                            \
    if (!(req)) return mpi_wait((c), r_);                                        \
    *(req) = r_;                                                                 \
    return LOOM_OK;                                                              \
  } while (0)

int mpi_raw_all_reduce(void *ctx, loom_comm *comm, void *buf, size_t count, loom_dtype dt,
                       loom_red_op op, loom_request **req) {
  mpi_ctx *c = ctx;
  if (mpi_owner_eligible(c, op, dt)) return mpi_owner_all_reduce(c, comm, buf, count, dt, req);
  int rc = check_args(c, dt, count, 1, op);
  if (rc) return rc;
  RUN_OR_START(c, req,
               MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, mpi_type(dt), reduce_op(c, op, dt),
                             comm->mpi),
               MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, mpi_type(dt), reduce_op(c, op, dt),
                              comm->mpi, request),
               "MPI_Allreduce");
}

int mpi_raw_reduce_scatter(void *ctx, loom_comm *comm, const void *send, void *recv,
                           size_t recv_count, loom_dtype dt, loom_red_op op,
                           loom_request **req) {
  mpi_ctx *c = ctx;
  if (mpi_owner_eligible(c, op, dt))
    return mpi_owner_reduce_scatter(c, comm, send, recv, NULL, recv_count, dt, req);
  int rc = check_args(c, dt, recv_count, 1, op);
  if (rc) return rc;
  RUN_OR_START(c, req,
               MPI_Reduce_scatter_block(send, recv, (int)recv_count, mpi_type(dt),
                                        reduce_op(c, op, dt),
                                        comm->mpi),
               MPI_Ireduce_scatter_block(send, recv, (int)recv_count, mpi_type(dt),
                                         reduce_op(c, op, dt), comm->mpi, request),
               "MPI_Reduce_scatter_block");
}

int mpi_raw_all_gather(void *ctx, loom_comm *comm, const void *send, void *recv,
                       size_t send_count, loom_dtype dt, loom_request **req) {
  mpi_ctx *c = ctx;
  if (c->own) return mpi_owner_all_gather(c, comm, send, recv, NULL, send_count, dt, req);
  int rc = check_args(c, dt, send_count, 0, LOOM_OP_SUM);
  if (rc) return rc;
  int me;
  MPI_Comm_rank(comm->mpi, &me);
  /* this rank's block already in place: MPI forbids aliasing send and recv otherwise */
  if (send == (const char *)recv + (size_t)me * send_count * loom_dtype_size(dt))
    send = MPI_IN_PLACE;
  RUN_OR_START(c, req,
               MPI_Allgather(send, (int)send_count, mpi_type(dt), recv, (int)send_count,
                             mpi_type(dt), comm->mpi),
               MPI_Iallgather(send, (int)send_count, mpi_type(dt), recv, (int)send_count,
                              mpi_type(dt), comm->mpi, request),
               "MPI_Allgather");
}

int mpi_raw_broadcast(void *ctx, loom_comm *comm, void *buf, size_t count, loom_dtype dt,
                      int root, loom_request **req) {
  mpi_ctx *c = ctx;
  int rc = check_args(c, dt, count, 0, LOOM_OP_SUM);
  if (rc) return rc;
  RUN_OR_START(c, req, MPI_Bcast(buf, (int)count, mpi_type(dt), root, comm->mpi),
               MPI_Ibcast(buf, (int)count, mpi_type(dt), root, comm->mpi, request),
               "MPI_Bcast");
}

int mpi_raw_send(void *ctx, loom_comm *comm, const void *buf, size_t count, loom_dtype dt,
                 int peer, int tag, loom_request **req) {
  mpi_ctx *c = ctx;
  int rc = check_args(c, dt, count, 0, LOOM_OP_SUM);
  if (rc) return rc;
#ifdef LOOM_FIXTURE_BLOCKING_SEND
  /* tests/fixtures' wrong copy of mpi.so, which `loom conformance`'s comm.p2p must catch: a
   * "non-blocking" send that blocks until its receive is matched (MPI_Send of a large
   * message), as a plugin that runs every operation at once on one stream would */
  if (req) {
    CHECK_MPI(c, MPI_Send(buf, (int)count, mpi_type(dt), peer, tag, comm->mpi), "MPI_Send");
    if (!(*req = new_request())) return LOOM_NOMEM;
    (*req)->mpi = MPI_REQUEST_NULL; /* complete */
    return LOOM_OK;
  }
#endif
  RUN_OR_START(c, req, MPI_Send(buf, (int)count, mpi_type(dt), peer, tag, comm->mpi),
               MPI_Isend(buf, (int)count, mpi_type(dt), peer, tag, comm->mpi, request),
               "MPI_Send");
}

int mpi_raw_recv(void *ctx, loom_comm *comm, void *buf, size_t count, loom_dtype dt,
                 int peer, int tag, loom_request **req) {
  mpi_ctx *c = ctx;
  int rc = check_args(c, dt, count, 0, LOOM_OP_SUM);
  if (rc) return rc;
#ifdef LOOM_FIXTURE_ANY_TAG
  tag = MPI_ANY_TAG; /* tests/fixtures' wrong copy: matched by order, as NCCL does */
#endif
  RUN_OR_START(c, req,
               MPI_Recv(buf, (int)count, mpi_type(dt), peer, tag, comm->mpi, MPI_STATUS_IGNORE),
               MPI_Irecv(buf, (int)count, mpi_type(dt), peer, tag, comm->mpi, request),
               "MPI_Recv");
}

int mpi_test(void *ctx, loom_request *req, int *done) {
  mpi_ctx *c = ctx;
  if (req->own) return mpi_owner_test(c, req->own, done);
  mpi_owner_progress(c); /* every outstanding own collective, whichever request is tested */
  if (req->mpi == MPI_REQUEST_NULL) {
    *done = 1;
    return LOOM_OK;
  }
  CHECK_MPI(c, MPI_Test(&req->mpi, done, MPI_STATUS_IGNORE), "MPI_Test");
  return LOOM_OK;
}

void mpi_stages_finish(const loom_device_v1 *dev, void *dev_ctx, stage *st, int n, int ok) {
  for (int i = 0; i < n; i++) {
    if (ok && st[i].copy_back && st[i].bytes)
      dev->from_host(dev_ctx, st[i].dev, st[i].host, st[i].bytes);
    free(st[i].host);
    st[i].host = NULL;
  }
}

/* Complete an Open MPI request; while own collectives are outstanding, drive them meanwhile
 * (MPI_Wait would not, and their peers may need this rank's part to reach this request). */
static int wait_mpi(mpi_ctx *c, MPI_Request *r) {
  if (!c->active && !c->hier_active) return MPI_Wait(r, MPI_STATUS_IGNORE);
  for (int done = 0;;) {
    mpi_owner_progress(c);
    int rc = MPI_Test(r, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS || done) return rc;
  }
}

int mpi_wait(void *ctx, loom_request *req) {
  mpi_ctx *c = ctx;
  int rc = MPI_SUCCESS, own_rc = LOOM_OK;
  if (req->own) own_rc = mpi_owner_wait(c, req->own);
  else rc = wait_mpi(c, &req->mpi);
  int ok = rc == MPI_SUCCESS && own_rc == LOOM_OK;
  if (req->n_st) mpi_stages_finish(req->dev, req->dev_ctx, req->st, req->n_st, ok);
  free(req->counts);
  free(req->displs);
  free(req);
  if (own_rc) return own_rc; /* its message is set */
  if (rc != MPI_SUCCESS) return mpi_fail(c, rc, "MPI_Wait");
  return LOOM_OK;
}

/* int counts and displacements (prefix sums) for the v-collectives; NULL on overflow. */
static int make_counts(mpi_ctx *c, loom_comm *comm, const size_t *counts, int **out_counts,
                       int **out_displs) {
  int n;
  MPI_Comm_size(comm->mpi, &n);
  int *ic = malloc((size_t)n * sizeof *ic), *id = malloc((size_t)n * sizeof *id);
  if (!ic || !id) {
    free(ic);
    free(id);
    return LOOM_NOMEM;
  }
  size_t at = 0;
  for (int i = 0; i < n; i++) {
    if (counts[i] > (size_t)INT32_MAX || at > (size_t)INT32_MAX) {
      free(ic);
      free(id);
      c->api->set_error(c->host, "uneven collective exceeds MPI's int counts");
      return LOOM_UNSUPPORTED;
    }
    ic[i] = (int)counts[i];
    id[i] = (int)at;
    at += counts[i];
  }
  *out_counts = ic;
  *out_displs = id;
  return LOOM_OK;
}

int mpi_raw_reduce_scatter_v(void *ctx, loom_comm *comm, const void *send, void *recv,
                             const size_t *counts, loom_dtype dt, loom_red_op op,
                             loom_request **req) {
  mpi_ctx *c = ctx;
  if (mpi_owner_eligible(c, op, dt))
    return mpi_owner_reduce_scatter(c, comm, send, recv, counts, 0, dt, req);
  if (!req && c->own) { /* blocking: drive the own collectives meanwhile (RUN_OR_START) */
    loom_request *r = NULL;
    int rc = mpi_raw_reduce_scatter_v(ctx, comm, send, recv, counts, dt, op, &r);
    return rc ? rc : mpi_wait(c, r);
  }
  int rc = check_args(c, dt, 0, 1, op);
  int *ic = NULL, *id = NULL;
  if (!rc) rc = make_counts(c, comm, counts, &ic, &id);
  if (rc) return rc;
  free(id);
  if (!req) {
    rc = MPI_Reduce_scatter(send, recv, ic, mpi_type(dt), reduce_op(c, op, dt), comm->mpi);
    free(ic);
    return rc == MPI_SUCCESS ? LOOM_OK : mpi_fail(c, rc, "MPI_Reduce_scatter");
  }
  loom_request *r = new_request();
  if (!r) {
    free(ic);
    return LOOM_NOMEM;
  }
  r->counts = ic;
  rc = MPI_Ireduce_scatter(send, recv, ic, mpi_type(dt), reduce_op(c, op, dt), comm->mpi, &r->mpi);
  if (rc != MPI_SUCCESS) {
    free(ic);
    free(r);
    return mpi_fail(c, rc, "MPI_Ireduce_scatter");
  }
  *req = r;
  return LOOM_OK;
}

int mpi_raw_all_gather_v(void *ctx, loom_comm *comm, const void *send, void *recv,
                         const size_t *counts, loom_dtype dt, loom_request **req) {
  mpi_ctx *c = ctx;
  if (c->own) return mpi_owner_all_gather(c, comm, send, recv, counts, 0, dt, req);
  int rc = check_args(c, dt, 0, 0, LOOM_OP_SUM), me;
  int *ic = NULL, *id = NULL;
  if (!rc) rc = make_counts(c, comm, counts, &ic, &id);
  if (rc) return rc;
  MPI_Comm_rank(comm->mpi, &me);
  if (send == (const char *)recv + (size_t)id[me] * loom_dtype_size(dt)) send = MPI_IN_PLACE;
  if (!req) {
    rc = MPI_Allgatherv(send, ic[me], mpi_type(dt), recv, ic, id, mpi_type(dt), comm->mpi);
    free(ic);
    free(id);
    return rc == MPI_SUCCESS ? LOOM_OK : mpi_fail(c, rc, "MPI_Allgatherv");
  }
  loom_request *r = new_request();
  if (!r) {
    free(ic);
    free(id);
    return LOOM_NOMEM;
  }
  r->counts = ic;
  r->displs = id;
  rc = MPI_Iallgatherv(send, ic[me], mpi_type(dt), recv, ic, id, mpi_type(dt), comm->mpi,
                       &r->mpi);
  if (rc != MPI_SUCCESS) {
    free(ic);
    free(id);
    free(r);
    return mpi_fail(c, rc, "MPI_Iallgatherv");
  }
  *req = r;
  return LOOM_OK;
}

int mpi_barrier(void *ctx, loom_comm *comm) {
  mpi_ctx *c = ctx;
  loom_request **blocking = NULL; /* MPI_Barrier, or MPI_Ibarrier while driving own ones */
  RUN_OR_START(c, blocking, MPI_Barrier(comm->mpi), MPI_Ibarrier(comm->mpi, request),
               "MPI_Barrier");
}
