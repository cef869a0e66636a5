/* The CPU backend's device ABI 1.8 acts16 tables: one per 16-bit activation dtype, each entry
 * a loom__cpu16_* kernel (cpu_acts16.c, cpu_layers.c's matmul) with the dtype bound. The
 * kernels run the fp32 kernels' arithmetic on row tiles widened in cache and round each 16-bit
 * output once; the GEMMs read and write the 16-bit buffers directly (cpu_gemm.h). */
#include "cpu_kernels.h"

#define ACTS16_TABLE(sfx, DT)                                                                   \
  static void enc_fwd_##sfx(void *ctx, void *out, const int32_t *inp, const float *wte,         \
                            const float *wpe, int B, int T, int C) {                            \
    loom__cpu16_encoder_forward(ctx, DT, out, inp, wte, wpe, B, T, C);                          \
  }                                                                                             \
  static void enc_bwd_##sfx(void *ctx, float *dwte, float *dwpe, const void *dout,              \
                            const int32_t *inp, int B, int T, int C) {                          \
    loom__cpu16_encoder_backward(ctx, DT, dwte, dwpe, dout, inp, B, T, C);                      \
  }                                                                                             \
  static void ln_fwd_##sfx(void *ctx, void *out, float *mean, float *rstd, const void *inp,     \
                           const float *w, const float *b, int N, int C) {                      \
    loom__cpu16_layernorm_forward(ctx, DT, out, mean, rstd, inp, w, b, N, C);                   \
  }                                                                                             \
  static void ln_bwd_##sfx(void *ctx, void *dinp, float *dw, float *db, const void *dout,       \
                           const void *inp, const float *w, const float *mean,                 \
                           const float *rstd, int N, int C) {                                   \
    loom__cpu16_layernorm_backward(ctx, DT, dinp, dw, db, dout, inp, w, mean, rstd, N, C);      \
  }                                                                                             \
  static void mm_fwd_##sfx(void *ctx, void *out, const void *inp, const void *w, loom_dtype wdt, \
                           const float *bias, int N, int C, int OC) {                           \
    loom__cpu16_matmul_forward(ctx, DT, out, inp, w, wdt, bias, N, C, OC);                      \
  }                                                                                             \
  static void mm_bwd_##sfx(void *ctx, void *dinp, float *dw, float *db, const void *dout,       \
                           const void *inp, const void *w, loom_dtype wdt, int N, int C,        \
                           int OC) {                                                            \
    loom__cpu16_matmul_backward(ctx, DT, dinp, dw, db, dout, inp, w, wdt, N, C, OC);            \
  }                                                                                             \
  static void att_fwd_##sfx(void *ctx, void *out, float *att, const void *qkv, int B, int T,    \
                            int NH, int HS) {                                                   \
    loom__cpu16_attention_forward(ctx, DT, out, att, qkv, B, T, NH, HS);                        \
  }                                                                                             \
  static void att_bwd_##sfx(void *ctx, void *dqkv, float *datt, const void *dout,               \
                            const void *qkv, const float *att, int B, int T, int NH, int HS) {  \
    loom__cpu16_attention_backward(ctx, DT, dqkv, datt, dout, qkv, att, B, T, NH, HS);          \
  }                                                                                             \
  static void lse_fwd_##sfx(void *ctx, void *out, float *lse, const void *qkv, int B, int T,    \
                            int NH, int HS) {                                                   \
    loom__cpu16_attention_forward_lse(ctx, DT, out, lse, qkv, B, T, NH, HS);                    \
  }                                                                                             \
  static void lse_bwd_##sfx(void *ctx, void *dqkv, const void *dout, const void *qkv,           \
                            const void *out, const float *lse, int B, int T, int NH, int HS) {  \
    loom__cpu16_attention_backward_lse(ctx, DT, dqkv, dout, qkv, out, lse, B, T, NH, HS);       \
  }                                                                                             \
  static void gelu_fwd_##sfx(void *ctx, void *out, const void *inp, size_t n) {                 \
    loom__cpu16_gelu_forward(ctx, DT, out, inp, n);                                             \
  }                                                                                             \
  static void gelu_bwd_##sfx(void *ctx, void *dinp, const void *inp, const void *dout,          \
                             size_t n) {                                                        \
    loom__cpu16_gelu_backward(ctx, DT, dinp, inp, dout, n);                                     \
  }                                                                                             \
  static void res_fwd_##sfx(void *ctx, void *out, const void *a, const void *b, size_t n) {     \
    loom__cpu16_residual_forward(ctx, DT, out, a, b, n);                                        \
  }                                                                                             \
  static void ce_fused_##sfx(void *ctx, float *losses, void *dlogits, const void *logits,       \
                             const int32_t *targets, float dloss, int N, int V) {               \
    loom__cpu16_crossentropy_fused(ctx, DT, losses, dlogits, logits, targets, dloss, N, V);     \
  }                                                                                             \
  static const loom_device_acts16_v1 table_##sfx = {                                            \
      .struct_size = sizeof(loom_device_acts16_v1),                                            \
      .dtype = DT,                                                                              \
      .encoder_forward = enc_fwd_##sfx,                                                         \
      .encoder_backward = enc_bwd_##sfx,                                                        \
      .layernorm_forward = ln_fwd_##sfx,                                                        \
      .layernorm_backward = ln_bwd_##sfx,                                                       \
      .matmul_forward = mm_fwd_##sfx,                                                           \
      .matmul_backward = mm_bwd_##sfx,                                                          \
      .attention_forward = att_fwd_##sfx,                                                       \
      .attention_backward = att_bwd_##sfx,                                                      \
      .gelu_forward = gelu_fwd_##sfx,                                                           \
      .gelu_backward = gelu_bwd_##sfx,                                                          \
      .residual_forward = res_fwd_##sfx,                                                        \
      .crossentropy_fused = ce_fused_##sfx,                                                     \
      .attention_forward_lse = lse_fwd_##sfx,                                                   \
      .attention_backward_lse = lse_bwd_##sfx,                                                  \
  };

ACTS16_TABLE(bf16, LOOM_BF16)
ACTS16_TABLE(f16, LOOM_F16)

const loom_device_acts16_v1 *loom__cpu_acts16(void *ctx, loom_dtype dt) {
  (void)ctx;
  return dt == LOOM_BF16 ? &table_bf16 : dt == LOOM_F16 ? &table_f16 : NULL;
}
