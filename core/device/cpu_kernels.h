/* Internal to the CPU backend: the kernels defined in cpu_layers.c, cpu_attention.c,
 * cpu_flash.c, cpu_gelu.c and cpu_crossentropy.c that cpu_device.c puts into its loom_device_v1
 * table. Signatures (and their documentation) are the table's own, see loom/device_v1.h; `ctx`
 * is the backend's loom_cpu_ctx (the GEMM kernels use its oneDNN state, cpu_acts16.c and
 * cpu_flash.c its scratch; the others ignore it).
 *
 * Legend: B = batch, T = time, C = channels, NH = heads, HS = head size, V = vocab, N = B*T rows,
 * OC = output channels. */
#ifndef LOOM_CORE_CPU_KERNELS_H
#define LOOM_CORE_CPU_KERNELS_H

#include <loom/device_v1.h>

#include "cpu_gemm.h"

/* A grow-only fp32 scratch buffer of the context (64-byte aligned; n floats allocated). */
typedef struct loom_cpu_scratch {
  float *p;
  size_t n;
} loom_cpu_scratch;

/* The CPU backend's context (what create returns as ctx). */
typedef struct loom_cpu_ctx {
  int threads;    /* device.threads as configured; 0 = OpenMP's default */
  cpu_gemm *gemm; /* oneDNN engine and primitive cache (cpu_gemm.h) */
  /* cpu_acts16.c's scratch, grown on first use, freed by loom__cpu16_free (destroy) */
  loom_cpu_scratch tiles16; /* per-thread fp32 tiles of the 16-bit kernels */
  loom_cpu_scratch attn16;  /* attention's fp32 copies of one batch row */
  /* cpu_flash.c's per-thread packed heads and tiles, grown on first use, freed by
   * loom__cpu_flash_free (destroy) */
  loom_cpu_scratch flash;
} loom_cpu_ctx;

/* The GEMM state of a kernel's ctx. */
static inline cpu_gemm *loom__cpu_gemm_of(void *ctx) { return ((loom_cpu_ctx *)ctx)->gemm; }

/* Fixed number of chunks for reductions that must not depend on the thread count: each chunk is
 * reduced independently, then the partials are summed in chunk order. */
#define LOOM_CPU_REDUCE_CHUNKS 256
/* Loops touching fewer elements than this run on the calling thread: waking the OpenMP team
 * costs more than the work, and on a loaded machine a descheduled team member stalls every
 * parallel region (tiny test models run thousands of them). */
#define LOOM_CPU_PAR_MIN 16384

void loom__cpu_encoder_forward(void *ctx, float *out, const int32_t *inp, const float *wte,
                               const float *wpe, int B, int T, int C);
void loom__cpu_encoder_backward(void *ctx, float *dwte, float *dwpe, const float *dout,
                                const int32_t *inp, int B, int T, int C);
void loom__cpu_layernorm_forward(void *ctx, float *out, float *mean, float *rstd,
                                 const float *inp, const float *weight, const float *bias, int N,
                                 int C);
void loom__cpu_layernorm_backward(void *ctx, float *dinp, float *dweight, float *dbias,
                                  const float *dout, const float *inp, const float *weight,
                                  const float *mean, const float *rstd, int N, int C);
void loom__cpu_matmul_forward(void *ctx, float *out, const float *inp, const float *weight,
                              const float *bias, int N, int C, int OC);
void loom__cpu_matmul_backward(void *ctx, float *dinp, float *dweight, float *dbias,
                               const float *dout, const float *inp, const float *weight, int N,
                               int C, int OC);
/* ABI 1.7: the same with the weight as wdt elements (cpu_gemm.h loom__cpu_gemm_w) */
void loom__cpu_matmul_forward_w(void *ctx, float *out, const float *inp, const void *weight,
                                loom_dtype wdt, const float *bias, int N, int C, int OC);
void loom__cpu_matmul_backward_w(void *ctx, float *dinp, float *dweight, float *dbias,
                                 const float *dout, const float *inp, const void *weight,
                                 loom_dtype wdt, int N, int C, int OC);
void loom__cpu_attention_forward(void *ctx, float *out, float *att, const float *qkv, int B,
                                 int T, int NH, int HS);
void loom__cpu_attention_backward(void *ctx, float *dqkv, float *datt, const float *dout,
                                  const float *qkv, const float *att, int B, int T, int NH,
                                  int HS);
/* ABI 1.9 (cpu_flash.c): FlashAttention-2. Forward: out (B,T,C) and lse (B,NH,T) fp32 from
 * qkv (B,T,3C); backward: dqkv (B,T,3C) += the gradient from dout (B,T,C), qkv, the forward's
 * out and lse (Dao 2023, Alg. 1 and 2). Every buffer is the caller's; the only memory of the
 * kernels is ctx->flash (per-thread, grown on demand, kept until destroy; abort when out of
 * memory). Results are bitwise independent of the thread count. */
