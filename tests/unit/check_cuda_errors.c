/* The CUDA runtime's per-thread last error between nccl.so and cuda.so (issue 21, item 2), on the
 * host: cuda.so's failure recording and launch checks (cuda_check.c, objects cuda_check_obj) and
 * nccl.so's requests, polling and send/recv (nccl_stream.c, nccl_p2p.c: nccl_stream_obj) are
 * linked in unchanged, and
 * the runtime's and NCCL's calls they make are defined below on a model of the runtime's error
 * state, as unit.check_cuda_pool does for the allocator:
 *   - the last error: set by a failed call or launch, and by cudaEventQuery's cudaErrorNotReady
 *     (which is no failure); cudaGetLastError returns it and resets it to cudaSuccess;
 *   - a sticky error (a kernel faulted, the context is unusable): every call and launch fails
 *     with it, and no cudaGetLastError clears it.
 * What is proved: a NotReady that a query left behind no longer fails cuda.so's next launch
 * check (the check before the fix, reading cudaGetLastError after the launch, does: the control
 * case), a launch's own failure and a sticky fault still do, the first failure is what the device
 * table's error slot (ABI 1.10) reports; and nccl.so's test and wait leave no NotReady behind.
 *
 * Built without a CUDA toolkit there are no CUDA headers: the test exits 77 (skipped); without
 * NCCL the nccl.so cases are left out (said on stdout). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef LOOM_TEST_HAVE_CUDA
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

#include "cuda_check.h" /* linked: cuda.so's objects (cuda_check_obj) */
#ifdef LOOM_TEST_HAVE_NCCL
#include "nccl_internal.h" /* linked: nccl.so's objects (nccl_stream_obj) */
#endif
#include "support/check_suite.h"

/* ---- the CUDA runtime's error state, on the host ---- */
static cudaError_t last_error;   /* the calling thread's last error */
static cudaError_t sticky_error; /* a fault: returned by everything, never cleared */
static int polls_not_ready;      /* cudaEventQuery answers NotReady this many more times */
static int queries, destroyed;   /* cudaEventQuery calls, cudaEventDestroy calls */

cudaError_t cudaGetLastError(void) {
  if (sticky_error != cudaSuccess) return sticky_error;
  cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}
const char *cudaGetErrorString(cudaError_t e) {
  return e == cudaErrorNotReady ? "device not ready"
         : e == cudaErrorIllegalAddress ? "an illegal memory access was encountered"
         : e == cudaErrorInvalidConfiguration ? "invalid configuration argument"
         : e == cudaSuccess ? "no error" : "some error";
}
const char *cudaGetErrorName(cudaError_t e) {
  return e == cudaErrorNotReady ? "cudaErrorNotReady"
         : e == cudaErrorIllegalAddress ? "cudaErrorIllegalAddress"
         : e == cudaErrorInvalidConfiguration ? "cudaErrorInvalidConfiguration"
         : "cudaErrorUnknown";
}
const char *cublasGetStatusString(cublasStatus_t s) { return s ? "cuBLAS failed" : "success"; }
const char *cublasGetStatusName(cublasStatus_t s) { return s ? "CUBLAS_STATUS_X" : "OK"; }
/* an event still ahead on the stream: NotReady, left as the last error as the runtime does */
cudaError_t cudaEventQuery(cudaEvent_t ev) {
  (void)ev;
  queries++;
  if (sticky_error != cudaSuccess) return last_error = sticky_error;
  if (polls_not_ready > 0) {
    polls_not_ready--;
    return last_error = cudaErrorNotReady;
  }
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t ev) {
  (void)ev;
  destroyed++;
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned flags) {
  (void)flags;
  *ev = (cudaEvent_t)(uintptr_t)0x1000;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t s) {
  (void)ev, (void)s;
  return cudaSuccess;
}
/* A kernel launch: it reports through the last error only (its own failure, or the fault) */
static void fake_launch(cudaError_t own) {
  if (sticky_error != cudaSuccess) last_error = sticky_error;
  else if (own != cudaSuccess) last_error = own;
}

#ifdef LOOM_TEST_HAVE_NCCL
/* ---- NCCL: nccl_stream.c's other calls (never reached by these cases: no communicator) ---- */
const char *ncclGetErrorString(ncclResult_t r) { return r ? "nccl error" : "no error"; }
const char *ncclGetLastError(ncclComm_t comm) { (void)comm; return ""; }
ncclResult_t ncclGetUniqueId(ncclUniqueId *id) { (void)id; return ncclInternalError; }
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int n, ncclUniqueId id, int rank) {
  (void)comm, (void)n, (void)id, (void)rank;
  return ncclInternalError;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async) {
  (void)comm;
  *async = ncclSuccess;
  return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t comm) { (void)comm; return ncclSuccess; }
