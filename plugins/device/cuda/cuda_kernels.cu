/* cuda.so's kernels: everything of the device table that is not a cuBLAS GEMM. Each launcher
 * enqueues on the given stream and returns; the caller checks cudaGetLastError (cleared before
 * the launch: CUDA_LAUNCH, cuda_check.h).
 *
 * Matching the CPU device (core/device/cpu_*.c): every kernel evaluates the CPU's formula with
 * the same float operations in the same order, and this file is compiled with --fmad=false
 * (CMakeLists.txt), IEEE division and square root: so the elementwise kernels (scale, axpy,
 * AdamW, encoder, residual, cross-entropy backward, round_to / convert) give the CPU's results
 * bit for bit, and the sums down columns that the CPU runs serially (encoder dwte / dwpe) are
 * run in the CPU's order too where a token's occurrences fit one 64-entry chunk
 * (cuda_embed_chunks.h; longer runs add per-chunk partials in chunk order: deterministic,
 * equal to fp32 rounding). Row reductions (layernorm, softmax) use warp / block trees
 * instead of the CPU's SIMD order: equal to fp32 rounding, not bitwise. Transcendentals are
 * CUDA's expf / tanhf (<= 2 ulp), the CPU's are glibc's.
 *
 * Determinism: no kernel uses floating-point atomics. Every reduction has a fixed shape that
 * depends on the sizes only, so a run repeats bit for bit on the same GPU model. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

#include <cub/device/device_radix_sort.cuh>

#include "cuda_embed_chunks.h"
#include "cuda_kernels.h"

#define LN_EPS 1e-5f
#define GELU_SCALING 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_COEF 0.044715f

/* Threads per block of the elementwise kernels, and the most blocks they launch (grid-stride
 * loops cover the rest: n may exceed 2^31). */
#define EW_THREADS 256
#define EW_MAX_BLOCKS 65536

static unsigned ew_blocks(size_t n) {
  size_t b = (n + EW_THREADS - 1) / EW_THREADS;
  if (b == 0) b = 1;
  return (unsigned)(b < EW_MAX_BLOCKS ? b : EW_MAX_BLOCKS);
}

#define GRID_STRIDE(i, n)                                                            \
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);            \
       i += (size_t)gridDim.x * blockDim.x)

/* ---- warp and block reductions: butterflies and trees of a fixed shape ---- */

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/* Sum (or max) over the block of one value per thread, returned to every thread. `sh` holds
 * blockDim.x elements; blockDim.x is a power of two. */
template <typename T, bool IS_MAX>
__device__ T block_reduce(T v, T *sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      T a = sh[threadIdx.x], b = sh[threadIdx.x + s];
      sh[threadIdx.x] = IS_MAX ? (a > b ? a : b) : a + b;
    }
    __syncthreads();
  }
  T r = sh[0];
  __syncthreads(); /* sh may be reused right after */
  return r;
}

/* ---- vectors ---- */

__global__ void scale_kernel(float *x, float alpha, size_t n) {
  GRID_STRIDE(i, n) x[i] *= alpha;
}
extern "C" void cuda_launch_scale(cudaStream_t s, float *x, float alpha, size_t n) {
  if (n) scale_kernel<<<ew_blocks(n), EW_THREADS, 0, s>>>(x, alpha, n);
}

__global__ void axpy_kernel(float *y, float alpha, const float *x, size_t n) {
  GRID_STRIDE(i, n) y[i] += alpha * x[i];
}
extern "C" void cuda_launch_axpy(cudaStream_t s, float *y, float alpha, const float *x,
                                 size_t n) {
  if (n) axpy_kernel<<<ew_blocks(n), EW_THREADS, 0, s>>>(y, alpha, x, n);
}

/* sum of squares: block b sums its contiguous chunk (threads strided within it, then a tree),
 * a second one-block kernel sums the CUDA_REDUCE_BLOCKS partials with a tree. */
#define REDUCE_THREADS 256
__global__ void sum_squares_partial(double *partial, const float *x, size_t n) {
  __shared__ double sh[REDUCE_THREADS];
  size_t chunk = (n + CUDA_REDUCE_BLOCKS - 1) / CUDA_REDUCE_BLOCKS;
  size_t lo = (size_t)blockIdx.x * chunk, hi = lo + chunk < n ? lo + chunk : n;
  double acc = 0.0;
  for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) acc += (double)x[i] * (double)x[i];
  acc = block_reduce<double, false>(acc, sh);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}
