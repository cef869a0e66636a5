/* cuda.so's kernel launchers (cuda_kernels.cu); every one enqueues on `stream` and returns.
 * Legend: B = batch, T = time, C = channels, NH = heads, HS = head size, V = vocab, N = B*T rows,
 * OC = output channels. All float tensors are fp32 device pointers, row-major. */
#ifndef LOOM_CUDA_KERNELS_H
#define LOOM_CUDA_KERNELS_H

#include <cuda_runtime_api.h>
#include <loom/device_v1.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

void cuda_launch_scale(cudaStream_t s, float *x, float alpha, size_t n);
void cuda_launch_axpy(cudaStream_t s, float *y, float alpha, const float *x, size_t n);
/* Blocks of the first pass of sum_squares: its partials are reduced in this fixed order. */
#define CUDA_REDUCE_BLOCKS 256
/* out[0] (device double) = sum x_i^2, in an order fixed by n alone (deterministic);
 * out[1..CUDA_REDUCE_BLOCKS] hold the first pass's partials. */
void cuda_launch_sum_squares(cudaStream_t s, double *out, const float *x, size_t n);
/* *bad (device int, zeroed by the caller) = 1 if some element is inf or NaN */
void cuda_launch_any_nonfinite(cudaStream_t s, int *bad, const float *x, size_t n);
void cuda_launch_adamw(cudaStream_t s, float *param, const float *grad, float *m, float *v,
                       size_t n, float lr, float beta1, float beta2, float eps,
                       float weight_decay, float grad_scale, float bc1, float bc2);
void cuda_launch_encoder_forward(cudaStream_t s, float *out, const int32_t *inp,
                                 const float *wte, const float *wpe, int B, int T, int C);
/* dwpe part of encoder_backward: per (t, c), the batch summed in order */
void cuda_launch_encoder_backward_wpe(cudaStream_t s, float *dwpe, const float *dout, int B,
                                      int T, int C);
/* dwte part: stable sort of (token, position), then fixed chunks of the sorted order, each run
 * in position order, and the partials of runs that cross chunks added in chunk order
 * (cuda_embed_chunks.h). scratch4: 3 int32 arrays of B*T (positions, sorted tokens, sorted
 * positions); partial: cuda_encoder_partial_floats(BT, C) floats; temp/temp_bytes:
 * cub's scratch (cuda_encoder_sort_temp_bytes). Clears the thread's last error first; returns
 * a cudaError_t, these launches' own. */
size_t cuda_encoder_sort_temp_bytes(int BT);
/* Floats of `partial`: (head, cont), each (number of chunks, C). */
size_t cuda_encoder_partial_floats(int BT, int C);
int cuda_launch_encoder_backward_wte(cudaStream_t s, float *dwte, const float *dout,
                                     const int32_t *inp, int BT, int C, int32_t *scratch4,
                                     float *partial, void *temp, size_t temp_bytes);
void cuda_launch_layernorm_forward(cudaStream_t s, float *out, float *mean, float *rstd,
                                   const float *inp, const float *weight, const float *bias,
                                   int N, int C);
void cuda_launch_layernorm_backward_dinp(cudaStream_t s, float *dinp, const float *dout,
                                         const float *inp, const float *weight,
                                         const float *mean, const float *rstd, int N, int C);
/* Rows per chunk of the two-pass column sums: partials hold ceil(N / chunk) rows of C. */
#define CUDA_COLSUM_CHUNK 64
/* out[c] += sum over rows n of f(n, c) in a fixed order, for f = dout (bias gradients) or
 * norm * dout (layernorm weight). partial: scratch of ceil(N/CUDA_COLSUM_CHUNK) * C floats. */
void cuda_launch_colsum(cudaStream_t s, float *out, const float *dout, int N, int C,
                        float *partial);
void cuda_launch_layernorm_dweight_dbias(cudaStream_t s, float *dweight, float *dbias,
                                         const float *dout, const float *inp, const float *mean,
                                         const float *rstd, int N, int C, float *partial);
/* out (N,OC) = bias broadcast over rows: the C operand of a GEMM with beta = 1 */
void cuda_launch_bias_fill(cudaStream_t s, float *out, const float *bias, int N, int OC);
/* att (rows of length T, BH*T of them): causal softmax in place of the scaled scores */
void cuda_launch_causal_softmax(cudaStream_t s, float *att, int BH, int T);
/* datt = att * (datt - rowsum(att*datt)) * scale, causal, in place */
void cuda_launch_causal_softmax_backward(cudaStream_t s, float *datt, const float *att, int BH,
                                         int T, float scale);
void cuda_launch_gelu_forward(cudaStream_t s, float *out, const float *inp, size_t n);
void cuda_launch_gelu_backward(cudaStream_t s, float *dinp, const float *inp, const float *dout,
                               size_t n);
void cuda_launch_residual(cudaStream_t s, float *out, const float *a, const float *b, size_t n);
void cuda_launch_crossentropy_forward(cudaStream_t s, float *losses, float *probs,
                                      const float *logits, const int32_t *targets, int N, int V);
void cuda_launch_crossentropy_backward(cudaStream_t s, float *dlogits, const float *probs,
                                       const int32_t *targets, float dloss, int N, int V);
void cuda_launch_crossentropy_fused(cudaStream_t s, float *losses, float *dlogits,
                                    const float *logits, const int32_t *targets, float dloss,
                                    int N, int V);
/* x = round-trip through bf16 / fp16 (round to nearest even, NaN kept quiet: loom/half_v1.h) */
void cuda_launch_round_to(cudaStream_t s, float *x, loom_dtype dtype, size_t n);
void cuda_launch_pack16(cudaStream_t s, uint16_t *dst, const float *src, loom_dtype dtype,
                        size_t n);
void cuda_launch_unpack16(cudaStream_t s, float *dst, const uint16_t *src, loom_dtype dtype,
                          size_t n);

#ifdef __cplusplus
}
#endif
#endif
