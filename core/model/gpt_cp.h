/* Context parallel (ring attention over the cp ranks; Liu et al. 2023, Megatron-LM's context
 * parallel): each of the cp ranks of a group holds T/cp tokens of every sequence of the
 * micro-batch, as two chunks of the load-balanced causal split (T cut into 2*cp chunks; rank
 * r holds chunks r and 2*cp-1-r, so every rank does the same share of the causal attention's
 * work). Everything but attention and the position embedding is per token and runs unchanged
 * on the local (B, T/cp) tokens; attention passes K/V around the ring of cp ranks
 * (gpt_hooks.cp_ring) and merges the blocks with the online softmax (the device's ABI 1.13
 * attention_block_* kernels); backward runs the ring again with dK/dV travelling back to
 * their owners. The saved state is flash attention's (out, lse): gpt_config.attn_lse. */
#ifndef LOOM_CORE_GPT_CP_H
#define LOOM_CORE_GPT_CP_H

#include <stddef.h>
#include <stdint.h>

#include "gpt.h"

/* Refuse what context parallel does not run (with err naming the values): a device without
 * attention_block_forward / _backward (ABI 1.13), a precision other than fp32 (the block
 * kernels are fp32), vocabulary parallel, pipeline stages, without attn_lse. LOOM_OK when
 * cfg->cp_size <= 1. */
int gpt_cp_check(const gpt_config *cfg, const loom_dev *dev, char *err, size_t errlen);

/* dst (B, T/cp) = this rank's tokens of src (B, T): chunks rank and 2*cp-1-rank of each row,
 * T a multiple of 2*cp (host memory, int32 token ids or targets). */
void gpt_cp_take(int32_t *dst, const int32_t *src, int B, int T, int cp, int rank);

/* The embedding on the local tokens: out (B,T,C) = wte[inp] + wpe[global position] with T the
 * local length (the rank's wpe rows gathered first); backward adds into dwte and the rank's
 * rows of dwpe. LOOM_NOMEM when the scratch cannot be allocated. */
int gpt_cp_embed_forward(gpt_model *m, float *out, const int32_t *inp, const float *wte,
                         const float *wpe, int B, int T, int C);
int gpt_cp_embed_backward(gpt_model *m, float *dwte, float *dwpe, const float *dout,
                          const int32_t *inp, int B, int T, int C);

/* Ring attention of the local qkv (B,T,3*NH*HS) (T local): out (B,T,NH*HS) and lse (B,NH,T)
 * as attention_forward_lse's over the whole sequence. A failing ring hook's code is returned. */
int gpt_cp_attention_forward(gpt_model *m, const gpt_hooks *h, float *out, float *lse,
                             const float *qkv, int B, int T, int NH, int HS);
/* dqkv += the gradient, from dout and the forward's qkv, out and lse. */
int gpt_cp_attention_backward(gpt_model *m, const gpt_hooks *h, float *dqkv, const float *dout,
                              const float *qkv, const float *out, const float *lse, int B,
                              int T, int NH, int HS);

/* Bytes of the ring's buffers (LOOM_MEM_COMM) at local (B, T), NH*HS = C/tp attention channels:
 * K/V in flight, two (B,T,2C/tp) fp32 buffers, the same two for dK/dV, and the rank's wpe rows
 * and their gradient (2 * T*C), 64-byte aligned pieces; 0 without context parallel. */
size_t gpt_cp_scratch_bytes(const gpt_config *cfg, int B, int T);

/* Release the ring's buffers (gpt_free). */
void gpt_cp_free(gpt_model *m);

#endif /* LOOM_CORE_GPT_CP_H */
