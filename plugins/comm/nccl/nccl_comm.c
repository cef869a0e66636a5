/* nccl.so — the communication backend for ranks on the CUDA device (cuda.so), on NCCL.
 *
 * Open MPI stays the launcher and the control plane: MPI_Init joins the job, the mesh's
 * communicators are MPI_Comm_split like mpi.so's, and each of them gets its NCCL communicator
 * (one per mesh axis: dp, tp, pp, world, and the pipeline's embedding group) the first time a
 * collective runs on it: rank 0 of the group makes the ncclUniqueId and MPI_Bcasts it, every
 * rank calls ncclCommInitRank. Lazily, because the mesh is built before the device is opened
 * (comm_v1.h): collectives before that — the host's configuration check — are on host memory
 * and run over MPI.
 *
 * Once the device is open every buffer is device memory and every operation is enqueued on the
 * device's native stream (device_v1.native_stream), the stream its kernels run on, so a
 * collective is ordered after the kernels that produced its input and overlaps the host (ddp's
 * bucket overlap, ZeRO-3's prefetch): a request is a CUDA event recorded after the operation;
 * test() queries it, wait() waits for it. A blocking call (req NULL) waits the same way.
 * Waiting polls ncclCommGetAsyncError, so a failed or aborted peer surfaces as LOOM_REMOTE with
 * NCCL's message (and the host brings the job down) instead of a hang; abort() calls
 * ncclCommAbort on every communicator first, then MPI_Abort, so no rank stays in a kernel.
 *
 * Uneven collectives: reduce_scatter_v is one ncclReduce per block (root = the block's rank)
 * and all_gather_v one ncclBroadcast per block, each set in one ncclGroupStart/End. Point to
 * point: ncclSend / ncclRecv; NCCL matches them by order per peer, not by tag, which is how
 * loom's pipeline issues them. bf16 and fp16 sums are NCCL's native ncclBfloat16 / ncclFloat16.
 *
 * Refuses clearly: no CUDA device (create), a device that is not CUDA (the host checks the caps:
 * this plugin declares device memory only). NCCL refuses two ranks on one GPU: use mpi.so
 * (which stages through host memory) to share a GPU between ranks. */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <loom/loom.h>
#include <mpi.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

struct loom_comm {
  MPI_Comm mpi;
  ncclComm_t nccl; /* created at the first device-memory operation */
  int rank, size;
  struct loom_comm *next; /* every communicator, for abort() */
};

struct loom_request {
  cudaEvent_t done;
  loom_comm *comm;
};

typedef struct nccl_ctx {
  const loom_host_api_v1 *api;
  loom_host *host;
  struct loom_comm world;
  int initialized_here;
} nccl_ctx;

