/* loom ABI v1 — communication backends (mpi.so on any device; nccl.so on the CUDA device).
 *
 * The host builds the dp x tp x pp mesh with split() and wraps every operation to count bytes;
 * parallel plugins reach collectives only through the host API.
 *
 * Buffers: before the host opened the device (mesh setup, host api device() returns NULL)
 * every buffer is host memory; from then on every buffer is device memory of that device (the
 * host bounces its own small host-memory control traffic through the device). A device
 * without LOOM_DEVICE_CAP_HOST_ADDRESSABLE (CUDA) must not be dereferenced by the comm plugin:
 * mpi.so stages such buffers through host memory with the device's to_host / from_host; nccl.so
 * hands them to NCCL on the device's native stream. */
#ifndef LOOM_COMM_V1_H
#define LOOM_COMM_V1_H

#include "host_v1.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Capabilities */
#define LOOM_COMM_CAP_HOST_MEMORY (1u << 0)   /* works on host-addressable buffers */
#define LOOM_COMM_CAP_DEVICE_MEMORY (1u << 1) /* works on GPU device buffers */

typedef struct loom_comm_v1 {
  loom_plugin_header hdr;

  /* Join the job started by the launcher (mpirun/srun). Blocking until every rank joined.
   * Errors: LOOM_SYSTEM (launcher environment broken) with set_error. */
  int (*create)(const loom_host_api_v1 *api, loom_host *host, const loom_options *opts,
                void **ctx);
  /* Leave the job cleanly (every rank calls it). */
  void (*destroy)(void *ctx);
  /* This process's rank and the number of ranks in the job. */
  int (*world)(void *ctx, int *rank, int *size);
  /* The communicator of all ranks (owned by the plugin, not freed by the caller). */
  loom_comm *(*world_comm)(void *ctx);
  /* Collective over `parent`: ranks with the same color form a new communicator ordered by key.
   * Free it with comm_free. */
  int (*split)(void *ctx, loom_comm *parent, int color, int key, loom_comm **out);
  void (*comm_free)(void *ctx, loom_comm *c);

  /* Operations: semantics as in host_v1.h; req == NULL means blocking. An all-gather whose
   * send buffer is this rank's own block inside recv is in place (MPI_IN_PLACE).
   *
   * Point to point (send/recv: `count` elements to / from rank `peer` of `c`, tag >= 0 and
   * below 32768, MPI's least tag bound), the semantics pipeline.so's schedules rely on:
   * - Non-blocking (req != NULL): the call posts the operation and returns; it never waits
   *   for the peer. Posted operations progress independently of each other and of the order
   *   they were posted in, whatever the message size: no eager limit may turn a posted send
   *   into one that waits for its receive before the caller can post the next operation.
   * - Matching: a send matches a receive of the same communicator whose peer and tag name
   *   each other; messages with the same (peer, tag) match in posting order; different tags
   *   never match, whatever order they were posted in.
   * - Completion: any set of posted operations whose matching operations are posted on their
   *   peers completes when its requests are waited (or tested until done) in any order.
   *   Progress is made while the rank is inside a call of this plugin (MPI's rule).
   * - Blocking (req == NULL): post + wait; what the rank posted earlier keeps progressing.
   * `loom conformance`'s comm.p2p checks them with 16 MB messages (sdk/conformance/probe.c,
   * "comm_p2p"). nccl.so's restriction (NCCL has no tags and no per-operation progress): see
   * docs/abi.md, "Point to point". */
  int (*all_reduce)(void *ctx, loom_comm *c, void *buf, size_t count, loom_dtype dt,
                    loom_red_op op, loom_request **req);
  int (*reduce_scatter)(void *ctx, loom_comm *c, const void *send, void *recv,
                        size_t recv_count, loom_dtype dt, loom_red_op op, loom_request **req);
  int (*all_gather)(void *ctx, loom_comm *c, const void *send, void *recv, size_t send_count,
                    loom_dtype dt, loom_request **req);
  int (*broadcast)(void *ctx, loom_comm *c, void *buf, size_t count, loom_dtype dt, int root,
                   loom_request **req);
  int (*send)(void *ctx, loom_comm *c, const void *buf, size_t count, loom_dtype dt, int peer,
              int tag, loom_request **req);
  int (*recv)(void *ctx, loom_comm *c, void *buf, size_t count, loom_dtype dt, int peer,
              int tag, loom_request **req);
  int (*test)(void *ctx, loom_request *req, int *done);
  int (*wait)(void *ctx, loom_request *req);
  int (*barrier)(void *ctx, loom_comm *c);

  /* Uneven variants (MPI_Reduce_scatter / MPI_Allgatherv): rank i's block has counts[i]
   * elements; blocks are contiguous in rank order in the full buffer (send of reduce_scatter_v,
   * recv of all_gather_v). counts has size(c) entries and must stay valid until completion. */
  int (*reduce_scatter_v)(void *ctx, loom_comm *c, const void *send, void *recv,
                          const size_t *counts, loom_dtype dt, loom_red_op op,
                          loom_request **req);
  int (*all_gather_v)(void *ctx, loom_comm *c, const void *send, void *recv,
                      const size_t *counts, loom_dtype dt, loom_request **req);

  /* Bring the whole job down now (a rank failed): every other rank must exit promptly
   * instead of waiting in a collective. Does not return. */
  void (*abort)(void *ctx, int exit_code);

  /* ---- ABI 1.4 ---- */
  /* This rank's index among the job's ranks on its node and their number (MPI's
   * MPI_COMM_TYPE_SHARED split): what picks a GPU when the launcher exports no local rank.
   * NULL in older plugins (the host then assumes rank 0 of 1). */
  int (*local)(void *ctx, int *local_rank, int *local_size);

  /* ---- ABI 1.5 ---- */
  /* Validate opts (unknown keys, types, ranges) exactly as create() does, without joining the
   * job: what `loom check` calls, in one process and without a launcher. Returns LOOM_OK, or
   * LOOM_INVALID_CONFIG with set_error. NULL in older plugins: `loom check` then leaves the
   * comm options to train's create(). */
  int (*check_options)(const loom_host_api_v1 *api, loom_host *host, const loom_options *opts);

  /* ---- ABI 1.11 ---- */
  /* How all_reduce SUM runs under opts, without joining the job (what `loom estimate` splits a
   * data-parallel all-reduce's bytes by): *node_size = 0 flat; K > 0 hierarchical over nodes of
   * K consecutive world ranks (reduce-scatter in the node, all-reduce across, all-gather in
   * the node: mpi.so's "hierarchical"); -1 hierarchical over the launcher's nodes (not known
   * before the job starts). Validates opts as check_options does. NULL: flat. */
  int (*all_reduce_nodes)(const loom_host_api_v1 *api, loom_host *host, const loom_options *opts,
                          int *node_size);
} loom_comm_v1;

#ifdef __cplusplus
}
#endif
#endif /* LOOM_COMM_V1_H */
