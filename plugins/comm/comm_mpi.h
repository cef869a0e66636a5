/* What the two MPI-launched comm plugins share (mpi.so and nccl.so, each built from the SDK
 * alone; both CMakeLists put plugins/comm/ on the include path): joining the MPI job, the MPI
 * datatype of a loom dtype, the message of a failed MPI call and a new communicator.
 * Header-only: each plugin is its own .so. */
#ifndef LOOM_COMM_MPI_H
#define LOOM_COMM_MPI_H

#include <dlfcn.h>
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

/* Joins the MPI job at create: libmpi's symbols made global (Open MPI dlopens its own
 * components, which need them, and a plugin is loaded RTLD_LOCAL), MPI_Init_thread unless the
 * process did it already (then *initialized_here = 1: the plugin finalizes MPI at destroy), and
 * MPI_COMM_WORLD's errors returned instead of fatal. LOOM_SYSTEM, with the message, when MPI
 * cannot start. */
static inline int comm_mpi_start(const loom_host_api_v1 *api, loom_host *host,
                                 int *initialized_here) {
  dlopen("libmpi.so.40", RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    int provided;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
      api->set_error(host, "MPI_Init_thread failed (is this run under mpirun/srun?)");
      return LOOM_SYSTEM;
    }
    *initialized_here = 1;
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  return LOOM_OK;
}

/* split's MPI part: MPI_Comm_split of parent into *out (MPI_COMM_NULL for color MPI_UNDEFINED),
 * its errors returned instead of fatal. On failure: comm_mpi_fail's LOOM_REMOTE. */
static inline int comm_mpi_split(const loom_host_api_v1 *api, loom_host *host, MPI_Comm parent,
                                 int color, int key, MPI_Comm *out) {
  int rc = MPI_Comm_split(parent, color, key, out);
  if (rc != MPI_SUCCESS) return comm_mpi_fail(api, host, rc, "MPI_Comm_split");
  MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN);
  return LOOM_OK;
}

#endif