static int mpi_fail(nccl_ctx *c, int rc, const char *what) {
  char msg[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  c->api->set_error(c->host, "%s failed: %s", what, msg);
  return LOOM_REMOTE;
}
static int nccl_fail(nccl_ctx *c, ncclResult_t rc, const char *what) {
  c->api->set_error(c->host, "%s failed: %s (%s)", what, ncclGetErrorString(rc),
                    ncclGetLastError(NULL) ? ncclGetLastError(NULL) : "");
  return rc == ncclInvalidArgument || rc == ncclInvalidUsage ? LOOM_INVALID_USAGE : LOOM_REMOTE;
}
static int cuda_fail(nccl_ctx *c, cudaError_t rc, const char *what) {
  c->api->set_error(c->host, "%s failed: %s", what, cudaGetErrorString(rc));
  return LOOM_SYSTEM;
}
#define CHECK_NCCL(c, call, what)                       \
  do {                                                  \
    ncclResult_t r_ = (call);                           \
    if (r_ != ncclSuccess) return nccl_fail((c), r_, (what)); \
  } while (0)

static int nccl_type(loom_dtype dt, ncclDataType_t *out) {
  switch (dt) {
    case LOOM_F32: *out = ncclFloat32; return 1;
    case LOOM_F64: *out = ncclFloat64; return 1;
    case LOOM_BF16: *out = ncclBfloat16; return 1;
    case LOOM_F16: *out = ncclFloat16; return 1;
    case LOOM_I32: *out = ncclInt32; return 1;
    case LOOM_I64: *out = ncclInt64; return 1;
    case LOOM_U8: *out = ncclUint8; return 1;
  }
  return 0;
}
static ncclRedOp_t nccl_op(loom_red_op op) {
  return op == LOOM_OP_MAX ? ncclMax : op == LOOM_OP_MIN ? ncclMin : ncclSum;
}
static MPI_Datatype mpi_type(loom_dtype dt) {
  switch (dt) {
    case LOOM_F32: return MPI_FLOAT;
    case LOOM_F64: return MPI_DOUBLE;
    case LOOM_I32: return MPI_INT32_T;
    case LOOM_I64: return MPI_INT64_T;
    case LOOM_U8: return MPI_UINT8_T;
    case LOOM_BF16: case LOOM_F16: return MPI_DATATYPE_NULL; /* not before the device */
  }
  return MPI_DATATYPE_NULL;
}
static MPI_Op mpi_op(loom_red_op op) {
  return op == LOOM_OP_MAX ? MPI_MAX : op == LOOM_OP_MIN ? MPI_MIN : MPI_SUM;
}

/* ---- where an operation runs ---- */

/* The device's stream, or NULL while no device is open (host memory: MPI). A device without a
 * native stream here is refused (the host already refuses a host-addressable one by caps). */
static int device_stream(nccl_ctx *c, cudaStream_t *stream, int *on_device) {
  void *dctx = NULL;
  const loom_device_v1 *dev = c->api->device(c->host, &dctx);
  *on_device = dev != NULL;
  *stream = NULL;
  if (!dev) return LOOM_OK;
  size_t need = offsetof(loom_device_v1, native_stream) + sizeof dev->native_stream;
  void *s = dev->hdr.struct_size >= need && dev->native_stream ? dev->native_stream(dctx) : NULL;
  if (!s) {
    c->api->set_error(c->host, "nccl.so needs the CUDA device (device.type \"cuda\"): device "
                      "'%s' has no native CUDA stream; use comm \"mpi\" with it",
                      dev->hdr.name ? dev->hdr.name : "?");
    return LOOM_UNSUPPORTED;
  }
  *stream = (cudaStream_t)s;
  return LOOM_OK;
}

/* The group's NCCL communicator, made on first use (collective over the group). */
static int ensure_nccl(nccl_ctx *c, loom_comm *comm) {
  if (comm->nccl) return LOOM_OK;
  ncclUniqueId id;
  if (comm->rank == 0) CHECK_NCCL(c, ncclGetUniqueId(&id), "ncclGetUniqueId");
  int rc = MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, comm->mpi);
  if (rc != MPI_SUCCESS) return mpi_fail(c, rc, "MPI_Bcast of the ncclUniqueId");
  CHECK_NCCL(c, ncclCommInitRank(&comm->nccl, comm->size, id, comm->rank), "ncclCommInitRank");
  return LOOM_OK;
}

/* Wait for `ev` while watching the communicator for asynchronous errors (a peer died, the
 * communicator was aborted): LOOM_REMOTE with NCCL's message then, never a hang. */
static int wait_event(nccl_ctx *c, loom_comm *comm, cudaEvent_t ev) {
  for (;;) {
    cudaError_t q = cudaEventQuery(ev);
    if (q == cudaSuccess) return LOOM_OK;
    if (q != cudaErrorNotReady) return cuda_fail(c, q, "cudaEventQuery");
    ncclResult_t async = ncclSuccess;
    if (comm && comm->nccl) {
      ncclResult_t r = ncclCommGetAsyncError(comm->nccl, &async);
      if (r != ncclSuccess) return nccl_fail(c, r, "ncclCommGetAsyncError");
      if (async != ncclSuccess && async != ncclInProgress) {
        ncclCommAbort(comm->nccl);
        comm->nccl = NULL;
        return nccl_fail(c, async, "a collective (asynchronous error)");
      }
    }
  }
}

