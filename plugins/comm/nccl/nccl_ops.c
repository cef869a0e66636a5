/* nccl.so: comm_v1's operations. Each table entry describes its operation (one `op`) and hands
 * it to run(): before the device is open the buffers are host memory and the operation is the
 * blocking MPI call (the host's configuration check); after it, the NCCL call enqueued on the
 * device's stream, completed by nccl_finish (a request event, or a wait).
 *
 * Uneven collectives: reduce_scatter_v is one ncclReduce per block (root = the block's rank)
 * and all_gather_v one ncclBroadcast per block, each set in one ncclGroupStart/End. Point to
 * point on the device: queued and issued in groups on a stream of their own (nccl_p2p.c, which
 * says how tags and independent progress are kept); every other operation first issues what is
 * queued, so nothing posted is held back while this rank waits. On host memory (before the
 * device is open) send/recv are MPI_Isend/MPI_Irecv, the blocking ones waited at once. bf16 and
 * fp16 sums are NCCL's native ncclBfloat16 / ncclFloat16. */
#include <stdlib.h>

#include "comm_mpi.h"
#include "nccl_internal.h"

typedef enum op_kind {
  OP_ALL_REDUCE,
  OP_REDUCE_SCATTER,
  OP_ALL_GATHER,
  OP_BROADCAST,
  OP_SEND,
  OP_RECV,
  OP_REDUCE_SCATTER_V,
  OP_ALL_GATHER_V,
} op_kind;

/* One operation as its table entry received it: `buf` for all_reduce, broadcast and recv (the
 * buffer written), `send` for send, `send` and `recv` for the others. */
typedef struct op {
  op_kind kind;
  void *buf;
  const void *send;
  void *recv;
  size_t count;         /* buf's elements; recv's (reduce_scatter) or send's (all_gather) */
  const size_t *counts; /* the _v operations: each rank's block, in elements */
  loom_dtype dt;
  loom_red_op red;
  int peer; /* broadcast's root; send's and recv's peer */
  int tag;  /* send and recv (NCCL has none: nccl_p2p.c orders by it) */
} op;

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
static ncclRedOp_t nccl_red(loom_red_op op) {
  return op == LOOM_OP_MAX ? ncclMax : op == LOOM_OP_MIN ? ncclMin : ncclSum;
}
/* bf16 and fp16: none (not before the device) */
static MPI_Datatype mpi_type(loom_dtype dt) { return comm_mpi_type(dt, MPI_DATATYPE_NULL); }
static MPI_Op mpi_red(loom_red_op op) {
  return op == LOOM_OP_MAX ? MPI_MAX : op == LOOM_OP_MIN ? MPI_MIN : MPI_SUM;
}

/* Before the device is open: the blocking MPI call on host memory. */
static int run_on_host(nccl_ctx *c, loom_comm *comm, const op *o) {
  MPI_Datatype t = mpi_type(o->dt);
  int n = (int)o->count, rc;
  const char *what;
  switch (o->kind) {
    case OP_ALL_REDUCE:
      what = "MPI_Allreduce";
      rc = MPI_Allreduce(MPI_IN_PLACE, o->buf, n, t, mpi_red(o->red), comm->mpi);
      break;
    case OP_REDUCE_SCATTER:
      what = "MPI_Reduce_scatter_block";
      rc = MPI_Reduce_scatter_block(o->send, o->recv, n, t, mpi_red(o->red), comm->mpi);
      break;
    case OP_ALL_GATHER: {
      /* in place: send is this rank's block of recv */
      const void *send = o->send;
      if (send == (const char *)o->recv + (size_t)comm->rank * o->count * loom_dtype_size(o->dt))
        send = MPI_IN_PLACE;
      what = "MPI_Allgather";
      rc = MPI_Allgather(send, n, t, o->recv, n, t, comm->mpi);
      break;
    }
    case OP_BROADCAST:
      what = "MPI_Bcast";
      rc = MPI_Bcast(o->buf, n, t, o->peer, comm->mpi);
      break;
    default:
      c->api->set_error(c->host, "%s on host memory before the device is open",
                        o->kind == OP_REDUCE_SCATTER_V ? "reduce_scatter_v" : "all_gather_v");
      return LOOM_UNSUPPORTED;
  }
  return rc == MPI_SUCCESS ? LOOM_OK : nccl_mpi_fail(c, rc, what);
}