void loom__cpu_attention_forward_lse(void *ctx, float *out, float *lse, const float *qkv, int B,
                                     int T, int NH, int HS);
void loom__cpu_attention_backward_lse(void *ctx, float *dqkv, const float *dout,
                                      const float *qkv, const float *out, const float *lse,
                                      int B, int T, int NH, int HS);
/* Frees ctx->flash; cpu_device.c's destroy. */
void loom__cpu_flash_free(loom_cpu_ctx *c);
/* Per-thread scratch of `per` floats (the context's flash scratch, grown on first use) for the
 * team about to start: thread i's at the result + i * *stride, 64-byte aligned. Out of memory:
 * a message naming `kernel` and abort. */
float *loom__cpu_team_scratch(void *ctx, size_t per, size_t *stride, const char *kernel);
/* Ring attention's block kernels (cpu_ring_attention.c, device ABI 1.13). */
void loom__cpu_attention_block_forward(void *ctx, float *out, float *lse, const float *q,
                                       const float *k, const float *v,
                                       const loom_attn_block_v1 *g, int merge);
void loom__cpu_attention_block_backward(void *ctx, float *dq, float *dk, float *dv,
                                        const float *dout, const float *q, const float *k,
                                        const float *v, const float *out, const float *lse,
                                        const loom_attn_block_v1 *g);
/* Test hook: the flash micro-kernel's variant, 0 baseline, 1 AVX2+FMA, 2 AVX-512, capped at what
 * the CPU has (negative: the best); returns the variant now in use. Call it outside parallel
 * regions; the choice is process-wide. */
int loom__cpu_flash_set_isa(int level);
/* Test hook: out[i] = exp(in[i] - sub) with the flash kernels' own exp (that variant's) */
void loom__cpu_flash_exp_sub(float *out, const float *in, size_t n, float sub);
void loom__cpu_gelu_forward(void *ctx, float *out, const float *inp, size_t n);
void loom__cpu_gelu_backward(void *ctx, float *dinp, const float *inp, const float *dout,
                             size_t n);
/* AdamW over n elements (cpu_adamw.c): vectorised, bitwise the scalar formula's result */
void loom__cpu_adamw(void *ctx, float *param, const float *grad, float *m, float *v, size_t n,
                     float lr, float beta1, float beta2, float eps, float weight_decay,
                     float grad_scale, int t);
void loom__cpu_residual_forward(void *ctx, float *out, const float *a, const float *b, size_t n);
void loom__cpu_crossentropy_forward(void *ctx, float *losses, float *probs, const float *logits,
                                    const int32_t *targets, int N, int V);
/* out[i] = expf(in[i] - sub), vectorised (cpu_exp.c: within one ulp of libm's expf, almost
 * always equal to it); out may be in. */
void loom__cpu_exp_sub(float *out, const float *in, size_t n, float sub);
void loom__cpu_crossentropy_backward(void *ctx, float *dlogits, const float *probs,
                                     const int32_t *targets, float dloss, int N, int V);
void loom__cpu_crossentropy_fused(void *ctx, float *losses, float *dlogits, const float *logits,
                                  const int32_t *targets, float dloss, int N, int V);

/* ABI 1.8 matmul on 16-bit activations (cpu_layers.c; dt = LOOM_BF16 or LOOM_F16), the
 * acts16 table's matmul_forward / matmul_backward */
void loom__cpu16_matmul_forward(void *ctx, loom_dtype dt, void *out, const void *inp,
                                const void *weight, loom_dtype wdt, const float *bias, int N,
                                int C, int OC);
void loom__cpu16_matmul_backward(void *ctx, loom_dtype dt, void *dinp, float *dweight,
                                 float *dbias, const void *dout, const void *inp,
                                 const void *weight, loom_dtype wdt, int N, int C, int OC);

/* device_v1's acts16 (cpu_acts16_table.c): the bf16 and fp16 tables, NULL for another dtype */
const loom_device_acts16_v1 *loom__cpu_acts16(void *ctx, loom_dtype dt);

/* 16-bit storage (cpu_convert.c): device_v1's round_to and convert, and the scalar element
 * conversions they are built from (round to nearest even; exposed for the unit tests). */
void loom__cpu_round_to(void *ctx, float *x, loom_dtype dtype, size_t n);
int loom__cpu_convert(void *ctx, void *dst, loom_dtype dst_dtype, const void *src,
                      loom_dtype src_dtype, size_t n);
