/* cuda.so: the CUDA device backend, a LOOM_KIND_DEVICE plugin selected by
 * "device": {"type": "cuda"}. Every slot of loom_device_v1 runs on one NVIDIA GPU: GEMMs on
 * cuBLAS (cuda_gemm.c), the other kernels in cuda_kernels.cu, memory from a caching allocator
 * (cuda_alloc.c). All state is in the cuda_ctx that create_ex returns.
 *
 * Options (the config's "device" object; keys starting with '_' are comments, any other unknown
 * key is an error naming it):
 *   "type": "cuda"
 *   "tf32": bool         fp32 GEMMs on TF32 tensor cores (default false: IEEE fp32 GEMMs)
 *   "device_id": int     put this rank on GPU `device_id` (default: local_rank, see below)
 *   "share_gpus": bool   allow more local ranks than GPUs: rank r takes GPU r % count (the MPI
 *                        comm plugin works so; NCCL refuses two ranks on one GPU). Default false:
 *                        one GPU per local rank, and too few GPUs is an error naming both counts.
 *   "threads": int       the cpu device's option, accepted and ignored, so that a config moves to
 *                        the GPU by its "type" alone.
 *
 * What is asynchronous. Each context has one stream (native_stream). alloc's zero fill,
 * memset_zero, copy, convert, round_to and every kernel slot enqueue on it and return at once.
 * to_host and from_host return when the copy is complete (the host buffer is read / written by
 * then), and sum_squares and all_finite when their value is known: those wait for the stream,
 * so every earlier kernel has finished when they return. synchronize waits for the stream.
 * free returns the block to the cache at once (stream order protects its pending users).
 *
 * Failures. The kernel slots return void: a failing CUDA or cuBLAS call is printed once to
 * stderr with the GPU and the call, the context is marked failed and later kernels are
 * skipped; to_host then fills the host buffer with 0xff bytes (NaN patterns, never stale data)
 * and sum_squares returns NaN. The error slot (ABI 1.10) returns the failure's message from
 * then on, and the host, which asks it every step, fails the job with it (instead of reading the
 * NaNs as a diverged run). */
#include <dlfcn.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_alloc.h"
#include "cuda_check.h"
#include "cuda_gemm.h"
#include "cuda_internal.h"
#include "cuda_kernels.h"

#define CUBLAS_WORKSPACE_BYTES ((size_t)32 << 20) /* NVIDIA's recommendation for Hopper */
#define RESULT_DOUBLES (1 + CUDA_REDUCE_BLOCKS)   /* sum_squares' result and partials */

/* Every slot starts here: the context's GPU becomes the calling thread's current device (a
 * process may hold contexts on several GPUs), and a failed context does nothing more. Kernel
 * launches go through CUDA_LAUNCH (cuda_check.h), which reads only the launch's own error. */
static cuda_ctx *enter(void *ctx) {
  cuda_ctx *c = ctx;
  if (!c->failed) cuda_check(c, cudaSetDevice(c->device), "cudaSetDevice");
  return c->failed ? NULL : c;
}

/* ---- options and rank -> GPU ---- */

typedef struct cuda_options {
  int tf32;
  int device_id; /* -1: by local rank */
  int share_gpus;
} cuda_options;

__attribute__((format(printf, 4, 5))) static int fail(char *err, size_t errlen, int rc,
                                                      const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return rc;
}