/* After enqueuing on `stream`: record the completion event; hand it out (req) or wait. */
static int finish(nccl_ctx *c, loom_comm *comm, cudaStream_t stream, loom_request **req) {
  cudaEvent_t ev;
  cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (e != cudaSuccess) return cuda_fail(c, e, "cudaEventCreate");
  e = cudaEventRecord(ev, stream);
  if (e != cudaSuccess) {
    cudaEventDestroy(ev);
    return cuda_fail(c, e, "cudaEventRecord");
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

/* Common start of a device operation: stream, communicator, dtype. *host_path = 1 when no
 * device is open yet (the caller runs MPI on host memory). */
static int begin(nccl_ctx *c, loom_comm *comm, loom_dtype dt, cudaStream_t *stream,
                 ncclDataType_t *t, int *host_path) {
  int on_device, rc = device_stream(c, stream, &on_device);
  if (rc) return rc;
  *host_path = !on_device;
  if (!on_device) {
    if (mpi_type(dt) == MPI_DATATYPE_NULL) {
      c->api->set_error(c->host, "dtype %d on host memory before the device is open", dt);
      return LOOM_UNSUPPORTED;
    }
    return LOOM_OK;
  }
  if (!nccl_type(dt, t)) {
    c->api->set_error(c->host, "dtype %d is not supported by nccl.so", dt);
    return LOOM_UNSUPPORTED;
  }
  return ensure_nccl(c, comm);
}

/* ---- lifecycle ---- */

static int nccl_create(const loom_host_api_v1 *api, loom_host *host, const loom_options *opts,
                       void **out) {
  static const char *const keys[] = {NULL};
  if (api->opt_check_keys(host, opts, keys) != LOOM_OK) return LOOM_INVALID_CONFIG;
  int ndev = 0;
  cudaError_t ce = cudaGetDeviceCount(&ndev);
  if (ce != cudaSuccess || ndev == 0) {
    api->set_error(host, "nccl.so needs a CUDA GPU on every rank: %s (use comm \"mpi\" on the "
                   "CPU device)", ce != cudaSuccess ? cudaGetErrorString(ce)
                                                    : "cudaGetDeviceCount found 0 devices");
    return LOOM_UNSUPPORTED;
  }
  nccl_ctx *c = calloc(1, sizeof *c);
  if (!c) return LOOM_NOMEM;
  c->api = api;
  c->host = host;
  /* Open MPI's components need libmpi's symbols global; we were loaded RTLD_LOCAL */
  dlopen("libmpi.so.40", RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    int provided;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
      api->set_error(host, "MPI_Init_thread failed (is this run under mpirun/srun?)");
      free(c);
      return LOOM_SYSTEM;
    }
    c->initialized_here = 1;
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  c->world.mpi = MPI_COMM_WORLD;
  MPI_Comm_rank(MPI_COMM_WORLD, &c->world.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &c->world.size);
  *out = c;
  return LOOM_OK;
}

static void nccl_destroy(void *ctx) {
  nccl_ctx *c = ctx;
  if (!c) return;
  if (c->world.nccl) ncclCommDestroy(c->world.nccl);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (c->initialized_here && !finalized) MPI_Finalize();
  free(c);
}

static int nccl_world(void *ctx, int *rank, int *size) {
  nccl_ctx *c = ctx;
  *rank = c->world.rank;
  *size = c->world.size;
  return LOOM_OK;
}

static loom_comm *nccl_world_comm(void *ctx) { return &((nccl_ctx *)ctx)->world; }

static int nccl_split(void *ctx, loom_comm *parent, int color, int key, loom_comm **out) {
  nccl_ctx *c = ctx;
  loom_comm *nc = calloc(1, sizeof *nc);
  if (!nc) return LOOM_NOMEM;
  int rc = MPI_Comm_split(parent ? parent->mpi : MPI_COMM_WORLD, color, key, &nc->mpi);
  if (rc != MPI_SUCCESS) {
    free(nc);
    return mpi_fail(c, rc, "MPI_Comm_split");
  }
  MPI_Comm_set_errhandler(nc->mpi, MPI_ERRORS_RETURN);
  MPI_Comm_rank(nc->mpi, &nc->rank);
  MPI_Comm_size(nc->mpi, &nc->size);
  nc->next = c->world.next; /* the list abort() walks */
  c->world.next = nc;
  *out = nc;
  return LOOM_OK;
}

static void nccl_comm_free(void *ctx, loom_comm *comm) {
  nccl_ctx *c = ctx;
  if (!comm || comm == &c->world) return;
  for (loom_comm **p = &c->world.next; *p; p = &(*p)->next)
    if (*p == comm) {
      *p = comm->next;
      break;
    }
  if (comm->nccl) ncclCommDestroy(comm->nccl);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&comm->mpi);
  free(comm);
}

/* ---- collectives ---- */

static int host_done(nccl_ctx *c, int rc, const char *what, loom_request **req) {
  if (rc != MPI_SUCCESS) return mpi_fail(c, rc, what);
  if (req) *req = calloc(1, sizeof **req); /* already complete: no event */
  return req && !*req ? LOOM_NOMEM : LOOM_OK;
}

static int nccl_all_reduce(void *ctx, loom_comm *comm, void *buf, size_t count, loom_dtype dt,
                           loom_red_op op, loom_request **req) {
  nccl_ctx *c = ctx;
  cudaStream_t s;
  ncclDataType_t t;
  int host, rc = begin(c, comm, dt, &s, &t, &host);
  if (rc) return rc;
  if (host)
    return host_done(c, MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, mpi_type(dt), mpi_op(op),
                                      comm->mpi), "MPI_Allreduce", req);
  CHECK_NCCL(c, ncclAllReduce(buf, buf, count, t, nccl_op(op), comm->nccl, s), "ncclAllReduce");
  return finish(c, comm, s, req);
}