/* Before the device is open, send/recv on host memory: MPI's non-blocking calls, so they keep
 * comm_v1's semantics (a blocking MPI_Send may wait for its receive). */
static int p2p_on_host(nccl_ctx *c, loom_comm *comm, const op *o, loom_request **req) {
  loom_request *r = nccl_request_new(comm);
  if (!r) return LOOM_NOMEM;
  MPI_Datatype t = mpi_type(o->dt);
  int n = (int)o->count;
  int rc = o->kind == OP_SEND ? MPI_Isend(o->send, n, t, o->peer, o->tag, comm->mpi, &r->mpi)
                              : MPI_Irecv(o->buf, n, t, o->peer, o->tag, comm->mpi, &r->mpi);
  if (rc != MPI_SUCCESS) {
    free(r);
    return nccl_mpi_fail(c, rc, o->kind == OP_SEND ? "MPI_Isend" : "MPI_Irecv");
  }
  if (!req) return nccl_wait(c, r);
  *req = r;
  return LOOM_OK;
}

/* The uneven collectives: one rooted call per rank's block, in one NCCL group. */
static int enqueue_blocks(nccl_ctx *c, loom_comm *comm, const op *o, ncclDataType_t t,
                          cudaStream_t s) {
  const int scatter = o->kind == OP_REDUCE_SCATTER_V;
  const char *what = scatter ? "ncclReduce (reduce_scatter_v)" : "ncclBroadcast (all_gather_v)";
  size_t esz = loom_dtype_size(o->dt), at = 0;
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) return nccl_nccl_fail(c, r, "ncclGroupStart");
  for (int i = 0; i < comm->size; i++) {
    if (scatter) {
      r = ncclReduce((const char *)o->send + at * esz, o->recv, o->counts[i], t,
                     nccl_red(o->red), i, comm->nccl, s);
    } else {
      char *dst = (char *)o->recv + at * esz;
      /* the root's send may be its block of recv (in place): NCCL allows send == recv there */
      r = ncclBroadcast(i == comm->rank ? o->send : dst, dst, o->counts[i], t, i, comm->nccl,
                        s);
    }
    if (r != ncclSuccess) {
      ncclGroupEnd();
      return nccl_nccl_fail(c, r, what);
    }
    at += o->counts[i];
  }
  r = ncclGroupEnd();
  return r == ncclSuccess ? LOOM_OK
                          : nccl_nccl_fail(c, r, scatter ? "ncclGroupEnd (reduce_scatter_v)"
                                                         : "ncclGroupEnd (all_gather_v)");
}

/* After the device is open: the NCCL call on the device's stream `s`. */
static int enqueue(nccl_ctx *c, loom_comm *comm, const op *o, ncclDataType_t t, cudaStream_t s) {
  ncclComm_t nc = comm->nccl;
  ncclResult_t r;
  const char *what;
  switch (o->kind) {
    case OP_ALL_REDUCE:
      what = "ncclAllReduce";
      r = ncclAllReduce(o->buf, o->buf, o->count, t, nccl_red(o->red), nc, s);
      break;
    case OP_REDUCE_SCATTER:
      what = "ncclReduceScatter";
      r = ncclReduceScatter(o->send, o->recv, o->count, t, nccl_red(o->red), nc, s);
      break;
    case OP_ALL_GATHER: /* in place (send = this rank's block of recv) is NCCL's own form */
      what = "ncclAllGather";
      r = ncclAllGather(o->send, o->recv, o->count, t, nc, s);
      break;
    case OP_BROADCAST:
      what = "ncclBroadcast";
      r = ncclBroadcast(o->buf, o->buf, o->count, t, o->peer, nc, s);
      break;
    default:
      return enqueue_blocks(c, comm, o, t, s);
  }
  return r == ncclSuccess ? LOOM_OK : nccl_nccl_fail(c, r, what);
}

/* Every operation: where it runs (host memory until the device is open), the dtype checked for
 * that path, then the call and its completion (req NULL: blocking). On the device: the NCCL
 * communicators made (all of them, the first time: nccl_stream.c), then send/recv queued, and
 * anything else issued after the queue. */