static int parse_options(const char *json, cuda_options *o, char *err, size_t errlen) {
  o->tf32 = 0;
  o->device_id = -1;
  o->share_gpus = 0;
  json_error_t jerr;
  json_t *root = json_loads(json, 0, &jerr);
  if (!root || !json_is_object(root)) {
    const char *why = root ? "not an object" : jerr.text;
    json_decref(root);
    return fail(err, errlen, LOOM_INVALID_CONFIG,
                "device 'cuda': the \"device\" options are not a JSON object: %s", why);
  }
  int rc = LOOM_OK;
  const char *key;
  json_t *val;
  json_object_foreach(root, key, val) {
    if (key[0] == '_') continue; /* a comment, as everywhere in the config */
    if (strcmp(key, "type") == 0) {
      if (!json_is_string(val) || strcmp(json_string_value(val), "cuda") != 0)
        rc = fail(err, errlen, LOOM_UNSUPPORTED,
                  "device 'cuda': \"type\" is %s, expected \"cuda\"",
                  json_is_string(val) ? json_string_value(val) : "not a string");
    } else if (strcmp(key, "tf32") == 0 || strcmp(key, "share_gpus") == 0) {
      if (!json_is_boolean(val))
        rc = fail(err, errlen, LOOM_INVALID_CONFIG, "device 'cuda': \"%s\" must be true or false",
                  key);
      else if (key[0] == 't')
        o->tf32 = json_is_true(val);
      else
        o->share_gpus = json_is_true(val);
    } else if (strcmp(key, "threads") == 0) {
      /* the CPU device's thread count: accepted (and unused) so that a config switches devices
       * by "type" alone, e.g. --set device.type=cuda on configs/tiny.json */
      if (!json_is_integer(val) || json_integer_value(val) < 0)
        rc = fail(err, errlen, LOOM_INVALID_CONFIG,
                  "device 'cuda': \"%s\" must be an integer >= 0 (it is the cpu device's option; "
                  "cuda ignores it)",
                  key);
    } else if (strcmp(key, "device_id") == 0) {
      if (!json_is_integer(val) || json_integer_value(val) < 0 ||
          json_integer_value(val) > 1023)
        rc = fail(err, errlen, LOOM_INVALID_CONFIG,
                  "device 'cuda': \"%s\" must be an integer from 0 (the first visible GPU)",
                  key);
      else
        o->device_id = (int)json_integer_value(val);
    } else {
      rc = fail(err, errlen, LOOM_INVALID_CONFIG,
                "device 'cuda': unknown option \"%s\" (known: type, tf32, device_id, "
                "share_gpus, threads)",
                key);
    }
    if (rc != LOOM_OK) break;
  }
  json_decref(root);
  return rc;
}

static const char *visible_devices(void) {
  const char *v = getenv("CUDA_VISIBLE_DEVICES");
  return v ? v : "unset";
}

/* The GPU ordinal for this rank, or an error saying why there is none. */
static int pick_gpu(const cuda_options *o, int local_rank, int local_size, int *gpu, char *err,
                    size_t errlen) {
  int count = 0;
  cudaError_t crc = cudaGetDeviceCount(&count);
  if (crc != cudaSuccess) {
    (void)cudaGetLastError();
    /* without a driver the runtime says "driver version is insufficient": name the real cause */
    void *drv = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (drv) dlclose(drv);
    /* an old driver: say which CUDA each side speaks (the driver's 0 when there is none) */
    int drv_ver = 0, rt_ver = 0;
    (void)cudaDriverGetVersion(&drv_ver);
    (void)cudaRuntimeGetVersion(&rt_ver);
    (void)cudaGetLastError();
    char versions[96] = "";
    if (drv && crc == cudaErrorInsufficientDriver)
      snprintf(versions, sizeof versions, " (the driver supports CUDA %d.%d, cuda.so needs %d.%d)",
               drv_ver / 1000, drv_ver % 1000 / 10, rt_ver / 1000, rt_ver % 1000 / 10);
    if (err && errlen)
      snprintf(err, errlen, "device 'cuda': no usable GPU: %scudaGetDeviceCount failed: %s (%s)%s",
               drv ? "" : "no NVIDIA driver (libcuda.so.1 is not installed); ",
               cudaGetErrorString(crc), cudaGetErrorName(crc), versions);
    return LOOM_UNSUPPORTED;
  }
  if (count <= 0)
    return fail(err, errlen, LOOM_UNSUPPORTED,
                "device 'cuda': no GPU visible (CUDA_VISIBLE_DEVICES=%s)", visible_devices());
  if (local_rank < 0) local_rank = 0;
  if (local_size < 1) local_size = 1;
  if (o->device_id >= 0) {
    if (o->device_id >= count) {
      if (err && errlen)
        snprintf(err, errlen,
                 "device 'cuda': \"device_id\" %d but only %d GPUs visible "
                 "(CUDA_VISIBLE_DEVICES=%s)",
                 o->device_id, count, visible_devices());
      return LOOM_INVALID_CONFIG;
    }
    *gpu = o->device_id;
    return LOOM_OK;
  }
  if (local_size > count && !o->share_gpus) {
    if (err && errlen)
      snprintf(err, errlen,
               "device 'cuda': %d local ranks but only %d GPUs visible (CUDA_VISIBLE_DEVICES=%s); "
               "\"share_gpus\": true puts several ranks on one GPU (the mpi comm plugin allows "
               "it, nccl does not)",
               local_size, count, visible_devices());
    return LOOM_UNSUPPORTED;
  }
  *gpu = local_rank % count;
  return LOOM_OK;
}

