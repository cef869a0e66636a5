/* loom ABI v1 — device backends.
 *
 * A device backend owns tensor memory and the kernels of the GPT model. No code outside a
 * device backend dereferences tensor memory: the model, the training loop and every plugin go
 * through this table, so a CUDA backend slots in without touching them. The CPU backend is built
 * into the core (oneDNN GEMMs, OpenMP elsewhere); other backends are plugins of kind
 * LOOM_KIND_DEVICE exporting `loom_plugin_v1` of this type.
 *
 * Legend: B = micro-batch, T = sequence length, C = channels (n_embd), NH = heads, HS = C/NH,
 * V = vocabulary, N = B*T rows, OC = output channels. All float tensors are fp32, row-major:
 * the GPT kernels compute and store fp32. Mixed precision (bf16.so, fp16.so) keeps 16-bit
 * values at the points a 16-bit store would round them: the model calls round_to on each stored
 * activation and on its working copy of the weights (ABI 1.3), and convert packs / unpacks real
 * 16-bit buffers (gradient all-reduce in 16 bits). A backend with ABI 1.8's acts16 table runs
 * the kernels on 16-bit activation buffers instead (loom_device_acts16_v1, at the end).
 *
 * Gradient contract (llm.c's): kernels ACCUMULATE into parameter gradients (dweight, dbias,
 * dwte, dwpe: `+=`) so gradient accumulation is free, and into activation gradients that may have
 * several consumers (dinp of matmul / layernorm / gelu / attention: `+=` as well, callers zero
 * them); forward outputs are assigned (`=`). Every kernel is synchronous with respect to the
 * host unless the backend documents a stream. */
#ifndef LOOM_DEVICE_V1_H
#define LOOM_DEVICE_V1_H

#include "common_v1.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Capabilities */
#define LOOM_DEVICE_CAP_HOST_ADDRESSABLE (1u << 0) /* device pointers are host pointers (CPU) */

/* Most chunks one side of a loom_attn_block_v1 holds (context parallel holds 2). */
#define LOOM_ATTN_MAX_CHUNKS 8

/* The geometry of one (queries, key block) pair of ring attention (ABI 1.13). The local tokens
 * of each side are n_chunks chunks of chunk_len consecutive positions of the global sequence:
 * local token t is global position q_chunk[t / chunk_len] * chunk_len + t % chunk_len (k_chunk
 * for keys), so Tq = Tk = n_chunks * chunk_len. Element (b, t, h, d) of q lives at
 * q[(b*Tq + t) * q_stride + h*HS + d] (q_stride 3*NH*HS inside a qkv buffer), of k and v at
 * k[(b*Tk + t) * kv_stride + h*HS + d]; dq and dk/dv use the same strides. */
typedef struct loom_attn_block_v1 {
  int B, NH, HS;
  int n_chunks, chunk_len;
  int q_stride, kv_stride;
  int q_chunk[LOOM_ATTN_MAX_CHUNKS];
  int k_chunk[LOOM_ATTN_MAX_CHUNKS];
} loom_attn_block_v1;

