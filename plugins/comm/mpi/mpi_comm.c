/* mpi.so — the communication backend for CPU ranks, on OpenMPI (or any MPI-3 library).
 *
 * Every loom collective maps onto one MPI call; asynchronous variants use MPI-3 non-blocking
 * collectives (MPI_Iallreduce, ...) and return the MPI_Request wrapped in a loom_request.
 * Errors are returned (MPI_ERRORS_RETURN), not fatal, so the host can print the plugin's
 * message and bring the job down with abort().
 *
 * 16-bit sums (mixed precision's gradient all-reduce in bf16 / fp16): MPI has no bf16 or fp16
 * type, so they travel as MPI_UINT16_T (half the bytes of fp32) and are added by a user MPI_Op
 * that widens both operands to fp32, adds, and rounds the sum back to nearest even (what NCCL
 * does for bf16 on GPUs); an fp16 sum that overflows is +-inf, as the loss scaler expects.
 *
 * Devices whose memory is not host memory (no LOOM_DEVICE_CAP_HOST_ADDRESSABLE: CUDA, the
 * tagged test device): this MPI is not assumed CUDA-aware, so every buffer is staged through
 * malloc'd host memory with the device's to_host / from_host (comm_v1.h: once the host opened
 * the device, buffers are device memory). A non-blocking operation keeps its staging buffers
 * in its request; wait() copies the received values back to the device and frees them. */
#include <dlfcn.h>
#include <loom/half_v1.h>
#include <loom/loom.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

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

/* inout[i] = in[i] + inout[i] for n bf16 / fp16 values, added in fp32, rounded back. */
static void sum_bf16_fn(void *in, void *inout, int *n, MPI_Datatype *dt) {
  (void)dt;
  const uint16_t *a = in;
  uint16_t *b = inout;
  for (int i = 0; i < *n; i++)
    b[i] = loom_f32_to_bf16(loom_bf16_to_f32(a[i]) + loom_bf16_to_f32(b[i]));
}
static void sum_f16_fn(void *in, void *inout, int *n, MPI_Datatype *dt) {
  (void)dt;
  const uint16_t *a = in;
  uint16_t *b = inout;
  for (int i = 0; i < *n; i++)
    b[i] = loom_f32_to_f16(loom_f16_to_f32(a[i]) + loom_f16_to_f32(b[i]));
}

static int fail(mpi_ctx *c, int mpi_err, const char *what) {
  char msg[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  MPI_Error_string(mpi_err, msg, &len);
  c->api->set_error(c->host, "%s failed: %s", what, msg);
  return LOOM_REMOTE;
}
#define CHECK_MPI(c, call, what)            \
  do {                                      \
    int rc_ = (call);                       \
    if (rc_ != MPI_SUCCESS) return fail((c), rc_, (what)); \
  } while (0)

static MPI_Datatype mpi_type(loom_dtype dt) {
  switch (dt) {
    case LOOM_F32: return MPI_FLOAT;
    case LOOM_F64: return MPI_DOUBLE;
    case LOOM_I32: return MPI_INT32_T;
    case LOOM_I64: return MPI_INT64_T;
    case LOOM_U8: return MPI_UINT8_T;
    case LOOM_BF16: case LOOM_F16: return MPI_UINT16_T; /* only moved, never reduced here */
  }
  return MPI_DATATYPE_NULL;
}

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

static int mpi_create(const loom_host_api_v1 *api, loom_host *host, const loom_options *opts,
                      void **out) {
  static const char *const keys[] = {NULL};
  if (api->opt_check_keys(host, opts, keys) != LOOM_OK) return LOOM_INVALID_CONFIG;
  mpi_ctx *c = calloc(1, sizeof *c);
  if (!c) return LOOM_NOMEM;
  c->api = api;
  c->host = host;
  /* OpenMPI dlopens its own components, which need libmpi's symbols globally visible; we were
   * loaded RTLD_LOCAL, so promote libmpi. */
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
  if (MPI_Op_create(sum_bf16_fn, 1, &c->sum_bf16) != MPI_SUCCESS ||
      MPI_Op_create(sum_f16_fn, 1, &c->sum_f16) != MPI_SUCCESS) {
    api->set_error(host, "MPI_Op_create failed (the 16-bit sums)");
    free(c);
    return LOOM_SYSTEM;
  }
  *out = c;
  return LOOM_OK;
}

static void mpi_destroy(void *ctx) {
  mpi_ctx *c = ctx;
  if (!c) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) {
    if (c->sum_bf16 != MPI_OP_NULL) MPI_Op_free(&c->sum_bf16);
    if (c->sum_f16 != MPI_OP_NULL) MPI_Op_free(&c->sum_f16);
  }
  if (c->initialized_here && !finalized) MPI_Finalize();
  free(c);
}