__global__ void sum_squares_final(double *out, const double *partial) {
  __shared__ double sh[CUDA_REDUCE_BLOCKS];
  double v = block_reduce<double, false>(partial[threadIdx.x], sh);
  if (threadIdx.x == 0) *out = v;
}
extern "C" void cuda_launch_sum_squares(cudaStream_t s, double *out, const float *x, size_t n) {
  sum_squares_partial<<<CUDA_REDUCE_BLOCKS, REDUCE_THREADS, 0, s>>>(out + 1, x, n);
  sum_squares_final<<<1, CUDA_REDUCE_BLOCKS, 0, s>>>(out, out + 1);
}

__global__ void any_nonfinite_kernel(int *bad, const float *x, size_t n) {
  int mine = 0;
  GRID_STRIDE(i, n) mine |= !isfinite(x[i]);
  if (__syncthreads_or(mine) && threadIdx.x == 0) *bad = 1; /* every writer writes 1 */
}
extern "C" void cuda_launch_any_nonfinite(cudaStream_t s, int *bad, const float *x, size_t n) {
  if (n) any_nonfinite_kernel<<<ew_blocks(n), EW_THREADS, 0, s>>>(bad, x, n);
}

/* AdamW, the CPU's scalar loop (cpu_device.c adamw_range) element by element */
__global__ void adamw_kernel(float *param, const float *grad, float *m, float *v, size_t n,
                             float lr, float beta1, float beta2, float eps, float weight_decay,
                             float grad_scale, float bc1, float bc2) {
  GRID_STRIDE(i, n) {
    float g = grad[i] * grad_scale;
    float mi = beta1 * m[i] + (1.0f - beta1) * g;
    float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    float mhat = mi / bc1, vhat = vi / bc2;
    param[i] -= lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * param[i]);
    m[i] = mi;
    v[i] = vi;
  }
}
extern "C" void cuda_launch_adamw(cudaStream_t s, float *param, const float *grad, float *m,
                                  float *v, size_t n, float lr, float beta1, float beta2,
                                  float eps, float weight_decay, float grad_scale, float bc1,
                                  float bc2) {
  if (n)
    adamw_kernel<<<ew_blocks(n), EW_THREADS, 0, s>>>(param, grad, m, v, n, lr, beta1, beta2, eps,
                                                     weight_decay, grad_scale, bc1, bc2);
}

/* ---- encoder ---- */

__global__ void encoder_forward_kernel(float *out, const int32_t *inp, const float *wte,
                                       const float *wpe, int T, int C, size_t n) {
  GRID_STRIDE(i, n) {
    size_t bt = i / (size_t)C;
    int c = (int)(i % (size_t)C), t = (int)(bt % (size_t)T);
    out[i] = wte[(size_t)inp[bt] * C + c] + wpe[(size_t)t * C + c];
  }
}
extern "C" void cuda_launch_encoder_forward(cudaStream_t s, float *out, const int32_t *inp,
                                            const float *wte, const float *wpe, int B, int T,
                                            int C) {
  size_t n = (size_t)B * T * C;
  if (n) encoder_forward_kernel<<<ew_blocks(n), EW_THREADS, 0, s>>>(out, inp, wte, wpe, T, C, n);
}

/* dwpe[t][c] += dout[b][t][c] for b = 0..B-1 in order: one thread per (t, c) */
__global__ void encoder_backward_wpe_kernel(float *dwpe, const float *dout, int B, int T, int C) {
  size_t n = (size_t)T * C;
  GRID_STRIDE(i, n) {
    float acc = dwpe[i];
    for (int b = 0; b < B; b++) acc += dout[(size_t)b * n + i];
    dwpe[i] = acc;
  }
}
extern "C" void cuda_launch_encoder_backward_wpe(cudaStream_t s, float *dwpe, const float *dout,
                                                 int B, int T, int C) {
  size_t n = (size_t)T * C;
  if (n && B > 0)
    encoder_backward_wpe_kernel<<<ew_blocks(n), EW_THREADS, 0, s>>>(dwpe, dout, B, T, C);
}