/* ---- create / destroy ---- */

static void cuda_destroy(void *ctx) {
  cuda_ctx *c = ctx;
  if (!c) return;
  cudaSetDevice(c->device);
  if (c->stream) cudaStreamSynchronize(c->stream);
  if (c->blas) cublasDestroy(c->blas);
  c->failed = 0; /* release memory even after a failure */
  cuda_pool_destroy(c);
  if (c->h_result) cudaFreeHost(c->h_result);
  if (c->stream) cudaStreamDestroy(c->stream);
  (void)cudaGetLastError();
  free(c);
}

static int setup_failed(cuda_ctx *c, const char *what, const char *why, char *err,
                        size_t errlen) {
  if (err && errlen)
    snprintf(err, errlen, "device 'cuda': GPU %d: %s failed: %s", c->device, what, why);
  cuda_destroy(c);
  return LOOM_SYSTEM;
}

static int cuda_create_ex(const char *options_json, int local_rank, int local_size, void **ctx,
                          char *err, size_t errlen) {
  *ctx = NULL;
  if (err && errlen) err[0] = '\0';
  cuda_options o;
  int rc = parse_options(options_json ? options_json : "{}", &o, err, errlen);
  if (rc != LOOM_OK) return rc;
  int gpu = 0;
  rc = pick_gpu(&o, local_rank, local_size, &gpu, err, errlen);
  if (rc != LOOM_OK) return rc;
  cuda_ctx *c = calloc(1, sizeof *c);
  if (!c) return fail(err, errlen, LOOM_NOMEM, "device 'cuda': %s", "out of host memory");
  c->device = gpu;
  c->tf32 = o.tf32;
  c->compute_dtype = LOOM_F32;
  cudaError_t crc = cudaSetDevice(gpu);
  if (crc == cudaSuccess) crc = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
  if (crc != cudaSuccess) return setup_failed(c, "cudaSetDevice / cudaStreamCreate",
                                              cudaGetErrorString(crc), err, errlen);
  cublasStatus_t brc = cublasCreate(&c->blas);
  if (brc == CUBLAS_STATUS_SUCCESS) brc = cublasSetStream(c->blas, c->stream);
  if (brc != CUBLAS_STATUS_SUCCESS)
    return setup_failed(c, "cublasCreate", cublasGetStatusString(brc), err, errlen);
  /* cuBLAS would otherwise allocate its workspace inside calls; give it one from the pool */
  c->blas_workspace = cuda_pool_alloc(c, CUBLAS_WORKSPACE_BYTES);
  c->blas_workspace_bytes = CUBLAS_WORKSPACE_BYTES;
  c->d_result = cuda_pool_alloc(c, RESULT_DOUBLES * sizeof(double));
  if (!c->blas_workspace || !c->d_result)
    return setup_failed(c, "cudaMalloc", c->failed ? c->last_error : "out of GPU memory", err,
                        errlen);
  brc = cublasSetWorkspace(c->blas, c->blas_workspace, c->blas_workspace_bytes);
  if (brc != CUBLAS_STATUS_SUCCESS)
    return setup_failed(c, "cublasSetWorkspace", cublasGetStatusString(brc), err, errlen);
  crc = cudaMallocHost((void **)&c->h_result, RESULT_DOUBLES * sizeof(double));
  if (crc != cudaSuccess)
    return setup_failed(c, "cudaMallocHost", cudaGetErrorString(crc), err, errlen);
  *ctx = c;
  return LOOM_OK;
}

/* The ABI 1.0 slot: the same without the reason (a 1.4 host calls create_ex). */
static int cuda_create(const char *options_json, int local_rank, void **ctx) {
  char err[8];
  return cuda_create_ex(options_json, local_rank, 1, ctx, err, sizeof err);
}