typedef struct loom_device_v1 {
  loom_plugin_header hdr;

  /* Create a device context. options_json: the config's "device" object (never NULL).
   * Errors: LOOM_INVALID_CONFIG (bad option), LOOM_UNSUPPORTED (no such device). */
  int (*create)(const char *options_json, int local_rank, void **ctx);
  void (*destroy)(void *ctx);

  /* ---- memory ---- */
  void *(*alloc)(void *ctx, size_t bytes); /* zero-filled; NULL when out of memory */
  void (*free)(void *ctx, void *ptr);
  void (*memset_zero)(void *ctx, void *ptr, size_t bytes);
  void (*copy)(void *ctx, void *dst, const void *src, size_t bytes);        /* device -> device */
  void (*to_host)(void *ctx, void *host_dst, const void *src, size_t bytes); /* device -> host */
  void (*from_host)(void *ctx, void *dst, const void *host_src, size_t bytes);
  void (*synchronize)(void *ctx);

  /* ---- elementwise and reductions on fp32 vectors of n elements ---- */
  void (*scale)(void *ctx, float *x, float alpha, size_t n);                /* x *= alpha */
  void (*axpy)(void *ctx, float *y, float alpha, const float *x, size_t n); /* y += alpha*x */
  double (*sum_squares)(void *ctx, const float *x, size_t n);              /* sum x_i^2, fp64 */
  /* 1 if every element is finite, else 0 */
  int (*all_finite)(void *ctx, const float *x, size_t n);

  /* AdamW (Loshchilov & Hutter 2019, Alg. 2) with bias correction at step t (1-based):
   * m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p -= lr (m^/(sqrt(v^)+eps) + wd p).
   * grad_scale multiplies g first (gradient clipping / loss-scale removal). */
  void (*adamw)(void *ctx, float *param, const float *grad, float *m, float *v, size_t n,
                float lr, float beta1, float beta2, float eps, float weight_decay,
                float grad_scale, int t);

  /* ---- GPT kernels (llm.c argument order: outputs, saved stats, inputs, weights, dims) ---- */
  /* out (B,T,C) = wte[inp] + wpe[t]; inp (B,T) int32 token ids, wte (V,C), wpe (maxT,C) */
  void (*encoder_forward)(void *ctx, float *out, const int32_t *inp, const float *wte,
                          const float *wpe, int B, int T, int C);
  /* dwte (V,C) += scatter of dout; dwpe (maxT,C) += sum over batch */
  void (*encoder_backward)(void *ctx, float *dwte, float *dwpe, const float *dout,
                           const int32_t *inp, int B, int T, int C);
  /* out (N,C) = (inp - mean)/sqrt(var + 1e-5) * weight + bias; saves mean (N), rstd (N) */
  void (*layernorm_forward)(void *ctx, float *out, float *mean, float *rstd, const float *inp,
                            const float *weight, const float *bias, int N, int C);
  void (*layernorm_backward)(void *ctx, float *dinp, float *dweight, float *dbias,
                             const float *dout, const float *inp, const float *weight,
                             const float *mean, const float *rstd, int N, int C);
  /* out (N,OC) = inp (N,C) @ weight^T (OC,C) + bias (OC); bias may be NULL */
  void (*matmul_forward)(void *ctx, float *out, const float *inp, const float *weight,
                         const float *bias, int N, int C, int OC);
  /* dinp (N,C) += dout @ weight; dweight (OC,C) += dout^T @ inp; dbias (OC) += colsum(dout).
   * dinp or dbias may be NULL (not needed). */
  void (*matmul_backward)(void *ctx, float *dinp, float *dweight, float *dbias,
                          const float *dout, const float *inp, const float *weight, int N,
                          int C, int OC);
  /* Causal multi-head self-attention. qkv (B,T,3*NH*HS) laid out [q | k | v], each head-major
   * (head h uses channels h*HS..h*HS+HS-1 of its third). out (B,T,NH*HS); att (B,NH,T,T) holds
   * the softmax probabilities (saved for backward; entries above the diagonal are 0). */
  void (*attention_forward)(void *ctx, float *out, float *att, const float *qkv, int B, int T,
                            int NH, int HS);
  /* datt (B,NH,T,T) is scratch, overwritten. dqkv += gradient. */
  void (*attention_backward)(void *ctx, float *dqkv, float *datt, const float *dout,
                             const float *qkv, const float *att, int B, int T, int NH, int HS);
  /* GELU, tanh approximation (Hendrycks & Gimpel 2016, as GPT-2) */
  void (*gelu_forward)(void *ctx, float *out, const float *inp, size_t n);
  void (*gelu_backward)(void *ctx, float *dinp, const float *inp, const float *dout, size_t n);
  /* out = a + b (n elements); out may alias a */
  void (*residual_forward)(void *ctx, float *out, const float *a, const float *b, size_t n);
  /* Softmax cross-entropy over logits (N,V): probs (N,V) = softmax(logits); losses (N) =
   * -log probs[target]. Rows whose target is < 0 are ignored (loss 0). */
  void (*crossentropy_forward)(void *ctx, float *losses, float *probs, const float *logits,
                               const int32_t *targets, int N, int V);
  /* dlogits (N,V) = (probs - onehot(target)) * dloss, assigned (=); dloss is the same scalar
   * for every row (1/(number of rows in the global batch) for a mean loss). */
  void (*crossentropy_backward)(void *ctx, float *dlogits, const float *probs,
                                const int32_t *targets, float dloss, int N, int V);

  /* ---- ABI 1.3: 16-bit storage (NULL in a backend built against 1.2 or older: the host then
   * refuses a bf16/fp16 precision plugin on that backend, naming the missing slot) ---- */
  /* x (n fp32) = the value of each x_i after a store to `dtype` and a load back: round to
   * nearest, ties to even; bf16 (8-bit mantissa) and fp16 (11-bit, overflow to +-inf above
   * 65504, subnormals kept). NaN stays NaN. LOOM_F32 is a no-op. */
  void (*round_to)(void *ctx, float *x, loom_dtype dtype, size_t n);
  /* dst (n elements of dst_dtype) = src (n elements of src_dtype), for LOOM_F32 <-> LOOM_BF16 /
   * LOOM_F16 (and F32 -> F32, a copy). Narrowing rounds as round_to; widening is exact.
   * Returns LOOM_OK, or LOOM_UNSUPPORTED for another pair of dtypes. */
  int (*convert)(void *ctx, void *dst, loom_dtype dst_dtype, const void *src,
                 loom_dtype src_dtype, size_t n);

  /* ---- ABI 1.4: devices as plugins (cuda.so); NULL where a backend has nothing to say ---- */
  /* create, with a reason: like create, but on failure writes one line saying why (no GPU, no
   * driver, fewer GPUs than the local ranks that need one each, a bad option) into err
   * (errlen bytes, NUL-terminated). local_size: ranks of this job on this node (the launcher's
   * local size, 1 without one). The host calls it instead of create when present. */
  int (*create_ex)(const char *options_json, int local_rank, int local_size, void **ctx,
                   char *err, size_t errlen);
  /* The backend's native stream (a cudaStream_t for CUDA) on which every kernel and copy of
   * this context is ordered, so a comm plugin (NCCL) can enqueue its collectives on it. NULL:
   * a synchronous backend (CPU). */
  void *(*native_stream)(void *ctx);
  /* Hint from the host, once after create: every value the GPT kernels read as weights or
   * activations is representable in `dt` (the precision plugin's compute dtype), so a backend
   * may run its GEMMs on `dt` operands with fp32 accumulation (exact conversion of its inputs).
   * LOOM_F32: plain fp32 (a backend may still offer TF32 as an explicit option). */
  void (*set_compute_dtype)(void *ctx, loom_dtype dt);

  /* ---- ABI 1.4: the fused classifier (llm.c's fused_classifier); NULL: the host runs
   * crossentropy_forward and crossentropy_backward instead ---- */
  /* Softmax cross-entropy over logits (N,V) in one pass per row, without a probs buffer:
   * losses (N) = -log softmax(logits)[target]; when dlogits is not NULL, also dlogits (N,V) =
   * (softmax(logits) - onehot(target)) * dloss, assigned (=), with the same operations in the
   * same order as crossentropy_forward followed by crossentropy_backward (so the same bits).
   * dlogits may be logits itself (written in place: the training forward, whose dloss is known
   * before the forward runs); NULL: the loss only (evaluation), logits untouched. Rows whose
   * target is < 0 get loss 0 and a zero dlogits row. */
  void (*crossentropy_fused)(void *ctx, float *losses, float *dlogits, const float *logits,
                             const int32_t *targets, float dloss, int N, int V);

  /* ---- ABI 1.7: weights read in their storage dtype; NULL: the host widens every weight
   * into an fp32 working copy first and calls matmul_forward / matmul_backward ---- */
  /* matmul_forward / matmul_backward with `weight` (OC,C) given as `wdt` elements (LOOM_F32,
   * LOOM_BF16 or LOOM_F16): under 16-bit parameter storage the flat parameter buffer itself, so
   * a backend with 16-bit GEMM units feeds it to them as is, and no fp32 copy of the weight is
   * written or read. The results are those of the fp32 slots on the widened (exact) weight. */
  void (*matmul_forward_w)(void *ctx, float *out, const float *inp, const void *weight,
                           loom_dtype wdt, const float *bias, int N, int C, int OC);
  void (*matmul_backward_w)(void *ctx, float *dinp, float *dweight, float *dbias,
                            const float *dout, const float *inp, const void *weight,
                            loom_dtype wdt, int N, int C, int OC);

  /* ---- ABI 1.8: 16-bit activations end to end; NULL: the host keeps its activations in fp32
   * buffers (the 1.3 layout, or 16-bit saved copies widened for the kernels) ---- */
  /* The GPT kernels on activations stored as `dt` elements (LOOM_BF16 or LOOM_F16), or NULL when
   * the backend has no such kernels for dt. The table is the backend's (static or owned by ctx),
   * valid until destroy; see loom_device_acts16_v1. The host asks after set_compute_dtype, maybe
   * more than once: each answer for a dt must be the same. */
  const struct loom_device_acts16_v1 *(*acts16)(void *ctx, loom_dtype dt);

  /* ---- ABI 1.9: attention without the (B,NH,T,T) probabilities (FlashAttention); NULL: the
   * host calls attention_forward / attention_backward and keeps att and datt ---- */
  /* attention_forward's out (B,T,NH*HS) from the same qkv, saving instead of the probabilities
   * lse (B,NH,T) fp32: lse[b,h,t] = log sum_{s<=t} exp(S[t,s]) with S = q_t . k_s / sqrt(HS),
   * the natural log-sum-exp of row t's causal scores (FlashAttention-2, Dao 2023, Alg. 1: the
   * forward keeps only O and L). A backend computes it in K/V tiles with an online softmax
   * (Milakov & Gimelshein 2018), so its scratch does not grow with T^2. */
  void (*attention_forward_lse)(void *ctx, float *out, float *lse, const float *qkv, int B,
                                int T, int NH, int HS);
  /* dqkv (B,T,3*NH*HS) += the gradient of attention_forward_lse, from dout (B,T,NH*HS), the
   * forward's qkv, its out and lse: each tile's probabilities P = exp(S - lse) are recomputed
   * and D = rowsum(dout * out) replaces rowsum(P * dP) (FlashAttention-2, Alg. 2). No T x T
   * buffer is passed: the backend's scratch is its own. */
  void (*attention_backward_lse)(void *ctx, float *dqkv, const float *dout, const float *qkv,
                                 const float *out, const float *lse, int B, int T, int NH,
                                 int HS);

  /* ---- ABI 1.10: a device fault, reported (NULL: the host takes the device as never failing)
   * ---- */
  /* NULL while the context is healthy; once an operation has failed on the device (a kernel
   * fault, a failed launch or copy: anything after which its results cannot be trusted), a
   * one-line message describing the first failure, e.g. "GPU 0: cudaMemcpyAsync (to host): an
   * illegal memory access was encountered (cudaErrorIllegalAddress)". Sticky: once non-NULL it
   * stays so, with the same text, until destroy; the string is owned by the context and valid
   * until destroy. Cheap and synchronous with nothing: it reports what the context has seen
   * (a fault of queued work shows at the next slot that waits for the device, e.g. to_host or
   * sum_squares). The host asks once per training step, after the step's reads of the loss and
   * the gradient norm, and ends the job with the message (naming the device) instead of reading
   * the failed context's NaN results as a diverged run. */
  const char *(*error)(void *ctx);

  /* ---- ABI 1.13: context parallel's ring attention (Liu et al. 2023, "Ring Attention";
   * Megatron-LM's load-balanced causal chunks); NULL: the host refuses context parallel on the
   * device, naming the slots ---- */
  /* Causal attention of the queries q against one block of keys/values k, v, the tokens of
   * each given as chunks of a longer sequence (loom_attn_block_v1 says which), written into
   * (merge = 0) or merged into (merge = 1) the running out (B,Tq,NH*HS) and lse (B,NH,Tq): a
   * query at global position p sees the keys at positions <= p; the block's normalised output
   * o_b and log-sum-exp l_b combine with the running (o, l) by the online softmax
   * (Milakov & Gimelshein 2018; FlashAttention-2, Dao 2023, Alg. 1):
   *   l' = log(exp(l) + exp(l_b)),  o' = o exp(l - l') + o_b exp(l_b - l'),
   * lse as attention_forward_lse's (natural log of the sum of exp(q.k / sqrt(HS))). A query
   * with no visible key in the block is left as it is; with merge = 0 every query must see at
   * least one (its own chunk's diagonal). */
  void (*attention_block_forward)(void *ctx, float *out, float *lse, const float *q,
                                  const float *k, const float *v,
                                  const struct loom_attn_block_v1 *g, int merge);
  /* The gradient of the merged attention for one block: dq (rows q_stride apart) += and
   * dk, dv (rows kv_stride apart) += the block's part, from dout (B,Tq,NH*HS) and the FINAL
   * out and lse of the forward (P = exp(S - lse), D = rowsum(dout * out): FlashAttention-2,
   * Alg. 2), so the blocks' backwards are independent and may run in any order. */
  void (*attention_block_backward)(void *ctx, float *dq, float *dk, float *dv,
                                   const float *dout, const float *q, const float *k,
                                   const float *v, const float *out, const float *lse,
                                   const struct loom_attn_block_v1 *g);
} loom_device_v1;