/* dst (n bf16) = src (n fp32) rounded to nearest even, on the calling thread (vectorised). */
void loom__cpu_bf16_pack(uint16_t *dst, const float *src, size_t n);
uint16_t loom__f32_to_bf16(float f);
float loom__bf16_to_f32(uint16_t h);
uint16_t loom__f32_to_f16(float f);
float loom__f16_to_f32(uint16_t h);

/* ---- ABI 1.8: the GPT kernels on 16-bit activations (cpu_acts16.c) ----
 * device_v1.h's loom_device_acts16_v1 slots with the activation dtype `dt` (LOOM_BF16 or
 * LOOM_F16) as a parameter; every `void *` is (n elements of) dt, every `float *` fp32, the
 * shapes those of the fp32 kernels. Each result is bitwise that of the fp32 kernel above run on
 * the widened inputs, each 16-bit output rounded once (as loom__cpu_convert): the kernels widen
 * a tile of rows into per-thread fp32 scratch of ctx, run the fp32 kernel's row code on it and
 * narrow the tile, with no pass over whole buffers. `+=` outputs (dinp, dqkv) are widened,
 * accumulated and rounded once. Out of memory for the scratch: a message and abort. */
void loom__cpu16_encoder_forward(void *ctx, loom_dtype dt, void *out, const int32_t *inp,
                                 const float *wte, const float *wpe, int B, int T, int C);
void loom__cpu16_encoder_backward(void *ctx, loom_dtype dt, float *dwte, float *dwpe,
                                  const void *dout, const int32_t *inp, int B, int T, int C);
void loom__cpu16_layernorm_forward(void *ctx, loom_dtype dt, void *out, float *mean, float *rstd,
                                   const void *inp, const float *weight, const float *bias, int N,
                                   int C);
void loom__cpu16_layernorm_backward(void *ctx, loom_dtype dt, void *dinp, float *dweight,
                                    float *dbias, const void *dout, const void *inp,
                                    const float *weight, const float *mean, const float *rstd,
                                    int N, int C);
void loom__cpu16_attention_forward(void *ctx, loom_dtype dt, void *out, float *att,
                                   const void *qkv, int B, int T, int NH, int HS);
void loom__cpu16_attention_backward(void *ctx, loom_dtype dt, void *dqkv, float *datt,
                                    const void *dout, const void *qkv, const float *att, int B,
                                    int T, int NH, int HS);
/* ABI 1.9's lse attention (cpu_flash.c): the fp32 kernels' arithmetic on heads widened at
 * packing, out and dqkv rounded once (dqkv: widened, += the fp32 gradient, rounded) */
void loom__cpu16_attention_forward_lse(void *ctx, loom_dtype dt, void *out, float *lse,
                                       const void *qkv, int B, int T, int NH, int HS);
void loom__cpu16_attention_backward_lse(void *ctx, loom_dtype dt, void *dqkv, const void *dout,
                                        const void *qkv, const void *out, const float *lse,
                                        int B, int T, int NH, int HS);
void loom__cpu16_gelu_forward(void *ctx, loom_dtype dt, void *out, const void *inp, size_t n);
void loom__cpu16_gelu_backward(void *ctx, loom_dtype dt, void *dinp, const void *inp,
                               const void *dout, size_t n);
/* out may be a (in place) */
void loom__cpu16_residual_forward(void *ctx, loom_dtype dt, void *out, const void *a,
                                  const void *b, size_t n);
/* dlogits may be logits (in place) or NULL (the loss only) */
void loom__cpu16_crossentropy_fused(void *ctx, loom_dtype dt, float *losses, void *dlogits,
                                    const void *logits, const int32_t *targets, float dloss, int N,
                                    int V);
/* Frees ctx's 16-bit scratch (tiles16, attn16); cpu_device.c's destroy. */
void loom__cpu16_free(loom_cpu_ctx *c);

/* What they are built from: cpu_gelu.c's vectorised spans (n fp32 elements on the calling
 * thread: out = gelu(inp); dinp += gelu'(inp) * dout) and cpu_convert.c's span conversions on
 * the calling thread (dt LOOM_BF16 or LOOM_F16; vectorised; loom__cpu_half_init once outside
 * a parallel region first, which caches the CPU's F16C support). */
void loom__cpu_gelu_fwd_span(float *restrict out, const float *restrict inp, size_t n);
void loom__cpu_gelu_bwd_span(float *restrict dinp, const float *restrict inp,
                             const float *restrict dout, size_t n);
void loom__cpu_half_init(void);
/* dst (n fp32) = src (n dt), exact */
void loom__cpu_widen(float *dst, const void *src, loom_dtype dt, size_t n);
/* dst (n dt) = src (n fp32) rounded to nearest even (fp16: overflow to inf, subnormals kept) */
void loom__cpu_narrow(void *dst, loom_dtype dt, const float *src, size_t n);

#endif