static void *cuda_native_stream(void *ctx) { return ((cuda_ctx *)ctx)->stream; }

static void cuda_set_compute_dtype(void *ctx, loom_dtype dt) {
  cuda_ctx *c = ctx;
  /* anything but bf16 / fp16 keeps fp32 GEMMs: the promise is only useful for 16-bit types */
  c->compute_dtype = (dt == LOOM_BF16 || dt == LOOM_F16) ? dt : LOOM_F32;
}

/* ---- memory ---- */

static void *cuda_alloc(void *ctx, size_t bytes) {
  cuda_ctx *c = enter(ctx);
  if (!c) return NULL;
  void *p = cuda_pool_alloc(c, bytes);
  if (p && bytes) cuda_check(c, cudaMemsetAsync(p, 0, bytes, c->stream), "cudaMemsetAsync");
  return p;
}

static void cuda_free(void *ctx, void *ptr) { cuda_pool_free(ctx, ptr); }

static void cuda_memset_zero(void *ctx, void *ptr, size_t bytes) {
  cuda_ctx *c = enter(ctx);
  if (c && bytes) cuda_check(c, cudaMemsetAsync(ptr, 0, bytes, c->stream), "cudaMemsetAsync");
}

static void cuda_copy(void *ctx, void *dst, const void *src, size_t bytes) {
  cuda_ctx *c = enter(ctx);
  if (!c || !bytes || dst == src) return;
  const char *d = dst, *s = src;
  if (d < s + bytes && s < d + bytes) { /* overlap (memmove semantics): stage the source */
    void *tmp = cuda_pool_alloc(c, bytes);
    if (!tmp) {
      cuda_check(c, cudaErrorMemoryAllocation, "copy (overlapping ranges)");
      return;
    }
    cuda_check(c, cudaMemcpyAsync(tmp, src, bytes, cudaMemcpyDeviceToDevice, c->stream),
               "cudaMemcpyAsync");
    cuda_check(c, cudaMemcpyAsync(dst, tmp, bytes, cudaMemcpyDeviceToDevice, c->stream),
               "cudaMemcpyAsync");
    cuda_pool_free(c, tmp);
    return;
  }
  cuda_check(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream),
             "cudaMemcpyAsync");
}

static void cuda_to_host(void *ctx, void *host_dst, const void *src, size_t bytes) {
  cuda_ctx *c = enter(ctx);
  if (c && bytes) {
    cuda_check(c, cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, c->stream),
               "cudaMemcpyAsync (to host)");
    cuda_check(c, cudaStreamSynchronize(c->stream), "cudaStreamSynchronize");
  }
  if (((cuda_ctx *)ctx)->failed && bytes) memset(host_dst, 0xff, bytes); /* NaN, not garbage */
}

static void cuda_from_host(void *ctx, void *dst, const void *host_src, size_t bytes) {
  cuda_ctx *c = enter(ctx);
  if (!c || !bytes) return;
  cuda_check(c, cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, c->stream),
             "cudaMemcpyAsync (from host)");
  cuda_check(c, cudaStreamSynchronize(c->stream), "cudaStreamSynchronize");
}

static void cuda_synchronize(void *ctx) {
  cuda_ctx *c = enter(ctx);
  if (c) cuda_check(c, cudaStreamSynchronize(c->stream), "cudaStreamSynchronize");
}

/* ---- vectors ---- */

static void cuda_scale(void *ctx, float *x, float alpha, size_t n) {
  cuda_ctx *c = enter(ctx);
  if (!c) return;
  CUDA_LAUNCH(c, "scale", cuda_launch_scale(c->stream, x, alpha, n));
}

static void cuda_axpy(void *ctx, float *y, float alpha, const float *x, size_t n) {
  cuda_ctx *c = enter(ctx);
  if (!c) return;
  CUDA_LAUNCH(c, "axpy", cuda_launch_axpy(c->stream, y, alpha, x, n));
}

/* Copy `bytes` of the device result scalar to the pinned host copy and wait. 0 when ok. */
static int fetch_result(cuda_ctx *c, size_t bytes) {
  if (cuda_check(c, cudaMemcpyAsync(c->h_result, c->d_result, bytes, cudaMemcpyDeviceToHost,
                                    c->stream),
                 "cudaMemcpyAsync (result)"))
    return -1;
  return cuda_check(c, cudaStreamSynchronize(c->stream), "cudaStreamSynchronize");
}

