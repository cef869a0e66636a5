/* Internal to mpi.so: its types, shared by mpi_comm.c (the plugin's table and lifecycle),
 * mpi_staging.c (the table's collectives: device memory that is not host memory staged through
 * host buffers, then the mpi_raw_* call) and mpi_raw.c (the MPI calls on host buffers). */
#ifndef LOOM_MPI_INTERNAL_H
#define LOOM_MPI_INTERNAL_H

#include <loom/loom.h>
#include <mpi.h>

/* A communicator: `mpi` for Open MPI's collectives and the callers' send/recv, `p2p` its
 * duplicate (MPI_Comm_dup at split time) for the messages of mpi_owner.c's collectives, so they
 * never match anything else; `seq` numbers those collectives (their tags). */
struct loom_comm {
  MPI_Comm mpi;
  MPI_Comm p2p;      /* MPI_COMM_NULL until duplicated */
  unsigned long seq; /* owner collectives started on it so far (the same on every rank) */
  /* option "hierarchical" (mpi_hier.h), when the communicator spans several nodes with several
   * of its ranks on each: its ranks on this node, and its ranks with this rank's index in the
   * node (one per node). NULL: flat */
  struct loom_comm *node, *cross;
};
typedef struct owner_op owner_op;
/* An outstanding operation; the uneven collectives keep their int count/displacement arrays
 * here because MPI reads them until completion. */
/* A host copy of a device buffer, for a device that is not host-addressable. */
typedef struct stage {
  void *host;      /* malloc'd, `bytes` */
  void *dev;       /* the device buffer it stands for */
  size_t bytes;
  int copy_back;   /* received data: from_host into dev when the operation completes */
} stage;

struct loom_request {
  MPI_Request mpi; /* Open MPI's own operation, or MPI_REQUEST_NULL */
  owner_op *own;   /* one of loom's own collectives (mpi_owner.c), or NULL */
  int *counts, *displs;
  stage st[2];     /* staging (send, recv) for a device that is not host-addressable */
  int n_st;
  const loom_device_v1 *dev;
  void *dev_ctx;
};

typedef struct mpi_ctx {
  const loom_host_api_v1 *api;
  loom_host *host;
  struct loom_comm world;
  int initialized_here; /* we called MPI_Init, so we call MPI_Finalize */
  MPI_Op sum_bf16, sum_f16; /* the 16-bit sums (user ops; MPI_OP_NULL until created) */
  int own;                  /* option "collectives": 1 "loom" (default, mpi_owner.c), 0 "mpi" */
  size_t segment_bytes;     /* option "segment_bytes": unit of transfer and reduction (own) */
  int tag_ub;               /* MPI_TAG_UB */
  owner_op *active;         /* own collectives not yet complete (all progressed together) */
  owner_op *hier_active;    /* hierarchical all_reduces not yet complete (mpi_owner.c) */
  int hierarchical;         /* option "hierarchical" (mpi_hier.h) */
  int node_size;            /* option "node_size": ranks per node, consecutive; 0: the nodes of
                               MPI_COMM_TYPE_SHARED */
  int node_id;              /* this rank's node (hierarchical): the lowest world rank on it */
} mpi_ctx;

/* out[i] = a[i] + b[i] for n elements of dt (LOOM_F32, LOOM_BF16, LOOM_F16); 16-bit values are
 * widened to fp32, added and rounded back once (nearest even). out may be a or b (mpi_sum.c). */
void mpi_sum(loom_dtype dt, void *out, const void *a, const void *b, size_t n);
/* Set the plugin's error from an MPI error code: "<what> failed: <MPI's string>"; LOOM_REMOTE
 * (mpi_raw.c). */
int mpi_fail(mpi_ctx *c, int mpi_err, const char *what);
/* Return mpi_fail(...) from the calling function when an MPI call fails. */
#define CHECK_MPI(c, call, what)            \
  do {                                      \
    int rc_ = (call);                       \
    if (rc_ != MPI_SUCCESS) return mpi_fail((c), rc_, (what)); \
  } while (0)

/* The MPI operations on host buffers (mpi_raw.c): comm_v1's semantics, req NULL = blocking. */
int mpi_raw_all_reduce(void *ctx, loom_comm *comm, void *buf, size_t count, loom_dtype dt,
                       loom_red_op op, loom_request **req);
int mpi_raw_reduce_scatter(void *ctx, loom_comm *comm, const void *send, void *recv,
                           size_t recv_count, loom_dtype dt, loom_red_op op,
                           loom_request **req);
int mpi_raw_all_gather(void *ctx, loom_comm *comm, const void *send, void *recv,
                       size_t send_count, loom_dtype dt, loom_request **req);
int mpi_raw_broadcast(void *ctx, loom_comm *comm, void *buf, size_t count, loom_dtype dt,
                      int root, loom_request **req);
int mpi_raw_send(void *ctx, loom_comm *comm, const void *buf, size_t count, loom_dtype dt,
                 int peer, int tag, loom_request **req);
int mpi_raw_recv(void *ctx, loom_comm *comm, void *buf, size_t count, loom_dtype dt, int peer,
                 int tag, loom_request **req);
int mpi_raw_reduce_scatter_v(void *ctx, loom_comm *comm, const void *send, void *recv,
                             const size_t *counts, loom_dtype dt, loom_red_op op,
                             loom_request **req);
int mpi_raw_all_gather_v(void *ctx, loom_comm *comm, const void *send, void *recv,
                         const size_t *counts, loom_dtype dt, loom_request **req);
/* Complete n stages: copy received data back to the device (when ok), free the host copies. */
void mpi_stages_finish(const loom_device_v1 *dev, void *dev_ctx, stage *st, int n, int ok);
/* comm_v1's test, wait and barrier (mpi_raw.c): a request of either kind (Open MPI's or an own
 * collective) is driven, completed and freed, its stages finished, by these. */
int mpi_test(void *ctx, loom_request *req, int *done);
int mpi_wait(void *ctx, loom_request *req);
int mpi_barrier(void *ctx, loom_comm *comm);

/* The table's collectives (mpi_staging.c): the mpi_raw_* call, through host copies when the
 * host's device is not host-addressable. */
int mpi_all_reduce(void *ctx, loom_comm *comm, void *buf, size_t count, loom_dtype dt,
                   loom_red_op op, loom_request **req);
int mpi_reduce_scatter(void *ctx, loom_comm *comm, const void *send, void *recv,
                       size_t recv_count, loom_dtype dt, loom_red_op op, loom_request **req);
int mpi_all_gather(void *ctx, loom_comm *comm, const void *send, void *recv, size_t send_count,
                   loom_dtype dt, loom_request **req);
int mpi_broadcast(void *ctx, loom_comm *comm, void *buf, size_t count, loom_dtype dt, int root,
                  loom_request **req);
int mpi_send(void *ctx, loom_comm *comm, const void *buf, size_t count, loom_dtype dt, int peer,
             int tag, loom_request **req);
int mpi_recv(void *ctx, loom_comm *comm, void *buf, size_t count, loom_dtype dt, int peer,
             int tag, loom_request **req);
int mpi_reduce_scatter_v(void *ctx, loom_comm *comm, const void *send, void *recv,
                         const size_t *counts, loom_dtype dt, loom_red_op op,
                         loom_request **req);
int mpi_all_gather_v(void *ctx, loom_comm *comm, const void *send, void *recv,
                     const size_t *counts, loom_dtype dt, loom_request **req);

#endif