/* nccl_p2p.c's (no send/recv is queued in these cases, so never reached) */
ncclResult_t ncclGroupStart(void) { return ncclInternalError; }
ncclResult_t ncclGroupEnd(void) { return ncclInternalError; }
ncclResult_t ncclSend(const void *b, size_t n, ncclDataType_t t, int peer, ncclComm_t c,
                      cudaStream_t s) {
  (void)b, (void)n, (void)t, (void)peer, (void)c, (void)s;
  return ncclInternalError;
}
ncclResult_t ncclRecv(void *b, size_t n, ncclDataType_t t, int peer, ncclComm_t c,
                      cudaStream_t s) {
  (void)b, (void)n, (void)t, (void)peer, (void)c, (void)s;
  return ncclInternalError;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
  (void)s, (void)flags;
  return cudaErrorNotSupported;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t ev, unsigned flags) {
  (void)s, (void)ev, (void)flags;
  return cudaErrorNotSupported;
}

static char host_error[256];
static void fake_set_error(loom_host *h, const char *fmt, ...) {
  (void)h;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(host_error, sizeof host_error, fmt, ap);
  va_end(ap);
}
#endif

static cuda_ctx ctx;

static void reset(void) {
  memset(&ctx, 0, sizeof ctx);
  last_error = sticky_error = cudaSuccess;
  polls_not_ready = queries = destroyed = 0;
}

/* The control case: the mock reproduces the bug. cuda.so's check before the fix read
 * cudaGetLastError right after the launch; a NotReady that a query left there failed the
 * device although the launch itself went through. */
START_TEST(stale_not_ready_failed_the_old_check) {
  reset();
  last_error = cudaErrorNotReady; /* what an event poll leaves behind */
  fake_launch(cudaSuccess);
  cuda_check(&ctx, cudaGetLastError(), "scale"); /* the old `launched` */
  ck_assert_int_eq(ctx.failed, 1);
  ck_assert_ptr_nonnull(strstr(cuda_error(&ctx), "cudaErrorNotReady"));
}
END_TEST

/* A NotReady left by a query is not the launch's: CUDA_LAUNCH clears it first. */
START_TEST(stale_not_ready_is_not_a_launch_failure) {
  reset();
  last_error = cudaErrorNotReady;
  CUDA_LAUNCH(&ctx, "scale", fake_launch(cudaSuccess));
  ck_assert_msg(!ctx.failed, "a stale NotReady failed the launch: %s", ctx.last_error);
  ck_assert_ptr_null(cuda_error(&ctx));
  /* the GEMMs' 16-bit operand packs use the pair directly (cuda_gemm.c) */
  last_error = cudaErrorNotReady;
  cuda_launch_begin();
  fake_launch(cudaSuccess);
  fake_launch(cudaSuccess);
  ck_assert_int_eq(cuda_launched(&ctx, "16-bit GEMM operand conversion"), 0);
  ck_assert_ptr_null(cuda_error(&ctx));
}
END_TEST

/* A launch's own failure is still the device's failure, and the first one is what the error
 * slot reports from then on (sticky until destroy). */
START_TEST(own_launch_failure_is_reported) {
  reset();
  ctx.device = 3;
  CUDA_LAUNCH(&ctx, "gelu_forward", fake_launch(cudaErrorInvalidConfiguration));
  ck_assert_int_eq(ctx.failed, 1);
  const char *msg = cuda_error(&ctx);
  ck_assert_str_eq(msg, "GPU 3: gelu_forward: invalid configuration argument "
                        "(cudaErrorInvalidConfiguration)");
  CUDA_LAUNCH(&ctx, "scale", fake_launch(cudaErrorIllegalAddress));
  ck_assert_str_eq(cuda_error(&ctx), msg); /* the first failure wins */
  CUDA_LAUNCH(&ctx, "axpy", fake_launch(cudaSuccess));
  ck_assert_str_eq(cuda_error(&ctx), msg);
}
END_TEST