static int nccl_reduce_scatter(void *ctx, loom_comm *comm, const void *send, void *recv,
                               size_t recv_count, loom_dtype dt, loom_red_op op,
                               loom_request **req) {
  nccl_ctx *c = ctx;
  cudaStream_t s;
  ncclDataType_t t;
  int host, rc = begin(c, comm, dt, &s, &t, &host);
  if (rc) return rc;
  if (host)
    return host_done(c, MPI_Reduce_scatter_block(send, recv, (int)recv_count, mpi_type(dt),
                                                 mpi_op(op), comm->mpi),
                     "MPI_Reduce_scatter_block", req);
  CHECK_NCCL(c, ncclReduceScatter(send, recv, recv_count, t, nccl_op(op), comm->nccl, s),
             "ncclReduceScatter");
  return finish(c, comm, s, req);
}

static int nccl_all_gather(void *ctx, loom_comm *comm, const void *send, void *recv,
                           size_t send_count, loom_dtype dt, loom_request **req) {
  nccl_ctx *c = ctx;
  cudaStream_t s;
  ncclDataType_t t;
  int host, rc = begin(c, comm, dt, &s, &t, &host);
  if (rc) return rc;
  if (host) {
    if (send == (const char *)recv + (size_t)comm->rank * send_count * loom_dtype_size(dt))
      send = MPI_IN_PLACE;
    return host_done(c, MPI_Allgather(send, (int)send_count, mpi_type(dt), recv,
                                      (int)send_count, mpi_type(dt), comm->mpi),
                     "MPI_Allgather", req);
  }
  /* in place (send = this rank's block of recv) is NCCL's own in-place form */
  CHECK_NCCL(c, ncclAllGather(send, recv, send_count, t, comm->nccl, s), "ncclAllGather");
  return finish(c, comm, s, req);
}