static int mpi_world(void *ctx, int *rank, int *size) {
  mpi_ctx *c = ctx;
  CHECK_MPI(c, MPI_Comm_rank(MPI_COMM_WORLD, rank), "MPI_Comm_rank");
  CHECK_MPI(c, MPI_Comm_size(MPI_COMM_WORLD, size), "MPI_Comm_size");
  return LOOM_OK;
}

static loom_comm *mpi_world_comm(void *ctx) { return &((mpi_ctx *)ctx)->world; }

static int mpi_split(void *ctx, loom_comm *parent, int color, int key, loom_comm **out) {
  mpi_ctx *c = ctx;
  loom_comm *nc = calloc(1, sizeof *nc);
  if (!nc) return LOOM_NOMEM;
  int rc = MPI_Comm_split(parent ? parent->mpi : MPI_COMM_WORLD, color, key, &nc->mpi);
  if (rc != MPI_SUCCESS) {
    free(nc);
    return fail(c, rc, "MPI_Comm_split");
  }
  MPI_Comm_set_errhandler(nc->mpi, MPI_ERRORS_RETURN);
  *out = nc;
  return LOOM_OK;
}

static void mpi_comm_free(void *ctx, loom_comm *comm) {
  if (!comm || comm == &((mpi_ctx *)ctx)->world) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&comm->mpi);
  free(comm);
}

/* Run `blocking` or start `nonblocking` into a fresh request. */
#define RUN_OR_START(c, req, blocking, nonblocking, what)                        \
  do {                                                                           \
    if (!(req)) {                                                                \
      CHECK_MPI((c), (blocking), what);                                          \
      return LOOM_OK;                                                            \
    }                                                                            \
    loom_request *r_ = new_request();                                            \
    if (!r_) return LOOM_NOMEM;                                                  \
    MPI_Request *request = &r_->mpi;                                             \
    int rc_ = (nonblocking);                                                     \
    if (rc_ != MPI_SUCCESS) {                                                    \
      free(r_);                                                                  \
      return fail((c), rc_, what);                                               \
    }                                                                            \
    *(req) = r_;                                                                 \
    return LOOM_OK;                                                              \
  } while (0)

static int raw_all_reduce(void *ctx, loom_comm *comm, void *buf, size_t count, loom_dtype dt,
                          loom_red_op op, loom_request **req) {
  mpi_ctx *c = ctx;
  int rc = check_args(c, dt, count, 1, op);
  if (rc) return rc;
  RUN_OR_START(c, req,
               MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, mpi_type(dt), reduce_op(c, op, dt),
                             comm->mpi),
               MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, mpi_type(dt), reduce_op(c, op, dt),
                              comm->mpi, request),
               "MPI_Allreduce");
}