/* dwte: after a stable sort of positions by token, the sorted order is cut into fixed chunks of
 * EMB_CHUNK entries (cuda_embed_chunks.h): block (k, y) adds chunk k's rows of dout into its
 * columns, each run in increasing position order (a run inside one chunk: the CPU's order
 * exactly), and a second kernel adds the partials of the runs that cross chunks in chunk order.
 * No atomics, a shape fixed by the sorted tokens: deterministic. A token repeated M times costs
 * about EMB_CHUNK + M / EMB_CHUNK dependent loads per column instead of M. */
__global__ void iota_kernel(int32_t *v, int n) {
  GRID_STRIDE(i, (size_t)n) v[i] = (int32_t)i;
}
__global__ void encoder_backward_wte_chunks(float *dwte, float *head, float *cont,
                                            const float *dout, const int32_t *tok_sorted,
                                            const int32_t *pos_sorted, int BT, int C) {
  int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c < C) emb_chunk_sum(dwte, head, cont, dout, tok_sorted, pos_sorted, BT, C, blockIdx.x, c);
}
__global__ void encoder_backward_wte_join(float *dwte, const float *head, const float *cont,
                                          const int32_t *tok_sorted, int BT, int C) {
  int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c < C) emb_chunk_join(dwte, head, cont, tok_sorted, BT, C, blockIdx.x, c);
}
extern "C" size_t cuda_encoder_partial_floats(int BT, int C) {
  return BT > 0 && C > 0 ? (size_t)2 * emb_n_chunks(BT) * (size_t)C : 0;
}
extern "C" size_t cuda_encoder_sort_temp_bytes(int BT) {
  size_t bytes = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, bytes, (const int32_t *)nullptr, (int32_t *)nullptr,
                                  (const int32_t *)nullptr, (int32_t *)nullptr, BT);
  return bytes;
}
extern "C" int cuda_launch_encoder_backward_wte(cudaStream_t s, float *dwte, const float *dout,
                                                const int32_t *inp, int BT, int C,
                                                int32_t *scratch4, float *partial, void *temp,
                                                size_t temp_bytes) {
  if (BT <= 0 || C <= 0) return (int)cudaSuccess;
  (void)cudaGetLastError(); /* the error returned below must be these launches' own */
  int32_t *pos = scratch4, *tok_sorted = scratch4 + BT, *pos_sorted = scratch4 + 2 * (size_t)BT;
  iota_kernel<<<ew_blocks((size_t)BT), EW_THREADS, 0, s>>>(pos, BT);
  /* radix sort is stable: equal tokens keep their positions in increasing order */
  cudaError_t rc = cub::DeviceRadixSort::SortPairs(temp, temp_bytes, inp, tok_sorted, pos,
                                                   pos_sorted, BT, 0, 32, s);
  if (rc != cudaSuccess) return (int)rc;
  dim3 grid((unsigned)emb_n_chunks(BT), (unsigned)((C + 127) / 128));
  float *head = partial, *cont = partial + (size_t)emb_n_chunks(BT) * C;
  encoder_backward_wte_chunks<<<grid, 128, 0, s>>>(dwte, head, cont, dout, tok_sorted,
                                                   pos_sorted, BT, C);
  encoder_backward_wte_join<<<grid, 128, 0, s>>>(dwte, head, cont, tok_sorted, BT, C);
  return (int)cudaGetLastError();
}

/* ---- layernorm: one warp per row ---- */

#define ROWS_PER_BLOCK 8 /* warps per block of the row kernels */

