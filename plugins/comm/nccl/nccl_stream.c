/* nccl.so: where an operation runs and how it completes (nccl_internal.h). Every device
 * collective is enqueued on the device's native stream (send/recv on the p2p stream,
 * nccl_p2p.c); its request is a CUDA event recorded after it. Waiting polls
 * ncclCommGetAsyncError, so a failed or aborted peer surfaces as LOOM_REMOTE with NCCL's
 * message instead of a hang.
 *
 * The NCCL communicators: all of them at once, at the first device operation of any kind
 * (nccl_open_comms), in the order the communicators were made: the world, then each split.
 * Not inside the first operation on each communicator, as before: that order differs across
 * pipeline stages and mesh axes (stage 0's first is a send on pp, stage 1's a reduction on dp),
 * and ncclCommInitRank blocks until all the group's ranks call it, so two ranks each waiting in
 * the other's group's creation hang. Not at split time either, though split is collective:
 * the mesh is built before the device is opened (comm_v1.h), when no GPU is chosen yet, and
 * NCCL binds a communicator to the current device. Every rank made the same splits in the
 * same order (each one a blocking MPI_Comm_split over its parent), so replaying that order,
 * with one blocking creation per communicator over a subset of its parent, cannot deadlock:
 * the earliest creation anyone waits in has all its ranks in it. What it needs is that every
 * rank reaches a device operation or a barrier once the device is open — each rank's first
 * training step does. A split made after that (none today) creates its pair at once. */
#include <stddef.h>
#include <stdlib.h>

#include "comm_mpi.h"
#include "nccl_internal.h"

int nccl_mpi_fail(nccl_ctx *c, int mpi_rc, const char *what) {
  return comm_mpi_fail(c->api, c->host, mpi_rc, what);
}

int nccl_nccl_fail(nccl_ctx *c, ncclResult_t rc, const char *what) {
  c->api->set_error(c->host, "%s failed: %s (%s)", what, ncclGetErrorString(rc),
                    ncclGetLastError(NULL) ? ncclGetLastError(NULL) : "");
  return rc == ncclInvalidArgument || rc == ncclInvalidUsage ? LOOM_INVALID_USAGE : LOOM_REMOTE;
}

int nccl_cuda_fail(nccl_ctx *c, cudaError_t rc, const char *what) {
  c->api->set_error(c->host, "%s failed: %s", what, cudaGetErrorString(rc));
  return LOOM_SYSTEM;
}

/* A device without a native stream here is refused (the host already refuses a
 * host-addressable one by caps: this plugin declares device memory only). */
int nccl_device_stream(nccl_ctx *c, cudaStream_t *stream, int *on_device) {
  void *dctx = NULL;
  const loom_device_v1 *dev = c->api->device(c->host, &dctx);
  *on_device = dev != NULL;
  *stream = NULL;
  if (!dev) return LOOM_OK;
  void *s = LOOM_HAS(dev, native_stream) ? dev->native_stream(dctx) : NULL;
  if (!s) {
    c->api->set_error(c->host, "nccl.so needs the CUDA device (device.type \"cuda\"): device "
                      "'%s' has no native CUDA stream; use comm \"mpi\" with it",
                      dev->hdr.name ? dev->hdr.name : "?");
    return LOOM_UNSUPPORTED;
  }
  *stream = (cudaStream_t)s;
  return LOOM_OK;
}

int nccl_open_comm(nccl_ctx *c, loom_comm *comm) {
  ncclUniqueId id[2]; /* the collectives', the point-to-point one's */
  ncclResult_t r = ncclSuccess;
  for (int k = 0; k < 2 && comm->rank == 0 && r == ncclSuccess; k++) r = ncclGetUniqueId(&id[k]);
  if (r != ncclSuccess) return nccl_nccl_fail(c, r, "ncclGetUniqueId");
  int rc = MPI_Bcast(id, (int)sizeof id, MPI_BYTE, 0, comm->mpi);
  if (rc != MPI_SUCCESS) return nccl_mpi_fail(c, rc, "MPI_Bcast of the ncclUniqueIds");
  r = ncclCommInitRank(&comm->nccl, comm->size, id[0], comm->rank);
  if (r == ncclSuccess) r = ncclCommInitRank(&comm->p2p, comm->size, id[1], comm->rank);
  return r == ncclSuccess ? LOOM_OK : nccl_nccl_fail(c, r, "ncclCommInitRank");
}