static int nccl_broadcast(void *ctx, loom_comm *comm, void *buf, size_t count, loom_dtype dt,
                          int root, loom_request **req) {
  nccl_ctx *c = ctx;
  cudaStream_t s;
  ncclDataType_t t;
  int host, rc = begin(c, comm, dt, &s, &t, &host);
  if (rc) return rc;
  if (host)
    return host_done(c, MPI_Bcast(buf, (int)count, mpi_type(dt), root, comm->mpi), "MPI_Bcast",
                     req);
  CHECK_NCCL(c, ncclBroadcast(buf, buf, count, t, root, comm->nccl, s), "ncclBroadcast");
  return finish(c, comm, s, req);
}

static int nccl_send(void *ctx, loom_comm *comm, const void *buf, size_t count, loom_dtype dt,
                     int peer, int tag, loom_request **req) {
  nccl_ctx *c = ctx;
  cudaStream_t s;
  ncclDataType_t t;
  int host, rc = begin(c, comm, dt, &s, &t, &host);
  if (rc) return rc;
  if (host)
    return host_done(c, MPI_Send(buf, (int)count, mpi_type(dt), peer, tag, comm->mpi),
                     "MPI_Send", req);
  CHECK_NCCL(c, ncclSend(buf, count, t, peer, comm->nccl, s), "ncclSend");
  return finish(c, comm, s, req);
}

static int nccl_recv(void *ctx, loom_comm *comm, void *buf, size_t count, loom_dtype dt,
                     int peer, int tag, loom_request **req) {
  nccl_ctx *c = ctx;
  cudaStream_t s;
  ncclDataType_t t;
  int host, rc = begin(c, comm, dt, &s, &t, &host);
  if (rc) return rc;
  if (host)
    return host_done(c, MPI_Recv(buf, (int)count, mpi_type(dt), peer, tag, comm->mpi,
                                 MPI_STATUS_IGNORE), "MPI_Recv", req);
  CHECK_NCCL(c, ncclRecv(buf, count, t, peer, comm->nccl, s), "ncclRecv");
  return finish(c, comm, s, req);
}

static int nccl_reduce_scatter_v(void *ctx, loom_comm *comm, const void *send, void *recv,
                                 const size_t *counts, loom_dtype dt, loom_red_op op,
                                 loom_request **req) {
  nccl_ctx *c = ctx;
  cudaStream_t s;
  ncclDataType_t t;
  int host, rc = begin(c, comm, dt, &s, &t, &host);
  if (rc) return rc;
  if (host) {
    c->api->set_error(c->host, "reduce_scatter_v on host memory before the device is open");
    return LOOM_UNSUPPORTED;
  }
  size_t esz = loom_dtype_size(dt), at = 0;
  CHECK_NCCL(c, ncclGroupStart(), "ncclGroupStart");
  for (int i = 0; i < comm->size; i++) {
    ncclResult_t r = ncclReduce((const char *)send + at * esz, recv, counts[i], t, nccl_op(op),
                                i, comm->nccl, s);
    if (r != ncclSuccess) {
      ncclGroupEnd();
      return nccl_fail(c, r, "ncclReduce (reduce_scatter_v)");
    }
    at += counts[i];
  }
  CHECK_NCCL(c, ncclGroupEnd(), "ncclGroupEnd (reduce_scatter_v)");
  return finish(c, comm, s, req);
}

static int nccl_all_gather_v(void *ctx, loom_comm *comm, const void *send, void *recv,
                             const size_t *counts, loom_dtype dt, loom_request **req) {
  nccl_ctx *c = ctx;
  cudaStream_t s;
  ncclDataType_t t;
  int host, rc = begin(c, comm, dt, &s, &t, &host);
  if (rc) return rc;
  if (host) {
    c->api->set_error(c->host, "all_gather_v on host memory before the device is open");
    return LOOM_UNSUPPORTED;
  }
  size_t esz = loom_dtype_size(dt), at = 0;
  CHECK_NCCL(c, ncclGroupStart(), "ncclGroupStart");
  for (int i = 0; i < comm->size; i++) {
    char *dst = (char *)recv + at * esz;
    /* the root's send may be its block of recv (in place): NCCL allows send == recv there */
    ncclResult_t r = ncclBroadcast(i == comm->rank ? send : dst, dst, counts[i], t, i,
                                   comm->nccl, s);
    if (r != ncclSuccess) {
      ncclGroupEnd();
      return nccl_fail(c, r, "ncclBroadcast (all_gather_v)");
    }
    at += counts[i];
  }
  CHECK_NCCL(c, ncclGroupEnd(), "ncclGroupEnd (all_gather_v)");
  return finish(c, comm, s, req);
}