static double cuda_sum_squares(void *ctx, const float *x, size_t n) {
  cuda_ctx *c = enter(ctx);
  if (!c) return NAN;
  CUDA_LAUNCH(c, "sum_squares", cuda_launch_sum_squares(c->stream, c->d_result, x, n));
  if (c->failed || fetch_result(c, sizeof(double))) return NAN;
  return c->h_result[0];
}

static int cuda_all_finite(void *ctx, const float *x, size_t n) {
  cuda_ctx *c = enter(ctx);
  if (!c) return 0;
  int *bad = (int *)c->d_result;
  cuda_check(c, cudaMemsetAsync(bad, 0, sizeof(int), c->stream), "cudaMemsetAsync");
  CUDA_LAUNCH(c, "all_finite", cuda_launch_any_nonfinite(c->stream, bad, x, n));
  if (c->failed || fetch_result(c, sizeof(int))) return 0;
  int flag;
  memcpy(&flag, c->h_result, sizeof flag);
  return !flag;
}

static void cuda_adamw(void *ctx, float *param, const float *grad, float *m, float *v, size_t n,
                       float lr, float beta1, float beta2, float eps, float weight_decay,
                       float grad_scale, int t) {
  cuda_ctx *c = enter(ctx);
  if (!c) return;
  /* the bias corrections exactly as the CPU device computes them (double pow, then float) */
  const float bc1 = (float)(1.0 - pow((double)beta1, t));
  const float bc2 = (float)(1.0 - pow((double)beta2, t));
  CUDA_LAUNCH(c, "adamw",
              cuda_launch_adamw(c->stream, param, grad, m, v, n, lr, beta1, beta2, eps,
                                weight_decay, grad_scale, bc1, bc2));
}

/* ---- GPT kernels ---- */

static void cuda_encoder_forward(void *ctx, float *out, const int32_t *inp, const float *wte,
                                 const float *wpe, int B, int T, int C) {
  cuda_ctx *c = enter(ctx);
  if (!c) return;
  CUDA_LAUNCH(c, "encoder_forward",
              cuda_launch_encoder_forward(c->stream, out, inp, wte, wpe, B, T, C));
}

static void cuda_encoder_backward(void *ctx, float *dwte, float *dwpe, const float *dout,
                                  const int32_t *inp, int B, int T, int C) {
  cuda_ctx *c = enter(ctx);
  if (!c || B <= 0 || T <= 0 || C <= 0) return;
  CUDA_LAUNCH(c, "encoder_backward (dwpe)",
              cuda_launch_encoder_backward_wpe(c->stream, dwpe, dout, B, T, C));
  int BT = B * T;
  size_t temp_bytes = cuda_encoder_sort_temp_bytes(BT);
  int32_t *idx = cuda_scratch_get(c, SCRATCH_SORT, (size_t)3 * BT * sizeof(int32_t));
  void *temp = cuda_scratch_get(c, SCRATCH_SORT_TEMP, temp_bytes);
  float *partial = cuda_scratch_get(c, SCRATCH_EMB_PARTIAL,
                                    cuda_encoder_partial_floats(BT, C) * sizeof(float));
  if (!idx || !temp || !partial) {
    cuda_check(c, cudaErrorMemoryAllocation, "encoder_backward scratch");
    return;
  }
  cuda_check(c, (cudaError_t)cuda_launch_encoder_backward_wte(c->stream, dwte, dout, inp, BT, C,
                                                              idx, partial, temp, temp_bytes),
             "encoder_backward (dwte)");
}

static void cuda_layernorm_forward(void *ctx, float *out, float *mean, float *rstd,
                                   const float *inp, const float *weight, const float *bias,
                                   int N, int C) {
  cuda_ctx *c = enter(ctx);
  if (!c) return;
  CUDA_LAUNCH(c, "layernorm_forward",
              cuda_launch_layernorm_forward(c->stream, out, mean, rstd, inp, weight, bias, N, C));
}

