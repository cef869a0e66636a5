/* loom's own sum collectives inside mpi.so: all_reduce, reduce_scatter and reduce_scatter_v of
 * fp32, bf16 and fp16 SUM as segmented, pipelined point-to-point schedules (MPI_Isend /
 * MPI_Irecv on the communicator's duplicate), in place of Open MPI's MPI_Iallreduce /
 * MPI_Ireduce_scatter, which cost 2-4x a memcpy of the buffer on one node (docs/performance.md).
 *
 * The schedule (n ranks, the buffer cut into n chunks, chunk k owned by rank k: for
 * reduce_scatter(_v) rank k's block, for all_reduce balanced chunks, the first count % n one
 * element longer):
 *   reduce:  rank k receives every other rank's copy of chunk k, segment by segment (segment_bytes,
 *            default 512 KiB, into a small ring of temporary slots so the received segment is
 *            added while it is in cache) and adds them up;
 *   gather:  (all_reduce) every rank receives each owner's sums straight into its buffer, in
 *            4 MiB units as they are reduced, each once its own copy of those bytes has left
 *            (the buffer is in place); all_gather is this phase alone, one message per block.
 * Each rank sends and receives (n-1)/n of the buffer per phase, as in NCCL's ring; with Open
 * MPI's vader/CMA transport each message is one copy, done by the receiver, which also means a
 * rank busy computing does not hold up the owners reading its chunks.
 *
 * Association (what makes the results deterministic and partition-independent): every element
 * is summed in rank order, ((x_0 + x_1) + x_2) + ... + x_{n-1} — rank 0's value first — by its
 * owner alone; the other ranks receive the owner's bits. So every rank ends with bitwise
 * identical all_reduce results, results do not depend on timing, and an element's sum does not
 * depend on how the buffer was cut: ddp's all_reduce of a bucket and ZeRO's reduce_scatter_v of
 * a differently cut bucket give the same bits at any dp. (A ring reduce-scatter cannot: it starts
 * chunk k's sum at rank k+1, so the association would depend on which chunk an element falls
 * in.) 16-bit values are widened to fp32, added and rounded back once per addition (mpi_sum).
 * Float addition is commutative, so for 2 ranks this is exactly Open MPI's result.
 *
 * Progress: MPI has no progress thread here, so these collectives advance only inside the
 * plugin's calls: test() and wait() of ANY request advance EVERY outstanding own collective
 * (two ranks waiting on different buckets would otherwise deadlock), and so do the plugin's
 * blocking calls while one is outstanding.
 *
 * Errors: a failed MPI call inside progress fails that collective: its test()/wait() returns
 * LOOM_REMOTE with "<MPI function> failed: ..." set on the plugin. */
#ifndef LOOM_MPI_OWNER_H
#define LOOM_MPI_OWNER_H

#include "mpi_internal.h"

/* Whether a reduction goes to the own schedule: option "collectives" is "loom", SUM, and dt is
 * LOOM_F32, LOOM_BF16 or LOOM_F16 (MAX/MIN, integers and fp64 stay with Open MPI). With
 * "loom", all_gather(_v) of any dtype is always the own gather phase alone. */
int mpi_owner_eligible(const mpi_ctx *c, loom_red_op op, loom_dtype dt);

/* all_reduce SUM of count elements of dt in buf (host memory), in place. req NULL: blocking;
 * else *req is a new request, completed by mpi_owner_wait. Errors: LOOM_NOMEM, LOOM_REMOTE. */
int mpi_owner_all_reduce(mpi_ctx *c, loom_comm *comm, void *buf, size_t count, loom_dtype dt,
                         loom_request **req);
/* all_reduce SUM over a communicator that spans nodes (comm->node and comm->cross set:
 * mpi_hier.h): reduce_scatter in the node, all_reduce of this rank's chunk across the nodes
 * (the ranks with the same local index), all_gather in the node, as one request. Every rank
 * sends 2(n-1)/n of the buffer, as flat; across nodes 2(N-1)/n instead of 2(n-k)/n (N nodes of
 * k ranks, n = N k: 1/k of the flat schedule's inter-node bytes). Called by
 * mpi_owner_all_reduce for such a communicator. */
int mpi_owner_all_reduce_hier(mpi_ctx *c, loom_comm *comm, void *buf, size_t count,
                              loom_dtype dt, loom_request **req);
/* reduce_scatter SUM: send holds size(comm) blocks in rank order, block k of counts[k]
 * elements; recv (counts[me] elements) gets the sum of block me. counts NULL: every block has
 * `count` elements. recv may be this rank's own block inside send. Copies counts. */
int mpi_owner_reduce_scatter(mpi_ctx *c, loom_comm *comm, const void *send, void *recv,
                             const size_t *counts, size_t count, loom_dtype dt,
                             loom_request **req);
/* all_gather: recv (size(comm) blocks in rank order, block k of counts[k] elements of dt, any
 * dtype) gets every rank's send block; in place when send is this rank's block inside recv.
 * counts NULL: every block has `count` elements. Copies counts. */
int mpi_owner_all_gather(mpi_ctx *c, loom_comm *comm, const void *send, void *recv,
                         const size_t *counts, size_t count, loom_dtype dt, loom_request **req);

/* Advance every outstanding own collective as far as it goes without blocking. */
void mpi_owner_progress(mpi_ctx *c);
/* Is op complete? Advances them all first. Returns op's error (message set) or LOOM_OK. */
int mpi_owner_test(mpi_ctx *c, owner_op *op, int *done);
/* Advance them all until op is complete, then free op. Returns its error (message set). */
int mpi_owner_wait(mpi_ctx *c, owner_op *op);
/* Free op without completing it (its MPI requests cancelled or released): plugin teardown. */
void mpi_owner_abandon(mpi_ctx *c, owner_op *op);

#endif
