/* mpi.so's collectives as the table hands them out: on a device whose memory is not host
 * memory (no LOOM_DEVICE_CAP_HOST_ADDRESSABLE: CUDA, the tagged test device) every buffer is
 * staged through malloc'd host memory with the device's to_host / from_host, since this MPI is
 * not assumed CUDA-aware; a non-blocking operation keeps its stages in its request and wait()
 * copies the received values back. On the CPU device (or before the host opened any device:
 * mesh setup on host memory) the buffers go to MPI as they are. */
#include <stdlib.h>
#include <string.h>

#include "mpi_internal.h"

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
    mpi_stages_finish(s->dev, s->dev_ctx, s->st, s->n, rc == LOOM_OK);
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

int mpi_all_reduce(void *ctx, loom_comm *comm, void *buf, size_t count, loom_dtype dt,
                   loom_red_op op, loom_request **req) {
  mpi_ctx *c = ctx;
  staging s;
  staging_begin(c, &s);
  if (!s.dev) return mpi_raw_all_reduce(ctx, comm, buf, count, dt, op, req);
  void *h = stage_buf(c, &s, buf, count * loom_dtype_size(dt), 1, 1);
  int rc = h ? mpi_raw_all_reduce(ctx, comm, h, count, dt, op, req) : LOOM_NOMEM;
  return staging_end(&s, rc, req);
}

int mpi_reduce_scatter(void *ctx, loom_comm *comm, const void *send, void *recv,
                       size_t recv_count, loom_dtype dt, loom_red_op op,
                       loom_request **req) {
  mpi_ctx *c = ctx;
  staging s;
  staging_begin(c, &s);
  if (!s.dev) return mpi_raw_reduce_scatter(ctx, comm, send, recv, recv_count, dt, op, req);
  size_t block = recv_count * loom_dtype_size(dt);
  void *hs = stage_buf(c, &s, send, block * (size_t)comm_size(comm), 1, 0);
  void *hr = hs ? stage_buf(c, &s, recv, block, 0, 1) : NULL;
  int rc = hr ? mpi_raw_reduce_scatter(ctx, comm, hs, hr, recv_count, dt, op, req) : LOOM_NOMEM;
  return staging_end(&s, rc, req);
}

int mpi_all_gather(void *ctx, loom_comm *comm, const void *send, void *recv,
                   size_t send_count, loom_dtype dt, loom_request **req) {
  mpi_ctx *c = ctx;
  staging s;
  staging_begin(c, &s);
  if (!s.dev) return mpi_raw_all_gather(ctx, comm, send, recv, send_count, dt, req);
  size_t block = send_count * loom_dtype_size(dt);
  int n = comm_size(comm), me = comm_rank(comm);
  int in_place = send == (const char *)recv + (size_t)me * block;
  /* in place: this rank's block comes in with the whole receive buffer */
  void *hr = stage_buf(c, &s, recv, block * (size_t)n, in_place, 1), *hs = NULL;
  if (hr) hs = in_place ? (char *)hr + (size_t)me * block : stage_buf(c, &s, send, block, 1, 0);
  int rc = hs ? mpi_raw_all_gather(ctx, comm, hs, hr, send_count, dt, req) : LOOM_NOMEM;
  return staging_end(&s, rc, req);
}

int mpi_broadcast(void *ctx, loom_comm *comm, void *buf, size_t count, loom_dtype dt,
                  int root, loom_request **req) {
  mpi_ctx *c = ctx;
  staging s;
  staging_begin(c, &s);
  if (!s.dev) return mpi_raw_broadcast(ctx, comm, buf, count, dt, root, req);
  int is_root = comm_rank(comm) == root;
  void *h = stage_buf(c, &s, buf, count * loom_dtype_size(dt), is_root, !is_root);
  int rc = h ? mpi_raw_broadcast(ctx, comm, h, count, dt, root, req) : LOOM_NOMEM;
  return staging_end(&s, rc, req);
}

int mpi_send(void *ctx, loom_comm *comm, const void *buf, size_t count, loom_dtype dt,
             int peer, int tag, loom_request **req) {
  mpi_ctx *c = ctx;
  staging s;
  staging_begin(c, &s);
  if (!s.dev) return mpi_raw_send(ctx, comm, buf, count, dt, peer, tag, req);
  void *h = stage_buf(c, &s, buf, count * loom_dtype_size(dt), 1, 0);
  int rc = h ? mpi_raw_send(ctx, comm, h, count, dt, peer, tag, req) : LOOM_NOMEM;
  return staging_end(&s, rc, req);
}

int mpi_recv(void *ctx, loom_comm *comm, void *buf, size_t count, loom_dtype dt,
             int peer, int tag, loom_request **req) {
  mpi_ctx *c = ctx;
  staging s;
  staging_begin(c, &s);
  if (!s.dev) return mpi_raw_recv(ctx, comm, buf, count, dt, peer, tag, req);
  void *h = stage_buf(c, &s, buf, count * loom_dtype_size(dt), 0, 1);
  int rc = h ? mpi_raw_recv(ctx, comm, h, count, dt, peer, tag, req) : LOOM_NOMEM;
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

int mpi_reduce_scatter_v(void *ctx, loom_comm *comm, const void *send, void *recv,
                         const size_t *counts, loom_dtype dt, loom_red_op op,
                         loom_request **req) {
  mpi_ctx *c = ctx;
  staging s;
  staging_begin(c, &s);
  if (!s.dev) return mpi_raw_reduce_scatter_v(ctx, comm, send, recv, counts, dt, op, req);
  size_t esz = loom_dtype_size(dt), at = 0, total = total_count(comm, counts, &at);
  void *hs = stage_buf(c, &s, send, total * esz, 1, 0);
  void *hr = hs ? stage_buf(c, &s, recv, counts[comm_rank(comm)] * esz, 0, 1) : NULL;
  int rc = hr ? mpi_raw_reduce_scatter_v(ctx, comm, hs, hr, counts, dt, op, req) : LOOM_NOMEM;
  return staging_end(&s, rc, req);
}

int mpi_all_gather_v(void *ctx, loom_comm *comm, const void *send, void *recv,
                     const size_t *counts, loom_dtype dt, loom_request **req) {
  mpi_ctx *c = ctx;
  staging s;
  staging_begin(c, &s);
  if (!s.dev) return mpi_raw_all_gather_v(ctx, comm, send, recv, counts, dt, req);
  size_t esz = loom_dtype_size(dt), at = 0, total = total_count(comm, counts, &at);
  size_t mine = counts[comm_rank(comm)] * esz;
  int in_place = send == (const char *)recv + at * esz;
  void *hr = stage_buf(c, &s, recv, total * esz, in_place, 1), *hs = NULL;
  if (hr) hs = in_place ? (char *)hr + at * esz : stage_buf(c, &s, send, mine, 1, 0);
  int rc = hs ? mpi_raw_all_gather_v(ctx, comm, hs, hr, counts, dt, req) : LOOM_NOMEM;
  return staging_end(&s, rc, req);
}