static int raw_reduce_scatter(void *ctx, loom_comm *comm, const void *send, void *recv,
                              size_t recv_count, loom_dtype dt, loom_red_op op,
                              loom_request **req) {
  mpi_ctx *c = ctx;
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

static int raw_all_gather(void *ctx, loom_comm *comm, const void *send, void *recv,
                          size_t send_count, loom_dtype dt, loom_request **req) {
  mpi_ctx *c = ctx;
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

static int raw_broadcast(void *ctx, loom_comm *comm, void *buf, size_t count, loom_dtype dt,
                         int root, loom_request **req) {
  mpi_ctx *c = ctx;
  int rc = check_args(c, dt, count, 0, LOOM_OP_SUM);
  if (rc) return rc;
  RUN_OR_START(c, req, MPI_Bcast(buf, (int)count, mpi_type(dt), root, comm->mpi),
               MPI_Ibcast(buf, (int)count, mpi_type(dt), root, comm->mpi, request),
               "MPI_Bcast");
}

static int raw_send(void *ctx, loom_comm *comm, const void *buf, size_t count, loom_dtype dt,
                    int peer, int tag, loom_request **req) {
  mpi_ctx *c = ctx;
  int rc = check_args(c, dt, count, 0, LOOM_OP_SUM);
  if (rc) return rc;
  RUN_OR_START(c, req, MPI_Send(buf, (int)count, mpi_type(dt), peer, tag, comm->mpi),
               MPI_Isend(buf, (int)count, mpi_type(dt), peer, tag, comm->mpi, request),
               "MPI_Send");
}

static int raw_recv(void *ctx, loom_comm *comm, void *buf, size_t count, loom_dtype dt,
                    int peer, int tag, loom_request **req) {
  mpi_ctx *c = ctx;
  int rc = check_args(c, dt, count, 0, LOOM_OP_SUM);
  if (rc) return rc;
  RUN_OR_START(c, req,
               MPI_Recv(buf, (int)count, mpi_type(dt), peer, tag, comm->mpi, MPI_STATUS_IGNORE),
               MPI_Irecv(buf, (int)count, mpi_type(dt), peer, tag, comm->mpi, request),
               "MPI_Recv");
}

static int mpi_test(void *ctx, loom_request *req, int *done) {
  mpi_ctx *c = ctx;
  if (req->mpi == MPI_REQUEST_NULL) {
    *done = 1;
    return LOOM_OK;
  }
  CHECK_MPI(c, MPI_Test(&req->mpi, done, MPI_STATUS_IGNORE), "MPI_Test");
  return LOOM_OK;
}

static void stages_finish(const loom_device_v1 *dev, void *dev_ctx, stage *st, int n, int ok) {
  for (int i = 0; i < n; i++) {
    if (ok && st[i].copy_back && st[i].bytes)
      dev->from_host(dev_ctx, st[i].dev, st[i].host, st[i].bytes);
    free(st[i].host);
    st[i].host = NULL;
  }
}

static int mpi_wait(void *ctx, loom_request *req) {
  mpi_ctx *c = ctx;
  int rc = MPI_Wait(&req->mpi, MPI_STATUS_IGNORE);
  if (req->n_st) stages_finish(req->dev, req->dev_ctx, req->st, req->n_st, rc == MPI_SUCCESS);
  free(req->counts);
  free(req->displs);
  free(req);
  if (rc != MPI_SUCCESS) return fail(c, rc, "MPI_Wait");
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

static int raw_reduce_scatter_v(void *ctx, loom_comm *comm, const void *send, void *recv,
                                const size_t *counts, loom_dtype dt, loom_red_op op,
                                loom_request **req) {
  mpi_ctx *c = ctx;
  int rc = check_args(c, dt, 0, 1, op);
  int *ic = NULL, *id = NULL;
  if (!rc) rc = make_counts(c, comm, counts, &ic, &id);
  if (rc) return rc;
  free(id);
  if (!req) {
    rc = MPI_Reduce_scatter(send, recv, ic, mpi_type(dt), reduce_op(c, op, dt), comm->mpi);
    free(ic);
    return rc == MPI_SUCCESS ? LOOM_OK : fail(c, rc, "MPI_Reduce_scatter");
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
    return fail(c, rc, "MPI_Ireduce_scatter");
  }
  *req = r;
  return LOOM_OK;
}

static int raw_all_gather_v(void *ctx, loom_comm *comm, const void *send, void *recv,
                            const size_t *counts, loom_dtype dt, loom_request **req) {
  mpi_ctx *c = ctx;
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
    return rc == MPI_SUCCESS ? LOOM_OK : fail(c, rc, "MPI_Allgatherv");
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
    return fail(c, rc, "MPI_Iallgatherv");
  }
  *req = r;
  return LOOM_OK;
}

/* ---- staging for devices whose memory is not host memory ---- */

typedef struct staging {
  const loom_device_v1 *dev; /* NULL: buffers are host memory, used as they are */
  void *dev_ctx;
  stage st[2];
  int n;
} staging;

/* Does this operation need staging? (No device yet = mesh setup on host memory.) */
static void staging_begin(mpi_ctx *c, staging *s) {
  memset(s, 0, sizeof *s);
  void *dctx = NULL;
  const loom_device_v1 *dev = c->api->device(c->host, &dctx);
  if (dev && !(dev->hdr.caps & LOOM_DEVICE_CAP_HOST_ADDRESSABLE)) {
    s->dev = dev;
    s->dev_ctx = dctx;
  }
}

/* A host stand-in for device buffer `d` of `bytes`: filled from the device when copy_in, copied
 * back on completion when copy_back. NULL (LOOM_NOMEM set) when malloc fails. */
static void *stage_buf(mpi_ctx *c, staging *s, const void *d, size_t bytes, int copy_in,
                       int copy_back) {
  stage *st = &s->st[s->n++];
  st->host = malloc(bytes ? bytes : 1);
  st->dev = (void *)d;
  st->bytes = bytes;
  st->copy_back = copy_back;
  if (!st->host) {
    c->api->set_error(c->host, "out of host memory staging %zu bytes from the device", bytes);
    return NULL;
  }
  if (copy_in && bytes) s->dev->to_host(s->dev_ctx, st->host, d, bytes);
  return st->host;
}

/* After the raw operation: blocking (req NULL) or failed, complete the stages now; started, hand
 * them to the request, which wait() completes. */
static int staging_end(staging *s, int rc, loom_request **req) {
  if (rc != LOOM_OK || !req) {
    stages_finish(s->dev, s->dev_ctx, s->st, s->n, rc == LOOM_OK);
    return rc;
  }
  loom_request *r = *req;
  memcpy(r->st, s->st, sizeof s->st);
  r->n_st = s->n;
  r->dev = s->dev;
  r->dev_ctx = s->dev_ctx;
  return rc;
}

static int comm_size(loom_comm *comm) {
  int n = 1;
  MPI_Comm_size(comm->mpi, &n);
  return n;
}
static int comm_rank(loom_comm *comm) {
  int r = 0;
  MPI_Comm_rank(comm->mpi, &r);
  return r;
}

static int mpi_all_reduce(void *ctx, loom_comm *comm, void *buf, size_t count, loom_dtype dt,
                          loom_red_op op, loom_request **req) {
  mpi_ctx *c = ctx;
  staging s;
  staging_begin(c, &s);
  if (!s.dev) return raw_all_reduce(ctx, comm, buf, count, dt, op, req);
  void *h = stage_buf(c, &s, buf, count * loom_dtype_size(dt), 1, 1);
  int rc = h ? raw_all_reduce(ctx, comm, h, count, dt, op, req) : LOOM_NOMEM;
  return staging_end(&s, rc, req);
}

static int mpi_reduce_scatter(void *ctx, loom_comm *comm, const void *send, void *recv,
                              size_t recv_count, loom_dtype dt, loom_red_op op,
                              loom_request **req) {
  mpi_ctx *c = ctx;
  staging s;
  staging_begin(c, &s);
  if (!s.dev) return raw_reduce_scatter(ctx, comm, send, recv, recv_count, dt, op, req);
  size_t block = recv_count * loom_dtype_size(dt);
  void *hs = stage_buf(c, &s, send, block * (size_t)comm_size(comm), 1, 0);
  void *hr = hs ? stage_buf(c, &s, recv, block, 0, 1) : NULL;
  int rc = hr ? raw_reduce_scatter(ctx, comm, hs, hr, recv_count, dt, op, req) : LOOM_NOMEM;
  return staging_end(&s, rc, req);
}

static int mpi_all_gather(void *ctx, loom_comm *comm, const void *send, void *recv,
                          size_t send_count, loom_dtype dt, loom_request **req) {
  mpi_ctx *c = ctx;
  staging s;
  staging_begin(c, &s);
  if (!s.dev) return raw_all_gather(ctx, comm, send, recv, send_count, dt, req);
  size_t block = send_count * loom_dtype_size(dt);
  int n = comm_size(comm), me = comm_rank(comm);
  int in_place = send == (const char *)recv + (size_t)me * block;
  /* in place: this rank's block comes in with the whole receive buffer */
  void *hr = stage_buf(c, &s, recv, block * (size_t)n, in_place, 1), *hs = NULL;
  if (hr) hs = in_place ? (char *)hr + (size_t)me * block : stage_buf(c, &s, send, block, 1, 0);
  int rc = hs ? raw_all_gather(ctx, comm, hs, hr, send_count, dt, req) : LOOM_NOMEM;
  return staging_end(&s, rc, req);
}

static int mpi_broadcast(void *ctx, loom_comm *comm, void *buf, size_t count, loom_dtype dt,
                         int root, loom_request **req) {
  mpi_ctx *c = ctx;
  staging s;
  staging_begin(c, &s);
  if (!s.dev) return raw_broadcast(ctx, comm, buf, count, dt, root, req);
  int is_root = comm_rank(comm) == root;
  void *h = stage_buf(c, &s, buf, count * loom_dtype_size(dt), is_root, !is_root);
  int rc = h ? raw_broadcast(ctx, comm, h, count, dt, root, req) : LOOM_NOMEM;
  return staging_end(&s, rc, req);
}

static int mpi_send(void *ctx, loom_comm *comm, const void *buf, size_t count, loom_dtype dt,
                    int peer, int tag, loom_request **req) {
  mpi_ctx *c = ctx;
  staging s;
  staging_begin(c, &s);
  if (!s.dev) return raw_send(ctx, comm, buf, count, dt, peer, tag, req);
  void *h = stage_buf(c, &s, buf, count * loom_dtype_size(dt), 1, 0);
  int rc = h ? raw_send(ctx, comm, h, count, dt, peer, tag, req) : LOOM_NOMEM;
  return staging_end(&s, rc, req);
}

static int mpi_recv(void *ctx, loom_comm *comm, void *buf, size_t count, loom_dtype dt,
                    int peer, int tag, loom_request **req) {
  mpi_ctx *c = ctx;
  staging s;
  staging_begin(c, &s);
  if (!s.dev) return raw_recv(ctx, comm, buf, count, dt, peer, tag, req);
  void *h = stage_buf(c, &s, buf, count * loom_dtype_size(dt), 0, 1);
  int rc = h ? raw_recv(ctx, comm, h, count, dt, peer, tag, req) : LOOM_NOMEM;
  return staging_end(&s, rc, req);
}

static size_t total_count(loom_comm *comm, const size_t *counts, size_t *before_me) {
  int n = comm_size(comm), me = comm_rank(comm);
  size_t total = 0;
  for (int i = 0; i < n; i++) {
    if (i == me) *before_me = total;
    total += counts[i];
  }
  return total;
}

static int mpi_reduce_scatter_v(void *ctx, loom_comm *comm, const void *send, void *recv,
                                const size_t *counts, loom_dtype dt, loom_red_op op,
                                loom_request **req) {
  mpi_ctx *c = ctx;
  staging s;
  staging_begin(c, &s);
  if (!s.dev) return raw_reduce_scatter_v(ctx, comm, send, recv, counts, dt, op, req);
  size_t esz = loom_dtype_size(dt), at = 0, total = total_count(comm, counts, &at);
  void *hs = stage_buf(c, &s, send, total * esz, 1, 0);
  void *hr = hs ? stage_buf(c, &s, recv, counts[comm_rank(comm)] * esz, 0, 1) : NULL;
  int rc = hr ? raw_reduce_scatter_v(ctx, comm, hs, hr, counts, dt, op, req) : LOOM_NOMEM;
  return staging_end(&s, rc, req);
}

static int mpi_all_gather_v(void *ctx, loom_comm *comm, const void *send, void *recv,
                            const size_t *counts, loom_dtype dt, loom_request **req) {
  mpi_ctx *c = ctx;
  staging s;
  staging_begin(c, &s);
  if (!s.dev) return raw_all_gather_v(ctx, comm, send, recv, counts, dt, req);
  size_t esz = loom_dtype_size(dt), at = 0, total = total_count(comm, counts, &at);
  size_t mine = counts[comm_rank(comm)] * esz;
  int in_place = send == (const char *)recv + at * esz;
  void *hr = stage_buf(c, &s, recv, total * esz, in_place, 1), *hs = NULL;
  if (hr) hs = in_place ? (char *)hr + at * esz : stage_buf(c, &s, send, mine, 1, 0);
  int rc = hs ? raw_all_gather_v(ctx, comm, hs, hr, counts, dt, req) : LOOM_NOMEM;
  return staging_end(&s, rc, req);
}

/* The ranks of this job on this node (MPI_COMM_TYPE_SHARED), for the device's GPU choice. */
static int mpi_local(void *ctx, int *local_rank, int *local_size) {
  mpi_ctx *c = ctx;
  MPI_Comm node;
  CHECK_MPI(c, MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL,
                                   &node), "MPI_Comm_split_type");
  int rc1 = MPI_Comm_rank(node, local_rank), rc2 = MPI_Comm_size(node, local_size);
  MPI_Comm_free(&node);
  if (rc1 != MPI_SUCCESS) return fail(c, rc1, "MPI_Comm_rank");
  if (rc2 != MPI_SUCCESS) return fail(c, rc2, "MPI_Comm_size");
  return LOOM_OK;
}

static int mpi_barrier(void *ctx, loom_comm *comm) {
  mpi_ctx *c = ctx;
  CHECK_MPI(c, MPI_Barrier(comm->mpi), "MPI_Barrier");
  return LOOM_OK;
}

static void mpi_abort(void *ctx, int exit_code) {
  (void)ctx;
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  exit(exit_code); /* MPI_Abort does not return; this is for the compiler */
}

LOOM_EXPORT const loom_comm_v1 loom_plugin_v1 = {
  .hdr = LOOM_PLUGIN_HEADER_INIT(LOOM_KIND_COMM, "mpi", "1.0.0",
                                 "MPI collectives and point-to-point (OpenMPI); stages device memory through the host",
                                 LOOM_COMM_CAP_HOST_MEMORY | LOOM_COMM_CAP_DEVICE_MEMORY,
                                 loom_comm_v1),
  .create = mpi_create,
  .destroy = mpi_destroy,
  .world = mpi_world,
  .world_comm = mpi_world_comm,
  .split = mpi_split,
  .comm_free = mpi_comm_free,
  .all_reduce = mpi_all_reduce,
  .reduce_scatter = mpi_reduce_scatter,
  .all_gather = mpi_all_gather,
  .broadcast = mpi_broadcast,
  .send = mpi_send,
  .recv = mpi_recv,
  .test = mpi_test,
  .wait = mpi_wait,
  .barrier = mpi_barrier,
  .abort = mpi_abort,
  .reduce_scatter_v = mpi_reduce_scatter_v,
  .all_gather_v = mpi_all_gather_v,
  .local = mpi_local,
};