static int run(void *ctx, loom_comm *comm, const op *o, loom_request **req) {
  nccl_ctx *c = ctx;
  cudaStream_t s;
  int on_device, rc = nccl_device_stream(c, &s, &on_device);
  if (rc) return rc;
  if (!on_device) {
    if (mpi_type(o->dt) == MPI_DATATYPE_NULL) {
      c->api->set_error(c->host, "dtype %d on host memory before the device is open", o->dt);
      return LOOM_UNSUPPORTED;
    }
    if (o->kind == OP_SEND || o->kind == OP_RECV) return p2p_on_host(c, comm, o, req);
    rc = run_on_host(c, comm, o);
    return rc ? rc : nccl_completed(req);
  }
  ncclDataType_t t;
  if (!nccl_type(o->dt, &t)) {
    c->api->set_error(c->host, "dtype %d is not supported by nccl.so", o->dt);
    return LOOM_UNSUPPORTED;
  }
  if ((rc = nccl_open_comms(c)) != LOOM_OK) return rc;
  if (o->kind == OP_SEND || o->kind == OP_RECV)
    return nccl_p2p_post(c, comm, o->kind == OP_SEND, o->kind == OP_SEND ? (void *)o->send
                                                                         : o->buf,
                         o->count, t, o->peer, o->tag, req);
  if ((rc = nccl_p2p_flush(c)) != LOOM_OK) return rc;
  if ((rc = enqueue(c, comm, o, t, s)) != LOOM_OK) return rc;
  return nccl_finish(c, comm, s, req);
}

int nccl_all_reduce(void *ctx, loom_comm *comm, void *buf, size_t count, loom_dtype dt,
                    loom_red_op op, loom_request **req) {
  return run(ctx, comm, &(struct op){.kind = OP_ALL_REDUCE, .buf = buf, .count = count,
                                     .dt = dt, .red = op}, req);
}

int nccl_reduce_scatter(void *ctx, loom_comm *comm, const void *send, void *recv,
                        size_t recv_count, loom_dtype dt, loom_red_op op, loom_request **req) {
  return run(ctx, comm, &(struct op){.kind = OP_REDUCE_SCATTER, .send = send, .recv = recv,
                                     .count = recv_count, .dt = dt, .red = op}, req);
}

int nccl_all_gather(void *ctx, loom_comm *comm, const void *send, void *recv, size_t send_count,
                    loom_dtype dt, loom_request **req) {
  return run(ctx, comm, &(struct op){.kind = OP_ALL_GATHER, .send = send, .recv = recv,
                                     .count = send_count, .dt = dt}, req);
}

int nccl_broadcast(void *ctx, loom_comm *comm, void *buf, size_t count, loom_dtype dt, int root,
                   loom_request **req) {
  return run(ctx, comm, &(struct op){.kind = OP_BROADCAST, .buf = buf, .count = count,
                                     .dt = dt, .peer = root}, req);
}

int nccl_send(void *ctx, loom_comm *comm, const void *buf, size_t count, loom_dtype dt, int peer,
              int tag, loom_request **req) {
  return run(ctx, comm, &(struct op){.kind = OP_SEND, .send = buf, .count = count,
                                     .dt = dt, .peer = peer, .tag = tag}, req);
}

int nccl_recv(void *ctx, loom_comm *comm, void *buf, size_t count, loom_dtype dt, int peer,
              int tag, loom_request **req) {
  return run(ctx, comm, &(struct op){.kind = OP_RECV, .buf = buf, .count = count, .dt = dt,
                                     .peer = peer, .tag = tag}, req);
}

int nccl_reduce_scatter_v(void *ctx, loom_comm *comm, const void *send, void *recv,
                          const size_t *counts, loom_dtype dt, loom_red_op op,
                          loom_request **req) {
  return run(ctx, comm, &(struct op){.kind = OP_REDUCE_SCATTER_V, .send = send, .recv = recv,
                                     .counts = counts, .dt = dt, .red = op}, req);
}

int nccl_all_gather_v(void *ctx, loom_comm *comm, const void *send, void *recv,
                      const size_t *counts, loom_dtype dt, loom_request **req) {
  return run(ctx, comm, &(struct op){.kind = OP_ALL_GATHER_V, .send = send, .recv = recv,
                                     .counts = counts, .dt = dt}, req);
}