/* Floats of column-sum partials for N rows of C columns (times `arrays`). */
static float *colsum_scratch(cuda_ctx *c, int N, int C, int arrays) {
  size_t K = ((size_t)N + CUDA_COLSUM_CHUNK - 1) / CUDA_COLSUM_CHUNK;
  float *p = cuda_scratch_get(c, SCRATCH_REDUCE, K * (size_t)C * arrays * sizeof(float));
  if (!p) cuda_check(c, cudaErrorMemoryAllocation, "column-sum scratch");
  return p;
}

static void cuda_layernorm_backward(void *ctx, float *dinp, float *dweight, float *dbias,
                                    const float *dout, const float *inp, const float *weight,
                                    const float *mean, const float *rstd, int N, int C) {
  cuda_ctx *c = enter(ctx);
  if (!c || N <= 0 || C <= 0) return;
  CUDA_LAUNCH(c, "layernorm_backward (dinp)",
              cuda_launch_layernorm_backward_dinp(c->stream, dinp, dout, inp, weight, mean, rstd,
                                                  N, C));
  float *partial = colsum_scratch(c, N, C, 2);
  if (!partial) return;
  CUDA_LAUNCH(c, "layernorm_backward (dweight, dbias)",
              cuda_launch_layernorm_dweight_dbias(c->stream, dweight, dbias, dout, inp, mean, rstd,
                                                  N, C, partial));
}

static void cuda_matmul_forward(void *ctx, float *out, const float *inp, const float *weight,
                                const float *bias, int N, int C, int OC) {
  cuda_ctx *c = enter(ctx);
  if (!c) return;
  if (bias) {
    CUDA_LAUNCH(c, "matmul_forward (bias)", cuda_launch_bias_fill(c->stream, out, bias, N, OC));
  }
  /* out (N,OC) = inp (N,C) @ weight (OC,C)^T [+ out] */
  cuda_gemm_compute(c, 0, 1, N, OC, C, 1.0f, inp, C, weight, C, bias ? 1.0f : 0.0f, out, OC);
}

