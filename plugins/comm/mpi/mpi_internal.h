/* Internal to mpi.so: its types, shared by mpi_comm.c (MPI calls on host buffers: the
 * plugin's table and lifecycle) and mpi_staging.c (the table's collectives: device memory that
 * is not host memory staged through host buffers, then the mpi_raw_* call). */
#ifndef LOOM_MPI_INTERNAL_H
#define LOOM_MPI_INTERNAL_H

#include <loom/loom.h>
#include <mpi.h>

struct loom_comm { MPI_Comm mpi; };
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
  MPI_Request mpi;
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
} mpi_ctx;

/* The MPI operations on host buffers (mpi_comm.c): comm_v1's semantics, req NULL = blocking. */
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
