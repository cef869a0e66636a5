/* Internal to nccl.so: its types, shared by nccl_comm.c (the plugin's table, lifecycle and
 * communicators), nccl_stream.c (where an operation runs: the device's stream, the lazy NCCL
 * communicator, requests as CUDA events) and nccl_ops.c (comm_v1's operations: one descriptor
 * each, run on host memory over MPI before the device is open, else enqueued on NCCL). */
#ifndef LOOM_NCCL_INTERNAL_H
#define LOOM_NCCL_INTERNAL_H

#include <cuda_runtime_api.h>
#include <loom/loom.h>
#include <mpi.h>
#include <nccl.h>

struct loom_comm {
  MPI_Comm mpi;
  ncclComm_t nccl; /* created at the first device-memory operation */
  int rank, size;
  struct loom_comm *next; /* every communicator, for abort() */
};

/* An operation handed out with a request: the CUDA event recorded after it on the device's
 * stream, or no event (done NULL) for one already complete (host memory, MPI, blocking). */
struct loom_request {
  cudaEvent_t done;
  loom_comm *comm; /* watched for asynchronous errors while waiting */
};

typedef struct nccl_ctx {
  const loom_host_api_v1 *api;
  loom_host *host;
  struct loom_comm world;
  int initialized_here; /* we called MPI_Init, so we call MPI_Finalize */
} nccl_ctx;

/* ---- errors (nccl_stream.c): set the host's message "WHAT failed: REASON", return the code */
int nccl_mpi_fail(nccl_ctx *c, int mpi_rc, const char *what);        /* LOOM_REMOTE */
int nccl_nccl_fail(nccl_ctx *c, ncclResult_t rc, const char *what);  /* usage or REMOTE */
int nccl_cuda_fail(nccl_ctx *c, cudaError_t rc, const char *what);   /* LOOM_SYSTEM */

/* ---- where an operation runs (nccl_stream.c) ---- */

/* The device's stream in *stream with *on_device = 1, or *on_device = 0 while no device is
 * open (host memory: MPI). A device without a native CUDA stream: LOOM_UNSUPPORTED. */
int nccl_device_stream(nccl_ctx *c, cudaStream_t *stream, int *on_device);
/* The group's NCCL communicator, made on first use (collective over the group: rank 0's
 * ncclUniqueId broadcast over MPI). */
int nccl_ensure_comm(nccl_ctx *c, loom_comm *comm);
/* After enqueuing on `stream`: record the completion event and hand it out as *req, or (req
 * NULL) wait for it, watching `comm` for asynchronous errors. */
int nccl_finish(nccl_ctx *c, loom_comm *comm, cudaStream_t stream, loom_request **req);
/* An already complete operation's request (no event) into *req; nothing when req is NULL. */
int nccl_completed(loom_request **req);
int nccl_test(void *ctx, loom_request *req, int *done);
int nccl_wait(void *ctx, loom_request *req);

/* ---- comm_v1's operations (nccl_ops.c), the plugin table's entries ---- */
int nccl_all_reduce(void *ctx, loom_comm *comm, void *buf, size_t count, loom_dtype dt,
                    loom_red_op op, loom_request **req);
int nccl_reduce_scatter(void *ctx, loom_comm *comm, const void *send, void *recv,
                        size_t recv_count, loom_dtype dt, loom_red_op op, loom_request **req);
int nccl_all_gather(void *ctx, loom_comm *comm, const void *send, void *recv, size_t send_count,
                    loom_dtype dt, loom_request **req);
int nccl_broadcast(void *ctx, loom_comm *comm, void *buf, size_t count, loom_dtype dt, int root,
                   loom_request **req);
int nccl_send(void *ctx, loom_comm *comm, const void *buf, size_t count, loom_dtype dt, int peer,
              int tag, loom_request **req);
int nccl_recv(void *ctx, loom_comm *comm, void *buf, size_t count, loom_dtype dt, int peer,
              int tag, loom_request **req);
int nccl_reduce_scatter_v(void *ctx, loom_comm *comm, const void *send, void *recv,
                          const size_t *counts, loom_dtype dt, loom_red_op op,
                          loom_request **req);
int nccl_all_gather_v(void *ctx, loom_comm *comm, const void *send, void *recv,
                      const size_t *counts, loom_dtype dt, loom_request **req);

#endif
