/* Internal to nccl.so: its types, shared by nccl_comm.c (the plugin's table, lifecycle and
 * communicators), nccl_stream.c (where an operation runs: the device's stream, the NCCL
 * communicators, requests as CUDA events), nccl_ops.c (comm_v1's operations: one descriptor
 * each, run on host memory over MPI before the device is open, else enqueued on NCCL) and
 * nccl_p2p.c (send/recv on the device: queued, issued in groups on a stream of their own). */
#ifndef LOOM_NCCL_INTERNAL_H
#define LOOM_NCCL_INTERNAL_H

#include <cuda_runtime_api.h>
#include <loom/loom.h>
#include <mpi.h>
#include <nccl.h>

/* A communicator: the MPI one (control plane, and every operation before the device is open)
 * and two NCCL communicators over the same ranks, both made by nccl_open_comms: `nccl` for the
 * collectives on the device's stream, `p2p` for send/recv on the p2p stream (nccl_p2p.c: NCCL
 * runs one communicator's operations in issue order, and ranks interleave their collectives and
 * point-to-point groups differently). */
struct loom_comm {
  MPI_Comm mpi;
  ncclComm_t nccl, p2p; /* NULL until nccl_open_comms */
  int rank, size;
  struct loom_comm *next; /* every communicator, newest first: abort(), nccl_open_comms */
};

/* An operation handed out with a request: the CUDA event recorded after it (on the device's
 * stream, or the p2p stream for send/recv), an MPI request (send/recv on host memory before the
 * device is open), or neither for one already complete. A send/recv still in the p2p queue is
 * `queued`: waiting or testing it issues the queue first. */
struct loom_request {
  cudaEvent_t done;
  MPI_Request mpi; /* MPI_REQUEST_NULL unless a host-memory send/recv */
  int queued;      /* in the p2p queue, not issued yet (no event yet) */
  int failed;      /* its group failed to issue: the error wait() returns (message set) */
  loom_comm *comm; /* watched for asynchronous errors while waiting */
};

typedef struct nccl_p2p_op nccl_p2p_op;

typedef struct nccl_ctx {
  const loom_host_api_v1 *api;
  loom_host *host;
  struct loom_comm world;
  int initialized_here; /* we called MPI_Init, so we call MPI_Finalize */
  int opened;           /* nccl_open_comms ran: every communicator has its NCCL ones */
  /* the p2p queue (nccl_p2p.c): posted, not yet issued send/recv, in posting order */
  nccl_p2p_op *queue;
  size_t n_queue, cap_queue;
  unsigned long posted;   /* send/recv posted so far: each queued op's posting order */
  cudaStream_t p2p_stream; /* created at the first issue */
} nccl_ctx;

/* ---- errors (nccl_stream.c): set the host's message "WHAT failed: REASON", return the code */
int nccl_mpi_fail(nccl_ctx *c, int mpi_rc, const char *what);        /* LOOM_REMOTE */
int nccl_nccl_fail(nccl_ctx *c, ncclResult_t rc, const char *what);  /* usage or REMOTE */
int nccl_cuda_fail(nccl_ctx *c, cudaError_t rc, const char *what);   /* LOOM_SYSTEM */

/* ---- where an operation runs (nccl_stream.c) ---- */

/* The device's stream in *stream with *on_device = 1, or *on_device = 0 while no device is
 * open (host memory: MPI). A device without a native CUDA stream: LOOM_UNSUPPORTED. */
int nccl_device_stream(nccl_ctx *c, cudaStream_t *stream, int *on_device);
/* The NCCL communicators of every communicator (the world, then each split in the order it was
 * made), at the first device operation; nothing once done. See nccl_stream.c. */
int nccl_open_comms(nccl_ctx *c);
/* One communicator's pair (collective over its ranks: rank 0's ncclUniqueIds broadcast over
 * MPI): nccl_open_comms, and a split made after it. */
int nccl_open_comm(nccl_ctx *c, loom_comm *comm);
/* A fresh request (no event, no MPI request) watching comm; NULL when out of memory. */
loom_request *nccl_request_new(loom_comm *comm);
/* After enqueuing on `stream`: record the completion event and hand it out as *req, or (req
 * NULL) wait for it, watching `comm` for asynchronous errors. */
int nccl_finish(nccl_ctx *c, loom_comm *comm, cudaStream_t stream, loom_request **req);
/* An already complete operation's request (no event) into *req; nothing when req is NULL. */
int nccl_completed(loom_request **req);
/* cudaEventQuery(ev), clearing the thread's last error when it says NotReady (no failure). */
cudaError_t nccl_query_event(cudaEvent_t ev);
/* Wait for `ev` while watching comm's NCCL communicators for asynchronous errors (a peer died,
 * the communicator was aborted): LOOM_REMOTE with NCCL's message then, never a hang. */
int nccl_wait_event(nccl_ctx *c, loom_comm *comm, cudaEvent_t ev);
/* comm_v1's test and wait (nccl_p2p.c): a queued send/recv issues the queue first. */
int nccl_test(void *ctx, loom_request *req, int *done);
int nccl_wait(void *ctx, loom_request *req);

/* ---- point to point on the device (nccl_p2p.c) ---- */
/* Queue a send (send = 1) or receive of count elements of t with peer under tag; req NULL:
 * blocking (queued, the queue issued, waited). */
int nccl_p2p_post(nccl_ctx *c, loom_comm *comm, int send, void *buf, size_t count,
                  ncclDataType_t t, int peer, int tag, loom_request **req);
/* Issue every queued send/recv in one NCCL group (nothing when none is queued): what every
 * call other than a non-blocking send/recv post does first. */
int nccl_p2p_flush(nccl_ctx *c);

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