/* A sticky error (an earlier kernel faulted) cannot be cleared: the next launch fails with it. */
START_TEST(sticky_fault_survives_the_clear) {
  reset();
  sticky_error = cudaErrorIllegalAddress;
  CUDA_LAUNCH(&ctx, "layernorm_forward", fake_launch(cudaSuccess));
  ck_assert_int_eq(ctx.failed, 1);
  ck_assert_ptr_nonnull(strstr(cuda_error(&ctx), "cudaErrorIllegalAddress"));
  ck_assert_ptr_nonnull(strstr(cuda_error(&ctx), "layernorm_forward"));
}
END_TEST

#ifdef LOOM_TEST_HAVE_NCCL
static nccl_ctx comm_ctx;
static loom_host_api_v1 api;

static void reset_comm(void) {
  reset();
  memset(&comm_ctx, 0, sizeof comm_ctx);
  memset(&api, 0, sizeof api);
  api.struct_size = sizeof api;
  api.set_error = fake_set_error;
  comm_ctx.api = &api;
  host_error[0] = '\0';
}

/* nccl.so's test (comm_v1.test) polls once: NotReady is "not done", and no last error stays. */
START_TEST(nccl_test_clears_not_ready) {
  reset_comm();
  loom_request *req = nccl_request_new(NULL); /* a device operation's: an event, no MPI request */
  ck_assert_ptr_nonnull(req);
  req->done = (cudaEvent_t)(uintptr_t)0x1000;
  polls_not_ready = 1;
  int done = -1;
  ck_assert_int_eq(nccl_test(&comm_ctx, req, &done), LOOM_OK);
  ck_assert_int_eq(done, 0);
  ck_assert_int_eq(queries, 1);
  ck_assert_msg(last_error == cudaSuccess, "nccl_test left %s as the last error",
                cudaGetErrorName(last_error));
  /* and cuda.so's next launch check sees its own launch only */
  CUDA_LAUNCH(&ctx, "scale", fake_launch(cudaSuccess));
  ck_assert_int_eq(ctx.failed, 0);
  ck_assert_int_eq(nccl_test(&comm_ctx, req, &done), LOOM_OK);
  ck_assert_int_eq(done, 1);
  free(req);
}
END_TEST

/* nccl.so's wait (and every blocking operation, nccl_finish) polls until done: no NotReady of
 * its polls stays behind. */
START_TEST(nccl_wait_clears_not_ready) {
  reset_comm();
  loom_request *req = nccl_request_new(NULL);
  ck_assert_ptr_nonnull(req);
  req->done = (cudaEvent_t)(uintptr_t)0x1000;
  polls_not_ready = 5;
  ck_assert_int_eq(nccl_wait(&comm_ctx, req), LOOM_OK);
  ck_assert_int_eq(queries, 6);
  ck_assert_int_eq(destroyed, 1);
  ck_assert_msg(last_error == cudaSuccess, "nccl_wait left %s as the last error",
                cudaGetErrorName(last_error));
  polls_not_ready = 3;
  ck_assert_int_eq(nccl_finish(&comm_ctx, NULL, NULL, NULL), LOOM_OK);
  ck_assert_int_eq(last_error, cudaSuccess);
  /* a real failure of the query is still one */
  sticky_error = cudaErrorIllegalAddress;
  loom_request *bad = nccl_request_new(NULL);
  ck_assert_ptr_nonnull(bad);
  bad->done = (cudaEvent_t)(uintptr_t)0x1000;
  int done = 0;
  ck_assert_int_eq(nccl_test(&comm_ctx, bad, &done), LOOM_SYSTEM);
  free(bad);
  ck_assert_ptr_nonnull(strstr(host_error, "illegal memory access"));
}
END_TEST
#endif
#endif /* LOOM_TEST_HAVE_CUDA */

int main(void) {
#ifndef LOOM_TEST_HAVE_CUDA
  printf("check_cuda_errors: skipped: built without a CUDA toolkit (no CUDA headers)\n");
  return 77;
#else
  Suite *s = suite_create("cuda_errors");
  check_add_tcase(s, "cuda_launch",
                  CHECK_TESTS(stale_not_ready_failed_the_old_check,
                              stale_not_ready_is_not_a_launch_failure,
                              own_launch_failure_is_reported, sticky_fault_survives_the_clear),
                  NULL, NULL, 0);
#ifdef LOOM_TEST_HAVE_NCCL
  check_add_tcase(s, "nccl_poll", CHECK_TESTS(nccl_test_clears_not_ready,
                                              nccl_wait_clears_not_ready),
                  NULL, NULL, 0);
#else
  printf("check_cuda_errors: nccl.so's cases left out: built without NCCL\n");
#endif
  return check_run_suite(s, CK_FORK_GETENV);
#endif
}
