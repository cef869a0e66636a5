/* Float64 reference kernels for the device conformance suite (device_reference.c): the
 * definitions of device_v1.h as plain loops, independent of the CPU device's code. Shapes and
 * argument meanings are device_v1.h's; outputs are double. Accumulating outputs (gradients)
 * are `+=`, as in the ABI, so the caller fills them with the device's initial values. */
#ifndef LOOM_CORE_DEVICE_REFERENCE_H
#define LOOM_CORE_DEVICE_REFERENCE_H

#include <loom/common_v1.h>
#include <stddef.h>
#include <stdint.h>

void ref_encoder_forward(double *out, const int32_t *inp, const float *wte, const float *wpe,
                         int B, int T, int C);
void ref_encoder_backward(double *dwte, double *dwpe, const float *dout, const int32_t *inp,
                          int B, int T, int C);
/* mean (N) and 1/sqrt(var + 1e-5) (N) of each row of inp (N,C), population variance */
void ref_layernorm_stats(double *mean, double *rstd, const float *inp, int N, int C);
void ref_layernorm_forward(double *out, const float *inp, const float *weight, const float *bias,
                           int N, int C);
void ref_layernorm_backward(double *dinp, double *dweight, double *dbias, const float *dout,
                            const float *inp, const float *weight, const float *mean,
                            const float *rstd, int N, int C);
void ref_matmul_forward(double *out, const float *inp, const float *weight, const float *bias,
                        int N, int C, int OC);
/* dinp or dbias may be NULL */
void ref_matmul_backward(double *dinp, double *dweight, double *dbias, const float *dout,
                         const float *inp, const float *weight, int N, int C, int OC);
void ref_attention_forward(double *out, double *att, const float *qkv, int B, int T, int NH,
                           int HS);
void ref_attention_backward(double *dqkv, const float *dout, const float *qkv, const float *att,
                            int B, int T, int NH, int HS);
/* ABI 1.9: lse (B,NH,T) = log sum_{s<=t} exp(q_t . k_s / sqrt(HS)), natural log */
void ref_attention_lse(double *lse, const float *qkv, int B, int T, int NH, int HS);
/* dqkv += attention_backward_lse's gradient: the probabilities exact from qkv, D = rowsum(dout
 * * out) from the given out (FlashAttention-2's definition, so a 16-bit out enters as given) */
void ref_attention_backward_lse(double *dqkv, const float *dout, const float *qkv,
                                const float *out, int B, int T, int NH, int HS);
void ref_gelu_forward(double *out, const float *inp, size_t n);
void ref_gelu_backward(double *dinp, const float *inp, const float *dout, size_t n);
void ref_crossentropy_forward(double *losses, double *probs, const float *logits,
                              const int32_t *targets, int N, int V);
void ref_crossentropy_backward(double *dlogits, const float *probs, const int32_t *targets,
                               float dloss, int N, int V);
/* param, m, v (n) updated in place (double state, fp32 gradient) */
void ref_adamw(double *param, double *m, double *v, const float *grad, size_t n, float lr,
               float beta1, float beta2, float eps, float wd, float grad_scale, int t);
/* x after a store to dt and a load back (bf16: 8 significant bits, fp16: 11, subnormals kept,
 * fp16 overflow to inf; nearest, ties to even); LOOM_F32: x */
float ref_round(float x, loom_dtype dt);

#endif