/* ABI 1.8: the GPT kernels with 16-bit activations (device_v1.acts16). Every activation
 * argument (`void *`: the residual stream, LayerNorm outputs, qkv, the attention output, the MLP
 * hidden layer, the logits, and their gradients) points at elements of `dtype`; what stays
 * fp32 is typed float: LayerNorm's mean and rstd, the attention probabilities att and their
 * scratch datt, the losses, every weight but the GEMMs' (fp32 working copies; the GEMM weight as
 * `wdt`, as matmul_forward_w) and every parameter gradient (fp32 accumulators).
 *
 * Semantics: each kernel is its fp32 slot above run on the widened (exact) 16-bit inputs, with
 * each 16-bit output rounded once when stored (round to nearest even, as round_to). An output
 * the fp32 slot accumulates into (dinp, dqkv: `+=`) is widened, accumulated in fp32 and rounded
 * once. So a backend whose fp32 slots and these share their arithmetic (the same GEMM summation
 * order) gives the bits of the fp32 slots on buffers the host rounds with round_to after every
 * store; the conformance suite checks each kernel against that. One exception is allowed: a
 * result below 2^-126 in magnitude (an fp32 subnormal) may be stored as +-0, as hardware bf16
 * conversions (AVX512-BF16's VCVTNEPS2BF16, AMX) do. Shapes and argument order are those of the
 * fp32 slots of the same name. */