/* cudaEventQuery on an event not yet reached returns cudaErrorNotReady, which is no failure, but
 * the runtime also leaves it as the calling thread's last error: the next cudaGetLastError on
 * this thread (cuda.so's check after a kernel launch) would read it as that launch's failure and
 * fail the device. So every query clears it at once, as PyTorch does (pytorch#18584, #61554). */
cudaError_t nccl_query_event(cudaEvent_t ev) {
  cudaError_t q = cudaEventQuery(ev);
  if (q == cudaErrorNotReady) (void)cudaGetLastError();
  return q;
}

/* m and every communicator after it in the list (made before it), oldest first. */
static int open_from(nccl_ctx *c, loom_comm *m) {
  if (!m) return LOOM_OK;
  int rc = open_from(c, m->next);
  return rc ? rc : nccl_open_comm(c, m);
}

int nccl_open_comms(nccl_ctx *c) {
  if (c->opened) return LOOM_OK;
  c->opened = 1; /* once, even after a failure: the job is ending then */
  int rc = nccl_open_comm(c, &c->world);
  return rc ? rc : open_from(c, c->world.next);
}

loom_request *nccl_request_new(loom_comm *comm) {
  loom_request *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->mpi = MPI_REQUEST_NULL;
  r->comm = comm;
  return r;
}

/* An asynchronous error on one of comm's NCCL communicators: LOOM_REMOTE after aborting it;
 * LOOM_OK while none. */
static int check_async(nccl_ctx *c, ncclComm_t *nc) {
  ncclResult_t async = ncclSuccess;
  if (!*nc) return LOOM_OK;
  ncclResult_t r = ncclCommGetAsyncError(*nc, &async);
  if (r != ncclSuccess) return nccl_nccl_fail(c, r, "ncclCommGetAsyncError");
  if (async == ncclSuccess || async == ncclInProgress) return LOOM_OK;
  ncclCommAbort(*nc);
  *nc = NULL;
  return nccl_nccl_fail(c, async, "a collective or send/recv (asynchronous error)");
}

/* Wait for `ev` while watching the communicator for asynchronous errors (a peer died, the
 * communicator was aborted): LOOM_REMOTE with NCCL's message then, never a hang. */
int nccl_wait_event(nccl_ctx *c, loom_comm *comm, cudaEvent_t ev) {
  for (;;) {
    cudaError_t q = nccl_query_event(ev);
    if (q == cudaSuccess) return LOOM_OK;
    if (q != cudaErrorNotReady) return nccl_cuda_fail(c, q, "cudaEventQuery");
    int rc = comm ? check_async(c, &comm->nccl) : LOOM_OK;
    if (!rc && comm) rc = check_async(c, &comm->p2p);
    if (rc) return rc;
  }
}

int nccl_finish(nccl_ctx *c, loom_comm *comm, cudaStream_t stream, loom_request **req) {
  cudaEvent_t ev;
  cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (e != cudaSuccess) return nccl_cuda_fail(c, e, "cudaEventCreate");
  e = cudaEventRecord(ev, stream);
  if (e != cudaSuccess) {
    cudaEventDestroy(ev);
    return nccl_cuda_fail(c, e, "cudaEventRecord");
  }
  if (req) {
    loom_request *r = nccl_request_new(comm);
    if (!r) {
      cudaEventDestroy(ev);
      return LOOM_NOMEM;
    }
    r->done = ev;
    *req = r;
    return LOOM_OK;
  }
  int rc = nccl_wait_event(c, comm, ev);
  cudaEventDestroy(ev);
  return rc;
}

int nccl_completed(loom_request **req) {
  if (!req) return LOOM_OK;
  *req = nccl_request_new(NULL);
  return *req ? LOOM_OK : LOOM_NOMEM;
}
