/* What the two MPI-launched comm plugins share (mpi.so and nccl.so, each built from the SDK
 * alone; both CMakeLists put plugins/comm/ on the include path): the MPI datatype of a loom
 * dtype, and the message of a failed MPI call. Header-only: each plugin is its own .so. */
#ifndef LOOM_COMM_MPI_H
#define LOOM_COMM_MPI_H

#include <loom/loom.h>
#include <mpi.h>

/* MPI's datatype for dt's elements. MPI has no bf16 or fp16: those get `sixteen`, the caller's
 * choice (mpi.so moves them as MPI_UINT16_T and sums them with its own MPI_Ops; nccl.so passes
 * MPI_DATATYPE_NULL: it leaves them to NCCL, once the device is open). */
static inline MPI_Datatype comm_mpi_type(loom_dtype dt, MPI_Datatype sixteen) {
  switch (dt) {
    case LOOM_F32: return MPI_FLOAT;
    case LOOM_F64: return MPI_DOUBLE;
    case LOOM_I32: return MPI_INT32_T;
    case LOOM_I64: return MPI_INT64_T;
    case LOOM_U8: return MPI_UINT8_T;
    case LOOM_BF16: case LOOM_F16: return sixteen;
  }
  return MPI_DATATYPE_NULL;
}

/* A failed MPI call: "WHAT failed: <MPI's error string>" through the host's set_error.
 * Returns LOOM_REMOTE. */
static inline int comm_mpi_fail(const loom_host_api_v1 *api, loom_host *host, int mpi_rc,
                                const char *what) {
  char msg[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  MPI_Error_string(mpi_rc, msg, &len);
  api->set_error(host, "%s failed: %s", what, msg);
  return LOOM_REMOTE;
}

#endif