__global__ void layernorm_forward_kernel(float *out, float *mean, float *rstd, const float *inp,
                                         const float *weight, const float *bias, int N, int C) {
  int n = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (n >= N) return;
  const float *x = inp + (size_t)n * C;
  float *o = out + (size_t)n * C;
  float m = 0.0f;
  for (int c = lane; c < C; c += 32) m += x[c];
  m = warp_sum(m) / (float)C;
  float v = 0.0f;
  for (int c = lane; c < C; c += 32) {
    float xm = x[c] - m;
    v += xm * xm;
  }
  v = warp_sum(v) / (float)C;
  float s = 1.0f / sqrtf(v + LN_EPS);
  for (int c = lane; c < C; c += 32) o[c] = (x[c] - m) * s * weight[c] + bias[c];
  if (lane == 0) {
    mean[n] = m;
    rstd[n] = s;
  }
}
extern "C" void cuda_launch_layernorm_forward(cudaStream_t s, float *out, float *mean,
                                              float *rstd, const float *inp, const float *weight,
                                              const float *bias, int N, int C) {
  if (N > 0)
    layernorm_forward_kernel<<<(N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK, 32 * ROWS_PER_BLOCK, 0,
                               s>>>(out, mean, rstd, inp, weight, bias, N, C);
}

__global__ void layernorm_backward_dinp_kernel(float *dinp, const float *dout, const float *inp,
                                               const float *weight, const float *mean,
                                               const float *rstd, int N, int C) {
  int n = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (n >= N) return;
  const float *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
  float *di = dinp + (size_t)n * C;
  const float m = mean[n], s = rstd[n];
  float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
  for (int c = lane; c < C; c += 32) {
    float norm = (x[c] - m) * s;
    float dnorm = weight[c] * d[c];
    dnorm_mean += dnorm;
    dnorm_norm_mean += dnorm * norm;
  }
  dnorm_mean = warp_sum(dnorm_mean) / (float)C;
  dnorm_norm_mean = warp_sum(dnorm_norm_mean) / (float)C;
  for (int c = lane; c < C; c += 32) {
    float norm = (x[c] - m) * s;
    float dnorm = weight[c] * d[c];
    di[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
  }
}
extern "C" void cuda_launch_layernorm_backward_dinp(cudaStream_t s, float *dinp,
                                                    const float *dout, const float *inp,
                                                    const float *weight, const float *mean,
                                                    const float *rstd, int N, int C) {
  if (N > 0)
    layernorm_backward_dinp_kernel<<<(N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK,
                                     32 * ROWS_PER_BLOCK, 0, s>>>(dinp, dout, inp, weight, mean,
                                                                  rstd, N, C);
}

/* ---- sums down the rows in two passes: chunk partials, then the chunks in order ---- */

#define COL_THREADS 128

/* partial[k][c] = sum of rows k*CHUNK .. of dout[:, c] (and of norm*dout when ln) */
template <bool LN>
__global__ void colsum_partial_kernel(float *partial, float *partial2, const float *dout,
                                      const float *inp, const float *mean, const float *rstd,
                                      int N, int C) {
  int c = blockIdx.y * blockDim.x + threadIdx.x, k = blockIdx.x;
  if (c >= C) return;
  int n0 = k * CUDA_COLSUM_CHUNK, n1 = n0 + CUDA_COLSUM_CHUNK < N ? n0 + CUDA_COLSUM_CHUNK : N;
  float acc = 0.0f, acc2 = 0.0f;
  for (int n = n0; n < n1; n++) {
    float d = dout[(size_t)n * C + c];
    if (LN) acc2 += (inp[(size_t)n * C + c] - mean[n]) * rstd[n] * d;
    acc += d;
  }
  partial[(size_t)k * C + c] = acc;
  if (LN) partial2[(size_t)k * C + c] = acc2;
}
__global__ void colsum_final_kernel(float *out, const float *partial, int K, int C) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float acc = 0.0f;
  for (int k = 0; k < K; k++) acc += partial[(size_t)k * C + c];
  out[c] += acc;
}
extern "C" void cuda_launch_colsum(cudaStream_t s, float *out, const float *dout, int N, int C,
                                   float *partial) {
  if (N <= 0 || C <= 0) return;
  int K = (N + CUDA_COLSUM_CHUNK - 1) / CUDA_COLSUM_CHUNK;
  /* chunks on x (up to 2^31 - 1), column blocks on y (up to 65535 x 128 columns) */
  dim3 grid((unsigned)K, (unsigned)((C + COL_THREADS - 1) / COL_THREADS));
  colsum_partial_kernel<false><<<grid, COL_THREADS, 0, s>>>(partial, nullptr, dout, nullptr,
                                                             nullptr, nullptr, N, C);
  colsum_final_kernel<<<grid.y, COL_THREADS, 0, s>>>(out, partial, K, C);
}
extern "C" void cuda_launch_layernorm_dweight_dbias(cudaStream_t s, float *dweight, float *dbias,
                                                    const float *dout, const float *inp,
                                                    const float *mean, const float *rstd, int N,
                                                    int C, float *partial) {
  if (N <= 0 || C <= 0) return;
  int K = (N + CUDA_COLSUM_CHUNK - 1) / CUDA_COLSUM_CHUNK;
  float *partial2 = partial + (size_t)K * C;
  dim3 grid((unsigned)K, (unsigned)((C + COL_THREADS - 1) / COL_THREADS));
  colsum_partial_kernel<true><<<grid, COL_THREADS, 0, s>>>(partial, partial2, dout, inp, mean,
                                                            rstd, N, C);
  colsum_final_kernel<<<grid.y, COL_THREADS, 0, s>>>(dbias, partial, K, C);
  colsum_final_kernel<<<grid.y, COL_THREADS, 0, s>>>(dweight, partial2, K, C);
}

__global__ void bias_fill_kernel(float *out, const float *bias, int OC, size_t n) {
  GRID_STRIDE(i, n) out[i] = bias[i % (size_t)OC];
}
extern "C" void cuda_launch_bias_fill(cudaStream_t s, float *out, const float *bias, int N,
                                      int OC) {
  size_t n = (size_t)N * OC;
  if (n) bias_fill_kernel<<<ew_blocks(n), EW_THREADS, 0, s>>>(out, bias, OC, n);
}

/* ---- causal softmax over rows of the (B*NH, T, T) scores: one warp per row ---- */

__global__ void causal_softmax_kernel(float *att, size_t rows, int T) {
  size_t r = (size_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (r >= rows) return;
  int t = (int)(r % (size_t)T);
  float *row = att + r * T;
  float maxv = -INFINITY;
  for (int j = lane; j <= t; j += 32) maxv = fmaxf(maxv, row[j]);
  maxv = warp_max(maxv);
  float sum = 0.0f;
  for (int j = lane; j <= t; j += 32) {
    float e = expf(row[j] - maxv);
    row[j] = e;
    sum += e;
  }
  float inv = 1.0f / warp_sum(sum);
  for (int j = lane; j < T; j += 32) row[j] = j <= t ? row[j] * inv : 0.0f;
}
extern "C" void cuda_launch_causal_softmax(cudaStream_t s, float *att, int BH, int T) {
  size_t rows = (size_t)BH * T;
  if (rows)
    causal_softmax_kernel<<<(unsigned)((rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK),
                            32 * ROWS_PER_BLOCK, 0, s>>>(att, rows, T);
}

__global__ void causal_softmax_backward_kernel(float *datt, const float *att, size_t rows, int T,
                                               float scale) {
  size_t r = (size_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (r >= rows) return;
  int t = (int)(r % (size_t)T);
  const float *p = att + r * T;
  float *d = datt + r * T;
  float dot = 0.0f;
  for (int j = lane; j <= t; j += 32) dot += p[j] * d[j];
  dot = warp_sum(dot);
  for (int j = lane; j < T; j += 32) d[j] = j <= t ? p[j] * (d[j] - dot) * scale : 0.0f;
}
extern "C" void cuda_launch_causal_softmax_backward(cudaStream_t s, float *datt,
                                                    const float *att, int BH, int T,
                                                    float scale) {
  size_t rows = (size_t)BH * T;
  if (rows)
    causal_softmax_backward_kernel<<<(unsigned)((rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK),
                                     32 * ROWS_PER_BLOCK, 0, s>>>(datt, att, rows, T, scale);
}

/* ---- GELU (tanh approximation), residual ---- */

__global__ void gelu_forward_kernel(float *out, const float *inp, size_t n) {
  GRID_STRIDE(i, n) {
    float x = inp[i];
    float cube = GELU_COEF * x * x * x;
    out[i] = 0.5f * x * (1.0f + tanhf(GELU_SCALING * (x + cube)));
  }
}
extern "C" void cuda_launch_gelu_forward(cudaStream_t s, float *out, const float *inp,
                                         size_t n) {
  if (n) gelu_forward_kernel<<<ew_blocks(n), EW_THREADS, 0, s>>>(out, inp, n);
}

__global__ void gelu_backward_kernel(float *dinp, const float *inp, const float *dout,
                                     size_t n) {
  GRID_STRIDE(i, n) {
    float x = inp[i];
    float cube = GELU_COEF * x * x * x;
    float th = tanhf(GELU_SCALING * (x + cube));
    float sech2 = 1.0f - th * th;
    float local =
        0.5f * (1.0f + th) + x * 0.5f * sech2 * GELU_SCALING * (1.0f + 3.0f * GELU_COEF * x * x);
    dinp[i] += local * dout[i];
  }
}
extern "C" void cuda_launch_gelu_backward(cudaStream_t s, float *dinp, const float *inp,
                                          const float *dout, size_t n) {
  if (n) gelu_backward_kernel<<<ew_blocks(n), EW_THREADS, 0, s>>>(dinp, inp, dout, n);
}

__global__ void residual_kernel(float *out, const float *a, const float *b, size_t n) {
  GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}
extern "C" void cuda_launch_residual(cudaStream_t s, float *out, const float *a, const float *b,
                                     size_t n) {
  if (n) residual_kernel<<<ew_blocks(n), EW_THREADS, 0, s>>>(out, a, b, n);
}

/* ---- softmax cross-entropy: one block per row, the sum in double as on the CPU ---- */

#define CE_THREADS 512

__global__ void crossentropy_forward_kernel(float *losses, float *probs, const float *logits,
                                            const int32_t *targets, int V) {
  __shared__ double shd[CE_THREADS];
  __shared__ float shf[CE_THREADS];
  size_t n = blockIdx.x;
  const float *l = logits + n * V;
  float *p = probs + n * V;
  float maxv = -INFINITY;
  for (int v = threadIdx.x; v < V; v += blockDim.x) maxv = fmaxf(maxv, l[v]);
  maxv = block_reduce<float, true>(maxv, shf);
  double sum = 0.0;
  for (int v = threadIdx.x; v < V; v += blockDim.x) {
    float e = expf(l[v] - maxv);
    p[v] = e;
    sum += e;
  }
  sum = block_reduce<double, false>(sum, shd);
  float inv = (float)(1.0 / sum);
  for (int v = threadIdx.x; v < V; v += blockDim.x) p[v] *= inv; /* this thread's own writes */
  if (threadIdx.x == 0) {
    int32_t t = targets[n];
    /* -log softmax as logsumexp - logit: exact even when probs[t] underflows */
    losses[n] = t < 0 ? 0.0f : (float)(log(sum) - (double)(l[t] - maxv));
  }
}
extern "C" void cuda_launch_crossentropy_forward(cudaStream_t s, float *losses, float *probs,
                                                 const float *logits, const int32_t *targets,
                                                 int N, int V) {
  if (N > 0)
    crossentropy_forward_kernel<<<(unsigned)N, CE_THREADS, 0, s>>>(losses, probs, logits,
                                                                    targets, V);
}

__global__ void crossentropy_backward_kernel(float *dlogits, const float *probs,
                                             const int32_t *targets, float dloss, int V,
                                             size_t n) {
  GRID_STRIDE(i, n) {
    size_t row = i / (size_t)V;
    int v = (int)(i % (size_t)V);
    int32_t t = targets[row];
    float p = probs[i];
    dlogits[i] = t < 0 ? 0.0f : (v == t ? (p - 1.0f) * dloss : p * dloss);
  }
}
extern "C" void cuda_launch_crossentropy_backward(cudaStream_t s, float *dlogits,
                                                  const float *probs, const int32_t *targets,
                                                  float dloss, int N, int V) {
  size_t n = (size_t)N * V;
  if (n)
    crossentropy_backward_kernel<<<ew_blocks(n), EW_THREADS, 0, s>>>(dlogits, probs, targets,
                                                                      dloss, V, n);
}

/* The fused classifier (device ABI 1.4): crossentropy_forward's row pass and
 * crossentropy_backward's formula with the same operations in the same order, without a probs
 * buffer; dlogits may be logits (each thread reads element v before it writes element v; the
 * target's logit is read for the loss before any write). dlogits NULL: the loss only. */
__global__ void crossentropy_fused_kernel(float *losses, float *dlogits, const float *logits,
                                          const int32_t *targets, float dloss, int V) {
  __shared__ double shd[CE_THREADS];
  __shared__ float shf[CE_THREADS];
  size_t n = blockIdx.x;
  const float *l = logits + n * V;
  float maxv = -INFINITY;
  for (int v = threadIdx.x; v < V; v += blockDim.x) maxv = fmaxf(maxv, l[v]);
  maxv = block_reduce<float, true>(maxv, shf);
  double sum = 0.0;
  for (int v = threadIdx.x; v < V; v += blockDim.x) sum += expf(l[v] - maxv);
  sum = block_reduce<double, false>(sum, shd);
  int32_t t = targets[n];
  if (threadIdx.x == 0) losses[n] = t < 0 ? 0.0f : (float)(log(sum) - (double)(l[t] - maxv));
  if (!dlogits) return;
  __syncthreads(); /* l[t] is read before the in-place writes below */
  float inv = (float)(1.0 / sum);
  float *d = dlogits + n * V;
  for (int v = threadIdx.x; v < V; v += blockDim.x) {
    float p = expf(l[v] - maxv) * inv;
    d[v] = t < 0 ? 0.0f : (v == t ? (p - 1.0f) * dloss : p * dloss);
  }
}
extern "C" void cuda_launch_crossentropy_fused(cudaStream_t s, float *losses, float *dlogits,
                                               const float *logits, const int32_t *targets,
                                               float dloss, int N, int V) {
  if (N > 0)
    crossentropy_fused_kernel<<<(unsigned)N, CE_THREADS, 0, s>>>(losses, dlogits, logits,
                                                                  targets, dloss, V);
}

/* ---- 16-bit rounding and packing, bit for bit loom/half_v1.h ---- */

/* NaN: half_v1.h keeps the payload's top bits and sets the quiet bit, where the hardware
 * conversions return a canonical NaN; every other value is the hardware's round to nearest
 * even (cvt.rn), which is what half_v1.h computes with integers. */
__device__ __forceinline__ uint16_t to_bf16(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u | 0x00400000u) >> 16);
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}
__device__ __forceinline__ float from_bf16(uint16_t h) {
  return __uint_as_float((uint32_t)h << 16);
}
__device__ __forceinline__ uint16_t to_f16(float f) {
  uint32_t u = __float_as_uint(f), a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(((u >> 16) & 0x8000u) | 0x7e00u | ((a >> 13) & 0x3ffu));
  return __half_as_ushort(__float2half_rn(f));
}
__device__ __forceinline__ float from_f16(uint16_t h) {
  uint32_t e = (h >> 10) & 0x1fu;
  if (e == 0x1f) /* inf / NaN: the payload shifted, as half_v1.h (no canonicalisation) */
    return __uint_as_float(((uint32_t)(h & 0x8000u) << 16) | 0x7f800000u |
                           ((uint32_t)(h & 0x3ffu) << 13));
  return __half2float(__ushort_as_half(h)); /* exact */
}

__global__ void round_bf16_kernel(float *x, size_t n) {
  GRID_STRIDE(i, n) x[i] = from_bf16(to_bf16(x[i]));
}
__global__ void round_f16_kernel(float *x, size_t n) {
  GRID_STRIDE(i, n) x[i] = from_f16(to_f16(x[i]));
}
extern "C" void cuda_launch_round_to(cudaStream_t s, float *x, loom_dtype dtype, size_t n) {
  if (!n) return;
  if (dtype == LOOM_BF16) round_bf16_kernel<<<ew_blocks(n), EW_THREADS, 0, s>>>(x, n);
  else if (dtype == LOOM_F16) round_f16_kernel<<<ew_blocks(n), EW_THREADS, 0, s>>>(x, n);
}

__global__ void pack_bf16_kernel(uint16_t *dst, const float *src, size_t n) {
  GRID_STRIDE(i, n) dst[i] = to_bf16(src[i]);
}
__global__ void pack_f16_kernel(uint16_t *dst, const float *src, size_t n) {
  GRID_STRIDE(i, n) dst[i] = to_f16(src[i]);
}
extern "C" void cuda_launch_pack16(cudaStream_t s, uint16_t *dst, const float *src,
                                   loom_dtype dtype, size_t n) {
  if (!n) return;
  if (dtype == LOOM_BF16) pack_bf16_kernel<<<ew_blocks(n), EW_THREADS, 0, s>>>(dst, src, n);
  else pack_f16_kernel<<<ew_blocks(n), EW_THREADS, 0, s>>>(dst, src, n);
}

__global__ void unpack_bf16_kernel(float *dst, const uint16_t *src, size_t n) {
  GRID_STRIDE(i, n) dst[i] = from_bf16(src[i]);
}
__global__ void unpack_f16_kernel(float *dst, const uint16_t *src, size_t n) {
  GRID_STRIDE(i, n) dst[i] = from_f16(src[i]);
}
extern "C" void cuda_launch_unpack16(cudaStream_t s, float *dst, const uint16_t *src,
                                     loom_dtype dtype, size_t n) {
  if (!n) return;
  if (dtype == LOOM_BF16) unpack_bf16_kernel<<<ew_blocks(n), EW_THREADS, 0, s>>>(dst, src, n);
  else unpack_f16_kernel<<<ew_blocks(n), EW_THREADS, 0, s>>>(dst, src, n);
}