static void cuda_matmul_backward(void *ctx, float *dinp, float *dweight, float *dbias,
                                 const float *dout, const float *inp, const float *weight, int N,
                                 int C, int OC) {
  cuda_ctx *c = enter(ctx);
  if (!c) return;
  /* dinp (N,C) += dout (N,OC) @ weight (OC,C) */
  if (dinp) cuda_gemm_compute(c, 0, 0, N, C, OC, 1.0f, dout, OC, weight, C, 1.0f, dinp, C);
  /* dweight (OC,C) += dout^T (OC,N) @ inp (N,C) */
  if (dweight) cuda_gemm_compute(c, 1, 0, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
  if (dbias && N > 0 && OC > 0) {
    float *partial = colsum_scratch(c, N, OC, 1);
    if (!partial) return;
    CUDA_LAUNCH(c, "matmul_backward (dbias)",
                cuda_launch_colsum(c->stream, dbias, dout, N, OC, partial));
  }
}

/* Attention: per batch row b, one strided-batched GEMM over the NH heads. Head h of q, k, v
 * starts h*HS floats into its third of the row (leading dimension 3C), of out at h*HS (leading
 * dimension C), of att at h*T*T: uniform strides, and the heads' outputs never overlap. The
 * GEMMs are fp32 (TF32 with the option) whatever the compute dtype: the probabilities and their
 * gradients are not promised to be 16-bit values. */
static void cuda_attention_forward(void *ctx, float *out, float *att, const float *qkv, int B,
                                   int T, int NH, int HS) {
  cuda_ctx *c = enter(ctx);
  if (!c || B <= 0 || T <= 0 || NH <= 0) return;
  const int C = NH * HS, C3 = 3 * C;
  const long long TT = (long long)T * T;
  const float scale = 1.0f / sqrtf((float)HS);
  for (int b = 0; b < B; b++) {
    const float *q = qkv + (size_t)b * T * C3, *k = q + C;
    float *p = att + (size_t)b * NH * TT;
    /* S (T,T) = scale * Q (T,HS) @ K^T, full square: the softmax masks the upper triangle */
    cuda_gemm_f32(c, 0, 1, T, T, HS, scale, q, C3, HS, k, C3, HS, 0.0f, p, T, TT, NH);
  }
  CUDA_LAUNCH(c, "attention_forward (softmax)",
              cuda_launch_causal_softmax(c->stream, att, B * NH, T));
  for (int b = 0; b < B; b++) {
    const float *v = qkv + (size_t)b * T * C3 + 2 * C;
    const float *p = att + (size_t)b * NH * TT;
    float *o = out + (size_t)b * T * C;
    /* out (T,HS) = P (T,T) @ V (T,HS) */
    cuda_gemm_f32(c, 0, 0, T, HS, T, 1.0f, p, T, TT, v, C3, HS, 0.0f, o, C, HS, NH);
  }
}

static void cuda_attention_backward(void *ctx, float *dqkv, float *datt, const float *dout,
                                    const float *qkv, const float *att, int B, int T, int NH,
                                    int HS) {
  cuda_ctx *c = enter(ctx);
  if (!c || B <= 0 || T <= 0 || NH <= 0) return;
  const int C = NH * HS, C3 = 3 * C;
  const long long TT = (long long)T * T;
  const float scale = 1.0f / sqrtf((float)HS);
  for (int b = 0; b < B; b++) {
    size_t off = (size_t)b * T * C3;
    const float *v = qkv + off + 2 * C;
    float *dv = dqkv + off + 2 * C;
    const float *p = att + (size_t)b * NH * TT;
    float *dp = datt + (size_t)b * NH * TT;
    const float *dob = dout + (size_t)b * T * C;
    /* dP (T,T) = dout (T,HS) @ V^T */
    cuda_gemm_f32(c, 0, 1, T, T, HS, 1.0f, dob, C, HS, v, C3, HS, 0.0f, dp, T, TT, NH);
    /* dV (T,HS) += P^T (T,T) @ dout (T,HS) */
    cuda_gemm_f32(c, 1, 0, T, HS, T, 1.0f, p, T, TT, dob, C, HS, 1.0f, dv, C3, HS, NH);
  }
  /* dS = P * (dP - rowsum(P*dP)) * scale, in place, 0 above the diagonal */
  CUDA_LAUNCH(c, "attention_backward (softmax)",
              cuda_launch_causal_softmax_backward(c->stream, datt, att, B * NH, T, scale));
  for (int b = 0; b < B; b++) {
    size_t off = (size_t)b * T * C3;
    const float *q = qkv + off, *k = q + C;
    float *dq = dqkv + off, *dk = dq + C;
    const float *dp = datt + (size_t)b * NH * TT;
    /* dQ (T,HS) += dS (T,T) @ K;  dK (T,HS) += dS^T @ Q */
    cuda_gemm_f32(c, 0, 0, T, HS, T, 1.0f, dp, T, TT, k, C3, HS, 1.0f, dq, C3, HS, NH);
    cuda_gemm_f32(c, 1, 0, T, HS, T, 1.0f, dp, T, TT, q, C3, HS, 1.0f, dk, C3, HS, NH);
  }
}

static void cuda_gelu_forward(void *ctx, float *out, const float *inp, size_t n) {
  cuda_ctx *c = enter(ctx);
  if (!c) return;
  CUDA_LAUNCH(c, "gelu_forward", cuda_launch_gelu_forward(c->stream, out, inp, n));
}

static void cuda_gelu_backward(void *ctx, float *dinp, const float *inp, const float *dout,
                               size_t n) {
  cuda_ctx *c = enter(ctx);
  if (!c) return;
  CUDA_LAUNCH(c, "gelu_backward", cuda_launch_gelu_backward(c->stream, dinp, inp, dout, n));
}

static void cuda_residual_forward(void *ctx, float *out, const float *a, const float *b,
                                  size_t n) {
  cuda_ctx *c = enter(ctx);
  if (!c) return;
  CUDA_LAUNCH(c, "residual_forward", cuda_launch_residual(c->stream, out, a, b, n));
}

static void cuda_crossentropy_forward(void *ctx, float *losses, float *probs,
                                      const float *logits, const int32_t *targets, int N, int V) {
  cuda_ctx *c = enter(ctx);
  if (!c) return;
  CUDA_LAUNCH(c, "crossentropy_forward",
              cuda_launch_crossentropy_forward(c->stream, losses, probs, logits, targets, N, V));
}

static void cuda_crossentropy_backward(void *ctx, float *dlogits, const float *probs,
                                       const int32_t *targets, float dloss, int N, int V) {
  cuda_ctx *c = enter(ctx);
  if (!c) return;
  CUDA_LAUNCH(c, "crossentropy_backward",
              cuda_launch_crossentropy_backward(c->stream, dlogits, probs, targets, dloss, N, V));
}

static void cuda_crossentropy_fused(void *ctx, float *losses, float *dlogits,
                                    const float *logits, const int32_t *targets, float dloss,
                                    int N, int V) {
  cuda_ctx *c = enter(ctx);
  if (!c) return;
  CUDA_LAUNCH(c, "crossentropy_fused",
              cuda_launch_crossentropy_fused(c->stream, losses, dlogits, logits, targets, dloss, N,
                                             V));
}

/* ---- 16-bit storage ---- */

static void cuda_round_to(void *ctx, float *x, loom_dtype dtype, size_t n) {
  cuda_ctx *c = enter(ctx);
  if (!c || (dtype != LOOM_BF16 && dtype != LOOM_F16)) return;
  CUDA_LAUNCH(c, "round_to", cuda_launch_round_to(c->stream, x, dtype, n));
}

static int cuda_convert(void *ctx, void *dst, loom_dtype dst_dtype, const void *src,
                        loom_dtype src_dtype, size_t n) {
  int narrow = src_dtype == LOOM_F32 && (dst_dtype == LOOM_BF16 || dst_dtype == LOOM_F16);
  int widen = dst_dtype == LOOM_F32 && (src_dtype == LOOM_BF16 || src_dtype == LOOM_F16);
  int same = src_dtype == LOOM_F32 && dst_dtype == LOOM_F32;
  if (!narrow && !widen && !same) return LOOM_UNSUPPORTED;
  cuda_ctx *c = enter(ctx);
  if (!c) return LOOM_SYSTEM;
  if (same) cuda_copy(c, dst, src, n * sizeof(float));
  else if (narrow) CUDA_LAUNCH(c, "convert", cuda_launch_pack16(c->stream, dst, src, dst_dtype, n));
  else CUDA_LAUNCH(c, "convert", cuda_launch_unpack16(c->stream, dst, src, src_dtype, n));
  return c->failed ? LOOM_SYSTEM : LOOM_OK;
}

LOOM_EXPORT const loom_device_v1 loom_plugin_v1 = {
    .hdr = LOOM_PLUGIN_HEADER_INIT(LOOM_KIND_DEVICE, "cuda", "1.0.0",
                                   "NVIDIA GPU (cuBLAS GEMMs, CUDA kernels, caching allocator, "
                                   "one stream per rank)",
                                   0, loom_device_v1),
    .create = cuda_create,
    .destroy = cuda_destroy,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .memset_zero = cuda_memset_zero,
    .copy = cuda_copy,
    .to_host = cuda_to_host,
    .from_host = cuda_from_host,
    .synchronize = cuda_synchronize,
    .scale = cuda_scale,
    .axpy = cuda_axpy,
    .sum_squares = cuda_sum_squares,
    .all_finite = cuda_all_finite,
    .adamw = cuda_adamw,
    .encoder_forward = cuda_encoder_forward,
    .encoder_backward = cuda_encoder_backward,
    .layernorm_forward = cuda_layernorm_forward,
    .layernorm_backward = cuda_layernorm_backward,
    .matmul_forward = cuda_matmul_forward,
    .matmul_backward = cuda_matmul_backward,
    .attention_forward = cuda_attention_forward,
    .attention_backward = cuda_attention_backward,
    .gelu_forward = cuda_gelu_forward,
    .gelu_backward = cuda_gelu_backward,
    .residual_forward = cuda_residual_forward,
    .crossentropy_forward = cuda_crossentropy_forward,
    .crossentropy_backward = cuda_crossentropy_backward,
    .round_to = cuda_round_to,
    .convert = cuda_convert,
    .create_ex = cuda_create_ex,
    .native_stream = cuda_native_stream,
    .set_compute_dtype = cuda_set_compute_dtype,
    .crossentropy_fused = cuda_crossentropy_fused,
    .error = cuda_error,
};