typedef struct loom_device_acts16_v1 {
  uint32_t struct_size; /* sizeof(loom_device_acts16_v1) the backend was built with: later minors
                           append kernels, and the host reads only what this covers */
  loom_dtype dtype;     /* the activations' element type, the dt acts16 was asked for */
  void (*encoder_forward)(void *ctx, void *out, const int32_t *inp, const float *wte,
                          const float *wpe, int B, int T, int C);
  void (*encoder_backward)(void *ctx, float *dwte, float *dwpe, const void *dout,
                           const int32_t *inp, int B, int T, int C);
  void (*layernorm_forward)(void *ctx, void *out, float *mean, float *rstd, const void *inp,
                            const float *weight, const float *bias, int N, int C);
  void (*layernorm_backward)(void *ctx, void *dinp, float *dweight, float *dbias,
                             const void *dout, const void *inp, const float *weight,
                             const float *mean, const float *rstd, int N, int C);
  void (*matmul_forward)(void *ctx, void *out, const void *inp, const void *weight,
                         loom_dtype wdt, const float *bias, int N, int C, int OC);
  void (*matmul_backward)(void *ctx, void *dinp, float *dweight, float *dbias, const void *dout,
                          const void *inp, const void *weight, loom_dtype wdt, int N, int C,
                          int OC);
  void (*attention_forward)(void *ctx, void *out, float *att, const void *qkv, int B, int T,
                            int NH, int HS);
  void (*attention_backward)(void *ctx, void *dqkv, float *datt, const void *dout,
                             const void *qkv, const float *att, int B, int T, int NH, int HS);
  void (*gelu_forward)(void *ctx, void *out, const void *inp, size_t n);
  void (*gelu_backward)(void *ctx, void *dinp, const void *inp, const void *dout, size_t n);
  void (*residual_forward)(void *ctx, void *out, const void *a, const void *b, size_t n);
  /* crossentropy_fused with 16-bit logits and dlogits (losses fp32, from the widened logits);
   * dlogits may be logits (in place) or NULL (the loss only) */
  void (*crossentropy_fused)(void *ctx, float *losses, void *dlogits, const void *logits,
                             const int32_t *targets, float dloss, int N, int V);
  /* ABI 1.9 (present when struct_size covers them; NULL: the host uses attention_forward /
   * attention_backward above): the lse attention of loom_device_v1 on 16-bit qkv, out, dout and
   * dqkv; lse stays fp32 */
  void (*attention_forward_lse)(void *ctx, void *out, float *lse, const void *qkv, int B, int T,
                                int NH, int HS);
  void (*attention_backward_lse)(void *ctx, void *dqkv, const void *dout, const void *qkv,
                                 const void *out, const float *lse, int B, int T, int NH,
                                 int HS);
} loom_device_acts16_v1;

#ifdef __cplusplus
}
#endif
#endif /* LOOM_DEVICE_V1_H */
