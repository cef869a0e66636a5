/* nccl.so: where an operation runs and how it completes (nccl_internal.h). Every device
 * operation is enqueued on the device's native stream; its request is a CUDA event recorded
 * after it. Waiting polls ncclCommGetAsyncError, so a failed or aborted peer surfaces as
 * LOOM_REMOTE with NCCL's message instead of a hang. */
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

int nccl_ensure_comm(nccl_ctx *c, loom_comm *comm) {
  if (comm->nccl) return LOOM_OK;
  ncclUniqueId id;
  ncclResult_t r;
  if (comm->rank == 0 && (r = ncclGetUniqueId(&id)) != ncclSuccess)
    return nccl_nccl_fail(c, r, "ncclGetUniqueId");
  int rc = MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, comm->mpi);
  if (rc != MPI_SUCCESS) return nccl_mpi_fail(c, rc, "MPI_Bcast of the ncclUniqueId");
  r = ncclCommInitRank(&comm->nccl, comm->size, id, comm->rank);
  return r == ncclSuccess ? LOOM_OK : nccl_nccl_fail(c, r, "ncclCommInitRank");
}

/* cudaEventQuery on an event not yet reached returns cudaErrorNotReady, which is no failure, but
 * the runtime also leaves it as the calling thread's last error: the next cudaGetLastError on
 * this thread (cuda.so's check after a kernel launch) would read it as that launch's failure and
 * fail the device. So every query clears it at once, as PyTorch does (pytorch#18584, #61554). */
static cudaError_t query_event(cudaEvent_t ev) {
  cudaError_t q = cudaEventQuery(ev);
  if (q == cudaErrorNotReady) (void)cudaGetLastError();
  return q;
}

/* Wait for `ev` while watching the communicator for asynchronous errors (a peer died, the
 * communicator was aborted): LOOM_REMOTE with NCCL's message then, never a hang. */
static int wait_event(nccl_ctx *c, loom_comm *comm, cudaEvent_t ev) {
  for (;;) {
    cudaError_t q = query_event(ev);
    if (q == cudaSuccess) return LOOM_OK;
    if (q != cudaErrorNotReady) return nccl_cuda_fail(c, q, "cudaEventQuery");
    ncclResult_t async = ncclSuccess;
    if (comm && comm->nccl) {
      ncclResult_t r = ncclCommGetAsyncError(comm->nccl, &async);
      if (r != ncclSuccess) return nccl_nccl_fail(c, r, "ncclCommGetAsyncError");
      if (async != ncclSuccess && async != ncclInProgress) {
        ncclCommAbort(comm->nccl);
        comm->nccl = NULL;
        return nccl_nccl_fail(c, async, "a collective (asynchronous error)");
      }
    }
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
    loom_request *r = calloc(1, sizeof *r);
    if (!r) {
      cudaEventDestroy(ev);
      return LOOM_NOMEM;
    }
    r->done = ev;
    r->comm = comm;
    *req = r;
    return LOOM_OK;
  }
  int rc = wait_event(c, comm, ev);
  cudaEventDestroy(ev);
  return rc;
}

int nccl_completed(loom_request **req) {
  if (!req) return LOOM_OK;
  *req = calloc(1, sizeof **req);
  return *req ? LOOM_OK : LOOM_NOMEM;
}

int nccl_test(void *ctx, loom_request *req, int *done) {
  nccl_ctx *c = ctx;
  if (!req->done) {
    *done = 1;
    return LOOM_OK;
  }
  cudaError_t q = query_event(req->done);
  if (q == cudaSuccess || q == cudaErrorNotReady) {
    *done = q == cudaSuccess;
    return LOOM_OK;
  }
  return nccl_cuda_fail(c, q, "cudaEventQuery");
}

int nccl_wait(void *ctx, loom_request *req) {
  nccl_ctx *c = ctx;
  int rc = req->done ? wait_event(c, req->comm, req->done) : LOOM_OK;
  if (req->done) cudaEventDestroy(req->done);
  free(req);
  return rc;
}