static int nccl_test(void *ctx, loom_request *req, int *done) {
  nccl_ctx *c = ctx;
  if (!req->done) {
    *done = 1;
    return LOOM_OK;
  }
  cudaError_t q = cudaEventQuery(req->done);
  if (q == cudaSuccess || q == cudaErrorNotReady) {
    *done = q == cudaSuccess;
    return LOOM_OK;
  }
  return cuda_fail(c, q, "cudaEventQuery");
}

static int nccl_wait(void *ctx, loom_request *req) {
  nccl_ctx *c = ctx;
  int rc = req->done ? wait_event(c, req->comm, req->done) : LOOM_OK;
  if (req->done) cudaEventDestroy(req->done);
  free(req);
  return rc;
}

static int nccl_barrier(void *ctx, loom_comm *comm) {
  nccl_ctx *c = ctx;
  cudaStream_t s;
  int on_device, rc = device_stream(c, &s, &on_device);
  if (rc) return rc;
  if (on_device) { /* what this rank enqueued is done, then the ranks meet */
    cudaError_t e = cudaStreamSynchronize(s);
    if (e != cudaSuccess) return cuda_fail(c, e, "cudaStreamSynchronize");
  }
  rc = MPI_Barrier(comm->mpi);
  return rc == MPI_SUCCESS ? LOOM_OK : mpi_fail(c, rc, "MPI_Barrier");
}

static int nccl_local(void *ctx, int *local_rank, int *local_size) {
  nccl_ctx *c = ctx;
  MPI_Comm node;
  int rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  if (rc != MPI_SUCCESS) return mpi_fail(c, rc, "MPI_Comm_split_type");
  MPI_Comm_rank(node, local_rank);
  MPI_Comm_size(node, local_size);
  MPI_Comm_free(&node);
  return LOOM_OK;
}

/* A rank failed: abort every NCCL communicator (peers blocked in a kernel see the error and
 * return), then take the job down. */
static void nccl_abort(void *ctx, int exit_code) {
  nccl_ctx *c = ctx;
  for (loom_comm *m = c ? &c->world : NULL; m; m = m->next)
    if (m->nccl) {
      ncclCommAbort(m->nccl);
      m->nccl = NULL;
    }
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  exit(exit_code); /* MPI_Abort does not return; this is for the compiler */
}

LOOM_EXPORT const loom_comm_v1 loom_plugin_v1 = {
  .hdr = LOOM_PLUGIN_HEADER_INIT(LOOM_KIND_COMM, "nccl", "1.0.0",
                                 "NCCL collectives on the CUDA device's stream (MPI launches)",
                                 LOOM_COMM_CAP_DEVICE_MEMORY, loom_comm_v1),
  .create = nccl_create,
  .destroy = nccl_destroy,
  .world = nccl_world,
  .world_comm = nccl_world_comm,
  .split = nccl_split,
  .comm_free = nccl_comm_free,
  .all_reduce = nccl_all_reduce,
  .reduce_scatter = nccl_reduce_scatter,
  .all_gather = nccl_all_gather,
  .broadcast = nccl_broadcast,
  .send = nccl_send,
  .recv = nccl_recv,
  .test = nccl_test,
  .wait = nccl_wait,
  .barrier = nccl_barrier,
  .abort = nccl_abort,
  .reduce_scatter_v = nccl_reduce_scatter_v,
  .all_gather_v = nccl_all_gather_v,
  .local = nccl_local,
};
